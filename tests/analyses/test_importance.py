"""Head ablation and importance (METHODS §15): hand-worked one-layer models with known effects, the prefix-reusing
batched path against plain forward passes with the hook, every head of a layer against a zero output projection,
Michel's gradient against finite differences, the knockouts, the no-op test, the analyses and their command line."""

from __future__ import annotations

import gc
import json
import math
import threading

import numpy as np
import pytest
import torch

from attnlib.analyses.base import OptionError, run_analysis
from attnlib.analyses.importance import (
    ABLATE,
    IMPORTANCE,
    AblateOptions,
    HeadImportance,
    ImportanceOptions,
    InputAblation,
    importance_accumulators,
    importance_fill,
    no_op_test,
    pruning_order,
    spearman,
)
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import fill_shard, numbered, plan_batches, shard_batches
from attnlib.core.families import layout
from attnlib.core.model import load_model
from attnlib.core.replay import editing_contexts, served_once
from attnlib.core.runner import encode, run
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.stats.importance import (
    CHANGES,
    AblationUnavailable,
    Variant,
    changed_states,
    embedding_change,
    head_gradients,
    hidden_change,
    mlm_positions,
    parse_heads,
    prepare,
    single_head_variants,
    variant_effects,
)
from support.ablation import (
    SENTENCES,
    check_batched_path_equals_a_plain_forward_with_the_hook,
    check_every_head_of_a_layer_ablated_is_a_zero_attention_output,
    check_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values,
    check_mlm_measure_is_the_change_of_the_models_own_loss,
    encoded,
)
from support.cli import cli_json, run_cli
from support.models import bert_tokenizer, save_tiny


@pytest.fixture(scope="module")
def tiny_bert(tmp_path_factory):
    """A tiny BERT masked-LM model, loaded through the library's loader."""
    return load_model(str(save_tiny("bert", tmp_path_factory.mktemp("ablation-bert"))))


# ---------------------------------------------------------------------------------------------- hand-worked models


def hand_model(tmp_path, word_embeddings: np.ndarray, query_bias: np.ndarray | None = None,
               key_weight: np.ndarray | None = None):  # fmt: skip
    """A one-layer BERT (hidden 4, 2 heads of 2) whose layer is worked out by hand: embeddings pass through
    (rows of mean 0 and variance 1, no positions, LayerNorm identity), values and the output projection are the
    identity, the feed-forward adds 0, so the layer's output is LN(LN(x + c)); queries and keys are zero (uniform
    attention) unless given."""
    from transformers import BertConfig, BertForMaskedLM

    tokenizer = bert_tokenizer()
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=4, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=4, max_position_embeddings=64, layer_norm_eps=1e-12)  # fmt: skip
    model = BertForMaskedLM(config)
    eye = torch.eye(4)
    with torch.no_grad():
        emb = model.bert.embeddings
        emb.word_embeddings.weight.copy_(torch.as_tensor(word_embeddings, dtype=torch.float32))
        emb.position_embeddings.weight.zero_()
        emb.token_type_embeddings.weight.zero_()
        layer = model.bert.encoder.layer[0]
        att = layer.attention
        for linear in (att.self.query, att.self.key, att.self.value, att.output.dense):
            linear.bias.zero_()
            linear.weight.zero_()
        att.self.value.weight.copy_(eye)
        att.output.dense.weight.copy_(eye)
        if query_bias is not None:
            att.self.query.bias.copy_(torch.as_tensor(query_bias, dtype=torch.float32))
        if key_weight is not None:
            att.self.key.weight.copy_(torch.as_tensor(key_weight, dtype=torch.float32))
        for linear in (layer.intermediate.dense, layer.output.dense):
            linear.weight.zero_()
            linear.bias.zero_()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    return load_model(str(tmp_path))


def standardised(rows: np.ndarray) -> np.ndarray:
    """Rows of mean 0 and (population) variance 1, which LayerNorm leaves as they are."""
    rows = rows - rows.mean(-1, keepdims=True)
    return rows / rows.std(-1, keepdims=True)


