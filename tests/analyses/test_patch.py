"""Activation and attribution patching (METHODS §22) against plain forward passes of the model whose head's context
vector (the input slice of the attention output projection) is replaced by hand in a forward pre-hook; the residual
grid against a pre-hook replacing hidden_states[l] at one position; attribution against autograd on the same hook;
pair files locally and on Ray; the trained decoder's circuit on the shipped pair set; bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import attnlib
from attnlib.analyses.patch import PatchResult, read_pairs
from attnlib.core.corpus import CorpusError
from attnlib.core.model import TRAINED_MODEL, load_model
from attnlib.results.shipped import ROOT
from support.cli import run_cli
from support.models import save_tiny
from support.tolerances import FORWARD_RTOL

CLEAN, CORRUPTED = "the cat sat on the mat", "the mat sat on the cat"
MASKED_CLEAN, MASKED_CORRUPTED = "the cat sat on the [MASK]", "the mat sat on the [MASK]"
INDUCTION_PAIRS = ROOT / "data" / "pairs" / "induction_pairs.tsv"
# log-probabilities of about -10 from float32 forward passes agree to FORWARD_RTOL of that; scores are compared as
# metric differences (score * (m_c - m_r)), since a tiny random model's m_c - m_r can be 1e-5
METRIC_ATOL = FORWARD_RTOL * 10

# (where the output projections are, by module path of the whole model, per part; the model's own logits)
OUTPUTS = {
    "gpt2": {"encoder": "transformer.h.{l}.attn.c_proj"},
    "llama": {"encoder": "model.layers.{l}.self_attn.o_proj"},
    "gpt-neox": {"encoder": "gpt_neox.layers.{l}.attention.dense"},
    "bert": {"encoder": "bert.encoder.layer.{l}.attention.output.dense"},
    "t5": {
        "encoder": "encoder.block.{l}.layer.0.SelfAttention.o",
        "decoder": "decoder.block.{l}.layer.0.SelfAttention.o",
        "cross": "decoder.block.{l}.layer.1.EncDecAttention.o",
    },
}
LAYERS = {"gpt2": "transformer.h.{l}", "llama": "model.layers.{l}", "bert": "bert.encoder.layer.{l}"}
PART_KEY = {"encoder": "heads", "decoder": "decoder_heads", "cross": "cross_heads"}


@pytest.fixture(scope="module", params=list(OUTPUTS))
def kind_model(request, tmp_path_factory):
    kind = request.param
    return kind, load_model(str(save_tiny(kind, tmp_path_factory.mktemp(f"patch-{kind}"))))


def whole(lm):
    return lm.seq2seq or lm.causal_lm or lm.mlm


def inputs_of(lm, text):
    batch = lm.tokenizer(text, return_tensors="pt")
    batch.pop("token_type_ids", None)
    if lm.seq2seq is not None:
        batch["decoder_input_ids"] = torch.tensor([[lm.seq2seq.config.decoder_start_token_id]])
    return dict(batch)


def metric(lm, text, t, answer, hooks=()):
    """log p(answer) at t of the model's own forward pass with the given pre-hooks (module, hook)."""
    handles = [m.register_forward_pre_hook(h) for m, h in hooks]
    try:
        with torch.no_grad():
            logits = whole(lm)(**inputs_of(lm, text)).logits[0, t].double()
    finally:
        for handle in handles:
            handle.remove()
    return float(torch.log_softmax(logits, -1)[answer])


def contexts(lm, text, paths):
    """Each module's input (the concatenated context vectors) in the model's forward pass of the text."""
    seen = {}
    hooks = [(whole(lm).get_submodule(p), lambda m, a, p=p: seen.__setitem__(p, a[0].detach().clone())) for p in paths]
    handles = [m.register_forward_pre_hook(h) for m, h in hooks]
    with torch.no_grad():
        whole(lm)(**inputs_of(lm, text))
    for handle in handles:
        handle.remove()
    return seen


