"""Composition scores (METHODS §22) against TransformerLens's formula written out here on dense d x d matrices, from
weights read by module path (GPT-2: LayerNorm folded and centred, Conv1D; Llama: grouped-query attention, rotary
positions left out, RMSNorm folded; Qwen3: query/key norms left out); the trained decoder's K-composition over its
checkpoints."""

from __future__ import annotations

import numpy as np
import pytest

import attnlib
from attnlib.core.model import TRAINED_MODEL, checkpoints_of, load_model
from support.cli import run_cli
from support.models import save_tiny


def gpt2_heads(model):
    """W_Q, W_K, W_V [L, H, d, d_h] and W_O [L, H, d_h, d] as TransformerLens processes GPT-2 (fold_ln, centring)."""
    config = model.config
    d, H = config.n_embd, config.n_head
    dh = d // H
    found = []
    for block in model.transformer.h:
        gamma = block.ln_1.weight.detach().double().numpy()
        w = block.attn.c_attn.weight.detach().double().numpy()  # Conv1D [d, 3d]
        o = block.attn.c_proj.weight.detach().double().numpy()  # [d (input), d]
        layer = []
        for h in range(H):
            q, k, v = (gamma[:, None] * w[:, p * d + h * dh : p * d + (h + 1) * dh] for p in range(3))
            q, k, v = (x - x.mean(0, keepdims=True) for x in (q, k, v))
            oh = o[h * dh : (h + 1) * dh]
            layer.append((q, k, v, oh - oh.mean(1, keepdims=True)))
        found.append(layer)
    return found


def llama_heads(model):
    """The same for Llama-shaped decoders (RMSNorm: folded, no centring; key and value of the head's group)."""
    config = model.config
    H, kv = config.num_attention_heads, config.num_key_value_heads
    dh = getattr(config, "head_dim", None) or config.hidden_size // H
    found = []
    for layer in model.model.layers:
        gamma = layer.input_layernorm.weight.detach().double().numpy()
        attn = layer.self_attn
        weights = [getattr(attn, f"{p}_proj").weight.detach().double().numpy() for p in "qkvo"]
        heads = []
        for h in range(H):
            g = h // (H // kv)
            q = gamma[:, None] * weights[0][h * dh : (h + 1) * dh].T
            k = gamma[:, None] * weights[1][g * dh : (g + 1) * dh].T
            v = gamma[:, None] * weights[2][g * dh : (g + 1) * dh].T
            heads.append((q, k, v, weights[3][:, h * dh : (h + 1) * dh].T))
        found.append(heads)
    return found


def score(a, b):
    return np.linalg.norm(a @ b) / (np.linalg.norm(a) * np.linalg.norm(b))


@pytest.mark.parametrize("kind", ["gpt2", "llama", "qwen3"])
def test_composition_is_transformer_lens_formula_on_dense_matrices(kind, tmp_path, one_thread):
    folder = save_tiny(kind, tmp_path)
    lm = load_model(str(folder))
    data = attnlib.compose(lm).to_json()
    model = lm.causal_lm  # its weights read below by module path
    heads = gpt2_heads(model) if kind == "gpt2" else llama_heads(model)
    L, H = len(heads), len(heads[0])
    assert np.array(data["q"]).shape == (L, H, L, H)
    for l1 in range(L):
        for h1 in range(H):
            _, _, v1, o1 = heads[l1][h1]
            ov = v1 @ o1
            for l2 in range(L):
                for h2 in range(H):
                    if l2 <= l1:
                        assert data["q"][l1][h1][l2][h2] == data["k"][l1][h1][l2][h2] == data["v"][l1][h1][l2][h2] == 0
                        continue
                    q2, k2, v2, o2 = heads[l2][h2]
                    qk = q2 @ k2.T
                    expected = {"q": score(ov, qk), "k": score(ov, qk.T), "v": score(ov, v2 @ o2)}
                    for name, value in expected.items():
                        # float32 products of d = 32 terms, against float64: relative 1e-5 is ample
                        assert data[name][l1][h1][l2][h2] == pytest.approx(value, rel=1e-5), (name, l1, h1, l2, h2)


def test_a_post_norm_model_is_refused_in_words(tiny_model_dir):
    ran = run_cli("compose", "--model", str(tiny_model_dir), "--json")
    assert ran.code == 2 and ran.err.count("\n") == 1 and "post-LN" in ran.err


@pytest.mark.slow
def test_k_composition_into_the_induction_heads_rises_over_training():
    """Senders in layer 0 into the induction heads 1-0, 1-1, 1-2 (the role map's, METHODS §20): K-composition rises from
    step0 to the last checkpoint (0.11-0.14 at step0, near 1/sqrt(d) = 0.125), more than Q and V do."""
    names = checkpoints_of(TRAINED_MODEL)
    first, last = (attnlib.compose(name).to_json() for name in (names[0], names[-1]))
    induction = [0, 1, 2]
    rise = {kind: np.mean(np.array(last[kind])[0, :, 1, induction]) - np.mean(np.array(first[kind])[0, :, 1, induction])
            for kind in "qkv"}  # fmt: skip
    assert rise["k"] > 0.05 and rise["k"] > 3 * max(rise["q"], rise["v"], 0.0), rise
