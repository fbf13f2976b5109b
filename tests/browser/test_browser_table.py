"""Real-browser test of the tables (ui/data_table): drawn as plain HTML without Streamlit's data grid, sorted by a
click on a column's name, numbers as numbers, the other way on a second click."""

from __future__ import annotations

from support.browser import IDLE, browser_page

TABLE = ".attn-table table"
COLUMN = """([table, name]) => {
  const t = document.querySelectorAll('.attn-table table')[table];
  const c = [...t.tHead.rows[0].cells].findIndex((th) => th.textContent.replace(/ [▲▼]$/, '') === name);
  return [...t.tBodies[0].rows].map((r) => r.cells[c].textContent);
}"""


def test_dependency_table_sorts_by_a_click_on_a_column(streamlit_server, browser, screenshot_dir):
    requests = []
    with browser_page(browser, screenshot_dir / "failed-table-sort.png") as page:
        page.on("request", lambda r: requests.append(r.url))
        page.goto(f"{streamlit_server}/dependency-heads", wait_until="domcontentloaded")
        page.locator(TABLE).first.wait_for(timeout=180_000)
        page.wait_for_function(IDLE, timeout=180_000)
        counts = [int(c) for c in page.evaluate(COLUMN, [0, "count"])]
        assert len(counts) > 10 and counts == sorted(counts, reverse=True)  # as sent: by frequency
        relations = page.evaluate(COLUMN, [0, "relation"])

        header = page.locator(".attn-table th").filter(has_text="count").first
        header.get_by_role("button").click()
        assert header.get_attribute("aria-sort") == "ascending"
        assert [int(c) for c in page.evaluate(COLUMN, [0, "count"])] == sorted(counts)  # 98 before 1001, not after
        header.get_by_role("button").click()
        assert header.get_attribute("aria-sort") == "descending"
        assert [int(c) for c in page.evaluate(COLUMN, [0, "count"])] == counts

        page.locator(".attn-table th").filter(has_text="relation").first.get_by_role("button").click()
        assert page.evaluate(COLUMN, [0, "relation"]) == sorted(relations, key=str.lower)
        page.locator(TABLE).first.scroll_into_view_if_needed()
        page.screenshot(path=str(screenshot_dir / "table-sorted.png"))
        assert page.locator("[data-testid='stDataFrame']").count() == 0
    assert not any("/DataFrame." in url for url in requests)  # Streamlit's data grid chunk, never loaded
