"""The `lens` analysis (METHODS §21) on tiny models, each number against an independent computation from the model's
own modules: the lens of the last node against the model's own logits (equal within float32 rounding), of the other
nodes against the model's hidden states put through its own final norm and LM head modules; the attribution's sum
against the model's own logit before soft-capping, captured with a hook on its LM head (Gemma 2's soft-capping,
Cohere's logit scale); each head's readout against a direct unembedding of the head's output, computed here from
the output projection's input slice (a pre-hook) times its weight's slice; the JSON keys and the bad input."""

from __future__ import annotations

import pytest
import torch

import attnlib
from attnlib.analyses.lens import LENS, LensOptions, LensResult, compute_lens
from attnlib.core.corpus import CorpusInput
from attnlib.core.families import UnsupportedModelError
from attnlib.core.model import load_model
from attnlib.core.runner import InputError, encode, model_inputs
from attnlib.stats.lens import HEAD_CHECK
from support.cli import run_cli
from support.models import move_off_initial, save_tiny
from support.tolerances import FORWARD_RTOL

pytestmark = pytest.mark.usefixtures("one_thread")
TEXT = "The cat sat on the mat. The cat"
QUICK = ("gpt2", "llama", "gemma2", "cohere")
SLOW = ("qwen2", "gemma", "mistral", "phi3", "opt", "gpt-neox", "mixtral", "phi", "falcon", "gptj")
KINDS = [*QUICK, *(pytest.param(k, marks=pytest.mark.slow) for k in SLOW)]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """kind -> a tiny model of that kind, biases and norm weights moved off their initial values (once per module)."""
    cache: dict = {}

    def get(kind: str):
        if kind not in cache:
            lm = load_model(str(save_tiny(kind, tmp_path_factory.mktemp(f"lens-{kind}"))))
            move_off_initial(lm.causal_lm or lm.mlm)
            cache[kind] = lm
        return cache[kind]

    return get


def _own(lm, text: str):
    """The model's own pass: its logits [n, V], its logits before soft-capping and logit scale from a hook on its LM
    head [n, V], and its hidden states."""
    whole = lm.causal_lm
    seen = []
    handle = whole.get_output_embeddings().register_forward_hook(lambda _m, _a, out: seen.append(out))
    try:
        with torch.no_grad():
            out = whole(**model_inputs(lm, [encode(lm, text)]), output_hidden_states=True)
    finally:
        handle.remove()
    scale = float(getattr(whole, "logit_scale", None) or 1.0)
    return out.logits[0], seen[0][0] * scale, out.hidden_states


def _tolerance(values: torch.Tensor) -> float:
    return FORWARD_RTOL * float(values.abs().max())


@pytest.mark.parametrize("kind", KINDS)
def test_lens_and_attribution_against_the_models_own_logits(models, kind):
    lm = models(kind)
    result = compute_lens(lm, CorpusInput(TEXT), LensOptions(top=5))
    logits, uncapped, _ = _own(lm, TEXT)
    t = result.position
    assert t == len(result.tokens) - 1
    last = result.nodes[-1]
    assert (last.kind, last.layer) == ("R", lm.facts.n_layers - 1)
    own = logits[t]
    for listed in (last.top, last.bottom):  # the last node's reading is the model's own logits
        assert [x.logit for x in listed] == pytest.approx(own[[x.id for x in listed]].tolist(), abs=_tolerance(own))
    assert last.top[0].id == int(own.argmax()) and last.bottom[0].id == int(own.argmin())
    assert result.prediction[0].id == int(own.argmax())
    assert result.prediction[0].value == pytest.approx(float(torch.softmax(own.double(), -1).max()), rel=1e-5)
    dla = result.dla
    assert dla is not None and dla.token.id == int(own.argmax())
    before_cap = uncapped[t]
    assert dla.logit == pytest.approx(float(before_cap[dla.token.id]), abs=_tolerance(before_cap))
    assert dla.total == pytest.approx(dla.logit, abs=_tolerance(before_cap))
    assert dla.max_error <= 4 * _tolerance(before_cap)
    assert len(dla.heads) == lm.facts.n_layers and all(len(row) == lm.facts.n_heads for row in dla.heads)


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_lens_of_every_node_against_the_final_norm_and_head_modules(models, kind):
    """R^l (l < L - 1) and E against hidden_states[l + 1] and [0] through the model's own final norm and LM head;
    A^l's table follows R^(l-1)'s (its rank changes read there)."""
    lm = models(kind)
    result = compute_lens(lm, CorpusInput(TEXT), LensOptions(position=3, top=4))
    _, _, hidden = _own(lm, TEXT)
    whole = lm.causal_lm
    final = whole.transformer.ln_f if kind == "gpt2" else whole.model.norm
    nodes = {(n.kind, n.layer): n for n in result.nodes}
    for layer in (None, *range(lm.facts.n_layers - 1)):
        node = nodes[("E", None)] if layer is None else nodes[("R", layer)]
        with torch.no_grad():
            reading = whole.get_output_embeddings()(final(hidden[0 if layer is None else layer + 1][0, 3]))
        ids = [x.id for x in node.top]
        assert ids == reading.topk(4).indices.tolist()
        assert [x.logit for x in node.top] == pytest.approx(reading[ids].tolist(), abs=_tolerance(reading))
    order = [(n.kind, n.layer) for n in result.nodes]
    assert order == [("E", None)] + [(k, l) for l in range(lm.facts.n_layers) for k in ("A", "R")]
    assert all(x.rank_change is None for x in result.nodes[0].top)
    assert all(isinstance(x.rank_change, int) for n in result.nodes[1:] for x in n.top + n.bottom)


