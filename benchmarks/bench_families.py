"""Every family's analyses against its own forward pass: are the ratios BERT's?

Run: python -m benchmarks.bench_families [--limit N] [--attribution-limit M] [--repeats R] [--families ...]
BERT is the default model (all-MiniLM-L6-v2); the other families are random models of its size (6 layers, 12 heads,
hidden 384, feed-forward 1536, its tokenizer), built in-process from transformers' configs: the cost depends on the
shapes and the family's arithmetic, not on the weights. gpt2 and llama are decoders (llama with 4 key-value heads), t5
an encoder-decoder whose encoder the statistics read (METHODS §18). Per family, on the first N EWT dev sentences: the forward
pass, + everything of `special --norms`, + every §11-13 map (as bench_norms), and on the first M sentences
`positions` in estimate mode (k = 12) against the forward pass over those sentences. Ratios are measured side by
side (configurations and families interleaved, best of the repeats).
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from attnlib.analyses.positions import PositionOptions, accumulate_positions  # noqa: E402
from attnlib.core.model import DEFAULT_MODEL, bundled_model_path, load_model  # noqa: E402
from benchmarks import ewt_dev  # noqa: E402
from benchmarks.bench_norms import CONFIGS, config_seconds  # noqa: E402

SIZE = dict(hidden_size=384, num_hidden_layers=6, num_attention_heads=12, intermediate_size=1536)
FAMILIES = ("bert", "modernbert", "deberta-v2", "roformer", "gpt2", "llama", "t5")
CAUSAL_LM = ("gpt2", "llama")  # decoders (METHODS §18); t5: an encoder-decoder, its encoder's statistics


def minilm_sized(kind: str, folder: Path):
    """A random model of the default model's size, of this family, saved with the default model's tokenizer."""
    import transformers as tf

    tokenizer = tf.AutoTokenizer.from_pretrained(str(bundled_model_path()))
    ids = dict(pad_token_id=tokenizer.pad_token_id, vocab_size=len(tokenizer), max_position_embeddings=512)
    config = {
        "modernbert": lambda: tf.ModernBertConfig(
            **SIZE, **ids, cls_token_id=tokenizer.cls_token_id, sep_token_id=tokenizer.sep_token_id
        ),  # every third layer global, the others local within +-64 (ModernBERT-base's pattern)
        "deberta-v2": lambda: tf.DebertaV2Config(
            **SIZE,
            **ids,
            relative_attention=True,
            pos_att_type=["p2c", "c2p"],
            position_biased_input=False,
            position_buckets=256,
            norm_rel_ebd="layer_norm",
            share_att_key=True,
            type_vocab_size=0,
        ),  # deberta-v3's relative attention
        "roformer": lambda: tf.RoFormerConfig(**SIZE, **ids),
        "gpt2": lambda: tf.GPT2Config(
            n_embd=384, n_layer=6, n_head=12, n_inner=1536, n_positions=512, vocab_size=len(tokenizer)
        ),  # LayerNorm before each block, Conv1D projections
        "llama": lambda: tf.LlamaConfig(**SIZE, **ids, num_key_value_heads=4),  # RMSNorm, rotary, grouped-query
        "t5": lambda: tf.T5Config(
            d_model=384,
            num_layers=6,
            num_heads=12,
            d_kv=32,
            d_ff=1536,
            vocab_size=len(tokenizer),
            pad_token_id=tokenizer.pad_token_id,
            decoder_start_token_id=tokenizer.pad_token_id,
        ),  # relative position bias, no scaling
    }[kind]()
    torch.manual_seed(0)
    auto = {"t5": tf.AutoModelForSeq2SeqLM, **dict.fromkeys(CAUSAL_LM, tf.AutoModelForCausalLM)}
    auto.get(kind, tf.AutoModelForMaskedLM).from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return load_model(str(folder))


def positions_seconds(lm, sentences) -> float:
    start = time.perf_counter()
    accumulate_positions(lm, sentences, PositionOptions()).result()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=int, default=300, help="EWT dev sentences for the forward-pass ratios")
    parser.add_argument("--attribution-limit", type=int, default=20, help="sentences for positions")
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--families", nargs="+", default=list(FAMILIES), choices=FAMILIES)
    args = parser.parse_args()
    sentences = ewt_dev(args.limit)
    attributed = sentences[: args.attribution_limit]
    with tempfile.TemporaryDirectory() as tmp:
        models = {
            kind: load_model(DEFAULT_MODEL) if kind == "bert" else minilm_sized(kind, Path(tmp) / kind)
            for kind in args.families
        }
        print(
            f"{len(sentences)} EWT dev sentences (positions: {len(attributed)}), batch size {args.batch_size}, "
            f"{torch.get_num_threads()} torch threads, best of {args.repeats} interleaved runs; "
            "bert = the default model, the others random models of its size\n"
        )
        header = (
            f"{'family':12s} {'forward s':>10s} {'+special --norms':>17s} {'+every map':>11s} {'positions':>10s} "
            f"{'positions s':>11s}"
        )
        print(header, flush=True)
        best: dict[tuple[str, str], float] = {}
        for repeat in range(args.repeats):
            for kind, lm in models.items():
                for config in CONFIGS:
                    seconds = config_seconds(lm, sentences, config, args.batch_size)
                    best[kind, config] = min(best.get((kind, config), float("inf")), seconds)
                # the forward pass over positions' few inputs takes a fraction of a second: best of 5 each time
                seconds = min(config_seconds(lm, attributed, CONFIGS[0], args.batch_size) for _ in range(5))
                best[kind, "forward (positions' inputs)"] = min(
                    best.get((kind, "forward (positions' inputs)"), 1e9), seconds
                )
                best[kind, "positions"] = min(
                    best.get((kind, "positions"), float("inf")), positions_seconds(lm, attributed)
                )
                if repeat == args.repeats - 1:  # each family's row as soon as it is final
                    base = best[kind, CONFIGS[0]]
                    ratios = [best[kind, c] / base for c in CONFIGS[1:]]
                    positions = best[kind, "positions"] / best[kind, "forward (positions' inputs)"]
                    print(
                        f"{kind:12s} {base:10.2f} {ratios[0]:16.2f}x {ratios[1]:10.2f}x {positions:9.0f}x "
                        f"{best[kind, 'positions']:11.1f}",
                        flush=True,
                    )
    print("\n(+special --norms and +every map: the engine pass over its own forward pass; positions: estimate-mode")
    print(" attribution of every input against the forward pass over the same inputs)")


if __name__ == "__main__":
    main()
