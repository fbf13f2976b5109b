"""The decoder trained in the repository (scripts/train_decoder.py): its shipped checkpoints load offline by name and
by step, fit the size limit, and show induction heads forming (METHODS §20's default probe); a Hub id@revision passes
its revision to from_pretrained."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlib.core.model as model_module
from attnlib.analyses.roles import RolesOptions, compute_roles, head_scores, make_probe
from attnlib.core.model import (
    DEFAULT_MODEL,
    TRAINED_MODEL,
    ModelLoadError,
    check_allowed,
    checkpoints_of,
    load_model,
    shipped_models,
)
from attnlib.results.shipped import MODELS

SHIPPED_MB = 25  # issue 48: the checkpoints, tokenizers included, take at most this much
FOLDER = MODELS / TRAINED_MODEL


def _steps() -> list[int]:
    """The shipped steps, read from the folder names themselves."""
    return sorted(int(p.name.removeprefix("step")) for p in FOLDER.glob("step*") if (p / "config.json").is_file())


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")


def test_checkpoints_are_listed_in_step_order_and_fit_the_size_limit():
    steps = _steps()
    assert TRAINED_MODEL in shipped_models() and len(steps) >= 8 and steps[0] == 0
    assert checkpoints_of(TRAINED_MODEL) == [f"{TRAINED_MODEL}@step{s}" for s in steps]
    total = sum(p.stat().st_size for p in FOLDER.rglob("*") if p.is_file())
    assert total <= SHIPPED_MB * 2**20, f"{total / 2**20:.1f} MB shipped"
    for step in steps:  # each folder loads by itself with transformers' Auto classes
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {
            p.name for p in (FOLDER / f"step{step}").iterdir()
        }


def test_the_name_loads_the_last_checkpoint_offline_as_a_decoder_with_its_lm_head():
    from safetensors.torch import load_file

    lm = load_model(TRAINED_MODEL, allow_local=False)  # part of the tool: loads where local folders are switched off
    assert lm.facts.kind == "decoder" and lm.causal_lm is not None and lm.facts.max_length >= 101
    saved = load_file(FOLDER / f"step{_steps()[-1]}" / "model.safetensors")
    for name, tensor in lm.causal_lm.state_dict().items():
        if name in saved:
            assert torch.equal(tensor, saved[name].float()), name


def test_a_step_loads_that_checkpoint_and_an_unknown_step_is_refused_naming_the_steps():
    from safetensors.torch import load_file

    steps = _steps()
    middle = steps[len(steps) // 2]
    lm = load_model(f"{TRAINED_MODEL}@step{middle}")
    saved = load_file(FOLDER / f"step{middle}" / "model.safetensors")
    embed = next(k for k in saved if k.endswith("embed_tokens.weight"))
    assert torch.equal(lm.encoder.get_input_embeddings().weight, saved[embed].float())
    with pytest.raises(ModelLoadError, match=", ".join(f"step{s}" for s in steps)):
        load_model(f"{TRAINED_MODEL}@step{steps[-1] + 1}")


def test_the_shipped_model_is_always_allowed_like_the_bundled_default():
    for name in (TRAINED_MODEL, f"{TRAINED_MODEL}@step0", DEFAULT_MODEL):
        check_allowed(name, ("roberta-base",))
    check_allowed("EleutherAI/pythia-70m@step1000", ("EleutherAI/pythia-70m",))  # a revision of an allowed id
    with pytest.raises(ModelLoadError, match=TRAINED_MODEL):  # and named among the allowed ones
        check_allowed("bert-base-uncased", ("roberta-base",))


def _probe(name: str) -> tuple[np.ndarray, float]:
    lm = load_model(name)
    scores, gain, _ = head_scores(lm, make_probe(lm, RolesOptions()))
    assert gain is not None
    return scores.induction, gain


def test_induction_heads_form_between_the_first_and_the_last_shipped_checkpoint():
    """Issue 48's acceptance on the default probe (s = 50, two repeats, 10 sequences, seed 0)."""
    steps = _steps()
    first, gain_first = _probe(f"{TRAINED_MODEL}@step{steps[0]}")
    last, gain_last = _probe(f"{TRAINED_MODEL}@step{steps[-1]}")
    assert first.max() <= 0.1 and gain_first < 0.2, (first.max(), gain_first)
    assert last.max() >= 0.4 and gain_last >= 1.0, (last.max(), gain_last)