def layer_norm(x: np.ndarray, eps: float = 1e-12) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + eps)


def by_hand(x: np.ndarray, c: np.ndarray, changed: np.ndarray) -> tuple[float, float]:
    """§15's embedding and hidden measures of a one-layer output LN(LN(x + c)) against the changed context."""
    h, h2 = layer_norm(layer_norm(x + c)), layer_norm(layer_norm(x + changed))
    s, s2 = h.mean(0), h2.mean(0)
    embedding = 1 - s @ s2 / (np.linalg.norm(s) * np.linalg.norm(s2))
    hidden = np.mean(np.linalg.norm(h - h2, axis=-1) / np.linalg.norm(h, axis=-1))
    return embedding, hidden


def test_hand_worked_layer_has_the_known_effects(tmp_path):
    """Uniform attention and identity values: c_i = mean_j x_j for every query. Ablating head 0 zeroes dims 0-1;
    drop takes (1/n) x_CLS + (1/n) x_SEP off; renormalise leaves the mean over the other tokens."""
    rng = np.random.default_rng(0)
    lm = hand_model(tmp_path, standardised(rng.normal(size=(len(bert_tokenizer()), 4))))
    e = encode(lm, "The cat sat on the mat.")
    x = lm.encoder.embeddings.word_embeddings.weight.detach().double().numpy()[e.input_ids]
    np.testing.assert_allclose(run(lm, "The cat sat on the mat.").attentions[0], 1 / e.n, rtol=1e-6)  # uniform
    prep = prepare(lm, [e], with_mlm=False)
    special = e.cls_mask | e.sep_mask
    c = np.tile(x.mean(0), (e.n, 1))
    expected = {}
    for head in (0, 1):
        dims = slice(2 * head, 2 * head + 2)
        ablated, dropped, renormalised = c.copy(), c.copy(), c.copy()
        ablated[:, dims] = 0
        dropped[:, dims] -= x[special, dims].sum(0) / e.n
        renormalised[:, dims] = x[~special, dims].mean(0)
        for change, changed in (("ablate", ablated), ("drop", dropped), ("renormalise", renormalised)):
            expected[change, head] = by_hand(x, c, changed)
    variants = single_head_variants(1, 2, ["ablate", "drop", "renormalise"])
    found = variant_effects(prep, variants)
    for k, v in enumerate(variants):
        embedding, hidden = expected[v.change, v.heads[0][1]]
        # float32 layers of width 4: the measures are differences of values ~1, good to ~1e-6
        assert found["embedding"][k, 0] == pytest.approx(embedding, abs=2e-6), v
        assert found["hidden"][k, 0] == pytest.approx(hidden, abs=2e-6), v
    assert found["hidden"].min() > 1e-3  # every change moved the output


def test_drop_of_a_head_with_no_special_attention_changes_nothing(tmp_path):
    """Head 0's keys score the words 1000 and [CLS]/[SEP] 0, so its attention to them is exactly 0: dropping their
    term leaves the model as it is. Head 1 attends uniformly, so its drop does change the output."""
    tokenizer = bert_tokenizer()
    words = np.tile([1.0, 1.0, -1.0, -1.0], (len(tokenizer), 1))
    specials = [tokenizer.cls_token_id, tokenizer.sep_token_id]
    words[specials] = [1.0, -1.0, 1.0, -1.0]
    key_weight = np.zeros((4, 4))
    key_weight[0] = [0.25, 0.25, -0.25, -0.25]  # k_0 = 1 for a word, 0 for [CLS]/[SEP]
    lm = hand_model(tmp_path, words, query_bias=np.array([1000.0 * math.sqrt(2), 0, 0, 0]), key_weight=key_weight)
    e = encode(lm, "The cat sat on the mat.")
    attention = run(lm, "The cat sat on the mat.").attentions[0]
    assert attention[0][:, e.cls_mask | e.sep_mask].max() == 0.0
    prep = prepare(lm, [e], with_mlm=False)
    found = variant_effects(prep, [Variant("drop", ((0, 0),)), Variant("renormalise", ((0, 0),)),
                                   Variant("drop", ((0, 1),))])  # fmt: skip
    assert found["embedding"][:2].max() <= 1e-12 and found["hidden"][:2].max() <= 1e-6
    assert found["hidden"][2, 0] > 1e-3


