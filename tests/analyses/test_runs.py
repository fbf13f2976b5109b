"""The typed run of every analysis (attnlib.analyse and attnlib.<analysis>): its JSON is the command's, it saves the
command's result file and loads back, its long tables have a model column and 1-based layers, and it draws figures;
gradient importance (METHODS §5) against an independent autograd computation."""

from __future__ import annotations

import html
import json

import numpy as np
import pytest
import torch

import attnlib
from attnlib.analyses.registry import ANALYSES
from attnlib.core.corpus import read_corpus
from attnlib.core.runner import encode
from attnlib.results.files import json_ready, read_result_file
from attnlib.results.shipped import CLASSROOM_PAIRS
from attnlib.runs import RUNNERS, AnalysisRun
from attnlib.stats.gradient import masked_positions
from attnlib.views import Figure, View
from support.cli import cli_json, run_cli
from support.runs import INPUTS, KINDS, command_line, split_inputs


def strict(data: dict) -> dict:
    """What the JSON says once printed and read (NaN as null, arrays as lists)."""
    return json.loads(json.dumps(json_ready(data), allow_nan=False))


def test_one_function_per_analysis_named_as_its_command():
    assert set(RUNNERS) == set(ANALYSES)
    for name, function in RUNNERS.items():
        assert getattr(attnlib, name) is function and name in attnlib.__all__
    assert attnlib.load.__module__ == "attnlib.runs" and attnlib.AnalysisRun is AnalysisRun
    assert "AnalysisRun" in attnlib.__all__


@pytest.mark.parametrize(("name", "tiny_model_dir"), [(name, KINDS.get(name, "bert")) for name in sorted(INPUTS)],
                         indirect=["tiny_model_dir"])  # fmt: skip
def test_a_run_is_the_command_its_file_its_tables_and_figures(name, tiny_model_dir, tmp_path, one_thread):
    inputs, text, limit, options = split_inputs(name)
    run = RUNNERS[name](str(tiny_model_dir), **inputs, **text, limit=limit, **options)
    assert isinstance(run, AnalysisRun) and run.analysis is ANALYSES[name] and run.model == str(tiny_model_dir)

    out = tmp_path / "cli.json"
    printed = cli_json(*command_line(name, str(tiny_model_dir)), "--json", "--out", str(out))
    assert strict(run.to_json()) == printed

    saved = tmp_path / "run.json"
    run.save(saved)
    record, by_cli = read_result_file(saved.read_bytes(), name), read_result_file(out.read_bytes(), name)
    assert (record.result, record.options, record.corpus, record.facts) == (
        by_cli.result, by_cli.options, by_cli.corpus, by_cli.facts)  # fmt: skip
    back = attnlib.load(saved)
    assert strict(back.to_json()) == printed and back.options == run.options and back.facts == run.facts
    assert (back.corpus, back.created, back.library_version) == (run.corpus, run.created, run.library_version)

    tables = run.tables()
    assert tables and run.to_pandas() is not None
    for title, table in tables.items():
        assert table.columns[0] == "model" and set(table["model"]) == {run.model}, title
        if "layer" in table:
            assert table["layer"].min() >= 1 and table["layer"].max() <= run.facts.n_layers, title
        if "head" in table and table["head"].dtype.kind == "i":
            assert table["head"].min() >= 1 and table["head"].max() <= run.facts.n_heads, title

    figures = run.figures()
    assert all(isinstance(f, Figure | View) for f in figures)
    assert figures or name == "ablate"


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_tables_hold_the_result_numbered_from_one(tiny_model_dir, one_thread):
    """special's per-layer table and gradient's per-head table at 1-based positions hold the 0-based arrays."""
    special = attnlib.special(str(tiny_model_dir), corpus=CLASSROOM_PAIRS, limit=2).result.special
    table = attnlib.special(str(tiny_model_dir), corpus=CLASSROOM_PAIRS, limit=2).to_pandas()
    np.testing.assert_array_equal(table["layer"], np.arange(1, len(special.layers["sep"]) + 1))
    np.testing.assert_allclose(table["sep"], special.layers["sep"], rtol=1e-6)
    run = attnlib.gradient(str(tiny_model_dir), corpus=CLASSROOM_PAIRS, limit=2)
    heads = run.tables()["Per head"]
    row = heads[(heads["layer"] == 2) & (heads["head"] == 3)].iloc[0]
    assert (row["sep"], row["all"]) == (run.result.sep[1, 2], run.result.all[1, 2])


def test_gradient_needs_a_masked_lm_head():
    ran = run_cli("gradient", "--corpus", str(CLASSROOM_PAIRS), "--limit", "1", "--json")
    assert ran.code == 2, ran.err
    error = ran.err
    assert error.startswith("error: ") and "masked-language-model head" in error and error.count("\n") == 1


