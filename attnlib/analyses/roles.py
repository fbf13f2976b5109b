"""The `roles` analysis (METHODS §20): every head's previous-token, duplicate-token and induction scores on the
repeated-random-tokens probe, its OV copying score and §18's first_share; a decoder's in-context gain and the causal
check of each role; TransformerLens-compatible pattern detection on a text or a corpus where one is given; the same
scores over a list of training checkpoints.

It reads the model alone (`reads="model"`): the probe is made from the model's vocabulary. The probe as a text the
Live page opens (random words of the vocabulary, then the same words again) and the checkpoints' table are here too."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import torch

from attnlib.analyses.base import Analysis, OptionError, Options, option
from attnlib.core.batches import Progress, accumulate
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import LOCAL, Scale
from attnlib.core.families import UnsupportedModelError
from attnlib.core.hooks import ATTENTION, hooks
from attnlib.core.model import LoadedModel, load_model
from attnlib.core.ov_circuit import copying_reason, ov_weights
from attnlib.core.runner import encode, returned_weights, run_encoded, with_bos
from attnlib.results.files import malformed, numeric_array
from attnlib.stats.importance import MlmHead, heads_off, mlm_head
from attnlib.stats.patterns import PATTERN_HELP as PATTERN_HELP  # the head finder's patterns, for the pages
from attnlib.stats.patterns import PATTERNS as PATTERNS
from attnlib.stats.patterns import PatternAccumulator as PatternAccumulator
from attnlib.stats.patterns import rank_heads as rank_heads
from attnlib.stats.roles import (
    CONTROL_DRAWS,
    COPYING_THRESHOLD,
    DETECT_MEASURES,
    PROBE_ROLES,
    ROLE_THRESHOLD,
    ProbeIds,
    control_draws,
    copying_scores,
    heads_at,
    in_context_gain,
    probe_ids,
    probe_length,
    probe_scores,
    top_heads,
)
from attnlib.stats.roles import detection_scores as detection_scores  # the head finder's role patterns
from attnlib.stats.special import SINK_THRESHOLD

if TYPE_CHECKING:
    import pandas as pd

Head = tuple[int, int]
SCORE_KEYS = (*PROBE_ROLES, "copying", "first_share")  # the JSON's `scores`, each [layers][heads]
CAUSAL_ROLES = (*PROBE_ROLES, "copying")  # the roles the causal check ablates (copying where it is defined)
ROLE_KEYS = (*PROBE_ROLES, "copying", "sink")  # the JSON's `roles`, each role's heads at its threshold
ROLE_NAMES = {  # each score's role in words, as the role map and the tables name it
    "previous": "previous-token",
    "duplicate": "duplicate-token",
    "induction": "induction",
    "copying": "copying",
    "retrieval": "retrieval",
    "first_share": "sink",
}
NO_ROLE = "none"
SCORE_OF_ROLE = {"sink": "first_share"}  # a role named apart from the score it is read from
PROBE_BYTES = 256 * 2**20  # the probe's attention maps (or logits) held at once stay near this
STEP = re.compile(r"step[-_]?(\d+)")


@dataclass(frozen=True)
class RolesOptions(Options):
    """The probe, the causal check, the thresholds, detection's exclusions and the checkpoints."""

    repeat_length: int = option(50, "s: distinct random tokens per repeat (default %(default)s)", minimum=1,
                                compare=True)  # fmt: skip
    repeats: int = option(2, "r: how often the s tokens are repeated (default %(default)s)", minimum=2, compare=True)
    sequences: int = option(10, "R: random sequences of the probe (default %(default)s)", minimum=1, compare=True)
    seed: int = option(0, "seed: sequence r draws with numpy.random.default_rng(seed + r) (default %(default)s)",
                       compare=True)  # fmt: skip
    top_k: int = option(3, "k: heads of each role ablated in the causal check (default %(default)s)", minimum=1)
    threshold: float = option(ROLE_THRESHOLD, "a previous-token, duplicate-token or induction head scores at least "
                              "this (default %(default)s)", view=True)  # fmt: skip
    copying_threshold: float = option(COPYING_THRESHOLD, "a copying head's OV score is at least this (default "
                                      "%(default)s)", view=True)  # fmt: skip
    sink_threshold: float = option(SINK_THRESHOLD, "a sink head's first_share is above this (default %(default)s)",
                                   view=True)  # fmt: skip
    exclude_first: bool = option(False, "detection: set the first key's column of each map to 0 (TransformerLens's "
                                 "exclude_bos)")  # fmt: skip
    exclude_current: bool = option(False, "detection: set each map's diagonal to 0 (TransformerLens's "
                                   "exclude_current_token)")  # fmt: skip
    prepend_bos: bool = option(True, "detection: the tokenizer's BOS token in front of each text where the tokenizer "
                               "does not start it with one, as TransformerLens tokenizes (its prepend_bos)")  # fmt: skip
    checkpoints: tuple[str, ...] = option(
        (), "checkpoints of one model in training order (folders, or Hub ids as ID@REVISION): the scores of each",
        adds=True,
    )  # fmt: skip


