"""The `roles` analysis (METHODS §20) on tiny models of an encoder (BERT), GPT-2 (LayerNorm), Llama (RMSNorm,
grouped-query), Gemma (1 + w norms) and T5's encoder, each score against an independent computation: the probe's
scores from the model's own `output_attentions` through loops over the definition; G from the causal-LM model's own
logits; the causal check from plain forward passes with the heads' context vectors zeroed by a pre-hook on the output
projection written here (by module path); the copying score from the model's own weights, read here by module path,
against the eigenvalues of the full vocabulary x vocabulary matrix."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

import attnlib
from attnlib.analyses.roles import (
    ROLES,
    HeadScores,
    ProbeRecord,
    RolesOptions,
    RolesResult,
    checkpoint_step,
    compute_roles,
    make_probe,
    probe_bos,
    probe_text,
)
from attnlib.core.model import load_model
from attnlib.core.runner import encode, with_bos
from attnlib.present.tour import live_head_link
from attnlib.results.files import ResultFileError
from support.models import (
    DECODER_KINDS,
    FOUND_ENCODER_DECODER_KINDS,
    FOUND_LAYOUT_KINDS,
    move_off_initial,
    save_tiny,
    tiny_decoder_config,
    tiny_model,
    tokenizer_for,
)
from support.roles import copying_from_paths, looped_previous_score, looped_repeat_score

pytestmark = pytest.mark.usefixtures("one_thread")
OPTIONS = RolesOptions(sequences=2, repeat_length=6, repeats=3, top_k=2)
KINDS = ("bert", "gpt2", "llama", "t5")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """kind -> a tiny model of that kind loaded through the library's loader (once per module)."""
    cache: dict = {}

    def get(kind: str):
        if kind not in cache:
            cache[kind] = load_model(str(save_tiny(kind, tmp_path_factory.mktemp(f"roles-{kind}"))))
        return cache[kind]

    return get


@pytest.fixture(scope="module")
def results(models):
    """kind -> (model, compute_roles with OPTIONS and one input for detection)."""
    cache: dict = {}

    def get(kind: str):
        if kind not in cache:
            lm = models(kind)
            cache[kind] = lm, compute_roles(lm, [attnlib.CorpusInput("the cat sat on the mat . the cat sat")], OPTIONS)
        return cache[kind]

    return get


def own_attentions(lm, ids: np.ndarray) -> np.ndarray:
    """The model's own output_attentions (T5: its encoder stack's) [inputs, layers, heads, n, n] in float64."""
    batch = torch.as_tensor(ids)
    with torch.no_grad():
        out = lm.encoder(input_ids=batch, attention_mask=torch.ones_like(batch), output_attentions=True)
    return torch.stack(out.attentions, dim=1).double().numpy()


@pytest.mark.parametrize("kind", KINDS)
def test_probe_scores_are_the_definitions_on_the_models_own_attention(kind, results):
    lm, found = results(kind)
    probe = make_probe(lm, OPTIONS)
    assert found.probe.tokens == probe.ids.tolist() and found.probe.repeats == 3
    assert found.probe.bos == {"bert": lm.tokenizer.cls_token_id, "llama": lm.tokenizer.bos_token_id}.get(kind)
    s, b = found.probe.repeat_length, found.probe.b
    assert s == 6 and len(probe.ids[0]) == b + 3 * s
    maps = own_attentions(lm, probe.ids)
    # float32 maps (the model's own eager pass both times) summed in float64: a few float32 ulp of each weight
    tolerance = 1e-6
    np.testing.assert_allclose(found.scores.induction, looped_repeat_score(maps, b, s, 3, 1), atol=tolerance)
    np.testing.assert_allclose(found.scores.duplicate, looped_repeat_score(maps, b, s, 3, 0), atol=tolerance)
    np.testing.assert_allclose(found.scores.previous, looped_previous_score(maps, b), atol=tolerance)
    first = maps[:, :, :, 1:, 0].mean(axis=(0, -1))  # §18: rows i >= 1, key 0
    np.testing.assert_allclose(found.scores.first_share, first, atol=tolerance)


