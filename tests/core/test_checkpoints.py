"""Any checkpoint that loads: half-precision weights analysed in float32 (or kept as saved), a saved attention
implementation overridden by eager attention (every command's JSON as without it), a model that still returns no
attention weights refused in one sentence, and a model's size said and limited before its weights are read."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
import torch

import attnlib.cli.options as cli_options
from attnlib.core.families import UnsupportedModelError
from attnlib.core.model import DEFAULT_MODEL, LoadedModel, ModelLoadError, load_model, model_parameters
from attnlib.core.runner import NoAttentionWeightsError, encode, returned_weights, run
from attnlib.stats.hta import hidden_token_attribution
from support.bad_input import _assert_kept_default, _choose_other, _sidebar
from support.cli import cli_json, run_cli
from support.json_keys import COMMAND_KEYS, KEYS
from support.models import save_tiny
from support.runs import command_line, small_files

HALF = {"float16": torch.float16, "bfloat16": torch.bfloat16}
# the commands that ended in a traceback with a saved "_attn_implementation": "sdpa" (issue 35)
SDPA_FAILED = ("attention", "norms", "hta", "special", "deps", "positions", "qk", "search")
TEXT = "The cat sat on the mat because it was warm."


def _saved_as(kind: str, dtype: str, tmp_path_factory) -> tuple:
    """A tiny model of this kind saved in float32 and the same weights saved in a half dtype: both folders."""
    full = save_tiny(kind, tmp_path_factory.mktemp(f"{kind}-float32"))
    half = tmp_path_factory.mktemp(f"{kind}-{dtype}")
    _auto_class(full).from_pretrained(full, dtype=HALF[dtype]).save_pretrained(half)
    for name in full.iterdir():
        if name.name.startswith(("tokenizer", "vocab", "merges", "special_tokens")):
            (half / name.name).write_bytes(name.read_bytes())
    return full, half


def _auto_class(folder):
    """transformers' own class for the saved model: a masked LM, or a decoder's causal LM."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForMaskedLM

    config = AutoConfig.from_pretrained(folder)
    return AutoModelForMaskedLM if type(config) in AutoModelForMaskedLM._model_mapping else AutoModelForCausalLM