def role_thresholds(thresholds: Mapping[str, float]) -> dict[str, float]:
    """A result's thresholds (by role: previous, ..., sink) keyed by the score each is read from (sink: first_share)."""
    return {SCORE_OF_ROLE.get(role, role): value for role, value in thresholds.items()}


def main_roles(scores: Mapping[str, np.ndarray | None], thresholds: Mapping[str, float]) -> np.ndarray:
    """Each head's role for the map's colour [layers, heads]: of the roles whose score reaches its threshold, the one
    it exceeds by the largest factor (score / threshold); "none" where it reaches none."""
    held = {r: s for r, s in scores.items() if s is not None and r in thresholds}
    shape = next(iter(held.values())).shape
    best, ratio = np.full(shape, NO_ROLE, dtype=object), np.zeros(shape)
    for role, values in held.items():
        over = np.nan_to_num(np.asarray(values, float), nan=-np.inf) / thresholds[role]
        chosen = (over >= 1) & (over > ratio)
        best[chosen], ratio[chosen] = role, over[chosen]
    return best


def _grid(values: np.ndarray | None) -> list | None:
    return None if values is None else np.asarray(values, np.float64).tolist()


def _read_grid(value, name: str) -> np.ndarray | None:
    return None if value is None else numeric_array(value, name, 2)


@dataclass
class ProbeRecord:
    """The probe as the JSON carries it: every sequence's ids, s as used, r and the BOS id (None: no BOS)."""

    tokens: list[list[int]]
    repeat_length: int
    repeats: int
    bos: int | None

    @property
    def b(self) -> int:
        """1 where the sequences start with a BOS."""
        return 0 if self.bos is None else 1

    @classmethod
    def of(cls, probe: ProbeIds) -> ProbeRecord:
        return cls(probe.ids.tolist(), probe.repeat_length, probe.repeats, probe.bos)

    def to_json(self) -> dict:
        return {"tokens": self.tokens, "repeat_length": self.repeat_length, "repeats": self.repeats, "bos": self.bos}

    @classmethod
    def from_json(cls, data: dict) -> ProbeRecord:
        bos = data["bos"]
        return cls([[int(t) for t in row] for row in data["tokens"]], int(data["repeat_length"]),
                   int(data["repeats"]), None if bos is None else int(bos))  # fmt: skip


@dataclass
class HeadScores:
    """Every head's scores [layers, heads]: previous, duplicate, induction, copying (None where undefined), first_share."""

    previous: np.ndarray
    duplicate: np.ndarray
    induction: np.ndarray
    copying: np.ndarray | None
    first_share: np.ndarray

    def to_json(self) -> dict:
        return {key: _grid(getattr(self, key)) for key in SCORE_KEYS}

    @classmethod
    def from_json(cls, data: dict) -> HeadScores:
        grids = {key: _read_grid(data[key], key) for key in SCORE_KEYS}
        if any(grids[key] is None for key in SCORE_KEYS if key != "copying"):
            raise ValueError("only the copying score may be null")
        return cls(**grids)  # type: ignore[arg-type]

    def of(self, role: str) -> np.ndarray | None:
        """One score's [layers, heads] (copying: None where undefined)."""
        return getattr(self, role)

    def grids(self) -> dict[str, np.ndarray | None]:
        """Every score by its JSON name, [layers, heads] (copying None where undefined)."""
        return {key: self.of(key) for key in SCORE_KEYS}