def test_raw_mode_reads_the_unembedding_alone(models):
    lm = models("gemma2")  # soft-capped: raw logits are capped as the model caps its own
    result = compute_lens(lm, CorpusInput(TEXT), LensOptions(position=2, top=4, mode="raw"))
    _, _, hidden = _own(lm, TEXT)
    whole = lm.causal_lm
    cap = whole.config.final_logit_softcapping
    for layer in range(lm.facts.n_layers - 1):  # R^l is hidden_states[l + 1] (the last is after the final norm)
        with torch.no_grad():
            reading = torch.tanh(whole.get_output_embeddings()(hidden[layer + 1][0, 2]) / cap) * cap
        node = result.nodes[2 + 2 * layer]
        assert (node.kind, node.layer) == ("R", layer)
        assert [x.id for x in node.top] == reading.topk(4).indices.tolist()
        assert [x.logit for x in node.top] == pytest.approx(reading.topk(4).values.tolist(), abs=_tolerance(reading))


def _head_outputs(lm, kind: str, text: str, t: int) -> torch.Tensor:
    """Each head's output at t [L, H, d]: the output projection's input slice times its weight's slice (a pre-hook)."""
    whole = lm.causal_lm
    outputs = [layer.attn.c_proj for layer in whole.transformer.h] if kind == "gpt2" else [
        layer.self_attn.o_proj for layer in whole.model.layers]  # fmt: skip
    contexts = []
    handles = [o.register_forward_pre_hook(lambda _m, args: contexts.append(args[0][0, t])) for o in outputs]
    try:
        with torch.no_grad():
            whole(**model_inputs(lm, [encode(lm, text)]))
    finally:
        for handle in handles:
            handle.remove()
    H, dh = lm.facts.n_heads, lm.facts.head_dim
    per_layer = []
    for o, c in zip(outputs, contexts):
        weight = o.weight if kind == "gpt2" else o.weight.T  # [H * dh, d]: Conv1D keeps [in, out]
        per_layer.append(torch.stack([c[h * dh : (h + 1) * dh] @ weight[h * dh : (h + 1) * dh] for h in range(H)]))
    return torch.stack(per_layer).detach()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_readouts_against_a_direct_unembedding_of_each_heads_output(models, kind):
    lm = models(kind)
    t = 4
    result = compute_lens(lm, CorpusInput(TEXT), LensOptions(position=t, top=3))
    heads = _head_outputs(lm, kind, TEXT, t)
    whole = lm.causal_lm
    final = whole.transformer.ln_f if kind == "gpt2" else whole.model.norm
    seen = []
    handle = final.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0, t]))
    try:
        with torch.no_grad():
            whole(**model_inputs(lm, [encode(lm, TEXT)]))
    finally:
        handle.remove()
    x = seen[0].detach()
    rows = whole.get_output_embeddings().weight.detach()
    if kind == "gpt2":
        direct = (
            final.weight * (heads - heads.mean(-1, keepdim=True)) / torch.sqrt(x.var(unbiased=False) + final.eps)
        ) @ rows.T
    else:
        direct = (final.weight * heads / torch.sqrt(x.pow(2).mean() + final.variance_epsilon)) @ rows.T
    direct = direct.detach()
    for l, row in enumerate(result.readouts):
        for h, readout in enumerate(row):
            assert [x.id for x in readout.promoted] == direct[l, h].topk(3).indices.tolist()
            assert [x.id for x in readout.suppressed] == direct[l, h].topk(3, largest=False).indices.tolist()
            values = [x.value for x in readout.promoted]
            assert values == pytest.approx(direct[l, h].topk(3).values.tolist(), abs=_tolerance(direct[l, h]))
            token = result.dla.token.id
            assert result.dla.heads[l][h] == pytest.approx(float(direct[l, h, token]), abs=_tolerance(direct[l, h]))


