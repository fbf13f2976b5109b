"""What the ablation tests share: their sentences, and the checks that hold for a tiny model of every family
(analyses/test_importance.py runs them on BERT in the quick tier and on the other families in the slow tier)."""

from __future__ import annotations

import copy

import numpy as np
import torch

from attnlib.core.families import layout
from attnlib.core.replay import editing_contexts
from attnlib.core.runner import encode, model_inputs, run
from attnlib.stats.importance import (
    Variant,
    changed_states,
    heads_off,
    prepare,
    single_head_variants,
    variant_effects,
)

SENTENCES = ["The cat sat on the mat.", "I went to the store.", "At the store, I bought fresh strawberries."]

# float32 layers of hidden 32 replayed in batches of another size: a few hundred ulp of values ~1 (the 1e-5)
REPLAY_ATOL = 1e-5


def encoded(lm, sentences=SENTENCES) -> list:
    """The sentences encoded for this model."""
    return [encode(lm, s) for s in sentences]


def check_batched_path_equals_a_plain_forward_with_the_hook(lm) -> None:
    """Every single-head ablation replayed from its layer's recorded input, the heads stacked along the batch,
    gives the plain forward pass with that head's context vectors zeroed."""
    enc = encoded(lm)
    batch = model_inputs(lm, enc)
    prep = prepare(lm, enc, with_mlm=False)
    L, H = lm.facts.n_layers, lm.facts.n_heads
    seen = 0
    for chunk, states in changed_states(prep, single_head_variants(L, H)):
        out = states.view(len(chunk), len(enc), *states.shape[1:])
        for k, variant in enumerate(chunk):
            with heads_off(lm, variant.heads), torch.no_grad():
                plain = lm.encoder(**batch).last_hidden_state
            np.testing.assert_allclose(out[k].numpy(), plain.numpy(), atol=REPLAY_ATOL)
            seen += 1
    assert seen == L * H


def check_every_head_of_a_layer_ablated_is_a_zero_attention_output(lm) -> None:
    """Ablating every head of a layer equals a model whose attention output projection weight is zero there (its
    output is then the bias alone, as for c = 0); ALBERT shares its layer, so there every layer's heads go."""
    enc = encoded(lm)
    batch = model_inputs(lm, enc)
    lay = layout(lm.encoder)
    shared = len({id(s.output) for s in lay.sites}) < len(lay.sites)
    layers = range(lm.facts.n_layers) if shared else [lm.facts.n_layers - 1]
    heads = tuple((l, h) for l in layers for h in range(lm.facts.n_heads))
    zeroed = copy.deepcopy(lm.encoder)
    with torch.no_grad():
        for l in layers:
            layout(zeroed).sites[l].output.weight.zero_()
        expected = zeroed(**batch).last_hidden_state
        with heads_off(lm, heads):
            plain = lm.encoder(**batch).last_hidden_state
    np.testing.assert_allclose(plain.numpy(), expected.numpy(), atol=REPLAY_ATOL)
    (_, states), *_ = changed_states(prepare(lm, enc, with_mlm=False), [Variant("ablate", heads)])
    np.testing.assert_allclose(states.numpy(), expected.numpy(), atol=REPLAY_ATOL)


def check_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values(lm) -> None:
    """drop and renormalise of each head of the last layer, batched, against a plain forward pass whose context
    vectors are replaced by the knockout computed from the runner's attention weights and value vectors."""
    text = SENTENCES[2]
    e = encode(lm, text)
    r = run(lm, text, capture_qk=False, capture_norms=True)
    layer, d = lm.facts.n_layers - 1, layout(lm.encoder).head_dim
    K = e.cls_mask | e.sep_mask
    A, v = r.attentions[layer].astype(np.float64), r.values[layer].astype(np.float64)  # [H, n, n], [H, n, d]
    knocked = {"drop": A * K, "renormalise": None}
    rest = A * ~K
    knocked["renormalise"] = rest / rest.sum(-1, keepdims=True)
    prep = prepare(lm, [e], with_mlm=False)
    variants = [Variant(c, ((layer, h),)) for c in ("drop", "renormalise") for h in range(lm.facts.n_heads)]
    batched = {id(v): s for chunk, states in changed_states(prep, variants) for v, s in zip(chunk, states)}
    for variant in variants:
        h = variant.heads[0][1]
        term = torch.as_tensor(knocked[variant.change][h] @ v[h], dtype=torch.float32)  # [n, d]

        def edit(index, c, h=h, term=term, change=variant.change):
            if index != layer:
                return None
            c = c.clone()
            c[0, :, h * d : (h + 1) * d] = c[0, :, h * d : (h + 1) * d] - term if change == "drop" else term
            return c

        with torch.no_grad(), editing_contexts(layout(lm.encoder), edit):
            plain = lm.encoder(**model_inputs(lm, [e])).last_hidden_state[0]
        np.testing.assert_allclose(batched[id(variant)].numpy(), plain.numpy(), atol=REPLAY_ATOL)


def check_mlm_measure_is_the_change_of_the_models_own_loss(lm) -> None:
    """The mlm effect of ablating a head is L_M - L of the masked-LM model's own logits at §15's positions."""
    enc = encoded(lm)
    prep = prepare(lm, enc, seed=3)
    assert prep.labels is not None
    masked = {key: value[len(enc) :] for key, value in prep.batch.items()}

    def loss(heads) -> np.ndarray:
        with heads_off(lm, heads), torch.no_grad():
            logits = lm.mlm(**masked).logits.double()
        ce = torch.nn.functional.cross_entropy(logits.transpose(1, 2), prep.labels, reduction="none", ignore_index=-100)
        return (ce.sum(1) / (prep.labels != -100).sum(1)).numpy()

    head = (lm.facts.n_layers - 1, 1)
    found = variant_effects(prep, [Variant("ablate", (head,))])["mlm"][0]
    # float32 logits over a vocabulary of ~30k: the losses agree to ~1e-6
    np.testing.assert_allclose(found, loss([head]) - loss([]), atol=2e-5)
    assert np.abs(found).max() > 0
