"""The notebook's runs, at the package's top: `attnlib.analyse(name, model, ...)`, one function per analysis
(`attnlib.special(model, corpus=...)`, ...) and `attnlib.load(path)` return an `AnalysisRun`, the analyses' run
(attnlib.analyses.registry) that also draws itself: `.figures()`, `.show()` and a notebook cell's value ask the views'
registry for its result's figures (attnlib.views.drawing, imported when asked: the `views` extra). The analyses never
import the views; this module does, once.
Adding an analysis: its function here (and in RUNNERS) and its name in attnlib/__init__.py."""

from __future__ import annotations

import html
import sys
from dataclasses import fields
from pathlib import Path
from typing import Any

from attnlib.analyses import base, registry
from attnlib.analyses.aggregation import AggregationResult
from attnlib.analyses.attention import AttentionMaps
from attnlib.analyses.base import Inputs, R
from attnlib.analyses.compose import CompositionResult
from attnlib.analyses.deps import DepsResult
from attnlib.analyses.gradient import GradientImportance
from attnlib.analyses.hta import TokenAttribution
from attnlib.analyses.importance import HeadImportance, InputAblation
from attnlib.analyses.lens import LensResult
from attnlib.analyses.norms import InputNorms
from attnlib.analyses.patch import PatchResult
from attnlib.analyses.positions import PositionsResult
from attnlib.analyses.probe import ProbeResult
from attnlib.analyses.qk import QKResult
from attnlib.analyses.retrieval import RetrievalResult
from attnlib.analyses.roles import RolesResult
from attnlib.analyses.routes import RoutesResult
from attnlib.analyses.special import SpecialTokens
from attnlib.core.model import DEFAULT_MODEL, LoadedModel


class AnalysisRun(base.AnalysisRun[R]):
    """One analysis run as a notebook has it: its result, the model's facts, its options, what it read and how it ran,
    with the attnlib version and the time it was made (attnlib.analyses.base.AnalysisRun), and its figures.

    `.show()` draws its figures (`.figures()` returns them), `.to_pandas()` gives its main long table (`.tables()` all
    of them), `.to_json()` is what `attnlib <command> --json` prints and `.save(path)` writes the `--out` result file
    that the app's "Load a result file" opens; `attnlib.load(path)` reads one back."""

    @classmethod
    def of(cls, run: base.AnalysisRun[R]) -> AnalysisRun[R]:
        """The analyses' run as the notebook's (the same fields)."""
        return cls(**{f.name: getattr(run, f.name) for f in fields(run)})

    def figures(self) -> list:
        """Its figures (attnlib.views: needs the `views` extra), drawn as the app draws them, each showing itself in a
        notebook."""
        from attnlib.views.drawing import figures_of

        return figures_of(self.result, self.model)

    def _repr_html_(self) -> str | None:
        """In a notebook, a run left as a cell's value draws its figures (its tables where it has none), under a
        line that says what it is; None without the `views` extra (the notebook prints its repr)."""
        try:
            figures = self.figures()
        except ImportError:
            return None
        drawn = [f._repr_html_() for f in figures] or [t.to_html(index=False) for t in self.tables().values()]
        return f"<p>{html.escape(repr(self))}</p>" + "".join(drawn)

    def show(self) -> list | None:
        """In a notebook, draw its figures (each shows itself) and return None, so that the cell prints nothing under
        them (`figures()` returns them); outside a notebook, return `figures()`."""
        figures = self.figures()
        if _notebook_shell() is None:
            return figures
        from IPython.display import display

        for figure in figures:
            display(figure)
        return None


def _notebook_shell() -> Any:
    """The running IPython shell, or None outside one."""
    ipython = sys.modules.get("IPython")
    return None if ipython is None else ipython.get_ipython()


