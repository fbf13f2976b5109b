"""Head ablation and importance of decoder-only models (METHODS §15 as §18 changes it), each checked against the
model's own forward passes with hooks written here, by module path, independently of attnlib's families and replay:
ablation zeroes head h's slice at the input of the attention output projection; renormalise reruns the layer with the
first token's key masked out; the LM measure is transformers' own `labels=` loss of the causal-LM model."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from attnlib.analyses.base import run_analysis
from attnlib.analyses.importance import IMPORTANCE, HeadImportance, ImportanceOptions, no_op_sentence
from attnlib.analyses.special import SPECIAL, SpecialOptions
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import load_model
from attnlib.core.runner import encode
from attnlib.stats.importance import Variant, changed_states, prepare, single_head_variants, variant_effects
from support.ablation import REPLAY_ATOL, SENTENCES
from support.cli import run_cli
from support.models import save_tiny

# where each kind keeps layer l's attention module and its output projection (read off the transformers sources)
ATTENTION = {
    "gpt2": "h.{}.attn",
    "llama": "layers.{}.self_attn",
    "gemma2": "layers.{}.self_attn",
    "gpt-neox": "layers.{}.attention",
    "opt": "decoder.layers.{}.self_attn",
    **{kind: "layers.{}.self_attn" for kind in ("qwen2", "qwen3", "gemma", "gemma3", "mistral", "phi3", "olmo2")},
}
OUTPUT = {"gpt2": "c_proj", "gpt-neox": "dense", "opt": "out_proj"}  # the others: o_proj
# float32 effects are differences of float64 reductions of states equal to ~1e-6 (REPLAY_ATOL's reasoning); the
# next-token losses over a 600-token vocabulary agree to ~1e-6, as the masked-LM test's
LOSS_ATOL = 2e-5


@pytest.fixture(scope="module", params=list(ATTENTION))
def decoder(request, tmp_path_factory):
    """(kind, the tiny causal-LM model of that kind loaded through the library's loader)."""
    kind = request.param
    return kind, load_model(str(save_tiny(kind, tmp_path_factory.mktemp(f"ablate-{kind}"))))


def output_projection(lm, kind: str, layer: int) -> torch.nn.Module:
    path = f"{ATTENTION[kind].format(layer)}.{OUTPUT.get(kind, 'o_proj')}"
    return lm.encoder.get_submodule(path)


def forward_with_context(lm, kind: str, ids: torch.Tensor, layer: int, head: int, replace) -> torch.Tensor:
    """The model's own last hidden states [1, n, D] with head `head`'s slice of layer `layer`'s context vectors
    (the output projection's input) replaced by replace(slice)."""
    d = lm.facts.head_dim

    def hook(_module, args):
        c = args[0].clone()
        c[..., head * d : (head + 1) * d] = replace(c[..., head * d : (head + 1) * d])
        return (c, *args[1:])

    handle = output_projection(lm, kind, layer).register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            return lm.encoder(input_ids=ids, use_cache=False).last_hidden_state
    finally:
        handle.remove()


def own_measures(clean: torch.Tensor, changed: torch.Tensor) -> dict[str, float]:
    """§15's embedding and hidden effects of one input written out in float64, and L_M - L by `labels=`."""
    a, b = clean[0].double(), changed[0].double()
    s, s_m = a.mean(0), b.mean(0)
    return {
        "embedding": float(1 - s @ s_m / (s.norm() * s_m.norm())),
        "hidden": float(((a - b).norm(dim=-1) / a.norm(dim=-1)).mean()),
    }


def labels_loss(lm, ids: torch.Tensor, hook=None) -> float:
    """transformers' own next-token loss of the causal-LM model on one input (optionally under a pre-hook)."""
    handle = None if hook is None else hook[0].register_forward_pre_hook(hook[1])
    try:
        with torch.no_grad():
            return float(lm.causal_lm(input_ids=ids, labels=ids, use_cache=False).loss)
    finally:
        if handle is not None:
            handle.remove()


@pytest.mark.slow
def test_single_head_ablations_equal_the_models_own_forward_with_a_zeroed_head(decoder):
    """Every head of every layer: the batched replay's three measures equal those of the model's own forward pass
    with that head's context slice zeroed, the LM measure by transformers' labels= loss."""
    kind, lm = decoder
    enc = [encode(lm, s) for s in SENTENCES]
    prep = prepare(lm, enc)
    L, H = lm.facts.n_layers, lm.facts.n_heads
    variants = single_head_variants(L, H)
    found = variant_effects(prep, variants)
    assert set(found) == {"embedding", "hidden", "mlm"}
    for b, e in enumerate(enc):
        ids = torch.tensor([e.input_ids])
        with torch.no_grad():
            clean = lm.encoder(input_ids=ids, use_cache=False).last_hidden_state
        clean_loss = labels_loss(lm, ids)
        assert float(prep.clean_loss[b]) == pytest.approx(clean_loss, abs=LOSS_ATOL)  # type: ignore[index]
        for k, variant in enumerate(variants):
            (layer, head), d = variant.heads[0], lm.facts.head_dim
            changed = forward_with_context(lm, kind, ids, layer, head, torch.zeros_like)
            for measure, value in own_measures(clean, changed).items():
                assert found[measure][k, b] == pytest.approx(value, abs=REPLAY_ATOL), (kind, variant, measure)

            def zero(_module, args, head=head, d=d):
                c = args[0].clone()
                c[..., head * d : (head + 1) * d] = 0
                return (c, *args[1:])

            lm_effect = labels_loss(lm, ids, (output_projection(lm, kind, layer), zero)) - clean_loss
            assert found["mlm"][k, b] == pytest.approx(lm_effect, abs=LOSS_ATOL), (kind, variant)
    assert np.abs(found["mlm"]).max() > 0 and np.abs(found["embedding"]).max() > 0


def first_key_masked_context(lm, kind: str, ids: torch.Tensor, layer: int) -> torch.Tensor:
    """Layer `layer`'s context vectors [1, n, H d] of the model's own forward pass with key 0 masked out of every
    row's softmax (its additive mask set to the dtype's minimum), as the output projection reads them."""
    attention = lm.encoder.get_submodule(ATTENTION[kind].format(layer))
    seen = []

    def mask_first(_module, args, kwargs):
        mask = kwargs.get("attention_mask")
        assert mask is not None and mask.dim() == 4, f"{kind}: expected a 4-D attention mask, got {mask}"
        mask = mask.clone()
        mask[..., 0] = False if mask.dtype == torch.bool else torch.finfo(mask.dtype).min
        return args, {**kwargs, "attention_mask": mask}

    handles = [
        attention.register_forward_pre_hook(mask_first, with_kwargs=True),
        output_projection(lm, kind, layer).register_forward_pre_hook(lambda _m, args: seen.append(args[0])),
    ]
    try:
        with torch.no_grad():
            lm.encoder(input_ids=ids, use_cache=False)
    finally:
        for handle in handles:
            handle.remove()
    return seen[0]


@pytest.mark.slow
def test_first_token_knockouts_equal_the_models_own_attention_without_that_key(decoder):
    """K = FIRST (position 0; OPT's first token, </s>, is also its SEP; no other end token inside). renormalise: head h's context from the model's own
    layer run with key 0 masked out (row 0, left with no key, gets c' = 0); drop: (1 - A[i, 0]) times that, with
    A the model's own weights. Both through the rest of the model's own forward, against the batched replay."""
    kind, lm = decoder
    e = encode(lm, SENTENCES[2])
    assert (e.cls_mask | e.sep_mask).tolist() == [True] + [False] * (e.n - 1)
    ids = torch.tensor([e.input_ids])
    with torch.no_grad():
        own = lm.encoder(input_ids=ids, output_attentions=True, use_cache=False).attentions
    prep = prepare(lm, [e], with_mlm=False)
    d, H = lm.facts.head_dim, lm.facts.n_heads
    for layer in range(lm.facts.n_layers):
        variants = [Variant(c, ((layer, h),)) for c in ("drop", "renormalise") for h in range(H)]
        batched = {id(v): s for chunk, states in changed_states(prep, variants) for v, s in zip(chunk, states)}
        masked = first_key_masked_context(lm, kind, ids, layer)
        for variant in variants:
            h = variant.heads[0][1]
            renormalised = masked[..., h * d : (h + 1) * d].clone()
            renormalised[:, 0] = 0
            if variant.change == "renormalise":
                new = renormalised
            else:
                new = (1 - own[layer][0, h, :, 0])[None, :, None] * renormalised
            expected = forward_with_context(lm, kind, ids, layer, h, lambda _c, new=new: new)
            np.testing.assert_allclose(
                batched[id(variant)].numpy(), expected[0].numpy(), atol=REPLAY_ATOL, err_msg=f"{kind} {variant}"
            )


def corpus() -> list[CorpusInput]:
    return [CorpusInput(text_a=s) for s in SENTENCES]


@pytest.mark.slow
def test_importance_of_a_decoder_is_the_sink_test(decoder):
    """importance with knockouts: special_share is the `special` analysis's first_share on the same inputs, the
    sink test's Spearman is scipy's on the same arrays, its JSON keeps the encoder's keys (plus kind), and its table
    names the share first_share."""
    kind, lm = decoder
    result: HeadImportance = run_analysis(IMPORTANCE, lm, ImportanceOptions(knockout=True, measure="mlm"),
                                          inputs={"corpus": corpus()}).result  # fmt: skip
    special = run_analysis(SPECIAL, lm, SpecialOptions(), inputs={"corpus": corpus()}).result.special
    np.testing.assert_allclose(result.special_share, special.first_share, rtol=1e-6)
    test = result.no_op()
    for change in ("ablate", "drop", "renormalise"):
        effect = result.effect(change)
        assert effect is not None
        rho = spearmanr(result.special_share.ravel(), effect.ravel()).statistic
        assert test.overall[change] == pytest.approx(rho, abs=1e-12)
    data = result.to_json()
    assert data["kind"] == "decoder" and data["spearman"]["ablation"] == test.overall["ablate"]
    assert set(data) == {"n_inputs", "n_truncated", "measure", "ablation", "special_share", "spearman", "knockout",
                         "kind"}  # fmt: skip
    back = HeadImportance.from_json(data)
    assert back.causal and back.no_op().overall["drop"] == pytest.approx(test.overall["drop"], nan_ok=True)
    sentence = no_op_sentence(result, kind)
    assert "next-token loss" in sentence and "first-token share" in sentence and "[CLS]" not in sentence
    per_head = next(iter(result.tables(kind).values()))  # the share named as a decoder's (§18), heads from 1
    np.testing.assert_array_equal(per_head["first_share"], result.special_share.ravel())
    assert "cls_sep_share" not in per_head and list(per_head["head"][:2]) == [1, 2]


def test_cli_ablate_and_importance_on_a_decoder(tmp_path_factory, tmp_path):
    folder = save_tiny("gpt2", tmp_path_factory.mktemp("gpt2-cli"))
    ran = run_cli("ablate", "--model", str(folder), "--text", SENTENCES[0], "--heads", "1-0", "--json")
    assert ran.code == 0, ran.err
    assert ran.json["mlm"] is not None and ran.json["embedding"] > 0 and ran.json["predictions"] == []
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n".join(SENTENCES) + "\n")
    ran = run_cli(
        "importance",
        "--model",
        str(folder),
        "--corpus",
        str(corpus_file),
        "--knockout",
        "--measure",
        "mlm",
        "--prune",
        "--json",
    )
    assert ran.code == 0, ran.err
    assert (
        ran.json["kind"] == "decoder" and ran.json["measure"] == "mlm" and np.isfinite(ran.json["spearman"]["ablation"])
    )
    assert len(ran.json["pruning"]["mlm"]["effect"]) == 10
    assert np.array(ran.json["knockout"]["drop"]["mlm"]).shape == (2, 4) and "importance" not in ran.json


def test_cli_refuses_the_lm_measure_of_a_classifier_in_one_line(tmp_path_factory, tmp_path):
    folder = save_tiny("llama-classifier", tmp_path_factory.mktemp("classifier-cli"))
    corpus_file = tmp_path / "corpus.txt"
    corpus_file.write_text("\n".join(SENTENCES) + "\n")
    ran = run_cli("importance", "--model", str(folder), "--corpus", str(corpus_file), "--measure", "mlm", "--json")
    assert ran.code == 2
    lines = ran.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and "no trained language-model head" in lines[0]
    ran = run_cli("ablate", "--model", str(folder), "--text", SENTENCES[0], "--heads", "0-1", "--json")
    assert ran.code == 0, ran.err
    assert ran.json["mlm"] is None and ran.json["embedding"] > 0


def test_sink_sentence_by_hand():
    """Two sink heads of four whose first-token drop does 10% of what ablation does: close to a no-op, in a decoder's
    words; an encoder's JSON has no `kind`, a decoder's says so."""
    share = np.array([[0.9, 0.5], [0.1, 0.2]])
    ablate = np.array([[1.0, 1.0], [0.5, 0.2]])
    drop = np.array([[0.1, 0.1], [0.4, 0.1]])
    renormalise = np.array([[0.3, 0.3], [0.4, 0.1]])
    table = {"embedding": None, "hidden": None}
    result = HeadImportance(
        n_inputs=3,
        measure="mlm",
        ablation={**table, "mlm": ablate},
        special_share=share,
        knockout={"drop": {**table, "mlm": drop}, "renormalise": {**table, "mlm": renormalise}},
        causal=True,
    )
    said = no_op_sentence(result, "m")
    assert "changes the next-token loss most for heads 1-2, 1-1, 2-1." in said  # ties: the later head first
    assert "2 of 4 heads are sink heads (more than 30% of their attention on the first token)." in said
    assert "by a median of 0.1, 10% of what switching the head off does (1): the sink is close to a no-op." in said
    assert "Renormalising the rest without it changes it by 0.3, more than dropping." in said
    assert "kind" not in HeadImportance(**{**result.__dict__, "causal": False}).to_json()
    assert result.to_json()["kind"] == "decoder"
