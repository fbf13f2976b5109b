"""The import paths of the flat 0.1 layout still work for one release: the same module objects, with a warning.
Where an old module is named like an analysis (`attnlib.special`, `attnlib.attention`, ...), the attribute is the
analysis's function; the import path (`import attnlib.special`, `from attnlib.special import ...`) still works."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest

from attnlib.moved import MOVED, new_name
from attnlib.results.shipped import CHECKOUT


def test_new_name_maps_a_module_and_what_is_below_it():
    assert new_name("attnlib.special") == "attnlib.stats.special"
    assert new_name("attnlib.special_tokens") == "attnlib.analyses.special"
    assert new_name("attnlib.commands.search") == "attnlib.cli.commands.search"
    assert new_name("attnlib.views.report") == new_name("attnlib.views.report_page") == "attnlib.present.report"
    assert new_name("attnlib.views.head_view") is None and new_name("attnlib.core.model") is None
    assert new_name("attnlib.specialist") is None


def test_every_old_path_is_the_module_at_its_new_home():
    """In a fresh process: `import attnlib.<old>` gives the new module itself and warns once; `attnlib.<old>` is that
    module too, except for the names of analyses, which stay their functions whatever was imported."""
    code = f"""
import importlib, json, warnings
warnings.simplefilter("always")
out = {{}}
for old, new in {dict(MOVED)!r}.items():
    with warnings.catch_warnings(record=True) as caught:
        module = importlib.import_module("attnlib." + old)
    same = module is importlib.import_module("attnlib." + new) and module.__spec__.name == "attnlib." + new
    out[old] = [same, [str(w.message) for w in caught
                if issubclass(w.category, DeprecationWarning) and "attnlib." + old + " is now" in str(w.message)]]
import attnlib
import attnlib.special, attnlib.attention
out["attribute"] = attnlib.special_tokens is importlib.import_module("attnlib.analyses.special")
out["functions"] = sorted(n for n in attnlib.ANALYSES if getattr(attnlib, n) is not getattr(attnlib.runs, n))
from attnlib.special_tokens import SpecialOptions
from attnlib.analyses.special import SpecialOptions as New
from attnlib.special import SpecialTokenStats
from attnlib.stats.special import SpecialTokenStats as Shares
out["from import"] = SpecialOptions is New and SpecialTokenStats is Shares
print(json.dumps(out))
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=CHECKOUT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    out = json.loads(done.stdout)
    assert out.pop("attribute") is True and out.pop("from import") is True
    assert out.pop("functions") == []  # every analysis's function survived the imports of old modules of its name
    assert set(out) == set(MOVED)
    for old, (same, warned) in out.items():
        assert same, old
        assert len(warned) == 1 and warned[0].startswith(f"attnlib.{old} is now attnlib.{MOVED[old]}"), (old, warned)


def test_old_modules_named_like_analyses_are_no_attributes():
    import attnlib

    colliding = sorted(set(MOVED) & set(attnlib.ANALYSES))
    assert "special" in colliding and "attention" in colliding
    for name in colliding:
        assert callable(getattr(attnlib, name)) and not isinstance(getattr(attnlib, name), type(attnlib)), name
    assert attnlib.__getattr__("special_tokens") is importlib.import_module("attnlib.analyses.special")
    with pytest.raises(AttributeError):
        attnlib.__getattr__("special")  # not the old module behind the function's back


def test_the_packages_named_like_old_modules_keep_their_names():
    """`attnlib.analyses`, `attnlib.results`, `attnlib.search` and `attnlib.cli` were modules; their names still work."""
    import attnlib.analyses
    import attnlib.cli
    import attnlib.results
    import attnlib.search
    from attnlib.analyses.registry import ANALYSES, analyse
    from attnlib.cli.entry import main
    from attnlib.results.files import read_result_file
    from attnlib.search.by_example import search_corpus

    assert attnlib.analyses.ANALYSES is ANALYSES and attnlib.analyses.analyse is analyse
    assert attnlib.cli.main is main and attnlib.results.read_result_file is read_result_file
    assert attnlib.search.search_corpus is search_corpus
