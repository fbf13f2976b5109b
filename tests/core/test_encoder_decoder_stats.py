"""The statistics that read an encoder-decoder's internals (METHODS §18: its encoder stack as a family of
attnlib.core.families): T5 (pre-norm RMS, no q.k scale, a relative position bias computed once and added in every
layer), BART and Marian (post-LN like BERT). Each is checked against transformers' own modules, found by the paths
written here (read off the transformers sources, not attnlib's families): attention and logits, the norms' rebuilt
block outputs, Hidden Token Attribution against reverse mode, ablations and knockouts against forward passes with
hooks; and every command runs on each, saying its kind and part."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from attnlib.cli.entry import main as cli_main
from attnlib.core.families import STATISTICS, unsupported_reason
from attnlib.core.model import load_model
from attnlib.core.runner import encode, run, run_encoded
from attnlib.stats import norms
from attnlib.stats.hta import forward, hidden_token_attribution
from attnlib.stats.importance import (
    AblationUnavailable,
    Variant,
    changed_states,
    check_available,
    prepare,
    single_head_variants,
    variant_effects,
)
from support.ablation import REPLAY_ATOL
from support.models import (
    ENCODER_DECODER_KINDS,
    move_off_initial,
    tiny_encoder_decoder_config,
    tiny_model,
    tokenizer_for,
)
from support.reference import reverse_mode_reference
from support.seq2seq import own_scale
from support.tolerances import EPS32

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE = "The cat sat on the mat because it was warm, and then it slept for a very long time."
SENTENCES = ["The cat sat on the mat.", "A dog barked.", "She reads books every night, by the fire."]

# per kind, from the encoder stack: layer l's self-attention module, its query, key and output projections, the module
# whose output is the attention block's (T5: x + attention, its pre-norm residual; BART, Marian: the LayerNorm after
# attention and the residual), and the attention module's mask keyword
SELF_ATTENTION = {
    "t5": "block.{}.layer.0.SelfAttention",
    "bart": "layers.{}.self_attn",
    "marian": "layers.{}.self_attn",
}
PROJECTIONS = {
    "t5": ("q", "k", "o"),
    "bart": ("q_proj", "k_proj", "out_proj"),
    "marian": ("q_proj", "k_proj", "out_proj"),
}
BLOCK_OUTPUT = {
    "t5": "block.{}.layer.0",
    "bart": "layers.{}.self_attn_layer_norm",
    "marian": "layers.{}.self_attn_layer_norm",
}
MASK_KEYWORD = {"t5": "mask", "bart": "attention_mask", "marian": "attention_mask"}
POST_LN = {"t5": False, "bart": True, "marian": True}


WIDE_T5 = "t5-wide"  # T5 whose heads are together wider than the model (d_kv * heads > d_model, as in t5-11b)


@pytest.fixture(scope="module", params=[*ENCODER_DECODER_KINDS, WIDE_T5])
def encdec(request, tmp_path_factory):
    """(kind, the library's LoadedModel) of a tiny random encoder-decoder whose norms' weights and every projection's
    bias were moved off their initial values (1 and 0) at random before saving, so a misplaced gamma or bias fails."""
    from transformers import AutoModelForSeq2SeqLM

    kind = "t5" if request.param == WIDE_T5 else request.param
    tokenizer = tokenizer_for(kind)
    if request.param == WIDE_T5:
        config = tiny_encoder_decoder_config(kind, tokenizer)
        config.d_kv = 2 * config.d_model // config.num_heads
        torch.manual_seed(0)
        model = AutoModelForSeq2SeqLM.from_config(config)
    else:
        model = tiny_model(kind, tokenizer)
    move_off_initial(model)
    folder = tmp_path_factory.mktemp(f"encdec-stats-{request.param}")
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    lm = load_model(str(folder))
    assert (lm.facts.n_heads * lm.facts.head_dim > lm.facts.hidden_size) == (request.param == WIDE_T5)
    return kind, lm


def module(lm, path: str, layer: int) -> torch.nn.Module:
    return lm.encoder.get_submodule(path.format(layer))


def source_ids(lm, text: str = SOURCE) -> torch.Tensor:
    return torch.tensor([encode(lm, text).input_ids])


def test_every_statistic_is_exact_for_the_encoder_stack(encdec):
    _, lm = encdec
    assert lm.facts.kind == "encoder-decoder" and lm.encoder is lm.seq2seq.get_encoder()
    for statistic in STATISTICS:
        assert unsupported_reason(lm.encoder.config, statistic) is None, statistic


def test_attention_equals_the_models_own_encoder_attentions(encdec):
    """run's maps are the encoder's own eager output_attentions; in a padded batch each input keeps its own maps."""
    _, lm = encdec
    r = run(lm, SOURCE, capture_qk=False)
    with torch.no_grad():
        own = lm.seq2seq.get_encoder()(input_ids=source_ids(lm), output_attentions=True).attentions
    assert r.attentions.shape == (2, 4, r.n, r.n)
    np.testing.assert_array_equal(r.attentions, torch.stack(own)[:, 0].numpy())
    for sentence, batched in zip(SENTENCES, run_encoded(lm, [encode(lm, s) for s in SENTENCES])):
        # padding adds float32 zeros to the softmax sums, and the kernels may block differently: a few ulp of 1
        np.testing.assert_allclose(batched.attentions, run(lm, sentence, capture_qk=False).attentions, atol=1e-6)


def _own_logits(lm, kind: str, ids: torch.Tensor) -> list[torch.Tensor]:
    """Every layer's logits [heads, n, n] before the mask, from the attention module's own input through its own q and
    k projections, times the family's scale, plus (T5) the position bias that the module itself returns."""
    q_name, k_name, _ = PROJECTIONS[kind]
    d = lm.facts.head_dim
    found: list[torch.Tensor] = []

    def keep(attention, args, kwargs, out):
        x = args[0] if args else kwargs["hidden_states"]
        q, k = (getattr(attention, name)(x)[0].reshape(x.shape[1], -1, d).transpose(0, 1) for name in (q_name, k_name))
        logits = own_scale(kind, d) * q @ k.transpose(1, 2)
        # T5Attention returns (output, position_bias, weights)
        found.append(logits + out[1][0] if kind == "t5" else logits)

    handles = [
        module(lm, SELF_ATTENTION[kind], l).register_forward_hook(keep, with_kwargs=True)
        for l in range(lm.facts.n_layers)
    ]
    try:
        with torch.no_grad():
            lm.encoder(input_ids=ids)
    finally:
        for handle in handles:
            handle.remove()
    return found


def test_queries_and_keys_give_the_models_own_logits(encdec):
    """The neuron view's scale * q.k (+ T5's position bias) is the logits the model's own modules make, and their
    softmax is its attention; T5's bias is one, shared by both layers."""
    kind, lm = encdec
    r = run(lm, SOURCE, capture_qk=True)
    d = lm.facts.head_dim
    np.testing.assert_array_equal(r.qk_scale, np.float32(own_scale(kind, d)))
    q, k = r.queries.astype(np.float64), r.keys.astype(np.float64)
    products = np.einsum("lhid,lhjd->lhij", q, k)
    logits = r.qk_scale[:, None, None, None] * products
    assert (r.score_bias is not None) == (kind == "t5")
    if r.score_bias is not None:
        logits = logits + r.score_bias
        np.testing.assert_array_equal(r.score_bias[0], r.score_bias[1])
    own = torch.stack(_own_logits(lm, kind, source_ids(lm))).double().numpy()
    # two float32 dot products of d terms: each within d eps sum|q_c k_c| of the exact one (support.tolerances)
    magnitude = r.qk_scale[:, None, None, None] * np.einsum("lhid,lhjd->lhij", np.abs(q), np.abs(k))
    tolerance = 2 * (d + 1) * EPS32 * (magnitude + (0 if r.score_bias is None else np.abs(r.score_bias)))
    error = np.abs(logits - own)
    assert (error <= tolerance).all(), f"{kind}: error {error.max():.2e}"
    e = np.exp(logits - logits.max(-1, keepdims=True))
    # float32 weights of the model against float64 ones from the same logits: ~1e-7 relative
    np.testing.assert_allclose(e / e.sum(-1, keepdims=True), r.attentions, atol=1e-6)


def test_norms_rebuild_the_attention_blocks_output(encdec):
    """METHODS §11-12 from the captured values and the model's W_O: sum_h sum_j A f_h(x_j) + b_O is the output
    projection's own output; sum_j g_i(z_ij) + g_i(b_O) + beta is the block's output (BART, Marian: the LayerNorm after
    the residual, with s_i from its own input; T5: x + the attention output, s_i = 1)."""
    kind, lm = encdec
    projections: list[np.ndarray] = []
    blocks: list[np.ndarray] = []
    block_inputs: list[np.ndarray] = []

    def keep_projection(_m, _args, out) -> None:
        projections.append(out[0].double().numpy())

    def keep_block(_m, args, out) -> None:
        blocks.append((out[0] if isinstance(out, tuple) else out)[0].double().numpy())
        block_inputs.append(args[0][0].double().numpy())

    hooks = []
    for l in range(lm.facts.n_layers):
        output = getattr(module(lm, SELF_ATTENTION[kind], l), PROJECTIONS[kind][2])
        hooks.append(output.register_forward_hook(keep_projection))
        hooks.append(module(lm, BLOCK_OUTPUT[kind], l).register_forward_hook(keep_block))
    try:
        r = run(lm, SOURCE, capture_qk=False, capture_norms=True)
    finally:
        for hook in hooks:
            hook.remove()
    w = r.norm_weights
    assert w.post_layer_norm == POST_LN[kind] and not w.attention_norm
    vectors = norms.head_vectors(r.values, w.out_weight)
    maps = norms.norm_maps(r)
    n, heads, d, hidden = r.n, lm.facts.n_heads, lm.facts.head_dim, lm.facts.hidden_size
    for layer in range(lm.facts.n_layers):
        attention = r.attentions[layer].astype(np.float64)
        summed = np.einsum("hij,hjc->ic", attention, vectors[layer]) + w.out_bias[layer]
        # the model's float32 sums over n keys (A v) and heads * d (W_O); a sum of k terms errs by at most
        # k eps sum|terms| (support.tolerances), the captured values and vectors by as much again
        magnitude = np.einsum(
            "hij,hjc,hck->ik", np.abs(attention), np.abs(r.values[layer]), np.abs(w.out_weight[layer])
        ) + np.abs(w.out_bias[layer])
        tolerance = 2 * (n + heads * d + 2) * EPS32 * magnitude
        assert (np.abs(summed - projections[layer]) <= tolerance).all(), f"{kind} layer {layer}: W_O sum"
        parts = norms.layer_norm_parts(
            r.attentions[layer], vectors[layer], r.layer_inputs[layer], w.out_bias[layer], w.gamma[layer],
            w.beta[layer], float(w.eps[layer]), post_layer_norm=w.post_layer_norm,
        )  # fmt: skip
        residual = tolerance + (n + heads * d + 2) * EPS32 * np.abs(r.layer_inputs[layer])
        if w.post_layer_norm:
            u = block_inputs[layer]
            s_own = np.sqrt(u.var(-1) + w.eps[layer])
            # s_i: a float32 variance over hidden terms
            np.testing.assert_allclose(r.block_scale[layer], s_own, rtol=(hidden + 2) * EPS32)
            np.testing.assert_allclose(parts.scale, s_own, rtol=(hidden + 2) * EPS32)
            # LN(u) moves by |gamma| / s_i times u's error (twice: the centring), and by its own float32 rounding
            stretch = np.abs(w.gamma[layer]) / s_own[:, None]
            residual = 2 * residual * stretch + hidden * EPS32 * np.abs(blocks[layer])
        else:
            np.testing.assert_array_equal(r.block_scale[layer], 1.0)
        error = np.abs(parts.output() - blocks[layer])
        assert (error <= residual).all(), f"{kind} layer {layer}: error {error.max():.2e}"
        np.testing.assert_allclose(maps.residual_ln[layer], np.linalg.norm(parts.parts, axis=-1), rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(maps.residual_ln_rollout.sum(-1), 1.0, atol=1e-5)


def test_attribution_equals_reverse_mode(encdec, monkeypatch):
    """Exact HTA of the encoder stack against plain reverse mode through the model's own forward pass (two heads), and
    the written-out tangents (T5's RMSNorm included, not the jvp fallback) against torch.func.jvp through the model's
    own layers (every head)."""
    _, lm = encdec
    enc = encode(lm, "Cats sleep a lot.")
    runs: list[int] = []
    written_out = forward.linearised_input_norms
    monkeypatch.setattr(forward, "linearised_input_norms", lambda *a: runs.append(1) or written_out(*a))
    exact = hidden_token_attribution(lm, enc, mode="exact", with_output=True)
    assert len(runs) == 2  # the check on two directions, then every direction
    heads = [(0, 1), (lm.facts.n_layers - 1, 3)]
    ref_in, ref_prev = reverse_mode_reference(lm, enc, heads)
    # shares of sums of float32 squares; each derivative is a float32 sum of at most n + hidden products per layer
    tolerance = (enc.n + lm.facts.hidden_size) * EPS32
    for (layer, head), ref_i, ref_p in zip(heads, ref_in, ref_prev):
        np.testing.assert_allclose(exact.input[layer, head], ref_i, atol=tolerance)
        np.testing.assert_allclose(exact.previous[layer, head], ref_p, atol=tolerance)
    plain = hidden_token_attribution(lm, enc, mode="exact", with_output=True, linearise=False)
    for mine, theirs in ((exact.input, plain.input), (exact.previous, plain.previous), (exact.output, plain.output)):
        np.testing.assert_allclose(mine, theirs, atol=tolerance)
    np.testing.assert_allclose(exact.output.sum(-1), 1.0, atol=1e-5)


def _forward_with_context(lm, kind: str, ids: torch.Tensor, layer: int, head: int, replace, mask_keys=None):
    """The encoder's own last hidden states [1, n, D] with head `head`'s slice of layer `layer`'s context vectors (the
    output projection's input) replaced by replace(slice); with mask_keys, also that layer's attention run with those
    keys masked out of every row, and the context it made returned (as the output projection read it)."""
    d = lm.facts.head_dim
    attention = module(lm, SELF_ATTENTION[kind], layer)
    seen: list[torch.Tensor] = []

    def edit(_module, args):
        seen.append(args[0])
        c = args[0].clone()
        c[..., head * d : (head + 1) * d] = replace(c[..., head * d : (head + 1) * d])
        return (c, *args[1:])

    def mask(_module, args, kwargs):
        n = ids.shape[1]
        additive = torch.zeros(1, 1, n, n)
        additive[..., mask_keys] = torch.finfo(torch.float32).min
        given = kwargs.get(MASK_KEYWORD[kind])
        return args, {**kwargs, MASK_KEYWORD[kind]: additive if given is None else given + additive}

    handles = [getattr(attention, PROJECTIONS[kind][2]).register_forward_pre_hook(edit)]
    if mask_keys is not None:
        handles.append(attention.register_forward_pre_hook(mask, with_kwargs=True))
    try:
        with torch.no_grad():
            return lm.encoder(input_ids=ids).last_hidden_state, seen[0]
    finally:
        for handle in handles:
            handle.remove()


def test_single_head_ablations_equal_the_models_own_forward_with_a_zeroed_head(encdec):
    """Every head: the batched replay's embedding and hidden effects (§15 on the encoder's last hidden states) equal
    those of the encoder's own forward pass with that head's context slice zeroed; no mlm measure is made."""
    kind, lm = encdec
    enc = [encode(lm, s) for s in SENTENCES]
    prep = prepare(lm, enc)
    assert prep.head is None and prep.labels is None
    variants = single_head_variants(lm.facts.n_layers, lm.facts.n_heads)
    found = variant_effects(prep, variants)
    assert set(found) == {"embedding", "hidden"}
    for b, e in enumerate(enc):
        ids = torch.tensor([e.input_ids])
        with torch.no_grad():
            clean = lm.encoder(input_ids=ids).last_hidden_state[0].double()
        for k, variant in enumerate(variants):
            layer, head = variant.heads[0]
            changed = _forward_with_context(lm, kind, ids, layer, head, torch.zeros_like)[0][0].double()
            s, s_m = clean.mean(0), changed.mean(0)
            embedding = float(1 - s @ s_m / (s.norm() * s_m.norm()))
            hidden = float(((clean - changed).norm(dim=-1) / clean.norm(dim=-1)).mean())
            assert found["embedding"][k, b] == pytest.approx(embedding, abs=REPLAY_ATOL), (kind, variant)
            assert found["hidden"][k, b] == pytest.approx(hidden, abs=REPLAY_ATOL), (kind, variant)
    assert np.abs(found["embedding"]).max() > 0


def test_special_token_knockouts_equal_the_models_own_attention_without_those_keys(encdec):
    """K = CLS and SEP (BART: <s> and </s>; T5 and Marian: </s> alone). renormalise: head h's context from the model's
    own layer run with K masked out; drop: (1 - sum_K A[i, K]) times that, A the model's own weights. Both through the
    rest of the encoder's own forward pass, against the batched replay."""
    kind, lm = encdec
    e = encode(lm, SENTENCES[2])
    special = np.flatnonzero(e.cls_mask | e.sep_mask)
    assert special.tolist() == ([0, e.n - 1] if kind == "bart" else [e.n - 1])
    ids = torch.tensor([e.input_ids])
    with torch.no_grad():
        own = lm.encoder(input_ids=ids, output_attentions=True).attentions
    prep = prepare(lm, [e], with_mlm=False)
    d, H = lm.facts.head_dim, lm.facts.n_heads
    for layer in range(lm.facts.n_layers):
        variants = [Variant(c, ((layer, h),)) for c in ("drop", "renormalise") for h in range(H)]
        batched = {id(v): s for chunk, states in changed_states(prep, variants) for v, s in zip(chunk, states)}
        _, masked = _forward_with_context(lm, kind, ids, layer, 0, lambda c: c, mask_keys=special)
        for variant in variants:
            h = variant.heads[0][1]
            renormalised = masked[..., h * d : (h + 1) * d]
            kept = 1 - own[layer][0, h][:, special].sum(-1)
            new = renormalised if variant.change == "renormalise" else kept[None, :, None] * renormalised
            expected, _ = _forward_with_context(lm, kind, ids, layer, h, lambda _c, new=new: new)
            np.testing.assert_allclose(
                batched[id(variant)].numpy(), expected[0].numpy(), atol=REPLAY_ATOL, err_msg=f"{kind} {variant}"
            )


def test_the_mlm_measure_is_refused_in_words(encdec):
    _, lm = encdec
    check_available(lm)  # the embedding and hidden measures are defined
    with pytest.raises(AblationUnavailable, match=r"encoder-decoder.*decoder's on a target"):
        check_available(lm, "mlm")


def _cli(capsys, *argv: str) -> tuple[int, dict | None, str]:
    """The command line in-process: exit status, its JSON (None when it failed) and stderr."""
    code = cli_main([*argv, "--json"])
    out, err = capsys.readouterr()
    return code, (json.loads(out) if code == 0 else None), err


def test_every_command_runs_and_says_its_kind_and_part(encdec, capsys, tmp_path):
    """norms, hta, positions (its attribution), qk, importance and ablate run on the encoder stack; their JSON says
    kind and part; norms and hta print what the library computes; importance's mlm measure is one `error:` line."""
    _, lm = encdec
    folder = lm.facts.name
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES) + "\n")
    commands = {
        "norms": ["--text", SENTENCES[0]],
        "hta": ["--text", SENTENCES[0]],
        "positions": ["--corpus", str(corpus), "--mode", "exact"],
        "qk": ["--corpus", str(corpus), "--layer", "1", "--head", "2"],
        "importance": ["--corpus", str(corpus), "--knockout", "--prune"],
        "ablate": ["--text", SENTENCES[0], "--heads", "1-1"],
    }
    found = {}
    for command, argv in commands.items():
        code, data, err = _cli(capsys, command, *argv, "--model", folder)
        assert code == 0, f"{command}: {err}"
        assert (data["kind"], data["part"]) == ("encoder-decoder", "encoder"), command
        found[command] = data
    r = run(lm, SENTENCES[0], capture_qk=False, capture_norms=True)
    maps = norms.norm_maps(r)
    np.testing.assert_allclose(found["norms"]["residual_ln"], maps.residual_ln, rtol=1e-6, atol=1e-7)
    exact = hidden_token_attribution(lm, encode(lm, SENTENCES[0]), mode="exact")
    np.testing.assert_allclose(found["hta"]["input"], exact.input, atol=1e-7)
    assert np.isfinite(found["positions"]["attribution_center_of_mass"]).all()
    assert found["importance"]["measure"] == "embedding" and found["ablate"]["mlm"] is None
    assert set(found["importance"]["ablation"]) >= {"embedding", "hidden"}
    code, _, err = _cli(capsys, "importance", "--corpus", str(corpus), "--measure", "mlm", "--model", folder)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and "encoder-decoder" in lines[0], err
