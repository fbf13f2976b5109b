"""What several pages share: `widgets` (tables, figures, downloads, progress) and `sources` (model, inputs, corpus,
results and the page state in the URL). What one page alone uses sits beside it in app_pages/<page>/."""