def test_the_probe_excludes_special_tokens_and_starts_as_the_tokenizer_does(models):
    for kind in ("bert", "gpt2", "t5"):
        lm = models(kind)
        probe = make_probe(lm, OPTIONS)
        special = set(lm.tokenizer.all_special_ids)
        assert not special & set(probe.ids[:, probe.b :].ravel().tolist())
        first = lm.tokenizer("a")["input_ids"][0]
        assert (probe_bos(lm) == first) == (first in special)


def own_losses(lm, ids: np.ndarray, hook=None) -> np.ndarray:
    """-log p(x_{i+1} | x_<=i) from the causal-LM model's own logits, in float64 ([inputs, n - 1])."""
    batch = torch.as_tensor(ids)
    with torch.no_grad():
        logits = lm.causal_lm(input_ids=batch, use_cache=False).logits.double()
    logp = torch.log_softmax(logits[:, :-1], dim=-1)
    return -logp.gather(-1, batch[:, 1:, None])[..., 0].numpy()


def gain_of(losses: np.ndarray, b: int, s: int) -> float:
    """L_1 - L_2 at the positions p(k, m), m = 1..s-1, written out."""
    first = [b + m - 1 for m in range(1, s)]
    second = [b + s + m - 1 for m in range(1, s)]
    return float(losses[:, first].mean() - losses[:, second].mean())


OUTPUT_PROJECTION = {"gpt2": "transformer.h.{}.attn.c_proj", "llama": "model.layers.{}.self_attn.o_proj"}


def zeroed_gain(lm, kind: str, ids: np.ndarray, heads, b: int, s: int) -> float:
    """G with these heads' context vectors (the output projection's input) set to 0 by pre-hooks written here."""
    d = lm.facts.head_dim
    handles = []
    for layer in {l for l, _ in heads}:
        chosen = [h for l, h in heads if l == layer]

        def hook(_module, args, chosen=chosen):
            c = args[0].clone()
            for h in chosen:
                c[..., h * d : (h + 1) * d] = 0
            return (c, *args[1:])

        module = lm.causal_lm.get_submodule(OUTPUT_PROJECTION[kind].format(layer))
        handles.append(module.register_forward_pre_hook(hook))
    try:
        return gain_of(own_losses(lm, ids), b, s)
    finally:
        for handle in handles:
            handle.remove()


@pytest.mark.parametrize("kind", ["gpt2", "llama"])
def test_gain_and_causal_check_against_plain_forward_passes(kind, results):
    lm, found = results(kind)
    ids, b, s = np.array(found.probe.tokens), found.probe.b, found.probe.repeat_length
    # float32 logits: the loss's float32 log-softmax against float64's, ~1e-6 of log(600)
    assert found.in_context_gain == pytest.approx(gain_of(own_losses(lm, ids), b, s), abs=1e-5)
    assert found.causal is not None and set(found.causal) == {"previous", "duplicate", "induction", "copying"}
    for role, check in found.causal.items():
        values = found.scores.of(role)
        assert len(check.heads) == 2 and min(values[h] for h in check.heads) >= max(
            values[l, h] for l in range(2) for h in range(4) if (l, h) not in check.heads
        )
        assert check.gain_ablated == pytest.approx(zeroed_gain(lm, kind, ids, check.heads, b, s), abs=1e-5)
        controls = [zeroed_gain(lm, kind, ids, heads, b, s) for heads in check.control_heads]
        assert len(controls) == 5 and check.control_gain == pytest.approx(np.mean(controls), abs=1e-5)