def texts(kind):
    return (MASKED_CLEAN, MASKED_CORRUPTED) if kind == "bert" else (CLEAN, CORRUPTED)


def test_each_head_patched_is_the_forward_pass_with_its_context_vector_replaced(kind_model, one_thread):
    kind, lm = kind_model
    clean, corrupted = texts(kind)
    run = attnlib.patch(lm, clean=clean, corrupted=corrupted, metric="logprob", grid="heads-positions")
    data = run.to_json()
    t, w = data["position"], data["answer"]["id"]
    m_c, m_r = metric(lm, clean, t, w), metric(lm, corrupted, t, w)
    assert data["clean_metric"] == pytest.approx(m_c, abs=1e-4) and data["corrupted_metric"] == pytest.approx(
        m_r, abs=1e-4
    )
    d = lm.facts.hidden_size // lm.facts.n_heads if kind != "t5" else lm.seq2seq.config.d_kv
    for part, pattern in OUTPUTS[kind].items():
        heads = np.array(data[PART_KEY[part]])
        grid = np.array(data[PART_KEY[part].replace("heads", "heads_positions")])
        paths = [pattern.format(l=l) for l in range(heads.shape[0])]
        source = contexts(lm, clean, paths)
        last = grid.shape[2] - 1  # a position of the part's queries (the decoder's start token alone: 0)
        for l, h, q in [(0, 1, None), (heads.shape[0] - 1, heads.shape[1] - 1, None), (1, 0, min(1, last))]:
            path = paths[l]

            def replace(module, args, q=q, h=h, path=path, source=source):
                c = args[0].clone()
                rows = slice(None) if q is None else slice(q, q + 1)
                c[:, rows, h * d : (h + 1) * d] = source[path][:, rows, h * d : (h + 1) * d]
                return (c, *args[1:])

            m = metric(lm, corrupted, t, w, [(whole(lm).get_submodule(path), replace)])
            got = heads[l, h] if q is None else grid[l, h, q]
            assert got * (m_c - m_r) == pytest.approx(m - m_r, abs=METRIC_ATOL), (part, l, h, q)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "bert"])
def test_the_residual_grid_replaces_one_layers_input_at_one_position(kind, tmp_path, one_thread):
    lm = load_model(str(save_tiny(kind, tmp_path)))
    clean, corrupted = texts(kind)
    data = attnlib.patch(lm, clean=clean, corrupted=corrupted, metric="logprob", grid="residual",
                         direction="noise").to_json()  # fmt: skip
    t, w = data["position"], data["answer"]["id"]
    m_c, m_r = metric(lm, clean, t, w), metric(lm, corrupted, t, w)
    residual = np.array(data["residual"])
    layers = [whole(lm).get_submodule(LAYERS[kind].format(l=l)) for l in range(residual.shape[0])]
    for l, q in [(0, 1), (1, t), (1, 0)]:
        seen = {}

        def keep(module, args, kwargs, seen=seen):
            seen["x"] = (args[0] if args else kwargs["hidden_states"]).clone()

        handle = layers[l].register_forward_pre_hook(keep, with_kwargs=True)
        metric(lm, corrupted, t, w)
        handle.remove()

        def replace(module, args, kwargs, q=q, seen=seen):
            x = (args[0] if args else kwargs["hidden_states"]).clone()
            x[:, q] = seen["x"][:, q]
            return ((x, *args[1:]), kwargs) if args else (args, {**kwargs, "hidden_states": x})

        handle = layers[l].register_forward_pre_hook(replace, with_kwargs=True)
        m = metric(lm, clean, t, w)
        handle.remove()
        assert residual[l, q] * (m_c - m_r) == pytest.approx(m_c - m, abs=METRIC_ATOL), (l, q)