@pytest.mark.parametrize(
    "probe",
    [
        RolesOptions(),  # the default probe, which also decided when training stopped
        RolesOptions(seed=100),  # another draw of the random tokens
        RolesOptions(seed=7, repeat_length=30),  # another seed and a shorter repeat
        RolesOptions(repeats=3, repeat_length=40),  # three repeats
    ],
    ids=["seed0", "seed100", "seed7-s30", "r3-s40"],
)
def test_the_induction_heads_carry_the_gain_on_probes_it_was_not_stopped_on(probe):
    """The last checkpoint's induction heads on probes other than the one that stopped training: an induction score of
    at least 0.4 and an in-context gain of at least 1 nat; the causal check (§20) ablating its k = 3 induction heads
    takes G to at most 0.2 nat while as many random heads leave at least 1 nat; the heads are the same on every
    probe."""
    lm = load_model(TRAINED_MODEL)
    found = compute_roles(lm, None, probe)
    assert found.scores.induction.max() >= 0.4 and found.in_context_gain is not None and found.in_context_gain >= 1.0
    assert found.causal is not None
    check = found.causal["induction"]
    assert check.gain_ablated <= 0.2 and check.control_gain >= 1.0, (check.gain_ablated, check.control_gain)
    default = compute_roles(lm, None, RolesOptions(sequences=2)).causal
    assert default is not None and sorted(check.heads) == sorted(default["induction"].heads)


def test_a_hub_revision_reaches_from_pretrained(monkeypatch):
    """EleutherAI/pythia-70m@step1000 asks the config, the weights and the tokenizer at revision step1000 (offline
    here: each from_pretrained is recorded, then served from the shipped folder)."""
    import transformers

    local = str(FOLDER / f"step{_steps()[-1]}")
    asked: list[tuple[str, str, str | None]] = []

    def recording(cls, original):
        def from_pretrained(source, *args, **kwargs):
            asked.append((cls, source, kwargs.pop("revision", None)))
            kwargs["local_files_only"] = True
            return original(local, *args, **kwargs)

        return from_pretrained

    for cls in ("AutoConfig", "AutoModelForCausalLM", "AutoTokenizer"):
        auto = getattr(transformers, cls)
        monkeypatch.setattr(auto, "from_pretrained", recording(cls, auto.from_pretrained))
    monkeypatch.setattr(model_module, "_is_cached", lambda repo_id, revision=None: revision == "step1000")
    monkeypatch.setattr(model_module, "_hub_reachable", lambda timeout=3.0: False)
    lm = load_model("EleutherAI/pythia-70m@step1000")
    assert lm.facts.kind == "decoder"
    asked_hub = {(cls, source, revision) for cls, source, revision in asked if source != local}  # not nested calls
    assert asked_hub == {
        (cls, "EleutherAI/pythia-70m", "step1000") for cls in ("AutoConfig", "AutoModelForCausalLM", "AutoTokenizer")
    }


def test_a_folder_of_step_folders_lists_its_checkpoints_in_step_order(tmp_path):
    for step in (10, 2, 100):
        (tmp_path / f"step{step}").mkdir()
        (tmp_path / f"step{step}" / "config.json").write_text("{}")
    (tmp_path / "step7").mkdir()  # no config.json: not a checkpoint
    assert checkpoints_of(str(tmp_path)) == [str(tmp_path / f"step{s}") for s in (2, 10, 100)]
    with pytest.raises(ModelLoadError, match="no checkpoints to list"):
        checkpoints_of(str(tmp_path / "step2"))
    with pytest.raises(ModelLoadError, match="id@revision"):
        load_model("EleutherAI/pythia-70m@")
