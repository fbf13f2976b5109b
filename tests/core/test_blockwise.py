"""Block-wise attention for long inputs (METHODS §19): equal to every family's own eager attention and output at two
block sizes, the special-token statistics independent of the block size, the max-pooled reduced map worked by hand,
and the memory guard's estimate and refusal."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch

import attnlib.core.batches
import attnlib.core.blockwise
from attnlib.analyses.base import run_analysis
from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.core.blockwise import (
    BlockwiseUnsupportedError,
    _keys_attended,
    default_block_rows,
    reduce_map,
    reduced_maps,
    run_blockwise,
    run_rows,
    supports_blockwise,
    window_heads,
)
from attnlib.core.memory import MAX_RUN_MB_ENV, MemoryLimitError, RunSize, check_memory, estimate_peak_bytes, run_size
from attnlib.core.model import ModelLoadError, load_model
from attnlib.core.runner import encode, model_inputs, run_encoded
from attnlib.stats.special import STAT_KEYS, SpecialTokenStats
from attnlib.views.neuron_view import neuron_scores
from support.models import DECODER_KINDS, FAMILY_KINDS, save_tiny
from support.tolerances import FORWARD_RTOL

TEXT_A = "The cat sat on the mat because it was warm, and then it slept."
TEXT_B = "It slept."
SENTENCES = [TEXT_A, "A dog barked at the moon, twice.", "She reads books every night."]
# families that compute attention in their own code, not through transformers' attention interface: eager path
OWN_ATTENTION = {"deberta", "deberta-v2", "deberta-v2-tokens", "mpnet", "roformer"}
WINDOWED = {"modernbert", "mistral", "gemma2", "gemma3"}
BLOCK_SIZES = (1, 5)  # one row at a time, and a block that divides no test input's length
# Probabilities are softmax outputs in [0, 1] of float32 scores; the two paths differ only in how the matmul of a
# block of rows sums its head_dim (8) products, a few ulps of the scores (1e-7 relative), so 1e-6 absolute.
PROB_ATOL = 1e-6
# Hidden states (or logits) of order 1 after 2 layers of float32 arithmetic fed by those probabilities: 1e-5.
HIDDEN_ATOL = 1e-5
# softmax in float64 of q.k from float32 vectors against the model's float32 softmax: the scores differ by the float32
# rounding of a sum of head_dim (8) products and of the vectors themselves, within FORWARD_RTOL relatively of scores of
# order 1, and a probability moves by at most a quarter of the change of its score (p (1 - p) <= 1/4) plus its
# neighbours': FORWARD_RTOL bounds it.
SOFTMAX_ATOL = FORWARD_RTOL


@pytest.fixture(scope="module", params=FAMILY_KINDS + DECODER_KINDS)
def any_model(request, tmp_path_factory):
    """Every family's tiny model (encoders and decoders), with its kind."""
    return request.param, load_model(str(save_tiny(request.param, tmp_path_factory.mktemp(request.param))))


def _last(out) -> torch.Tensor:
    return out.last_hidden_state if hasattr(out, "last_hidden_state") else out[0]


def test_blockwise_equals_the_models_own_eager_attention(any_model, one_thread):
    kind, lm = any_model
    # a padded batch of two inputs of different lengths: padding masks as well as causal ones and local windows
    batch = model_inputs(lm, [encode(lm, TEXT_A, TEXT_B), encode(lm, "She reads books.")])
    n = batch["input_ids"].shape[1]
    with torch.inference_mode():
        eager_out = lm.encoder(**batch, output_attentions=True)
    eager = torch.stack(eager_out.attentions, dim=1).numpy()  # [batch, layers, heads, n, n]
    if kind in OWN_ATTENTION:
        assert not supports_blockwise(lm.encoder)
        with pytest.raises(BlockwiseUnsupportedError, match="eager path"):
            run_blockwise(lm, batch, lambda *_: None, 4)
        return
    if kind in WINDOWED:
        assert any(w is not None and w < n - 1 for w in lm.facts.windows)  # some layer's window is shorter than n
    for rows in BLOCK_SIZES:
        got = np.full_like(eager, np.nan)
        seen: list[tuple[int, int]] = []
        widths: list[int] = []

        def keep(block, got=got, seen=seen, rows=rows, widths=widths):
            assert block.rows == min(rows, n - block.first_row)  # never more than one block of rows at a time
            got[:, block.layer, :, block.first_row : block.first_row + block.rows] = block.dense()
            seen.append((block.layer, block.first_row))
            widths.append(block.probs.shape[-1])

        hidden = run_blockwise(lm, batch, keep, rows)
        assert seen == [(layer, start) for layer in range(lm.facts.n_layers) for start in range(0, n, rows)]
        # a local window's or a causal block's masked keys are not computed (the padded batch's first input attends
        # every key of an encoder without windows)
        assert (min(widths) < n) == (kind in WINDOWED or kind in DECODER_KINDS)
        np.testing.assert_allclose(got, eager, rtol=0, atol=PROB_ATOL)
        np.testing.assert_allclose(hidden.numpy(), _last(eager_out).numpy(), rtol=0, atol=HIDDEN_ATOL)
    assert lm.encoder.config._attn_implementation == "eager"  # restored after the run