# ---------------------------------------------------------------------------------------------- every family
# BERT in the quick tier; the other families the issue names in the slow tier.

OTHER_FAMILIES = ("roberta", "distilbert", "albert", "modernbert", "deberta-v2")


@pytest.fixture(
    scope="module", params=["bert", *(pytest.param(kind, marks=pytest.mark.slow) for kind in OTHER_FAMILIES)]
)
def family_lm(request, tmp_path_factory):
    """A tiny masked-LM model of BERT and of each other family, loaded through the library's loader."""
    if request.param == "bert":
        return request.getfixturevalue("tiny_bert")
    return load_model(str(save_tiny(request.param, tmp_path_factory.mktemp(f"ablation-{request.param}"))))


def test_batched_path_equals_a_plain_forward_with_the_hook(family_lm):
    check_batched_path_equals_a_plain_forward_with_the_hook(family_lm)


def test_every_head_of_a_layer_ablated_is_a_zero_attention_output(family_lm):
    check_every_head_of_a_layer_ablated_is_a_zero_attention_output(family_lm)


def test_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values(family_lm):
    check_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values(family_lm)


def test_mlm_measure_is_the_change_of_the_models_own_loss(family_lm):
    check_mlm_measure_is_the_change_of_the_models_own_loss(family_lm)


def test_masked_positions_follow_methods(minilm):
    """max(1, round(0.15 m)) of the m non-special positions, the first of default_rng(seed + index).permutation(m)."""
    e = encode(minilm, "one two three four five six seven eight nine ten eleven twelve thirteen fourteen")
    maskable = ~e.special_mask
    m = int(maskable.sum())
    expected = np.sort(np.flatnonzero(maskable)[np.random.default_rng(7 + 2).permutation(m)[: round(0.15 * m)]])
    np.testing.assert_array_equal(mlm_positions(maskable, seed=7, index=2), expected)
    assert len(mlm_positions(np.array([False, True, False]), 0, 0)) == 1


def test_gradient_importance_equals_finite_differences(tmp_path):
    """dL(x)/dxi[l, h] at xi = 1 against central differences of the masked-LM model's own loss, in float64."""
    lm = load_model(str(save_tiny("bert", tmp_path)))
    lm.mlm.double()
    enc = encoded(lm, SENTENCES[:2])
    prep = prepare(lm, enc)
    masked = {key: value[len(enc) :] for key, value in prep.batch.items()}
    gradient = head_gradients(lm, masked, prep.labels).numpy()  # [B, L, H]
    d, eps = layout(lm.encoder).head_dim, 1e-5

    def losses(layer: int, head: int, scale: float) -> np.ndarray:
        def edit(index, c):
            if index != layer:
                return None
            c = c.clone()
            c[..., head * d : (head + 1) * d] *= scale
            return c

        with torch.no_grad(), editing_contexts(layout(lm.encoder), edit):
            logits = lm.mlm(**masked).logits
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), prep.labels, reduction="none", ignore_index=-100)
        return (ce.sum(1) / (prep.labels != -100).sum(1)).numpy()

    for layer in range(lm.facts.n_layers):
        for head in range(lm.facts.n_heads):
            numeric = (losses(layer, head, 1 + eps) - losses(layer, head, 1 - eps)) / (2 * eps)
            np.testing.assert_allclose(gradient[:, layer, head], numeric, rtol=1e-5, atol=1e-9)
    assert np.abs(gradient).min() > 0