@dataclass
class CausalCheck:
    """One role's causal check: its top-k heads, G with them ablated, and the mean G of the random controls."""

    heads: list[Head]
    gain_ablated: float
    control_gain: float
    control_heads: list[list[Head]] = field(default_factory=list)  # the draws (kept in result files only)

    def to_json(self) -> dict:
        return {"heads": [list(h) for h in self.heads], "gain_ablated": self.gain_ablated,
                "control_gain": self.control_gain}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> CausalCheck:
        return cls([(int(l), int(h)) for l, h in data["heads"]], float(data["gain_ablated"]),
                   float(data["control_gain"]))  # fmt: skip


@dataclass
class CheckpointScores:
    """One training checkpoint: its name or path, its step, its probe, every score and its in-context gain."""

    path: str
    step: int
    probe: ProbeRecord
    scores: HeadScores
    in_context_gain: float | None

    def to_json(self) -> dict:
        return {"path": self.path, "step": self.step, "probe": self.probe.to_json(), "scores": self.scores.to_json(),
                "in_context_gain": self.in_context_gain}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> CheckpointScores:
        gain = data["in_context_gain"]
        return cls(str(data["path"]), int(data["step"]), ProbeRecord.from_json(data["probe"]),
                   HeadScores.from_json(data["scores"]), None if gain is None else float(gain))  # fmt: skip


