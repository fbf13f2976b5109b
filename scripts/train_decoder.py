"""Train the small Llama-shaped decoder shipped in data/models/tiny-llama-induction/, and save its checkpoints.

Run from anywhere: python scripts/train_decoder.py [--out FOLDER] [--steps N] [--seed S] [--threads T]
Seeded end to end (tokenizer, data, initial weights, batches): the same arguments give the same checkpoints on the same
torch build. It trains a byte-level BPE on the text the repository ships (the UD treebanks' sentences, the classroom
sets), then a 2-layer, width-64, 4-head decoder (Llama's shape: rotary positions let a previous-token head form in
few steps) on sequences mixing that text with spans that repeat (a random span of
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
import signal
import sys
import time
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the checkout's attnlib, whatever is installed

from attnlib.analyses.roles import RolesOptions, head_scores, make_probe, ordinary_ids  # noqa: E402
from attnlib.core.model import LoadedModel, checkpoint_steps, decoder_in_memory, load_model  # noqa: E402
from attnlib.results.shipped import CLASSROOM_PAIRS, CLASSROOM_SINGLE, EWT_DEV, EWT_TEST, PUD_TEST  # noqa: E402

NAME = "tiny-llama-induction"
END = "<|endoftext|>"  # GPT-2's one special token: BOS (put before every text), EOS and UNK
VOCAB_SIZE = 2048
WIDTH, LAYERS, HEADS, POSITIONS = 64, 3, 4, 256
SEQUENCE = 128  # training length (rotary positions carry over to the 256 the model takes)
BATCH = 32
LR, WARMUP, WEIGHT_DECAY = 1e-2, 100, 0.01
ATTENTION_BIAS = True  # query and key biases (as Qwen2's): a constant part that rotary positions turn into a
# previous-token pattern in layer 0, whose input (token embeddings alone) has none
INIT_STD = WIDTH**-0.5  # weights drawn with std 1/sqrt(width): attention that is not uniform from the start (GPT-2's
# 0.02, made for width 768, leaves every query-key logit near 0 at width 64, and training on a long plateau)
EVAL_EVERY = 25
SHIPPED = 10  # checkpoints shipped, step 0 and the last included
# training stops early once the probe's largest induction score is at least 0.6 and G at least 2 nats at this many
# evaluations in a row (the phase change is over)
SETTLED = 4
SPAN = (5, 60)  # lengths of the random spans that repeat (the probe's s = 50 inside)
P_RANDOM_SPAN = 0.8  # chance that a segment of a sequence is a repeated random span rather than text


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
    """The untrained decoder: Llama's architecture (rotary positions, RMSNorm, SwiGLU) at width 64, 2 layers, 4 heads
    of 16 dimensions, 256 positions, the embedding tied to the unembedding."""
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=WIDTH,
        intermediate_size=4 * WIDTH,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        num_key_value_heads=HEADS,
        max_position_embeddings=POSITIONS,
        tie_word_embeddings=True,
        initializer_range=INIT_STD,
        attention_bias=ATTENTION_BIAS,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=None,
        architectures=["LlamaForCausalLM"],
    )
    torch.manual_seed(seed)
    return LlamaForCausalLM(config)


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


def evaluate(lm: LoadedModel) -> tuple[float, float]:
    """(largest induction score, in-context gain G in nats) on METHODS §20's default probe (the roles analysis's)."""
    scores, gain, _ = head_scores(lm, make_probe(lm, RolesOptions()))
    assert gain is not None, "the decoder's LM head is trained"
    return float(scores.induction.max()), gain


def shipped_steps(steps: list[int], induction: list[float], count: int = SHIPPED) -> list[int]:
    """`count` of the evaluated steps: the first, the last, half of the rest evenly over the phase change (from the
    last evaluation with the largest induction score under 0.1 to the first over 0.4, one more either side), and the
    others one by one where the chosen ones leave the widest gap."""
    low = max((i for i, v in enumerate(induction) if v < 0.1 and max(induction[: i + 1]) < 0.4), default=0)
    high = next((i for i, v in enumerate(induction) if v >= 0.4), len(steps) - 1)
    window = range(max(low - 1, 1), min(high + 2, len(steps) - 1))
    dense = np.linspace(window.start, window.stop - 1, num=min(count // 2, len(window))).round().astype(int)
    chosen = {0, len(steps) - 1, *dense.tolist()}
    while len(chosen) < min(count, len(steps)):
        chosen.add(max(range(len(steps)), key=lambda i: min(abs(i - c) for c in chosen)))
    return [steps[i] for i in sorted(chosen)]


LICENCES = {  # the training text's licences (data/README.md)
    "data/ud/UD_English-EWT/en_ewt-ud-dev.conllu": "CC BY-SA 4.0",
    "data/ud/UD_English-EWT/en_ewt-ud-test.conllu": "CC BY-SA 4.0",
    "data/ud/UD_English-PUD/en_pud-ud-test.conllu": "CC BY-SA 3.0",
    "data/classroom_single.txt": "CC BY 4.0",
    "data/classroom_pairs.tsv": "CC BY 4.0",
}


def measured(folder: Path) -> list[tuple[int, float, float]]:
    """(step, largest induction score, G) of every shipped checkpoint, loaded from its folder as users load it."""
    rows = []
    for step in checkpoint_steps(folder):
        lm = load_model(str(folder / f"step{step}"))
        rows.append((step, *evaluate(lm)))
    return rows


def data_card(text: dict[str, list[str]], tokens: int, parameters: int, args, rows, trained_s: float, size: int) -> str:
    """The README.md of the shipped folder: what the model was trained on, how, and what the probe measures."""
    sources = "\n".join(f"| `{name}` | {len(lines)} | {LICENCES[name]} |" for name, lines in text.items())
    table = "\n".join(f"| {step} | {induction:.3f} | {gain:.3f} |" for step, induction, gain in rows)
    return f"""# {NAME}

