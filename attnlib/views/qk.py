"""Queries and keys in one picture (METHODS §17): the grid of every head's PCA thumbnail (a canvas, qk_grid.js; layers
as rows, heads as columns) and one head's large picture (Plotly scatter), points coloured by query/key, position in
the input, token class (§1) or gold UPOS; a query's attention to its input's keys drawn as lines."""

from __future__ import annotations

import base64

import numpy as np
import plotly.graph_objects as go

from attnlib.analyses.labels import CLASS_NAMES
from attnlib.analyses.qk import METHOD_NAMES, QKResult
from attnlib.views.canvas_html import html_page, view_script
from attnlib.views.drawing import draws
from attnlib.views.figure import notebook_figure

COLOURINGS = {
    "kind": "query or key",
    "position": "position in the input",
    "class": "token class (§1)",
    "upos": "gold UPOS (CoNLL-U)",
}
KIND_COLOURS = {"query": "#1b9e77", "key": "#d95f02"}  # AttentionViz-like: queries green, keys orange
KIND_SYMBOLS = {"query": "circle", "key": "diamond"}
PLURAL = {"query": "queries", "key": "keys"}
CLASS_COLOURS = {"cls": "#1f77b4", "sep": "#d62728", "punct": "#9467bd", "other": "#bbbbbb"}
UPOS_TAGS = (
    "NOUN", "PROPN", "PRON", "VERB", "AUX", "ADJ", "ADV", "ADP", "DET", "NUM", "CCONJ", "SCONJ", "PART", "PUNCT",
    "INTJ", "SYM", "X",
)  # fmt: skip
UPOS_COLOURS = (
    "#1f77b4", "#aec7e8", "#17becf", "#d62728", "#ff9896", "#2ca02c", "#98df8a", "#ff7f0e", "#ffbb78", "#8c564b",
    "#9467bd", "#c5b0d5", "#e377c2", "#7f7f7f", "#bcbd22", "#dbdb8d", "#c49c94",
)  # fmt: skip
SPECIAL_COLOUR = "#000000"  # special tokens have no UPOS
POSITION_STEPS = 12  # positions binned for the grid's palette: 0, 1, ..., 10, 11 and more
POSITION_SCALE = "Viridis"
CONTEXT = 4  # tokens either side of a point's token in its hover text
MIN_LINE_WEIGHT = 0.01  # attention lines drawn for keys with at least this weight


def _viridis(steps: int) -> list[str]:
    from plotly.colors import sample_colorscale

    return sample_colorscale(POSITION_SCALE, [i / (steps - 1) for i in range(steps)], colortype="rgb")


def point_groups(result: QKResult, colouring: str) -> tuple[list[str], list[str], np.ndarray]:
    """(group names, their colours, each point's group [2N]) for a categorical colouring, or the grid's binned
    positions for "position"."""
    table = result.point_table()
    if colouring == "kind":
        names, values = list(KIND_COLOURS), table["kind"]
        colours = list(KIND_COLOURS.values())
    elif colouring == "class":
        names, values = list(CLASS_COLOURS), table["class"]
        colours = list(CLASS_COLOURS.values())
    elif colouring == "upos":
        names = ["special", *UPOS_TAGS]
        values = [u if u in UPOS_TAGS else "special" for u in table["upos"]]
        colours = [SPECIAL_COLOUR, *UPOS_COLOURS]
    else:
        steps = POSITION_STEPS
        names = [str(i) for i in range(steps - 1)] + [f"{steps - 1}+"]
        colours = _viridis(steps)
        return names, colours, np.minimum(np.array(table["position"]), steps - 1)
    index = {name: i for i, name in enumerate(names)}
    return names, colours, np.array([index.get(v, 0) for v in values])


def token_context(tokens: list[str], position: int, width: int = CONTEXT) -> str:
    """The token with up to `width` tokens either side, the token in brackets: "… the cat [sat] on the …"."""
    left, right = max(0, position - width), min(len(tokens), position + width + 1)
    words = tokens[left:position] + [f"[{tokens[position]}]"] + tokens[position + 1 : right]
    return ("… " if left else "") + " ".join(words) + (" …" if right < len(tokens) else "")


def hover_texts(result: QKResult) -> list[str]:
    """Each point's hover text: query or key, the token in context, input and position (1-based)."""
    table = result.point_table()
    texts = []
    for kind, i, p in zip(table["kind"], table["input"], table["position"]):
        item = result.inputs[i]
        texts.append(f"{kind} {item.tokens[p]!r}<br>{token_context(item.tokens, p)}<br>input {i + 1}, token {p + 1}")
    return texts