def test_a_pair_attributes_the_difference(models):
    lm = models("gpt2")
    one = compute_lens(lm, CorpusInput(TEXT), LensOptions(token=" cat"))
    spelled = compute_lens(lm, CorpusInput(TEXT), LensOptions(token="Ġcat"))  # the vocabulary's own spelling
    assert spelled.dla.token == one.dla.token
    pair = compute_lens(lm, CorpusInput(TEXT), LensOptions(token=" cat", versus=" the"))
    alone = compute_lens(lm, CorpusInput(TEXT), LensOptions(token=" the"))
    assert pair.dla.versus.token == alone.dla.token.token
    assert pair.dla.logit == pytest.approx(one.dla.logit - alone.dla.logit, abs=1e-5)
    differences = [a - b for a, b in zip(one.dla.ffn, alone.dla.ffn)]
    assert pair.dla.ffn == pytest.approx(differences, abs=1e-6)


def test_a_masked_lm_encoder_is_read_through_its_head_and_dla_refused(models):
    lm = models("bert")
    result = compute_lens(lm, CorpusInput("The cat sat."), LensOptions(position=2, top=3))
    with torch.no_grad():
        own = lm.mlm(**model_inputs(lm, [encode(lm, "The cat sat.")])).logits[0, 2]
    last = result.nodes[-1]
    assert [x.id for x in last.top] == own.topk(3).indices.tolist()
    assert result.dla is None and result.readouts is None and "not linear" in result.notes["dla"]
    with pytest.raises(UnsupportedModelError, match="not linear"):
        compute_lens(lm, CorpusInput("The cat sat."), LensOptions(token="cat"))


def test_json_round_trip_and_keys(models):
    lm = models("gpt2")
    run = attnlib.lens(lm, text=TEXT, top=2, versus=" the")
    data = run.to_json()
    assert set(data["dla"]) == {"token", "versus", "heads", "ffn", "attention_bias", "embeddings", "constant", "logit",
                                "max_error"}  # fmt: skip
    assert set(data["nodes"][1]) == {"kind", "layer", "top", "bottom"}
    assert set(data["nodes"][1]["top"][0]) == {"id", "token", "logit", "rank_change"}
    assert set(data["readouts"][0][0]) == {"promoted", "suppressed"}
    assert set(data["readouts"][0][0]["promoted"][0]) == {"id", "token", "value"}
    again = LensResult.from_json(run.result.to_json())
    assert again.to_json() == run.result.to_json()
    assert set(run.tables()) == {"Logit lens", "Direct logit attribution", "Head readouts"}
    assert LENS.name in attnlib.ANALYSES


def test_bad_input_is_one_error_line(models, tmp_path):
    lm = models("gpt2")
    for options, says in (
        (LensOptions(position=40), "position 40 is outside the input"),
        (LensOptions(token=" catmat sat"), "tokens of this model's vocabulary"),
        (LensOptions(versus=""), None),
    ):
        if says is None:
            continue
        with pytest.raises(InputError, match=says):
            compute_lens(lm, CorpusInput(TEXT), options)
    folder = save_tiny("gpt2", tmp_path / "gpt2")
    for argv, says in (
        (["--text", " "], "empty"),
        (["--text", "The cat.", "--position", "9"], "outside the input"),
        (["--text", "The cat.", "--token", "catmat sat"], "not one"),
        (["--text", "The cat.", "--mode", "sideways"], "invalid choice"),
    ):
        ran = run_cli("lens", "--model", str(folder), *argv)
        assert ran.code == 2 and ran.error and says in ran.error, ran
    ran = run_cli("lens", "--text", "The cat.")  # the default MiniLM has no LM head
    assert ran.code == 2 and "has no language-model head" in ran.error


def test_a_half_precision_checkpoint_is_read_in_float32_unless_the_saved_dtype_is_asked(tmp_path):
    folder = save_tiny("llama", tmp_path / "llama")
    model = load_model(str(folder)).causal_lm
    model.to(torch.float16).save_pretrained(folder)
    lm = load_model(str(folder))
    assert (lm.facts.saved_dtype, lm.facts.dtype) == ("float16", "float32")
    result = compute_lens(lm, CorpusInput(TEXT), LensOptions())
    _, uncapped, _ = _own(lm, TEXT)
    assert result.dla.total == pytest.approx(float(uncapped[-1, result.dla.token.id]), abs=_tolerance(uncapped[-1]))
    with pytest.raises(UnsupportedModelError, match="float32"):
        compute_lens(load_model(str(folder), dtype="saved"), CorpusInput(TEXT), LensOptions())


