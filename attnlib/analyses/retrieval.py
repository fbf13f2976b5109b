"""The `retrieval` analysis: Wu et al.'s retrieval score of every head of a decoder (METHODS §20). A needle sentence is
hidden in a haystack (the corpus's text, cut to each context length asked for) at each depth, a question asks for
it, the model decodes greedily (or is fed the needle: forced), and a head scores where its strongest key at each
step is the needle's token just produced."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING

import numpy as np

from attnlib.analyses.base import Analysis, OptionError, Options, option, own_loop, single_result
from attnlib.core.batches import Progress
from attnlib.core.corpus import CorpusError, CorpusInput
from attnlib.core.decoding import check_decoder, greedy_decode
from attnlib.core.model import LoadedModel
from attnlib.results.files import ResultFileError, malformed, numeric_array
from attnlib.results.shipped import EWT_DEV
from attnlib.stats.importance import mlm_head
from attnlib.stats.retrieval import (
    EXTRA_STEPS,
    RETRIEVAL_THRESHOLD,
    RETRIEVED_RECALL,
    CopyCounter,
    NeedleTest,
    needle_test,
    retrieval_heads,
    rouge1_recall,
)

if TYPE_CHECKING:
    import pandas as pd

DEFAULT_NEEDLE = "The best thing to do in San Francisco is eat a sandwich and sit in Dolores Park on a sunny day."
DEFAULT_QUESTION = "What is the best thing to do in San Francisco?"
DEFAULT_DEPTHS = "0,0.25,0.5,0.75,1"
LONGEST_DEFAULT = 2048  # without --lengths: the longest haystack the model takes, at most this many tokens
HAYSTACK = EWT_DEV  # the corpus read when none is given: UD English EWT dev's sentences, one after another
PROMPT = "\nQuestion: {question}\nAnswer:"  # after the haystack: what the model answers by decoding


@dataclass(frozen=True)
class RetrievalOptions(Options):
    """The needle, the question that asks for it, the haystack's lengths and the needle's depths, and teacher forcing."""

    needle: str = option(DEFAULT_NEEDLE, "the sentence hidden in the haystack (default: Wu et al.'s)", compare=True)
    question: str = option(DEFAULT_QUESTION, "the question after the haystack that asks for the needle", compare=True)
    lengths: str = option(
        "",
        "haystack lengths in tokens, e.g. 512,1024 (default: the longest the model takes with the needle, the question "
        f"and the decoded tokens, at most {LONGEST_DEFAULT:,})",
        compare=True,
    )
    depths: str = option(
        DEFAULT_DEPTHS, "fractions of the haystack before the needle (default %(default)s)", compare=True
    )
    forced: bool = option(False, "teacher forcing: feed the needle's tokens as the decoded ones", compare=True)

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.needle.strip():
            raise OptionError("needle must hold some text, not be empty")
        self.length_list()
        self.depth_list()

    def length_list(self) -> tuple[int, ...]:
        """The lengths asked for (empty: the default, the longest the model takes); OptionError when malformed."""
        try:
            lengths = tuple(int(x) for x in self.lengths.split(",") if x.strip())
        except ValueError:
            raise OptionError(f"lengths must be whole numbers separated by commas, not {self.lengths!r}") from None
        if any(x < 1 for x in lengths):
            raise OptionError(f"every length must be at least 1 token, not {self.lengths!r}")
        return lengths

    def depth_list(self) -> tuple[float, ...]:
        """The depths asked for; OptionError unless each is a number from 0 to 1."""
        try:
            depths = tuple(float(x) for x in self.depths.split(",") if x.strip())
        except ValueError:
            raise OptionError(f"depths must be numbers separated by commas, not {self.depths!r}") from None
        if not depths or any(not 0 <= d <= 1 for d in depths):
            raise OptionError(f"depths must be fractions from 0 to 1 (at least one), not {self.depths!r}")
        return depths


@dataclass
class RetrievalTest(NeedleTest):
    """One test as run: its input, the needle's span, the tokens decoded (the needle's own when forced) and, decoded
    greedily, the needle's ROUGE-1 recall in the decoded text (None when forced)."""

    decoded_ids: list[int] = field(default_factory=list)
    forced: bool = False
    recall: float | None = None

    @property
    def counts(self) -> bool:
        """Whether its scores count (§20, as Wu et al.'s code): forced, or the model retrieved the needle (recall above
        RETRIEVED_RECALL)."""
        return self.forced or (self.recall is not None and self.recall > RETRIEVED_RECALL)

    def to_json(self) -> dict:
        """{length, depth, input_ids, needle_span [start, end), decoded_ids, forced, recall, counts}."""
        return {"length": self.length, "depth": self.depth, "input_ids": self.input_ids,
                "needle_span": list(self.needle_span), "decoded_ids": self.decoded_ids, "forced": self.forced,
                "recall": self.recall, "counts": self.counts}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> RetrievalTest:
        """Read back to_json's dict (KeyError, TypeError or ValueError when malformed)."""
        start, end = (int(x) for x in data["needle_span"])
        ids = [int(x) for x in data["input_ids"]]
        if not 0 <= start < end <= len(ids):
            raise ValueError(f"needle_span {[start, end]} does not lie in the {len(ids)} input ids")
        recall = None if data["recall"] is None else float(data["recall"])
        return cls(int(data["length"]), float(data["depth"]), ids, (start, end),
                   [int(x) for x in data["decoded_ids"]], bool(data["forced"]), recall)  # fmt: skip


