"""Fixtures the test modules of app/ share (the suite's own are in tests/conftest.py)."""

from __future__ import annotations

import pytest
from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import ROOT


@pytest.fixture
def app():
    return AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
