"""An encoder-decoder (T5, BART) on the corpus pages, the Report and the Tour (METHODS §18): each page shows the
statistics of the encoder's self-attention, says so in one caption, and a statistic the family cannot give is refused
in the library's own words, never with a traceback."""

from __future__ import annotations

import json
from collections.abc import Callable

import numpy as np
import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from attnlib.analyses.base import run_analysis
from attnlib.analyses.deps import DEPS, DepsOptions
from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.core.corpus import read_conllu, read_corpus
from attnlib.core.families import unsupported_reason
from attnlib.core.model import LoadedModel, load_model
from attnlib.present.tour import STEPS
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV, ROOT
from attnlib.stats.importance import mlm_reason
from attnlib.stats.importance import unavailable_reason as ablation_reason
from support.apptest import figures, tables
from support.models import save_tiny
from support.pages import run_computing
from ui.widgets.page_tabs import HEAD_IMPORTANCE, LOCAL_GLOBAL, SPECIAL_TOKENS

pytestmark = pytest.mark.slow
LIMIT = 3  # inputs of the page's default corpus
CAPTION = "these statistics are of its encoder's self-attention over the source text"
CLASSES = ("cls", "sep", "punct", "other")
# float32 shares: sums of at most 64 weights each, then means; 64 * eps(float32) bounds the rounding
SHARE_TOLERANCE = 64 * np.finfo(np.float32).eps


@pytest.fixture(scope="module", params=["t5", "bart"])
def encdec_dir(request, tmp_path_factory):
    return save_tiny(request.param, tmp_path_factory.mktemp(f"{request.param}-corpus-pages"))


def open_page(page: str, **params: str) -> AppTest:
    """The app with these URL parameters, switched to a page and run, its computations asked for; nothing raised."""
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(params)
    at.run()
    at.switch_page(page)
    return run_computing(at, page)


def said(at: AppTest) -> list[str]:
    """Every message the page shows (info, warning, error, success)."""
    return [m.value for kind in ("info", "warning", "error", "success") for m in getattr(at, kind)]


def encoder_captions(at: AppTest) -> list[str]:
    return [c.value for c in at.caption if CAPTION in c.value]


def per_layer(at: AppTest, model: str):
    """The Special tokens page's per-layer table (Tables tab) rows of one model."""
    (table,) = [t for t in tables(at) if "cls" in t.columns and "head" not in t.columns]
    return table[table["model"] == model].sort_values("layer")


def table_keyed(at: AppTest, key: str) -> pd.DataFrame:
    """The one table (ui/data_table) sent with this widget key, as the DataFrame its cells were sent from."""
    from ui.widgets.data_table import COMPONENT

    found = [c for c in at.get("bidi_component") if c.proto.component_name == COMPONENT and str(c.key) == key]
    assert len(found) == 1, [str(c.key) for c in at.get("bidi_component")]
    sent = json.loads(found[0].proto.json)
    return pd.DataFrame(sent["rows"], columns=sent["columns"])


def library_special(model_dir) -> dict[str, np.ndarray]:
    """`attnlib special`'s per-layer shares on the page's default corpus (its first LIMIT inputs)."""
    corpus = {"corpus": read_corpus(CLASSROOM_SINGLE, limit=LIMIT)}
    return run_analysis(SPECIAL, load_model(str(model_dir)), SpecialOptions(), inputs=corpus).result.special.layers