@pytest.mark.parametrize("kind", ["modernbert", "mistral"])
def test_no_mask_of_every_row_is_made(kind, tmp_path, monkeypatch, one_thread):
    # the masks (padding, local window, causal) are made a few query rows at a time, each kind once per pass
    import transformers.masking_utils

    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    batch = model_inputs(lm, [encode(lm, TEXT_A, TEXT_B), encode(lm, "She reads books.")])
    n = batch["input_ids"].shape[1]
    with torch.inference_mode():
        eager = _last(lm.encoder(**batch)).numpy()
    made: list[int] = []
    original = transformers.masking_utils.sdpa_mask
    monkeypatch.setattr(
        transformers.masking_utils, "sdpa_mask", lambda **kw: made.append(kw["q_length"]) or original(**kw)
    )
    monkeypatch.setattr(attnlib.core.blockwise, "MASK_STEP", 3 * n)  # three rows of keys a step
    hidden = run_blockwise(lm, batch, lambda *_: None, 5)
    kinds = len({w for w in lm.facts.windows})  # a mask per kind of layer (full, local)
    assert sorted(made) == sorted(([0] + [3] * (n // 3) + [n % 3] * (n % 3 > 0)) * kinds)  # 0: the skip decision
    np.testing.assert_allclose(hidden.numpy(), eager, rtol=0, atol=HIDDEN_ATOL)


def _special(lm, texts, block_rows=None) -> dict:
    """The special statistics of texts: eager (block_rows None) or block-wise at that block size."""
    f = lm.facts
    acc = SpecialTokenStats(f.n_layers, f.n_heads, causal=f.causal)
    for text in texts:
        encoded = encode(lm, text)
        if block_rows is None:
            acc.add(run_encoded(lm, [encoded])[0])
        else:
            run_rows(lm, encoded, [acc.row_consumer(encoded)], block_rows)
    return acc.result().heads


@pytest.mark.parametrize("kind", ["bert", "modernbert", "llama", "mistral", "gemma2"])
def test_special_statistics_do_not_depend_on_the_block_size(kind, tmp_path, one_thread):
    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    eager = _special(lm, SENTENCES)
    for rows in (1, 7, 1000):
        blocks = _special(lm, SENTENCES, rows)
        for key in STAT_KEYS:
            np.testing.assert_allclose(blocks[key], eager[key], rtol=0, atol=PROB_ATOL, err_msg=f"{key}, {rows} rows")


def test_the_special_analysis_switches_to_blockwise_with_the_same_result(tmp_path, monkeypatch, one_thread):
    lm = load_model(str(save_tiny("modernbert", tmp_path / "modernbert")))
    eager = run_analysis(SPECIAL, lm, SpecialOptions(), inputs={"corpus": SENTENCES}).to_json()
    ran: list[int] = []
    original = attnlib.core.batches.run_rows
    monkeypatch.setattr(attnlib.core.batches, "run_rows", lambda lm, e, c: ran.append(e.n) or original(lm, e, c))
    monkeypatch.setattr(attnlib.core.batches, "BLOCKWISE_FROM", 15)  # the inputs longer than 15 tokens run block-wise
    mixed = run_analysis(SPECIAL, lm, SpecialOptions(), inputs={"corpus": SENTENCES}).to_json()
    lengths = [encode(lm, s).n for s in SENTENCES]
    assert ran == [n for n in lengths if n > 15] and 0 < len(ran) < len(SENTENCES)
    assert mixed.keys() == eager.keys()
    for key in STAT_KEYS:
        np.testing.assert_allclose(mixed["heads"][key], eager["heads"][key], rtol=0, atol=PROB_ATOL)
    assert mixed["n_inputs"] == eager["n_inputs"] and mixed["uniform_entropy"] == eager["uniform_entropy"]


def test_the_keys_a_block_attends():
    def mask(rows: list[str]) -> torch.Tensor:
        return torch.tensor([[[[c == "1" for c in row] for row in rows]]])

    assert _keys_attended(mask(["0110000", "0011100"]), 7) == slice(1, 5)  # a band
    assert _keys_attended(mask(["1000000", "1100000"]), 7) == slice(0, 2)  # causal
    assert _keys_attended(mask(["0110000", "0000000"]), 7) == slice(0, 7)  # a row attends none: softmax spreads it
    assert _keys_attended(None, 7) == slice(0, 7)
    assert _keys_attended(torch.zeros(1, 1, 2, 7), 7) == slice(0, 7)  # additive: every key


def test_reduce_map_takes_the_maximum_of_each_cell():
    attn = np.array(
        [
            [0.1, 0.0, 0.2, 0.3, 0.0, 0.4],
            [0.0, 0.9, 0.0, 0.0, 0.1, 0.0],
            [0.5, 0.0, 0.0, 0.0, 0.0, 0.5],
            [0.0, 0.2, 0.0, 0.8, 0.0, 0.0],
            [0.0, 0.0, 0.6, 0.0, 0.3, 0.1],
            [0.7, 0.0, 0.0, 0.0, 0.0, 0.3],
        ],
        np.float32,
    )
    # width 3 screen pixels: b = 2, cells of 2 x 2 tokens
    pooled, b = reduce_map(attn, 3)
    assert b == 2
    np.testing.assert_array_equal(pooled, np.float32([[0.9, 0.3, 0.4], [0.5, 0.8, 0.5], [0.7, 0.6, 0.3]]))
    # width 2: b = 4 (6 / 2 = 3 is no power of two), two cells a side, the second covering tokens 4 and 5 only
    pooled, b = reduce_map(attn[None], 2)
    assert b == 4
    np.testing.assert_array_equal(pooled, np.float32([[[0.9, 0.5], [0.7, 0.3]]]))
    # wide enough: the map itself
    pooled, b = reduce_map(attn, 6)
    assert b == 1
    np.testing.assert_array_equal(pooled, attn)


MODERNBERT_BASE_8K = RunSize(n=8192, layers=22, heads=12, hidden=768)


def test_the_guard_refuses_what_would_not_fit_and_says_why():
    limit = 8 * 2**30  # 8 GB
    # an eager run keeps every layer's maps: at least layers x heads x n^2 float32 weights (71 GB here)
    assert estimate_peak_bytes(MODERNBERT_BASE_8K) >= 22 * 12 * 8192**2 * 4
    with pytest.raises(MemoryLimitError) as refused:
        check_memory(MODERNBERT_BASE_8K, limit)
    message = str(refused.value)
    assert "8,192 tokens" in message and "8,192 MB per run" in message and "22 layers x 12 heads" in message
    # block-wise, one block of 256 rows of scores at a time: the same input fits
    check_memory(MODERNBERT_BASE_8K, limit, block_rows=256)
    assert estimate_peak_bytes(MODERNBERT_BASE_8K, 256) < estimate_peak_bytes(MODERNBERT_BASE_8K) / 50


def test_the_run_limit_setting(tiny_model, monkeypatch):
    encoded = encode(tiny_model, TEXT_A)
    need = estimate_peak_bytes(run_size(tiny_model, encoded.n))
    monkeypatch.setenv(MAX_RUN_MB_ENV, str(need / 2 / 2**20))
    with pytest.raises(MemoryLimitError, match=f"{encoded.n:,} tokens"):
        run_encoded(tiny_model, [encoded])
    monkeypatch.setenv(MAX_RUN_MB_ENV, str(need * 2 / 2**20))
    assert run_encoded(tiny_model, [encoded])[0].attentions.shape[-1] == encoded.n
    monkeypatch.setenv(MAX_RUN_MB_ENV, "lots")
    with pytest.raises(ModelLoadError, match="run memory limit must be a number"):
        run_encoded(tiny_model, [encoded])


def test_an_input_too_large_for_eager_runs_blockwise(tmp_path, monkeypatch, one_thread):
    lm = load_model(str(save_tiny("bert", tmp_path / "bert")))
    eager = run_analysis(SPECIAL, lm, SpecialOptions(), inputs={"corpus": SENTENCES}).to_json()
    size = run_size(lm, max(encode(lm, s).n for s in SENTENCES))
    blocks = estimate_peak_bytes(size, default_block_rows(size.n, size.heads))
    between = (blocks + estimate_peak_bytes(size)) / 2  # block-wise fits, eager does not
    monkeypatch.setenv(MAX_RUN_MB_ENV, str(between / 2**20))
    guarded = run_analysis(SPECIAL, lm, SpecialOptions(), inputs={"corpus": SENTENCES}).to_json()
    for key in STAT_KEYS:
        np.testing.assert_allclose(guarded["heads"][key], eager["heads"][key], rtol=0, atol=PROB_ATOL)
    with pytest.raises(MemoryLimitError):  # with the head map every map is needed whole: refused
        run_analysis(SPECIAL, lm, SpecialOptions(head_map=True), inputs={"corpus": SENTENCES})


def test_gemma2_soft_capped_scores(tmp_path, one_thread):
    lm = load_model(str(save_tiny("gemma2", tmp_path / "gemma2")))
    capped = [m for m in lm.encoder.modules() if getattr(m, "attn_logit_softcapping", None) is not None]
    for m in capped:
        m.attn_logit_softcapping = 0.01  # the tiny model's scores (about 0.1) cut hard: the cap changes the weights
    batch = model_inputs(lm, [encode(lm, TEXT_A)])
    with torch.inference_mode():
        eager = torch.stack(lm.encoder(**batch, output_attentions=True).attentions, dim=1)[0].numpy()
    got = np.zeros_like(eager)

    def keep(block):
        got[block.layer, :, block.first_row : block.first_row + block.rows] = block.dense()[0]

    run_blockwise(lm, batch, keep, 5)
    assert capped
    np.testing.assert_allclose(got, eager, rtol=0, atol=PROB_ATOL)


@pytest.mark.parametrize("kind", ["bert", "mistral"])
def test_another_thread_runs_eager_during_a_blockwise_run(kind, tmp_path):
    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    encoded = encode(lm, TEXT_A)
    before = run_encoded(lm, [encoded])[0].attentions
    paused, resume = threading.Event(), threading.Event()
    got = np.zeros_like(before)

    def keep(block):
        if (
            block.layer == 0 and block.first_row == 0
        ):  # hold the model switched to block-wise while the other thread runs
            paused.set()
            assert resume.wait(60)
        got[block.layer, :, block.first_row : block.first_row + block.rows] = block.dense()[0]

    worker = threading.Thread(target=run_blockwise, args=(lm, model_inputs(lm, [encoded]), keep, 4))
    worker.start()
    try:
        assert paused.wait(60)
        during = run_encoded(lm, [encoded])[0].attentions  # this thread: eager attention, its weights returned
    finally:
        resume.set()
        worker.join(60)
    np.testing.assert_allclose(during, before, rtol=0, atol=PROB_ATOL)
    np.testing.assert_allclose(got, before, rtol=0, atol=PROB_ATOL)
    assert lm.encoder.config._attn_implementation == "eager"


@pytest.mark.parametrize("kind", ["modernbert", "mistral"])
def test_reduced_maps_computed_blockwise_equal_the_pooled_eager_maps(kind, tmp_path, one_thread):
    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    encoded = encode(lm, TEXT_A)
    eager = run_encoded(lm, [encoded])[0].attentions
    quarter = -(-encoded.n // 4)  # ceil(n / 4) pixels: cells of 4 tokens, since ceil(n / 2) > ceil(n / 4) for n > 4
    assert encoded.n > 4
    for width, rows in ((quarter, 3), (quarter, 100), (encoded.n, 2)):  # blocks of one cell, of all rows; b = 1
        b = 1 if width == encoded.n else 4
        got, got_b = reduced_maps(lm, encoded, width, rows)
        assert got_b == b
        # pooled by hand from the eager maps: the maximum over each b x b cell
        cells = -(-encoded.n // b)
        expected = np.zeros_like(got)
        for r in range(cells):
            for c in range(cells):
                expected[..., r, c] = eager[..., r * b : (r + 1) * b, c * b : (c + 1) * b].max(axis=(-2, -1))
        np.testing.assert_allclose(got, expected, rtol=0, atol=PROB_ATOL)


@pytest.mark.parametrize("kind", ["modernbert", "mistral"])
def test_window_heads_are_the_models_own_vectors_and_rows(kind, tmp_path, one_thread):
    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    encoded = encode(lm, TEXT_A)
    eager = run_encoded(lm, [encoded], {"qk"})[0]
    start, end = 4, 11
    assert eager.queries is not None and eager.keys is not None and eager.qk_scale is not None
    ran: list[int] = []  # attention modules called, by the transformers layer that owns them
    attentions = [m for name, m in lm.encoder.named_modules() if name.endswith(("attn", "self_attn"))]
    assert len(attentions) == lm.facts.n_layers
    handles = [m.register_forward_pre_hook(lambda *_, l=l: ran.append(l)) for l, m in enumerate(attentions)]
    for layer in range(lm.facts.n_layers):  # modernbert: global, then local; mistral: causal with a sliding window
        for rows in BLOCK_SIZES:
            ran.clear()
            got = window_heads(lm, encoded, layer, start, end, rows)
            assert ran == list(range(layer + 1))  # the pass stops after the layer asked for
            assert (got.layer, got.start, got.end) == (layer, start, end)
            np.testing.assert_allclose(got.rows, eager.attentions[layer, :, start:end], rtol=0, atol=PROB_ATOL)
            for mine, theirs in ((got.queries, eager.queries[layer]), (got.keys, eager.keys[layer])):
                np.testing.assert_allclose(mine, theirs, rtol=0, atol=FORWARD_RTOL * np.abs(theirs).max())
            assert got.scale == pytest.approx(float(eager.qk_scale[layer]), rel=1e-6)
            # the neuron view's arithmetic on them, over all n keys, gives the model's own rows
            for head in range(lm.facts.n_heads):
                for i in range(start, end):
                    ns = neuron_scores(
                        got.queries[head], got.keys[head], i, got.scale, None, lm.facts.window(layer), lm.facts.causal
                    )
                    np.testing.assert_allclose(ns.softmax, got.rows[head, i - start], rtol=0, atol=SOFTMAX_ATOL)
    for handle in handles:
        handle.remove()
    with pytest.raises(ValueError, match="rows 3:3"):
        window_heads(lm, encoded, 0, 3, 3)


def test_large_arrays_are_mapped_while_blockwise_runs_are_under_way(tiny_model, monkeypatch):
    """glibc's mapping threshold is 1 MB from the first block-wise run of a long input's start to the last one's end,
    then its ceiling; a run in another thread meanwhile neither sets it again nor ends it early. A short input's run
    leaves it."""
    calls: list[tuple[int, int]] = []
    monkeypatch.setattr(attnlib.core.blockwise, "_mallopt", lambda: lambda param, value: calls.append((param, value)))
    batch = model_inputs(tiny_model, [encode(tiny_model, TEXT_A)])
    run_blockwise(tiny_model, batch, lambda block: None)
    assert calls == []
    monkeypatch.setattr(attnlib.core.blockwise, "BLOCKWISE_FROM", 4)  # TEXT_A is now a long input
    inner_started, outer_may_end = threading.Event(), threading.Event()

    def inner() -> None:
        def take(block) -> None:
            inner_started.set()
            assert outer_may_end.wait(60)

        run_blockwise(tiny_model, batch, take)

    def outer_take(block) -> None:
        if not inner_started.is_set():
            thread.start()
            assert inner_started.wait(60)

    thread = threading.Thread(target=inner)
    run_blockwise(tiny_model, batch, outer_take)
    assert calls == [(-3, 2**20)]  # the inner run is still under way
    outer_may_end.set()
    thread.join(60)
    assert calls == [(-3, 2**20), (-3, 32 * 2**20)]