def copying_from_module_paths(lm, kind: str, full: set) -> np.ndarray:
    """§20's score of each head from the weights read here by module path: for the heads in `full` the eigenvalues
    of the V x V matrix W_E W_V^h W_O^h W_U, for the others those of W_O^h W_U W_E W_V^h (the same non-zero ones)."""
    model, H, d = lm.causal_lm, lm.facts.n_heads, lm.facts.head_dim
    L = lm.facts.n_layers
    if kind == "gpt2":
        embed = model.transformer.wte.weight.double()
        unembed = model.lm_head.weight.double().T * model.transformer.ln_f.weight.double()[:, None]
        embed = embed - embed.mean(1, keepdim=True)
        unembed = unembed - unembed.mean(1, keepdim=True)
    else:
        plus = 1.0 if kind == "gemma" else 0.0  # Gemma's RMSNorm multiplies by 1 + weight
        embed = model.model.embed_tokens.weight.double()
        unembed = model.lm_head.weight.double().T * (plus + model.model.norm.weight.double())[:, None]
    scores = np.zeros((L, H))
    for l in range(L):
        for h in range(H):
            if kind == "gpt2":
                block = model.transformer.h[l]
                hidden = embed.shape[1]
                w_v = block.attn.c_attn.weight.double()[:, 2 * hidden + h * d : 2 * hidden + (h + 1) * d]
                w_v = block.ln_1.weight.double()[:, None] * w_v
                w_o = block.attn.c_proj.weight.double()[h * d : (h + 1) * d]
                w_o = w_o - w_o.mean(1, keepdim=True)
            else:
                block = model.model.layers[l]
                group = h // (H // (block.self_attn.v_proj.weight.shape[0] // d))  # its key-value head
                w_v = block.self_attn.v_proj.weight.double()[group * d : (group + 1) * d].T
                w_v = (plus + block.input_layernorm.weight.double())[:, None] * w_v
                w_o = block.self_attn.o_proj.weight.double()[:, h * d : (h + 1) * d].T
            product = embed @ w_v @ w_o @ unembed if (l, h) in full else w_o @ unembed @ embed @ w_v
            eigenvalues = torch.linalg.eigvals(product.detach()).numpy()  # on torch's one thread (numpy's BLAS
            # threads take seconds on a 600 x 600 matrix on a loaded machine)
            scores[l, h] = eigenvalues.real.sum() / np.abs(eigenvalues).sum()
    return scores


@pytest.mark.parametrize("kind", ["gpt2", "llama", "gemma"])
def test_copying_score_is_the_full_vocabulary_matrixs(kind, models, results):
    lm = models(kind)
    found = results(kind)[1] if kind != "gemma" else compute_roles(lm, None, OPTIONS)
    assert found.scores.copying is not None and "copying" not in found.notes
    full = {(1, 2)}  # a 600 x 600 eigenproblem takes a second or two: one head; the others through the d_h x d_h one
    # attnlib forms W_U W_E and W_O^h (W_U W_E) in float32: sums of V = 600 and d = 32 products, each off by about
    # sqrt(terms) eps32 of its size; the float64 eigenvalues here are exact to ~1e-13
    vocabulary = lm.causal_lm.get_output_embeddings().weight.shape[0]
    atol = (np.sqrt(vocabulary) + np.sqrt(lm.facts.hidden_size)) * np.finfo(np.float32).eps
    np.testing.assert_allclose(found.scores.copying, copying_from_module_paths(lm, kind, full), atol=atol)


COPYING_KINDS = [k for k in (*DECODER_KINDS, *FOUND_LAYOUT_KINDS) if k not in FOUND_ENCODER_DECODER_KINDS]


def saved_decoder(kind: str, folder):
    """A tiny decoder of this kind, its norms' weights and biases moved off their initial values (so a gamma left out
    shows); "opt-projected": OPT whose embeddings (16 wide) are projected into its width (32) and back out
    (project_in, project_out, as facebook/opt-350m)."""
    if kind == "opt-projected":
        import transformers as tf

        tokenizer = tokenizer_for("opt")
        config = tiny_decoder_config("opt", tokenizer)
        config.word_embed_proj_dim = 16
        torch.manual_seed(0)
        model = tf.OPTForCausalLM(config)
        tokenizer.save_pretrained(folder)
    else:
        model = tiny_model(kind, tokenizer_for(kind))
        tokenizer_for(kind).save_pretrained(folder)
    move_off_initial(model).save_pretrained(folder)
    return load_model(str(folder))