@notebook_figure
def picture_figure(
    result: QKResult,
    layer: int,
    head: int,
    method: str,
    colouring: str = "kind",
    selected: int | None = None,
    weights: np.ndarray | None = None,
    title: str = "",
    height: int = 620,
) -> go.Figure:
    """One head's large picture: every query and key as a point (customdata: its index, queries first), and with a
    selected query (a point index) and its attention row over its input's keys, a line to each key (width and
    darkness by weight, keys under MIN_LINE_WEIGHT left out)."""
    picture = result.picture(layer, head, method)
    if picture is None:
        raise ValueError(f"the result has no {method} picture of head {layer}-{head}.")
    x, y = picture.x.astype(float), picture.y.astype(float)
    table = result.point_table()
    kinds = np.array(table["kind"])
    texts = np.array(hover_texts(result), dtype=object)
    fig = go.Figure()
    if weights is not None and selected is not None:
        _attention_lines(fig, result, x, y, selected, weights)
    if colouring == "position":
        positions = np.array(table["position"])
        for kind in KIND_COLOURS:
            at = np.flatnonzero(kinds == kind)
            fig.add_trace(
                go.Scatter(
                    x=x[at], y=y[at], mode="markers", name=PLURAL[kind], customdata=at, text=texts[at],
                    hovertemplate="%{text}<extra></extra>",
                    marker=dict(
                        size=6, symbol=KIND_SYMBOLS[kind], color=positions[at], colorscale=POSITION_SCALE,
                        cmin=0, cmax=max(int(positions.max()), 1), opacity=0.75,
                        colorbar=dict(title="position") if kind == "query" else None, showscale=kind == "query",
                    ),
                )
            )  # fmt: skip
    else:
        names, colours, groups = point_groups(result, colouring)
        for kind in KIND_COLOURS:
            for g, (name, colour) in enumerate(zip(names, colours)):
                at = np.flatnonzero((kinds == kind) & (groups == g))
                if not len(at):
                    continue
                label = PLURAL[kind] if colouring == "kind" else f"{CLASS_NAMES.get(name, name)} ({PLURAL[kind]})"
                fig.add_trace(
                    go.Scatter(
                        x=x[at], y=y[at], mode="markers", name=label, customdata=at, text=texts[at],
                        hovertemplate="%{text}<extra></extra>", legendgroup=kind if colouring != "kind" else name,
                        marker=dict(size=6, symbol=KIND_SYMBOLS[kind], color=colour, opacity=0.7,
                                    line=dict(width=0)),
                    )
                )  # fmt: skip
    if selected is not None:
        fig.add_trace(
            go.Scatter(
                x=[x[selected]], y=[y[selected]], mode="markers", name="selected query", hoverinfo="skip",
                marker=dict(size=14, symbol="circle-open", color="#000", line=dict(width=2)),
            )
        )  # fmt: skip
    fig.update_layout(
        title=title or f"Head {layer + 1}-{head + 1}, {METHOD_NAMES[method]} of {result.n_points} points",
        height=height,
        xaxis=dict(showticklabels=method == "pca", zeroline=False, title=None),
        yaxis=dict(showticklabels=method == "pca", zeroline=False, scaleanchor="x", scaleratio=1, title=None),
        legend=dict(itemsizing="constant", **({"orientation": "h", "y": 1.06} if colouring == "position" else {})),
        hovermode="closest",
        clickmode="event",
    )
    return fig


def _attention_lines(fig: go.Figure, result: QKResult, x, y, selected: int, weights: np.ndarray) -> None:
    """A line from the selected query to each key of its input, in order of weight (heaviest drawn last)."""
    table = result.point_table()
    n_all = result.n_points // 2
    item = table["input"][selected]
    first_key = n_all + next(i for i in range(n_all) if table["input"][i] == item)
    top = float(weights.max()) if len(weights) else 1.0
    for j in np.argsort(weights):
        w = float(weights[j])
        if w < MIN_LINE_WEIGHT:
            continue
        key = first_key + int(j)
        shade = 0.25 + 0.75 * w / top
        fig.add_trace(
            go.Scatter(
                x=[x[selected], x[key]], y=[y[selected], y[key]], mode="lines", showlegend=False,
                hovertemplate=f"attention {w:.3f} to {table['token'][key]!r}<extra></extra>",
                line=dict(width=0.8 + 7 * w, color=f"rgba(40, 40, 40, {shade:.2f})"),
            )
        )  # fmt: skip


def grid_data(result: QKResult, colouring: str = "kind", picked: tuple[int, int] | None = None) -> dict:
    """What qk_grid.js draws: every head's PCA picture as bytes (x then y, each over its own box), each point's
    colour index and the palette, the heads' fidelity, and the picked head (0-based)."""
    heads = [(l, h) for l in range(result.n_layers) for h in range(result.n_heads)]
    coords, fidelity = [], []
    for l, h in heads:
        picture = result.picture(l, h, "pca")
        if picture is None:
            raise ValueError("the result holds no grid (compute it with all_heads=True, --all-heads).")
        for axis in (picture.x, picture.y):
            lo, hi = float(axis.min()), float(axis.max())
            coords.append(np.rint((axis - lo) / (hi - lo or 1.0) * 255).astype(np.uint8))
        fidelity.append([round(picture.fidelity.top_is_nearest, 3), round(picture.fidelity.random_top_is_nearest, 3)])
    names, colours, groups = point_groups(result, colouring)
    return {
        "layers": result.n_layers,
        "heads": result.n_heads,
        "points": result.n_points,
        "coords": base64.b64encode(np.concatenate(coords).tobytes()).decode(),
        "groups": base64.b64encode(groups.astype(np.uint8).tobytes()).decode(),
        "palette": colours,
        "names": names,
        "fidelity": fidelity,
        "picked": list(picked) if picked is not None else None,
    }


def grid_html(result: QKResult, colouring: str = "kind", title: str = "Queries and keys: every head") -> str:
    """The grid as a self-contained HTML page (a notebook's display, an offline download)."""
    script = view_script("qk_grid.js") + "\ndrawGrid(document.getElementById('grid'), D, null);\n"
    return html_page(title, grid_data(result, colouring), "<div id='grid'></div>", script)


class QKGrid:
    """A notebook's grid of every head's picture: `QKGrid(result)` displays itself."""

    def __init__(self, result: QKResult, colouring: str = "kind") -> None:
        self.result, self.colouring = result, colouring

    def _repr_html_(self) -> str:
        import html

        page = grid_html(self.result, self.colouring)
        return f'<iframe srcdoc="{html.escape(page)}" style="width:100%;height:560px;border:0"></iframe>'


@draws(QKResult)
def qk_figures(result: QKResult, model: str) -> list:
    """The asked head's picture of its queries and keys."""
    title = f"{model}: queries and keys of head {result.layer + 1}-{result.head + 1}"
    return [picture_figure(result, result.layer, result.head, result.method, title=title)]