@pytest.mark.parametrize("kind", ["gpt2", "llama", "t5"])
def test_attribution_is_autograd_of_the_metric_along_each_heads_change(kind, tmp_path, one_thread):
    lm = load_model(str(save_tiny(kind, tmp_path)))
    data = attnlib.patch(lm, clean=CLEAN, corrupted=CORRUPTED, metric="logprob", attribution=True).to_json()
    t, w = data["position"], data["answer"]["id"]
    m_c, m_r = metric(lm, CLEAN, t, w), metric(lm, CORRUPTED, t, w)
    for part, pattern in OUTPUTS[kind].items():
        table = np.array(data[PART_KEY[part].replace("heads", "attribution")])
        L, H = table.shape
        d = lm.facts.hidden_size // lm.facts.n_heads if kind != "t5" else lm.seq2seq.config.d_kv
        paths = [pattern.format(l=l) for l in range(L)]
        clean, corrupted = contexts(lm, CLEAN, paths), contexts(lm, CORRUPTED, paths)
        alpha = torch.zeros(L, H, dtype=torch.float64, requires_grad=True)
        hooks = []
        for l, path in enumerate(paths):
            change = (clean[path] - corrupted[path]).view(*clean[path].shape[:2], H, d)

            def along(module, args, l=l, change=change, H=H, d=d, alpha=alpha):
                c = args[0]
                moved = c.view(*c.shape[:2], H, d) + alpha[l][None, None, :, None].float() * change
                return (moved.view(c.shape), *args[1:])

            hooks.append(whole(lm).get_submodule(path).register_forward_pre_hook(along))
        with torch.enable_grad():
            logits = whole(lm)(**inputs_of(lm, CORRUPTED)).logits[0, t].double()
            (grad,) = torch.autograd.grad(torch.log_softmax(logits, -1)[w], alpha)
        for hook in hooks:
            hook.remove()
        np.testing.assert_allclose(table * (m_c - m_r), grad.numpy(), atol=METRIC_ATOL)
    exact = np.concatenate([np.ravel(data[k]) for k in PART_KEY.values() if k in data])
    estimate = np.concatenate(
        [np.ravel(data[k.replace("heads", "attribution")]) for k in PART_KEY.values() if k in data]
    )
    assert data["attribution_r"] == pytest.approx(np.corrcoef(exact, estimate)[0, 1], abs=1e-9)


def test_logit_difference_with_given_answers(tmp_path, one_thread):
    lm = load_model(str(save_tiny("gpt2", tmp_path)))
    w, w2 = (lm.tokenizer(x, add_special_tokens=False)["input_ids"][0] for x in (" cat", " the"))
    data = attnlib.patch(lm, clean=CLEAN, corrupted=CORRUPTED, answer=" cat", wrong=" the", position=3,
                         direction="noise").to_json()  # fmt: skip
    assert data["answer"]["id"] == w and data["wrong"]["id"] == w2 and data["position"] == 3

    def diff(text):
        with torch.no_grad():
            z = lm.causal_lm(**inputs_of(lm, text)).logits[0, 3].double()
        return float(z[w] - z[w2])

    assert data["clean_metric"] == pytest.approx(diff(CLEAN), abs=1e-4)
    assert data["corrupted_metric"] == pytest.approx(diff(CORRUPTED), abs=1e-4)


def test_pairs_give_each_heads_mean_and_standard_error(tmp_path, one_thread):
    lm = load_model(str(save_tiny("gpt2", tmp_path / "model")))
    lines = [(CLEAN, CORRUPTED), ("the dog sat on the cat", "the cat sat on the dog"), (CORRUPTED, CLEAN)]
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("\n".join("\t".join(p) for p in lines) + "\n\n")
    run = attnlib.patch(lm, pairs=str(pairs), metric="logprob")
    one = [np.array(attnlib.patch(lm, clean=a, corrupted=b, metric="logprob").to_json()["heads"]) for a, b in lines]
    data = run.to_json()
    assert data["pairs"] == 3
    np.testing.assert_allclose(data["heads"], np.mean(one, 0), atol=1e-12)
    np.testing.assert_allclose(data["heads_se"], np.std(one, 0, ddof=1) / np.sqrt(3), atol=1e-9)
    printed = {k: v for k, v in data.items() if k != "model"}
    assert PatchResult.from_json(printed).to_json() == printed  # a pair file's result read back from its JSON