@dataclass
class RolesResult:
    """§20's head roles of one model: the probe, every head's scores, the in-context gain and causal check (decoders
    with an LM head), detection on the inputs given, the roles at the thresholds, and the checkpoints' scores.
    `notes` says in words why a part is missing or shortened (copying, in_context_gain, causal, probe)."""

    probe: ProbeRecord
    scores: HeadScores
    in_context_gain: float | None
    causal: dict[str, CausalCheck] | None
    detect: dict[str, dict[str, np.ndarray]] | None  # {"mul", "abs"} -> {"previous", "duplicate", "induction"}
    thresholds: dict[str, float]
    checkpoints: list[CheckpointScores] | None = None
    notes: dict[str, str] = field(default_factory=dict)
    prepend_bos: bool | None = None  # detection's texts had the BOS put in front (None: no detection)

    @property
    def roles(self) -> dict[str, list[Head]]:
        """Each role's heads at the thresholds (copying: none where undefined; sink: first_share above its own)."""
        found: dict[str, list[Head]] = {}
        for role in ROLE_KEYS:
            if role == "sink":
                share = self.scores.first_share
                found[role] = [(l, h) for l, h in heads_at(share, -np.inf) if share[l, h] > self.thresholds["sink"]]
                continue
            values = self.scores.of(role)
            found[role] = [] if values is None else heads_at(values, self.thresholds[role])
        return found

    @property
    def score_thresholds(self) -> dict[str, float]:
        """Each role's threshold, keyed by its score's name (the sink's is first_share's)."""
        return role_thresholds(self.thresholds)

    def main_roles(self) -> np.ndarray:
        """Each head's role as the role map colours it [layers, heads] (main_roles; "none": it reaches none)."""
        return main_roles(self.scores.grids(), self.score_thresholds)

    def for_options(self, options: RolesOptions) -> RolesResult:
        """The result with the thresholds these options ask for (the scores do not depend on them)."""
        return replace(self, thresholds=thresholds_of(options))

    def to_json(self) -> dict:
        """The `roles` command's JSON (heads 0-based)."""
        return {
            "probe": self.probe.to_json(),
            "scores": self.scores.to_json(),
            "in_context_gain": self.in_context_gain,
            "causal": None if self.causal is None else {role: c.to_json() for role, c in self.causal.items()},
            "detect": None if self.detect is None else _detect_json(self.detect),
            "roles": {role: [list(h) for h in heads] for role, heads in self.roles.items()},
            "thresholds": dict(self.thresholds),
            "checkpoints": None if self.checkpoints is None else [c.to_json() for c in self.checkpoints],
            "notes": dict(self.notes),
            "prepend_bos": self.prepend_bos,
        }

    @classmethod
    def from_json(cls, data: dict) -> RolesResult:
        with malformed("`roles` result"):
            gain, causal, detect, points = data["in_context_gain"], data["causal"], data["detect"], data["checkpoints"]
            thresholds = {str(k): float(v) for k, v in data["thresholds"].items()}
            if set(thresholds) != set(ROLE_KEYS):
                raise ValueError(f"thresholds must name {', '.join(ROLE_KEYS)}")
            return cls(
                probe=ProbeRecord.from_json(data["probe"]),
                scores=HeadScores.from_json(data["scores"]),
                in_context_gain=None if gain is None else float(gain),
                causal=None if causal is None else {str(r): CausalCheck.from_json(c) for r, c in causal.items()},
                detect=None
                if detect is None
                else {
                    str(m): {str(p): numeric_array(v, f"detect.{m}.{p}", 2) for p, v in by.items()}
                    for m, by in detect.items()
                },
                thresholds=thresholds,
                checkpoints=None if points is None else [CheckpointScores.from_json(c) for c in points],
                notes={str(k): str(v) for k, v in data.get("notes", {}).items()},
                prepend_bos=None if data["prepend_bos"] is None else bool(data["prepend_bos"]),
            )

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Every head's §20 scores (copying NaN where undefined) and the role the role map colours it by; with
        checkpoints, each checkpoint's scores and in-context gain by step."""
        import pandas as pd

        from attnlib.analyses.tables import head_frame

        shape = self.scores.induction.shape
        scores = {
            k: np.full(shape, np.nan) if s is None else np.asarray(s, np.float64)
            for k, s in self.scores.grids().items()
        }
        frame = head_frame(model, scores)
        frame["role"] = [ROLE_NAMES.get(r, r) for r in self.main_roles().ravel()]
        tables = {"Head roles": frame}
        if self.checkpoints:
            frames = []
            for point in self.checkpoints:
                scores = {key: s for key in SCORE_KEYS if (s := point.scores.of(key)) is not None}
                one = head_frame(model, scores)
                one.insert(1, "checkpoint", point.path)
                one.insert(2, "step", point.step)
                one["in_context_gain"] = point.in_context_gain
                frames.append(one)
            tables["Checkpoints"] = pd.concat(frames, ignore_index=True)
        return tables


def _detect_json(detect: dict[str, dict[str, np.ndarray]]) -> dict:
    return {measure: {name: _grid(v) for name, v in by.items()} for measure, by in detect.items()}


def thresholds_of(options: RolesOptions) -> dict[str, float]:
    """The thresholds of each role (§20's defaults: 0.4, copying 0.5, sink 0.3)."""
    return {**dict.fromkeys(PROBE_ROLES, options.threshold), "copying": options.copying_threshold,
            "sink": options.sink_threshold}  # fmt: skip


# ------------------------------------------------------------------------------------ the probe on a model


def probe_bos(lm: LoadedModel) -> int | None:
    """The special token the model's tokenizer starts an input with (BOS, a decoder's FIRST; an encoder's [CLS]), or
    None where it starts with an ordinary token."""
    ids = lm.tokenizer("probe")["input_ids"]
    return int(ids[0]) if ids and ids[0] in set(lm.tokenizer.all_special_ids) else None


def ordinary_ids(lm: LoadedModel) -> np.ndarray:
    """Every id of the tokenizer's vocabulary that the model embeds and that is not a special or added token."""
    tokenizer = lm.tokenizer
    size = min(len(tokenizer), lm.encoder.get_input_embeddings().weight.shape[0])
    special = set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})
    return np.array([i for i in range(size) if i not in special], np.int64)


