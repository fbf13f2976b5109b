"""The report as one self-contained HTML page: plotly.js inlined once, every figure and table, definitions, timings."""

from __future__ import annotations

import html
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from attnlib.analyses.deps import ALL, DIRECTIONS
from attnlib.analyses.positions import CORRELATIONS
from attnlib.present.labels import NORM_NAMES, STAT_NAMES
from attnlib.present.report import METHODS_PATH, PartResult, Report, methods_anchor
from attnlib.stats.norms import MEASURES
from attnlib.views.deps import head_accuracy_heatmaps
from attnlib.views.figure import notebook_figure
from attnlib.views.importance import effect_heatmap, no_op_scatter, pruning_figure
from attnlib.views.layers import MODEL_COLOURS, layer_line
from attnlib.views.norms import (
    MEASURE_NAMES,
    agreement_figure,
    measure_center_of_mass_figure,
    value_norm_figure,
    weights_vs_norms_figure,
)
from attnlib.views.plotly_js import plotly_js
from attnlib.views.positions import (
    center_of_mass_chart,
    correlation_heatmaps,
    median_correlation_chart,
    position_histograms,
)
from attnlib.views.probe import relation_bars as probe_relation_bars
from attnlib.views.probe import weight_heatmaps
from attnlib.views.special import entropy_figure, head_map_figure, layer_lines_with_head_dots

SHARES = ("cls", "sep", "punct", "other")
NEARBY = ("prev", "self", "next")
TO_SEP = ("sep_to_sep", "rest_to_sep")
CSS = """
body { font-family: system-ui, sans-serif; margin: 2rem auto; max-width: 1200px; padding: 0 1rem; color: #222; }
table { border-collapse: collapse; font-size: 0.85rem; margin: 0.5rem 0 1rem; }
th, td { border: 1px solid #ccc; padding: 2px 6px; text-align: right; }
td:nth-child(-n+2), th:first-child { text-align: left; }
th { background: #f3f3f3; }
.difference { background: #fff4d6; padding: 0.4rem 0.8rem; border-left: 4px solid #e0a800; }
details { margin: 0.5rem 0; }
pre { white-space: pre-wrap; background: #f8f8f8; padding: 0.5rem; }
"""


# ------------------------------------------------------------------------------------------ figures of two models


