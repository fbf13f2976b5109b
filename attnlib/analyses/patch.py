"""The `patch` analysis (METHODS §22): activation patching of every head (or head and position, or the residual
stream at each layer and position) between a clean and a corrupted input, attribution patching beside it; or, with a
file of pairs, every head's mean score and its standard error, a mergeable sum that runs locally or on Ray."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from attnlib.analyses.base import Analysis, Options, option
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusError, CorpusInput
from attnlib.core.engines import Scale
from attnlib.core.errors import OptionError
from attnlib.core.model import LoadedModel
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.patching import (
    Direction,
    Grid,
    Metric,
    PairError,
    attribution_scores,
    check_available,
    head_position_scores,
    head_scores,
    pearson,
    prepare_pair,
    residual_scores,
)

if TYPE_CHECKING:
    import pandas as pd

PARTS_KEYS = {"encoder": "heads", "decoder": "decoder_heads", "cross": "cross_heads"}  # an encoder-decoder's parts


@dataclass(frozen=True)
class PatchOptions(Options):
    """A clean and corrupted pair (or a file of pairs), the metric and what is patched."""

    clean: str = option("", "the clean input's text")
    corrupted: str = option("", "the corrupted input's text (as many tokens as the clean one)")
    position: int = option(-1, "the position t of the metric, 0-based (negative: from the end; default -1: the last, "
                           "a masked-LM's first mask token)")  # fmt: skip
    answer: str = option("", "w, one token (default: the clean run's top token at t)")
    wrong: str = option("", "w', one token (default: the corrupted run's top token at t)")
    metric: Metric = option("logit-diff", "logit-diff: z(w) - z(w'); logprob: log p(w) (default %(default)s)")
    direction: Direction = option("denoise", "denoise: the clean value into the corrupted run; noise: the corrupted "
                                  "value into the clean run (default %(default)s)")  # fmt: skip
    grid: Grid = option("heads", "heads; heads-positions (every head at one position at a time, with the heads); "
                        "residual (every layer's input at one position, with the heads) (default %(default)s)")  # fmt: skip
    attribution: bool = option(False, "add attribution patching (one backward pass) and its Pearson r with the scores")
    pairs: str = option("", "a file of pairs, one a line: clean TAB corrupted [TAB answer [TAB wrong]]; every "
                        "head's mean score and standard error")  # fmt: skip
    target: str = option("", "an encoder-decoder's target, which its decoder reads (default: the start token alone)")


@dataclass
class PatchPair(CorpusInput):
    """A line of a pair file: clean (text_a), corrupted (text_b) and the optional answer tokens."""

    answer: str = ""
    wrong: str = ""


def read_pairs(path: str | Path) -> list[PatchPair]:
    """The pairs of a file, one a line (clean TAB corrupted [TAB answer [TAB wrong]]; blank lines skipped);
    CorpusError naming the file and line of a malformed one, or an empty file."""
    path = Path(path)
    try:
        text = path.read_bytes().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise CorpusError(f"{path}: not a UTF-8 text file.") from None
    pairs = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if not 2 <= len(fields) <= 4 or not fields[0].strip() or not fields[1].strip():
            raise CorpusError(
                f"{path} line {number}: a pair is a clean text TAB a corrupted text, optionally TAB an answer and TAB "
                f"a wrong answer; this line has {len(fields)} field{'s' * (len(fields) != 1)}"
                f"{' and an empty text' if len(fields) >= 2 else ''}."
            )
        answer, wrong = (f if f.strip() else "" for f in (fields[2:] + ["", ""])[:2])  # a leading space is the token's
        pairs.append(PatchPair(fields[0], fields[1], number, answer, wrong))
    if not pairs:
        raise CorpusError(f"{path}: no pair in the file.")
    return pairs


def _pair_of(
    lm: LoadedModel, clean: str, corrupted: str, answer: str, wrong: str, options: PatchOptions, residual: bool
):
    return prepare_pair(
        lm,
        clean,
        corrupted,
        position=None if options.position == -1 else options.position,
        answer=answer or None,
        wrong=wrong or None,
        metric=options.metric,
        target=options.target or None,
        residual=residual,
        attribution=options.direction if options.attribution else None,
    )


def _tokens(lm: LoadedModel, ids: Sequence[int]) -> dict:
    return {"tokens": lm.tokenizer.convert_ids_to_tokens(list(ids)), "ids": [int(i) for i in ids]}


def _token(lm: LoadedModel, token_id: int | None) -> dict | None:
    return None if token_id is None else {"id": int(token_id), "token": lm.tokenizer.convert_ids_to_tokens(token_id)}


@dataclass
class PatchResult:
    """One pair's patching scores (heads [layers][heads] per part, 0-based; the grids and attribution when asked), or
    a pair file's means and standard errors (`pairs` set)."""

    metric: str
    direction: str
    heads: dict[str, np.ndarray]  # part -> [layers, heads]
    clean: dict | None = None  # {tokens, ids}
    corrupted: dict | None = None
    position: int | None = None
    answer: dict | None = None  # {id, token}
    wrong: dict | None = None
    clean_metric: float | None = None
    corrupted_metric: float | None = None
    heads_positions: dict[str, np.ndarray] | None = None  # part -> [layers, heads, positions]
    residual: np.ndarray | None = None  # [layers, positions]
    attribution: dict[str, np.ndarray] | None = None
    attribution_r: float | None = None
    pairs: int | None = None
    heads_se: dict[str, np.ndarray] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        """The `patch` command's JSON (an encoder-decoder's decoder and cross heads as decoder_heads, cross_heads)."""
        parts = lambda tables, suffix="": {PARTS_KEYS[p] + suffix: t.tolist() for p, t in tables.items()}  # noqa: E731
        if self.pairs is not None:
            return {"pairs": self.pairs, "metric": self.metric, "direction": self.direction, **parts(self.heads),
                    **parts(self.heads_se, "_se")}  # fmt: skip
        data = {
            "clean": self.clean,
            "corrupted": self.corrupted,
            "position": self.position,
            "answer": self.answer,
            "wrong": self.wrong,
            "metric": self.metric,
            "direction": self.direction,
            "clean_metric": self.clean_metric,
            "corrupted_metric": self.corrupted_metric,
            **parts(self.heads),
        }
        if self.heads_positions is not None:
            data |= {k.replace("heads", "heads_positions"): v for k, v in parts(self.heads_positions).items()}
        if self.residual is not None:
            data["residual"] = self.residual.tolist()
        if self.attribution is not None:
            data |= {k.replace("heads", "attribution"): v for k, v in parts(self.attribution).items()}
            data["attribution_r"] = self.attribution_r
        return data

    @classmethod
    def from_json(cls, data: dict) -> PatchResult:
        def tables(key: str, ndim: int) -> dict[str, np.ndarray] | None:
            found = {p: numeric_array(data[k.replace("heads", key)], k, ndim) for p, k in PARTS_KEYS.items()
                     if k.replace("heads", key) in data}  # fmt: skip
            return found or None

        with malformed("`patch` result"):
            se = tables("heads_se", 2) if "pairs" in data else None
            return cls(
                metric=str(data["metric"]),
                direction=str(data["direction"]),
                heads=tables("heads", 2) or {},
                clean=data.get("clean"),
                corrupted=data.get("corrupted"),
                position=data.get("position"),
                answer=data.get("answer"),
                wrong=data.get("wrong"),
                clean_metric=data.get("clean_metric"),
                corrupted_metric=data.get("corrupted_metric"),
                heads_positions=tables("heads_positions", 3),
                residual=None if data.get("residual") is None else numeric_array(data["residual"], "residual", 2),
                attribution=tables("attribution", 2),
                attribution_r=data.get("attribution_r"),
                pairs=data.get("pairs"),
                heads_se={k.removesuffix("_se"): v for k, v in (se or {}).items()},
            )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Every head's score (layers and heads from 1), with its standard error or attribution where there is one;
        the residual grid's cells when computed."""
        import pandas as pd

        rows = []
        for part, table in self.heads.items():
            for (l, h), score in np.ndenumerate(table):
                named = {"part": part} if len(self.heads) > 1 else {}  # an encoder-decoder's parts; else one stack
                row = {"model": model, **named, "layer": l + 1, "head": h + 1, "score": float(score)}
                if part in self.heads_se:
                    row["se"] = float(self.heads_se[part][l, h])
                if self.attribution is not None:
                    row["attribution"] = float(self.attribution[part][l, h])
                rows.append(row)
        found = {"Patching scores of every head": pd.DataFrame(rows)}
        if self.residual is not None:
            cells = [{"model": model, "layer": l + 1, "position": q, "score": float(v)}
                     for (l, q), v in np.ndenumerate(self.residual)]  # fmt: skip
            found["Patching the residual stream"] = pd.DataFrame(cells)
        return found