@dataclass
class RetrievalResult:
    """Every head's retrieval score [layers, heads] (the mean over the tests that count; NaN where none does), the
    threshold and the tests."""

    scores: np.ndarray
    tests: list[RetrievalTest]
    threshold: float = RETRIEVAL_THRESHOLD

    @property
    def counted(self) -> int:
        """How many tests count (forced, or the needle retrieved)."""
        return sum(t.counts for t in self.tests)

    @property
    def reason(self) -> str | None:
        """Why there are no scores, in words (None when some test counts)."""
        if self.counted or not self.tests:
            return None if self.tests else "no test was run."
        best = max(t.recall or 0.0 for t in self.tests)
        return (f"the model retrieved the needle in none of the {len(self.tests)} tests (the best ROUGE-1 recall of "
                f"the needle in the decoded text was {best:.2f}, not above {RETRIEVED_RECALL}): a retrieval score "
                "counts only tests that retrieved it (METHODS §20); try forced decoding, shorter lengths or a "
                "stronger model.")  # fmt: skip

    @property
    def heads(self) -> list[list[int]]:
        """The retrieval heads, [[layer, head], ...] 0-based: score above the threshold."""
        return retrieval_heads(self.scores, self.threshold)

    def to_json(self) -> dict:
        """The `retrieval` command's JSON: scores [layer][head] (null where no test counts), threshold,
        retrieval_heads, counted (how many tests count), reason (why none did, else null), tests."""
        return {"scores": self.scores, "threshold": self.threshold, "retrieval_heads": self.heads,
                "counted": self.counted, "reason": self.reason, "tests": [t.to_json() for t in self.tests]}  # fmt: skip

    @classmethod
    def from_json(cls, data: dict) -> RetrievalResult:
        """Read back a `retrieval` JSON; ResultFileError when malformed."""
        with malformed("`retrieval` result"):
            scores = numeric_array(data["scores"], "scores", 2)
            result = cls(scores, [RetrievalTest.from_json(t) for t in data["tests"]], float(data["threshold"]))
            if result.counted != int(data["counted"]):
                raise ResultFileError("the `retrieval` result's counted is not the number of its tests that count.")
            if result.heads != [[int(l), int(h)] for l, h in data["retrieval_heads"]]:
                raise ResultFileError("the `retrieval` result's retrieval_heads are not those its scores give.")
            return result

    def tables(self, model: str) -> dict[str, pd.DataFrame]:
        """Each head's retrieval score and whether it is a retrieval head; each test's length, depth and needle."""
        import pandas as pd

        from attnlib.analyses.tables import head_frame

        per_head = head_frame(model, {"retrieval": self.scores, "retrieval_head": self.scores > self.threshold})
        tests = pd.DataFrame(
            [{"model": model, "length": t.length, "depth": t.depth, "n_tokens": len(t.input_ids),
              "needle_start": t.needle_span[0], "needle_end": t.needle_span[1], "n_decoded": len(t.decoded_ids),
              "forced": t.forced, "recall": t.recall, "counts": t.counts} for t in self.tests],
            columns=["model", "length", "depth", "n_tokens", "needle_start", "needle_end", "n_decoded", "forced",
                     "recall", "counts"],
        )  # fmt: skip
        return {"Per head": per_head, "Tests": tests}


