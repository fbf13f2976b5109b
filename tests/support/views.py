"""Reading a canvas view's page: the JSON it embeds, its packed maps decoded independently, nothing loaded from outside."""

from __future__ import annotations

import base64
import json
import re

import numpy as np


def unpack(packed: dict) -> dict[tuple[int, int, int], int]:
    """Independent decoder of pack_sparse: {(map, row, col): byte weight}."""
    raw = base64.b64decode(packed["b64"])
    rows = packed["m"] * packed["rows"]
    counts = np.frombuffer(raw[: 2 * rows], "<u2")
    nnz = int(counts.sum())
    cols = np.frombuffer(raw[2 * rows : 2 * rows + 2 * nnz], "<u2")
    weights = np.frombuffer(raw[2 * rows + 2 * nnz :], np.uint8)
    assert weights.size == nnz == packed["nnz"]
    out, e = {}, 0
    for r, c in enumerate(counts):
        for _ in range(int(c)):
            out[(r // packed["rows"], r % packed["rows"], int(cols[e]))] = int(weights[e])
            e += 1
    return out


def page_data(html: str) -> dict:
    """The JSON a view embeds."""
    match = re.search(r"<script type='application/json' id='data'>(.*?)</script>", html, re.S)
    return json.loads(match.group(1).replace("<\\/", "</"))


def assert_offline(html: str) -> None:
    """Nothing is loaded from outside the document (the embedded data, base64 included, is left out of the search)."""
    code = re.sub(r"<script type='application/json' id='data'>.*?</script>", "", html, flags=re.S)
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", code)
    assert "cdn" not in code.lower() and "require(" not in code and "@import" not in code and "fetch(" not in code