def test_a_model_compared_with_itself_differs_nowhere(tmp_path):
    """No head changed: every measure exactly 0; identical states give exact zeros; a result against itself has no
    difference anywhere."""
    lm = load_model(str(save_tiny("bert", tmp_path)))
    same = run_analysis(ABLATE, lm, AblateOptions(heads=""), text="The cat [MASK] on the mat.").result
    assert (same.embedding, same.hidden, same.similarity, same.mlm) == (0.0, 0.0, 1.0, 0.0)
    assert same.predictions[0].before == same.predictions[0].after
    h = torch.randn(2, 5, 8)
    mask = torch.ones(2, 5)
    assert embedding_change(h, h.clone(), mask).abs().max() == 0 and hidden_change(h, h.clone(), mask).max() == 0
    from attnlib.present.comparison import largest_difference

    first, again = (
        run_analysis(IMPORTANCE, lm, ImportanceOptions(), inputs={"corpus": SENTENCES[:2]}).result for _ in "ab"
    )

    def table(result: HeadImportance) -> dict:
        return {m: {f"{l}-{h}": v for (l, h), v in np.ndenumerate(result.ablation[m])} for m in ("embedding", "hidden")}

    found = largest_difference(table(first), table(again))
    assert found is not None and found.size == 0.0


def test_measures_of_stacked_variants_are_each_variants_own():
    """embedding_change and hidden_change of variants stacked in front [V, B, n, D] against one reference [B, n, D]:
    1 - cos of the masked means and the mean relative change, computed per variant in float64 numpy."""
    rng = np.random.default_rng(0)
    reference, changed = rng.normal(size=(3, 4, 6)), rng.normal(size=(2, 3, 4, 6))
    mask = np.array([[1, 1, 1, 1], [1, 1, 0, 0], [1, 0, 0, 0]])
    as_torch = [torch.as_tensor(a, dtype=torch.float32) for a in (reference, changed, mask)]
    reference, changed = (t.double().numpy() for t in as_torch[:2])  # the float32 inputs, exactly
    embedding, hidden = embedding_change(*as_torch).numpy(), hidden_change(*as_torch).numpy()
    for v in range(2):
        for b in range(3):
            keep = mask[b] == 1
            s, s_m = reference[b, keep].mean(0), changed[v, b, keep].mean(0)
            cos = s @ s_m / np.linalg.norm(s) / np.linalg.norm(s_m)
            ratio = np.linalg.norm(reference[b, keep] - changed[v, b, keep], axis=1) / np.linalg.norm(
                reference[b, keep], axis=1
            )
            # float64 throughout: both sides agree to a few ulp of 1
            assert embedding[v, b] == pytest.approx(1 - cos, abs=1e-12)
            assert hidden[v, b] == pytest.approx(ratio.mean(), rel=1e-12)


