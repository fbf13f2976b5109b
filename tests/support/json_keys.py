"""Each command's top-level JSON keys, as the issues that asked for them specified (docs/cli.md lists them): the
analyses' (cli/test_json_keys.py holds them on the default model), and those of the commands that are not one analysis
(held by search/test_search.py and present/test_report.py on tiny encoders)."""

from __future__ import annotations

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
    "retrieval": {"model", "scores", "threshold", "retrieval_heads", "tests"},
    "patch": {"model", "clean", "corrupted", "position", "answer", "wrong", "metric", "direction", "clean_metric",
              "corrupted_metric", "heads", "residual", "attribution", "attribution_r"},  # residual: --grid residual
    # (heads_positions: --grid heads-positions), attribution(_r): --attribution; with --pairs: pairs, metric, direction,
    # heads, heads_se; an encoder-decoder adds decoder_heads and cross_heads (and their grids, errors, attribution)
    "compose": {"model", "q", "k", "v"},
    "roles": {"model", "probe", "scores", "in_context_gain", "causal", "detect", "roles", "thresholds", "checkpoints",
              "notes"},  # detect: --text or --corpus; checkpoints: --checkpoints (null without)
    "lens": {"model", "tokens", "position", "mode", "nodes", "dla", "readouts", "prediction", "notes"},
    "routes": {"model", "tokens", "threshold", "mode", "nodes", "edges", "route", "prediction"},  # on a text
}  # fmt: skip
NESTED = {  # keys below the top level that an issue named: the no-op test's entries (spearman.ablation, not .ablate)
    ("importance", "spearman"): {"ablation", "drop", "renormalise", "per_layer", "measure"},
    ("gradient", "heads"): {"sep", "all"},
    ("patch", "clean"): {"tokens", "ids"},
    ("patch", "corrupted"): {"tokens", "ids"},
    ("patch", "answer"): {"id", "token"},  # wrong likewise (null with --metric logprob)
    ("roles", "probe"): {"tokens", "repeat_length", "repeats", "bos"},
    ("roles", "scores"): {"previous", "duplicate", "induction", "copying", "first_share"},
    ("roles", "detect"): {"mul", "abs"},
    ("roles", "roles"): {"previous", "duplicate", "induction", "copying", "sink"},
    ("lens", "dla"): {
        "token",
        "versus",
        "heads",
        "ffn",
        "attention_bias",
        "embeddings",
        "constant",
        "logit",
        "max_error",
    },
}
TEST_KEYS = {"length", "depth", "input_ids", "needle_span", "decoded_ids", "forced"}  # each of retrieval's tests
COMMAND_KEYS = {
    "index": {"model", "corpus", "options", "n_inputs", "n_positions", "dims", "out", "bytes", "seconds"},
    "search": {"model", "index", "query", "heads", "matches", "summary"},
    "report": {"out", "bytes", "seconds", "parts", "passes", "part_seconds", "models", "corpora", "differences"},
}
