"""Real-browser test of the figures (ui/plotly_figure): drawn by the app's plotly.js bundle from static/, never by
Streamlit's full plotly.js; the first screen first, the rest without scrolling; hover and full screen work."""

from __future__ import annotations

import pytest

from attnlib.results.shipped import PLOTLY_BUNDLE
from support.browser import FIGURE, FIGURES_DRAWN, IDLE, browser_page, offline_page

BUNDLE = f"/app/static/{PLOTLY_BUNDLE.name}"
# Each figure of the page: [top of its place on the page, ms after navigation when it was drawn or null].
PLACES = """() => [...document.querySelectorAll('.attn-figure')].map((el) => {
  const drawn = el.querySelector('.js-plotly-plot[data-drawn]');
  return [el.getBoundingClientRect().top + window.scrollY, drawn ? Number(drawn.dataset.drawn) : null];
})"""
SIZE = "() => { const r = document.querySelector('.attn-figure .main-svg').getBoundingClientRect(); return [r.width, r.height]; }"


@pytest.mark.browser
@pytest.mark.slow
def test_first_screen_drawn_first_the_rest_later_by_the_apps_bundle(streamlit_server, browser, screenshot_dir):
    responses = []
    with browser_page(browser, screenshot_dir / "failed-figures-order.png", height=1400) as page:
        page.on("response", lambda r: responses.append((r.url, r.status, r.headers.get("content-type", ""))))
        page.goto(f"{streamlit_server}/dependency-heads", wait_until="domcontentloaded")
        page.locator(FIGURE).first.wait_for(timeout=180_000)
        page.wait_for_function(IDLE, timeout=180_000)
        page.wait_for_function(FIGURES_DRAWN, timeout=60_000)  # no scrolling needed
        places = page.evaluate(PLACES)
        height = page.evaluate("window.innerHeight")
        on_screen = [drawn for top, drawn in places if top < height]
        below = [drawn for top, drawn in places if top >= height + 400]  # beyond plotly_figure.js's NEAR
        assert on_screen and below, places  # the heads' heatmap under the table; the example's two figures below
        assert max(on_screen) < min(below), places
    bundle = [(status, kind) for url, status, kind in responses if url.endswith(BUNDLE)]
    assert bundle == [(200, "application/javascript")]
    assert not any("PlotlyChart" in url for url, _, _ in responses)  # Streamlit's own plotly.js chunk, 4.7 MB


@pytest.mark.browser
@pytest.mark.slow
def test_hover_and_full_screen(streamlit_server, browser, screenshot_dir):
    with browser_page(browser, screenshot_dir / "failed-figures-hover.png") as page:
        page.goto(f"{streamlit_server}/tour?step=2", wait_until="domcontentloaded")
        page.wait_for_function(FIGURES_DRAWN, timeout=180_000)
        figure = page.locator(FIGURE).first
        point = figure.locator(".scatterlayer .point").nth(5).bounding_box()
        page.mouse.move(point["x"] + point["width"] / 2, point["y"] + point["height"] / 2)
        hover = figure.locator(".hoverlayer .hovertext")
        hover.first.wait_for(timeout=10_000)
        assert "head 1-6" in hover.first.text_content()  # the sixth dot of layer 1: [CLS] share of head 1-6
        before = page.evaluate(SIZE)
        figure.hover()
        figure.locator(".modebar-btn[data-title='Full screen']").click()
        page.wait_for_function("() => document.fullscreenElement?.className === 'attn-figure'", timeout=10_000)
        page.wait_for_function(f"() => ({SIZE})()[1] === window.innerHeight", timeout=10_000)
        assert page.evaluate(SIZE) == page.evaluate("[window.innerWidth, window.innerHeight]")
        page.evaluate("document.exitFullscreen()")
        page.wait_for_function(f"() => ({SIZE})()[1] === {before[1]}", timeout=10_000)
        assert page.evaluate(SIZE) == before


# Each drawn plot: [the margins it was sent with, the margins plotly laid it out with].
MARGINS = """() => [...document.querySelectorAll('.js-plotly-plot[data-drawn]')].map((plot) => {
  const sent = plot.layout.margin, laid = plot._fullLayout._size;
  return [[sent.l, sent.r, sent.t, sent.b], [laid.l, laid.r, laid.t, laid.b]];
})"""


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.parametrize("path", ["/special-tokens", "/tour?step=3"])
def test_first_screen_figures_are_laid_out_once(path, streamlit_server, browser, screenshot_dir):
    """attnlib/views/margins.py sends margins that already hold the legends, colour bars and axis labels: plotly's
    automargin widens nothing, so it does not draw a figure a second time (the app's font, the Tour's larger one)."""
    with browser_page(browser, screenshot_dir / "failed-figures-margins.png") as page:
        page.goto(streamlit_server + path, wait_until="domcontentloaded")
        page.wait_for_function(f"() => ({MARGINS})().length === 2", timeout=180_000)
        page.wait_for_function(IDLE, timeout=180_000)
        laid_out = page.evaluate(MARGINS)
    assert len(laid_out) == 2  # the two figures of the first screen
    for sent, laid in laid_out:
        assert laid == sent and sent[0] > 30 and sent[1] > 30  # room for the y labels and the legend or colour bar


@pytest.mark.browser
@pytest.mark.slow
def test_a_downloaded_figure_draws_offline(browser, tmp_path):
    import plotly.graph_objects as go

    from ui.widgets.plotly_figure import figure_page

    saved = tmp_path / "figure.html"
    saved.write_text(figure_page(go.Figure(go.Bar(x=["[CLS]", "[SEP]", "other"], y=[0.5, 0.1, 0.4]))))
    with offline_page(browser) as (offline, asked):
        offline.goto(saved.as_uri())
        offline.locator(".js-plotly-plot .barlayer .point").first.wait_for(timeout=30_000)
        assert offline.locator(".js-plotly-plot .barlayer .point").count() == 3
    assert asked == [saved.as_uri()]  # nothing but the page itself