def _eager_reference(folder, dtype) -> torch.nn.Module:
    """The checkpoint loaded by transformers itself with eager attention and the given dtype (independent of attnlib;
    a saved `_attn_implementation` outranks from_pretrained's keyword, so the config is set)."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(folder)
    config._attn_implementation = "eager"
    return _auto_class(folder).from_pretrained(folder, config=config, dtype=dtype).eval()


@pytest.mark.parametrize("dtype", list(HALF))
@pytest.mark.parametrize("kind", ["bert", "roberta", "modernbert", "gpt2", "llama"])
def test_half_precision_checkpoint_is_analysed_in_float32(kind, dtype, tmp_path_factory):
    _, half = _saved_as(kind, dtype, tmp_path_factory)
    assert json.loads((half / "config.json").read_text())["dtype"] == dtype
    lm = load_model(str(half))
    assert {p.dtype for p in lm.encoder.parameters()} == {torch.float32}
    assert (lm.facts.dtype, lm.facts.saved_dtype, lm.facts.converted) == ("float32", dtype, True)
    assert dtype in lm.facts.dtype_note()
    # the converted weights are the saved ones exactly (every half value is a float32 value)
    saved = _eager_reference(half, HALF[dtype]).base_model.state_dict()
    for name, value in lm.encoder.state_dict().items():
        assert torch.equal(value, saved[name].float()), name
    # attention equals transformers' own eager forward pass on the same float32 weights (same arithmetic: 1e-6)
    reference = _eager_reference(half, torch.float32)
    result = run(lm, TEXT)
    batch = lm.tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        own = reference.base_model(**batch, output_attentions=True).attentions
    np.testing.assert_allclose(result.attentions, torch.cat(own).numpy(), atol=1e-6)
    # attribution, which runs in float32 only, now runs; its rows are shares (sum 1 over the input tokens)
    attribution = hidden_token_attribution(lm, encode(lm, TEXT), mode="exact")
    np.testing.assert_allclose(attribution.input.sum(-1), 1.0, atol=1e-5)


def test_saved_dtype_is_kept_on_request_and_float32_statistics_refused(tmp_path_factory):
    _, half = _saved_as("bert", "bfloat16", tmp_path_factory)
    lm = load_model(str(half), dtype="saved")
    assert {p.dtype for p in lm.encoder.parameters()} == {torch.bfloat16}
    assert (lm.facts.dtype, lm.facts.saved_dtype, lm.facts.converted) == ("bfloat16", "bfloat16", False)
    result = run(lm, TEXT)  # attention statistics allow the saved dtype: rows still sum to 1 (bfloat16's 2^-8 per row)
    assert result.attentions.dtype == np.float32
    np.testing.assert_allclose(result.attentions.sum(-1), 1.0, atol=result.attentions.shape[-1] * 2**-8)
    with pytest.raises(UnsupportedModelError, match="kept in bfloat16, as saved"):
        hidden_token_attribution(lm, encode(lm, TEXT), mode="exact")


def test_cli_says_the_dtype_and_refuses_float32_statistics_in_one_line(tmp_path_factory):
    _, half = _saved_as("bert", "float16", tmp_path_factory)
    ran = run_cli("attention", "--text", TEXT, "--model", str(half), "--json")
    assert ran.code == 0, ran.err
    assert ran.json["model_dtype"] == {"analysed": "float32", "saved": "float16"}
    ran = run_cli("hta", "--text", TEXT, "--model", str(half), "--model-dtype", "saved", "--json")
    assert ran.code == 2 and "Traceback" not in ran.err
    assert ran.err.strip().splitlines()[-1].startswith("error: Norms, attribution and ablations run in float32")


def test_config_naming_sdpa_still_gives_eager_attention(tmp_path_factory):
    folder = save_tiny("bert", tmp_path_factory.mktemp("sdpa"))
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "_attn_implementation": "sdpa"}))
    lm = load_model(str(folder))
    assert lm.encoder.config._attn_implementation == "eager"
    batch = lm.tokenizer(TEXT, return_tensors="pt")
    with torch.no_grad():
        own = _eager_reference(folder, torch.float32).base_model(**batch, output_attentions=True).attentions
    np.testing.assert_allclose(run(lm, TEXT).attentions, torch.cat(own).numpy(), atol=1e-6)
    ran = run_cli("attention", "--text", TEXT, "--model", str(folder), "--json")
    assert ran.code == 0, ran.err
    assert np.array(ran.json["attentions"]).shape[:2] == (2, 4)


@pytest.fixture(scope="module", params=["bert", "llama"])  # an encoder and a decoder
def saved_with_and_without_sdpa(request, tmp_path_factory):
    """A tiny model saved as usual, and the same folder whose config names sdpa (as transformers then reads it)."""
    from transformers import AutoConfig

    plain = save_tiny(request.param, tmp_path_factory.mktemp(f"{request.param}-eager"))
    named = tmp_path_factory.mktemp(f"{request.param}-sdpa")
    shutil.copytree(plain, named, dirs_exist_ok=True)
    config = json.loads((plain / "config.json").read_text())
    (named / "config.json").write_text(json.dumps({**config, "_attn_implementation": "sdpa"}))
    assert AutoConfig.from_pretrained(named)._attn_implementation == "sdpa"
    return plain, named


@pytest.mark.parametrize("command", SDPA_FAILED)
def test_a_config_naming_sdpa_gives_each_commands_json_of_the_model_without_it(
    saved_with_and_without_sdpa, command, tmp_path, one_thread
):
    plain, named = saved_with_and_without_sdpa
    small = small_files(tmp_path).get(command, {})
    without, with_sdpa = (
        json.dumps(cli_json(*command_line(command, str(f), **small), "--json")) for f in (plain, named)
    )
    assert with_sdpa.replace(str(named), str(plain)) == without  # the same numbers; only the folder's name differs


def _returning_no_weights(lm: LoadedModel) -> LoadedModel:
    """The model with every forward pass's attention weights taken out of its output, as a model whose attention
    ignores output_attentions returns them."""

    def drop(_module, _args, out):
        for name in ("attentions", "encoder_attentions", "decoder_attentions", "cross_attentions"):
            if getattr(out, name, None) is not None:
                setattr(out, name, None)

    for module in {id(m): m for m in (lm.encoder, lm.mlm, lm.seq2seq, lm.causal_lm) if m is not None}.values():
        module.register_forward_hook(drop)
    return lm


@pytest.mark.parametrize("kind", ["bert", "llama", "t5"])
def test_a_model_that_returns_no_weights_is_refused_in_one_sentence(kind, tmp_path, monkeypatch, one_thread):
    folder = str(save_tiny(kind, tmp_path / kind))
    with pytest.raises(NoAttentionWeightsError) as caught:
        returned_weights(())
    monkeypatch.setattr(cli_options, "load_model", lambda *a, **k: _returning_no_weights(load_model(*a, **k)))
    small = small_files(tmp_path)
    if kind == "t5":
        small["attention"] = dict(pair=False)  # an encoder-decoder reads a source and a target, not a pair
    # gradient importance needs a masked-LM head and retrieval a decoder: the others refuse them for that first
    refused_first = {"gradient"} if kind != "bert" else set()
    refused_first |= {"retrieval"} if kind != "llama" else set()
    # they read no weights from the model's output (below); routes reads each attention module's own (core/residual
    # refuses where those are missing), which this model still returns
    weightless = {"hta", "compose", "lens", "patch", "routes"}
    commands = sorted({**KEYS, **COMMAND_KEYS}.keys() - weightless - refused_first)
    for command in commands:
        ran = run_cli(*command_line(command, folder, **small.get(command, {})), "--json")
        assert ran.error == f"error: {caught.value}", (command, ran)
    # Hidden Token Attribution reads no returned weights (it differentiates the model's own forward pass), nor do the
    # logit lens and patching (a head's output is its slice of the output projection's input) and composition (the
    # weights alone; a post-LN BERT has no norm before attention to fold, and says so): they run
    assert run_cli(*command_line("hta", folder), "--json").code == 0
    assert run_cli(*command_line("lens", folder), "--json").code == 0
    assert run_cli(*command_line("routes", folder), "--json").code == 0  # T5's: its decoder's and encoder's modules
    if kind == "llama":  # a masked LM's metric needs [MASK] in the text, and T5's patch a target: the decoder runs
        assert run_cli(*command_line("patch", folder), "--json").code == 0
    composed = run_cli(*command_line("compose", folder), "--json")
    assert composed.code == 0 if kind != "bert" else "post-LN" in composed.error, composed


def test_size_is_read_from_the_config_and_limited_before_loading(tiny_model_dir, monkeypatch):
    lm = load_model(str(tiny_model_dir))
    counted = sum(p.numel() for p in _eager_reference(tiny_model_dir, torch.float32).parameters())  # head included
    assert model_parameters(str(tiny_model_dir)) == counted == lm.facts.parameters
    megabytes = counted * 4 / 2**20
    limit = megabytes / 2
    assert 0.05 <= megabytes < 9.95  # a tiny model's size, said to a tenth of a megabyte
    count = f"{counted / 1e6:.1f} M" if counted >= 1e6 else f"{counted:,}"  # the tiny models: about 1 M
    said = rf"needs about {megabytes:.1f} MB in float32 \({count} parameters\).*at most {limit:,g} MB"
    with pytest.raises(ModelLoadError, match=said):
        load_model(str(tiny_model_dir), max_megabytes=limit)
    assert load_model(str(tiny_model_dir), max_megabytes=megabytes + 1).facts.parameters == counted
    monkeypatch.setenv("ATTNLIB_MAX_MODEL_MB", str(limit))
    assert load_model(DEFAULT_MODEL).facts.parameters > 0  # the bundled fallback is never refused
    ran = run_cli("attention", "--text", TEXT, "--model", str(tiny_model_dir), "--json")
    assert ran.code == 2 and ran.err.strip().splitlines() == [ran.err.strip()] and "needs about" in ran.err


@pytest.mark.slow
@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_app_sidebar_refuses_a_model_over_the_size_limit(tiny_model_dir):
    at = _choose_other(_sidebar({"max_model_mb": 1}), str(tiny_model_dir))
    _assert_kept_default(at, str(tiny_model_dir), r"needs about \d+\.\d MB in float32 .*at most 1 MB")
    assert any(re.search(r"M parameters, about \d+ MB in float32", c.value) for c in at.sidebar.caption)