@notebook_figure
def model_lines(
    per_model: dict[str, dict[str, np.ndarray]],
    names: dict[str, str],
    title: str,
    y_title: str,
    cols: int = 3,
    shared_y: bool = True,
) -> go.Figure:
    """One panel per statistic, one line per model through its per-layer values ([layers] arrays), one colour each."""
    keys = list(next(iter(per_model.values())))
    rows = -(-len(keys) // cols)
    fig = make_subplots(rows=rows, cols=cols, subplot_titles=[names[k] for k in keys], shared_yaxes=shared_y)
    for m, (model, values) in enumerate(per_model.items()):
        colour = MODEL_COLOURS[m % len(MODEL_COLOURS)]
        for i, key in enumerate(keys):
            trace = layer_line(
                np.asarray(values[key], dtype=float),
                model,
                hover=f"{model}<br>{names[key]}",
                legendgroup=model,
                showlegend=i == 0,
                line=dict(color=colour, width=2),
            )
            fig.add_trace(trace, row=i // cols + 1, col=i % cols + 1)
    fig.update_xaxes(title="layer", tickmode="linear", dtick=1)
    fig.update_yaxes(title=y_title, col=1)
    fig.update_layout(title=title, height=260 * rows + 80, margin=dict(l=10, r=10, t=80, b=10))
    return fig


@notebook_figure
def relation_bars(tables: dict[str, pd.DataFrame], title: str) -> go.Figure:
    """Best-head accuracy per relation for each model (one colour each), with its best-offset baseline as a mark."""
    fig = go.Figure()
    for m, (model, frame) in enumerate(tables.items()):
        colour = MODEL_COLOURS[m % len(MODEL_COLOURS)]
        heads = [
            f"{layer}-{head} {direction}"
            for layer, head, direction in zip(frame["layer"], frame["head"], frame["direction"])
        ]
        fig.add_trace(
            go.Bar(
                x=frame["relation"],
                y=frame["accuracy"],
                name=f"{model}: best head",
                marker_color=colour,
                offsetgroup=str(m),
                customdata=heads,
                hovertemplate="%{x}: %{y:.3f} (head %{customdata})<extra>" + html.escape(model) + "</extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=frame["relation"],
                y=frame["baseline_accuracy"],
                mode="markers",
                name=f"{model}: best offset",
                marker=dict(color=colour, symbol="line-ew-open", size=18, line=dict(width=3)),
                customdata=frame["baseline_offset"],
                hovertemplate="%{x}: %{y:.3f} (offset %{customdata:+d})<extra>" + html.escape(model) + "</extra>",
            )
        )
    fig.update_layout(
        title=title,
        barmode="group",
        height=420,
        yaxis=dict(title="accuracy", range=[0, 1]),
        margin=dict(l=10, r=10, t=60, b=10),
    )
    return fig


# ---------------------------------------------------------------------------------------------- figures per part


def _by_keys(values: dict[str, np.ndarray], keys: Sequence[str]) -> dict[str, np.ndarray]:
    return {k: values[k] for k in keys}


def special_figures(results: Sequence[PartResult]) -> list[go.Figure]:
    """Clark Fig. 2, 4, 6 for one model; for two, per-layer lines of both."""
    if len(results) > 1:
        layers = {r.model: r.result.special.layers for r in results}
        norms = {r.model: r.result.norms.layers for r in results}
        return [
            model_lines(
                {m: _by_keys(v, SHARES + NEARBY) for m, v in layers.items()},
                STAT_NAMES,
                "Share of attention per layer (mean over heads)",
                "share",
                cols=4,
            ),
            model_lines(
                {m: _by_keys(v, TO_SEP + ("entropy", "cls_entropy")) for m, v in layers.items()},
                STAT_NAMES,
                "[SEP] as a no-op, and entropy",
                "value",
                cols=4,
                shared_y=False,
            ),
            model_lines(
                norms,
                NORM_NAMES,
                "Value-weighted norm shares and value norms ||f(x)|| per layer (mean over heads)",
                "value",
                cols=4,
                shared_y=False,
            ),
        ]
    stats, hm, norms = results[0].result.special, results[0].result.head_map, results[0].result.norms
    figures = [
        layer_lines_with_head_dots(_by_keys(stats.heads, SHARES), STAT_NAMES, "Share of attention per layer", "share"),
        layer_lines_with_head_dots(_by_keys(stats.heads, NEARBY), STAT_NAMES, "Attention to nearby tokens", "share"),
        layer_lines_with_head_dots(_by_keys(stats.heads, TO_SEP), STAT_NAMES, "Attention to [SEP]", "mass to [SEP]"),
        entropy_figure(stats.heads["entropy"], stats.heads["cls_entropy"], stats.uniform_entropy),
    ]
    if hm is not None:
        figures.append(head_map_figure(hm.coords, hm.layer, hm.head, hm.labels))
    if norms is None:  # a notebook's run without norms=True (the report always has them)
        return figures
    return figures + [
        weights_vs_norms_figure(stats.heads, norms.heads, "Attention weights vs value-weighted norms per token class"),
        value_norm_figure(norms.heads),
    ]


def aggregation_figures(results: Sequence[PartResult]) -> list[go.Figure]:
    """Agreement of each measure with G_out and centres of mass; for two models, lines of both per measure."""
    if len(results) > 1:
        centres = {**{m: MEASURE_NAMES[m] for m in MEASURES}, "attribution": MEASURE_NAMES["attribution"]}
        return [
            model_lines(
                {r.model: r.result.spearman for r in results},
                {m: MEASURE_NAMES[m] for m in MEASURES},
                "Spearman correlation with layer-output attribution per layer",
                "correlation",
            ),
            model_lines(
                {r.model: r.result.center_of_mass for r in results},
                centres,
                "Centre of mass per layer",
                "offset",
            ),
        ]
    r = results[0].result
    return [
        agreement_figure(r.pearson, r.spearman, "Agreement with layer-output attribution per layer"),
        measure_center_of_mass_figure(r.center_of_mass, "Centre of mass per layer"),
    ]


def probe_figures(results: Sequence[PartResult]) -> list[go.Figure]:
    """Each model's learned head weights; UAS per relation (one model: against best head and offset; two: both UAS)."""
    figures = [weight_heatmaps(r.result.weight_grid(), f"{r.model}: learned weight of every head") for r in results]
    if len(results) == 1:
        return figures + [probe_relation_bars(results[0].result.uas_by_relation)]
    fig = go.Figure()
    for m, r in enumerate(results):
        by_relation = r.result.uas_by_relation
        fig.add_trace(
            go.Bar(
                x=list(by_relation),
                y=[v["uas"] for v in by_relation.values()],
                name=r.model,
                marker_color=MODEL_COLOURS[m % len(MODEL_COLOURS)],
                hovertemplate="%{x}: %{y:.3f}<extra>" + html.escape(r.model) + "</extra>",
            )
        )
    fig.update_layout(
        title="Probe UAS per relation", barmode="group", height=420, yaxis=dict(title="UAS", range=[0, 1])
    )
    return figures + [fig]


def positions_figures(results: Sequence[PartResult]) -> list[go.Figure]:
    """Pascual Fig. 2-6 for one model; for two, centres of mass and median correlations of both."""
    medians = {name: f"median {name.replace('_', ' ')}" for name in CORRELATIONS}
    if len(results) > 1:
        com = {"attention": "attention", "attribution": "input contribution (HTA)"}
        return [
            model_lines(
                {
                    r.model: {
                        "attention": r.result.attention_center_of_mass,
                        "attribution": r.result.attribution_center_of_mass,
                    }
                    for r in results
                },
                com,
                "Centre of mass per layer (mean over heads)",
                "offset",
                cols=2,
            ),
            model_lines(
                {r.model: {n: r.result.median_correlation(n) for n in CORRELATIONS} for r in results},
                medians,
                "Attention vs attribution: median correlation over the heads of each layer",
                "correlation",
                cols=4,
            ),
        ]
    r = results[0].result
    n_layers = r.attention_histograms.shape[0]
    max_offset = max(1, min(10, int(r.offsets.max()) if len(r.offsets) else 1))
    return [
        center_of_mass_chart(r.attention_center_of_mass, r.attribution_center_of_mass, "Centre of mass per layer"),
        position_histograms(
            r.offsets,
            r.attention_histograms.mean(1),
            r.attribution_histograms.mean(1),
            [f"layer {l + 1}" for l in range(n_layers)],
            max_offset=max_offset,
            columns=min(n_layers, 3),
            title="Relative-position histograms per layer (mean over heads)",
        ),
        correlation_heatmaps(
            r.correlation["pearson_previous"],
            r.correlation["spearman_previous"],
            "Attention vs previous-layer contribution (local)",
        ),
        correlation_heatmaps(
            r.correlation["pearson_input"], r.correlation["spearman_input"], "Attention vs input contribution (global)"
        ),
        median_correlation_chart({n: r.median_correlation(n) for n in CORRELATIONS}, "Median over each layer's heads"),
    ]


def deps_figures(results: Sequence[PartResult]) -> list[go.Figure]:
    """Accuracy per relation (bars, baseline marks); for one model also every head's accuracy on all relations."""
    figures = [
        relation_bars(
            {r.model: next(iter(r.tables.values())) for r in results},
            "Best head per relation against the best fixed offset",
        )
    ]
    if len(results) == 1:
        counts, table = results[0].result.counts, results[0].result.table
        best = next(((r.layer, r.head, DIRECTIONS.index(r.direction)) for r in table.rows if r.relation == ALL), None)
        if best is not None:
            figures.append(head_accuracy_heatmaps(counts.accuracy_grid("all"), "all", best))
    return figures


def importance_figures(results: Sequence[PartResult]) -> list[go.Figure]:
    """Per model: the single-head ablation effect per head and the no-op scatter; the pruning curves together."""
    figures = []
    for r in results:
        result = r.result
        effect = result.effect("ablate", "embedding")
        figures.append(effect_heatmap(effect, f"{r.model}: effect of switching each head off", "1 − cos"))
        effects = {c: e for c in ("ablate", "drop", "renormalise") if (e := result.effect(c, "embedding")) is not None}
        test = result.no_op("embedding")
        figures.append(no_op_scatter(result.special_share, effects, test.overall, "embedding", result.causal))
    curves = {r.model: r.result.pruning["embedding"] for r in results if r.result.pruning}
    if curves:
        drawn = {m: (c.removed, c.effect) for m, c in curves.items()}
        figures.append(pruning_figure(drawn, {r.model: r.result.special_share.size for r in results}, "embedding"))
    return figures


PART_FIGURES: dict[str, Callable[[Sequence[PartResult]], list[go.Figure]]] = {
    "importance": importance_figures,
    "special": special_figures,
    "positions": positions_figures,
    "aggregation": aggregation_figures,
    "deps": deps_figures,
    "probe": probe_figures,
}


# ------------------------------------------------------------------------------------------------------ the page


def _table_html(frame: pd.DataFrame) -> str:
    return frame.to_html(index=False, float_format=lambda x: f"{x:.6g}", na_rep="", border=0)


def _key_values(rows: dict[str, Any]) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows.items())
    return f"<table>{cells}</table>"


def _figure_html(fig: go.Figure, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})


