"""The checks of test_ablation.py's "every family" part on the other families the issue names (slow tier)."""

from __future__ import annotations

import pytest

from attnlib.core.model import load_model
from support.ablation import (
    check_batched_path_equals_a_plain_forward_with_the_hook,
    check_every_head_of_a_layer_ablated_is_a_zero_attention_output,
    check_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values,
    check_mlm_measure_is_the_change_of_the_models_own_loss,
)
from support.models import save_tiny

pytestmark = pytest.mark.slow

OTHER_FAMILIES = ("roberta", "distilbert", "albert", "modernbert", "deberta-v2")


@pytest.fixture(scope="module", params=OTHER_FAMILIES)
def tiny(request, tmp_path_factory):
    """A tiny masked-LM model of each other family, loaded through the library's loader."""
    return load_model(str(save_tiny(request.param, tmp_path_factory.mktemp(f"ablation-{request.param}"))))


def test_batched_path_equals_a_plain_forward_with_the_hook(tiny):
    check_batched_path_equals_a_plain_forward_with_the_hook(tiny)


def test_every_head_of_a_layer_ablated_is_a_zero_attention_output(tiny):
    check_every_head_of_a_layer_ablated_is_a_zero_attention_output(tiny)


def test_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values(tiny):
    check_knockouts_equal_contexts_rebuilt_from_the_models_weights_and_values(tiny)


def test_mlm_measure_is_the_change_of_the_models_own_loss(tiny):
    check_mlm_measure_is_the_change_of_the_models_own_loss(tiny)
