"""Fixtures the test modules of app/ share (the suite's own are in tests/conftest.py)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import ROOT
from support.bad_input import _live


@pytest.fixture
def app():
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()


@pytest.fixture
def live_app():
    """The app opened on the Live page, with no exception."""
    at = _live()
    assert not at.exception
    return at
