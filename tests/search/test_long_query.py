"""A long query's vector (METHODS §16 and §19, issue 36): from one block-wise pass that keeps only the chosen hidden
state or the chosen heads' context vectors, equal to the eager query's (and to the model's own last hidden state for
the last layer, after the final norm where the family has one) for encoders and decoders; the long path forced on
short inputs (BLOCKWISE_FROM lowered, blocks of 3 rows); a family that cannot run block-wise refused in words above
the memory guard; `attnlib search` on a long text."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlib.core.blockwise
import attnlib.search.vectors as vectors
from attnlib.core.model import load_model
from attnlib.core.runner import encode, model_inputs
from attnlib.search.by_example import IndexOptions, SearchError, query_of
from support.cli import run_cli
from support.long import long_text, save_long_modernbert
from support.models import save_tiny
from support.tolerances import FORWARD_RTOL

pytestmark = pytest.mark.usefixtures("one_thread")
TEXT = "the cat sat on the mat because it was warm and then it slept ."
TOKEN = 5
OPTIONS = {
    "layer 0": IndexOptions(0),
    "last layer": IndexOptions(1),
    "embeddings": IndexOptions(embeddings=True),
    "heads": IndexOptions(1, heads="0,2"),
}


@pytest.fixture(scope="module", params=["bert", "modernbert", "llama", "gpt2"])
def family_lm(request, tmp_path_factory):
    """A tiny model of an encoder or decoder family that runs block-wise."""
    return load_model(str(save_tiny(request.param, tmp_path_factory.mktemp(request.param))))


def spy_long_path(monkeypatch, lm) -> list:
    """Force the long path (every input block-wise, 3 query rows a block); the list receives each block-wise pass's
    model output (what transformers kept of it) and the blocks' heights."""
    seen: list = []
    monkeypatch.setattr(vectors, "BLOCKWISE_FROM", 4)
    monkeypatch.setattr(attnlib.core.blockwise, "default_block_rows", lambda n, heads: 3)
    handle = lm.encoder.register_forward_hook(lambda _m, _args, out: seen.append(out))
    monkeypatch.setattr(vectors, "run_blockwise", _counting(vectors.run_blockwise, seen))
    return seen, handle


def _counting(run, seen: list):
    """run_blockwise whose consumer also records each block's height."""

    def counted(lm, batch, consumer, *args, **kwargs):
        def consume(block):
            seen.append(("block", block.layer, block.rows))
            consumer(block)

        return run(lm, batch, consume, *args, **kwargs)

    return counted


