"""The app's pages: one folder per page, its script `page.py` and the helpers only it uses."""
