"""memlab.tuning and ``memlab tune`` (issue 17 item 1): grouped CV that never leaks, a planted
signal found, the fast counterfactual path equal to ``rescore``, recipe files, bad input."""

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("optuna")

from _support import assert_one_line_error, cli  # noqa: E402

from memlab.cli import main  # noqa: E402

from memlab.datasets.synthetic import synthetic_trace  # noqa: E402
from memlab.harness.counterfactual import rescore  # noqa: E402
from memlab.harness.replay import replay  # noqa: E402
from memlab.harness.trace import TraceBuilder  # noqa: E402
from memlab.surfacing.config import DEFAULT, get_recipe, load_recipe_file  # noqa: E402
from memlab.tuning import (CounterfactualEvaluator, ReplayEvaluator, cv_fixed,  # noqa: E402
                           grouped_folds, parse_space, plot_importance, subtrace, tune)
from memlab.tuning import evaluate as tuning_evaluate  # noqa: E402


def planted_trace(n: int = 24, first: int = 0):
    """Each question names a topic; an old item repeats the topic word (more BM25), a new one
    (created an hour before the question) is the gold. Only ``freshness_weight`` >= about 0.3
    lifts the new one to rank 1; ``pin_boost_factor`` does nothing (there are no pins).
    ``first`` numbers the topics from there (a holdout with other questions)."""
    b = TraceBuilder("planted", start="2024-01-01T00:00:00+00:00")
    words = [f"topic{chr(97 + i % 26)}{chr(97 + i // 26)}" for i in range(first, first + n)]
    for i, w in enumerate(words):
        b.add(f"{w} {w} {w} notes from the archive", item_id=f"old{i}",
              ts="2024-01-01T00:00:00+00:00")
    for i, w in enumerate(words):
        b.add(f"{w} update posted today with several other unrelated words", item_id=f"new{i}",
              ts="2024-03-01T00:00:00+00:00")
    for i, w in enumerate(words):
        b.query(f"q{i}", w, gold=[f"new{i}"], ts="2024-03-01T02:00:00+00:00")
    return b.build()


def two_workspace_trace():
    b = TraceBuilder("ws", start="2024-01-01T00:00:00+00:00")
    for ws in ("alpha", "beta", "gamma"):
        b.in_workspace(ws)
        for i in range(4):
            b.add(f"{ws} fact number {i} about widget{i}", item_id=f"{ws}-{i}")
        for i in range(4):
            b.query(f"{ws}/q{i}", f"widget{i} {ws}", gold=[f"{ws}-{i}"])
    return b.build()


# ----------------------------------------------------------------------------- planted signal
def test_planted_signal_found_and_importance_says_so():
    out = tune(planted_trace(), {"freshness_weight": (0.0, 1.0), "pin_boost_factor": (0.0, 1.0)},
               measure="MRR", folds=3, n_trials=20, group_by="question", seed=0)
    # the weight that matters is found: every fold's choice and the final one lift the gold
    assert out.best_params["freshness_weight"] >= 0.25
    assert out.cv.loc[0, "cv_mean"] == 1.0 and out.cv.loc[0, "in_sample"] == 1.0
    assert out.folds["score"].tolist() == [1.0, 1.0, 1.0]
    # ... and the importance says which one
    assert out.importance["freshness_weight"] > 0.9
    assert out.importance["pin_boost_factor"] < 0.1
    assert out.importance.index[0] == "freshness_weight"
    fig = plot_importance(out)
    bars = {t.get_text(): p.get_width() for t, p in zip(fig.axes[0].get_yticklabels(),
                                                        fig.axes[0].patches)}
    assert bars["freshness_weight"] > 0.9 > 0.1 > bars["pin_boost_factor"]
    # the trial history is a tidy frame: 3 folds + the final search, 20 trials each
    assert out.trials.groupby("study").size().to_dict() == {"0": 20, "1": 20, "2": 20,
                                                            "final": 20}
    assert {"params_freshness_weight", "params_pin_boost_factor", "value"} <= set(out.trials)


