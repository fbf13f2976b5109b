"""One module per command-line command; each defines `register(subparsers)` that sets `handler`."""
