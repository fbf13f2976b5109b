"""Where a page's model, inputs, corpus and results come from, and the page state kept in the URL."""
