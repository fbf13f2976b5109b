"""Paths of the data the repository ships: the classroom sets, the UD treebanks and the precomputed results."""

from __future__ import annotations

import hashlib
from functools import lru_cache
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]  # the repository, for a clone or an editable install


def shipped_root(package: Path, checkout: Path) -> Path:
    """Where data/, docs/ and static/ are: the installed package's copy (a wheel's `attnlib/_shipped`, pyproject.toml)
    first, else the checkout. Below it the paths are the repository's (`data/ud/...`, as result files record them)."""
    packaged = package / "_shipped"
    return packaged if (packaged / "data").is_dir() else checkout


ROOT = shipped_root(Path(__file__).resolve().parents[1], CHECKOUT)
DATA = ROOT / "data"
CLASSROOM_SINGLE = DATA / "classroom_single.txt"
CLASSROOM_PAIRS = DATA / "classroom_pairs.tsv"
UD_DIR = DATA / "ud"
EWT_DEV = UD_DIR / "UD_English-EWT" / "en_ewt-ud-dev.conllu"
EWT_TEST = UD_DIR / "UD_English-EWT" / "en_ewt-ud-test.conllu"
PUD_TEST = UD_DIR / "UD_English-PUD" / "en_pud-ud-test.conllu"
PRECOMPUTED = DATA / "precomputed"
INDUCTION_PAIRS = DATA / "pairs" / "induction_pairs.tsv"  # clean/corrupted pairs for tiny-llama-induction (§22)
MODELS = (
    DATA / "models"
)  # models trained in the repository: MODELS/<name>/step<N>/, each a folder from_pretrained loads
# plotly.js with the traces the figures use (scatter, bar, heatmap), served to the app from static/; built by
# scripts/plotly_bundle
PLOTLY_BUNDLE = ROOT / "static" / "plotly-scatter-bar-heatmap-4.1.1.min.js"
TUTORIAL_A = "I went to the store."  # the bertviz tutorial's pair: the Live page's default input
TUTORIAL_B = "At the store, I bought fresh strawberries."

CLASSROOM = {
    "Classroom set: single sentences": CLASSROOM_SINGLE,
    "Classroom set: sentence pairs": CLASSROOM_PAIRS,
}
TREEBANKS = {
    "UD English EWT dev (gold)": EWT_DEV,
    "UD English EWT test (gold)": EWT_TEST,
    "UD English PUD test (gold)": PUD_TEST,
}
CORPUS_SLUGS = {  # the names pages use for the shipped corpora in their URLs (?corpus=ewt-dev)
    "classroom-single": CLASSROOM_SINGLE,
    "classroom-pairs": CLASSROOM_PAIRS,
    "ewt-dev": EWT_DEV,
    "ewt-test": EWT_TEST,
    "pud-test": PUD_TEST,
}
METHODS = ROOT / "docs" / "METHODS.md"


def methods_section(number: int) -> str:
    """The text of one numbered section of docs/METHODS.md, heading included ("" when there is no such section)."""
    text = METHODS.read_text(encoding="utf-8")
    start = text.find(f"\n## {number}. ")
    if start < 0:
        return ""
    end = text.find("\n## ", start + 1)
    return text[start + 1 : end if end >= 0 else len(text)].strip()


def corpus_slug(path: Path) -> str:
    """The URL name of a shipped corpus file."""
    return next(slug for slug, p in CORPUS_SLUGS.items() if p == path)


@lru_cache(maxsize=64)
def _sha1_of_version(path: str, mtime_ns: int, size: int) -> str:
    return hashlib.sha1(Path(path).read_bytes()).hexdigest()


def file_sha1(path: Path) -> str:
    """SHA-1 of a file's bytes, read once per version of the file (pages ask for the shipped corpora on every run)."""
    stat = path.stat()
    return _sha1_of_version(str(path.resolve()), stat.st_mtime_ns, stat.st_size)
