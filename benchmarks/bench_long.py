"""Long inputs (issue 36): a ModernBERT-base-sized random model at 512, 2,048 and 8,192 tokens, side by side in one run.

Run: python -m benchmarks.bench_long [--lengths 512 2048 8192] [--configs eager blockwise special]
The model has ModernBERT-base's shapes (22 layers, 12 heads, hidden 768, feed-forward 1152, every third layer global,
the others local within +-64, 8,192 positions), random weights, the default model's tokenizer; each input is EWT dev
text cut to exactly n tokens. Each configuration runs in a fresh process, so its peak resident memory (model
included) is its own, once on 128 tokens (one-off costs) and then measured on the n tokens:
  eager      transformers' own eager forward pass (no attention weights returned: the least eager attention holds)
  blockwise  the library's block-wise forward pass (attnlib.core.blockwise), every block handed to a consumer that only
             reads it
  special    `special` statistics of the one input (block-wise above attnlib.core.blockwise.BLOCKWISE_FROM tokens)
  query      search's query vector of the middle token, last layer's output (attnlib.search.vectors.query_of:
             block-wise above BLOCKWISE_FROM tokens, keeping that one hidden state)
  query-eager the same query on the eager path at any length (every layer's maps and hidden states)
  blockwise-glibc  (only when asked) blockwise with glibc's own mapping threshold, not the library's 1 MB
The eager pass is not run where one layer's scores (heads x n^2 float32, three copies: scores, softmax, its
output) would exceed the machine's available memory. est.: attnlib.core.memory's estimate beyond the weights of the
library's runs (block-wise; `special` and `query`, eager with every layer's maps up to BLOCKWISE_FROM tokens;
`query-eager`, eager).
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import psutil  # noqa: E402
import torch  # noqa: E402

from benchmarks import ewt_dev  # noqa: E402

SIZE = dict(
    hidden_size=768,
    num_hidden_layers=22,
    num_attention_heads=12,
    intermediate_size=1152,
    max_position_embeddings=8192,
    global_attn_every_n_layers=3,
    local_attention=128,
)
CONFIGS = ("eager", "blockwise", "special", "query", "query-eager", "blockwise-glibc")  # the last: only when asked
DEFAULT_CONFIGS = CONFIGS[:-1]
WARM_UP_TOKENS = 128  # each configuration runs once on this many tokens before the measured call


def save_model(folder: Path) -> None:
    """A random ModernBERT-base-sized model with the default model's tokenizer, saved in folder."""
    import transformers as tf

    from attnlib.core.model import bundled_model_path

    tokenizer = tf.AutoTokenizer.from_pretrained(str(bundled_model_path()))
    tokenizer.model_max_length = SIZE["max_position_embeddings"]
    config = tf.ModernBertConfig(
        **SIZE,
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        cls_token_id=tokenizer.cls_token_id,
        sep_token_id=tokenizer.sep_token_id,
        bos_token_id=tokenizer.cls_token_id,
        eos_token_id=tokenizer.sep_token_id,
    )
    torch.manual_seed(0)
    tf.ModernBertModel(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def text_of(lm, n: int) -> str:
    """EWT dev sentences joined and cut so that the tokenizer makes exactly n tokens (specials included)."""
    words: list[str] = []
    for sentence in ewt_dev():
        words.extend(sentence if isinstance(sentence, list) else str(sentence).split())
        if len(words) > n:
            break
    while len(words) < n:
        words = words + words
    ids = lm.tokenizer(" ".join(words), add_special_tokens=False)["input_ids"][: n - 2]
    return lm.tokenizer.decode(ids)


class PeakSampler(threading.Thread):
    """The process's largest resident memory (MB) while it runs, sampled every 5 ms."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.done = 0.0, threading.Event()

    def run(self) -> None:
        me = psutil.Process()
        while not self.done.is_set():
            self.peak = max(self.peak, me.memory_info().rss / 2**20)
            time.sleep(0.005)


def one(config: str, folder: str, n: int) -> dict:
    """Run one configuration in this process: seconds of the measured call, resident memory after loading, the
    peak while it ran and the process's peak over its whole life (loading included), in MB."""
    from attnlib.analyses.base import run_analysis
    from attnlib.analyses.registry import SPECIAL
    from attnlib.core import blockwise
    from attnlib.core.blockwise import run_blockwise
    from attnlib.core.corpus import CorpusInput
    from attnlib.core.model import load_model
    from attnlib.core.runner import encode, model_inputs
    from attnlib.search import vectors
    from attnlib.search.by_example import IndexOptions

    torch.set_num_threads(torch.get_num_threads())
    if config == "blockwise-glibc":  # glibc's own mapping threshold, not the library's 1 MB during the run
        blockwise._map_large_arrays = lambda runs: None
    lm = load_model(folder)
    text = text_of(lm, n)
    encoded = encode(lm, text)
    batch = model_inputs(lm, [encoded])
    loaded = psutil.Process().memory_info().rss / 2**20

    def call(batch: dict, text: str) -> None:
        if config == "eager":
            with torch.inference_mode():
                lm.encoder(**batch)
        elif config.startswith("blockwise"):
            run_blockwise(lm, batch, lambda block: None)
        elif config == "special":
            run_analysis(SPECIAL, lm, SPECIAL.make_options(), inputs={"corpus": [CorpusInput(text)]})
        else:
            if config == "query-eager":
                vectors.BLOCKWISE_FROM = 2**30
            vectors.query_of(lm, text, None, len(batch["input_ids"][0]) // 2, IndexOptions(lm.facts.n_layers - 1))

    short = text_of(lm, WARM_UP_TOKENS)  # first calls pay one-off costs (kernels, thread pools, registrations)
    call(model_inputs(lm, [encode(lm, short)]), short)
    sampler = PeakSampler()
    sampler.start()
    start = time.perf_counter()
    call(batch, text)
    seconds = time.perf_counter() - start
    sampler.done.set()
    sampler.join()
    life = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"config": config, "n": encoded.n, "seconds": seconds, "loaded_mb": loaded, "run_peak_mb": sampler.peak,
            "life_peak_mb": life}  # fmt: skip


def estimate_mb(folder: str, n: int, config: str) -> float:
    """attnlib.core.memory's estimate of the library's run beyond the weights, in MB (the eager pass: one layer's
    scores, three copies)."""
    from transformers import AutoConfig

    from attnlib.core.blockwise import BLOCKWISE_FROM, default_block_rows
    from attnlib.core.memory import RunSize, estimate_peak_bytes

    c = AutoConfig.from_pretrained(folder)
    if config == "eager":
        return 3 * c.num_attention_heads * n * n * 4 / 2**20
    size = RunSize(n, c.num_hidden_layers, c.num_attention_heads, c.hidden_size)
    eager = (config in ("special", "query") and n <= BLOCKWISE_FROM) or config == "query-eager"
    rows = None if eager else default_block_rows(n, c.num_attention_heads)
    return estimate_peak_bytes(size, rows) / 2**20


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192])
    parser.add_argument("--configs", nargs="+", choices=CONFIGS, default=list(DEFAULT_CONFIGS))
    parser.add_argument("--one", nargs=3, metavar=("CONFIG", "FOLDER", "N"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        config, folder, n = args.one
        print(json.dumps(one(config, folder, int(n))))
        return
    from attnlib.core.memory import available_bytes

    with tempfile.TemporaryDirectory() as tmp:
        save_model(Path(tmp))
        print(f"ModernBERT-base-sized random model, {torch.get_num_threads()} threads")
        print("MB: resident after loading, peak while the configuration ran, the process's peak (loading included);")
        header = ("n", "config", "seconds", "x eager", "loaded", "run peak", "life peak", "est.")
        print("".join(f"{h:>{16 if h == 'config' else 10}}" for h in header))
        for n in args.lengths:
            eager_seconds = None
            for config in args.configs:
                estimate = estimate_mb(tmp, n, config)
                if config in ("eager", "query-eager") and estimate * 2**20 > available_bytes():
                    print(f"{n:>10} {config:>15}  not run: the estimate is over the available memory")
                    continue
                cmd = [sys.executable, "-m", "benchmarks.bench_long", "--one", config, tmp, str(n)]
                out = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
                if out.returncode != 0:
                    print(f"{n:>10} {config:>15}  failed: {out.stderr.strip().splitlines()[-1]}")
                    continue
                r = json.loads(out.stdout.strip().splitlines()[-1])
                eager_seconds = r["seconds"] if config == "eager" else eager_seconds
                ratio = f"{r['seconds'] / eager_seconds:.2f}" if eager_seconds else "-"
                figures = (r["loaded_mb"], r["run_peak_mb"], r["life_peak_mb"], estimate)
                print(f"{n:>10} {config:>15}{r['seconds']:>10.1f}{ratio:>10}" + "".join(f"{x:>10.0f}" for x in figures))


if __name__ == "__main__":
    main()