# ----------------------------------------------------------------------------- leakage
def test_no_fold_sees_its_held_out_questions_counterfactual():
    trace = two_workspace_trace()
    out = tune(trace, {"centrality_weight": (0.0, 2.0)}, measure="MRR", folds=3, n_trials=4,
               group_by="workspace", seed=1)
    held = {f: set(g["qid"]) for f, g in out.held_out.groupby("fold")}
    assert len(held) == 3 and set().union(*held.values()) == {q.get("qid") for q in trace.queries}
    for fold, test in held.items():
        # whole workspaces per fold
        assert len({q.split("/")[0] for q in test}) == 1
        rows = out.audit[out.audit["study"] == fold]
        searched = rows[rows["phase"] == "search"]["qids"]
        assert len(searched) == 4  # one evaluation per trial, each audited
        assert all(not (qids & test) for qids in searched)
        assert all(qids == set().union(*held.values()) - test for qids in searched)
        scored = rows[rows["phase"] == "score"]["qids"].tolist()
        assert scored == [frozenset(test)]
    final = out.audit[out.audit["study"] == "final"]["qids"]
    assert all(q == set().union(*held.values()) for q in final)


def test_no_fold_sees_its_held_out_questions_replay(monkeypatch):
    """The replay path runs a trace without the held-out questions: instrument what replay
    actually receives."""
    runs = []
    real = tuning_evaluate._replay_metrics

    def spy(trace, *args):
        runs.append(frozenset(q.get("qid") for q in trace.queries))
        return real(trace, *args)

    monkeypatch.setattr(tuning_evaluate, "_replay_metrics", spy)
    trace = two_workspace_trace()
    out = tune(trace, {"ppr.alpha": [0.5, 0.85]}, measure="MRR", folds=3, n_trials=2,
               group_by="workspace", seed=0)
    held = [frozenset(g["qid"]) for _, g in out.held_out.groupby("fold")]
    # per fold: 2 search replays without the fold's questions, then 1 replay of exactly them
    assert len(runs) == 3 * 3 + 2
    for i, test in enumerate(held):
        search, score = runs[3 * i:3 * i + 2], runs[3 * i + 2]
        assert all(not (r & test) and len(r) == 8 for r in search)
        assert score == test
    assert out.manifest["path"] == "replay (serial)"


def test_grouped_folds_never_split_a_group_and_are_seeded():
    groups = {f"q{i}": f"g{i % 7}" for i in range(50)}
    folds = grouped_folds(groups, 5, seed=3)
    assert sorted(q for f in folds for q in f) == sorted(groups)
    owner = {groups[q]: i for i, f in enumerate(folds) for q in f}
    assert all(owner[groups[q]] == i for i, f in enumerate(folds) for q in f)
    assert folds == grouped_folds(groups, 5, seed=3)
    assert [len(f) for f in folds] == [8, 14, 14, 7, 7]  # 7 groups (one of 8, six of 7)
    with pytest.raises(ValueError, match="folds=8 needs at least 8 groups, got 7"):
        grouped_folds(groups, 8)


# ----------------------------------------------------------------------------- exactness
@pytest.mark.parametrize("measure", ["R@5", "R@10", "MRR", "nDCG@10", "P@5", "Hit@2"])
def test_fast_counterfactual_equals_rescore(measure):
    live = replay(synthetic_trace(400, 60, seed=2), "default", measures=[measure])
    evaluator = CounterfactualEvaluator(live, measure)
    assert evaluator.fast
    qids = live.decisions["qid"].tolist()
    for changes in ({}, {"centrality_weight": 1.7, "activation_floor": 0.1,
                         "freshness_weight": 0.6}, {"centrality_weight": 0.0}):
        fast = evaluator.values(DEFAULT.replace(**changes), qids)
        slow = rescore(live, changes or None, [measure]).metrics.set_index("qid")["value"]
        assert fast.index.tolist() == slow.index.tolist()
        np.testing.assert_allclose(fast.to_numpy(), slow.to_numpy(), rtol=0, atol=1e-12)


def test_counterfactual_falls_back_to_rescore_with_pins():
    trace = (TraceBuilder("pins", start="2024-01-01T00:00:00+00:00")
             .add("alpha beta", item_id="a").add("alpha gamma", item_id="b")
             .add("delta", item_id="c").pin("s1", "c")
             .query("q1", "alpha", session_id="s1", gold=["b", "c"])
             .query("q2", "alpha beta", session_id="s1", gold=["a"]).build())
    live = replay(trace, measure_on="surfaced", measures=["MRR"])
    evaluator = CounterfactualEvaluator(live, "MRR")
    assert not evaluator.fast
    got = evaluator.values(DEFAULT.replace(pin_boost_factor=0.0), ["q1", "q2"])
    want = rescore(live, {"pin_boost_factor": 0.0}, ["MRR"]).metrics.set_index("qid")["value"]
    assert got.tolist() == want.tolist()


