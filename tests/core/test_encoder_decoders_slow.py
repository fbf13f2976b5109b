"""Every command on an encoder-decoder (tiny random BART and T5): it runs on the encoder's self-attention and its JSON
says so (kind and part), or it exits 2 with one `error:` line and no traceback."""

from __future__ import annotations

import json

import pytest

from attnlib.cli.entry import main as cli_main
from attnlib.results.shipped import CLASSROOM_SINGLE, EWT_DEV
from support.models import save_tiny

pytestmark = pytest.mark.slow

TEXT = "The cat sat on the mat."
CORPUS = ["--corpus", str(CLASSROOM_SINGLE), "--limit", "4"]
TREEBANK = ["--limit", "4"]
COMMANDS = {
    "ablate": ["--text", TEXT, "--heads", "0:0"],
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
# the statistics of one stack that need only the attention weights and the tokens run on the encoder part
RUNS_ON_THE_ENCODER = {"deps", "index", "probe", "search", "special"}


@pytest.fixture(scope="module", params=["bart", "t5"])  # a source with <s> first, and one without
def encdec_dir(request, tmp_path_factory):
    return request.param, save_tiny(request.param, tmp_path_factory.mktemp(f"encdec-{request.param}"))


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_runs_on_the_encoder_or_refuses_in_one_line(encdec_dir, command, capsys, tmp_path, one_thread):
    kind, folder = encdec_dir
    out = ["--out", str(tmp_path / ("out" if command == "report" else "out.json"))]
    code = cli_main([command, "--model", str(folder), *COMMANDS[command], *out, "--json"])
    stdout, stderr = capsys.readouterr()
    errors = [line for line in stderr.splitlines() if line.startswith("error: ")]
    assert "Traceback" not in stderr
    if command in RUNS_ON_THE_ENCODER:
        assert code == 0, stderr
        data = json.loads(stdout)
        assert (data["kind"], data["part"]) == ("encoder-decoder", "encoder")
    else:
        assert code == 2 and stdout == "" and len(errors) == 1, stderr
    if command == "special" and code == 0:  # METHODS §18: T5's and Marian's classes are SEP and the rest, no CLS
        cls_share = [layer["cls"] for layer in data["layers"]]
        assert (max(cls_share) > 0) == (kind == "bart"), cls_share
