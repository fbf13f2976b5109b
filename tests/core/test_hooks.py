"""Named hook sites (attnlib.core.hooks): hooks removed after the block whatever happens, the capture names filter what
is kept, captured attention equals the model's own output_attentions (an encoder and decoders), captured queries and
keys rebuild it, what a pass captures is the union of its accumulators', and a report part needing qk gets them."""

from __future__ import annotations

import threading

import numpy as np
import pandas as pd
import pytest
import torch

from attnlib.analyses.attention import AttentionOptions
from attnlib.analyses.base import Analysis
from attnlib.analyses.qk import QK, QKOptions
from attnlib.core.batches import accumulate
from attnlib.core.corpus import CorpusInput
from attnlib.core.hooks import (
    ATTENTION,
    CAPTURES,
    NORMS,
    attention_configs,
    attentions_returned,
    capture_set,
    captures_of,
    hooked,
    hooks,
    site_modules,
    switched_attention,
)
from attnlib.core.model import load_model
from attnlib.core.runner import encode, model_inputs, run, run_encoded
from attnlib.present.report import PartResult, ReportOptions, ReportPart, run_parts
from support.models import save_tiny

TEXTS = ["The cat sat on the mat.", "A dog barked at the moon, twice."]
EPS = float(np.finfo(np.float32).eps)


@pytest.fixture(scope="module", params=["bert", "gpt2", "llama"])
def lm(request, tmp_path_factory):
    """A tiny BERT, a tiny GPT-2 and a tiny Llama (rotary, grouped queries), loaded through the library's loader."""
    return load_model(str(save_tiny(request.param, tmp_path_factory.mktemp(f"hooks-{request.param}"))))


def hook_count(module: torch.nn.Module) -> int:
    """Forward hooks and forward pre-hooks on the module and every submodule."""
    return sum(len(m._forward_hooks) + len(m._forward_pre_hooks) for m in module.modules())


def batch_of(lm, texts=TEXTS) -> dict:
    return model_inputs(lm, [encode(lm, t) for t in texts])


def test_hooks_are_removed_after_the_block_and_after_an_exception_in_it(tiny_model):
    encoder = tiny_model.encoder
    with torch.no_grad():  # transformers installs its own (lasting) output-capturing hooks at the first such call
        encoder(**batch_of(tiny_model), output_attentions=True, output_hidden_states=True)
    before = hook_count(encoder)
    with hooks(tiny_model, CAPTURES) as cache, torch.no_grad():
        assert hook_count(encoder) > before  # every site is hooked inside the block
        encoder(**batch_of(tiny_model))
    assert hook_count(encoder) == before and len(cache.attn) == tiny_model.facts.n_layers
    with pytest.raises(RuntimeError, match="inside the block"), hooks(tiny_model, CAPTURES):
        raise RuntimeError("inside the block")
    assert hook_count(encoder) == before
    lay = cache.layout
    assert lay is not None

    def failing(_module, _args):
        raise RuntimeError("in the hook")

    with (
        pytest.raises(RuntimeError, match="in the hook"),
        torch.no_grad(),
        hooked(site_modules(lay, "output"), failing),
    ):
        encoder(**batch_of(tiny_model))
    assert hook_count(encoder) == before


