"""Train the small GPT-2-shaped decoder shipped in data/models/tiny-gpt2-induction/, and save its checkpoints.

Run from anywhere: python scripts/train_decoder.py [--out FOLDER] [--steps N] [--seed S] [--threads T]
Seeded end to end (tokenizer, data, initial weights, batches): the same arguments give the same checkpoints on the same
torch build. It trains a byte-level BPE on the text the repository ships (the UD treebanks' sentences, the classroom
sets), then a 2-layer, width-64, 4-head decoder on sequences mixing that text with spans that repeat (a random span of
ordinary tokens said two or three times; sentences said again later in the sequence), which is what induction heads
need to form (Olsson et al. 2022). Every EVAL_EVERY steps it scores the model on METHODS §20's default probe (s = 50,
two repeats, 10 sequences, seed 0) and keeps the weights; at the end it ships the checkpoint at step 0, the last, and
the steps between spaced so that the phase change (the largest induction score rising from below 0.1 to above 0.4)
is drawn densely, each as a folder step<N>/ that transformers' Auto classes load by itself, with the training log
and a data card (README.md).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's attnlib, whatever is installed

from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV, EWT_TEST, PUD_TEST  # noqa: E402

NAME = "tiny-gpt2-induction"
END = "<|endoftext|>"  # GPT-2's one special token: BOS (put before every text), EOS and UNK
VOCAB_SIZE = 2048
WIDTH, LAYERS, HEADS, POSITIONS = 64, 2, 4, 256
SEQUENCE = 256  # training length: every position the model has is trained
BATCH = 32
LR, WARMUP, WEIGHT_DECAY = 3e-3, 100, 0.01
EVAL_EVERY = 25
SHIPPED = 10  # checkpoints shipped, step 0 and the last included
SPAN = (5, 60)  # lengths of the random spans that repeat (the probe's s = 50 inside)
P_RANDOM_SPAN = 0.5  # chance that a segment of a sequence is a repeated random span rather than text


def treebank_text(path: Path) -> list[str]:
    """The sentences of a CoNLL-U file as written (its `# text =` lines)."""
    lines = path.read_text(encoding="utf-8").splitlines()
    return [line.split("=", 1)[1].strip() for line in lines if line.startswith("# text =")]


def training_text() -> dict[str, list[str]]:
    """The shipped text the tokenizer and the model learn from, by file (a pair's two sentences joined by a space)."""
    files = {
        "data/ud/UD_English-EWT/en_ewt-ud-dev.conllu": treebank_text(EWT_DEV),
        "data/ud/UD_English-EWT/en_ewt-ud-test.conllu": treebank_text(EWT_TEST),
        "data/ud/UD_English-PUD/en_pud-ud-test.conllu": treebank_text(PUD_TEST),
        "data/classroom_single.txt": CLASSROOM_SINGLE.read_text(encoding="utf-8").splitlines(),
        "data/classroom_pairs.tsv": [line.replace("\t", " ") for line in CLASSROOM_PAIRS.read_text().splitlines()],
    }
    return {name: [line for line in lines if line.strip()] for name, lines in files.items()}


def train_tokenizer(sentences: list[str]):
    """A byte-level BPE of VOCAB_SIZE tokens trained on the sentences, GPT-2's special token first, which it puts
    before every text (as Llama's tokenizer puts its <s>)."""
    from tokenizers import ByteLevelBPETokenizer, processors
    from transformers import PreTrainedTokenizerFast

    bpe = ByteLevelBPETokenizer(add_prefix_space=False)
    bpe.train_from_iterator(sentences, vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=[END])
    bpe._tokenizer.post_processor = processors.ByteLevel(trim_offsets=False)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe._tokenizer,
        bos_token=END,
        eos_token=END,
        unk_token=END,
        add_prefix_space=False,
        add_bos_token=True,
        model_max_length=POSITIONS,
    )