def encoder_shares(model_dir) -> dict[str, np.ndarray]:
    """Per-layer shares to the first token and to the eos tokens from the model's own eager encoder forward pass
    (transformers, no attnlib): per input the mean over heads and query rows, then the mean over inputs (§2)."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir, attn_implementation="eager").eval()
    first, eos = [], []
    for item in read_corpus(CLASSROOM_SINGLE, limit=LIMIT):
        ids = tokenizer(item.text_a, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            maps = torch.stack(model.get_encoder()(input_ids=ids, output_attentions=True).attentions)[:, 0].double()
        first.append(maps[..., 0].mean(dim=(1, 2)).numpy())  # [layers]
        eos.append(maps[..., ids[0] == tokenizer.eos_token_id].sum(-1).mean(dim=(1, 2)).numpy())
    return {"first": np.mean(first, axis=0), "eos": np.mean(eos, axis=0)}


def test_special_tokens_page_shows_the_encoders_shares(encdec_dir):
    """The Special tokens page of an encoder-decoder: every tab opens; the per-layer shares are `attnlib special`'s
    and the encoder's own attention's: T5 has no CLS (its class is empty), BART's CLS is its first token <s>."""
    at = open_page("app_pages/special/page.py", model=str(encdec_dir), limit=str(LIMIT), tab="tables")
    assert len(encoder_captions(at)) == 1
    rows = per_layer(at, str(encdec_dir))
    own = library_special(encdec_dir)
    for key in CLASSES:
        np.testing.assert_allclose(rows[key].to_numpy(float), own[key], atol=1e-12)
    forward = encoder_shares(encdec_dir)
    assert own["sep"].all()  # every layer attends to </s> somewhat: the comparison below has something to compare
    np.testing.assert_allclose(own["sep"], forward["eos"], atol=SHARE_TOLERANCE)
    if encdec_dir.name.startswith("t5"):
        assert not own["cls"].any()  # METHODS §18: T5's classes are SEP and the rest
    else:
        np.testing.assert_allclose(own["cls"], forward["first"], atol=SHARE_TOLERANCE)
    norms = unsupported_reason(load_model(str(encdec_dir)).encoder.config, "norms")
    for label in SPECIAL_TOKENS.values():
        at.session_state["special_tab"] = label
        run_computing(at, label)
        assert len(encoder_captions(at)) == 1, label
    at.session_state["special_tab"] = SPECIAL_TOKENS["norms"]
    run_computing(at, "norms")
    assert norms is None or any(norms in m for m in said(at)), said(at)


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_special_tokens_of_an_encoder_decoder_beside_an_encoder(tiny_model_dir):
    """T5's encoder beside a BERT on one corpus, either one first: both models' rows are the library's; one caption,
    for T5 alone."""
    t5_dir = save_tiny("t5", tiny_model_dir.parent / "t5-beside-bert")
    own = {model_dir: library_special(model_dir) for model_dir in (t5_dir, tiny_model_dir)}
    for first, second in ((t5_dir, tiny_model_dir), (tiny_model_dir, t5_dir)):
        page = "app_pages/special/page.py"
        at = open_page(page, model=str(first), cmp=str(second), limit=str(LIMIT), tab="tables")
        (caption,) = encoder_captions(at)
        assert caption.startswith(str(t5_dir))
        for model_dir, shares in own.items():
            rows = per_layer(at, str(model_dir))
            for key in CLASSES:
                np.testing.assert_allclose(rows[key].to_numpy(float), shares[key], atol=1e-12)


def test_dependency_heads_page_shows_the_encoders_table(encdec_dir):
    """Table 1 of the encoder's word-level attention: the page's rows are `attnlib deps`'s on the same sentences."""
    n_sentences, min_count = 12, 5
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params.update(model=str(encdec_dir))
    at.run()
    at.switch_page("app_pages/deps/page.py")
    at.session_state["deps_limit"], at.session_state["deps_min_count"] = n_sentences, min_count
    run_computing(at, "deps")
    assert len(encoder_captions(at)) == 1
    shown = table_keyed(at, "deps_table")
    sentences = {"conllu": read_conllu(EWT_DEV)[:n_sentences]}
    found = run_analysis(DEPS, load_model(str(encdec_dir)), DepsOptions(min_count=min_count), inputs=sentences)
    expected = found.result.counts.table(min_count=min_count)
    assert expected.rows
    assert list(shown["relation"]) == [r.relation for r in expected.rows]
    assert list(shown["best head"]) == [f"{r.layer + 1}-{r.head + 1}" for r in expected.rows]
    np.testing.assert_allclose(shown["accuracy %"].to_numpy(float), [100 * r.accuracy for r in expected.rows])
    at.session_state["deps_tab"], at.session_state["probe_limit"] = "All heads together", n_sentences
    run_computing(at, "probe")
    assert len(encoder_captions(at)) == 1
    (probe,) = [t for t in tables(at) if "probe UAS %" in t.columns]
    assert probe["probe UAS %"].between(0, 100).all() and len(probe)