@pytest.mark.parametrize("kind", [*COPYING_KINDS, "opt-projected"])
def test_every_decoder_familys_copying_score_is_its_weights(kind, tmp_path):
    """Every decoder family, listed and found: the copying score is that of the weights read by module path
    (tests/support/roles.py, written per family), Gemma 2 and 3's post-attention norm left out as TransformerLens
    leaves it (METHODS §20); a classifier has no unembedding and says so."""
    lm = saved_decoder(kind, tmp_path)
    found = ROLES.compute_model(lm, None, RolesOptions(sequences=1, repeat_length=4))  # type: ignore[misc]
    if kind == "llama-classifier":  # a classifier: no language-model head, so no unembedding and no G
        assert found.scores.copying is None and "no trained one" in found.notes["copying"]
        assert found.in_context_gain is None and found.causal is None
        return
    if kind == "opt-projected":
        assert lm.encoder.decoder.project_in is not None and lm.encoder.decoder.project_out is not None
    assert found.scores.copying is not None and found.in_context_gain is not None
    family = "opt" if kind == "opt-projected" else kind
    expected = copying_from_paths(lm.causal_lm, family, lm.facts.n_heads, lm.facts.head_dim)
    # attnlib forms W_U W_E and W_O^h (W_U W_E) in float32 (sums of V and d products, each off by about
    # sqrt(terms) eps32 of its size); the float64 eigenvalues here are exact to ~1e-13
    vocabulary = lm.causal_lm.get_output_embeddings().weight.shape[0]
    atol = (np.sqrt(vocabulary) + np.sqrt(lm.facts.hidden_size)) * np.finfo(np.float32).eps
    np.testing.assert_allclose(found.scores.copying, expected, atol=atol)
    assert np.ptp(expected) > 100 * atol  # heads differ: a score read from the wrong weights would show


@pytest.mark.parametrize("kind", ["bert", "t5"])
def test_encoders_have_no_copying_score_no_gain_and_say_why(kind, results):
    _, found = results(kind)
    assert found.scores.copying is None and found.in_context_gain is None and found.causal is None
    assert "no linear unembedding after its last norm" in found.notes["copying"]
    assert "does not predict the next token" in found.notes["in_context_gain"]
    printed = json.loads(json.dumps(found.to_json(), allow_nan=False))
    assert printed["scores"]["copying"] is None and printed["roles"]["copying"] == []


def transformerlens_score(pattern: np.ndarray, ids: list[int], name: str, measure: str, exclude_bos: bool) -> float:
    """TransformerLens's detect_head for one head, written out here (head_detector.py): its detection pattern of the
    tokens, then the "mul" share or the "abs" score rounded to 3 decimals."""
    n = len(ids)
    tokens = np.array(ids)
    duplicate = np.tril((tokens[None, :] == tokens[:, None]).astype(float), -1)
    wanted = {
        "previous": np.eye(n, k=-1),
        "duplicate": duplicate,
        "induction": np.tril(np.concatenate([np.zeros((n, 1)), duplicate[:, :-1]], axis=1)),
    }[name]
    attention = pattern.astype(np.float64).copy()
    if measure == "mul":
        if exclude_bos:
            attention[:, 0] = 0
        return float((attention * wanted).sum() / attention.sum())
    difference = np.abs(attention - wanted)
    if exclude_bos:
        difference[:, 0] = 0
    return 1 - round(float(difference.mean() * n), 3)


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("prepend_bos", [True, False])
def test_detection_is_transformerlens_on_the_models_own_maps(kind, prepend_bos, models):
    """TransformerLens tokenizes with the BOS in front (prepend_bos, its default): the maps of those ids through the
    model's own forward pass, scored by its formula written out above, are detection's scores; without the option,
    the tokenizer's own ids."""
    lm = models(kind)
    texts = ["the cat sat on the mat . the cat sat", "a dog ran . a dog ran"]
    options = RolesOptions(sequences=1, repeat_length=4, exclude_first=True, prepend_bos=prepend_bos)
    found = compute_roles(lm, [attnlib.CorpusInput(t) for t in texts], options)
    assert found.detect is not None and set(found.detect) == {"mul", "abs"}
    assert found.to_json()["prepend_bos"] is prepend_bos
    bos = lm.tokenizer.bos_token_id
    for measure in ("mul", "abs"):
        for name in ("previous", "duplicate", "induction"):
            per_input = []
            for text in texts:
                ids = lm.tokenizer(text)["input_ids"]
                if prepend_bos and bos is not None and ids[0] != bos:
                    ids = [bos, *ids]
                maps = own_attentions(lm, np.array([ids]))[0]
                per_input.append(
                    [[transformerlens_score(m, ids, name, measure, True) for m in layer] for layer in maps]
                )
            # abs: rounded to 3 decimals on both sides (a weight a float32 ulp apart may round the other way)
            atol = 1e-3 + 1e-9 if measure == "abs" else 1e-6
            np.testing.assert_allclose(found.detect[measure][name], np.mean(per_input, axis=0), atol=atol)


