"""Review of issues 16/17 (notebooks, statistics, tuning): each test failed before its fix."""

import numpy as np
import pytest

from memlab.cli import main
from memlab.datasets.synthetic import synthetic_trace

optuna = pytest.importorskip("optuna")


# 1. a holdout that is the searched trace (or shares questions with it) is refused
def test_tune_refuses_the_searched_trace_as_holdout(tmp_path, capsys):
    code = main(["tune", "synthetic:120:30", "--group-by", "question", "--folds", "2",
                 "--trials", "2", "--holdout", "synthetic:120:30", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("memlab tune: error: --holdout is the trace searched on")
    assert not (tmp_path / "tuned.json").exists()


def test_tune_api_refuses_overlapping_holdout_but_not_a_disjoint_one():
    from memlab.harness.trace import Trace
    from memlab.tuning import check_disjoint_holdout, tune
    dev = synthetic_trace(120, 30, seed=1)
    with pytest.raises(ValueError, match=r"^holdout is the trace searched on"):
        tune(dev, {"centrality_weight": (0.0, 2.0)}, folds=2, n_trials=1,
             group_by="question", holdout=dev)
    # the same questions under another header (a different hash) still overlap
    other = Trace(dev.events[:-1], name="copy")
    with pytest.raises(ValueError, match=r"^holdout shares \d+ questions with the trace"):
        check_disjoint_holdout(dev, other)
    # another seed: the same qids (q0, q1, ...) but other questions -> accepted
    check_disjoint_holdout(dev, synthetic_trace(120, 30, seed=2))


# 3. an unreachable Dask scheduler is one line in tune as in sweep
def test_tune_unreachable_dask_scheduler_is_one_line(tmp_path, capsys):
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code = main(["tune", "synthetic:60:12", "--group-by", "question", "--folds", "2",
                     "--trials", "2", "--space", "ppr.alpha=0.5,0.85", "--executor", "dask",
                     "--address", "tcp://127.0.0.1:9", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("memlab tune: error: --address 'tcp://127.0.0.1:9': cannot reach "
                          "the Dask scheduler")


# 2. a learned ranker scored on its own training questions is flagged in-sample
def test_reranker_scored_on_its_training_questions_warns_in_sample(tmp_path):
    pytest.importorskip("sklearn")
    import warnings

    from memlab.errors import InSampleWarning
    from memlab.harness.replay import replay
    from memlab.learn import fit_ranker
    from memlab.surfacing.config import DEFAULT
    trace = synthetic_trace(200, 30, seed=4)
    live = replay(trace, measures=["MRR"])
    half = sorted(live.metrics["qid"].unique())[:12]
    path = fit_ranker(live, half, kind="logistic").save(tmp_path / "m.json")
    recipe = DEFAULT.replace(reranker=str(path))
    with pytest.warns(InSampleWarning, match=r"trained on 12 of these questions"):
        staged = replay(trace, recipe, measures=["MRR"])
    assert staged.manifest["in_sample"].startswith("in-sample: the ranker")
    # another trace (same qids q0, q1, ... but other questions): no warning, no note
    with warnings.catch_warnings():
        warnings.simplefilter("error", InSampleWarning)
        other = replay(synthetic_trace(200, 30, seed=5), recipe, measures=["MRR"])
    assert "in_sample" not in other.manifest


def test_experiment_cli_prints_the_in_sample_warning_and_table_note(tmp_path, capsys):
    pytest.importorskip("sklearn")
    import json

    from memlab.harness.replay import replay
    from memlab.learn import fit_ranker
    from memlab.surfacing.config import DEFAULT
    trace = synthetic_trace(120, 20, seed=0)  # what synthetic:120:20 replays
    path = fit_ranker(replay(trace, measures=["MRR"])).save(tmp_path / "m.json")
    recipe = tmp_path / "ranked.json"
    recipe.write_text(json.dumps(DEFAULT.replace(name="ranked", reranker=str(path)).to_dict()))
    code = main(["experiment", "synthetic:120:20", "--config", "base=default", "--config",
                 f"ranked={recipe}",
                 "--measures", "MRR", "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert code == 0
    assert "warning: in-sample: the ranker" in captured.err
    md = (tmp_path / "out" / "experiment.md").read_text()
    assert "in-sample" in md


# 4. n is the number of judged queries the means are over
def _with_unjudged():
    from memlab.harness.trace import TraceBuilder
    return (TraceBuilder("t", start="2024-01-01T00:00:00+00:00")
            .add("JWT tokens for auth", item_id="a").add("the cat sat", item_id="b")
            .add("pizza on friday", item_id="c")
            .query("q1", "JWT", gold=["a"]).query("q2", "cat", gold=["b"])
            .query("q3", "pizza", gold=["c"]).query("q4", "anything at all").build())


def test_experiment_and_sweep_n_counts_judged_queries():
    from memlab.harness import Experiment, sweep
    from memlab.harness.display import experiment_printable
    trace = _with_unjudged()
    out = Experiment(trace, {"a": "default", "b": "bm25"}, ["MRR", "Latency"])
    assert out.table["queries"].tolist() == [4, 4] and out.table["n"].tolist() == [3, 3]
    frame, note = experiment_printable(out)
    assert frame["n"].tolist() == [3, 3] and "judged" in note
    swept = sweep(trace, {"centrality_weight": [0.0, 1.0]}, measures=["MRR", "Latency"])
    assert swept.table["n"].tolist() == [3, 3]




# 5. the LoCoMo block is labelled from the filter actually applied
def test_eval_where_category_labels_the_block_from_the_filter(data_root):
    from memlab.evaluation import run_eval
    table = run_eval(data_root, datasets=("locomo",), where={"category": [1, 2]})
    locomo = set(table[table["dataset"] == "locomo"]["subset"])
    assert "categories 1-4" not in locomo
    assert locomo <= {"categories 1, 2", "category 1", "category 2"} and locomo
    plain = run_eval(data_root, datasets=("locomo",))
    assert "categories 1-4" in set(plain["subset"])


# 6. recipe-file errors say what is wrong and blame --config
def _recipe(tmp_path, name, config, **extra):
    import json

    from memlab.surfacing.config import RECIPE_FORMAT
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({"format": RECIPE_FORMAT, "name": name, "config": config,
                                **extra}))
    return path


def test_bad_recipe_on_the_search_path_shows_the_field_error(tmp_path, monkeypatch, capsys):
    from memlab.surfacing.config import DEFAULT
    config = DEFAULT.replace(name="odd").to_dict()
    config["centrality_weight"] = -3
    _recipe(tmp_path, "odd", config)
    monkeypatch.setenv("MEMLAB_RECIPE_PATH", str(tmp_path))
    code = main(["replay", "synthetic:40:5", "--config", "odd", "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err
    assert code == 2 and "neither a recipe" not in err
    assert "--config 'odd'" in err and "centrality_weight" in err


def test_recipe_with_missing_reranker_is_blamed_on_config(tmp_path, capsys):
    from memlab.surfacing.config import DEFAULT, load_recipe_file
    path = _recipe(tmp_path, "ranked",
                   DEFAULT.replace(name="ranked", reranker=str(tmp_path / "gone.json")).to_dict())
    with pytest.raises(ValueError, match=r"reranker .*gone.json.* is not usable"):
        load_recipe_file(path)
    code = main(["replay", "synthetic:40:5", "--config", str(path), "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert f"--config {str(path)!r}" in err and "gone.json" in err and "trace" not in err


def test_recipe_file_with_unknown_top_level_keys_is_refused(tmp_path):
    from memlab.surfacing.config import DEFAULT, load_recipe_file
    path = _recipe(tmp_path, "extra", DEFAULT.to_dict(), centrality_weight=2.0)
    with pytest.raises(ValueError, match=r"unknown recipe key\(s\) \['centrality_weight'\]"):
        load_recipe_file(path)


# 16. recipe-file names are case-insensitive, like built-in names
def test_recipe_file_names_are_case_insensitive(tmp_path, monkeypatch):
    from memlab.surfacing.config import DEFAULT, get_recipe
    _recipe(tmp_path, "mine", DEFAULT.replace(name="mine", centrality_weight=1.5).to_dict())
    monkeypatch.setenv("MEMLAB_RECIPE_PATH", str(tmp_path))
    assert get_recipe("MINE").centrality_weight == 1.5 == get_recipe("mine").centrality_weight
    assert get_recipe("Default") is DEFAULT


# 7. tune reports the base on the same folds, paired; 10. the CV interval stays in [0, 1]
def test_tune_reports_base_on_the_same_folds_and_a_bounded_interval():
    from memlab.tuning import cv_fixed, tune
    trace = synthetic_trace(400, 80, seed=0)
    out = tune(trace, folds=3, n_trials=3, group_by="question")
    base = cv_fixed(trace, "default", folds=3, group_by="question")
    assert out.folds["base_score"].round(6).tolist() == base.loc[0, "fold_scores"]
    cv = out.cv.iloc[0]
    assert cv["base_cv_mean"] == pytest.approx(base.loc[0, "cv_mean"])
    assert cv["diff_mean"] == pytest.approx(cv["cv_mean"] - cv["base_cv_mean"])
    assert cv["diff_ci_low"] < cv["diff_mean"] < cv["diff_ci_high"]
    # the unclipped t-interval of these fold scores runs past 1 (the reviewer's [0.897, 1.038])
    assert cv["ci_high"] == 1.0 and 0.0 <= cv["ci_low"] < cv["cv_mean"]
    assert 0.0 <= base.loc[0, "ci_low"] <= base.loc[0, "ci_high"] <= 1.0


def test_tune_cli_prints_base_difference_and_the_weighting_note(tmp_path, capsys):
    code = main(["tune", "synthetic:400:80", "--group-by", "question", "--folds", "3",
                 "--trials", "3", "--out", str(tmp_path)])
    out = " ".join(capsys.readouterr().out.split())
    assert code == 0
    assert "base 'default' on the same folds: 0.9385; tuned - base, paired by fold: +0.0293" in out
    assert "weights every fold equally" in out and "pools the questions" in out
    assert "(clipped to the measure's range [0, 1])" in out


def test_tune_warns_when_the_tuned_procedure_is_not_better(tmp_path, capsys):
    # a single-value space: the "tuned" configuration is the base
    code = main(["tune", "synthetic:200:40", "--group-by", "question", "--folds", "2",
                 "--trials", "1", "--space", "centrality_weight=0.5", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 0 and "warning: the tuned procedure is not better than the base" in err


# 8. shared:<dataset> works wherever a trace is accepted; 12. errors name the option
@pytest.mark.parametrize("command", [
    ["replay", "shared:locomo", "--measures", "MRR"],
    ["experiment", "shared:locomo", "--config", "a=default", "--config", "b=bm25",
     "--measures", "MRR"],
    ["sweep", "shared:locomo", "--grid", "centrality_weight=0,1", "--measures", "MRR"],
])
def test_shared_trace_names_work_in_every_command(command, data_root, tmp_path, monkeypatch,
                                                  capsys):
    monkeypatch.setenv("MEMLAB_SHARED_DATA", str(data_root))
    code = main([*command, "--out", str(tmp_path / "o")])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "wrote" in captured.out


def test_missing_holdout_file_is_named_as_holdout(tmp_path, capsys):
    code = main(["tune", "synthetic:60:12", "--holdout", str(tmp_path / "nope.jsonl"),
                 "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and f"--holdout {str(tmp_path / 'nope.jsonl')!r} is not a file" in err


# 9. tune's plots: memlab style, trace and n, "in-sample", and no blank importance plot
def _tune_figures(space, trace=None):
    from memlab.tuning import plot_history, plot_importance, plot_top_params, tune
    out = tune(trace or synthetic_trace(200, 40, seed=1), space, measure="MRR", folds=2,
               n_trials=4, group_by="question")
    return out, [plot_history(out), plot_importance(out), plot_top_params(out)]


def test_tune_plots_name_the_trace_n_and_in_sample_and_are_not_blank(tmp_path):
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_issue16_figures import check_pixels, written_png
    out, figures = _tune_figures({"centrality_weight": (0.0, 2.0),
                                  "activation_floor": (0.0, 1.0)})
    name = out.manifest["trace"]["name"]
    for fig in figures:
        assert fig.dpi == 150  # memlab's style sheet
        check_pixels(written_png(fig, tmp_path), fig)
        text = " ".join([fig._suptitle.get_text() if fig._suptitle else ""]
                        + [a.get_title() for a in fig.axes])
        assert f"{name}, n=40 questions, in-sample" in text


def test_importance_plot_of_a_flat_objective_says_so(tmp_path):
    import sys
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).parent))
    from test_issue16_figures import written_png
    # two fields that change nothing here: every trial scores the same
    out, (_, fig, _) = _tune_figures({"pin_boost_factor": (0.1, 3.0),
                                      "anchor_boost": (0.5, 3.0)})
    assert out.importance.isna().all()
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert any("no importance: the objective was flat" in t for t in texts)
    pixels = written_png(fig, tmp_path)
    assert np.any(pixels < 0.95, axis=-1).mean() > 0.03  # not blank


def test_sweep_tables_and_figure_name_the_reference_by_its_values(tmp_path, capsys):
    from memlab.harness import sweep
    from memlab.harness.display import sweep_printable
    from memlab.harness.plots import plot_measure_vs_parameter
    swept = sweep(synthetic_trace(100, 20), {"spreading.damping": [0.3, 0.7],
                                              "ppr.alpha": [0.85]}, measures=["MRR"])
    fig = plot_measure_vs_parameter(swept, "spreading.damping", "MRR", reference=0)
    legend = [t.get_text() for t in fig.axes[0].get_legend().texts]
    assert "reference: damping=0.3, α=0.85" in legend
    _, note = sweep_printable(swept, comparisons=swept.compare(0, warn=False))
    assert "each point vs point 0 (damping=0.3, α=0.85)" in note
    code = main(["sweep", "synthetic:100:20", "--grid", "spreading.damping=0.3,0.7",
                 "--measures", "MRR", "--reference", "0", "--out", str(tmp_path)])
    assert code == 0 and "| 1 (damping=0.7) | 0 (damping=0.3) |" in \
        capsys.readouterr().out


# 11. rich display: records show what was surfaced; results repr in one line
def test_context_record_html_shows_surfaced_titles_not_only_ids():
    from memlab import Memory
    memory = Memory()
    memory.add("We picked JWT because sessions did not scale", metadata={"title": "Auth pick"})
    memory.add("JWT " + "lunch on friday is pizza " * 10)
    memory.get_working_context("s1", "JWT", k=2)
    record = memory.last_context_record
    assert sorted(record.labels.values())[0] == "Auth pick"
    assert max(map(len, record.labels.values())) <= 60  # kept small
    html = record._repr_html_()
    assert "Auth pick" in html and "JWT lunch on friday" in html


def test_tune_and_ranker_cv_reprs_are_one_line():
    from memlab.tuning import tune
    out = tune(synthetic_trace(200, 40, seed=1), {"centrality_weight": (0.0, 2.0)},
               measure="MRR", folds=2, n_trials=2, group_by="question")
    text = repr(out)
    assert "\n" not in text and text.startswith("TuneResult(MRR CV ") and len(text) < 200
    pytest.importorskip("sklearn")
    from memlab.learn import cv_ranker
    cv = cv_ranker(synthetic_trace(200, 40, seed=1), measures=["MRR"], folds=2,
                   group_by="question")
    text = repr(cv)
    assert "\n" not in text and text.startswith("RankerCV(logistic, 2 folds, ") and \
        len(text) < 200


def test_hybrid_recipe_repr_shows_the_dense_fields():
    from memlab import DEFAULT
    from memlab.signals.dense import hybrid_recipe
    text = repr(hybrid_recipe(DEFAULT, weight=0.7))
    assert "name='default+dense'" in text and "dense.weight=0.7" in text
    assert "'configured'" not in text


# 12. bad input names the argument as the user wrote it
@pytest.mark.parametrize("args, message", [
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=a,b"],
     "--grid centrality_weight=a,b: centrality_weight must be a finite number, got 'a'"),
    (["sweep", "fixture:apollo_demo", "--grid", "ppr.alpha=2"],
     "--grid ppr.alpha=2: alpha must be in (0, 1), got 2"),
    (["sweep", "fixture:apollo_demo", "--grid", "foo=1,2"],
     "--grid foo=1,2: unknown configuration field(s) ['foo']"),
    (["tune", "synthetic:60:12", "--seed", "-1"], "--seed must be a non-negative integer"),
    (["tune", "synthetic:60:12", "--measure", "Latency"],
     "--measure Latency: 'Latency' is not a relevance measure"),
    (["tune", "synthetic:60:12", "--categories", "9"],
     "--categories 9: the trace has no judged question in these categories"),
    (["tune", "synthetic:60:12", "--categories", "x"],
     "--categories x: the trace has no judged question in these categories"),
])
def test_bad_input_names_the_argument(args, message, tmp_path, capsys):
    code = main([*args, "--out", str(tmp_path / "o")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1 and message in err, err


# 13. eval: small-sample warnings on stderr, the real cause in the footnote, marks with direction
def test_eval_warns_on_stderr_with_the_cause_and_marks_show_direction(data_root, tmp_path,
                                                                      capsys):
    code = main(["eval", "--data", str(data_root), "--out", str(tmp_path / "o"),
                 "--datasets", "musique"])
    captured = capsys.readouterr()
    assert code == 0
    assert "warning: musique, all: 12 of 12 comparisons marked † (fewer than 6 non-zero " \
        "differences)" in captured.err
    flat = " ".join(captured.out.split())
    assert "† fewer than 6 non-zero paired differences" in flat and "▲/▼" in flat
    from memlab.harness.stats import significance_mark
    assert significance_mark(0.001, delta=0.2) == "▲**"
    assert significance_mark(0.0001, delta=-0.2) == "▼***"


# 14. to_markdown: a note only about what the table shows; subsets sorted, with comparisons
def test_experiment_markdown_note_subsets_sorted_with_their_comparisons():
    from memlab.datasets import load_fixture_trace
    from memlab.harness import Experiment
    trace = load_fixture_trace("locomo_sample")
    out = Experiment(trace, {"a": "default", "b": "bm25"}, ["MRR"], by="category")
    md = out.to_markdown()
    main_note = md.split("\n\n")[1]
    assert "d_z" not in main_note and "delta =" not in main_note and "marks:" in main_note
    labels = [line for line in md.splitlines() if line.startswith("category=")]
    assert labels == sorted(labels, key=lambda s: float(s.split("=")[1])) and len(labels) > 1
    for label in labels:  # each subset table has its own marks note
        assert md.split(label, 1)[1].split("\n\n")[2].startswith("Mean [95% bootstrap CI]")
    assert out.subsets["subset"].tolist() == sorted(
        out.subsets["subset"].tolist(), key=lambda s: float(s.split("=")[1]))


def test_by_category_on_a_trace_without_categories_says_so(tmp_path, capsys):
    from memlab.harness import Experiment
    with pytest.raises(ValueError, match="no query of this trace has a category"):
        Experiment(_with_unjudged(), {"a": "default"}, ["MRR"], by="category")
    code = main(["experiment", "fixture:apollo_demo", "--config", "a=default", "--by",
                 "category", "--out", str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and "--by 'category': no query of this trace has a category" in err


# 15. fixture_trace of a fixture in a published format says which loader to use
def test_fixture_trace_of_a_published_format_names_the_loader():
    from memlab.datasets import fixture_trace, load_fixture, load_fixture_trace
    with pytest.raises(ValueError, match=r"load_fixture_trace\('locomo_sample'\)"):
        fixture_trace(load_fixture("locomo_sample"))
    assert len(load_fixture_trace("locomo_sample").queries) > 0
    assert len(fixture_trace(load_fixture("apollo_demo")).queries) == 7


def test_eval_by_dataset_works_as_the_readme_lists_it(data_root):
    from memlab.evaluation import run_eval
    table = run_eval(data_root, datasets=("musique",), by="dataset")
    assert set(table["subset"]) == {"all", "dataset=musique"}
    plain = table[table["subset"] == "all"].reset_index(drop=True)
    by = table[table["subset"] == "dataset=musique"].reset_index(drop=True)
    assert plain["R@5"].tolist() == by["R@5"].tolist()  # one dataset: the same questions
