"""Entry point for `python -m attnlib`."""

import sys

from .cli import main

sys.exit(main())
