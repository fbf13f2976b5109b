"""Head ablation and importance (METHODS §15): hand-worked one-layer models with known effects, the prefix-reusing
batched path against plain forward passes with the hook, every head of a layer against a zero output projection,
Michel's gradient against finite differences, the knockouts, the no-op test, the analyses and their command line.

The slow tier; test_ablation.py holds the quick tests."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

from attnlib.analyses.ablate import ABLATE, AblateOptions
from attnlib.analyses.base import run_analysis
from attnlib.analyses.importance import IMPORTANCE, ImportanceOptions, importance_accumulators, importance_fill
from attnlib.core.corpus import CorpusInput
from attnlib.core.engines import fill_shard, numbered, plan_batches, shard_batches
from attnlib.core.model import load_model
from attnlib.results.shipped import ROOT
from attnlib.stats.head_ablation import AblationUnavailable
from support.ablation import (
    SENTENCES,
    check_batched_path_equals_a_plain_forward_with_the_hook,
    check_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values,
)
from support.models import bert_tokenizer

pytestmark = pytest.mark.slow


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
    cli = _cli(["importance", "--corpus", "data/classroom_single.txt", "--limit", "2", "--model", str(tmp_path)])
    assert cli.returncode == 2 and cli.stderr.startswith("error: Head ablation") and cli.stderr.count("\n") == 1


def _cli(args: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "attnlib", *args], capture_output=True, text=True, cwd=ROOT)


@pytest.mark.slow
def test_cli_ablate_and_its_errors():
    ok = _cli(["ablate", "--text", SENTENCES[1], "--heads", "1-2,3-0", "--json"])
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["heads"] == [[1, 2], [3, 0]] and data["mlm"] is None and data["embedding"] > 0
    assert {"embedding", "hidden", "mlm", "similarity", "tokens", "predictions"} <= data.keys()
    for args, said in (
        (["ablate", "--text", "x", "--heads", "6-0"], "outside this model's 6 layers"),
        (["ablate", "--text", "x", "--heads", "1:2"], "not a layer-head pair"),
        (["importance", "--corpus", "data/classroom_single.txt", "--measure", "mlm"], "no trained masked-language"),
    ):
        bad = _cli([*args, "--json"])
        assert bad.returncode == 2 and bad.stdout == "" and said in bad.stderr and bad.stderr.count("\n") == 1


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
