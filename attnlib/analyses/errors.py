"""The user errors of attnlib: a bad input, option, model or file, said in one line by the command line (exit 2) and
in words by the app, never a traceback."""

from __future__ import annotations

from attnlib.analyses.base import OptionError
from attnlib.core.corpus import CorpusError
from attnlib.core.engines import ScaleError
from attnlib.core.errors import SearchError
from attnlib.core.families import UnsupportedModelError
from attnlib.core.model import ModelLoadError
from attnlib.core.runner import InputError

USER_ERRORS = (
    CorpusError,
    ModelLoadError,
    InputError,
    FileNotFoundError,
    ScaleError,
    OptionError,
    SearchError,
    UnsupportedModelError,
)