def test_replays_leave_nothing_for_the_garbage_collector(tiny_bert):
    """Every tensor of a replay is freed when it goes out of use: none sits in a reference cycle (a cycle in the
    replay's argument swap once kept each replayed layer's input until gc ran, 25 MB a replay on long batches)."""
    prep = prepare(tiny_bert, encoded(tiny_bert))
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in changed_states(prep, single_head_variants(tiny_bert.facts.n_layers, tiny_bert.facts.n_heads, CHANGES)):
            pass
        gc.collect()
        cyclic = [type(o).__name__ for o in gc.garbage if isinstance(o, torch.Tensor)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert cyclic == []


def test_served_once_skips_one_call_in_its_own_thread_only():
    """A served module returns the served tensor for its first matching call in the serving thread, runs as usual
    for every other call and in other threads, and has its own forward back on exit."""
    linear = torch.nn.Linear(3, 2)
    x, other, served = torch.ones(1, 3), torch.ones(4, 3), torch.full((1, 2), 7.0)
    plain = linear(x)
    seen_elsewhere = []
    with served_once(linear, lambda inp: served if inp.shape == (1, 3) else None):
        assert torch.equal(linear(other), torch.nn.functional.linear(other, linear.weight, linear.bias))
        worker = threading.Thread(target=lambda: seen_elsewhere.append(linear(x)))
        worker.start()
        worker.join()
        assert torch.equal(linear(x), served)
        assert torch.equal(linear(x), plain)  # once
    assert torch.equal(seen_elsewhere[0], plain) and "forward" not in linear.__dict__


# ---------------------------------------------------------------------------------------------- the analyses


def test_parse_heads():
    assert parse_heads(" 1-2, 3-0,1-2 ", 6, 12) == ((1, 2), (3, 0))
    assert parse_heads("", 6, 12) == ()
    for bad, match in (("6-0", "outside"), ("0-12", "outside"), ("1_2", "not a layer-head"), ("a-b", "not a")):
        with pytest.raises(OptionError, match=match):
            parse_heads(bad, 6, 12)


def test_knockouts_change_heads_of_one_layer_only(minilm):
    with pytest.raises(OptionError, match="one layer at a time"):
        run_analysis(ABLATE, minilm, AblateOptions(heads="0-1,2-3", change="drop"), text=SENTENCES[0])


def test_no_op_test_by_hand():
    share = np.array([[0.1, 0.2, 0.3], [0.9, 0.8, 0.7]])
    rising, falling = share * 2, -share
    test = no_op_test(share, {"ablate": rising, "drop": falling, "renormalise": None}, "embedding")
    assert test.overall["ablate"] == pytest.approx(1.0) and test.overall["drop"] == pytest.approx(-1.0)
    assert math.isnan(test.overall["renormalise"])
    np.testing.assert_allclose(test.per_layer["ablate"], [1.0, 1.0])
    np.testing.assert_allclose(test.per_layer["drop"], [-1.0, -1.0])
    assert math.isnan(spearman(np.ones(4), np.arange(4)))  # a constant share has no ranking
    data = test.to_json()  # the JSON names the single-head ablation's rho `ablation`, as the issue that asked for it
    assert set(data) == {"ablation", "drop", "renormalise", "per_layer", "measure"}
    assert data["ablation"] == test.overall["ablate"] and set(data["per_layer"]) == {"ablation", "drop", "renormalise"}


def test_pruning_order_breaks_ties_by_layer_then_head():
    effect = np.array([[0.2, 0.1], [0.1, 0.0]])
    assert pruning_order(effect) == [(1, 1), (0, 1), (1, 0), (0, 0)]


def test_importance_on_a_masked_lm_model(tmp_path):
    """Every part of the result on a tiny masked-LM model: shapes, the mlm measure, Michel's importance, the pruning
    curve (its last step, every head removed, equals ablating them all at once), JSON round trip and for_options."""
    lm = load_model(str(save_tiny("bert", tmp_path)))
    options = ImportanceOptions(knockout=True, prune=True)
    result = run_analysis(IMPORTANCE, lm, options, inputs={"corpus": SENTENCES}).result
    L, H = lm.facts.n_layers, lm.facts.n_heads
    assert result.n_inputs == 3 and result.special_share.shape == (L, H) and result.importance.shape == (L, H)
    for change in ("ablate", "drop", "renormalise"):
        for measure in ("embedding", "hidden", "mlm"):
            assert result.effect(change, measure).shape == (L, H)
    np.testing.assert_allclose(np.linalg.norm(result.importance_normalised, axis=1), 1.0)
    assert set(result.pruning) == {"embedding", "hidden", "mlm"}
    curve = result.pruning["embedding"]
    assert curve.removed == [math.ceil(t * L * H / 10) for t in range(1, 11)] and len(curve.order) == L * H
    everything = Variant("ablate", tuple(curve.order))
    whole = np.mean([variant_effects(prepare(lm, [encode(lm, s)], [i]), [everything])["embedding"][0, 0]
                     for i, s in enumerate(SENTENCES)])  # fmt: skip
    assert curve.effect[-1] == pytest.approx(whole, rel=1e-6)
    back = HeadImportance.from_json(json.loads(json.dumps(IMPORTANCE.to_json(result, "m"), allow_nan=False)))
    np.testing.assert_allclose(back.effect("drop", "mlm"), result.effect("drop", "mlm"))
    assert back.pruning["embedding"].order == curve.order and back.no_op().overall == pytest.approx(
        result.no_op().overall
    )
    trimmed = result.for_options(ImportanceOptions())
    assert trimmed.knockout is None and trimmed.pruning is None and "knockout" not in trimmed.to_json()


def test_ablate_predictions_at_typed_masks(tmp_path):
    lm = load_model(str(save_tiny("bert", tmp_path)))
    found = run_analysis(ABLATE, lm, AblateOptions(heads="1-0,1-1,1-2,1-3"), text="The cat [MASK] on the mat.").result
    assert isinstance(found, InputAblation) and found.mlm is not None
    (prediction,) = found.predictions
    assert found.tokens[prediction.position] == "[MASK]" and len(prediction.before) == 5
    assert prediction.before != prediction.after  # a whole layer off changes the probabilities


# ---------- slow tests


@pytest.mark.slow
def test_importance_halves_merge_to_the_whole(minilm):
    """Shards of whole batches (as Ray deals them, each input carrying its corpus index) merge into the local result."""
    items = [CorpusInput(s) for s in SENTENCES * 2]
    options = ImportanceOptions(knockout=True)
    fill = IMPORTANCE.make_fill(options)
    whole = importance_fill(minilm, items, importance_accumulators(minilm, options), 2, None, options)[0]
    shards = shard_batches(plan_batches(minilm, items, 2), 2)
    make = IMPORTANCE.make_accumulators(options)
    parts = [fill_shard(minilm, make, fill, [[numbered(items[i], i) for i in b] for b in shard], 2) for shard in shards]
    merged = parts[0][0].merge(parts[1][0])
    a, b = whole.result(options), merged.result(options)
    assert b.n_inputs == 6
    for change in ("ablate", "drop", "renormalise"):
        np.testing.assert_allclose(b.effect(change), a.effect(change), rtol=1e-6, atol=1e-12)
    np.testing.assert_allclose(b.special_share, a.special_share, rtol=1e-6)


@pytest.mark.slow
def test_without_a_family_layout_ablation_says_why(tmp_path):
    from transformers import MegatronBertConfig, MegatronBertForMaskedLM

    tokenizer = bert_tokenizer()
    config = MegatronBertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                intermediate_size=64)  # fmt: skip
    MegatronBertForMaskedLM(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    with pytest.raises(AblationUnavailable, match="not available for 'megatron-bert' models"):
        run_analysis(ABLATE, load_model(str(tmp_path)), AblateOptions(heads="0-0"), text=SENTENCES[0])
    ran = run_cli("importance", "--corpus", str(CLASSROOM_SINGLE), "--limit", "2", "--model", str(tmp_path))
    assert ran.error.startswith("error: Head ablation")


@pytest.mark.slow
def test_cli_ablate_and_its_errors():
    data = cli_json("ablate", "--text", SENTENCES[1], "--heads", "1-2,3-0", "--json")
    assert data["heads"] == [[1, 2], [3, 0]] and data["mlm"] is None and data["embedding"] > 0
    assert {"embedding", "hidden", "mlm", "similarity", "tokens", "predictions"} <= data.keys()
    for args, said in (
        (["ablate", "--text", "x", "--heads", "6-0"], "outside this model's 6 layers"),
        (["ablate", "--text", "x", "--heads", "1:2"], "not a layer-head pair"),
        (["importance", "--corpus", str(CLASSROOM_SINGLE), "--measure", "mlm"], "no trained masked-language"),
    ):
        assert said in run_cli(*args, "--json").error


@pytest.mark.slow
def test_every_family_runs_ablation(family_model):
    """Every tiny family of the fixtures: one head of the last layer off changes the output; the mlm measure is
    there exactly when the checkpoint has a trained masked-LM head."""
    lm = family_model
    found = run_analysis(ABLATE, lm, AblateOptions(heads=f"{lm.facts.n_layers - 1}-0"), text=SENTENCES[0]).result
    assert found.hidden > 0 and (found.mlm is None) == (lm.mlm is None)
    # and the replay that serves the lowest changed layer's projections is each family's own forward pass
    check_batched_path_equals_a_plain_forward_with_the_hook(lm)
    check_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values(lm)
