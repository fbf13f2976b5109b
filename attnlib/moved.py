"""Import paths of attnlib 0.1's flat layout, kept working for one release: `attnlib.special` is `attnlib.stats.special`.

An old path imports the module at its new home (the same module object, so patches and `isinstance` agree) and warns
once with a DeprecationWarning that names the new path.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from types import ModuleType

MOVED = {
    "ablate": "analyses.importance",
    "analyses.ablate": "analyses.importance",
    "ablation": "stats.importance",
    "aggregation": "analyses.aggregation",
    "analysis": "analyses.base",
    "attention": "analyses.attention",
    "attribution": "stats.hta",
    "blockwise": "core.blockwise",
    "cli_options": "cli.options",
    "commands": "cli.commands",
    "comparison": "present.comparison",
    "corpus": "core.corpus",
    "deps": "analyses.deps",
    "engine": "core.batches",
    "engines": "core.engines",
    "errors": "core.errors",
    "export": "present.export",
    "families": "core.families",
    "gradient_importance": "stats.gradient",
    "head_distances": "stats.head_distances",
    "hta": "analyses.hta",
    "importance": "analyses.importance",
    "input_norms": "analyses.norms",
    "js_kernel": "stats.js_kernel",
    "labels": "present.labels",
    "memory": "core.memory",
    "model": "core.model",
    "norm_batch": "stats.norms",
    "norms": "stats.norms",
    "parsing": "core.parsing",
    "patterns": "stats.patterns",
    "positions": "analyses.positions",
    "precomputed": "results.precomputed",
    "probe": "analyses.probe",
    "qk": "analyses.qk",
    "replay": "core.replay",
    "report": "present.report",
    "reverse_mode": "stats.reverse_mode",
    "runner": "core.runner",
    "seq2seq": "core.seq2seq",
    "shipped": "results.shipped",
    "special": "stats.special",
    "stats.attribution": "stats.hta",
    "stats.batched_norms": "stats.norms",
    "stats.gradients": "stats.gradient",
    "stats.head_ablation": "stats.importance",
    "stats.shares": "stats.special",
    "stats.value_norms": "stats.norms",
    "views.special_tokens": "views.special",
    "special_tokens": "analyses.special",
    "tables": "present.tables",
    "tour": "present.tour",
    "present.roles": "analyses.roles",
    "views.report": "present.report",
    "views.report_page": "present.report",
    "words": "core.words",
}


def new_name(old: str) -> str | None:
    """The new dotted name of an old one (`attnlib.commands.search` -> `attnlib.cli.commands.search`), or None."""
    if not old.startswith("attnlib."):
        return None
    rest = old.removeprefix("attnlib.")
    for key in sorted(MOVED, key=len, reverse=True):
        if rest == key or rest.startswith(key + "."):
            return "attnlib." + MOVED[key] + rest[len(key) :]
    return None


class MovedFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and hands back the module at its new one."""

    def __init__(self) -> None:
        self.specs: dict[str, importlib.machinery.ModuleSpec | None] = {}  # new name -> its own spec

    def find_spec(self, fullname, path, target=None):
        new = new_name(fullname)
        return None if new is None else importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        new = new_name(spec.name)
        assert new is not None
        warnings.warn(f"{spec.name} is now {new}; the old path goes in the next release", DeprecationWarning, 2)
        module = importlib.import_module(new)
        self.specs[new] = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run (the module was imported at its new path); its own spec, which the import system replaced
        with the old path's, is put back."""
        module.__spec__ = self.specs[module.__name__]


def install() -> None:
    """Put the finder after the standard ones (it only answers for names they do not find)."""
    if not any(isinstance(f, MovedFinder) for f in sys.meta_path):
        sys.meta_path.append(MovedFinder())