A {LAYERS}-layer decoder of Llama's shape ({parameters:,} parameters: width {WIDTH}, {HEADS} heads of {WIDTH // HEADS}
dimensions with query, key, value and output biases, SwiGLU MLP of {4 * WIDTH}, rotary positions, RMSNorm, the
embedding tied to the unembedding, at most {POSITIONS} tokens; weights initialised with standard deviation
{INIT_STD:.3f}) with its own byte-level BPE tokenizer ({VOCAB_SIZE} tokens; `<|endoftext|>` is its BOS, put before
every text, its EOS and its UNK), trained in this repository so that a class can watch induction heads form offline
(Olsson et al. 2022, "In-context Learning and Induction Heads"). Each `step<N>/` is one checkpoint, loadable by itself
with transformers' Auto classes; in attnlib `load_model("{NAME}")` is the last and `"{NAME}@step<N>"` any one
(`checkpoints_of("{NAME}")` lists them). It is a teaching model: it was trained on {rows[-1][0] * BATCH * SEQUENCE:,}
tokens, most of them random spans said again, and writes no useful English.

## Training data

The sentences the repository ships, as written (a treebank's `# text =` lines; a pair's two sentences joined):

| File | Sentences | Licence |
|---|--:|---|
{sources}

{tokens:,} tokens in all (with the tokenizer above). The model's training sequences ({SEQUENCE} tokens, each starting with the BOS) are
segments one after another: with chance {P_RANDOM_SPAN} a span of {SPAN[0]}-{SPAN[1]} distinct ordinary tokens drawn at
random, said 2 or 3 times; else 2-4 random sentences of the text above followed by one of them again. Repeats are what
induction heads need to form.

Licence: the checkpoints are trained on share-alike text (UD EWT CC BY-SA 4.0, UD PUD CC BY-SA 3.0) and the classroom
sets (CC BY 4.0); they are released under CC BY-SA 4.0, with the attribution in `data/README.md` and the treebanks'
own READMEs.

## How

`python scripts/train_decoder.py --steps {args.steps} --seed {args.seed} --threads {args.threads}` (seeded: the
tokenizer, the initial weights and every batch). AdamW, learning rate {LR} after {WARMUP} warm-up steps, weight decay
{WEIGHT_DECAY}, gradients clipped at norm 1, batches of {BATCH} sequences, at most {args.steps} steps (it stops
early once the largest induction score is at least 0.6 and G at least 2 nats at {SETTLED} evaluations in a row, or when
interrupted with Ctrl-C, and ships what it has evaluated; this run's last checkpoint is step {rows[-1][0]}, and its log
says why it stopped); float32.
Every {EVAL_EVERY} steps the script scores the model on METHODS §20's default probe and keeps its weights; it ships
step 0, the last step, and steps between spaced densely over the phase change. Training took {trained_s:.0f} s of wall
time on {args.threads} CPU threads of a shared machine (`training_log.txt` has the log with its times; `curve.json`
every evaluated step). The checkpoints take {size / 2**20:.1f} MB in all.

