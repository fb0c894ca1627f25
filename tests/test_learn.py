"""The learned ranking stage (issue 17 item 2): a model never sees its own fold, the live stage
ranks as the model ranks the recorded frame, models round-trip through their file."""

import json

import numpy as np
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("lightgbm")
pytest.importorskip("optuna")

from memlab.datasets.synthetic import synthetic_trace  # noqa: E402
from memlab.harness.counterfactual import rescore  # noqa: E402
from memlab.harness.replay import replay  # noqa: E402
from memlab.learn import (FEATURES, RankerModel, cv_ranker, fit_ranker,  # noqa: E402
                          frame_features, load_ranker, register_reranker)
from memlab.surfacing import rerank  # noqa: E402
from memlab.surfacing.config import DEFAULT  # noqa: E402
from memlab.tuning.evaluate import rank_frame  # noqa: E402


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace(300, 48, seed=4)


@pytest.fixture(scope="module")
def live(trace):
    return replay(trace, measures=["R@10", "MRR"])


@pytest.mark.parametrize("kind", ["logistic", "lambdarank"])
def test_a_model_never_sees_its_own_fold(trace, live, kind, monkeypatch):
    """Instrumented: every row each fold's model is fitted on belongs to a training question."""
    fitted_rows = []
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression
        real = LogisticRegression.fit

        def spy(self, x, y, *a, **kw):
            fitted_rows.append(len(x))
            return real(self, x, y, *a, **kw)
        monkeypatch.setattr(LogisticRegression, "fit", spy)
    else:
        import lightgbm
        real = lightgbm.LGBMRanker.fit

        def spy(self, x, y, *a, **kw):
            fitted_rows.append(len(x))
            assert int(np.sum(kw["group"])) == len(x)
            return real(self, x, y, *a, **kw)
        monkeypatch.setattr(lightgbm.LGBMRanker, "fit", spy)
    out = cv_ranker(trace, live=live, kind=kind, measures=["MRR"], folds=4,
                    group_by="question", seed=0)
    per_question = live.candidates.groupby("qid").size()
    assert len(out.models) == len(out.split) == 4 == len(fitted_rows)
    every = set().union(*map(set, out.split))
    for model, test, rows in zip(out.models, out.split, fitted_rows):
        trained = set(model.manifest["train_qids"])
        assert not trained & set(test)
        assert trained == every - set(test)
        assert rows == int(per_question.reindex(sorted(trained)).sum()) == \
            model.manifest["rows"]
        # ... and the fold's held-out questions are exactly what it was scored on
    for fold, test in enumerate(out.split):
        assert set(out.held_out[out.held_out["fold"] == fold]["qid"]) == set(test)


@pytest.mark.parametrize("kind", ["logistic", "lambdarank"])
def test_live_stage_ranks_as_the_model_ranks_the_frame(trace, live, kind, tmp_path):
    model = fit_ranker(live, kind=kind, seed=3)
    path = model.save(tmp_path / f"{kind}.json")
    feats, _ = frame_features(live)
    scores = model.predict(feats)
    staged = replay(trace, DEFAULT.replace(reranker=str(path)), measures=["R@10", "MRR"])
    for measure in ("R@10", "MRR"):
        offline = rank_frame(live.candidates, live.decisions, scores, measure)
        online = staged.metrics[staged.metrics["measure"] == measure].set_index("qid")["value"]
        assert offline.index.tolist() == online.index.tolist()
        np.testing.assert_array_equal(offline.to_numpy(), online.to_numpy())
    # the stage is recorded, and its score is the model's
    # recorded by name and content, not by where it lies (tests/test_left6.py)
    assert staged.manifest["config"]["reranker"] == path.name
    assert staged.manifest["reranker_file"]["name"] == path.name
    first = staged.candidates[staged.candidates["qid"] == live.decisions["qid"][0]]
    assert first["score"].is_monotonic_decreasing
    assert staged.decisions["rerank_ms"].notna().all()


def test_saved_model_round_trips_with_features_and_manifest(live, tmp_path):
    model = fit_ranker(live, kind="lambdarank", seed=1, params={"n_estimators": 20})
    path = model.save(tmp_path / "m.json")
    data = json.loads(path.read_text())
    assert data["format"] == "memlab-ranker/1" and data["features"] == list(FEATURES)
    assert data["manifest"]["settings"]["n_estimators"] == 20
    assert data["manifest"]["trace"]["hash"] == live.manifest["trace"]["hash"]
    assert data["manifest"]["base_config"] == "default"
    assert "lightgbm" in data["manifest"]["versions"]
    again = load_ranker(path)
    feats, _ = frame_features(live)
    np.testing.assert_array_equal(again.predict(feats), model.predict(feats))
    # deterministic: the same seed trains the same model
    same = fit_ranker(live, kind="lambdarank", seed=1, params={"n_estimators": 20})
    np.testing.assert_array_equal(same.predict(feats), model.predict(feats))


