"""The lens's figures (attnlib.views.lens), found through the figures' registry: the lens table holds each node's top
tokens and logits, the attribution heatmap every head's DLA with each layer's bias and feed-forward block beside it and
each head's readout on hover; a masked-LM encoder's result draws the table alone."""

from __future__ import annotations

import numpy as np
import pytest

from attnlib.analyses.lens import LensOptions, compute_lens
from attnlib.core.corpus import CorpusInput
from attnlib.core.model import load_model
from attnlib.views.drawing import figures_of
from support.models import save_tiny

pytestmark = pytest.mark.usefixtures("one_thread")


def test_the_lens_and_attribution_figures_show_the_result(tmp_path):
    lm = load_model(str(save_tiny("gpt2", tmp_path / "gpt2")))
    result = compute_lens(lm, CorpusInput("The cat sat on the mat."), LensOptions(top=3))
    table, heatmap = figures_of(result, "tiny")
    cells = table.data[0]
    assert list(cells.y) == ["E", "A0", "R0", "A1", "R1"]
    assert np.allclose(cells.z, [[t.logit for t in node.top] for node in result.nodes])
    heads, side = heatmap.data
    assert np.allclose(heads.z, result.dla.heads)
    assert np.allclose(side.z, np.stack([result.dla.attention_bias, result.dla.ffn], axis=1))
    promoted = result.readouts[1][2].promoted[0].token.replace("Ġ", " ")
    assert "promotes" in heads.customdata[1][2] and promoted in heads.customdata[1][2]
    t5 = load_model(str(save_tiny("t5", tmp_path / "t5")))
    decoded = compute_lens(t5, CorpusInput("The cat sat."), LensOptions(target="The cat sat."))
    own, cross, _ = figures_of(decoded, "t5")[1].data
    assert np.allclose(own.z, decoded.dla.heads) and np.allclose(cross.z, decoded.dla.cross_heads)
    assert "cross head 2-1" in cross.customdata[1][0]
    encoder = load_model(str(save_tiny("bert", tmp_path / "bert")))
    assert len(figures_of(compute_lens(encoder, CorpusInput("The cat sat."), LensOptions()), "bert")) == 1