def _definitions(report: Report, sections: Sequence[int]) -> str:
    items = []
    for number in sections:
        heading, text = report.methods.get(number, (f"{number}.", ""))
        link = f"{METHODS_PATH}#{methods_anchor(heading)}"
        items.append(
            f"<details><summary><a href='{html.escape(link)}'>{html.escape(heading)}</a></summary>"
            f"<pre>{html.escape(text)}</pre></details>"
        )
    return f"<p>Definitions ({html.escape(METHODS_PATH)} in the attnlib repository):</p>{''.join(items)}"


def _part_section(report: Report, index: int, differences: dict) -> str:
    part = report.parts[index]
    results = report.results[part.name]
    out = [f"<section id='{part.name}'><h2>{html.escape(part.title)}</h2>"]
    for result in results:
        out += [
            f"<p><b>{html.escape(result.model)}</b>: {html.escape(' '.join(result.notes))} ({result.seconds:.1f} s)</p>"
        ]
    difference = differences.get(part.name)
    if difference is not None:
        out.append(f"<p class='difference'>{html.escape(difference.text())}</p>")
    for i, fig in enumerate(PART_FIGURES.get(part.name, lambda _: [])(results)):
        out.append(_figure_html(fig, f"{part.name}-figure-{i}"))
    for title in results[0].tables:
        frame = pd.concat([r.tables[title] for r in results if title in r.tables], ignore_index=True)
        out.append(f"<h3>{html.escape(title)}</h3>")
        body = _table_html(frame)
        out.append(f"<details><summary>{len(frame)} rows</summary>{body}</details>" if len(frame) > 40 else body)
    out.append(_definitions(report, part.methods))
    out.append("</section>")
    return "\n".join(out)