def new_model(tokenizer, seed: int):
    """The untrained decoder: GPT-2's architecture at width 64, 2 layers, 4 heads, 256 positions, no dropout."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(
        vocab_size=len(tokenizer),
        n_positions=POSITIONS,
        n_embd=WIDTH,
        n_layer=LAYERS,
        n_head=HEADS,
        n_inner=4 * WIDTH,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        architectures=["GPT2LMHeadModel"],
    )
    torch.manual_seed(seed)
    return GPT2LMHeadModel(config)


class Batches:
    """Seeded training sequences: BOS, then segments until SEQUENCE tokens: a random span of distinct ordinary tokens
    said 2 or 3 times (chance P_RANDOM_SPAN), else a run of shipped sentences, one of which is said again after it."""

    def __init__(self, sentences: list[list[int]], ordinary: np.ndarray, bos: int, seed: int):
        self.sentences = sentences
        self.ordinary = ordinary
        self.bos = bos
        self.rng = np.random.default_rng(seed)

    def _segment(self) -> list[int]:
        rng = self.rng
        if rng.random() < P_RANDOM_SPAN:
            span = rng.choice(self.ordinary, size=int(rng.integers(SPAN[0], SPAN[1] + 1)), replace=False).tolist()
            return span * int(rng.integers(2, 4))
        picked = [self.sentences[i] for i in rng.integers(len(self.sentences), size=int(rng.integers(2, 5)))]
        again = picked[int(rng.integers(len(picked)))]
        return [token for sentence in picked for token in sentence] + again

    def sequence(self) -> list[int]:
        """One training sequence of exactly SEQUENCE ids."""
        ids = [self.bos]
        while len(ids) < SEQUENCE:
            ids += self._segment()
        return ids[:SEQUENCE]

    def batch(self) -> torch.Tensor:
        """BATCH sequences."""
        return torch.tensor([self.sequence() for _ in range(BATCH)])


def ordinary_ids(tokenizer) -> np.ndarray:
    """Every id that is not a special or added token (the ids METHODS §20's probe draws from)."""
    special = set(tokenizer.all_special_ids) | set(tokenizer.added_tokens_decoder)
    return np.array([i for i in range(len(tokenizer)) if i not in special])


def evaluate(model, tokenizer) -> tuple[float, float]:
    """(largest induction score, in-context gain G in nats) on METHODS §20's default probe."""
    raise NotImplementedError


def shipped_steps(steps: list[int], induction: list[float], count: int = SHIPPED) -> list[int]:
    """`count` of the evaluated steps: the first, the last, and between them half spaced evenly over the phase change
    (from the last step with the largest induction score under 0.1 to the first over 0.4, one evaluation either side)
    and half evenly over the rest of training."""
    low = max((i for i, v in enumerate(induction) if v < 0.1 and all(w < 0.4 for w in induction[: i + 1])), default=0)
    high = next((i for i, v in enumerate(induction) if v >= 0.4), len(steps) - 1)
    window = range(max(low - 1, 1), min(high + 2, len(steps) - 1))
    dense = np.linspace(window.start, window.stop - 1, num=min(count // 2, len(window))).round().astype(int)
    chosen = {0, len(steps) - 1, *dense.tolist()}
    rest = np.linspace(0, len(steps) - 1, num=count + 2).round().astype(int).tolist()
    for i in sorted(rest, key=lambda i: -min(abs(i - c) for c in chosen)):
        if len(chosen) >= count:
            break
        chosen.add(i)
    return [steps[i] for i in sorted(chosen)]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "models" / NAME)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    started = time.perf_counter()
    log_lines: list[str] = []

    def log(line: str) -> None:
        stamped = f"[{time.perf_counter() - started:7.1f} s] {line}"
        print(stamped, flush=True)
        log_lines.append(stamped)

    text = training_text()
    sentences = [line for lines in text.values() for line in lines]
    tokenizer = train_tokenizer(sentences)
    backend = tokenizer.backend_tokenizer
    encoded = [e.ids for e in backend.encode_batch(sentences, add_special_tokens=False) if e.ids]
    ordinary = ordinary_ids(tokenizer)
    log(
        f"tokenizer: byte-level BPE, {len(tokenizer)} tokens, trained on {len(sentences)} sentences "
        f"({sum(map(len, encoded))} tokens)"
    )
    model = new_model(tokenizer, args.seed)
    log(f"model: GPT-2, {sum(p.numel() for p in model.parameters())} parameters")
    batches = Batches(encoded, ordinary, tokenizer.bos_token_id, args.seed)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW(
        [{"params": decay, "weight_decay": WEIGHT_DECAY}, {"params": no_decay, "weight_decay": 0.0}], lr=LR
    )
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP))
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    curve: list[tuple[int, float, float, float]] = []
    loss_value = float("nan")
    for step in range(args.steps + 1):
        if step % EVAL_EVERY == 0 or step == args.steps:
            model.eval().set_attn_implementation("eager")  # the only one that returns attention weights
            induction, gain = evaluate(model, tokenizer)
            model.train().set_attn_implementation("sdpa")
            snapshots[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            curve.append((step, loss_value, induction, gain))
            log(f"step {step:5d}  loss {loss_value:.3f}  max induction {induction:.3f}  gain {gain:.3f} nat")
        if step == args.steps:
            break
        ids = batches.batch()
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = loss.item()
    trained = time.perf_counter() - started
    steps = [c[0] for c in curve]
    ship = shipped_steps(steps, [c[2] for c in curve])
    log(f"trained in {trained:.0f} s; shipping steps {ship}")
    args.out.mkdir(parents=True, exist_ok=True)
    model.set_attn_implementation("eager")
    for step in ship:
        folder = args.out / f"step{step}"
        model.load_state_dict(snapshots[step])
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    (args.out / "training_log.txt").write_text("\n".join(log_lines) + "\n", encoding="utf-8")
    (args.out / "curve.json").write_text(
        json.dumps(
            [dict(step=s, loss=None if np.isnan(l) else round(l, 4), induction=round(i, 4), gain=round(g, 4))
             for s, l, i, g in curve],
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
