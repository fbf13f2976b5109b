"""`attnlib norms --part encoder|decoder|cross --target ...` on tiny random T5, BART and Marian (METHODS §18): the
decoder's §11-13 maps and the cross-attention's §11 maps as the library computes them, the JSON's kind, part, source,
target and key tokens as `attention --json` gives them, cross-attention's §12-13 null with the reason, the result file
read back, and one `error:` line (exit 2) for what has no meaning."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib import load
from attnlib.core.model import load_model
from attnlib.core.seq2seq import run_seq2seq
from attnlib.stats.norms import part_norm_maps
from support.cli import run_cli
from support.models import ENCODER_DECODER_KINDS, save_tiny

pytestmark = pytest.mark.usefixtures("one_thread")

SOURCE = "The cat sat on the mat."
TARGET = "A dog ran in the park."
NORM_KEYS = {"model", "tokens", "value_norm", "weighted_norm", "layer_norm", "residual_ln", "attention_rollout",
             "residual_ln_rollout", "kind", "part"}  # fmt: skip
PART_KEYS = {"source", "target", "target_from", "key_tokens"}  # as `attention --json` gives them for a part
RESIDUAL = ("residual_ln", "attention_rollout", "residual_ln_rollout")


@pytest.fixture(scope="module", params=ENCODER_DECODER_KINDS)
def encdec_dir(request, tmp_path_factory):
    return save_tiny(request.param, tmp_path_factory.mktemp(f"norms-parts-{request.param}"))


def norms_json(folder, *argv: str) -> dict:
    ran = run_cli("norms", "--model", str(folder), "--text", SOURCE, *argv, "--json")
    assert ran.code == 0, ran.err
    return ran.json


@pytest.mark.parametrize("part", ["decoder", "cross"])
def test_norms_of_a_part_are_the_librarys_with_the_parts_keys(encdec_dir, part, tmp_path):
    out = tmp_path / "norms.json"
    data = norms_json(encdec_dir, "--part", part, "--target", TARGET, "--out", str(out))
    assert set(data) == NORM_KEYS | PART_KEYS | ({"not_computed"} if part == "cross" else set())
    assert (data["kind"], data["part"], data["source"], data["target"], data["target_from"]) == (
        "encoder-decoder", part, SOURCE, TARGET, "given",
    )  # fmt: skip
    maps = run_seq2seq(load_model(str(encdec_dir)), SOURCE, TARGET, norms=part)
    found = part_norm_maps(maps)
    _, queries, keys = maps.part(part)
    assert (data["tokens"], data["key_tokens"]) == (queries, keys)
    names = ("value_norm", "weighted_norm", "layer_norm") + (RESIDUAL if part == "decoder" else ())
    for name in names:  # float32 values printed as JSON numbers: exact
        np.testing.assert_array_equal(np.array(data[name], np.float32), getattr(found, name), err_msg=name)
    assert np.array(data["weighted_norm"]).shape[2:] == (len(queries), len(keys))
    if part == "cross":
        assert all(data[name] is None for name in RESIDUAL)
        assert data["not_computed"]["maps"] == list(RESIDUAL)
        assert "not square" in data["not_computed"]["reason"] and "cross attention" in data["not_computed"]["reason"]
    back = load(str(out))
    assert back.result.encoder_decoder["key_tokens"] == keys and back.options.part == part
    assert (back.result.residual_ln is None) == (part == "cross")
    per_layer = back.tables()["Per layer"]
    assert set(per_layer["key"]) <= set(keys) and len(per_layer) == 2 * len(queries) * len(keys)
    assert {"layer_norm", "residual_ln"} & set(per_layer.columns) == (
        {"layer_norm"} if part == "cross" else {"layer_norm", "residual_ln"}
    )
    assert len(back.figures()) == (1 if part == "cross" else 2)


def test_the_encoders_norms_are_the_default_part_and_read_no_target(encdec_dir):
    default = norms_json(encdec_dir)
    explicit = norms_json(encdec_dir, "--part", "encoder")
    assert set(default) == NORM_KEYS and (default["kind"], default["part"]) == ("encoder-decoder", "encoder")
    assert default == explicit
    ran = run_cli("norms", "--model", str(encdec_dir), "--text", SOURCE, "--target", TARGET, "--json")
    assert "--target is the decoder's input" in ran.error
    ran = run_cli("norms", "--model", str(encdec_dir), "--text", SOURCE, "--pair", TARGET, "--part", "cross", "--json")
    assert "not a pair" in ran.error


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_the_parts_and_target_of_norms_are_refused_for_other_models_in_one_line(tiny_model_dir):
    for extra in (["--part", "decoder"], ["--part", "cross"], ["--target", TARGET]):
        ran = run_cli("norms", "--model", str(tiny_model_dir), "--text", SOURCE, *extra, "--json")
        assert "encoder-decoder" in ran.error
    assert run_cli("norms", "--model", str(tiny_model_dir), "--text", SOURCE, "--part", "nowhere").code == 2
