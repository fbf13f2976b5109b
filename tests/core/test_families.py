"""Every family of attnlib.core.families on its tiny random model (tests/support/models.py): attention is the model's own,
q.k (plus the family's relative terms) gives the logits, the norms rebuild the attention block's output, replay and
context edits reproduce the model's forward pass, and HTA equals reverse mode; for the decoder families (METHODS §12's
pre-norm decoders, §18) the norms rebuild the residual stream after attention and HTA equals reverse mode as well."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.core.families import BY_MODEL_TYPE, FAMILIES, UnsupportedModelError, layout
from attnlib.core.replay import captured_contexts, editing_contexts, record
from attnlib.core.runner import encode, model_inputs, run, run_encoded
from attnlib.results.shipped import CLASSROOM_SINGLE
from attnlib.stats import norms
from attnlib.stats.hta import choice, forward, hidden_token_attribution
from support.cli import cli_json, run_cli
from support.families import TEXT_A, TEXT_B
from support.models import DECODER_KINDS, MODERNBERT_WINDOW, move_off_initial, save_tiny
from support.reference import reverse_mode_reference
from support.tolerances import EPS32

pytestmark = pytest.mark.usefixtures("one_thread")
SENTENCES = ["A dog barked.", "The cat sat on the mat because it was warm.", "Why?"]


def _logits(r, facts) -> np.ndarray:
    """qk_scale * q.k + score_bias with keys outside a local layer's window at -inf: [layers, heads, n, n], float64."""
    q, k = r.queries.astype(np.float64), r.keys.astype(np.float64)
    logits = r.qk_scale[:, None, None, None] * np.einsum("lhid,lhjd->lhij", q, k)
    if r.score_bias is not None:
        logits = logits + r.score_bias
    distance = np.abs(np.arange(r.n)[:, None] - np.arange(r.n)[None])
    for layer in range(facts.n_layers):
        window = facts.window(layer)
        if window is not None:
            logits[layer][:, distance > window] = -np.inf
    return logits


