"""Encoder-decoders (tiny random T5, BART and Marian of tests/support/models.py): loaded by the library's loader, their
encoder, decoder and cross attention equal to the model's own eager forward pass (run here with transformers alone on
inputs built by hand), the default target the model's own greedy output, and `attention --part` on the command line."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
import torch

from attnlib.core.model import load_model
from attnlib.core.runner import InputError
from attnlib.core.seq2seq import GREEDY_TOKENS, PARTS, NotEncoderDecoderError, encode_target, run_seq2seq
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV
from support.cli import run_cli
from support.models import ENCODER_DECODER_KINDS, save_tiny

SOURCE = "The cat sat on the mat."
TARGET = "A dog ran in the park."


@pytest.fixture(scope="module", params=ENCODER_DECODER_KINDS)
def encdec(request, tmp_path_factory):
    """Each kind saved by save_tiny: its folder, the library's LoadedModel, and transformers' own model and tokenizer
    read from the folder with eager attention."""
    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer

    kind = request.param
    folder = save_tiny(kind, tmp_path_factory.mktemp(f"encdec-{kind}"))
    config = AutoConfig.from_pretrained(folder)
    config._attn_implementation = "eager"
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, config=config).eval()
    return dict(
        kind=kind, folder=folder, lm=load_model(str(folder)), model=model, tok=AutoTokenizer.from_pretrained(folder)
    )


def _reference(encdec, source: str, target: str):
    """transformers' own attentions: the source encoded, the decoder reading its start token and then the target's
    labels without their last (eos) token, as teacher forcing does."""
    tok, model = encdec["tok"], encdec["model"]
    src = tok(source, return_tensors="pt")
    labels = tok(text_target=target)["input_ids"]
    assert labels[-1] == tok.eos_token_id
    decoder_ids = torch.tensor([[model.config.decoder_start_token_id, *labels[:-1]]])
    with torch.no_grad():
        out = model(**src, decoder_input_ids=decoder_ids, output_attentions=True)
    return src["input_ids"][0].tolist(), decoder_ids[0].tolist(), out


def test_loads_as_an_encoder_decoder_whose_decoder_starts_with_the_familys_token(encdec):
    lm, kind = encdec["lm"], encdec["kind"]
    assert lm.facts.kind == "encoder-decoder" and lm.seq2seq is not None
    assert lm.encoder is lm.seq2seq.get_encoder()
    assert (lm.facts.n_layers, lm.facts.n_heads) == (2, 4)
    start = lm.seq2seq.config.decoder_start_token_id
    expected = {"t5": lm.tokenizer.pad_token_id, "marian": lm.tokenizer.pad_token_id, "bart": lm.tokenizer.eos_token_id}
    assert start == expected[kind]


def test_three_parts_equal_the_models_own_attentions(encdec, one_thread):
    maps = run_seq2seq(encdec["lm"], SOURCE, TARGET)
    src_ids, tgt_ids, out = _reference(encdec, SOURCE, TARGET)
    assert maps.source.input_ids == src_ids and maps.target.input_ids == tgt_ids
    assert maps.target.source == "given" and maps.target.text == TARGET
    for mine, theirs in (
        (maps.encoder, out.encoder_attentions),
        (maps.decoder, out.decoder_attentions),
        (maps.cross, out.cross_attentions),
    ):
        np.testing.assert_allclose(mine, torch.stack([a[0] for a in theirs]).numpy(), rtol=0, atol=1e-6)
    n_src, n_tgt = len(src_ids), len(tgt_ids)
    assert maps.encoder.shape == (2, 4, n_src, n_src)
    assert maps.decoder.shape == (2, 4, n_tgt, n_tgt) and maps.cross.shape == (2, 4, n_tgt, n_src)
    assert not np.triu(maps.decoder, k=1).any(), "the decoder attends to a later target token"
    for name in PARTS:
        attentions, queries, keys = maps.part(name)
        assert attentions.shape[2:] == (len(queries), len(keys))


def test_without_a_target_the_decoder_reads_the_models_greedy_output(encdec, one_thread):
    maps = run_seq2seq(encdec["lm"], SOURCE)
    tok, model = encdec["tok"], encdec["model"]
    with torch.no_grad():
        greedy = model.generate(**tok(SOURCE, return_tensors="pt"), max_new_tokens=GREEDY_TOKENS, do_sample=False)
    text = tok.decode(greedy[0], skip_special_tokens=True).strip()
    assert (maps.target.source, maps.target.text) == (("greedy", text) if text else ("source", SOURCE))
    _, tgt_ids, out = _reference(encdec, SOURCE, maps.target.text)
    assert maps.target.input_ids == tgt_ids
    np.testing.assert_allclose(maps.cross, torch.stack([a[0] for a in out.cross_attentions]).numpy(), atol=1e-6)


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_an_empty_target_and_a_model_without_a_decoder_are_refused_in_words(encdec, tiny_model):
    with pytest.raises(InputError, match="target is empty"):
        encode_target(encdec["lm"], " \t\u00a0")  # run_seq2seq takes a blank target as none given
    with pytest.raises(NotEncoderDecoderError, match="for encoder-decoder models"):
        run_seq2seq(tiny_model, SOURCE, TARGET)


@pytest.mark.parametrize("part", PARTS)
def test_attention_command_prints_the_part_the_kind_and_both_token_lists(encdec, part, one_thread):
    ran = run_cli(
        "attention", "--model", str(encdec["folder"]), "--text", SOURCE, "--target", TARGET, "--part", part, "--json"
    )
    assert ran.code == 0, ran.err
    src_ids, tgt_ids, out = _reference(encdec, SOURCE, TARGET)
    theirs = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    expected = torch.stack([a[0] for a in theirs[part]]).numpy()
    np.testing.assert_allclose(np.array(ran.json["attentions"]), expected, rtol=0, atol=1e-6)
    tok = encdec["tok"]
    source_tokens, target_tokens = tok.convert_ids_to_tokens(src_ids), tok.convert_ids_to_tokens(tgt_ids)
    assert (ran.json["kind"], ran.json["part"], ran.json["target"], ran.json["target_from"]) == (
        "encoder-decoder",
        part,
        TARGET,
        "given",
    )
    assert ran.json["tokens"] == (source_tokens if part == "encoder" else target_tokens)
    assert ran.json["key_tokens"] == (target_tokens if part == "decoder" else source_tokens)
    assert len(ran.json["word_ids"]) == len(ran.json["tokens"])


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_attention_flags_of_encoder_decoders_are_refused_for_other_models_in_one_line(tiny_model_dir):
    for extra in (["--part", "cross"], ["--target", TARGET]):
        ran = run_cli("attention", "--model", str(tiny_model_dir), "--text", SOURCE, *extra, "--json")
        assert (
            ran.code == 2
            and ran.err.count("\n") == 1
            and ran.err.startswith("error: ")
            and "encoder-decoder" in ran.err
        ), ran.err


@pytest.mark.slow
def test_an_encoder_decoder_reads_no_pair_and_no_empty_target(encdec):
    model = str(encdec["folder"])
    for extra, said in ((["--pair", TARGET], "not a pair"), (["--target", " "], None)):
        ran = run_cli("attention", "--model", model, "--text", SOURCE, *extra, "--json")
        if said is None:  # a blank target is none given: the model's own output
            assert ran.code == 0 and ran.json["target_from"] in ("greedy", "source"), ran.err
        else:
            assert ran.code == 2 and ran.err.count("\n") == 1 and said in ran.err, ran.err


def test_an_encoder_decoders_attention_result_reads_back(encdec, one_thread):
    from attnlib.analyses.attention import AttentionMaps
    from attnlib.analyses.registry import analyse
    from attnlib.results.files import json_ready

    maps = analyse("attention", encdec["lm"], text=SOURCE, target=TARGET, part="cross").result
    back = AttentionMaps.from_json(json.loads(json.dumps(json_ready(maps.to_json()))))
    assert back.encoder_decoder == maps.encoder_decoder and back.tokens == maps.tokens
    np.testing.assert_array_equal(back.attentions, maps.attentions)
    assert back.attentions.shape[2:] == (len(maps.tokens), len(maps.encoder_decoder["key_tokens"]))


def test_a_long_target_is_cut_to_the_models_length(encdec, one_thread):
    maps = run_seq2seq(encdec["lm"], SOURCE, " ".join([TARGET] * 30))
    limit = encdec["lm"].facts.max_length
    assert maps.target.truncated and maps.target.n_tokens_full > limit == len(maps.target.tokens)
    assert maps.decoder.shape[2:] == (limit, limit) and maps.cross.shape[2] == limit


# ---------- slow tests: Every command on an encoder-decoder (tiny random BART and T5): it runs on the encoder's self-
# attention and its JSON says so (kind and part), or it exits 2 with one `error:` line and no traceback.


TEXT = "The cat sat on the mat."
CORPUS = ["--corpus", str(CLASSROOM_SINGLE), "--limit", "4"]
TREEBANK = ["--limit", "4"]
COMMANDS = {
    "ablate": ["--text", TEXT, "--heads", "0-0"],
    "aggregation": CORPUS,
    "deps": ["--conllu", str(EWT_DEV), *TREEBANK],
    "hta": ["--text", TEXT],
    "importance": CORPUS,
    "index": [*CORPUS, "--layer", "1"],
    "norms": ["--text", TEXT],
    "positions": CORPUS,
    "probe": ["--train", str(EWT_DEV), "--test", str(EWT_DEV), "--epochs", "1", *TREEBANK],
    "qk": CORPUS,
    "report": [*CORPUS, "--conllu", str(EWT_DEV), "--quiet", "--epochs", "1"],
    "search": [*CORPUS, "--text", TEXT, "--token", "1", "--layer", "1"],
    "special": CORPUS,
}
# every statistic of one stack runs on the encoder part (METHODS §18); the masked-LM measure has no head to use
REFUSED = {"importance": ["--measure", "mlm"]}


@pytest.fixture(scope="module", params=["bart", "t5"])  # a source with <s> first, and one without
def encdec_dir(request, tmp_path_factory):
    return request.param, save_tiny(request.param, tmp_path_factory.mktemp(f"encdec-{request.param}"))


@pytest.mark.slow
@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_runs_on_the_encoder_or_refuses_in_one_line(encdec_dir, command, tmp_path, one_thread):
    kind, folder = encdec_dir
    out = ["--out", str(tmp_path / ("out" if command == "report" else "out.json"))]
    ran = run_cli(command, "--model", str(folder), *COMMANDS[command], *out, "--json")
    code, stdout, stderr = ran.code, ran.out, ran.err
    assert "Traceback" not in stderr and code == 0, stderr
    data = json.loads(stdout)
    if command == "report":  # of several models: the summary says which is an encoder-decoder, and so does the page
        assert data["parts"] and data["stacks"] == {str(folder): {"kind": "encoder-decoder", "part": "encoder"}}
        assert "its encoder's self-attention over the source" in html.unescape((tmp_path / "out").read_text())
    else:
        assert (data["kind"], data["part"]) == ("encoder-decoder", "encoder")
    if command in REFUSED:
        refused = run_cli(command, "--model", str(folder), *COMMANDS[command], *REFUSED[command], "--json")
        assert refused.error
    if command == "special" and code == 0:  # METHODS §18: T5's and Marian's classes are SEP and the rest, no CLS
        cls_share = [layer["cls"] for layer in data["layers"]]
        assert (max(cls_share) > 0) == (kind == "bart"), cls_share