def analyse(name: str, model: str | LoadedModel = DEFAULT_MODEL, **keywords: Any) -> AnalysisRun:
    """Run one analysis and return the run (its `result`, the model's facts, options and provenance, its figures):
    the keywords are attnlib.analyses.registry.analyse's, what it reads (`text=` and `pair=`, `corpus=`, `conllu=`,
    `train=` and `test=`: a file's path or the inputs themselves), `limit=`, `batch_size=`, `progress=`, `engine=`,
    `device=`, ..., and the analysis's options.

    >>> lm = attnlib.load_model()
    >>> run = attnlib.analyse("special", lm, corpus="data/classroom_pairs.tsv", head_map=True)
    >>> run.result.special.layers["sep"], run.to_json(), run.to_pandas(), run.show(), run.save("special.json")

    Unknown options, bad values (OptionError) and inputs the analysis does not read (CorpusError) raise clear errors;
    `progress(done, total)` is called as inputs are done."""
    return AnalysisRun.of(registry.analyse(name, model, **keywords))


def load(path: str | Path) -> AnalysisRun:
    """The run a result file holds (`attnlib <command> ... --out PATH`, `AnalysisRun.save`); ResultFileError when the
    file is not one, or is malformed."""
    return AnalysisRun.of(registry.load(path))


# One function per analysis: `attnlib.special(model, corpus=...)` is `attnlib.analyse("special", model, corpus=...)`.
# The keywords are analyse's (limit=, batch_size=, engine=, device=, progress=, ...) and the analysis's options (the
# command's flags with underscores: head_map=True for --head-map); `attnlib <command> --help` lists them.


def attention(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
              **keywords: Any) -> AnalysisRun[AttentionMaps]:  # fmt: skip
    """The attention maps of one sentence or pair (`attnlib attention`)."""
    return analyse("attention", model, text=text, pair=pair, **keywords)


def hta(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
        **keywords: Any) -> AnalysisRun[TokenAttribution]:  # fmt: skip
    """Hidden Token Attribution per head of one sentence or pair (`attnlib hta`, METHODS §9, §13)."""
    return analyse("hta", model, text=text, pair=pair, **keywords)


def norms(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
          **keywords: Any) -> AnalysisRun[InputNorms]:  # fmt: skip
    """Value-weighted norms, residual+LayerNorm norms and rollouts of one input (`attnlib norms`, METHODS §11-13)."""
    return analyse("norms", model, text=text, pair=pair, **keywords)


def ablate(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, pair: str | None = None,
           **keywords: Any) -> AnalysisRun[InputAblation]:  # fmt: skip
    """One input with some heads switched off, e.g. heads="1-2,3-0" (`attnlib ablate`, METHODS §15)."""
    return analyse("ablate", model, text=text, pair=pair, **keywords)


def special(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
            **keywords: Any) -> AnalysisRun[SpecialTokens]:  # fmt: skip
    """Attention to [CLS], [SEP], punctuation and the rest over a corpus (`attnlib special`, METHODS §1-4, §11)."""
    return analyse("special", model, corpus=corpus, **keywords)


def deps(model: str | LoadedModel = DEFAULT_MODEL, *, conllu: Inputs,
         **keywords: Any) -> AnalysisRun[DepsResult]:  # fmt: skip
    """The best head per dependency relation of a CoNLL-U treebank (`attnlib deps`, METHODS §6, §7, §10)."""
    return analyse("deps", model, conllu=conllu, **keywords)


def positions(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
              **keywords: Any) -> AnalysisRun[PositionsResult]:  # fmt: skip
    """Relative positions of attention and of attribution over a corpus (`attnlib positions`, METHODS §8, §9)."""
    return analyse("positions", model, corpus=corpus, **keywords)


def aggregation(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
                **keywords: Any) -> AnalysisRun[AggregationResult]:  # fmt: skip
    """Attention, norms and rollouts against layer-output attribution (`attnlib aggregation`, METHODS §11-13)."""
    return analyse("aggregation", model, corpus=corpus, **keywords)


def probe(model: str | LoadedModel = DEFAULT_MODEL, *, train: Inputs, test: Inputs,
          **keywords: Any) -> AnalysisRun[ProbeResult]:  # fmt: skip
    """The attention-only dependency probe, trained on one treebank and scored on another (`attnlib probe`)."""
    return analyse("probe", model, train=train, test=test, **keywords)