@pytest.mark.slow
def test_pairs_on_ray_are_the_local_run(local_ray, tmp_path):
    folder = save_tiny("gpt2", tmp_path / "model")
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text(f"{CLEAN}\t{CORRUPTED}\n{CORRUPTED}\t{CLEAN}\nthe dog sat on the cat\t{CLEAN}\n")
    local = attnlib.patch(str(folder), pairs=str(pairs), metric="logprob").to_json()
    ray = attnlib.patch(str(folder), pairs=str(pairs), metric="logprob", engine="ray", workers=2).to_json()
    np.testing.assert_allclose(ray["heads"], local["heads"], atol=1e-9)
    np.testing.assert_allclose(ray["heads_se"], local["heads_se"], atol=1e-9)


def error_line(*argv) -> str:
    ran = run_cli(*argv)
    assert ran.code == 2 and ran.err.startswith("error: ") and ran.err.count("\n") == 1, ran.err
    return ran.err


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return str(save_tiny("gpt2", tmp_path_factory.mktemp("patch-bad")))


def test_bad_input_is_one_line_naming_what_is_wrong(gpt2_dir, tmp_path):
    model = ["--model", gpt2_dir, "--json"]
    assert "as many tokens" in error_line("patch", "--clean", CLEAN, "--corrupted", "the cat sat", *model)
    assert "not one" in error_line("patch", "--clean", CLEAN, "--corrupted", CORRUPTED, "--answer", " cat sat", *model)
    assert "does not differ" in error_line("patch", "--clean", CLEAN, "--corrupted", CLEAN, *model)
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n\n")
    assert "no pair" in error_line("patch", "--pairs", str(empty), *model)
    bad = tmp_path / "bad.tsv"
    bad.write_text(f"{CLEAN}\t{CORRUPTED}\njust one text\n")
    assert "line 2" in error_line("patch", "--pairs", str(bad), *model)
    same = tmp_path / "same.tsv"
    same.write_text(f"{CLEAN}\t{CORRUPTED}\n{CLEAN}\t{CLEAN}\n")
    said = error_line("patch", "--pairs", str(same), "--metric", "logprob", *model)
    assert "line 2" in said and "does not differ" in said
    assert "--clean and --corrupted" in error_line("patch", *model)
    with pytest.raises(CorpusError, match="patch reads what its options name, not text="):
        attnlib.patch("no/such/model", text=CLEAN)


def test_a_model_without_an_lm_head_is_refused_in_words(tmp_path):
    folder = save_tiny("llama-classifier", tmp_path)
    said = error_line("patch", "--clean", CLEAN, "--corrupted", CORRUPTED, "--model", str(folder), "--json")
    assert "no trained language-model head" in said


def test_a_pair_file_keeps_the_answers_leading_space(tmp_path):
    path = tmp_path / "pairs.tsv"
    path.write_text("a b\tc d\t x\n")
    (pair,) = read_pairs(path)
    assert (pair.text_a, pair.text_b, pair.answer, pair.wrong, pair.line) == ("a b", "c d", " x", "", 1)


@pytest.mark.slow
def test_the_trained_decoders_circuit_on_the_shipped_pairs():
    """The two heads with the largest mean noising score are the role map's previous-token and induction heads."""
    lm = load_model(f"{TRAINED_MODEL}@step1150")
    scores = np.array(attnlib.patch(lm, pairs=str(INDUCTION_PAIRS), direction="noise").to_json()["heads"])
    roles = attnlib.roles(lm).to_json()["roles"]
    top = sorted(np.argsort(scores.ravel())[-2:].tolist())
    top_heads = {divmod(i, scores.shape[1]) for i in top}
    previous = {tuple(h) for h in roles["previous"]}
    induction = {tuple(h) for h in roles["induction"]}
    assert len(top_heads & previous) == 1 and len(top_heads & induction) == 1, (top_heads, roles)