def test_cv_fixed_is_the_fold_means_of_one_replay():
    trace = two_workspace_trace()
    out = cv_fixed(trace, "bm25", measure="MRR", folds=3, group_by="workspace", seed=0)
    live = replay(trace, "bm25", measures=["MRR"]).metrics.set_index("qid")["value"]
    questions = pd.Series({q.get("qid"): q.get("workspace_id") for q in trace.queries})
    folds = grouped_folds(questions, 3, seed=0)
    expected = [live.reindex(f).mean() for f in folds]
    assert out.loc[0, "fold_scores"] == [round(v, 6) for v in expected]
    assert out.loc[0, "cv_mean"] == pytest.approx(np.mean(expected), abs=1e-12)


def test_replay_evaluator_local_pool_matches_serial():
    trace = two_workspace_trace()
    qids = [q.get("qid") for q in trace.queries][:6]
    configs = [DEFAULT, DEFAULT.replace(bm25_k1=0.5)]
    serial = ReplayEvaluator(trace, "MRR").values_many(configs, qids)
    pool = ReplayEvaluator(trace, "MRR", executor="local", n_workers=2)
    try:
        local = pool.values_many(configs, qids)
    finally:
        pool.close()
    assert [s.to_dict() for s in serial] == [s.to_dict() for s in local]
    assert [sorted(s) for s in pool.seen] == [sorted(qids)] * 2


def test_subtrace_keeps_every_other_event():
    trace = two_workspace_trace()
    sub = subtrace(trace, ["beta/q1"])
    assert [q.get("qid") for q in sub.queries] == ["beta/q1"]
    assert len(sub) == len(trace) - 11


# ----------------------------------------------------------------------------- recipes
def test_recipe_file_round_trips_by_path_and_by_name(tmp_path, monkeypatch):
    out = tune(planted_trace(8), {"freshness_weight": (0.0, 1.0)}, measure="MRR", folds=2,
               n_trials=3, group_by="question", name="planted-fresh")
    path = out.save_recipe(tmp_path / "planted-fresh.json")
    data = json.loads(path.read_text())
    assert data["format"] == "memlab-recipe/1"
    assert data["provenance"]["cv"]["cv_mean"] == out.cv.loc[0, "cv_mean"]
    assert len(data["provenance"]["fold_scores"]) == 2
    assert load_recipe_file(path) == out.config == get_recipe(str(path))
    assert out.config.freshness_weight == out.best_params["freshness_weight"]
    monkeypatch.setenv("MEMLAB_RECIPE_PATH", str(tmp_path))
    assert get_recipe("planted-fresh") == out.config
    assert replay(planted_trace(8), "planted-fresh").manifest["config"]["name"] == \
        "planted-fresh"


def test_recipe_lookup_errors_name_the_argument(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "other/9", "config": {}}))
    with pytest.raises(ValueError, match="must hold a 'memlab-recipe/1' recipe"):
        get_recipe(str(bad))
    bad.write_text("[1, 2]")
    with pytest.raises(ValueError, match="must hold a JSON object"):
        load_recipe_file(bad)
    with pytest.raises(ValueError, match="recipe must be one of .* got 'no-such-recipe'"):
        get_recipe("no-such-recipe")


# ----------------------------------------------------------------------------- bad input
@pytest.mark.parametrize("kwargs, message", [
    ({"measure": "Tokens"}, "measure must be a relevance measure"),
    ({"measure": "R"}, "needs a cutoff"),
    ({"folds": 1}, "folds must be an integer >= 2, got 1"),
    ({"n_trials": 0}, "n_trials must be an integer >= 1, got 0"),
    ({"group_by": "session"}, "group_by must be one of"),
    ({"seed": "x"}, "seed must be a non-negative integer"),
    ({"space": {"nope": (0, 1)}}, r"space\['nope'\]: unknown configuration field"),
    ({"space": {"centrality_weight": (1, 0)}}, "must have low < high"),
    ({"space": {"centrality_weight": "wide"}}, r"space\['centrality_weight'\] must be"),
    ({"space": {"bm25_b": (0.0, 2.0)}}, r"space\['bm25_b'\]: bm25_b must be in \[0, 1\]"),
    ({"space": {}}, "space must be a non-empty mapping"),
    ({"folds": 13}, "folds=13 needs at least 13 groups, got 3"),
    ({"categories": [99]}, r"trace has no judged questions in categories \[99\]"),
    ({"holdout": "file.jsonl"}, "holdout must be a Trace"),
    ({"name": ""}, "name must be a non-empty string"),
    ({"categories": 5}, "categories must be a list of question categories, got 5"),
    ({"live": "replay"}, "live must be a ReplayResult of this trace"),
    ({"executor": "spark", "space": {"ppr.alpha": [0.5]}}, "executor must be one of"),
])
def test_bad_input_raises_value_error_naming_the_argument(kwargs, message):
    kwargs = {"measure": "MRR", "folds": 3, "n_trials": 1, **kwargs}
    with pytest.raises(ValueError, match=message):
        tune(two_workspace_trace(), **kwargs)