def make_probe(lm: LoadedModel, options: RolesOptions) -> ProbeIds:
    """§20's probe for this model (s shortened where the model's maximum length is shorter); OptionError where the
    model is too short for the repeats, or its vocabulary too small for s distinct tokens."""
    try:
        return probe_ids(
            ordinary_ids(lm),
            sequences=options.sequences,
            repeat_length=options.repeat_length,
            repeats=options.repeats,
            seed=options.seed,
            bos=probe_bos(lm),
            max_length=lm.facts.max_length,
        )
    except ValueError as exc:
        raise OptionError(f"roles: {lm.facts.name}: {exc}") from None


def shortened_note(lm: LoadedModel, options: RolesOptions) -> str | None:
    """A sentence saying that s was shortened to fit the model, or None."""
    bos = probe_bos(lm) is not None
    s = probe_length(options.repeat_length, options.repeats, bos, lm.facts.max_length)
    if s == options.repeat_length:
        return None
    return (f"{lm.facts.name} takes at most {lm.facts.max_length} tokens: the probe repeats s = {s} tokens "
            f"{options.repeats} times (not {options.repeat_length}), as METHODS §20 says.")  # fmt: skip


@dataclass
class Tally:
    """Sequences run through the model so far (the probe's, once per pass, and detection's texts) against those
    planned, told to a progress callback (done, total) after each batch."""

    progress: Progress | None
    total: int
    done: int = 0

    def add(self, n: int) -> None:
        """`n` more sequences run."""
        self.done = min(self.done + n, self.total)
        if self.progress is not None:
            self.progress(self.done, self.total)


def planned_sequences(lm: LoadedModel, probe: ProbeIds, inputs: Sequence[CorpusInput] | None,
                      options: RolesOptions) -> int:  # fmt: skip
    """What compute_roles runs: the probe once, again for each role's ablation and its control draws where there is a
    next-token loss, once per checkpoint, and each text of detection."""
    passes = 1 + len(options.checkpoints)
    if lm.causal_lm is not None:
        roles = [r for r in CAUSAL_ROLES if r != "copying" or copying_reason(lm) is None]
        passes += len(roles) * (1 + CONTROL_DRAWS)
    return passes * len(probe.ids) + len(inputs or ())