@dataclass
class RetrievalSums:
    """The tests run so far and the sum of the scores of those that count (mergeable, as the engines' accumulators)."""

    layers: int
    heads: int
    tests: list[RetrievalTest] = field(default_factory=list)
    sums: np.ndarray | None = None

    def add(self, test: RetrievalTest, scores: np.ndarray) -> None:
        """One test and its scores [layers, heads] (summed only where the test counts)."""
        self.tests.append(test)
        if test.counts:
            self.sums = scores.copy() if self.sums is None else self.sums + scores

    def merge(self, other: RetrievalSums) -> RetrievalSums:
        """Both accumulators' tests, in order."""
        merged = RetrievalSums(self.layers, self.heads, self.tests + other.tests)
        sums = [s for s in (self.sums, other.sums) if s is not None]
        merged.sums = sum(sums[1:], sums[0].copy()) if sums else None
        return merged

    def result(self) -> RetrievalResult:
        """The mean score over the tests that count (NaN where none does)."""
        counted = sum(t.counts for t in self.tests)
        if self.sums is None or not counted:
            return RetrievalResult(np.full((self.layers, self.heads), np.nan), self.tests)
        return RetrievalResult(self.sums / counted, self.tests)


def continuation_ids(tokenizer, text: str) -> list[int]:
    """The ids of text as it reads after other text: with the space before it (byte-level BPE marks it in the word's
    first token), a token that is only that space left out."""
    ids = tokenizer(" " + text.strip(), add_special_tokens=False)["input_ids"]
    return ids[1:] if ids and not tokenizer.decode(ids[:1]).strip() else ids


def bos_of(lm: LoadedModel) -> int | None:
    """The BOS id where the tokenizer starts an input with it, else None."""
    bos = lm.tokenizer.bos_token_id
    starts = lm.tokenizer("a")["input_ids"][:1]
    return bos if bos is not None and starts == [bos] else None


def _text(item: CorpusInput) -> str:
    parts = [item.text_a, item.text_b]
    return " ".join(" ".join(p) if isinstance(p, list) else p for p in parts if p)


def haystack_ids(lm: LoadedModel, inputs: Sequence[CorpusInput], tokens: int) -> list[int]:
    """The corpus's inputs one after another as ids, at least `tokens` of them (only as many inputs are read);
    CorpusError when the whole corpus has fewer."""
    ids: list[int] = []
    for k, item in enumerate(inputs):
        text = _text(item)
        ids += (
            lm.tokenizer(text, add_special_tokens=False)["input_ids"]
            if k == 0
            else continuation_ids(lm.tokenizer, text)
        )
        if len(ids) >= tokens:
            return ids
    raise CorpusError(
        f"the corpus has {len(ids):,} tokens, fewer than the haystack of {tokens:,} asked for: give a longer corpus "
        "or smaller lengths."
    )