@pytest.mark.parametrize("tiny_model_dir", ["bert"], indirect=True)
def test_gradient_importance_is_autograd_of_the_masked_lm_loss(tiny_model_dir, tiny_model, one_thread):
    """Each input alone (no padding), its 15% masked by (seed, corpus index), the mean cross-entropy at the masks
    differentiated by torch.autograd with respect to every layer's attention: mean |g| over rows and [SEP] keys, and
    over all keys, averaged over inputs. The analysis batches 3 inputs with padding."""
    inputs = read_corpus(CLASSROOM_PAIRS)[:3]
    run = attnlib.gradient(tiny_model, corpus=inputs, seed=7)
    lm = tiny_model
    sep_sum = np.zeros((lm.facts.n_layers, lm.facts.n_heads))
    all_sum = np.zeros_like(sep_sum)
    for index, item in enumerate(inputs):
        encoded = encode(lm, item.text_a, item.text_b)
        ids = torch.tensor([encoded.input_ids])
        masked = masked_positions(encoded.special_mask, 7, index)
        labels = ids[0, masked].clone()
        ids[0, masked] = lm.tokenizer.mask_token_id
        extra = {"token_type_ids": torch.tensor([encoded.token_type_ids])} if encoded.token_type_ids else {}
        with torch.enable_grad():
            out = lm.mlm(input_ids=ids, attention_mask=torch.ones_like(ids), output_attentions=True, **extra)
            loss = torch.nn.functional.cross_entropy(out.logits[0, masked], labels)
            grads = torch.autograd.grad(loss, list(out.attentions))
        g = torch.stack(grads, 1)[0].abs().numpy()  # [layers, heads, n, n]
        sep_sum += g[..., np.asarray(encoded.sep_mask, bool)].mean(axis=(-2, -1))
        all_sum += g.mean(axis=(-2, -1))
    # float32 (eps 1.2e-7): a padded batch and a lone input differ in the order of sums of at most ~1e3 terms in this
    # 2-layer, hidden-32 model's backward pass, so about 1e3 * eps = 1.2e-4 of each value
    np.testing.assert_allclose(run.result.sep, sep_sum / 3, rtol=2e-4)
    np.testing.assert_allclose(run.result.all, all_sum / 3, rtol=2e-4)
    assert run.result.n_inputs == 3 and run.to_json()["layers"][0]["sep"] == pytest.approx(run.result.sep[0].mean())


@pytest.mark.parametrize("name", ["deps_ewt-dev.json", "special_classroom-pairs.json"])
def test_a_shipped_result_file_loads_as_a_run(name):
    """Shipped files predate the stored model facts: the run knows the model by name; deps' JSON (no derived numbers)
    comes back exactly, special's per-head numbers too (its per-layer means are recomputed from the rounded heads)."""
    from attnlib.results.shipped import PRECOMPUTED

    stored = json.loads((PRECOMPUTED / name).read_text(encoding="utf-8"))
    run = attnlib.load(PRECOMPUTED / name)
    assert run.model == stored["model"] and run.facts.kind == "encoder" and run.created == stored["created"]
    printed = strict(run.to_json())
    if name.startswith("deps"):
        assert printed == stored["result"]
    else:
        assert printed["heads"] == stored["result"]["heads"]
    assert set(run.to_pandas()["model"]) == {stored["model"]} and run.figures()


def test_show_draws_in_a_notebook_and_leaves_nothing_to_print():
    """In an IPython shell (a notebook's kernel runs one) `run.show()` displays each of `figures()` and returns None,
    so a cell ending in it prints no list under the figures; outside a shell it returns `figures()`."""
    from IPython.core.interactiveshell import InteractiveShell
    from IPython.utils.capture import capture_output

    from attnlib.results.shipped import PRECOMPUTED

    run = attnlib.load(PRECOMPUTED / "special_classroom-pairs.json")
    figures = run.figures()
    InteractiveShell.clear_instance()
    assert [f.to_json() for f in run.show()] == [f.to_json() for f in figures] and figures
    shell = InteractiveShell.instance()
    try:
        shell.user_ns["run"] = run
        with capture_output() as shown:
            outcome = shell.run_cell("run.show()")
        assert outcome.success and outcome.result is None and shown.stdout == ""
        assert [o.data["text/plain"] for o in shown.outputs] == [f.summary() for f in figures]
    finally:
        InteractiveShell.clear_instance()


def test_every_result_type_shows_itself():
    """Every analysis's result type is a Result: its JSON and back and its tables (analyses.base), and no figures of
    its own: the views draw it (every type but ablate's, whose table says all)."""
    from attnlib.views.drawing import _COMPARED, _ONE, _registered

    _registered()
    for name, analysis in ANALYSES.items():
        for method in ("to_json", "from_json", "tables"):
            assert callable(getattr(analysis.result, method, None)), f"{name}: {analysis.result.__name__}.{method}"
        assert not hasattr(analysis.result, "figures") and not hasattr(analysis.result, "compared_figures"), name
    drawn = {  # routes' result is a text's graph or a corpus's frequency: each of its kinds registers its figures
        name for name, analysis in ANALYSES.items() if any(issubclass(t, analysis.result) for t in (*_ONE, *_COMPARED))
    }
    assert set(ANALYSES) - drawn == {"ablate"}


def test_a_run_as_a_cells_value_draws_its_figures_else_its_table():
    """A notebook shows a run left as a cell's value by `_repr_html_`: a line naming it, then each of its figures'
    own frames (the shipped special file: seven figures), or its tables where it draws none (ablate's one row)."""
    from attnlib.analyses.importance import ABLATE, InputAblation
    from attnlib.results.shipped import PRECOMPUTED

    run = attnlib.load(PRECOMPUTED / "special_classroom-pairs.json")
    page = run._repr_html_()
    framed = [f._repr_html_() for f in run.figures()]
    assert page == f"<p>{html.escape(repr(run))}</p>" + "".join(framed) and len(framed) == 7
    ablation = InputAblation(["[CLS]", "a", "[SEP]"], [(0, 1)], "ablate", 0.25, 0.5, None)
    ablated = AnalysisRun(ABLATE, ABLATE.make_options(heads="0-1"), ablation, run.facts, {})
    row = ablated._repr_html_().removeprefix(f"<p>{html.escape(repr(ablated))}</p>")
    assert ablated.figures() == [] and row.count("<tr") == 2  # the header and the one row
    for cell in (run.model, "1-2", "ablate", "0.25", "0.75", "0.5"):  # heads 1-based; similarity 1 - 0.25
        assert f"<td>{cell}</td>" in row
