"""The long tables of one run (AnalysisRun.tables): the report's tables for the analyses the report holds, and those
of the one-input analyses, of queries and keys and of gradient importance; a `model` column first, layers and heads
numbered from 1 as on the pages."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from typing import Any

import pandas as pd

from attnlib.analyses.ablate import InputAblation
from attnlib.analyses.attention import AttentionMaps
from attnlib.analyses.base import AnalysisRun, Options
from attnlib.analyses.gradient import GradientImportance
from attnlib.analyses.hta import TokenAttribution
from attnlib.analyses.norms import InputNorms
from attnlib.analyses.qk import QKResult
from attnlib.analyses.retrieval import RetrievalResult
from attnlib.analyses.roles import SCORE_KEYS, RolesResult
from attnlib.present.report import REPORT_PARTS, PartResult, ReportOptions
from attnlib.present.tables import cell_frame, head_frame, layer_frame

LAYER_MAPS = ("layer_norm", "residual_ln", "attention_rollout", "residual_ln_rollout")  # norms' [layers, n, n] maps


def report_options(options: Options) -> ReportOptions:
    """The report's options that a run's options set (min_count, all_punct, ...), the rest at the report's defaults."""
    return ReportOptions(
        **{f.name: getattr(options, f.name) for f in fields(ReportOptions) if hasattr(options, f.name)}
    )


def part_result(run: AnalysisRun) -> PartResult | None:
    """The run as the report shows its part (tables, values, notes), or None for an analysis the report lacks."""
    part = next((p for p in REPORT_PARTS if p.name == run.analysis.name), None)
    return None if part is None else part.show(run.model, run.result, report_options(run.options))


def attention_tables(model: str, maps: AttentionMaps) -> dict[str, pd.DataFrame]:
    """Every weight kept: layer, head, query and key (an encoder-decoder's cross part: source tokens as keys)."""
    chosen = maps.selection or {}
    first_row = chosen["rows"][0] if "rows" in chosen else 0
    keys = (maps.encoder_decoder or {}).get("key_tokens") or maps.tokens
    frame = cell_frame(model, {"weight": maps.attentions}, maps.tokens, keys, layers=chosen.get("layers"),
                       heads=chosen.get("heads"), first_row=first_row)  # fmt: skip
    return {"Attention weights": frame}


def hta_tables(model: str, found: TokenAttribution) -> dict[str, pd.DataFrame]:
    """Per head, each query's attribution to the input tokens and to the previous layer; per layer, the output's."""
    per_head = {"input": found.input, "previous": found.previous}
    tables = {"Attribution per head": cell_frame(model, per_head, found.tokens, found.tokens, ("query", "token"))}
    if found.output is not None:
        tables["Layer-output attribution"] = cell_frame(
            model, {"output": found.output}, found.tokens, found.tokens, ("query", "token")
        )
    return tables


def norms_tables(model: str, found: InputNorms) -> dict[str, pd.DataFrame]:
    """The weighted norms per head, then the per-layer maps (norms, residual+LayerNorm, both rollouts; cross-attention:
    the norms alone, its keys the source's tokens)."""
    layer_maps = {name: m for name in LAYER_MAPS if (m := getattr(found, name)) is not None}
    keys = found.key_tokens
    return {
        "Value-weighted norms per head": cell_frame(model, {"weighted_norm": found.weighted_norm}, found.tokens, keys),
        "Per layer": cell_frame(model, layer_maps, found.tokens, keys),
    }


def ablate_tables(model: str, found: InputAblation) -> dict[str, pd.DataFrame]:
    """One row: the heads changed (1-based layer-head), the change and its effect under each measure."""
    row = {"model": model, "heads": ",".join(f"{l + 1}-{h + 1}" for l, h in found.heads), "change": found.change,
           "embedding": found.embedding, "similarity": found.similarity, "hidden": found.hidden, "mlm": found.mlm}  # fmt: skip
    return {"Effect of the change": pd.DataFrame([row])}


def qk_tables(model: str, found: QKResult) -> dict[str, pd.DataFrame]:
    """Every query and key of the asked head's picture: where it is, its token and class, and its coordinates."""
    asked = found.asked
    frame = pd.DataFrame({**found.point_table(), "x": asked.x, "y": asked.y})
    for column, value in reversed([("model", model), ("layer", found.layer + 1), ("head", found.head + 1),
                                   ("method", found.method)]):  # fmt: skip
        frame.insert(0, column, value)
    return {"Queries and keys": frame}


def gradient_tables(model: str, found: GradientImportance) -> dict[str, pd.DataFrame]:
    """Mean |dLoss/dA| to [SEP] and to all keys, per layer (mean over heads) and per head."""
    return {"Per layer (mean over heads)": layer_frame(model, found.layers),
            "Per head": head_frame(model, {"sep": found.sep, "all": found.all})}  # fmt: skip


def roles_tables(model: str, found: RolesResult) -> dict[str, pd.DataFrame]:
    """Every head's §20 scores and the roles it holds at the thresholds; with checkpoints, each checkpoint's scores
    and in-context gain by step."""
    held = found.roles
    frame = head_frame(model, {key: s for key in SCORE_KEYS if (s := found.scores.of(key)) is not None})
    frame["role"] = [
        ",".join(role for role, heads in held.items() if (layer - 1, head - 1) in heads)
        for layer, head in zip(frame["layer"], frame["head"])
    ]
    tables = {"Head roles": frame}
    if found.checkpoints:
        frames = []
        for point in found.checkpoints:
            scores = {key: s for key in SCORE_KEYS if (s := point.scores.of(key)) is not None}
            one = head_frame(model, scores)
            one.insert(1, "checkpoint", point.path)
            one.insert(2, "step", point.step)
            one["in_context_gain"] = point.in_context_gain
            frames.append(one)
        tables["Checkpoints"] = pd.concat(frames, ignore_index=True)
    return tables


def retrieval_tables(model: str, found: RetrievalResult) -> dict[str, pd.DataFrame]:
    """Each head's retrieval score and whether it is a retrieval head; each test's length, depth and needle."""
    per_head = head_frame(model, {"retrieval": found.scores, "retrieval_head": found.scores > found.threshold})
    tests = pd.DataFrame(
        [{"model": model, "length": t.length, "depth": t.depth, "n_tokens": len(t.input_ids),
          "needle_start": t.needle_span[0], "needle_end": t.needle_span[1], "n_decoded": len(t.decoded_ids),
          "forced": t.forced} for t in found.tests],
        columns=["model", "length", "depth", "n_tokens", "needle_start", "needle_end", "n_decoded", "forced"],
    )  # fmt: skip
    return {"Per head": per_head, "Tests": tests}


TABLES: dict[str, Callable[[str, Any], dict[str, pd.DataFrame]]] = {
    "attention": attention_tables,
    "hta": hta_tables,
    "norms": norms_tables,
    "ablate": ablate_tables,
    "qk": qk_tables,
    "gradient": gradient_tables,
    "retrieval": retrieval_tables,
    "roles": roles_tables,
}


def run_tables(run: AnalysisRun) -> dict[str, pd.DataFrame]:
    """The run's long tables by title."""
    shown = part_result(run)
    return shown.tables if shown is not None else TABLES[run.analysis.name](run.model, run.result)
