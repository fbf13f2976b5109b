"""Layouts found in the model, then checked (attnlib.core.found), on tiny random models of families outside the
library's list (support/models.py FOUND_LAYOUT_KINDS): a mixture of experts (Mixtral, Qwen2-MoE), partial rotary
(StableLM, Phi-2, GPT-J), parallel residuals (StableLM, Phi-2, Falcon, GPT-J), fused multi-query projections (Falcon,
GPT-BigCode), query and key norms over the whole projection (OLMoE, pre-norm; OLMo 3, OLMo 2's layout with no norm
before attention), per-head fused projections and ALiBi (Bloom), one projection fused in model-parallel blocks (CodeGen), and the encoders of two encoder-decoders whose parents are
listed (mT5: T5's; mBART: BART's paths, pre-LN). Each statistic is checked against the model's own forward pass with
hooks at module paths read off the transformers sources (not the layout found): q.k gives the model's own attention,
the norms rebuild x + the attention output, ablation equals a forward pass with a head's context zeroed, attribution
equals plain reverse mode. A layer changed so that the rebuilt layer differs is refused, naming the part."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from attnlib.core.families import UnsupportedModelError, found_for, layout, unsupported_reason
from attnlib.core.found import find_layout
from attnlib.core.model import load_model
from attnlib.core.runner import encode, run
from attnlib.stats import norms
from attnlib.stats.hta import hidden_token_attribution
from attnlib.stats.importance import Variant, prepare, variant_effects
from support.ablation import REPLAY_ATOL
from support.models import FOUND_ENCODER_DECODER_KINDS, FOUND_LAYOUT_KINDS, move_off_initial, save_tiny
from support.reference import reverse_mode_reference
from support.tolerances import EPS32

pytestmark = pytest.mark.usefixtures("one_thread")

TEXT = "The cat sat on the mat because it was warm."
# each kind's attention output projection of layer l, from its stack (read off the transformers sources)
OUTPUT = {
    "mixtral": "layers.{}.self_attn.o_proj",
    "qwen2-moe": "layers.{}.self_attn.o_proj",
    "stablelm": "layers.{}.self_attn.o_proj",
    "phi": "layers.{}.self_attn.dense",
    "gpt-bigcode": "h.{}.attn.c_proj",
    "falcon": "h.{}.self_attention.dense",
    "bloom": "h.{}.self_attention.dense",
    "gptj": "h.{}.attn.out_proj",
    "codegen": "h.{}.attn.out_proj",
    "olmoe": "layers.{}.self_attn.o_proj",
    "olmo3": "layers.{}.self_attn.o_proj",
    "mt5": "block.{}.layer.0.SelfAttention.o",
    "mbart": "layers.{}.self_attn.out_proj",
}
# what the check must find: the shape, fused projections, key/value heads (of 4), the position scheme, the norm
FOUND = {
    "mixtral": ("Llama-shaped", "separate", 2, "rotary (all 8", "pre-norm"),
    "qwen2-moe": ("Llama-shaped", "separate", 2, "rotary (all 8", "pre-norm"),
    "stablelm": ("Llama-shaped", "separate", 2, "rotary (partial: 2 of 8", "pre-norm"),
    "phi": ("Phi-shaped", "separate", 4, "rotary (partial: 4 of 8", "pre-norm"),
    "gpt-bigcode": ("GPT-2-shaped", "fused", 1, "none inside attention", "pre-norm"),
    "falcon": ("Falcon and Bloom-shaped", "fused", 1, "rotary (all 8", "pre-norm"),
    "bloom": ("Falcon and Bloom-shaped", "fused", 4, "ALiBi", "pre-norm"),
    "gptj": ("GPT-J-shaped", "separate", 4, "pairs of neighbouring dimensions, as GPT-J (partial: 4 of 8", "pre-norm"),
    "codegen": (
        "CodeGen-shaped",
        "fused",
        4,
        "pairs of neighbouring dimensions, as GPT-J (partial: 4 of 8",
        "pre-norm",
    ),
    "olmoe": ("Llama-shaped", "separate", 2, "rotary (all 8", "pre-norm"),
    "olmo3": ("OLMo 2-shaped", "separate", 2, "rotary (all 8", "the heads read the layer's input"),
    "mt5": ("T5-shaped", "separate", 4, "relative position bias", "pre-norm"),
    "mbart": ("BART-shaped", "separate", 4, "none inside attention", "pre-norm"),  # unlike BART's post-LN
}
# the configs' own word: attention and feed-forward in parallel (StableLM's use_parallel_residual, Falcon's
# parallel_attn; Phi-2's and GPT-J's layers always); a mixture of experts (Mixtral's num_local_experts, Qwen2-MoE's)
PARALLEL = {"stablelm", "phi", "falcon", "gptj", "codegen"}
EXPERTS = {"mixtral": 4, "qwen2-moe": 4, "olmoe": 4}
# the query and key norms the check must find (the configs' q_norm and k_norm over num_heads * head_dim)
QK_NORMS = {"olmoe": "over the whole query and key projections", "olmo3": "over the whole query and key projections"}
NOT_DIFFERENTIABLE: set[str] = (
    set()
)  # every kind's layers differentiate in forward mode (Bloom's GELU: plain_activations)


@pytest.fixture(scope="module", params=FOUND_LAYOUT_KINDS)
def found_model(request, tmp_path_factory):
    """(kind, its tiny model loaded through the library's loader, which found and checked its layout)."""
    kind = request.param
    return kind, load_model(str(save_tiny(kind, tmp_path_factory.mktemp(f"found-{kind}"))))


def test_the_layout_found_names_its_parts(found_model):
    kind, lm = found_model
    found = found_for(lm.encoder.config)
    assert found is not None and found.family is not None
    shape, projections, kv_heads, positions, norm = FOUND[kind]
    assert found.parts["shape"] == shape and found.parts["projections"].startswith(projections)
    assert f"{kv_heads} key/value" in found.parts["heads"] and positions in found.parts["positions"]
    assert found.parts["norm"].endswith(f"({norm})")
    refused = {s for s in ("norms", "residual_ln", "hta", "ablation", "queries_keys") if unsupported_reason(
        lm.encoder.config, s)}  # fmt: skip
    assert refused == ({"hta"} if kind in NOT_DIFFERENTIABLE else set())
    facts = dict(lm.facts.layout_found)
    assert facts == found.parts and lm.facts.layout_note().startswith("Layout found in the model and checked")
    assert facts["residual"].startswith("parallel" if kind in PARALLEL else "sequential")
    assert ("feed-forward" in facts) == (kind in EXPERTS)
    assert ("query/key norms" in facts) == (kind in QK_NORMS)
    assert facts.get("query/key norms", "").startswith(QK_NORMS.get(kind, ""))
    if kind in EXPERTS:
        assert facts["feed-forward"].startswith(f"a mixture of {EXPERTS[kind]} experts")


def test_a_listed_family_says_no_layout_found(tmp_path):
    """A family in the list (Llama) is laid out from its entry: nothing found, no note."""
    lm = load_model(str(save_tiny("llama", tmp_path / "llama")))
    assert found_for(lm.encoder.config) is None and lm.facts.layout_found == () and lm.facts.layout_note() is None


def _own_attention_output(lm, kind: str) -> tuple[list[torch.Tensor], tuple[torch.Tensor, ...], list[torch.Tensor]]:
    """The layer inputs x, the model's own attentions and the attention output projections' outputs of one pass."""
    n_layers, inputs, outputs = lm.facts.n_layers, [], []
    layers = [lm.encoder.get_submodule(OUTPUT[kind].format(l).split(".")[0] + f".{l}") for l in range(n_layers)]
    hooks = [
        m.register_forward_pre_hook(
            lambda _m, a, k: inputs.append((a[0] if a else k["hidden_states"])[0]), with_kwargs=True
        )
        for m in layers
    ]
    hooks += [lm.encoder.get_submodule(OUTPUT[kind].format(l)).register_forward_hook(
        lambda _m, _a, out: outputs.append(out[0])) for l in range(n_layers)]  # fmt: skip
    ids = torch.tensor([encode(lm, TEXT).input_ids])
    no_cache = {} if kind in FOUND_ENCODER_DECODER_KINDS else {"use_cache": False}
    try:
        with torch.no_grad():
            own = lm.encoder(input_ids=ids, output_attentions=True, **no_cache).attentions
    finally:
        for hook in hooks:
            hook.remove()
    return inputs, own, outputs


def test_queries_and_keys_give_the_models_own_attention(found_model):
    """softmax(qk_scale q.k + score_bias), later keys masked in a decoder, is the model's output_attentions."""
    kind, lm = found_model
    r = run(lm, TEXT, capture_qk=True)
    _, own, _ = _own_attention_output(lm, kind)
    logits = r.qk_scale[:, None, None, None] * np.einsum("lhid,lhjd->lhij", r.queries.astype(np.float64), r.keys)
    if r.score_bias is not None:
        logits = logits + r.score_bias
    if lm.facts.causal:
        logits[..., np.triu(np.ones((r.n, r.n), bool), 1)] = -np.inf
    e = np.exp(logits - logits.max(-1, keepdims=True))
    # float32 q and k of magnitude ~1, exponentiated: relative errors of ~1e-7 in the weights
    np.testing.assert_allclose(e / e.sum(-1, keepdims=True), torch.stack(own)[:, 0].numpy(), atol=1e-5)
    assert (r.score_bias is not None) == (kind in ("bloom", "mt5"))  # ALiBi; T5's relative position bias


def test_norms_rebuild_x_plus_the_attention_output(found_model):
    """METHODS §12 for pre-norm stacks: sum_j z_ij + g_i(b_O) from the captured values and W_O is x_i plus the
    model's own attention output projection's output (its parallel residual or experts aside)."""
    kind, lm = move_off_initial_norms(found_model)
    r = run(lm, TEXT, capture_qk=False, capture_norms=True)
    w = r.norm_weights
    assert not w.post_layer_norm
    inputs, _, outputs = _own_attention_output(lm, kind)
    vectors = norms.head_vectors(r.values, w.out_weight)
    heads, d = lm.facts.n_heads, lm.facts.head_dim
    for layer in range(lm.facts.n_layers):
        parts = norms.layer_norm_parts(
            r.attentions[layer], vectors[layer], r.layer_inputs[layer], w.out_bias[layer], w.gamma[layer],
            w.beta[layer], float(w.eps[layer]), post_layer_norm=False,
        )  # fmt: skip
        own = (inputs[layer] + outputs[layer]).numpy()
        magnitude = np.einsum("hij,hjc,hck->ik", np.abs(r.attentions[layer]), np.abs(r.values[layer]),
                              np.abs(w.out_weight[layer])) + np.abs(w.out_bias[layer]) + np.abs(inputs[layer].numpy())  # fmt: skip
        # float32 sums over n keys, heads * d and the residual: k eps sum|terms| per element (support.tolerances)
        tolerance = (r.n + heads * d + 2) * EPS32 * magnitude
        assert (np.abs(parts.output() - own) <= tolerance).all(), (kind, layer)


def move_off_initial_norms(found_model):
    """The model with its norms' weights and every bias moved off their initial values (a misplaced gamma fails)."""
    kind, lm = found_model
    move_off_initial(lm.encoder, seed=2)
    return kind, lm


def test_ablation_equals_the_models_forward_with_a_zeroed_head(found_model):
    """Two heads ablated alone: the replay's hidden effect equals that of the model's own forward pass with the head's
    slice of the output projection's input zeroed (METHODS §15)."""
    kind, lm = found_model
    e = encode(lm, TEXT)
    ids = torch.tensor([e.input_ids])
    d, last = lm.facts.head_dim, lm.facts.n_layers - 1
    heads = [(0, 1), (last, 3)]
    found = variant_effects(prepare(lm, [e], with_mlm=False), [Variant("ablate", (h,)) for h in heads])
    no_cache = {} if kind in FOUND_ENCODER_DECODER_KINDS else {"use_cache": False}
    with torch.no_grad():
        clean = lm.encoder(input_ids=ids, **no_cache).last_hidden_state[0].double()
    for k, (layer, head) in enumerate(heads):

        def zero(_module, args, head=head):
            c = args[0].clone()
            c[..., head * d : (head + 1) * d] = 0
            return (c, *args[1:])

        handle = lm.encoder.get_submodule(OUTPUT[kind].format(layer)).register_forward_pre_hook(zero)
        try:
            with torch.no_grad():
                changed = lm.encoder(input_ids=ids, **no_cache).last_hidden_state[0].double()
        finally:
            handle.remove()
        hidden = float(((clean - changed).norm(dim=-1) / clean.norm(dim=-1)).mean())
        assert hidden > 0 and found["hidden"][k, 0] == pytest.approx(hidden, abs=REPLAY_ATOL), (kind, layer, head)


@pytest.mark.slow
def test_attribution_equals_reverse_mode_on_two_heads(found_model):
    """Exact HTA through the model's own layers (its experts, parallel residual and rotary included) against plain
    reverse mode."""
    kind, lm = found_model
    e = encode(lm, "Cats sleep a lot.")
    if kind in NOT_DIFFERENTIABLE:
        with pytest.raises(UnsupportedModelError, match="differentiated in forward mode"):
            hidden_token_attribution(lm, e, mode="exact")
        return
    exact = hidden_token_attribution(lm, e, mode="exact")
    heads = [(0, 1), (lm.facts.n_layers - 1, 3)]
    ref_in, ref_prev = reverse_mode_reference(lm, e, heads)
    tolerance = (e.n + lm.facts.hidden_size) * EPS32  # as for the listed decoders
    for (layer, head), ref_i, ref_p in zip(heads, ref_in, ref_prev):
        np.testing.assert_allclose(exact.input[layer, head], ref_i, atol=tolerance)
        np.testing.assert_allclose(exact.previous[layer, head], ref_p, atol=tolerance)


@pytest.fixture
def mixtral(tmp_path):
    return load_model(str(save_tiny("mixtral", tmp_path / "mixtral")))


def _refound(lm) -> None:
    """Find and check the layout of the (changed) model again, as loading does."""
    find_layout(lm.encoder, causal=True, configs=[lm.causal_lm.config] if lm.causal_lm is not None else [])


def test_a_changed_output_projection_is_refused_naming_it(mixtral):
    """Layer 1's output projection adds 0.01 beyond its weight and bias: norms, attribution and ablation are refused
    naming it; queries and keys, which do not read it, still run."""
    projection = mixtral.encoder.layers[1].self_attn.o_proj
    plain = projection.forward
    projection.forward = lambda x: plain(x) + 0.01
    _refound(mixtral)
    for statistic in ("norms", "hta", "ablation"):
        reason = unsupported_reason(mixtral.encoder.config, statistic)
        assert reason is not None and "the output projection self_attn.o_proj" in reason, reason
    with pytest.raises(UnsupportedModelError, match=r"output projection self_attn\.o_proj"):
        layout(mixtral.encoder, "norms")
    assert unsupported_reason(mixtral.encoder.config, "queries_keys") is None


def test_attention_reading_other_than_its_norm_is_refused_naming_the_norm(mixtral):
    """Layer 0's attention reads its norm's output plus 0.01: the norms and attribution are refused naming
    input_layernorm."""
    attention = mixtral.encoder.layers[0].self_attn
    attention.register_forward_pre_hook(
        lambda _m, args, kwargs: (args, {**kwargs, "hidden_states": kwargs["hidden_states"] + 0.01}), with_kwargs=True
    )
    _refound(mixtral)
    reason = unsupported_reason(mixtral.encoder.config, "norms")
    assert reason is not None and "the norm input_layernorm" in reason and "'mixtral' model" in reason, reason


def test_the_json_and_a_result_file_say_the_layout_found(found_model, tmp_path):
    """norms --json carries layout_found (part -> words) as the facts hold it; a result file gives it back."""
    from attnlib.analyses.base import run_analysis, run_of_record
    from attnlib.analyses.norms import NORMS, NormOptions
    from attnlib.results.files import read_result_file, write_result_file

    _, lm = found_model
    ran = run_analysis(NORMS, lm, NormOptions(), text=TEXT)
    assert ran.to_json()["layout_found"] == dict(lm.facts.layout_found) == found_for(lm.encoder.config).parts
    path = tmp_path / "norms.json"
    write_result_file(path, ran.result_file())
    back = run_of_record(NORMS, read_result_file(path.read_bytes()))
    assert back.facts.layout_found == lm.facts.layout_found and back.to_json()["layout_found"] == dict(
        lm.facts.layout_found
    )


def test_blooms_gelu_is_swapped_for_its_plain_function_with_the_same_outputs(tmp_path):
    """Bloom's GELU is an autograd.Function that jvp cannot run through: the loader swaps it for the function that the
    Function's forward calls, so the model's logits are transformers' own, bit for bit, and its layers differentiate
    in forward mode."""
    from transformers import AutoModelForCausalLM

    folder = save_tiny("bloom", tmp_path / "bloom")
    lm = load_model(str(folder))
    own = AutoModelForCausalLM.from_pretrained(folder, attn_implementation="eager").eval()
    assert type(own.transformer.h[0].mlp.gelu_impl).__name__ == "BloomGelu"
    assert type(lm.causal_lm.transformer.h[0].mlp.gelu_impl).__name__ == "PlainActivation"
    ids = torch.tensor([[3, 17, 5, 9, 11, 4]])
    with torch.no_grad():
        assert torch.equal(lm.causal_lm(ids).logits, own(ids).logits)
    x = torch.randn(2, 5, lm.facts.hidden_size)
    _, tangent = torch.func.jvp(lm.causal_lm.transformer.h[0].mlp.gelu_impl, (x,), (torch.ones_like(x),))
    with pytest.raises(RuntimeError):  # the model's own GELU has no forward-mode rule
        torch.func.jvp(own.transformer.h[0].mlp.gelu_impl, (x,), (torch.ones_like(x),))
    from transformers.models.bloom.modeling_bloom import bloom_gelu_back

    torch.testing.assert_close(tangent, bloom_gelu_back(torch.ones_like(x), (x,)))  # its backward: a tuple of x