def test_logistic_model_is_its_sklearn_decision_function(live):
    from sklearn.linear_model import LogisticRegression
    from sklearn.preprocessing import StandardScaler
    model = fit_ranker(live, kind="logistic")
    feats, _ = frame_features(live)
    x = feats.to_numpy(dtype=float)
    scaler = StandardScaler().fit(x)
    clf = LogisticRegression(C=1.0, max_iter=2000, random_state=0).fit(
        scaler.transform(x), (live.candidates["gold"].to_numpy() > 0).astype(int))
    np.testing.assert_allclose(model.predict(feats), clf.decision_function(scaler.transform(x)),
                               rtol=1e-9, atol=1e-9)


def test_registered_reranker_is_a_recipe_stage(trace, live):
    # a "model" that ranks by BM25 alone: the stage must rank exactly by it
    register_reranker("bm25-only-test", lambda f: f["bm25"].to_numpy())
    try:
        staged = replay(trace, DEFAULT.replace(reranker="bm25-only-test"), measures=["MRR"])
        feats, _ = frame_features(live)
        offline = rank_frame(live.candidates, live.decisions, feats["bm25"].to_numpy(), "MRR")
        online = staged.metrics.set_index("qid")["value"]
        np.testing.assert_array_equal(offline.to_numpy(), online.reindex(offline.index))
    finally:
        rerank.RERANKERS.pop("bm25-only-test")


def test_cv_ranker_reports_base_on_the_same_folds(trace, live):
    out = cv_ranker(trace, live=live, kind="logistic", measures=["R@10", "MRR"], folds=3,
                    group_by="question", seed=2)
    assert out.table["measure"].tolist() == ["R@10", "MRR"]
    base = live.metrics.pivot_table(index="qid", columns="measure", values="value")
    for row in out.table.itertuples():
        expected = np.mean([base[row.measure].reindex(t).mean() for t in out.split])
        assert row.base_cv_mean == pytest.approx(expected, abs=1e-12)
        assert row.delta == pytest.approx(row.cv_mean - row.base_cv_mean, abs=1e-12)


@pytest.mark.parametrize("call, message", [
    (lambda live, trace: fit_ranker(live, kind="svm"), "kind must be one of"),
    (lambda live, trace: fit_ranker(live, features=["nope"]), "unknown \\['nope'\\]"),
    (lambda live, trace: fit_ranker(live, ["no-such-q"]), "qids names questions"),
    (lambda live, trace: fit_ranker("x"), "live must be a ReplayResult"),
    (lambda live, trace: cv_ranker(trace, live=live, measures=["Tokens"]),
     "measures must be relevance measures"),
    (lambda live, trace: cv_ranker(trace, live=live, group_by="session"), "group_by must be"),
    (lambda live, trace: cv_ranker(trace, live=live, folds=100, group_by="question"),
     "folds=100 needs at least 100 groups"),
    (lambda live, trace: cv_ranker(synthetic_trace(100, 10, seed=9), live=live),
     "live must be a ReplayResult of this trace"),
    (lambda live, trace: cv_ranker(trace, live=live, categories="ab"),
     "categories must be a list"),
    (lambda live, trace: DEFAULT.replace(reranker="unregistered"),
     "reranker names 'unregistered'"),
    (lambda live, trace: DEFAULT.replace(reranker=""), "reranker must be None"),
    (lambda live, trace: RankerModel.from_dict({"format": "x"}), "must hold a 'memlab-ranker/1'"),
    (lambda live, trace: RankerModel("tree", FEATURES, {}), "kind must be 'logistic'"),
])
def test_bad_input_raises_value_error(live, trace, call, message):
    with pytest.raises(ValueError, match=message):
        call(live, trace)


def test_missing_ranker_file_and_rescore_of_a_reranked_replay(trace, live, tmp_path):
    with pytest.raises(ValueError, match="path .*missing.json.* cannot be read"):
        replay(trace, DEFAULT.replace(reranker=str(tmp_path / "missing.json")))
    path = fit_ranker(live).save(tmp_path / "m.json")
    staged = replay(trace, DEFAULT.replace(reranker=str(path)))
    with pytest.raises(ValueError, match="replayed with a learned reranker"):
        rescore(staged)