def patch_pair(lm: LoadedModel, options: PatchOptions) -> PatchResult:
    """One clean and corrupted pair patched as the options say."""
    if not options.clean or not options.corrupted:
        raise OptionError("patch needs --clean and --corrupted (or --pairs FILE).")
    pair = _pair_of(lm, options.clean, options.corrupted, options.answer, options.wrong, options,
                    residual=options.grid == "residual")  # fmt: skip
    n = pair.clean.n
    heads = head_scores(pair, options.direction)
    result = PatchResult(
        metric=options.metric,
        direction=options.direction,
        heads=heads,
        clean=_tokens(lm, pair.clean.input_ids),
        corrupted=_tokens(lm, pair.corrupted.input_ids),
        position=pair.position,
        answer=_token(lm, pair.answer),
        wrong=_token(lm, pair.wrong),
        clean_metric=pair.clean_metric,
        corrupted_metric=pair.corrupted_metric,
    )
    if options.grid == "heads-positions":
        result.heads_positions = head_position_scores(pair, options.direction, n)
    if options.grid == "residual":
        result.residual = residual_scores(pair, options.direction, n)
    if options.attribution:
        attribution = result.attribution = attribution_scores(pair, options.direction)
        result.attribution_r = pearson(np.concatenate([t.ravel() for t in attribution.values()]),
                                       np.concatenate([t.ravel() for t in heads.values()]))  # fmt: skip
    return result


