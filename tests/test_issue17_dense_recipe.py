"""The dense recipe re-chosen by ``memlab tune`` (issue 17 item 4, issue 19 item 4): the
shipped recipe file loads by name and matches its provenance, its embedder is validated,
``memlab eval --dense`` uses it; ``tune``'s ``compare`` and ``reuse_replays`` (what the dense
search needed) change no number and never leak a held-out question."""

import dataclasses
import json
from pathlib import Path

import pandas as pd
import pytest

pytest.importorskip("optuna")

from memlab.evaluation import DENSE_RECIPE, dense_recipe, eval_configs  # noqa: E402
from memlab.harness.sweep import apply_point  # noqa: E402
from memlab.harness.trace import TraceBuilder  # noqa: E402
from memlab.signals.dense import EMBEDDERS  # noqa: E402
from memlab.surfacing.config import (DEFAULT, RECIPE_FORMAT, get_recipe,  # noqa: E402
                                     load_recipe_file)
from memlab.tuning import ReplayEvaluator, cv_fixed, tune  # noqa: E402
from memlab.tuning import evaluate as tuning_evaluate  # noqa: E402

RECIPE_FILE = Path(__file__).resolve().parent.parent / "memlab" / "recipes" / "dense.json"
START_FILE = Path(__file__).resolve().parent.parent / "benchmarks" / "recipes" / \
    "dense-start.json"


def _shipped() -> dict:
    return json.loads(RECIPE_FILE.read_text())


# ----------------------------------------------------------------------------- the recipe file
def test_dense_recipe_loads_by_name_and_matches_its_provenance(monkeypatch):
    monkeypatch.delenv("MEMLAB_RECIPE_PATH", raising=False)
    data = _shipped()
    assert data["format"] == RECIPE_FORMAT and data["name"] == DENSE_RECIPE
    config = get_recipe("dense")
    assert config == get_recipe("DENSE") == load_recipe_file(RECIPE_FILE)
    assert config.name == "dense" and config.dense is not None
    prov = data["provenance"]
    # made by memlab tune, grouped 5-fold CV, seeded, paired with the base recipe
    assert prov["command"].startswith("memlab tune ")
    assert prov["folds"] == 5 and prov["seed"] == 0 and prov["group_by"] in ("workspace",
                                                                             "question")
    assert prov["compare"] == "default-nobudget" and prov["base"] == "dense-start"
    assert {s["name"] for s in prov["space"]} >= {"dense.embedder", "dense.weight",
                                                  "dense.sentence_weight", "dense.fusion"}
    assert len(prov["fold_scores"]) == 5
    assert prov["cv"]["cv_mean"] == pytest.approx(sum(prov["fold_scores"]) / 5, abs=1e-9)
    # the configuration is the search's start with the shipped parameters (the search's
    # embedder; weights only where they held out: see the README), the graph stages' budgets
    # restored to DEFAULT's (the search ran without them so that it reproduces)
    start = load_recipe_file(START_FILE)
    assert prov["shipped_params"]["dense.embedder"] == prov["best_params"]["dense.embedder"]
    assert set(prov["shipped_params"]) == set(prov["best_params"])
    assert prov["decision"]
    chosen = apply_point(start, prov["shipped_params"])
    assert config.dense == chosen.dense
    assert config.replace(dense=None, name="default") == DEFAULT, \
        "DEFAULT changed: re-run the command in dense.json's provenance"
    assert config.ppr.budget_ms == DEFAULT.ppr.budget_ms
    assert config.spreading.budget_ms == DEFAULT.spreading.budget_ms
    assert chosen.replace(ppr=config.ppr, spreading=config.spreading, name="dense") == config


def test_dense_recipe_names_a_registered_embedder_with_its_reason():
    prov = _shipped()["provenance"]
    assert get_recipe("dense").dense.embedder in EMBEDDERS
    assert prov["embedder_reason"] and get_recipe("dense").dense.embedder in \
        prov["embedder_reason"]
    assert get_recipe("dense").dense.cache_dir is None  # no machine's path in a shipped recipe


def test_a_dense_recipe_naming_an_unknown_embedder_is_refused(tmp_path, monkeypatch):
    data = _shipped()
    data["config"]["dense"]["embedder"] = "no-such-embedder"
    path = tmp_path / "dense.json"
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match=r"not a valid configuration: dense is not a valid "
                                         r"DenseConfig \(embedder must be one of .*got "
                                         r"'no-such-embedder'"):
        load_recipe_file(path)
    monkeypatch.setenv("MEMLAB_RECIPE_PATH", str(tmp_path))  # found by name: refused too
    with pytest.raises(ValueError, match="no-such-embedder"):
        get_recipe("dense")
    monkeypatch.delenv("MEMLAB_RECIPE_PATH")
    with pytest.raises(ValueError, match=r"embedder must be one of .*got 'nope'"):
        dense_recipe("nope")


