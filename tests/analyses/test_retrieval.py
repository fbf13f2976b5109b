"""The retrieval score (METHODS §20): the copy check on maps built by hand where the copying heads are known, the
needle's place in the input, the attention rows captured while decoding against the model's own output_attentions
of the whole sequence, greedy decoding against plain forward passes, teacher forcing, and the command's refusals."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlib
from attnlib.analyses.retrieval import (
    RETRIEVAL,
    RetrievalResult,
    RetrievalSums,
    RetrievalTest,
    bos_of,
    continuation_ids,
)
from attnlib.core.corpus import read_corpus
from attnlib.core.decoding import greedy_decode
from attnlib.core.model import load_model
from attnlib.results.files import ResultFileError
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.stats.importance import mlm_head
from attnlib.stats.retrieval import copy_scores, needle_test, retrieval_heads, rouge1_recall, rouge_words
from support.cli import run_cli
from support.json_keys import KEYS, TEST_KEYS
from support.models import save_tiny

NEEDLE, QUESTION = "The cat sat.", "Who sat?"
# float32 weights (eps 2^-23) from softmaxes of at most 64 keys over dot products of 32 numbers: two exact ways of
# computing them (block-wise with the KV cache; eager over the whole sequence) differ by a few eps per term summed
ROW_TOLERANCE = 64 * 2**-23


@pytest.fixture(scope="module", params=["gpt2", "llama", "mistral"])
def decoder(request, tmp_path_factory):
    """A tiny GPT-2 (no BOS), Llama (BOS, grouped-query) and Mistral (every layer a sliding window of 3), loaded."""
    return load_model(str(save_tiny(request.param, tmp_path_factory.mktemp(request.param))))


def _peaked(keys: int, peaks: list[int]) -> np.ndarray:
    """Rows [heads, keys]: 0.01 everywhere and 0.5 at each head's peak key (-1: a uniform row, argmax key 0)."""
    rows = np.full((len(peaks), keys), 0.01)
    for head, key in enumerate(peaks):
        if key >= 0:
            rows[head, key] = 0.5
    return rows


def test_copy_check_on_maps_built_by_hand():
    """Input x = 5..10 with the needle at [2, 5) (tokens 7, 8, 9), decoded 7, 8, 8, 9. Each head's strongest key per
    step: (0,0) always the needle token just produced (copies keys 2, 3, 3, 4: score 3/3); (0,1) always key 2 (a
    copy at step 0 only: 1/3); (0,2) key 0, outside the needle (0); (1,0) key 3 at steps 1 and 2 (one key twice:
    1/3); (1,1) at step 2 key 7, the 8 decoded at step 1, equal but outside the needle (0); (1,2) uniform rows
    (argmax 0: 0)."""
    x, span, decoded = [5, 6, 7, 8, 9, 10], (2, 5), [7, 8, 8, 9]
    peaks = [  # per step, per layer, per head
        [[2, 2, 0], [0, 0, -1]],
        [[3, 2, 0], [3, 0, -1]],
        [[3, 2, 0], [3, 7, -1]],
        [[4, 2, 0], [1, 0, -1]],
    ]
    steps = [np.stack([_peaked(len(x) + t, layer) for layer in step]) for t, step in enumerate(peaks)]
    scores = copy_scores(steps, x, span, decoded)
    np.testing.assert_array_equal(scores, [[1, 1 / 3, 0], [1 / 3, 0, 0]])
    assert retrieval_heads(scores) == [[0, 0], [0, 1], [1, 0]] and retrieval_heads(scores, 0.5) == [[0, 0]]


def test_needle_is_placed_at_its_depth():
    haystack, needle, prompt = list(range(100, 120)), [1, 2, 3], [7, 8]
    for depth, before in ((0, 0), (0.25, 3), (0.5, 5), (1, 10)):  # 0.25 * 10 = 2.5, rounded half up
        test = needle_test(haystack, needle, prompt, 10, depth, bos=0)
        assert test.input_ids == [0, *range(100, 100 + before), 1, 2, 3, *range(100 + before, 110), 7, 8]
        assert test.needle_span == (1 + before, 4 + before)
    assert needle_test(haystack, needle, prompt, 4, 0.5, bos=None).input_ids == [100, 101, 1, 2, 3, 102, 103, 7, 8]
    for bad, message in (({"length": 21}, "fewer than"), ({"needle": []}, "no token"), ({"depth": 1.5}, "from 0")):
        arguments = dict(haystack=haystack, needle=needle, prompt=prompt, length=10, depth=0.5, bos=None) | bad
        with pytest.raises(ValueError, match=message):
            needle_test(**arguments)


