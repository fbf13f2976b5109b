"""The library's version (`attnlib.__version__`), which result files and indexes record: here, below every module
that names it, so that none imports the package's `__init__` for it."""

__version__ = "0.1.0"
