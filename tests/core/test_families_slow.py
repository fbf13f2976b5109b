"""Every family of attnlib.core.families on its tiny random model (tests/support/models.py): attention is the model's own,
q.k (plus the family's relative terms) gives the logits, the norms rebuild the attention block's output, replay and
context edits reproduce the model's forward pass, and HTA equals reverse mode.

The slow tier; test_families.py holds the quick tests."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.core.runner import encode
from attnlib.stats.attribution import hidden_token_attribution
from support.families import TEXT_A, TEXT_B, _cli
from support.reference import reverse_mode_reference

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]


@pytest.mark.slow
def test_attribution_equals_reverse_mode_on_every_head(family_model):
    lm = family_model
    enc = encode(lm, TEXT_A, TEXT_B)
    exact = hidden_token_attribution(lm, enc, mode="exact", with_output=True)
    f = lm.facts
    heads = [(layer, head) for layer in range(f.n_layers) for head in range(f.n_heads)]
    ref_in, ref_prev = reverse_mode_reference(lm, enc, heads)
    np.testing.assert_allclose(exact.input, ref_in.reshape(exact.input.shape), atol=1e-5)
    np.testing.assert_allclose(exact.previous, ref_prev.reshape(exact.input.shape), atol=1e-5)


@pytest.fixture(scope="module")
def small_conllu(tmp_path_factory):
    """The first six sentences of UD EWT dev, as a file (the commands read whole files)."""
    from attnlib.results.shipped import EWT_DEV

    blocks = EWT_DEV.read_text(encoding="utf-8").split("\n\n")[:6]
    path = tmp_path_factory.mktemp("conllu") / "six.conllu"
    path.write_text("\n\n".join(blocks) + "\n\n", encoding="utf-8")
    return path


@pytest.mark.slow
def test_corpus_commands_run(family_dir, family_model, small_conllu, capsys):
    """special (with --norms), deps, positions, aggregation and probe on each family, each JSON sane."""
    from attnlib.results.shipped import CLASSROOM_PAIRS

    f, model = family_model.facts, ["--model", str(family_dir)]
    corpus = ["--corpus", str(CLASSROOM_PAIRS), "--limit", "4"]
    special = _cli(capsys, ["special", *corpus, "--norms", *model])
    assert special["n_inputs"] == 4 and len(special["norm_layers"]) == f.n_layers
    shares = sum(np.array(special["heads"][k]) for k in ("cls", "sep", "punct", "other"))
    np.testing.assert_allclose(shares, 1, atol=1e-5)
    deps = _cli(capsys, ["deps", "--conllu", str(small_conllu), *model])
    assert deps["n_sentences"] + deps["n_skipped"] == 6 and deps["rows"]
    positions = _cli(capsys, ["positions", *corpus, "--probes", "3", *model])
    assert np.array(positions["histograms"]["attention"]).shape[:2] == (f.n_layers, f.n_heads)
    aggregation = _cli(capsys, ["aggregation", *corpus, "--probes", "3", *model])
    assert aggregation["n_inputs"] == 4
    probe = _cli(capsys, ["probe", "--train", str(small_conllu), "--test", str(small_conllu), *model])
    assert 0 <= probe["uas"] <= 1