def test_prepend_bos_puts_the_bos_in_front_only_where_the_tokenizer_does_not(models):
    """GPT-2's tokenizer starts a text with no BOS: one is put in front; Llama's starts with its BOS, BERT's with [CLS]
    (no BOS token): unchanged."""
    for kind, changed in (("gpt2", True), ("llama", False), ("bert", False)):
        lm = models(kind)
        plain = encode(lm, "the cat sat")
        front = with_bos(lm, plain)
        if changed:
            assert front.input_ids == [lm.tokenizer.bos_token_id, *plain.input_ids] and front.special_mask[0]
            assert front.tokens[1:] == plain.tokens and front.word_ids[0] is None and front.cls_mask[0]
        else:
            assert front is plain


def test_thresholds_choose_the_roles_and_a_file_round_trips(results):
    _, found = results("gpt2")
    lowest = float(found.scores.previous.min())
    low = found.for_options(RolesOptions(threshold=lowest, copying_threshold=-1.0, sink_threshold=-1.0))
    assert len(low.roles["previous"]) == 8 and len(low.roles["copying"]) == 8 and len(low.roles["sink"]) == 8
    assert found.roles["previous"] == [h for h in low.roles["previous"] if found.scores.previous[h] >= 0.4]
    data = json.loads(json.dumps(found.to_json(), allow_nan=False))
    assert RolesResult.from_json(data).to_json() == found.to_json()
    for broken in ({**data, "scores": {**data["scores"], "induction": None}}, {**data, "probe": {}},
                   {**data, "thresholds": {"previous": 0.4}}):  # fmt: skip
        with pytest.raises(ResultFileError, match="`roles` result"):
            RolesResult.from_json(broken)


def test_the_table_of_every_head_names_the_role_the_map_colours_it_by():
    """Hand-made scores of 2 layers x 2 heads: 0-0 previous (0.9 / 0.4), 0-1 sink (first_share 0.6 / 0.3), 1-0
    induction (0.8 / 0.4 beats duplicate 0.5 / 0.4), 1-1 none; an encoder's copying score is NaN."""
    scores = HeadScores(
        previous=np.array([[0.9, 0.1], [0.1, 0.1]]),
        duplicate=np.array([[0.0, 0.0], [0.5, 0.1]]),
        induction=np.array([[0.0, 0.0], [0.8, 0.1]]),
        copying=None,
        first_share=np.array([[0.0, 0.6], [0.0, 0.2]]),
    )
    thresholds = {"previous": 0.4, "duplicate": 0.4, "induction": 0.4, "copying": 0.5, "sink": 0.3}
    found = RolesResult(ProbeRecord([[1, 2, 1, 2]], 2, 2, None), scores, None, None, None, thresholds)
    table = found.tables("m")["Head roles"]
    assert list(table.columns) == ["model", "layer", "head", "previous", "duplicate", "induction", "copying",
                                   "first_share", "role"]  # fmt: skip
    assert list(zip(table["layer"], table["head"], table["role"])) == [
        (1, 1, "previous-token"), (1, 2, "sink"), (2, 1, "induction"), (2, 2, "none")]  # fmt: skip
    assert table["copying"].isna().all() and list(table["duplicate"]) == [0.0, 0.0, 0.5, 0.1]


