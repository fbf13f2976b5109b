"""METHODS §20's probe scores written as loops over sequences, repeats and positions, from the definitions alone (the
independent computation that tests/stats/test_roles.py and tests/analyses/test_roles.py hold attnlib's to)."""

from __future__ import annotations

import numpy as np
import torch


def looped_repeat_score(maps: np.ndarray, b: int, s: int, r: int, back: int) -> np.ndarray:
    """Mean over sequences and queries i = p(k, m), k >= 2, of sum_{k' < k} A[:, :, i, i - (k - k') s + back]
    (back 1: induction, 0: duplicate-token); maps [inputs, layers, heads, n, n] -> [layers, heads]."""
    out = np.zeros(maps.shape[1:3])
    count = 0
    for seq in maps:
        for k in range(2, r + 1):
            for m in range(1, s + 1):
                i = b + (k - 1) * s + (m - 1)
                out += sum(seq[:, :, i, i - (k - kk) * s + back] for kk in range(1, k))
                count += 1
    return out / count


def looped_previous_score(maps: np.ndarray, b: int) -> np.ndarray:
    """Mean over sequences and rows i >= b + 1 of A[:, :, i, i - 1]."""
    n = maps.shape[-1]
    return np.mean([seq[:, :, i, i - 1] for seq in maps for i in range(b + 1, n)], axis=0)


# --------------------------------------------------------------- the OV circuit read by module path, family by family
# Each reader returns, in float64: W_E [V, d] as the first layer reads it, W_U [d, V] as it reads the final norm's
# output, the final norm, and per layer the norm before attention (None where the heads read the residual stream
# itself: OLMo 2) and every query head's W_V^h [d, d_h] and
# W_O^h [d_h, d] (linear weights are [out, in]; GPT-2's Conv1D [in, out]). No attnlib code: the paths are written here.
LLAMA_LIKE = (
    "llama", "qwen2", "qwen3", "mistral", "gemma", "gemma2", "gemma3", "mixtral", "qwen2-moe", "stablelm", "olmoe"
)  # fmt: skip


def _w(module) -> torch.Tensor:
    return module.weight.detach().double()


def _split_out(weight: torch.Tensor, heads: int, d: int) -> list[torch.Tensor]:
    """An output projection's [hidden, heads * d] weight as each head's W_O^h [d, hidden]."""
    return [weight[:, h * d : (h + 1) * d].T for h in range(heads)]