@dataclass
class PatchSums:
    """Every head's score summed over pairs, with its square: mean and standard error, merged across shards."""

    n: int = 0
    sums: dict[str, np.ndarray] = field(default_factory=dict)
    squares: dict[str, np.ndarray] = field(default_factory=dict)

    def add(self, scores: dict[str, np.ndarray]) -> None:
        for part, table in scores.items():
            zero = np.zeros_like(table)
            self.sums[part] = self.sums.get(part, zero) + table
            self.squares[part] = self.squares.get(part, zero) + table**2
        self.n += 1

    def merge(self, other: PatchSums) -> PatchSums:
        merged = PatchSums(self.n + other.n)
        for part in {**self.sums, **other.sums}:
            zero = np.zeros_like(self.sums.get(part, other.sums.get(part)))
            merged.sums[part] = self.sums.get(part, zero) + other.sums.get(part, zero)
            merged.squares[part] = self.squares.get(part, zero) + other.squares.get(part, zero)
        return merged

    def mean(self) -> dict[str, np.ndarray]:
        return {part: s / self.n for part, s in self.sums.items()}

    def standard_error(self) -> dict[str, np.ndarray]:
        """sqrt(sample variance / n); NaN for a single pair."""
        if self.n < 2:
            return {part: np.full_like(s, np.nan) for part, s in self.sums.items()}
        return {part: np.sqrt(np.clip((self.squares[part] - s**2 / self.n) / (self.n - 1), 0, None) / self.n)
                for part, s in self.sums.items()}  # fmt: skip


def pair_accumulators(lm: LoadedModel, options: PatchOptions) -> list:
    return [PatchSums()]


def pair_fill(lm: LoadedModel, inputs: Sequence[CorpusInput], accumulators: list, batch_size: int,
              progress: Progress | None, options: PatchOptions) -> list:  # fmt: skip
    """Patch every head of each pair; a pair that cannot be patched is refused naming its line."""
    sums = accumulators[0]
    for done, item in enumerate(inputs, start=1):
        assert isinstance(item, PatchPair)
        try:
            pair = _pair_of(lm, str(item.text_a), str(item.text_b), item.answer, item.wrong, options, residual=False)
        except PairError as exc:
            raise PairError(f"{options.pairs} line {item.line}: {exc}") from None
        sums.add(head_scores(pair, options.direction))
        if progress is not None:
            progress(done, len(inputs))
    return [sums]


def compute_patch(
    lm: LoadedModel,
    inputs: list[CorpusInput] | None,
    options: PatchOptions,
    scale: Scale,
    progress: Progress | None = None,
) -> PatchResult:
    """One pair, or the pair file's means on the engine `scale` names."""
    check_available(lm)
    if not options.pairs:
        return patch_pair(lm, options)
    if options.grid != "heads" or options.attribution or options.clean or options.corrupted:
        raise OptionError("with --pairs, patch gives every head's mean score alone: leave out --clean, --corrupted, "
                          "--grid and --attribution.")  # fmt: skip
    pairs = read_pairs(options.pairs)
    run = scale.accumulate(lm if scale.engine == "local" else lm.facts.name, pairs,
                           partial(pair_accumulators, options=options), partial(pair_fill, options=options),
                           progress=progress)  # fmt: skip
    sums: PatchSums = run.accumulators[0]
    return PatchResult(options.metric, options.direction, sums.mean(), pairs=sums.n, heads_se=sums.standard_error())


PATCH: Analysis[PatchOptions, PatchResult] = Analysis(
    name="patch",
    help="activation patching between a clean and a corrupted input (heads, heads x positions, the residual "
    "stream; attribution patching), or every head's mean over a file of pairs",
    options=PatchOptions,
    reads="options",
    result=PatchResult,
    methods=(15, 22),
    compute_model=compute_patch,
)