def planned_lengths(lm: LoadedModel, options: RetrievalOptions, extra: int) -> tuple[int, ...]:
    """The haystack lengths: those asked for (OptionError when one leaves no room in the model for the `extra` tokens
    around it), else the longest the model takes (at most LONGEST_DEFAULT)."""
    room = lm.facts.max_length - extra
    if room < 1:
        raise OptionError(
            f"'{lm.facts.name}' takes {lm.facts.max_length} tokens, too few for the needle, the question and the "
            f"decoded tokens ({extra}) with any haystack."
        )
    asked = options.length_list()
    too_long = [x for x in asked if x > room]
    if too_long:
        raise OptionError(
            f"a haystack of {too_long[0]:,} tokens with the needle, the question and the decoded tokens ({extra}) is "
            f"longer than the {lm.facts.max_length:,} tokens '{lm.facts.name}' takes: at most {room:,}."
        )
    return asked or (min(room, LONGEST_DEFAULT),)


def run_tests(
    lm: LoadedModel,
    inputs: Sequence[CorpusInput],
    options: RetrievalOptions,
    progress: Progress | None = None,
    batch_size: int = 1,
) -> RetrievalSums:
    """Every test (each length and depth) decoded and scored (METHODS §20)."""
    check_decoder(lm, options.forced)  # an encoder, or greedy decoding without an LM head, refused first
    head = None if options.forced else mlm_head(lm)
    needle = continuation_ids(lm.tokenizer, options.needle)
    prompt = lm.tokenizer(PROMPT.format(question=options.question.strip()), add_special_tokens=False)["input_ids"]
    bos = bos_of(lm)
    steps = len(needle) if options.forced else len(needle) + EXTRA_STEPS
    lengths = planned_lengths(lm, options, (bos is not None) + len(needle) + len(prompt) + steps)
    haystack = haystack_ids(lm, inputs, max(lengths))
    plan = [(length, depth) for length in lengths for depth in options.depth_list()]
    sums = RetrievalSums(lm.facts.n_layers, lm.facts.n_heads)
    for done, (length, depth) in enumerate(plan):
        test = needle_test(haystack, needle, prompt, length, depth, bos)
        counter = CopyCounter(lm.facts.n_layers, lm.facts.n_heads, test.needle_span)
        sequence = list(test.input_ids)  # the input, then each token decoded: the keys of the next step

        def check(_t: int, token: int, rows: np.ndarray, counter=counter, sequence=sequence) -> None:
            counter.step(rows, sequence, token)
            sequence.append(token)

        forced = needle if options.forced else None
        decoded = greedy_decode(lm, test.input_ids, steps, forced, on_rows=check, head=head)
        recall = (
            None
            if options.forced
            else rouge1_recall(options.needle, lm.tokenizer.decode(decoded, skip_special_tokens=True))
        )
        sums.add(RetrievalTest(length, depth, test.input_ids, test.needle_span, decoded, options.forced, recall),
                 counter.scores())  # fmt: skip
        if progress is not None:
            progress(done + 1, len(plan))
    return sums


def retrieval_accumulators(lm: LoadedModel, options: RetrievalOptions) -> list:
    """Empty sums; UnsupportedModelError (in words) for a model that is not a decoder, or that cannot decode greedily."""
    check_decoder(lm, options.forced)
    return [RetrievalSums(lm.facts.n_layers, lm.facts.n_heads)]


RETRIEVAL: Analysis[RetrievalOptions, RetrievalResult] = Analysis(
    name="retrieval",
    help="retrieval heads of a decoder: a needle hidden in a haystack (the corpus) at several depths, decoded greedily "
    "or forced (METHODS §20)",
    options=RetrievalOptions,
    reads="corpus",
    result=RetrievalResult,
    methods=(20,),
    accumulators=retrieval_accumulators,
    finish=single_result,
    fill=partial(own_loop, run_tests),
    default_corpus=HAYSTACK,
    whole_corpus=True,
)
