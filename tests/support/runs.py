"""A few inputs of each analysis, small enough for the quick tier (test_analysis, test_runs, test_json_keys), those of
the commands that are not one analysis (index, search, report; each --out given by the test), and both as a command
line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from attnlib.analyses.registry import ANALYSES
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV, PUD_TEST

INPUTS: dict[str, dict[str, Any]] = {
    "attention": {"text": "The cat sat.", "pair": "It purred."},
    "norms": {"text": "The cat sat."},
    "hta": {"text": "A cat.", "mode": "estimate", "probes": 1},
    "special": {"corpus": CLASSROOM_PAIRS, "limit": 3, "head_map": True, "norms": True},
    "deps": {"conllu": EWT_DEV, "limit": 3, "min_count": 1},
    "positions": {"corpus": CLASSROOM_SINGLE, "limit": 2, "probes": 1},
    "aggregation": {"corpus": CLASSROOM_SINGLE, "limit": 2, "probes": 1},
    "probe": {"train": PUD_TEST, "test": EWT_DEV, "limit": 3},
    "ablate": {"text": "The cat sat.", "heads": "0-0,1-2"},
    "importance": {"corpus": CLASSROOM_SINGLE, "limit": 2, "knockout": True, "prune": True},
    "qk": {"corpus": CLASSROOM_SINGLE, "limit": 2, "all_heads": True},
    "gradient": {"corpus": CLASSROOM_PAIRS, "limit": 3},
    "roles": {"text": "The cat sat. The cat sat.", "sequences": 2, "repeat_length": 8},
    # a needle, question and haystack short enough for a tiny decoder's 64 positions with the decoded tokens
    "retrieval": {"corpus": CLASSROOM_SINGLE, "limit": 2, "needle": "The cat sat.", "question": "Who sat?",
                  "lengths": "12", "depths": "0,1"},
    "lens": {"text": "The cat sat on the mat.", "top": 3},
    "routes": {"text": "The cat sat.", "position": 2, "mode": "cut"},
    "patch": {"clean": "the cat sat on the mat", "corrupted": "the mat sat on the cat", "metric": "logprob",
              "grid": "residual", "attribution": True},
    "compose": {},
}  # fmt: skip
KINDS = {
    "retrieval": "gpt2",
    "lens": "gpt2",
    "patch": "gpt2",
    "compose": "gpt2",
}  # the tiny model each analysis runs on in the quick tier where not a BERT: a decoder

COMMAND_INPUTS: dict[str, dict[str, Any]] = {
    "index": {"corpus": CLASSROOM_SINGLE, "limit": 2, "layer": 1},
    "search": {"corpus": CLASSROOM_SINGLE, "limit": 2, "layer": 1, "text": "The cat sat.", "token": 1},
    "report": {"corpus": CLASSROOM_SINGLE, "limit": 2, "conllu": EWT_DEV, "train": PUD_TEST, "min_count": 1,
               "epochs": 1, "quiet": True},
}  # fmt: skip


def command_line(name: str, model: str, **more: Any) -> list[str]:
    """The command that runs `name` on its INPUTS or COMMAND_INPUTS (and `more`) with `model`: --flag VALUE, a bare
    --flag for True (and none for False)."""
    argv = [name, "--model", model]
    for key, value in {**{**INPUTS, **COMMAND_INPUTS}[name], **more}.items():
        flag = "--" + key.replace("_", "-")
        if value is True:
            argv.append(flag)
        elif value is not False:
            argv += [flag, str(value)]
    return argv


def small_files(folder: Path) -> dict[str, dict[str, Any]]:
    """command_line's `more` for the commands that read a treebank or write a file: the first 3 sentences of EWT dev
    and the next 3 to train on (short enough for every tiny model), written to folder, and the files to write there."""
    sentences = EWT_DEV.read_text(encoding="utf-8").split("\n\n")
    test, train = folder / "test.conllu", folder / "train.conllu"
    for path, part in ((test, sentences[:3]), (train, sentences[3:6])):
        path.write_text("\n\n".join(part) + "\n\n", encoding="utf-8")
    return {
        "deps": dict(conllu=test),
        "probe": dict(train=train, test=test),
        "report": dict(conllu=test, train=train, out=folder / "report.html"),
        "index": dict(out=folder / "index.npz"),
    }


def split_inputs(name: str) -> tuple[dict, dict, int | None, dict]:
    """INPUTS[name] as run_analysis takes them: the inputs by source, text and pair, the limit, and the options."""
    given = dict(INPUTS[name])
    inputs = {s: given.pop(s) for s in ANALYSES[name].sources}
    text = {k: given.pop(k) for k in ("text", "pair") if k in given}
    return inputs, text, given.pop("limit", None), given