def importance(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
               **keywords: Any) -> AnalysisRun[HeadImportance]:  # fmt: skip
    """Every head switched off over a corpus, with the no-op test (`attnlib importance`, METHODS §15)."""
    return analyse("importance", model, corpus=corpus, **keywords)


def qk(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs | None = None, conllu: Inputs | None = None,
       **keywords: Any) -> AnalysisRun[QKResult]:  # fmt: skip
    """Queries and keys of one head in one picture (`attnlib qk`, METHODS §17); a CoNLL-U corpus as conllu=."""
    return analyse("qk", model, corpus=corpus if conllu is None else conllu, **keywords)


def gradient(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs,
             **keywords: Any) -> AnalysisRun[GradientImportance]:  # fmt: skip
    """Clark et al.'s gradient importance of attention over a corpus (`attnlib gradient`, METHODS §5); needs a model
    with a trained masked-LM head."""
    return analyse("gradient", model, corpus=corpus, **keywords)


def roles(model: str | LoadedModel = DEFAULT_MODEL, *, text: str | None = None, corpus: Inputs | None = None,
          **keywords: Any) -> AnalysisRun[RolesResult]:  # fmt: skip
    """Head roles (`attnlib roles`, METHODS §20): the repeated-random-tokens probe's induction, duplicate-token and
    previous-token scores, the OV copying score, the in-context gain and the causal check; a text or a corpus adds
    pattern detection; checkpoints=[...] scores each training checkpoint."""
    return analyse("roles", model, text=text, corpus=corpus, **keywords)


def retrieval(model: str | LoadedModel = DEFAULT_MODEL, *, corpus: Inputs | None = None,
              **keywords: Any) -> AnalysisRun[RetrievalResult]:  # fmt: skip
    """Wu et al.'s retrieval score of every head of a decoder: a needle in a haystack (the corpus; default UD EWT
    dev's text) at each length and depth, decoded greedily or forced (`attnlib retrieval`, METHODS §20)."""
    return analyse("retrieval", model, corpus=corpus, **keywords)


def routes(model: str | LoadedModel = DEFAULT_MODEL, *, text: str | None = None, corpus: Inputs | None = None,
           **keywords: Any) -> AnalysisRun[RoutesResult]:  # fmt: skip
    """Information-flow routes (`attnlib routes`, METHODS §21): a text's contribution graph and the route to the
    prediction at `position` (threshold=, mode=), a RouteGraph; a corpus gives each head's route frequency, a
    RouteFrequency (engine="ray" too)."""
    return analyse("routes", model, text=text, corpus=corpus, **keywords)


def lens(model: str | LoadedModel = DEFAULT_MODEL, *, text: str, **keywords: Any) -> AnalysisRun[LensResult]:
    """The logit lens of every node, the direct logit attribution of every component and each head's readout at one
    position of one input, e.g. position=-1, token=" Drive" (`attnlib lens`, METHODS §21); needs an LM head."""
    return analyse("lens", model, text=text, **keywords)


def patch(model: str | LoadedModel = DEFAULT_MODEL, **keywords: Any) -> AnalysisRun[PatchResult]:
    """Activation patching (`attnlib patch`, METHODS §22): clean=, corrupted= (and position=, answer=, wrong=,
    metric=, direction=, grid=, attribution=True), or pairs= a file of pairs (engine="ray" runs it on Ray)."""
    return analyse("patch", model, **keywords)


def compose(model: str | LoadedModel = DEFAULT_MODEL, **keywords: Any) -> AnalysisRun[CompositionResult]:
    """Q-, K- and V-composition between every earlier and later head (`attnlib compose`, METHODS §22)."""
    return analyse("compose", model, **keywords)


RUNNERS = {f.__name__: f for f in (attention, hta, norms, ablate, special, deps, positions, aggregation, probe,
                                   importance, qk, gradient, roles, retrieval, routes, lens, patch, compose)}  # fmt: skip