def _chunks(lm: LoadedModel, probe: ProbeIds) -> list[slice]:
    """Slices of the probe's sequences whose maps (or logits) fit PROBE_BYTES."""
    R, n = probe.ids.shape
    vocab = lm.encoder.get_input_embeddings().weight.shape[0]
    per_sequence = 4 * n * max(lm.facts.n_layers * lm.facts.n_heads * n, vocab)
    size = max(1, PROBE_BYTES // per_sequence)
    return [slice(start, min(start + size, R)) for start in range(0, R, size)]


def _lm_head(lm: LoadedModel) -> MlmHead | None:
    """The LM head as the model's own forward applies it (checked once, outside any hooks), or None without one."""
    return None if lm.causal_lm is None else mlm_head(lm)


def _forward(lm: LoadedModel, ids: np.ndarray, head: MlmHead | None) -> torch.Tensor | None:
    """One batched pass of the probe's sequences through the stack whose attention is read, and the LM head's logits
    on its output (None without a head)."""
    batch = {"input_ids": torch.as_tensor(ids, device=lm.device)}
    batch["attention_mask"] = torch.ones_like(batch["input_ids"])
    out = lm.encoder(**batch, **({"use_cache": False} if lm.facts.causal else {}))
    return None if head is None else head(out.last_hidden_state)


def token_losses(logits: torch.Tensor, ids: np.ndarray) -> np.ndarray:
    """Next-token cross-entropy at every position but the last, logsumexp(z) - z[target]: [inputs, n - 1] (float64;
    the logits read in place, never copied)."""
    targets = torch.as_tensor(ids[:, 1:], device=logits.device)
    kept = logits[:, :-1]
    picked = kept.gather(-1, targets[..., None])[..., 0]
    return (torch.logsumexp(kept.float(), dim=-1) - picked.float()).double().cpu().numpy()


def probe_pass(
    lm: LoadedModel, probe: ProbeIds, tally: Tally | None = None
) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """The probe's scores from the model's own attention (§20, §18's first_share) and, with an LM head, the per-position
    next-token losses [R, n - 1]; the sequences run in batches (each counted on `tally`)."""
    scores: dict[str, np.ndarray] = {}
    losses = []
    head = _lm_head(lm)
    for part in _chunks(lm, probe):
        ids = probe.ids[part]
        with hooks(lm, ATTENTION) as cache, torch.inference_mode():
            logits = _forward(lm, ids, head)
            maps = torch.stack(list(returned_weights(cache.attn)), dim=1).float().cpu().numpy()  # [B, L, H, n, n]
        if logits is not None:
            losses.append(token_losses(logits, ids))
        weight = len(ids) / len(probe.ids)
        for key, value in probe_scores(maps, probe).items():
            scores[key] = scores.get(key, 0.0) + weight * value
        if tally is not None:
            tally.add(len(ids))
    return scores, (np.concatenate(losses) if losses else None)


def probe_losses(lm: LoadedModel, probe: ProbeIds, tally: Tally | None = None) -> np.ndarray:
    """The per-position next-token losses [R, n - 1] of the probe (no capture), in batches (counted on `tally`)."""
    head = _lm_head(lm)
    found = []
    with torch.inference_mode():
        for part in _chunks(lm, probe):
            logits = _forward(lm, probe.ids[part], head)
            assert logits is not None
            found.append(token_losses(logits, probe.ids[part]))
            if tally is not None:
                tally.add(len(found[-1]))
    return np.concatenate(found)


def ablated_gain(lm: LoadedModel, probe: ProbeIds, heads: Sequence[Head], tally: Tally | None = None) -> float:
    """G with these heads' context vectors zero (§15's zero ablation)."""
    with heads_off(lm, heads) if heads else contextlib.nullcontext():
        return in_context_gain(probe_losses(lm, probe, tally), probe.b, probe.repeat_length)


def causal_check(lm: LoadedModel, probe: ProbeIds, scores: HeadScores, options: RolesOptions,
                 tally: Tally | None = None) -> dict[str, CausalCheck]:  # fmt: skip
    """§20's causal check of each role: G with its top-k heads ablated, and the mean G over 5 seeded draws of k other
    heads (copying where its score is defined)."""
    L, H = lm.facts.n_layers, lm.facts.n_heads
    checks = {}
    for role in CAUSAL_ROLES:
        values = scores.of(role)
        if values is None:
            continue
        top = top_heads(values, options.top_k)
        draws = control_draws(L, H, top, options.top_k, options.seed)
        controls = [ablated_gain(lm, probe, heads, tally) for heads in draws]
        checks[role] = CausalCheck(top, ablated_gain(lm, probe, top, tally), float(np.mean(controls)), draws)
    return checks


def detect_inputs(lm: LoadedModel, inputs: Sequence[CorpusInput], options: RolesOptions, batch_size: int = 8,
                  tally: Tally | None = None) -> dict[str, dict[str, np.ndarray]]:  # fmt: skip
    """§20's pattern detection (TransformerLens's detect_head) on each input, the mean over the inputs."""
    total: dict[str, dict[str, np.ndarray]] = {}
    encoded = [encode(lm, item.text_a, item.text_b) for item in inputs]
    if options.prepend_bos:
        encoded = [with_bos(lm, e) for e in encoded]
    for start in range(0, len(encoded), batch_size):
        batch = encoded[start : start + batch_size]
        for run in run_encoded(lm, batch):
            found = detection_scores(run.attentions, run.input_ids, options.exclude_first, options.exclude_current)
            for measure, by in found.items():
                for name, value in by.items():
                    into = total.setdefault(measure, {})
                    into[name] = into.get(name, 0.0) + value / len(encoded)
        if tally is not None:
            tally.add(len(batch))
    return {measure: total[measure] for measure in DETECT_MEASURES}


def gain_reason(lm: LoadedModel) -> str | None:
    """Why the in-context gain (and the causal check) is not defined for this model, in words; None when it is."""
    if lm.causal_lm is not None:
        return None
    if lm.facts.causal:
        return ("The in-context gain (METHODS §20) is the next-token loss of the decoder's language-model head, and "
                "this checkpoint has no trained one.")  # fmt: skip
    return ("The in-context gain (METHODS §20) is a decoder's next-token loss; this model does not predict the next "
            "token (its attention is bidirectional), so it has none, and no causal check.")  # fmt: skip


def head_scores(
    lm: LoadedModel, probe: ProbeIds, tally: Tally | None = None
) -> tuple[HeadScores, float | None, dict[str, str]]:
    """Every head's scores, G (None without an LM head) and the notes saying why a part is missing."""
    found, losses = probe_pass(lm, probe, tally)
    notes = {}
    copying = None
    reason = copying_reason(lm)
    if reason is None:
        weights = ov_weights(lm)
        copying = copying_scores(weights.circuit, weights.values, weights.outputs)
    else:
        notes["copying"] = reason
    gain = None if losses is None else in_context_gain(losses, probe.b, probe.repeat_length)
    why = gain_reason(lm)
    if why is not None:
        notes["in_context_gain"] = why
    scores = HeadScores(found["previous"], found["duplicate"], found["induction"], copying, found["first_share"])
    return scores, gain, notes


def head_patterns(
    lm: LoadedModel, inputs: Sequence[CorpusInput], progress: Progress | None = None
) -> PatternAccumulator:
    """The head finder's sums over these inputs: `.scores()` [patterns, layers, heads], `.counts` per pattern."""
    found = PatternAccumulator(lm.facts.n_layers, lm.facts.n_heads)
    accumulate(lm, inputs, [found], progress=progress)
    return found


def checkpoint_step(name: str, index: int) -> int:
    """The training step a checkpoint's revision or folder name carries (`step1000`), else its index in the list."""
    found = STEP.findall(name.replace("\\", "/").rsplit("@", 1)[-1]) or STEP.findall(name)
    return int(found[-1]) if found else index


def checkpoint_scores(name: str, index: int, options: RolesOptions, device: str) -> CheckpointScores:
    """One checkpoint loaded and probed: its scores and G."""
    lm = load_model(name, device=device)
    probe = make_probe(lm, options)
    scores, gain, _ = head_scores(lm, probe)
    return CheckpointScores(name, checkpoint_step(name, index), ProbeRecord.of(probe), scores, gain)


def compute_roles(
    lm: LoadedModel,
    inputs: list[CorpusInput] | None,
    options: RolesOptions,
    scale: Scale = LOCAL,
    progress: Progress | None = None,
) -> RolesResult:
    """§20 for one model (and its checkpoints): the probe's scores, copying, G and the causal check, and detection on
    the inputs given. The checkpoints load one after another here, or with scale.engine "ray" one per Ray task (each
    is independent). `progress` is told (done, total) sequences run (planned_sequences) after each batch."""
    probe = make_probe(lm, options)
    tally = Tally(progress, planned_sequences(lm, probe, inputs, options))
    scores, gain, notes = head_scores(lm, probe, tally)
    said = shortened_note(lm, options)
    if said is not None:
        notes["probe"] = said
    causal = None
    if gain is not None:
        try:
            causal = causal_check(lm, probe, scores, options, tally)
        except UnsupportedModelError as exc:  # heads this model's family cannot switch off (weights kept in float16)
            notes["causal"] = f"The causal check (METHODS §20) ablates heads (§15), which this model refuses: {exc}"
    detect = None if not inputs else detect_inputs(lm, inputs, options, tally=tally)
    points = None
    if options.checkpoints:
        arguments = [(name, i, options, scale.device) for i, name in enumerate(options.checkpoints)]
        points = scale.map(checkpoint_scores, arguments)
    tally.add(tally.total)  # the checkpoints (run elsewhere with Ray), and the control draws a small model has fewer of
    bos = None if detect is None else options.prepend_bos
    return RolesResult(ProbeRecord.of(probe), scores, gain, causal, detect, thresholds_of(options), points, notes, bos)


def _note(lm: LoadedModel, _item: CorpusInput, options: RolesOptions) -> str | None:
    try:
        return shortened_note(lm, options)
    except ValueError:
        return None


ROLES: Analysis[RolesOptions, RolesResult] = Analysis(
    name="roles",
    help="head roles (METHODS §20): induction, duplicate-token, previous-token and copying scores from a probe of "
    "repeated random tokens, the in-context gain and a causal check; --text/--corpus add pattern detection",
    options=RolesOptions,
    reads="model",
    result=RolesResult,
    methods=(15, 18, 20),
    compute_model=compute_roles,
    note=_note,
)


# ------------------------------------------------- the probe as a text (the Live page) and the checkpoints' table

LINK_REPEAT = 20  # words in each repeat of the Live page's probe: an induction stripe, and a head view that reads


@dataclass(frozen=True)
class ProbeText:
    """A probe as text: its words, said twice; `exact` when the model's tokenizer reads it as one token per word
    (so an induction head's stripe lies exactly at offset 1 - s)."""

    words: tuple[str, ...]
    text: str
    exact: bool

    @property
    def length(self) -> int:
        """s: the words in one repeat."""
        return len(self.words)


def _ordinary_ids(tokenizer) -> set[int]:
    """The tokenizer's special and added tokens' ids."""
    return set(tokenizer.all_special_ids) | set(getattr(tokenizer, "added_tokens_decoder", {}) or {})


def _single(tokenizer, text: str) -> list[int]:
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def probe_words(tokenizer, length: int = LINK_REPEAT, seed: int = 0) -> tuple[str, ...]:
    """`length` distinct words of letters, each one ordinary token of the vocabulary that the tokenizer reads back as
    one token, with or without a space before it; drawn in a seeded random order."""
    special = _ordinary_ids(tokenizer)
    words: list[str] = []
    for token_id in np.random.default_rng(seed).permutation(len(tokenizer)):
        if int(token_id) in special:
            continue
        word = tokenizer.decode([int(token_id)]).strip()
        if len(word) < 2 or not (word.isascii() and word.isalpha()) or word.lower() in {w.lower() for w in words}:
            continue
        if len(_single(tokenizer, word)) == 1 and _single(tokenizer, " " + word) == [int(token_id)]:
            words.append(word)
            if len(words) == length:
                break
    return tuple(words)


def probe_text(lm: LoadedModel, length: int = LINK_REPEAT, seed: int = 0) -> ProbeText:
    """The probe as a text for the Live page: `length` random words, then the same words again."""
    words = probe_words(lm.tokenizer, length, seed)
    text = " ".join(words + words)
    ids = [i for i in _single(lm.tokenizer, text) if i not in _ordinary_ids(lm.tokenizer)]
    s = len(words)
    exact = len(ids) == 2 * s and ids[1:s] == ids[s + 1 :]
    return ProbeText(words, text, exact)


def checkpoint_table(result: RolesResult) -> pd.DataFrame:
    """One row per checkpoint of a roles result (`checkpoints` of its JSON): its step and path, each score's largest
    value over the heads (`max_<score>`, NaN where undefined) and its in-context gain (NaN without an LM head)."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    for point in result.to_json()["checkpoints"] or []:
        row: dict[str, Any] = {"step": point["step"], "path": point["path"]}
        for name, values in point["scores"].items():
            row[f"max_{name}"] = np.nan if values is None else float(np.nanmax(np.asarray(values, float)))
        gain = point["in_context_gain"]
        rows.append({**row, "in_context_gain": np.nan if gain is None else float(gain)})
    return pd.DataFrame(rows)
