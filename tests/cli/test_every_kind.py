"""Every command on every decoder kind and every encoder-decoder kind (tiny random models of support/models.py, each
read once): it exits 0 with the top-level JSON keys that the command's other tests hold (support/json_keys.py) and
what a decoder or an encoder-decoder adds, and it says the model's kind (and part) where it reports one; or, where the
statistic has no meaning for the kind, it prints one `error:` line with the library's reason and exits 2."""

from __future__ import annotations

import argparse

import pytest

import attnlib.cli.options as cli_options
from attnlib.analyses.registry import ANALYSES
from attnlib.cli.entry import build_parser
from attnlib.core.decoding import check_decoder
from attnlib.core.families import UnsupportedModelError, unsupported_reason
from attnlib.core.model import load_model
from attnlib.core.ov_circuit import head_weights_reason
from attnlib.stats.gradient import unavailable_reason
from attnlib.stats.lens import head_reason
from attnlib.stats.patching import unavailable_reason as patching_unavailable_reason
from support.cli import run_cli
from support.json_keys import COMMAND_KEYS, KEYS
from support.models import (
    DECODER_KINDS,
    DECODER_SLIDING_LAYERS,
    ENCODER_DECODER_KINDS,
    FOUND_ENCODER_DECODER_KINDS,
    FOUND_LAYOUT_KINDS,
    save_tiny,
)
from support.runs import command_line, small_files

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]

COMMANDS = sorted({**KEYS, **COMMAND_KEYS})
SAYS_DECODER = ("aggregation", "importance", "positions", "special")  # the JSON that carries "kind": "decoder"
PART_KEYS = {"source", "target", "target_from", "key_tokens"}  # an encoder-decoder's `attention`: its two texts
# what has no meaning for a kind: gradient importance takes gradients of a masked-LM loss, which no decoder or
# encoder-decoder has (Gemma 2's soft-capped queries and keys are shown: q.k is the score before capping); the retrieval
# test decodes, which needs a decoder (not an encoder-decoder) and, greedily, a trained LM head, which the fine-tuned
# Llama classifier has not
REFUSED = {
    "gradient": (*DECODER_KINDS, *ENCODER_DECODER_KINDS, *FOUND_LAYOUT_KINDS),
    "retrieval": (*ENCODER_DECODER_KINDS, *FOUND_ENCODER_DECODER_KINDS, "llama-classifier"),
    "lens": ("llama-classifier",),
}
ENCODER_DECODERS = (*ENCODER_DECODER_KINDS, *FOUND_ENCODER_DECODER_KINDS)
# refused where the library says so for the model: patching without an LM head; composition of a post-LN stack
REFUSED_BY_MODEL = {"patch": patching_unavailable_reason, "compose": head_weights_reason}


def _reason(folder: str, command: str) -> str | None:
    """The library's own reason why the command has no meaning for this model (or what its check found)."""
    lm = load_model(folder)
    if command == "retrieval":
        with pytest.raises(UnsupportedModelError) as refused:
            check_decoder(lm, forced=False)
        return str(refused.value)
    if command == "lens":
        return head_reason(lm)
    return unavailable_reason(lm) if command == "gradient" else unsupported_reason(lm.encoder.config, "hta")


def _expected_keys(kind: str, command: str) -> set[str]:
    """The command's keys for an encoder, and what this kind adds (kind and part, windows, the target)."""
    keys = set(KEYS.get(command) or COMMAND_KEYS[command])
    if kind in FOUND_LAYOUT_KINDS and command in ANALYSES:  # the layout found in the model and checked, in words
        keys.add("layout_found")
    if kind in ENCODER_DECODERS and command == "routes":  # the decoder's route, into the encoder: source and target
        return keys | {"kind", "part", "source", "target", "target_from"}
    if kind in ENCODER_DECODERS and command == "lens":  # the decoder's lens: its source and target, cross heads
        return (
            keys
            | {"kind", "part", "source", "target", "target_from"}
            | ({"cross_readouts"} if kind in ("t5", "mt5", "mbart") else set())
        )
    if kind in ENCODER_DECODERS and command == "patch":  # its decoder's and cross-attention's heads too
        keys |= {"decoder_heads", "cross_heads", "decoder_attribution", "cross_attribution"}
    if kind in ENCODER_DECODERS:
        added = {"stacks"} if command == "report" else {"kind", "part"}
        return keys | added | (PART_KEYS if command == "attention" else set())
    if command in SAYS_DECODER:
        keys.add("kind")
    if command == "positions" and kind in DECODER_SLIDING_LAYERS:
        keys.add("windows")
    return keys


def test_every_command_is_run():
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    assert sorted(sub.choices) == COMMANDS


@pytest.fixture(scope="module", autouse=True)
def _each_model_read_once():
    """The commands' loader, keeping each folder's model: a tiny model is read once, not once per command."""
    kept: dict = {}

    def load(name, **options):
        key = (name, *sorted(options.items()))
        if key not in kept:
            kept[key] = load_model(name, **options)
        return kept[key]

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(cli_options, "load_model", load)
        yield


@pytest.fixture(scope="module", params=(*DECODER_KINDS, *ENCODER_DECODER_KINDS, *FOUND_LAYOUT_KINDS))
def kind_dir(request, tmp_path_factory):
    return request.param, save_tiny(request.param, tmp_path_factory.mktemp(f"every-{request.param}"))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_runs_and_says_the_kind_or_refuses_in_one_line(kind_dir, command, tmp_path):
    kind, folder = kind_dir
    encoder_decoder = kind in ENCODER_DECODERS
    small = small_files(tmp_path)
    if encoder_decoder:
        small["attention"] = dict(pair=False)  # an encoder-decoder reads a source and a target, not a pair
    ran = run_cli(*command_line(command, str(folder), **small.get(command, {})), "--json")
    said = REFUSED_BY_MODEL[command](load_model(str(folder))) if command in REFUSED_BY_MODEL else None
    if said is not None:
        assert ran.error.endswith(said), ran
        return
    if kind in REFUSED.get(command, ()):
        reason = _reason(str(folder), command)
        assert reason is not None and ran.error.endswith(reason), ran
        return
    assert ran.code == 0, ran.err
    printed = ran.json
    assert set(printed) == _expected_keys(kind, command)
    if encoder_decoder and command == "report":
        assert printed["stacks"] == {str(folder): {"kind": "encoder-decoder", "part": "encoder"}}
    elif encoder_decoder:
        decoder = command in ("lens", "routes")
        assert (printed["kind"], printed["part"]) == ("encoder-decoder", "decoder" if decoder else "encoder")
    elif command in SAYS_DECODER:
        assert printed["kind"] == "decoder"
    if "layout_found" in printed:
        assert printed["layout_found"] == dict(load_model(str(folder)).facts.layout_found) != {}
    if "windows" in printed:  # the sliding layers, and only those, have a window
        assert [w is not None for w in printed["windows"]] == [l in DECODER_SLIDING_LAYERS[kind] for l in range(2)]
