"""ui/plotly_figure: the figure sent to the page, and the bundle it is drawn with (no browser; see
test_browser_figures for drawing)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs
from streamlit.testing.v1 import AppTest

from attnlib.results.shipped import PLOTLY_BUNDLE as BUNDLE
from attnlib.results.shipped import ROOT
from attnlib.views.margins import fitted_margins
from support.apptest import figures
from ui.widgets.plotly_figure import APP_FONT, app_look, figure_page


def _version(js_head: str) -> str:
    return re.search(r"plotly\.js (?:\([^)]*\) )?v(\d+\.\d+\.\d+)", js_head).group(1)


def test_the_bundle_is_served_and_matches_the_plotly_package():
    assert BUNDLE.parent == Path(ROOT, "static")  # the folder enableStaticServing serves
    assert BUNDLE.is_file() and Path(ROOT, "static", "plotly.js-LICENSE.txt").is_file()
    assert _version(BUNDLE.read_text()[:300]) == _version(get_plotlyjs()[:300])  # figures written for that plotly.js
    config = tomllib.loads(Path(ROOT, ".streamlit", "config.toml").read_text())
    assert config["server"]["enableStaticServing"] is True


def _app() -> None:
    """The script AppTest runs: draw one figure, then say whether the caller's figure was left as it was."""
    import plotly.graph_objects as go
    import streamlit as st

    from ui.widgets.plotly_figure import plotly_figure

    fig = go.Figure(go.Scatter(x=[1, 2, 3], y=[0.5, 0.25, 0.125], name="share"))
    fig.update_layout(title="Share", height=300, font_size=20)
    before = fig.to_json()
    plotly_figure(fig, key="one")
    st.write("untouched" if fig.to_json() == before else "changed")


def test_the_figure_is_sent_with_the_apps_look_and_the_callers_figure_is_left_alone():
    at = AppTest.from_function(_app).run()
    assert not at.exception
    [shown] = figures(at)
    spec = json.loads(shown.spec)
    assert shown.key == "one" and spec["data"][0]["y"] == [0.5, 0.25, 0.125]
    assert spec["layout"]["font"] == {**APP_FONT, "size": 20}  # the app's font, the figure's own size kept
    assert spec["layout"]["template"]["layout"]["plot_bgcolor"] == "white"  # plotly_white, not plotly's blue-grey
    assert spec["layout"]["height"] == 300 and spec["layout"]["title"]["text"] == "Share"
    assert [m.value for m in at.markdown] == ["untouched"]


def test_the_apps_look_is_plotlys_own_update_without_its_cost():
    """app_look builds the dict itself; plotly's update_layout on a copy gives the same figure (subplots, a heatmap,
    a font of the figure's own, the fitted margins)."""
    import numpy as np
    import plotly.io as pio
    from plotly.subplots import make_subplots

    fig = make_subplots(rows=1, cols=2, subplot_titles=["a", "b"])
    fig.add_trace(go.Heatmap(z=np.arange(6.0).reshape(2, 3), colorscale="Blues"), row=1, col=1)
    fig.add_trace(go.Scatter(x=[1, 2], y=[3, 4], name="line"), row=1, col=2)
    fig.update_layout(font_size=18, template="plotly_dark")
    margin = fitted_margins(fig.to_plotly_json())  # attnlib/views/margins.py, tested there
    assert margin["l"] > 40 and margin["r"] > 40  # the y labels; the colour bar (plotly's default margins are 80)
    by_plotly = go.Figure(fig).update_layout(template="plotly_white", font=APP_FONT, margin=margin).to_json()
    assert json.loads(pio.to_json(app_look(fig), validate=False)) == json.loads(by_plotly)
    assert fig.layout.font.family is None and fig.layout.template.layout.paper_bgcolor != "white"  # caller's intact


def test_the_html_download_inlines_the_bundle_and_has_the_apps_look():
    fig = go.Figure(go.Bar(x=["a", "b"], y=[1, 2]))
    page = figure_page(fig)
    assert BUNDLE.read_text() in page and "<script src" not in page  # opens offline
    assert len(page) < len(BUNDLE.read_text()) + 50_000 < len(get_plotlyjs())
    assert '"plot_bgcolor":"white"' in page and APP_FONT["color"] in page
    assert fig.layout.font.color is None  # the figure itself is not changed


def test_the_bundle_holds_every_trace_the_figures_draw():
    """The bundle is plotly.js with a few traces (scripts/plotly_bundle): a figure of another kind would not draw."""
    in_bundle = set(re.findall(r'moduleType:"trace",name:"(\w+)"', BUNDLE.read_text()))
    sources = [
        *Path(ROOT, "attnlib", "views").glob("*.py"),
        *Path(ROOT, "ui").rglob("*.py"),
        *Path(ROOT, "app_pages").rglob("*.py"),
    ]
    drawn = {name.lower() for path in sources for name in re.findall(r"\bgo\.(\w+)\(", path.read_text())} - {"figure"}
    assert drawn == {"scatter", "bar", "heatmap"}  # go.Scatter, go.Bar, go.Heatmap
    assert drawn <= in_bundle
    entry = Path(ROOT, "scripts", "plotly_bundle", "entry.js").read_text()
    registered = set(re.findall(r"require\('plotly\.js/lib/(\w+)'\)", entry)) - {"core"}
    assert in_bundle == {"scatter"} | registered  # core holds scatter; nothing but what entry.js registers