def test_captured_rows_are_the_models_own_and_greedy_is_plain_argmax(decoder, one_thread):
    """Each step's row (prefill block-wise in blocks of 3 rows, then one row per step with the KV cache) equals the
    row of the model's own output_attentions over the whole decoded sequence, and the decoded tokens are the argmax
    of its logits there (no cache)."""
    lm = decoder
    ids = lm.tokenizer("The cat sat on the mat because it was warm and the dog slept.")["input_ids"]
    captured: dict[int, np.ndarray] = {}
    decoded = greedy_decode(lm, ids, 9, on_rows=lambda t, _y, rows: captured.update({t: rows.copy()}), block_rows=3,
                            head=mlm_head(lm))  # fmt: skip
    assert decoded == greedy_decode(lm, ids, 9, head=mlm_head(lm))  # without capture: the same tokens
    assert lm.causal_lm is not None
    with torch.no_grad():
        out = lm.causal_lm(torch.tensor([ids + decoded[:-1]]), output_attentions=True)
    n = len(ids)
    assert (
        decoded == out.logits[0, n - 1 :].argmax(-1).tolist() and len(decoded) == 9 and sorted(captured) == [*range(9)]
    )
    maps = torch.stack(out.attentions)[:, 0].numpy()  # [layers, heads, n + 8, n + 8]
    for t, rows in captured.items():
        np.testing.assert_allclose(rows, maps[:, :, n - 1 + t, : n + t], atol=ROW_TOLERANCE, rtol=0)


def test_scores_are_the_copy_check_of_the_models_own_attention(decoder, one_thread):
    """Greedy and forced runs: every test's input is the corpus's text with the needle at its depth (BOS where the
    model starts with one), forced decoding is the needle, and the scores are the mean copy check of the rows of the
    model's own output_attentions over the whole sequence."""
    lm = decoder
    bos = [lm.tokenizer.bos_token_id] if bos_of(lm) is not None else []
    text = " ".join(item.text_a for item in read_corpus(CLASSROOM_SINGLE, 3))  # type: ignore[misc]
    corpus_ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    needle = continuation_ids(lm.tokenizer, NEEDLE)
    for forced in (False, True):
        run = attnlib.retrieval(lm, corpus=CLASSROOM_SINGLE, limit=3, needle=NEEDLE, question=QUESTION,
                                lengths="8,14", depths="0,0.5,1", forced=forced)  # fmt: skip
        tests = run.result.tests
        assert [(t.length, t.depth) for t in tests] == [(c, d) for c in (8, 14) for d in (0, 0.5, 1)]
        per_test = []
        for test in tests:
            start, end = test.needle_span
            before = int(test.depth * test.length + 0.5)
            assert test.input_ids[:start] == bos + corpus_ids[:before] and test.input_ids[start:end] == needle
            assert test.input_ids[end : end + test.length - before] == corpus_ids[before : test.length]
            assert test.forced is forced
            if forced:
                assert test.decoded_ids == needle
            else:
                assert len(test.decoded_ids) == len(needle) + 5 or test.decoded_ids[-1] == lm.tokenizer.eos_token_id
            with torch.no_grad():
                whole = torch.tensor([test.input_ids + test.decoded_ids[:-1]])
                maps = torch.stack(lm.encoder(whole, output_attentions=True).attentions)[:, 0].numpy()
            n = len(test.input_ids)
            steps = [maps[:, :, n - 1 + t, : n + t] for t in range(len(test.decoded_ids))]
            per_test.append(copy_scores(steps, test.input_ids, test.needle_span, test.decoded_ids))
            decoded = lm.tokenizer.decode(test.decoded_ids, skip_special_tokens=True)
            assert test.recall == (None if forced else rouge1_recall(NEEDLE, decoded))
        counted = [s for s, t in zip(per_test, tests) if t.forced or t.recall > 0.5]  # type: ignore[operator]
        assert run.result.counted == len(counted) == (len(tests) if forced else 0)  # random weights retrieve nothing
        if forced:
            np.testing.assert_allclose(run.result.scores, np.mean(counted, axis=0), atol=1e-12)
            sliding = any(w is not None for w in lm.facts.windows)  # Mistral's window of 3 never sees the needle
            assert run.result.scores.any() == (not sliding)  # random weights: forced copies happen
            assert run.to_json()["retrieval_heads"] == retrieval_heads(np.mean(per_test, axis=0))
        else:
            printed = run.to_json()
            assert np.isnan(run.result.scores).all() and printed["scores"][0][0] is None and printed["counted"] == 0
            assert "retrieved the needle in none of the 6 tests" in printed["reason"]