def test_eval_dense_rows_are_the_dense_recipe(monkeypatch):
    monkeypatch.delenv("MEMLAB_EMBEDDER", raising=False)
    monkeypatch.delenv("MEMLAB_RECIPE_PATH", raising=False)
    configs = eval_configs(dense=True)
    config, analyzer = configs["memlab DEFAULT + dense"]
    assert config == get_recipe("dense") and analyzer == "porter"
    assert configs["memlab DEFAULT + dense, no graph"][0].dense == config.dense
    # another embedder: the recipe's other settings, that embedder, and the row says which
    other = next(name for name in ("hashing", "minilm-static") if name != config.dense.embedder)
    swapped = eval_configs(embedder=other)[f"memlab DEFAULT + dense [{other}]"][0]
    assert swapped == config.replace(dense=dataclasses.replace(config.dense, embedder=other))
    monkeypatch.setenv("MEMLAB_EMBEDDER", other)
    assert dense_recipe().dense.embedder == other


# ----------------------------------------------------------------------------- tune: compare
def two_workspace_trace():
    b = TraceBuilder("ws", start="2024-01-01T00:00:00+00:00")
    for ws in ("alpha", "beta", "gamma"):
        b.in_workspace(ws)
        for i in range(4):
            b.add(f"{ws} fact number {i} about widget{i} and gadget{3 - i}", item_id=f"{ws}-{i}")
        for i in range(4):
            b.query(f"{ws}/q{i}", f"widget{i} gadget{i} {ws}", gold=[f"{ws}-{i}"])
    return b.build()


def test_compare_pairs_the_folds_with_another_recipe():
    trace = two_workspace_trace()
    out = tune(trace, {"ppr.alpha": [0.5, 0.85]}, measure="MRR", folds=3, n_trials=2,
               group_by="workspace", seed=0, compare="bm25")
    fixed = cv_fixed(trace, "bm25", measure="MRR", folds=3, group_by="workspace", seed=0)
    assert out.folds["base_score"].round(6).tolist() == fixed.loc[0, "fold_scores"]
    assert out.manifest["compare"] == "bm25" and out.manifest["base"] == "default"
    assert out.cv.loc[0, "diff_mean"] == pytest.approx(
        (out.folds["score"] - out.folds["base_score"]).mean(), abs=1e-12)
    with pytest.raises(ValueError, match="recipe must be one of .*got 'no-such'"):
        tune(trace, {"ppr.alpha": [0.5, 0.85]}, folds=3, n_trials=1, compare="no-such")


# ----------------------------------------------------------------------------- tune: reuse
def test_reuse_replays_changes_no_number_and_never_replays_a_held_out_question(monkeypatch):
    runs = []
    real = tuning_evaluate._replay_metrics

    def spy(trace, *args):
        runs.append(frozenset(q.get("qid") for q in trace.queries))
        return real(trace, *args)

    monkeypatch.setattr(tuning_evaluate, "_replay_metrics", spy)
    trace = two_workspace_trace()
    space = {"ppr.alpha": [0.5, 0.85], "spreading.damping": [0.5, 0.7]}
    plain = tune(trace, space, measure="MRR", folds=3, n_trials=6, group_by="workspace",
                 seed=0)
    n_plain = len(runs)
    runs.clear()
    reused = tune(trace, space, measure="MRR", folds=3, n_trials=6, group_by="workspace",
                  seed=0, reuse_replays=True)
    pd.testing.assert_frame_equal(plain.cv, reused.cv)
    pd.testing.assert_frame_equal(plain.folds, reused.folds)
    assert plain.best_params == reused.best_params
    assert len(runs) < n_plain  # 4 configurations, 6 trials a search: repeats were reused
    assert reused.manifest["path"] == "replay (serial), replays reused"
    # the searches asked about the other folds only, and no replay during a fold's search
    # received one of its held-out questions (the audit is what each search was asked)
    held = [frozenset(g["qid"]) for _, g in reused.held_out.groupby("fold")]
    for i, test in enumerate(held):
        rows = reused.audit[reused.audit["study"] == i]
        assert all(not (q & test) for q in rows[rows["phase"] == "search"]["qids"])
    assert all(r for r in runs)


def test_replay_evaluator_reuse_replays_only_what_is_new():
    trace = two_workspace_trace()
    qids = [q.get("qid") for q in trace.queries]
    fresh = ReplayEvaluator(trace, "MRR")
    memo = ReplayEvaluator(trace, "MRR", reuse=True)
    a, b = DEFAULT, DEFAULT.replace(bm25_k1=0.5)
    first = memo.values_many([a, a, b], qids[:6])
    assert memo.replayed == [frozenset(qids[:6])] * 2  # a once (repeat in the batch), b once
    again = memo.values_many([a], qids[4:])
    assert memo.replayed[-1] == frozenset(qids[6:])  # only the questions a had not seen
    assert first[0].to_dict() == first[1].to_dict() == fresh.values(a, qids[:6]).to_dict()
    assert first[2].to_dict() == fresh.values(b, qids[:6]).to_dict()
    assert again[0].to_dict() == fresh.values(a, qids[4:]).to_dict()
    assert [sorted(s) for s in memo.seen[:3]] == [sorted(qids[:6])] * 3
    with pytest.raises(ValueError, match="reuse must be True or False, got 'yes'"):
        ReplayEvaluator(trace, "MRR", reuse="yes")