## The phase change

METHODS §20's default probe (s = 50 distinct random tokens said twice after the BOS, 10 sequences, seed 0) on each
shipped checkpoint, loaded from its folder: the largest induction score over the {LAYERS * HEADS} heads, and the
in-context gain G = L_1 - L_2 (nats). `tests/core/test_trained_decoder.py` holds the first and the last.

| Step | Largest induction score | G (nat) |
|--:|--:|--:|
{table}
"""


def train(model, lm: LoadedModel, batches: Batches, optimizer, schedule, steps: int, snapshots: dict, curve: list,
          log) -> None:  # fmt: skip
    """The training loop: every EVAL_EVERY steps the probe's scores, logged, and the weights kept in `snapshots`."""
    loss_value = float("nan")
    for step in range(steps + 1):
        if step % EVAL_EVERY == 0 or step == steps:
            model.eval().set_attn_implementation("eager")  # the only one that returns attention weights
            induction, gain = evaluate(lm)
            model.train().set_attn_implementation("sdpa")  # faster to train
            snapshots[step] = {k: v.detach().clone() for k, v in model.state_dict().items()}
            curve.append((step, loss_value, induction, gain))
            log(f"step {step:5d}  loss {loss_value:.3f}  max induction {induction:.3f}  gain {gain:.3f} nat")
        settled = len(curve) >= SETTLED and all(i >= 0.6 and g >= 2.0 for _, _, i, g in curve[-SETTLED:])
        if step == steps or settled:
            break
        ids = batches.batch()
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        loss_value = loss.item()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "data" / "models" / NAME)
    parser.add_argument("--steps", type=int, default=1500)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even where started in the background (SIGINT ignored)
    signal.signal(signal.SIGTERM, signal.default_int_handler)
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
    log(
        f"tokenizer: byte-level BPE, {len(tokenizer)} tokens, trained on {len(sentences)} sentences "
        f"({sum(map(len, encoded))} tokens)"
    )
    model = new_model(tokenizer, args.seed)
    lm = decoder_in_memory(NAME, model, tokenizer)
    log(f"model: {type(model).__name__}, {lm.facts.parameters} parameters")
    batches = Batches(encoded, ordinary_ids(lm), tokenizer.bos_token_id, args.seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=WEIGHT_DECAY)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / WARMUP))
    snapshots: dict[int, dict[str, torch.Tensor]] = {}
    curve: list[tuple[int, float, float, float]] = []
    try:
        train(model, lm, batches, optimizer, schedule, args.steps, snapshots, curve, log)
    except KeyboardInterrupt:  # Ctrl-C (or kill -INT): stop here and ship the checkpoints evaluated so far
        log(f"stopped by the user after step {curve[-1][0]}")
    trained = time.perf_counter() - started
    steps = [c[0] for c in curve]
    if steps[-1] < args.steps:
        log(f"the phase change is over (induction >= 0.6 and G >= 2 nat at {SETTLED} evaluations in a row): stopped")
    ship = shipped_steps(steps, [c[2] for c in curve])
    log(f"trained in {trained:.0f} s; shipping steps {ship}")
    args.out.mkdir(parents=True, exist_ok=True)
    model.set_attn_implementation("eager")
    for step in ship:
        folder = args.out / f"step{step}"
        model.load_state_dict(snapshots[step])
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
    rows = measured(args.out)
    for step, induction, gain in rows:
        log(f"shipped step{step}: largest induction score {induction:.3f}, G {gain:.3f} nat")
    (args.out / "training_log.txt").write_text("\n".join(log_lines) + "\n", encoding="utf-8")
    size = sum(p.stat().st_size for p in args.out.rglob("step*/*") if p.is_file())
    tokens = sum(map(len, encoded))
    card = data_card(text, tokens, lm.facts.parameters, args, rows, trained, size)
    (args.out / "README.md").write_text(card, encoding="utf-8")
    (args.out / "curve.json").write_text(
        json.dumps(
            [
                dict(step=s, loss=None if np.isnan(l) else round(l, 4), induction=round(i, 4), gain=round(g, 4))
                for s, l, i, g in curve
            ],
            indent=1,
        )
        + "\n"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