def test_live_of_another_trace_is_refused():
    other = replay(planted_trace(6))
    with pytest.raises(ValueError, match="trace hash differs"):
        tune(two_workspace_trace(), measure="MRR", folds=3, n_trials=1, live=other)


def test_bad_trace_raises():
    with pytest.raises(ValueError, match="trace must be a Trace, got str"):
        tune("trace.jsonl")
    with pytest.raises(ValueError, match="space must be a non-empty mapping"):
        parse_space([("a", 1)], DEFAULT)


# ----------------------------------------------------------------------------- CLI
def test_cli_tune_writes_recipe_and_reports_holdout(tmp_path, capsys):
    trace, holdout = tmp_path / "dev.jsonl", tmp_path / "holdout.jsonl"
    planted_trace(12).write_jsonl(trace)
    planted_trace(6, first=12).write_jsonl(holdout)  # other questions: a real holdout
    out = tmp_path / "out"
    code = main(["tune", str(trace), "--space", "freshness_weight=0:1", "pin_boost_factor=0,0.5",
                 "--measure", "MRR", "--folds", "3", "--trials", "6", "--group-by", "question",
                 "--holdout", str(holdout), "--name", "fresh", "--no-progress",
                 "--out", str(out)])
    printed = capsys.readouterr().out
    assert code == 0, printed
    assert "MRR grouped 3-fold CV estimate (by question)" in printed
    assert "holdout planted: MRR" in printed and "scored once" in printed
    for name in ("fresh.json", "cv.csv", "folds.csv", "trials.csv", "held_out.csv",
                 "importance.csv", "holdout.csv", "plots/history.png", "plots/importance.png",
                 "plots/top_params.png"):
        assert (out / name).is_file(), name
    assert len(pd.read_csv(out / "trials.csv")) == 4 * 6
    # the recipe file works wherever a recipe is accepted
    code, err = cli(capsys, "replay", str(trace), "--config", str(out / "fresh.json"),
                    "--out", str(tmp_path / "replayed"))
    assert code == 0, err


@pytest.mark.parametrize("args, fragments", [
    (["--folds", "1"], ["--folds must be at least 2, got 1"]),
    (["--trials", "0"], ["--trials must be at least 1, got 0"]),
    (["--measure", "Latency"], ["--measure Latency: 'Latency' is not a relevance measure"]),
    (["--measure", "Q@1"], ["--measure Q@1: measure must look like"]),
    (["--space", "centrality_weight"], ["--space entry 'centrality_weight' must look like"]),
    (["--space", "centrality_weight=a:b"], ["low and high must be numbers"]),
    (["--address", "tcp://x:1"], ["--address 'tcp://x:1' needs --executor dask"]),
    (["--name", "a/b"], ["--name must be a plain file name"]),
])
def test_cli_tune_bad_input_is_one_line(tmp_path, capsys, args, fragments):
    trace = tmp_path / "dev.jsonl"
    planted_trace(6).write_jsonl(trace)
    code, lines = cli(capsys, "tune", str(trace), "--out", str(tmp_path / "o"), *args)
    assert_one_line_error(code, lines, "tune", *fragments)


def test_replayed_fields_tune_the_same_on_a_dask_cluster():
    """Fields other than composite weights replay; on Dask the trials run in batches of
    ``n_workers`` and the choice, the folds and the estimate match the serial run's."""
    trace = two_workspace_trace()
    space = {"bm25_k1": (0.3, 2.0), "router_rules": "permutations"}
    kwargs = dict(measure="MRR", folds=3, n_trials=4, group_by="workspace", seed=2,
                  base=DEFAULT.replace(router_rules=("multi_hop", "question")))
    serial = tune(trace, space, **kwargs)
    dask = tune(trace, space, executor="dask", n_workers=1, **kwargs)
    assert dask.manifest["path"] == "replay (dask)"
    assert dask.best_params == serial.best_params
    assert isinstance(dask.best_params["router_rules"], tuple)
    assert dask.config.router_rules == serial.best_params["router_rules"]
    pd.testing.assert_frame_equal(dask.folds, serial.folds)
    pd.testing.assert_frame_equal(dask.cv, serial.cv)