def test_only_tests_that_retrieved_the_needle_count():
    """§20 as Wu et al.'s code: a greedy test's scores count only where the needle's ROUGE-1 recall is above 0.5; the
    mean is over those, merged accumulators agree, and with none counted the scores are NaN with a reason."""
    layers, heads = 2, 3
    scores = [np.full((layers, heads), v) for v in (0.2, 0.9, 0.4, 0.6)]
    recalls = [0.8, 0.5, 0.51, 0.0]  # 0.5 is not above the line
    made = [RetrievalTest(4, 0.5, [1, 2, 3, 4], (1, 2), [2], False, r) for r in recalls]
    one, other = RetrievalSums(layers, heads), RetrievalSums(layers, heads)
    for k, (test, s) in enumerate(zip(made, scores)):
        (one if k < 2 else other).add(test, s)
    result = one.merge(other).result()
    np.testing.assert_allclose(result.scores, np.full((layers, heads), (0.2 + 0.4) / 2))
    assert result.counted == 2 and result.reason is None and [t.counts for t in result.tests] == [1, 0, 1, 0]
    none = RetrievalSums(layers, heads)
    none.add(made[1], scores[1])
    assert np.isnan(none.result().scores).all() and "best ROUGE-1 recall" in (none.result().reason or "")
    forced = RetrievalTest(4, 0.5, [1, 2, 3, 4], (1, 2), [2], True, None)
    assert forced.counts


def test_rouge1_recall_as_rouge_score_computes_it():
    """rouge_score's README example (use_stemmer=True: recall 6/9), and by hand: lower-cased, split on anything not a
    letter or digit, words of more than 3 letters stemmed ('jumping' -> 'jump'; 'was' is not), counts clipped."""
    assert (
        rouge1_recall("The quick brown fox jumps over the lazy dog", "The quick brown dog jumps on the log.") == 6 / 9
    )
    assert rouge_words("Jumping, DOGS! was x2") == ["jump", "dog", "was", "x2"]
    assert rouge1_recall("the the cat", "the cat") == 2 / 3 and rouge1_recall("", "anything") == 0.0
    assert rouge1_recall("sit in Dolores Park", "sitting in dolores parks") == 1.0


def test_result_json_is_read_back_and_checked():
    data = {"scores": [[0.2, 0.0]], "threshold": 0.1, "retrieval_heads": [[0, 0]], "counted": 1, "reason": None,
            "tests": [{"length": 2, "depth": 0.5, "input_ids": [4, 1, 2, 5], "needle_span": [1, 3],
                       "decoded_ids": [1, 2], "forced": True, "recall": None, "counts": True}]}  # fmt: skip
    back = RetrievalResult.from_json(data)
    assert back.to_json()["tests"] == data["tests"] and back.heads == [[0, 0]]
    assert set(back.to_json()) == KEYS["retrieval"] - {"model"} and set(data["tests"][0]) == TEST_KEYS
    with pytest.raises(ResultFileError, match="retrieval_heads"):
        RetrievalResult.from_json({**data, "retrieval_heads": []})
    with pytest.raises(ResultFileError, match="counted"):
        RetrievalResult.from_json({**data, "counted": 0})
    with pytest.raises(ResultFileError, match="needle_span"):
        RetrievalResult.from_json({**data, "tests": [{**data["tests"][0], "needle_span": [3, 9]}]})
    with pytest.raises(ResultFileError, match="malformed"):
        RetrievalResult.from_json({k: v for k, v in data.items() if k != "tests"})


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return save_tiny("gpt2", tmp_path_factory.mktemp("gpt2"))