# why the family cannot give a statistic, as the library says it (None: it can)
REASONS: dict[str, Callable[[LoadedModel], str | None]] = {
    "ablation": ablation_reason,
    "hta": lambda lm: unsupported_reason(lm.encoder.config, "hta"),
    "queries_keys": lambda lm: unsupported_reason(lm.encoder.config, "queries_keys"),
}
# page, its tabs' session key and labels, the statistic its numbers need from the family
NEEDS = [
    ("app_pages/importance/page.py", "importance_tab", list(HEAD_IMPORTANCE.values()), "ablation"),
    ("app_pages/local_global/page.py", "lg_tab", list(LOCAL_GLOBAL.values()), "hta"),
    ("app_pages/qk/page.py", None, [None], "queries_keys"),
]


@pytest.mark.parametrize(("page", "tab_key", "labels", "statistic"), NEEDS, ids=[n[3] for n in NEEDS])
def test_pages_needing_the_familys_layout_show_numbers_or_say_why(encdec_dir, page, tab_key, labels, statistic):
    """Head importance, Local vs global and Queries and keys: the encoder's numbers where the family has the layout
    they need, else the library's own reason in words; every tab opens without an exception."""
    lm = load_model(str(encdec_dir))
    reason = REASONS[statistic](lm)
    at = open_page(page, model=str(encdec_dir), limit=str(LIMIT))
    for label in labels:
        if tab_key is not None:
            at.session_state[tab_key] = label
            run_computing(at, f"{page} {label}")
        assert len(encoder_captions(at)) == 1, label
        if label == "Gradient importance":  # Michel's gradient needs an LM loss: an encoder-decoder's says why not
            assert any(mlm_reason(lm) in m for m in said(at)), (label, said(at))
        elif reason is None:
            assert figures(at) or tables(at) or at.button, label  # "One example" computes on request
        else:
            assert any(reason in m for m in said(at)), (label, said(at))


def test_tour_steps_on_an_encoder_decoder(encdec_dir):
    """Every Tour step on the encoder: its notice (T5's names no [CLS]: it has none), or (positions, knockouts) the
    library's reason in words."""
    lm = load_model(str(encdec_dir))
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=600)
    at.query_params["model"] = str(encdec_dir)
    at.run()
    for step in STEPS:
        at.switch_page("app_pages/tour/page.py")
        at.query_params["step"] = str(step.number)
        at.session_state["tour_step"] = step.number
        run_computing(at, f"tour step {step.number}")
        assert len(encoder_captions(at)) == 1, step.key
        statistic = {"positions": "hta", "knockout": "ablation"}.get(step.key)
        reason = None if statistic is None else REASONS[statistic](lm)
        if reason is None:
            notices = [m for m in said(at) if m.startswith("**What to notice.**")]  # the induction step: two
            assert notices, step.key
            assert lm.facts.model_type != "t5" or step.key != "special" or "[CLS]" not in notices[0], notices
        else:
            assert any(reason in m for m in said(at)), (step.key, said(at))


def test_report_of_an_encoder_decoder_is_built_or_refused_in_words(encdec_dir):
    """The Report: built from the encoder's statistics where the family gives every part, else refused in words."""
    lm = load_model(str(encdec_dir))
    reasons = [r for s in ("hta", "ablation") if (r := REASONS[s](lm)) is not None]
    at = open_page("app_pages/report/page.py", model=str(encdec_dir), limit=str(LIMIT))
    assert len(encoder_captions(at)) == 1
    (build,) = [b for b in at.button if b.label == "Build the report"]
    build.click().run()
    assert not at.exception, [e.value for e in at.exception]
    if reasons:
        (refusal,) = [e.value for e in at.error]
        assert refusal.startswith("The report could not be built:") and any(r in refusal for r in reasons)
    else:
        assert any(s.value.startswith("The report is ready") for s in at.success)