def _grouped(v_rows: torch.Tensor, heads: int, d: int) -> list[torch.Tensor]:
    """A value projection's rows [kv * d, hidden] as each query head's W_V^h [hidden, d] (its key-value group's)."""
    kv = v_rows.shape[0] // d
    return [v_rows[(h // (heads // kv)) * d : (h // (heads // kv) + 1) * d].T for h in range(heads)]


def ov_from_module_paths(model, kind: str, heads: int, d: int):
    """(W_E, W_U, final norm, [(norm, [W_V^h], [W_O^h]) per layer]) of a causal-LM model of this family."""
    if kind == "gpt2":
        base = model.transformer
        layers = [(b.ln_1, _grouped(_w(b.attn.c_attn).T[2 * d * heads :], heads, d), [
            _w(b.attn.c_proj)[h * d : (h + 1) * d] for h in range(heads)]) for b in base.h]  # fmt: skip
        return _w(base.wte), _w(model.lm_head).T, base.ln_f, layers
    if kind in LLAMA_LIKE or kind == "phi":
        base = model.model
        out = "dense" if kind == "phi" else "o_proj"
        layers = [(b.input_layernorm, _grouped(_w(b.self_attn.v_proj), heads, d),
                   _split_out(_w(getattr(b.self_attn, out)), heads, d)) for b in base.layers]  # fmt: skip
        final = base.final_layernorm if kind == "phi" else base.norm
        return _w(base.embed_tokens), _w(model.lm_head).T, final, layers
    if kind in ("olmo2", "olmo3"):  # no norm before attention; the norm after it left out, as Gemma's (METHODS §20)
        base = model.model
        layers = [(None, _grouped(_w(b.self_attn.v_proj), heads, d), _split_out(_w(b.self_attn.o_proj), heads, d))
                  for b in base.layers]  # fmt: skip
        return _w(base.embed_tokens), _w(model.lm_head).T, base.norm, layers
    if kind == "phi3":
        base = model.model
        layers = []
        for b in base.layers:
            qkv = _w(b.self_attn.qkv_proj)
            kv = (qkv.shape[0] - heads * d) // 2
            layers.append((b.input_layernorm, _grouped(qkv[heads * d + kv :], heads, d),
                           _split_out(_w(b.self_attn.o_proj), heads, d)))  # fmt: skip
        return _w(base.embed_tokens), _w(model.lm_head).T, base.norm, layers
    if kind == "opt":
        base = model.model.decoder
        embed, unembed = _w(base.embed_tokens), _w(model.lm_head).T
        if base.project_in is not None:  # the embeddings' width projected into the model's, and back out
            embed = embed @ _w(base.project_in).T
            unembed = _w(base.project_out).T @ unembed
        layers = [(b.self_attn_layer_norm, _grouped(_w(b.self_attn.v_proj), heads, d),
                   _split_out(_w(b.self_attn.out_proj), heads, d)) for b in base.layers]  # fmt: skip
        return embed, unembed, base.final_layer_norm, layers
    if kind in ("gpt-neox", "bloom"):  # one fused projection, [q, k, v] of each head in turn
        base = model.gpt_neox if kind == "gpt-neox" else model.transformer
        blocks = base.layers if kind == "gpt-neox" else base.h
        layers = []
        for b in blocks:
            attention = b.attention if kind == "gpt-neox" else b.self_attention
            qkv = _w(attention.query_key_value).reshape(heads, 3, d, -1)
            layers.append((b.input_layernorm, [qkv[h, 2].T for h in range(heads)],
                           _split_out(_w(attention.dense), heads, d)))  # fmt: skip
        if kind == "gpt-neox":
            return _w(base.embed_in), _w(model.lm_head).T, base.final_layer_norm, layers
        return _w(base.word_embeddings), _w(model.lm_head).T, base.ln_f, layers
    if kind in ("gpt-bigcode", "falcon"):  # multi-query: all queries, then the one key and the one value head
        base = model.transformer
        layers = []
        for b in base.h:
            attention, norm = (b.attn, b.ln_1) if kind == "gpt-bigcode" else (b.self_attention, b.input_layernorm)
            fused = _w(attention.c_attn if kind == "gpt-bigcode" else attention.query_key_value)
            out = attention.c_proj if kind == "gpt-bigcode" else attention.dense
            layers.append((norm, _grouped(fused[heads * d + d :], heads, d), _split_out(_w(out), heads, d)))
        embed = base.wte if kind == "gpt-bigcode" else base.word_embeddings
        return _w(embed), _w(model.lm_head).T, base.ln_f, layers
    if kind == "codegen":  # qkv_proj: 4 model-parallel blocks, each [q | v | k] of a quarter of the heads
        base = model.transformer
        layers = []
        for b in base.h:
            blocks = _w(b.attn.qkv_proj).reshape(4, 3, heads * d // 4, -1)
            layers.append((b.ln_1, _grouped(blocks[:, 1].reshape(heads * d, -1), heads, d),
                           _split_out(_w(b.attn.out_proj), heads, d)))  # fmt: skip
        return _w(base.wte), _w(model.lm_head).T, base.ln_f, layers
    if kind == "gptj":
        base = model.transformer
        layers = [(b.ln_1, _grouped(_w(b.attn.v_proj), heads, d), _split_out(_w(b.attn.out_proj), heads, d))
                  for b in base.h]  # fmt: skip
        return _w(base.wte), _w(model.lm_head).T, base.ln_f, layers
    raise ValueError(f"no module paths written for {kind!r}")


def norm_gamma(norm, kind: str) -> torch.Tensor:
    """A norm's per-coordinate weight as the model applies it: Gemma's RMSNorms multiply by 1 + weight."""
    return _w(norm) + (1.0 if kind.startswith("gemma") else 0.0)


def copying_from_paths(model, kind: str, heads: int, d: int) -> np.ndarray:
    """§20's copying score of every head [layers, heads] from the weights read by module path: the eigenvalues of
    W_O^h W_U' W_E' W_V^h' (d_h x d_h: the non-zero ones of the V x V circuit), gammas folded in, and for LayerNorm
    models TransformerLens's centring (W_E's and W_O^h's rows over d, W_U's rows over V)."""
    embed, unembed, final, layers = ov_from_module_paths(model, kind, heads, d)
    centred = isinstance(final, torch.nn.LayerNorm)
    unembed = norm_gamma(final, kind)[:, None] * unembed
    if centred:
        embed = embed - embed.mean(1, keepdim=True)
        unembed = unembed - unembed.mean(1, keepdim=True)
    circuit = unembed @ embed  # [d, d]
    scores = np.zeros((len(layers), heads))
    for l, (norm, values, outputs) in enumerate(layers):
        for h in range(heads):
            w_v = values[h] if norm is None else norm_gamma(norm, kind)[:, None] * values[h]
            w_o = outputs[h] - outputs[h].mean(1, keepdim=True) if centred else outputs[h]
            eigenvalues = torch.linalg.eigvals(w_o @ circuit @ w_v).numpy()
            scores[l, h] = eigenvalues.real.sum() / np.abs(eigenvalues).sum()
    return scores