def render_report(report: Report) -> str:
    """The whole page: header with provenance and timings, one section per part; plotly.js inlined once."""
    differences = report.differences()
    title = f"Attention report: {' vs '.join(report.models)}"
    provenance = {
        "model" if len(report.models) == 1 else "models": ", ".join(report.models),
        **{
            f"{source} file": f"{c['name']} ({c['n_inputs']} inputs, {c.get('bytes', '?')} bytes, SHA-1 {c['sha1']})"
            for source, c in report.corpora.items()
        },
        **(
            {
                "statistics of": "; ".join(
                    f"{name}: its encoder's self-attention over the source (an encoder-decoder, METHODS §18)"
                    for name in report.stacks
                )
            }
            if report.stacks
            else {}
        ),
        "options": ", ".join(f"{k}={v}" for k, v in vars(report.options).items()),
        "library": f"attnlib {report.library_version}",
        "created": report.created,
        "total time": f"{report.seconds:.1f} s",
    }
    timing_rows = [{"model": m, "step": "load the model", "seconds": s} for m, s in report.load_seconds.items()]
    for t in report.timings:
        timing_rows.append(
            {
                "model": t.model,
                "step": f"forward pass over the {t.source} file ({t.n_inputs} inputs, shared by {', '.join(t.parts)})",
                "seconds": t.forward_seconds,
            }
        )
    for results in report.results.values():
        timing_rows += [{"model": r.model, "step": f"part: {r.part}", "seconds": r.seconds} for r in results]
    contents = "".join(f"<li><a href='#{p.name}'>{html.escape(p.title)}</a></li>" for p in report.parts)
    sections = "\n".join(_part_section(report, i, differences) for i in range(len(report.parts)))
    layers_note = "Layers and heads are numbered from 1, as in the papers (the command-line JSON counts from 0)."
    return (
        "<!DOCTYPE html>\n<html lang='en'><head><meta charset='utf-8'>"
        f"<title>{html.escape(title)}</title><style>{CSS}</style>"
        f"<script type='text/javascript'>{plotly_js()}</script></head><body>"
        f"<h1>{html.escape(title)}</h1>{_key_values(provenance)}<p>{layers_note}</p>"
        f"<h2>Time each part took</h2>{_table_html(pd.DataFrame(timing_rows))}"
        f"<ul>{contents}</ul>{sections}</body></html>\n"
    )