def test_capture_names_filter_what_is_kept(tiny_model):
    batch = batch_of(tiny_model)
    with hooks(tiny_model, {"attn"}) as cache, torch.no_grad():
        tiny_model.encoder(**batch)
    assert len(cache.attn) == tiny_model.facts.n_layers
    assert cache.layout is None and not (cache.heads_calls or cache.projections or cache.layer_inputs)
    with hooks(tiny_model, {"qk"}) as cache, torch.no_grad():
        out = tiny_model.encoder(**batch)
    assert out.attentions is None and not cache.attn  # attention was not asked for: the model was not made to return it
    assert len(cache.heads().queries) == tiny_model.facts.n_layers and not cache.layer_inputs
    encoded = [encode(tiny_model, t) for t in TEXTS]
    plain = run_encoded(tiny_model, encoded)[0]
    assert plain.queries is None and plain.values is None and plain.layer_inputs is None and plain.maps is None
    values = run_encoded(tiny_model, encoded, {"values"})[0]
    assert values.values is not None and values.value_norm is not None and values.queries is None
    assert values.layer_inputs is None and values.block_scale is None
    assert capture_set(["values", "layer_inputs", "norm_inputs", "values"]) == NORMS
    with pytest.raises(ValueError, match="unknown capture 'norm_maps'"):  # a statistic now: run_encoded's batch_maps
        capture_set({"norm_maps"})
    with pytest.raises(ValueError, match="unknown capture 'queries'"):
        capture_set({"queries"})


def test_layers_keep_only_those_layers_projections(lm):
    batch = batch_of(lm)
    with hooks(lm, {"qk", "values"}) as every, torch.no_grad():
        lm.encoder(**batch)
    last = lm.facts.n_layers - 1
    with hooks(lm, {"qk", "values"}, layers=[last]) as one, torch.no_grad():
        lm.encoder(**batch)
    assert all(len(p) == 1 for p in one.projections) and len(one.heads_calls) == lm.facts.n_layers
    assert not one.heads_calls[0].arguments  # a layer left out keeps none of its call's tensors
    full, kept = every.heads(), one.heads()
    assert len(kept.queries) == len(kept.values) == 1 and kept.scales == [full.scales[last]]
    for name in ("queries", "keys", "values"):  # the same pass, the same arithmetic: equal
        assert torch.equal(getattr(kept, name)[0], getattr(full, name)[last])


def test_captured_attention_is_the_models_own(lm):
    """In the block the model runs as called (no output_attentions): the kept maps equal those it returns when asked."""
    batch = batch_of(lm)
    with torch.no_grad():
        own = lm.encoder(**batch, output_attentions=True).attentions
        with hooks(lm, {"attn", "qk"}) as cache:
            lm.encoder(**batch)
    assert len(cache.attn) == len(own) == lm.facts.n_layers
    n = batch["input_ids"].shape[1]
    for kept, theirs in zip(cache.attn, own):
        np.testing.assert_allclose(kept.numpy(), theirs.numpy(), rtol=0, atol=n * EPS)  # a softmax row of n terms
    # the queries and keys rebuild the maps: softmax(scale q.k + bias, over the keys the mask leaves), row by row
    heads = cache.heads()
    mask = batch["attention_mask"].bool()[:, None, None, :]
    if lm.facts.causal:
        mask = mask & torch.ones(n, n, dtype=torch.bool).tril()
    for l, (q, k) in enumerate(zip(heads.queries, heads.keys)):
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # grouped queries: head h reads key head h // group
        logits = heads.scales[l] * q @ k.transpose(-1, -2) + (0 if heads.biases[l] is None else heads.biases[l])
        rebuilt = logits.masked_fill(~mask, float("-inf")).softmax(-1)
        real = mask.expand_as(rebuilt)  # padded query rows of the model's map are not a softmax over these keys
        np.testing.assert_allclose(rebuilt[real].numpy(), cache.attn[l][real].numpy(), atol=1e-5)


def test_a_hook_fires_only_in_the_thread_that_made_it(tiny_model):
    batch = batch_of(tiny_model)
    with hooks(tiny_model, {"attn", "layer_inputs"}) as cache, torch.no_grad():
        other = threading.Thread(target=lambda: tiny_model.encoder(**batch))
        other.start()
        other.join()
        assert not cache.attn and not cache.layer_inputs
        tiny_model.encoder(**batch)
    assert len(cache.attn) == len(cache.layer_inputs) == tiny_model.facts.n_layers