@pytest.mark.parametrize("name", list(OPTIONS))
def test_long_query_equals_the_eager_query(family_lm, name, monkeypatch):
    options = OPTIONS[name].for_model(family_lm.facts)
    eager = query_of(family_lm, TEXT, None, TOKEN, options)
    seen, handle = spy_long_path(monkeypatch, family_lm)
    try:
        long = query_of(family_lm, TEXT, None, TOKEN, options)
    finally:
        handle.remove()
    n = encode(family_lm, TEXT).n
    blocks = [s for s in seen if isinstance(s, tuple)]
    assert len(blocks) == family_lm.facts.n_layers * -(-n // 3) and max(b[2] for b in blocks) == 3  # block-wise
    (out,) = [s for s in seen if not isinstance(s, tuple)]
    assert out.attentions is None
    if options.heads:
        assert out.hidden_states is None  # the contexts come from the hook; no hidden state kept
        np.testing.assert_allclose(long.head_norms, eager.head_norms, rtol=0, atol=FORWARD_RTOL)
    else:
        kept = [i for i, h in enumerate(out.hidden_states) if h is not None]
        assert kept == [vectors.hidden_index(options)]  # one hidden state kept, not every layer's
    assert long.tokens == eager.tokens and long.token == eager.token
    np.testing.assert_allclose(long.vector, eager.vector, rtol=0, atol=FORWARD_RTOL)
    assert np.linalg.norm(long.vector) == pytest.approx(1, abs=FORWARD_RTOL)


def test_last_layer_is_the_models_last_hidden_state(family_lm, monkeypatch):
    """After the final norm where the family has one (ModernBERT, Llama, GPT-2), as the model's own output."""
    with torch.inference_mode():
        last = family_lm.encoder(**model_inputs(family_lm, [encode(family_lm, TEXT)])).last_hidden_state[0, TOKEN]
    expected = (last / last.norm()).numpy()
    _, handle = spy_long_path(monkeypatch, family_lm)
    try:
        long = query_of(family_lm, TEXT, None, TOKEN, IndexOptions(family_lm.facts.n_layers - 1))
    finally:
        handle.remove()
    np.testing.assert_allclose(long.vector, expected, rtol=0, atol=FORWARD_RTOL)


def test_family_without_blockwise_is_refused_above_the_memory_guard(tmp_path, monkeypatch):
    folder = str(save_tiny("deberta-v2", tmp_path / "deberta"))
    lm = load_model(folder)
    monkeypatch.setattr(vectors, "BLOCKWISE_FROM", 4)
    assert not vectors.runs_blockwise(lm, encode(lm, TEXT))
    assert query_of(lm, TEXT, None, TOKEN, IndexOptions(1)).vector.shape == (lm.facts.hidden_size,)  # eager fits
    monkeypatch.setenv("ATTNLIB_MAX_RUN_MB", "0.001")
    with pytest.raises(SearchError, match="'deberta-v2' models cannot run block-wise"):
        query_of(lm, TEXT, None, TOKEN, IndexOptions(1))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the cat sat on the mat .\n")
    ran = run_cli("search", "--model", folder, "--corpus", str(corpus), "--text", TEXT, "--token", "3", "--layer", "0")
    assert "'deberta-v2' models cannot run block-wise, so a query runs with every layer's attention maps" in ran.error


N_CLI = 1536  # > BLOCKWISE_FROM: the query runs block-wise


@pytest.fixture(scope="module")
def long_cli(tmp_path_factory):
    """The tiny ModernBERT of N_CLI positions, a long text of N_CLI tokens and a corpus of three lines."""
    folder = tmp_path_factory.mktemp("long-cli")
    model = save_long_modernbert(folder / "model", N_CLI)
    corpus = folder / "corpus.txt"
    corpus.write_text("the cat sat on the mat .\nit was warm .\nand then it slept because the mat was warm .\n")
    return str(model), str(corpus), long_text(N_CLI)


@pytest.mark.slow
def test_cli_searches_with_a_long_text(long_cli, monkeypatch):
    model, corpus, text = long_cli
    argv = ["search", "--model", model, "--corpus", corpus, "--text", text, "--token", "1400", "--layer", "1"]
    ran = run_cli(*argv, "--k", "5", "--heads", "1,3")
    assert ran.code == 0, ran.err
    eager_lm = load_model(model)
    assert encode(eager_lm, text).n == N_CLI
    monkeypatch.setattr(vectors, "BLOCKWISE_FROM", N_CLI)  # the same query, eager
    eager = run_cli(*argv, "--k", "5", "--heads", "1,3")
    got, expected = ran.json["matches"], eager.json["matches"]
    assert [(m["input"], m["position"]) for m in got] == [(m["input"], m["position"]) for m in expected]
    np.testing.assert_allclose([m["score"] for m in got], [m["score"] for m in expected], rtol=0, atol=1e-5)
    assert ran.json["query"]["token"] == 1400 and len(got) == 5


@pytest.mark.slow
def test_cli_refuses_a_long_query_beyond_the_memory_guard(long_cli, monkeypatch):
    model, corpus, text = long_cli
    monkeypatch.setenv("ATTNLIB_MAX_RUN_MB", "1")
    ran = run_cli("search", "--model", model, "--corpus", corpus, "--text", text, "--token", "3", "--layer", "0")
    assert "1,536 tokens run block-wise needs about" in ran.error
