"""Each command's top-level JSON keys, as the issues that asked for them specified (docs/cli.md lists them): a guard
against a key renamed or dropped by accident. Tiny inputs, the default model (gradient: a tiny BERT with a masked-LM
head, since the default model has none)."""

from __future__ import annotations

import pytest

from attnlib.analyses.registry import ANALYSES
from attnlib.core.model import DEFAULT_MODEL
from support.cli import cli_json
from support.runs import INPUTS, command_line

KEYS = {
    "attention": {"model", "tokens", "segments", "words", "word_ids", "truncated", "n_tokens_before_truncation",
                  "attentions"},
    "norms": {"model", "tokens", "value_norm", "weighted_norm", "layer_norm", "residual_ln", "attention_rollout",
              "residual_ln_rollout"},
    "hta": {"model", "mode", "probes", "tokens", "input", "previous", "output"},
    "special": {"model", "n_inputs", "layers", "heads", "uniform_entropy", "punctuation", "n_truncated", "kind",
                "first_share", "sink_rate", "head_map", "norm_layers", "norm_heads"},  # head_map, norm_*: asked for
    "deps": {"n_sentences", "n_words", "n_skipped", "rows"},
    "positions": {"model", "n_inputs", "n_skipped_longer_than_head_dim", "n_longer_than_head_dim", "head_dim",
                  "n_truncated", "options", "attention_center_of_mass", "attribution_center_of_mass",
                  "attention_head_center_of_mass", "attribution_head_center_of_mass", "histograms", "correlation",
                  "median_correlation"},
    "aggregation": {"model", "n_inputs", "measures", "pearson", "spearman", "center_of_mass", "histograms", "options"},
    "probe": {"variant", "epochs", "n_layers", "n_heads", "n_train", "n_test", "n_words", "uas", "best_head_accuracy",
              "best_head", "baseline_accuracy", "baseline_offset", "uas_by_relation", "weights", "root_weights",
              "n_skipped", "n_skipped_train", "n_skipped_test", "sentences"},
    "ablate": {"model", "heads", "change", "embedding", "similarity", "hidden", "mlm", "tokens", "predictions"},
    "importance": {"model", "n_inputs", "n_truncated", "measure", "ablation", "special_share", "spearman", "knockout",
                   "pruning"},  # knockout, pruning: asked for
    "qk": {"model", "layer", "head", "method", "n_layers", "n_heads", "n_inputs", "n_truncated", "inputs", "points",
           "has_upos", "fidelity", "grid"},  # grid: --all-heads
    "gradient": {"model", "n_inputs", "layers", "heads"},
}  # fmt: skip
NESTED = {  # keys below the top level that an issue named: the no-op test's entries (spearman.ablation, not .ablate)
    ("importance", "spearman"): {"ablation", "drop", "renormalise", "per_layer", "measure"},
    ("gradient", "heads"): {"sep", "all"},
}


def test_every_command_is_held():
    assert set(KEYS) == set(ANALYSES) == set(INPUTS)


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
@pytest.mark.parametrize("name", sorted(KEYS))
def test_top_level_keys(name, tiny_model_dir, one_thread):
    model = str(tiny_model_dir) if name == "gradient" else DEFAULT_MODEL
    printed = cli_json(*command_line(name, model), "--json")
    assert set(printed) == KEYS[name]
    for (command, key), below in NESTED.items():
        if command == name:
            assert set(printed[key]) == below