class Seen:
    """An accumulator that keeps the queries of every run it is given."""

    def __init__(self, captures=ATTENTION) -> None:
        self.captures, self.queries = frozenset(captures), []

    def add(self, result, item=None) -> None:
        self.queries.append(result.queries)

    def merge(self, other: Seen) -> Seen:
        return self


def test_a_pass_captures_the_union_of_its_accumulators(tiny_model):
    inputs = [CorpusInput(t) for t in TEXTS]
    attention_only, with_qk = Seen(), Seen({"attn", "qk"})
    assert captures_of([attention_only, with_qk]) == {"attn", "qk"}
    accumulate(tiny_model, inputs, [attention_only])
    assert attention_only.queries == [None, None]
    accumulate(tiny_model, inputs, [attention_only, with_qk])
    for queries, text in zip(with_qk.queries, TEXTS):
        alone = run(tiny_model, text, capture_qk=True).queries
        np.testing.assert_allclose(queries, alone, atol=1e-5)  # padded in a batch of two, alone: float32 sums
    assert all(a is b for a, b in zip(attention_only.queries[2:], with_qk.queries, strict=True))  # the same runs


def test_a_report_part_needing_queries_and_keys_gets_them(tiny_model):
    """Report parts run through the report's wrappers (timing), which pass their parts' captures on."""
    inputs = [CorpusInput(t) for t in TEXTS]
    seen = Seen({"attn", "qk"})
    needs_qk = Analysis(
        "needs-qk", "keeps queries", AttentionOptions, "corpus", list, (17,),
        accumulators=lambda lm, options: [seen], finish=lambda accumulators, options: accumulators[0].queries,
    )  # fmt: skip

    def shown(name: str):
        return lambda model, result, o: PartResult(name, model, {"n": pd.DataFrame({"model": [model]})}, result, {})

    parts = [
        ReportPart(needs_qk, "Queries", {"corpus": "corpus"}, lambda o: AttentionOptions(), shown("needs-qk")),
        ReportPart(QK, "Queries and keys", {"corpus": "corpus"}, lambda o: QKOptions(), shown("qk")),
    ]
    results, _ = run_parts(tiny_model, {"corpus": inputs}, ReportOptions(), parts)
    for queries, text in zip(results[0].result, TEXTS):
        np.testing.assert_allclose(queries, run(tiny_model, text, capture_qk=True).queries, atol=1e-5)
    assert len(results[1].result.inputs) == len(TEXTS)


def test_attentions_returned_asks_for_them_within_the_block_only(tiny_model):
    """As a call with output_attentions=True, bit for bit; without the block the model returns none."""
    batch = batch_of(tiny_model)
    with torch.no_grad():
        with attentions_returned([tiny_model.encoder]):
            asked = tiny_model.encoder(**batch).attentions
        plain = tiny_model.encoder(**batch).attentions
        explicit = tiny_model.encoder(**batch, output_attentions=True).attentions
    assert plain is None and len(asked) == len(explicit) == tiny_model.facts.n_layers
    assert all(torch.equal(a, e) for a, e in zip(asked, explicit))


def test_a_switched_attention_kernel_is_restored_when_the_last_block_ends(tiny_model):
    """Blocks on one model nest (threads share it): the configs keep the switched kernel until the last one ends,
    an exception included."""
    configs = attention_configs(tiny_model.encoder)
    before = [c._attn_implementation_internal for c in configs]
    assert configs and set(before) == {"eager"}

    def kernels() -> set[str]:
        return {c._attn_implementation_internal for c in configs}

    with switched_attention(tiny_model.encoder, "sdpa"):
        assert kernels() == {"sdpa"}
        with pytest.raises(RuntimeError, match="inside"), switched_attention(tiny_model.encoder, "sdpa"):
            raise RuntimeError("inside")
        assert kernels() == {"sdpa"}  # the outer block still runs on it
    assert [c._attn_implementation_internal for c in configs] == before