def test_checkpoints_take_their_step_from_the_name(tmp_path):
    assert checkpoint_step("data/models/tiny/step1200", 0) == 1200
    assert checkpoint_step("EleutherAI/pythia-70m@step3000", 5) == 3000
    assert checkpoint_step("some/model", 4) == 4
    first, last = (save_tiny("gpt2", tmp_path / f"run/step{n}") for n in (10, 20))
    run = attnlib.roles(str(last), checkpoints=[str(first), str(last)], sequences=1, repeat_length=4)
    points = run.result.checkpoints
    assert [(p.path, p.step) for p in points] == [(str(first), 10), (str(last), 20)]
    assert points[1].scores.to_json() == run.result.scores.to_json()  # the same weights, the same numbers
    assert points[1].in_context_gain == run.result.in_context_gain
    assert set(run.to_json()["checkpoints"][0]) == {"path", "step", "probe", "scores", "in_context_gain"}
    table = run.tables()["Checkpoints"]
    assert list(table["step"].unique()) == [10, 20] and len(table) == 16


@pytest.mark.parametrize("kind", ["bert", "gpt2"])
def test_the_probe_text_reads_back_as_one_token_per_word(kind, tmp_path):
    lm = load_model(str(save_tiny(kind, tmp_path / kind)))
    probe = probe_text(lm, 8)
    ids = lm.tokenizer(probe.text, add_special_tokens=False)["input_ids"]
    words = [lm.tokenizer(" " + w, add_special_tokens=False)["input_ids"] for w in probe.words]
    assert probe.exact and len(set(probe.words)) == 8 and all(len(w) == 1 for w in words)
    assert ids[1:8] == [w[0] for w in words][1:] == ids[9:]  # the second repeat is the first, word for word
    assert live_head_link("m", "a b", 1, 2) == "./?model=m&a=a+b&view=head&layer=2&head=3&heads=3"


@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_progress_moves_with_every_sequence_the_model_runs(kind, models):
    """The callback hears of each batch as it runs: its `done` grows by the batches the model's stack is given
    (counted here by a forward pre-hook on it, after a first run has made the library's one-off checks), up to the
    total, counted by hand: the probe's R sequences once, and for a decoder again for each of the 4 roles' ablation
    and its 5 control draws, then the 3 texts of detection."""
    lm = models(kind)
    texts = [attnlib.CorpusInput(t) for t in ("the cat sat on the mat", "a dog . a dog", "one two one two")]
    compute_roles(lm, texts, OPTIONS)
    given: list[int] = []
    told: list[tuple[int, int]] = []

    def count(_module, args, kwargs):
        given.append(int(kwargs["input_ids"].shape[0] if "input_ids" in kwargs else args[0].shape[0]))

    handle = lm.encoder.register_forward_pre_hook(count, with_kwargs=True)
    try:
        compute_roles(lm, texts, OPTIONS, progress=lambda done, total: told.append((done, total)))
    finally:
        handle.remove()
    passes = 1 + (4 * (1 + 5) if lm.facts.causal else 0)
    dones = [d for d, _ in told]
    (total,) = {t for _, t in told}
    assert total == passes * OPTIONS.sequences + len(texts) == sum(given)
    assert dones == sorted(dones) and dones[-1] == total
    assert dones[0] <= OPTIONS.sequences < total  # the first report comes after the probe's first batch
    assert len(set(dones)) >= (3 if lm.facts.causal else 2)  # the probe, detection and a decoder's ablations