def test_command_prints_the_json_and_refuses_bad_input_in_one_line(gpt2_dir, tmp_path, one_thread):
    small = ("--needle", NEEDLE, "--question", QUESTION, "--lengths", "10", "--corpus", str(CLASSROOM_SINGLE))
    ran = run_cli("retrieval", "--model", str(gpt2_dir), *small, "--forced", "--json")
    assert ran.code == 0, ran.err
    printed = ran.json
    assert set(printed) == KEYS["retrieval"] and len(printed["tests"]) == 5 and printed["threshold"] == 0.1
    assert np.shape(printed["scores"]) == (2, 4) and all(t["forced"] for t in printed["tests"])
    t5 = save_tiny("t5", tmp_path / "t5")
    refusals = {
        ("--model", str(t5)): "is an encoder-decoder",
        ("--model", str(gpt2_dir), "--needle", " "): "needle must hold some text",
        ("--model", str(gpt2_dir), "--lengths", "10,x"): "lengths must be whole numbers",
        ("--model", str(gpt2_dir), "--lengths", "60"): "longer than the 64 tokens",
        ("--model", str(gpt2_dir), "--lengths", "10", "--depths", "0.5,2"): "fractions from 0 to 1",
        ("--model", str(gpt2_dir), "--lengths", "10", "--engine", "ray"): "local engine only",
    }
    for argv, words in refusals.items():
        error = run_cli("retrieval", *small, *argv, "--json").error
        assert words in error, error
    encoder = run_cli("retrieval", "--needle", NEEDLE, "--json").error  # the default model, the default haystack
    assert "is an encoder" in encoder and "needs a decoder" in encoder


def test_the_default_haystack_is_ewt_dev():
    assert RETRIEVAL.default_corpus is not None and RETRIEVAL.default_corpus.name == "en_ewt-ud-dev.conllu"


@pytest.mark.slow  # ~3 s of CPU; over 10 s on a loaded machine
def test_a_long_prompt_runs_block_wise_and_its_rows_are_the_models_own(tmp_path, monkeypatch, one_thread):
    """1,100 tokens (above BLOCKWISE_FROM) on a tiny Llama with 2,048 positions: the prefill runs block-wise as a long
    input (default block height: two blocks), and every step's row is the model's own eager row."""
    import transformers as tf

    import attnlib.core.decoding as decoding
    from support.models import tiny_decoder_config, tokenizer_for

    tokenizer = tokenizer_for("llama")
    tokenizer.model_max_length = 2048
    config = tiny_decoder_config("llama", tokenizer)
    config.max_position_embeddings = 2048
    torch.manual_seed(0)
    tf.LlamaForCausalLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    lm = load_model(str(tmp_path))
    runs = []

    def counted(encoder, consumer, rows, long_input):
        runs.append((rows, long_input))
        return blockwise(encoder, consumer, rows, long_input)

    blockwise = decoding.blockwise_attention
    monkeypatch.setattr(decoding, "blockwise_attention", counted)
    ids = list(np.random.default_rng(0).integers(10, len(tokenizer), 1100))
    captured: dict[int, np.ndarray] = {}
    decoded = greedy_decode(
        lm, ids, 3, on_rows=lambda t, _y, rows: captured.update({t: rows.copy()}), head=mlm_head(lm)
    )
    assert len(runs) == 1 and runs[0][1] and runs[0][0] < 1100  # one long-input run, in more than one block
    with torch.no_grad():
        maps = torch.stack(lm.encoder(torch.tensor([ids + decoded[:-1]]), output_attentions=True).attentions)[:, 0]
    n = len(ids)
    for t, rows in captured.items():
        # 1,100 keys: the softmax's sum of up to 1,102 terms, ROW_TOLERANCE's bound scaled to them
        np.testing.assert_allclose(rows, maps[:, :, n - 1 + t, : n + t].numpy(), atol=1102 * 2**-23, rtol=0)