@pytest.mark.slow
def test_parts_that_do_not_add_up_are_said(models):
    """Bloom's attention and MLP modules add their residual inside themselves; where the split misses part of a layer,
    the attribution says so in `notes` (and max_error shows by how much)."""
    lm = models("bloom")
    result = compute_lens(lm, CorpusInput(TEXT), LensOptions())
    _, uncapped, _ = _own(lm, TEXT)
    missed = result.dla.max_error > HEAD_CHECK * float(uncapped[-1].abs().max())
    assert ("do not add up" in result.notes.get("dla", "")) == missed


@pytest.mark.parametrize("kind", ["t5", pytest.param("mbart", marks=pytest.mark.slow)])
def test_an_encoder_decoders_decoder_against_its_own_logits(tmp_path, kind):
    """T5 (pre-norm, tied: d_model**-0.5 before its head) and mBART (pre-norm, biases): the lens's last node is the
    model's own logits at the target position, the attribution over the decoder's self- and cross-attention heads, its
    biases, feed-forward blocks and embeddings adds up to them; each cross-attention head's readout is the largest of
    its direct effects."""
    lm = load_model(str(save_tiny(kind, tmp_path)))
    move_off_initial(lm.seq2seq)
    result = compute_lens(
        lm, CorpusInput("The cat sat on the mat."), LensOptions(target="The cat sat.", position=3, top=5)
    )
    source = lm.tokenizer("The cat sat on the mat.", return_tensors="pt")
    target = lm.seq2seq.prepare_decoder_input_ids_from_labels(labels=lm.tokenizer(text_target="The cat sat.",
                                                                                  return_tensors="pt")["input_ids"])  # fmt: skip
    with torch.no_grad():
        own = lm.seq2seq(**source, decoder_input_ids=target).logits[0, 3]
    assert result.tokens == lm.tokenizer.convert_ids_to_tokens(target[0].tolist())
    last = result.nodes[-1]
    assert [x.logit for x in last.top] == pytest.approx(own[[x.id for x in last.top]].tolist(), abs=_tolerance(own))
    dla = result.dla
    assert dla.logit == pytest.approx(float(own.max()), abs=_tolerance(own))
    assert dla.total == pytest.approx(dla.logit, abs=_tolerance(own)) and dla.max_error <= 4 * _tolerance(own)
    assert len(dla.cross_heads) == len(dla.heads) == 2 and len(result.cross_readouts[1]) == 4
    assert result.to_json()["part"] == "decoder" and "cross_heads" in result.to_json()["dla"]
    if kind == "t5":  # each cross-attention head's output from its output projection's input, unembedded here
        decoder, seen = lm.seq2seq.decoder, []
        outputs = [block.layer[1].EncDecAttention.o for block in decoder.block]
        handles = [o.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0, 3])) for o in outputs]
        handles.append(decoder.final_layer_norm.register_forward_pre_hook(lambda _m, args: seen.append(args[0][0, 3])))
        try:
            with torch.no_grad():
                lm.seq2seq(**source, decoder_input_ids=target)
        finally:
            for handle in handles:
                handle.remove()
        norm, x = decoder.final_layer_norm, seen[-1]
        rows = lm.seq2seq.lm_head.weight * lm.seq2seq.config.d_model**-0.5
        for l, (o, context) in enumerate(zip(outputs, seen)):
            for h in range(4):
                head = context[h * 8 : (h + 1) * 8] @ o.weight[:, h * 8 : (h + 1) * 8].T
                direct = (norm.weight * head / torch.sqrt(x.pow(2).mean() + norm.variance_epsilon) @ rows.T).detach()
                assert [t.id for t in result.cross_readouts[l][h].promoted] == direct.topk(5).indices.tolist()
                assert dla.cross_heads[l][h] == pytest.approx(float(direct[dla.token.id]), abs=_tolerance(direct))


def test_a_post_norm_decoder_is_read_by_the_lens_and_not_split(tmp_path):
    lm = load_model(str(save_tiny("bart", tmp_path)))
    result = compute_lens(lm, CorpusInput("The cat sat."), LensOptions(target="The cat sat."))
    assert result.dla is None and "post-norm" in result.notes["dla"]
    with pytest.raises(UnsupportedModelError, match="post-norm"):
        compute_lens(lm, CorpusInput("The cat sat."), LensOptions(target="The cat sat.", token="."))
