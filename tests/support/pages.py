"""AppTest helpers of single pages that more than one test module uses: the Live page, the Special tokens page's tabs
and tables, the Local vs global page's aggregation section against the command line."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import CLASSROOM_SINGLE, ROOT
from attnlib.stats.norms import MEASURES
from support.apptest import tables
from support.cli import cli_json
from ui.widgets.page_tabs import SPECIAL_TOKENS

PAGES = sorted(
    f"app_pages/{p.parent.name}/page.py" for p in (ROOT / "app_pages").glob("*/page.py") if p.parent.name != "tour"
)  # Tour: by step
MAX_CLICKS = 6  # a page asks for each of its computations once; more would be a loop


def run_computing(at: AppTest, where: str) -> AppTest:
    """Run the page, clicking every "Compute" button it shows until none is left; no run may raise."""
    at.run()
    for _ in range(MAX_CLICKS):
        assert not at.exception, (where, [e.value for e in at.exception])
        asks = [b for b in at.button if str(b.key).startswith("compute:")]
        if not asks:
            return at
        asks[0].click().run()
    raise AssertionError(f"{where}: still asking to compute after {MAX_CLICKS} clicks")


def open_live(**params: str) -> AppTest:
    """The app at its default page (live), opened with the given URL parameters."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    for key, value in params.items():
        at.query_params[key] = value
    at.run()
    assert not at.exception, at.exception
    return at


def rerun(at: AppTest) -> AppTest:
    at.run()
    assert not at.exception, at.exception
    return at


def view_datas(at: AppTest) -> list[dict]:
    """The JSON of every view iframe on the page, in order."""
    out = []
    for frame in at.get("iframe"):
        match = re.search(r"<script type='application/json' id='data'>(.*?)</script>", frame.proto.srcdoc, re.S)
        out.append(json.loads(match.group(1).replace("<\\/", "</")))
    return out


SPECIAL_TABS = tuple(SPECIAL_TOKENS.values())


def table_with(at, column: str, without: str = "layer-head"):
    """The one dataframe on the page that has this column (and not the other: per-head tables have it)."""
    found = [d for d in tables(at) if column in d.columns and without not in d.columns]
    assert len(found) == 1, [list(d.columns) for d in tables(at)]
    return found[0]


def check_weights_vs_norms(table, cli_out: dict, model: str) -> None:
    """The page's weights-vs-norms table (4 decimals) against `special --norms` JSON, layer by layer."""
    rows = table[table["model"] == model].reset_index(drop=True)
    assert len(rows) == len(cli_out["layers"])
    for layer, (shares, norms) in enumerate(zip(cli_out["layers"], cli_out["norm_layers"])):
        for key in ("cls", "sep", "punct", "other"):
            assert rows.loc[layer, f"weight_{key}"] == pytest.approx(shares[key], abs=6e-5)
            assert rows.loc[layer, f"norm_{key}"] == pytest.approx(norms[key], abs=6e-5)
            assert rows.loc[layer, f"value_{key}"] == pytest.approx(norms[f"value_{key}"], abs=6e-5, rel=1e-4)


def page_with(model: str, compare: str = "", limit: int = 3, probes: int = 2, tab: str = "aggregation"):
    """The Local vs global page for a model (and a second one), on the first `limit` classroom inputs."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300)
    at.query_params["model"] = model
    at.query_params["tab"] = tab
    if compare:
        at.query_params["cmp"] = compare
    at.run()
    at.switch_page("app_pages/local_global/page.py").run()
    at.number_input(key="local_global_limit").set_value(limit).run()
    at.number_input(key="lg_k").set_value(probes).run()
    return at


def cli_aggregation(model: str, limit: int = 3, probes: int = 2) -> dict:
    """The aggregation command's JSON on the classroom set."""
    args = ["aggregation", "--corpus", str(CLASSROOM_SINGLE), "--limit", str(limit), "--probes", str(probes)]
    return cli_json(*args, "--model", model, "--json")


def assert_table_equals_cli(table, model: str, data: dict) -> None:
    """The page's long table (1-based layers) against the command's JSON (0-based lists)."""
    rows = table[table["model"] == model]
    for measure in MEASURES:
        part = rows[rows["measure"] == measure].sort_values("layer")
        assert list(part["layer"]) == list(range(1, len(data["pearson"][measure]) + 1))
        for column, key in (("spearman", "spearman"), ("pearson", "pearson"), ("centre of mass", "center_of_mass")):
            np.testing.assert_allclose(part[column], np.array(data[key][measure], float), atol=6e-5)
        np.testing.assert_allclose(part["attribution centre of mass"], data["center_of_mass"]["attribution"], atol=6e-5)


def _deps_page(source: str, **state):
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=300).run()
    at.switch_page("app_pages/deps/page.py")
    defaults = dict(deps_source=source, deps_min_count=5, deps_rule="mean", deps_split="same")
    for key, value in {**defaults, **state}.items():
        at.session_state[key] = value
    return at.run()


def view_data(at: AppTest) -> dict:
    """The JSON embedded in the page's view iframe."""
    frames = at.get("iframe")
    assert len(frames) == 1
    html = frames[0].proto.srcdoc
    match = re.search(r"<script type='application/json' id='data'>(.*?)</script>", html, re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


# the Live page's tutorial pair
TEXT_A, TEXT_B = "I went to the store.", "At the store, I bought fresh strawberries."