def _softmax(logits: np.ndarray) -> np.ndarray:
    e = np.exp(logits - logits.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def test_every_model_type_has_one_family():
    assert len(BY_MODEL_TYPE) == sum(len(f.model_types) for f in FAMILIES)
    assert {"bert", "roberta", "xlm-roberta", "camembert", "distilbert", "albert", "electra", "ernie", "deberta"} | {
        "deberta-v2",
        "modernbert",
        "mpnet",
        "roformer",
    } <= set(BY_MODEL_TYPE)


def test_attention_is_the_models_own(family_model):
    """run's attentions are the eager attentions the model returns; a padded batch gives each input's own maps."""
    lm = family_model
    enc = encode(lm, TEXT_A, TEXT_B)
    with torch.no_grad():
        own = lm.encoder(**model_inputs(lm, [enc]), output_attentions=True).attentions
    r = run(lm, TEXT_A, TEXT_B, capture_qk=False)
    assert r.attentions.shape == (lm.facts.n_layers, lm.facts.n_heads, enc.n, enc.n)
    np.testing.assert_array_equal(r.attentions, torch.stack(own)[:, 0].numpy())
    np.testing.assert_allclose(r.attentions.sum(-1), 1.0, atol=1e-5)  # softmax rows of float32, n <= 20 terms
    batched = run_encoded(lm, [encode(lm, s) for s in SENTENCES])
    for s, b in zip(SENTENCES, batched):
        # padding adds float32 zeros to the softmax sums, and the kernels may block differently: a few ulp of 1
        np.testing.assert_allclose(b.attentions, run(lm, s, capture_qk=False).attentions, atol=1e-6)


def test_queries_and_keys_give_the_logits(family_model):
    """softmax(qk_scale q.k + score_bias), keys outside the window masked, is the model's attention."""
    lm = family_model
    r = run(lm, TEXT_A, TEXT_B, capture_qk=True)
    assert r.queries.shape == r.keys.shape == (lm.facts.n_layers, lm.facts.n_heads, r.n, lm.facts.head_dim)
    # float32 q, k and bias of magnitude ~1, exponentiated: relative errors of ~1e-7 in the weights
    np.testing.assert_allclose(_softmax(_logits(r, lm.facts)), r.attentions, atol=1e-5)
    family = BY_MODEL_TYPE[lm.facts.model_type]
    assert (r.score_bias is not None) == (family.scores in ("disentangled", "relative_bias"))


def test_norms_rebuild_the_attention_blocks_output(family_model):
    """f_h(x_j) from the captured values and the model's W_O: sum_j g_i(z_ij) + g_i(b_O) + beta is the block's output
    (post-LN: its LayerNorm's output; pre-LN: x_i + the attention output)."""
    lm = family_model
    lay = layout(lm.encoder)
    post = lay.family.post_layer_norm
    seen: list[torch.Tensor] = []
    modules = dict.fromkeys(s.norm if post else s.block for s in lay.sites)
    hooks = [
        m.register_forward_hook(lambda _m, _a, o: seen.append(o[0] if isinstance(o, tuple) else o)) for m in modules
    ]
    try:
        r = run(lm, TEXT_A, TEXT_B, capture_qk=False, capture_norms=True)
    finally:
        for hook in hooks:
            hook.remove()
    w = r.norm_weights
    assert w.post_layer_norm == post
    vectors = norms.head_vectors(r.values, w.out_weight)
    for layer in range(lm.facts.n_layers):
        parts = norms.layer_norm_parts(
            r.attentions[layer],
            vectors[layer],
            r.layer_inputs[layer],
            w.out_bias[layer],
            w.gamma[layer],
            w.beta[layer],
            float(w.eps[layer]),
            post_layer_norm=post,
        )
        block = seen[layer][0].numpy() + (0 if post else r.layer_inputs[layer])
        # float32 sums over n keys and hidden 32 of terms ~1: 1e-5 is about 100 ulp
        np.testing.assert_allclose(parts.output(), block, atol=1e-5)
    maps = norms.norm_maps(r)
    assert maps.residual_ln.shape == maps.layer_norm.shape == (lm.facts.n_layers, r.n, r.n)
    np.testing.assert_allclose(maps.residual_ln[-1], np.linalg.norm(parts.parts, axis=-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(maps.residual_ln_rollout.sum(-1), 1.0, atol=1e-5)


# where each decoder kind's residual stream is x + the attention block's output: the input of the next module, by path
# from the base model (read off the transformers sources, not attnlib's families); GPT-NeoX adds attention and
# feed-forward to x in parallel, so there it is x + the attention module's own output
AFTER_ATTENTION = {
    "gpt2": "h.{}.ln_2",
    "opt": "decoder.layers.{}.final_layer_norm",  # OPT reads it as [batch * n, hidden]
    "gemma2": "layers.{}.pre_feedforward_layernorm",  # after Gemma 2's and 3's RMSNorm of the attention output
    "gemma3": "layers.{}.pre_feedforward_layernorm",
    "olmo2": "layers.{}.mlp",  # OLMo 2's feed-forward reads x + its RMSNorm of the attention output, unnormed
    "gpt-neox": None,
}


@pytest.fixture(scope="module", params=DECODER_KINDS)
def decoder_model(request, tmp_path_factory):
    """(kind, its tiny decoder loaded through the library's loader) with every norm's weight moved off its initial
    value (Llama's 1, Gemma's 0 in 1 + w) at random, so that a misplaced gamma cannot pass."""
    from attnlib.core.model import load_model

    kind = request.param
    lm = load_model(str(save_tiny(kind, tmp_path_factory.mktemp(f"decoder-{kind}"))))
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for module in lm.encoder.modules():
            if "norm" in type(module).__name__.lower() and getattr(module, "weight", None) is not None:
                module.weight.add_(0.5 * torch.randn(module.weight.shape, generator=generator))
    return kind, lm


def _residual_after_attention(lm, kind: str, text: str) -> list[np.ndarray]:
    """x + the attention block's output [n, hidden] of every layer, from hooks on the model's own modules."""
    seen: list[np.ndarray] = []
    n_layers = lm.facts.n_layers
    path = AFTER_ATTENTION.get(kind, "layers.{}.post_attention_layernorm")
    if path is None:  # GPT-NeoX: x (the layer's input) + the attention module's output
        inputs: list[torch.Tensor] = []
        hooks = [lm.encoder.get_submodule(f"layers.{l}").register_forward_pre_hook(
            lambda _m, args, kwargs: inputs.append((args[0] if args else kwargs["hidden_states"])[0]), with_kwargs=True
        ) for l in range(n_layers)]  # fmt: skip
        hooks += [lm.encoder.get_submodule(f"layers.{l}.attention").register_forward_hook(
            lambda _m, _a, out: seen.append((inputs[len(seen)] + out[0][0]).numpy())
        ) for l in range(n_layers)]  # fmt: skip
    else:
        hooks = [lm.encoder.get_submodule(path.format(l)).register_forward_pre_hook(
            lambda _m, args: seen.append(args[0].reshape(-1, args[0].shape[-1]).numpy())
        ) for l in range(n_layers)]  # fmt: skip
    try:
        with torch.no_grad():
            lm.encoder(**model_inputs(lm, [encode(lm, text)]), use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_decoder_norms_rebuild_the_residual_stream_after_attention(decoder_model):
    """METHODS §12 for pre-norm decoders: sum_j z_ij + g_i(b_O), from the captured values and the model's W_O (Gemma 2
    and 3: through their RMSNorm of the attention output, with its captured r_i), is x_i + the attention block's output
    that the model itself carries on; the batch maps' residual_ln are the parts' norms."""
    kind, lm = decoder_model
    r = run(lm, TEXT_A, capture_qk=False, capture_norms=True)
    w = r.norm_weights
    assert not w.post_layer_norm and w.attention_norm == (kind in ("gemma2", "gemma3", "olmo2"))
    vectors = norms.head_vectors(r.values, w.out_weight)
    actual = _residual_after_attention(lm, kind, TEXT_A)
    maps = norms.norm_maps(r)
    heads, d, hidden = lm.facts.n_heads, lm.facts.head_dim, lm.facts.hidden_size
    for layer in range(lm.facts.n_layers):
        parts = norms.layer_norm_parts(
            r.attentions[layer],
            vectors[layer],
            r.layer_inputs[layer],
            w.out_bias[layer],
            w.gamma[layer],
            w.beta[layer],
            float(w.eps[layer]),
            post_layer_norm=False,
            attention_norm=w.attention_norm,
        )
        # the model's float32 sums: over n keys (A v), heads * d (W_O), hidden (the RMSNorm's mean square), then the
        # residual; a sum of k terms errs by at most k eps sum|terms| (support.tolerances), so per element
        magnitude = np.einsum(
            "hij,hjc,hck->ik", np.abs(r.attentions[layer]), np.abs(r.values[layer]), np.abs(w.out_weight[layer])
        ) + np.abs(w.out_bias[layer])
        if w.attention_norm:
            magnitude = magnitude * np.abs(w.gamma[layer]) / parts.scale[:, None]
            np.testing.assert_allclose(r.block_scale[layer], parts.scale, rtol=(hidden + 2) * EPS32)
        tolerance = (r.n + heads * d + hidden + 2) * EPS32 * (magnitude + np.abs(r.layer_inputs[layer]))
        error = np.abs(parts.output() - actual[layer])
        assert (error <= tolerance).all(), f"layer {layer}: error {error.max():.2e}, tolerance {tolerance.min():.2e}"
        assert not np.triu(np.linalg.norm(parts.parts, axis=-1), 1).any()  # causal: no later key contributes
        np.testing.assert_allclose(maps.residual_ln[layer], np.linalg.norm(parts.parts, axis=-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(maps.residual_ln_rollout.sum(-1), 1.0, atol=1e-5)


def test_decoder_attribution_equals_reverse_mode_on_two_heads(decoder_model):
    """Exact HTA of a decoder (causal rows, §18) against plain reverse mode through the model's own forward pass."""
    _, lm = decoder_model
    enc = encode(lm, "Cats sleep a lot.")
    exact = hidden_token_attribution(lm, enc, mode="exact")
    heads = [(0, 1), (lm.facts.n_layers - 1, 3)]
    ref_in, ref_prev = reverse_mode_reference(lm, enc, heads)
    # shares of sums of float32 squares; each derivative is a float32 sum of at most n + hidden products per layer
    tolerance = (enc.n + lm.facts.hidden_size) * EPS32
    for (layer, head), ref_i, ref_p in zip(heads, ref_in, ref_prev):
        np.testing.assert_allclose(exact.input[layer, head], ref_i, atol=tolerance)
        np.testing.assert_allclose(exact.previous[layer, head], ref_p, atol=tolerance)
        assert not np.triu(exact.input[layer, head], 1).any()  # a query draws on no later token


def test_decoder_attribution_is_written_out_and_equals_jvp(decoder_model, monkeypatch):
    """Every decoder takes the written-out tangents, not the jvp fallback: GPT-2's Conv1D, Llama's RMSNorm and gated
    feed-forward (two projections), Phi-3's (one), OPT's feed-forward on [batch * n, hidden], Qwen3's and Gemma 3's
    per-head q_norm and k_norm, Gemma 2's soft-capped scores, Gemma 2's and 3's norms of the attention and
    feed-forward outputs, GPT-NeoX's parallel residual; they give what torch.func.jvp through the layers gives."""
    _assert_written_out_equals_jvp(decoder_model[1], monkeypatch)


def test_soft_capped_scores_are_written_out_and_equal_jvp(tmp_path, monkeypatch):
    """Gemma 2 with its soft-cap c lowered to where c tanh(s / c) bends its tiny model's logits (at Gemma 2's own c =
    50 the slope 1 - tanh^2 is 1 within 1e-6): the written-out tangents carry the slope and equal jvp's."""
    import json

    from attnlib.core.model import load_model

    cap = 0.03
    folder = save_tiny("gemma2", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"attn_logit_softcapping": cap}))
    lm = load_model(str(folder))
    move_off_initial(lm.encoder)
    layers: list = []
    at_input = choice.layer_at_input
    monkeypatch.setattr(choice, "layer_at_input", lambda *a: layers.append(at_input(*a)) or layers[-1])
    _assert_written_out_equals_jvp(lm, monkeypatch)
    assert min(float(layer.cap_slope.min()) for layer in layers) < 0.5  # the cap bends the largest scores


def _assert_written_out_equals_jvp(lm, monkeypatch) -> None:
    """HTA (estimate mode, with the layer outputs) takes the written-out tangents and equals jvp through the layers."""
    enc = encode(lm, TEXT_A, TEXT_B)
    runs: list[int] = []
    written_out = forward.linearised_input_norms
    monkeypatch.setattr(forward, "linearised_input_norms", lambda *a: runs.append(1) or written_out(*a))
    fast = hidden_token_attribution(lm, enc, mode="estimate", probes=4, with_output=True)
    assert len(runs) == 2  # the check on two directions, then every direction: no fallback
    plain = hidden_token_attribution(lm, enc, mode="estimate", probes=4, linearise=False, with_output=True)
    assert fast.output is not None and plain.output is not None
    # shares (~0.1) of sums of float32 squares taken in two orders: a few ulp apart (measured: at most 1.2e-7)
    for got, want in ((fast.input, plain.input), (fast.previous, plain.previous), (fast.output, plain.output)):
        np.testing.assert_allclose(got, want, atol=1e-6)


def test_post_layer_norm_opt_is_refused_in_words(tmp_path, capsys):
    """OPT-350m's LayerNorm follows attention and the residual (do_layer_norm_before false): norms and attribution say
    why not, in the library and as one `error:` line of the command line; attention still runs."""
    import json

    from attnlib.core.model import load_model

    folder = save_tiny("opt", tmp_path)
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps(config | {"do_layer_norm_before": False}))
    lm = load_model(str(folder))
    assert run(lm, TEXT_A, capture_qk=False).attentions.shape[:2] == (2, 4)
    capsys.readouterr()  # what saving the model printed
    for statistic in ("norms", "hta"):
        with pytest.raises(UnsupportedModelError, match="do_layer_norm_before false"):
            layout(lm.encoder, statistic)
    for command in (["norms", "--text", TEXT_A], ["hta", "--text", TEXT_A, "--mode", "estimate"]):
        ran = run_cli(*command, "--model", str(folder), "--json")
        assert ran.code == 2, ran.err
        out, err = ran.out, ran.err
        assert out == "" and err.startswith("error: ") and len(err.strip().splitlines()) == 1
        assert "LayerNorm after attention" in err


def test_replay_reproduces_the_forward_pass(family_model):
    """Replaying every layer from hidden_states[0] gives the encoder's output; V variants stacked along the batch
    give V copies; zeroing one head's context in a replay from layer 1 equals zeroing it in the full pass."""
    lm = family_model
    batch = model_inputs(lm, [encode(lm, s) for s in SENTENCES])
    rec = record(lm, batch)
    assert rec.n_layers == lm.facts.n_layers
    d = rec.layout.head_dim
    with torch.no_grad():
        out = lm.encoder(**batch, output_hidden_states=True)
        states = rec.hidden_states()
        for own, recorded in zip(out.hidden_states[:-1], states[:-1]):
            np.testing.assert_array_equal(own.numpy(), recorded.numpy())
        np.testing.assert_array_equal(rec.final(rec.replay(states[0])).numpy(), out.last_hidden_state.numpy())
        stacked = rec.replay(states[1].repeat(3, 1, 1), 1)
        alone = rec.replay(states[1], 1)
        np.testing.assert_allclose(stacked.numpy(), alone.repeat(3, 1, 1).numpy(), atol=1e-6)  # batch-size blocking

        def zero_head(layer, c):
            if layer == 1:
                c = c.clone()
                c[..., d : 2 * d] = 0
                return c
            return None

        with editing_contexts(rec.layout, zero_head):
            full = lm.encoder(**batch).last_hidden_state
        with editing_contexts(rec.layout, zero_head, range(1, rec.n_layers)):
            replayed = rec.final(rec.replay(states[1], 1))
    np.testing.assert_array_equal(full.numpy(), replayed.numpy())
    assert np.abs(full.numpy() - out.last_hidden_state.numpy()).max() > 1e-4  # the edit changed something


def test_contexts_are_the_weighted_values(family_model):
    """The captured context vectors c[l, h, i] are sum_j A[l, h, i, j] v[l, h, j] of the clean run's values."""
    lm = family_model
    enc = encode(lm, TEXT_A)
    r = run(lm, TEXT_A, capture_qk=False, capture_norms=True)
    with captured_contexts(layout(lm.encoder)) as seen, torch.no_grad():
        lm.encoder(**model_inputs(lm, [enc]))
    assert [index for index, _ in seen] == list(range(lm.facts.n_layers))
    for layer, c in seen:
        expected = np.einsum("hij,hjd->ihd", r.attentions[layer], r.values[layer]).reshape(enc.n, -1)
        np.testing.assert_allclose(c[0].numpy(), expected, atol=1e-5)


def test_attribution_equals_reverse_mode_on_two_heads(family_model):
    """Exact HTA through the family's own layers against plain reverse mode (two heads; every head: slow tier)."""
    lm = family_model
    enc = encode(lm, "Cats sleep a lot.")
    exact = hidden_token_attribution(lm, enc, mode="exact")
    heads = [(0, 1), (lm.facts.n_layers - 1, 3)]
    ref_in, ref_prev = reverse_mode_reference(lm, enc, heads)
    for (layer, head), ref_i, ref_p in zip(heads, ref_in, ref_prev):
        # shares of sums of float32 squares: both sides round differently by a few ulp of ~0.1
        np.testing.assert_allclose(exact.input[layer, head], ref_i, atol=1e-5)
        np.testing.assert_allclose(exact.previous[layer, head], ref_p, atol=1e-5)


def test_attribution_is_written_out_and_equals_jvp_through_the_layers(family_model, monkeypatch):
    """Every family takes the written-out tangents (rotary, DeBERTa's c2p and p2c, pre-LN and ModernBERT's gated
    feed-forward included, not the jvp fallback), and they give what torch.func.jvp through its own layers gives."""
    _assert_written_out_equals_jvp(family_model, monkeypatch)


@pytest.mark.parametrize("family_dir", ["modernbert"], indirect=True)
def test_modernbert_local_layers(family_model):
    """Layer 1 of the tiny ModernBERT is local: facts say so, and its attention beyond the window is exactly 0."""
    facts = family_model.facts
    assert facts.windows == (None, MODERNBERT_WINDOW)
    r = run(family_model, TEXT_A, capture_qk=False)
    far = np.abs(np.arange(r.n)[:, None] - np.arange(r.n)[None]) > MODERNBERT_WINDOW
    assert (r.attentions[1][:, far] == 0).all() and (r.attentions[0][:, far] > 0).all()


@pytest.mark.parametrize("family_dir", ["bert-classifier", "deberta-v2-tokens"], indirect=True)
def test_fine_tuned_checkpoints_load_their_encoder_without_an_mlm_head(family_dir, family_model):
    from transformers import AutoModel

    assert family_model.facts.has_mlm_head is False and family_model.mlm is None
    own = AutoModel.from_pretrained(str(family_dir)).state_dict()  # the checkpoint's encoder (with a pooler in BERT's)
    loaded = family_model.encoder.state_dict()
    assert set(loaded) <= set(own) and all(k.startswith("pooler.") for k in set(own) - set(loaded))
    for name, weight in loaded.items():
        np.testing.assert_array_equal(weight.numpy(), own[name].numpy())


def test_unknown_family_is_refused_in_words(unknown_dir):
    """An encoder attnlib has no layout for: attention works; norms and attribution say why not, in the library and
    as one `error:` line of the command line."""
    from attnlib.core.model import load_model

    lm = load_model(str(unknown_dir))
    r = run(lm, TEXT_A)  # capture_qk=True by default: no queries and keys, no error
    assert r.attentions.shape[:2] == (2, 4) and r.queries is None and r.qk_scale is None
    for statistic in ("norms", "hta"):
        with pytest.raises(UnsupportedModelError, match="'megatron-bert' models: attnlib knows"):
            layout(lm.encoder, statistic)
    with pytest.raises(UnsupportedModelError, match="METHODS §11-13"):
        run(lm, TEXT_A, capture_norms=True)
    with pytest.raises(UnsupportedModelError, match="Hidden Token Attribution"):
        hidden_token_attribution(lm, encode(lm, TEXT_A), mode="estimate")
    assert cli_json("attention", "--text", TEXT_A, "--model", str(unknown_dir), "--json")["attentions"]
    special = ["special", "--corpus", str(CLASSROOM_SINGLE), "--limit", "2"]
    assert cli_json(*special, "--model", str(unknown_dir), "--json")["n_inputs"] == 2  # the attention statistics run
    for command in (
        ["norms", "--text", TEXT_A],
        ["hta", "--text", TEXT_A, "--mode", "estimate"],
        [*special, "--norms"],
    ):
        ran = run_cli(*command, "--model", str(unknown_dir), "--json")
        assert ran.code == 2, ran.err
        out, err = ran.out, ran.err
        assert out == "" and err.startswith("error: ") and len(err.strip().splitlines()) == 1 and "megatron" in err


def _log_bucket(delta: np.ndarray, buckets: int, max_position: int) -> np.ndarray:
    """DeBERTa-v2's relative position buckets (He et al. 2021): exact within +-buckets/2, logarithmic beyond."""
    mid = buckets // 2
    far = np.abs(delta) > mid
    logged = np.ceil(np.log(np.maximum(np.abs(delta), 1) / mid) / np.log((max_position - 1) / mid) * (mid - 1)) + mid
    return np.where(far, np.sign(delta) * logged, delta).astype(np.int64)


def _linear(module, x: np.ndarray) -> np.ndarray:
    out = x @ module.weight.detach().double().numpy().T
    return out if module.bias is None else out + module.bias.detach().double().numpy()


def _layer_norm(module, x: np.ndarray) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt((centred**2).mean(-1, keepdims=True) + module.eps) * module.weight.detach().numpy() + (
        module.bias.detach().numpy()
    )


@pytest.mark.parametrize("family_dir", ["deberta", "deberta-v2"], indirect=True)
def test_deberta_scores_are_content_plus_relative_terms(family_model):
    """DeBERTa's logits, worked out from the weights: s_ij = (q_i.k_j + q_i.Kr[r_ij] + k_j.Qr[r_ij]) / sqrt(3 d), with
    r_ij the (v2: log-bucketed) relative position i - j, Kr and Qr the relative embeddings projected by the key and
    query projections (v1: pos_proj, pos_q_proj). The neuron view's q.k is the first term; score_bias the other two."""
    lm = family_model
    r = run(lm, TEXT_A, TEXT_B, capture_qk=True, capture_norms=True)
    lay, config = layout(lm.encoder), lm.encoder.config
    h, d, n = lm.facts.n_heads, lm.facts.head_dim, r.n
    scale = 1 / np.sqrt(3 * d)
    np.testing.assert_allclose(r.qk_scale, scale, rtol=1e-6)
    v2 = config.model_type == "deberta-v2"
    span = config.position_buckets if v2 else n  # rows of the relative table used on either side of 0
    table = lm.encoder.encoder.rel_embeddings.weight.detach().double().numpy()
    if v2:
        table = _layer_norm(lm.encoder.encoder.LayerNorm, table)[: 2 * span]
        delta = _log_bucket(np.arange(n)[:, None] - np.arange(n)[None], span, config.max_position_embeddings)
    else:
        middle = config.max_position_embeddings
        table = table[middle - span : middle + span]
        delta = np.arange(n)[:, None] - np.arange(n)[None]
    index = np.clip(delta + span, 0, 2 * span - 1)  # row of the table for each (i, j)

    def per_head(x: np.ndarray) -> np.ndarray:
        return x.reshape(len(x), h, d).transpose(1, 0, 2)  # [heads, rows, d]

    for layer, site in enumerate(lay.sites):
        x = r.layer_inputs[layer].astype(np.float64)
        module = site.heads
        if v2:
            q, k = per_head(_linear(module.query_proj, x)), per_head(_linear(module.key_proj, x))
            kr, qr = per_head(_linear(module.key_proj, table)), per_head(_linear(module.query_proj, table))
        else:
            qkv = x @ module.in_proj.weight.detach().double().numpy().T
            q, k, _ = np.split(qkv.reshape(n, h, 3 * d).transpose(1, 0, 2), 3, axis=-1)
            q = q + module.q_bias.detach().double().numpy().reshape(h, 1, d)
            kr, qr = per_head(_linear(module.pos_proj, table)), per_head(_linear(module.pos_q_proj, table))
        np.testing.assert_allclose(r.queries[layer], q, atol=1e-5)
        np.testing.assert_allclose(r.keys[layer], k, atol=1e-5)
        heads = np.arange(h)[:, None, None]
        c2p = np.einsum("hid,hijd->hij", q, kr[heads, index[None]]) * scale
        p2c = np.einsum("hjd,hijd->hij", k, qr[heads, index[None]]) * scale
        np.testing.assert_allclose(r.score_bias[layer], c2p + p2c, atol=1e-5)
        content = np.einsum("hid,hjd->hij", q, k) * scale
        np.testing.assert_allclose(_softmax(content + c2p + p2c), r.attentions[layer], atol=1e-5)


@pytest.mark.parametrize("family_dir", ["albert"], indirect=True)
def test_edits_are_removed_on_failure_and_stay_in_their_thread(family_model):
    """ALBERT's one output projection serves both layers; an edit that fails leaves no hook behind, and a forward
    pass of another thread inside the context is not edited."""
    import threading

    lm = family_model
    lay = layout(lm.encoder)
    assert lay.sites[0].output is lay.sites[1].output
    batch = model_inputs(lm, [encode(lm, TEXT_A)])
    calls: list[int] = []

    def fail(layer, _c):
        calls.append(layer)
        raise RuntimeError("edit failed")

    with pytest.raises(RuntimeError, match="edit failed"), torch.no_grad(), editing_contexts(lay, fail):
        lm.encoder(**batch)
    assert calls == [0] and not lay.sites[0].output._forward_pre_hooks

    with torch.no_grad():
        clean = lm.encoder(**batch).last_hidden_state
        with editing_contexts(lay, lambda layer, c: calls.append(layer) or torch.zeros_like(c)):
            outputs = []
            other = threading.Thread(target=lambda: outputs.append(lm.encoder(**batch).last_hidden_state.detach()))
            other.start()
            other.join()
            edited = lm.encoder(**batch).last_hidden_state
    np.testing.assert_array_equal(outputs[0].numpy(), clean.numpy())
    assert calls == [0, 0, 1] and not np.allclose(edited.numpy(), clean.numpy())


def test_deberta_v2_convolution_after_the_first_layer(tmp_path):
    """deberta-v2-xlarge's ConvLayer follows layer 0 in the encoder, not in a layer: replay and HTA include it."""
    from attnlib.core.model import load_model
    from support.models import save_tiny

    folder = save_tiny("deberta-v2", tmp_path)
    config_path = folder / "config.json"
    import json

    config = json.loads(config_path.read_text())
    config["conv_kernel_size"] = 3
    config_path.write_text(json.dumps(config))
    torch.manual_seed(1)
    lm = load_model(str(folder))  # the convolution is not in the checkpoint: random, the rest as saved
    assert lm.encoder.encoder.conv is not None
    batch = model_inputs(lm, [encode(lm, s) for s in SENTENCES])
    rec = record(lm, batch)
    with torch.no_grad():
        out = lm.encoder(**batch, output_hidden_states=True)
        np.testing.assert_array_equal(rec.replay(rec.hidden_states()[0]).numpy(), out.last_hidden_state.numpy())
        np.testing.assert_array_equal(rec.hidden_states()[1].numpy(), out.hidden_states[1].numpy())
    enc = encode(lm, "Cats sleep a lot.")
    exact = hidden_token_attribution(lm, enc, mode="exact")
    ref_in, ref_prev = reverse_mode_reference(lm, enc, [(1, 2)])
    np.testing.assert_allclose(exact.input[1, 2], ref_in[0], atol=1e-5)
    np.testing.assert_allclose(exact.previous[1, 2], ref_prev[0], atol=1e-5)


def test_single_input_commands_run(family_dir, family_model):
    """attention, norms and hta on each family: JSON with the model's shape and rows that sum to 1."""
    f, model = family_model.facts, ["--model", str(family_dir)]
    text = ["--text", "The cat sat on the mat.", "--pair", "It slept."]
    attention = cli_json("attention", *text, *model, "--json")
    n = len(attention["tokens"])
    a = np.array(attention["attentions"])
    assert a.shape == (f.n_layers, f.n_heads, n, n) and np.allclose(a.sum(-1), 1, atol=1e-5)
    maps = cli_json("norms", *text, *model, "--json")
    assert np.array(maps["residual_ln"]).shape == (f.n_layers, n, n)
    assert np.allclose(np.array(maps["residual_ln_rollout"]).sum(-1), 1, atol=1e-5)
    hta = cli_json("hta", *text, "--mode", "estimate", "--probes", "3", *model, "--json")
    assert np.array(hta["input"]).shape == a.shape and np.allclose(np.array(hta["input"]).sum(-1), 1, atol=1e-5)


def test_folder_without_tokenizer_files_is_refused(tmp_path):
    from attnlib.core.model import ModelLoadError, load_model
    from support.models import save_tiny

    folder = save_tiny("bert", tmp_path / "full")
    bare = tmp_path / "bare"
    bare.mkdir()
    for name in ("config.json", "model.safetensors"):
        (bare / name).write_bytes((folder / name).read_bytes())
    with pytest.raises(ModelLoadError, match="no tokenizer vocabulary"):
        load_model(str(bare))


def test_neuron_scores_with_relative_terms_and_a_window_by_hand():
    from attnlib.views.neuron_view import neuron_scores

    q = np.array([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    k = np.array([[2.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    ns = neuron_scores(q, k, 0, scale=0.5, relative=np.array([0.0, 1.0, -1.0]), window=1)
    np.testing.assert_allclose(ns.scores, [1.0, 1.0, -0.5])  # 0.5 * (2, 0, 1) + (0, 1, -1)
    np.testing.assert_allclose(ns.softmax, [0.5, 0.5, 0.0])  # key 2 is outside |i - j| <= 1
    assert ns.label == "q·k × 0.5 + relative"
    assert neuron_scores(q, k, 0).label == "q·k / √2"


def test_local_layers_are_marked_in_words_and_figures():
    import json
    import re

    from attnlib.core.families import local_layers_text
    from attnlib.views.model_view import model_view_html
    from attnlib.views.positions import position_histograms

    assert local_layers_text([None, None]) is None
    assert local_layers_text([None, 64, 64]) == (
        "Local attention (a sliding window): in layers 2, 3 each query attends only to keys within ±64 tokens; "
        "the other layer attends to every token."
    )
    html = model_view_html(np.full((2, 1, 3, 3), 1 / 3, np.float32), ["a", "b", "c"], windows=(None, 1))
    data = json.loads(re.search(r"id='data'>(.*?)</script>", html, re.S).group(1).replace("<\\/", "</"))
    assert data["windows"] == [None, 1]
    offsets = np.arange(-3, 4)
    histograms = np.full((2, 7), 0.1)
    fig = position_histograms(offsets, histograms, histograms, ["layer 1", "layer 2"], max_offset=3, windows=[None, 1])
    attention = [t for t in fig.data if t.name == "attention"]
    assert np.isfinite(attention[0].y).all()
    assert (
        np.isnan(attention[1].y[np.abs(offsets) > 1]).all() and np.isfinite(attention[1].y[np.abs(offsets) <= 1]).all()
    )
    assert "layer 2 (local ±1)" in [a.text for a in fig.layout.annotations]
    assert len(fig.layout.shapes) == 2  # the window's two edges, in the local panel only


@pytest.mark.parametrize("family_dir", ["modernbert"], indirect=True)
def test_positions_of_a_local_layer_stop_at_its_window(family_model):
    from attnlib.analyses.base import run_analysis
    from attnlib.analyses.positions import POSITIONS, PositionOptions
    from attnlib.core.corpus import read_corpus

    corpus = read_corpus(CLASSROOM_SINGLE, 4)
    r = run_analysis(POSITIONS, family_model, PositionOptions(probes=2), inputs={"corpus": corpus}).result
    assert r.windows == (None, MODERNBERT_WINDOW)
    far = np.abs(r.offsets) > MODERNBERT_WINDOW
    assert (r.attention_histograms[1][:, far] == 0).all() and (r.attention_histograms[0][:, far] > 0).any()
    assert type(r).from_json(r.to_json()).windows == r.windows


# ---------- slow tests: Every family of attnlib.core.families on its tiny random model (tests/support/models.py):
# attention is the model's own, q.k (plus the family's relative terms) gives the logits, the norms rebuild the
# attention block's output, replay and context edits reproduce the model's forward pass, and HTA equals reverse mode.


@pytest.mark.slow
def test_attribution_equals_reverse_mode_on_every_head(family_model):
    lm = family_model
    enc = encode(lm, TEXT_A, TEXT_B)
    exact = hidden_token_attribution(lm, enc, mode="exact", with_output=True)
    f = lm.facts
    heads = [(layer, head) for layer in range(f.n_layers) for head in range(f.n_heads)]
    ref_in, ref_prev = reverse_mode_reference(lm, enc, heads)
    np.testing.assert_allclose(exact.input, ref_in.reshape(exact.input.shape), atol=1e-5)
    np.testing.assert_allclose(exact.previous, ref_prev.reshape(exact.input.shape), atol=1e-5)


@pytest.fixture(scope="module")
def small_conllu(tmp_path_factory):
    """The first six sentences of UD EWT dev, as a file (the commands read whole files)."""
    from attnlib.results.shipped import EWT_DEV

    blocks = EWT_DEV.read_text(encoding="utf-8").split("\n\n")[:6]
    path = tmp_path_factory.mktemp("conllu") / "six.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_corpus_commands_run(family_dir, family_model, small_conllu):
    """special (with --norms), deps, positions, aggregation and probe on each family, each JSON sane."""
    from attnlib.results.shipped import CLASSROOM_PAIRS

    f, model = family_model.facts, ["--model", str(family_dir)]
    corpus = ["--corpus", str(CLASSROOM_PAIRS), "--limit", "4"]
    special = cli_json("special", *corpus, "--norms", *model, "--json")
    assert special["n_inputs"] == 4 and len(special["norm_layers"]) == f.n_layers
    shares = sum(np.array(special["heads"][k]) for k in ("cls", "sep", "punct", "other"))
    np.testing.assert_allclose(shares, 1, atol=1e-5)
    deps = cli_json("deps", "--conllu", str(small_conllu), *model, "--json")
    assert deps["n_sentences"] + deps["n_skipped"] == 6 and deps["rows"]
    positions = cli_json("positions", *corpus, "--probes", "3", *model, "--json")
    assert np.array(positions["histograms"]["attention"]).shape[:2] == (f.n_layers, f.n_heads)
    aggregation = cli_json("aggregation", *corpus, "--probes", "3", *model, "--json")
    assert aggregation["n_inputs"] == 4
    probe = cli_json("probe", "--train", str(small_conllu), "--test", str(small_conllu), *model, "--json")
    assert 0 <= probe["uas"] <= 1
