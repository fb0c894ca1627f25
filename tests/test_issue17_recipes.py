"""Issue 17 item 4: the recipes re-chosen by a nested grouped-CV procedure.

A nested choice never reads its held-out fold (neither the choice nor any model), the command
writes a recipe file with its ranker and provenance, and every recipe shipped in
``memlab/recipes`` loads by name and equals what its provenance says it is.
"""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("lightgbm")

from memlab.cli import main  # noqa: E402
from memlab.datasets.synthetic import synthetic_trace  # noqa: E402
from memlab.harness.replay import replay  # noqa: E402
from memlab.surfacing.config import (DEFAULT, _RECIPE_DIR, get_recipe,  # noqa: E402
                                     load_recipe_file)
from memlab.surfacing.rerank import load_ranker  # noqa: E402
from memlab.learn.nested import (Candidate, grid_configs, nested_choose,  # noqa: E402
                                  parse_ranker_spec)

# the recipes a nested choice shipped (the dense recipe, a tune search's output, has its own
# tests in test_issue17_dense_recipe.py)
SHIPPED = sorted(p for p in _RECIPE_DIR.glob("*.json") if not p.name.endswith(".ranker.json")
                 and json.loads(p.read_text())["provenance"].get("procedure", "").startswith(
                     "nested grouped CV"))


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace(300, 45, seed=4)


@pytest.fixture(scope="module")
def live(trace):
    return replay(trace, DEFAULT, measures=["MRR", "R@10"], record_candidates=True,
                  progress=False)


CANDIDATES = [Candidate("default", DEFAULT),
              Candidate("default+logistic", DEFAULT, "logistic"),
              Candidate("default+lambdarank", DEFAULT, "lambdarank", {"n_estimators": 30})]


def _run(trace, live):
    return nested_choose(trace, CANDIDATES, measures=["MRR", "R@10"], folds=3,
                         group_by="question", seed=0, replays={"default": live})


def test_the_nested_choice_never_reads_its_held_out_fold(trace, live):
    out = _run(trace, live)
    assert len(out.audit) == 3
    for row in out.audit.itertuples():
        held = set(row.held_out)
        assert held and not held & set(row.choice_read)
        # every model fitted for this fold: inner (k-1 per ranker candidate) and outer (1 each)
        assert len(row.models_trained_on) == 2 * (2 + 1)
        for trained in row.models_trained_on:
            assert trained and not held & set(trained)
    assert sorted(q for r in out.audit.itertuples() for q in r.held_out) == \
        sorted(q for s in out.split for q in s)


def test_planting_the_held_out_fold_changes_no_choice_made_for_it(trace, live):
    """Leakage by intervention: make a fold's held-out questions gold-perfect for the ranker
    candidates' frames and the plain candidate's values; the choice and inner scores of that
    fold must not move (they may only read the other folds)."""
    before = _run(trace, live)
    test = set(before.split[0])
    planted = replay(trace, DEFAULT, measures=["MRR", "R@10"], record_candidates=True,
                     progress=False)
    m = planted.metrics
    m.loc[m["qid"].isin(test), "value"] = 1.0
    c = planted.candidates
    inside = c["qid"].isin(test).to_numpy()
    c.loc[inside, "gold"] = np.where(c.loc[inside, "source"] == "relevance", 1.0, 0.0)
    after = _run(trace, planted)
    inner_before = before.inner[before.inner["fold"] == 0].reset_index(drop=True)
    inner_after = after.inner[after.inner["fold"] == 0].reset_index(drop=True)
    pd.testing.assert_frame_equal(inner_before, inner_after)
    assert before.folds.loc[0, "chosen"] == after.folds.loc[0, "chosen"]
    # ... while the planted fold's own held-out score of the plain candidate does move
    assert after.candidates.query("candidate == 'default' and measure == 'MRR'")[
        "fold_scores"].iloc[0][0] == 1.0


def test_the_shipped_choice_is_the_best_candidate_cv_and_its_model_sees_every_question(
        trace, live):
    out = _run(trace, live)
    select = out.candidates[out.candidates["measure"] == "MRR"].reset_index(drop=True)
    assert out.chosen.label == select.loc[int(np.argmax(select["cv_mean"])), "candidate"]
    if out.chosen.ranker:
        assert set(out.model.manifest["train_qids"]) == {q for s in out.split for q in s}
    row = out.table.iloc[0]
    assert row["folds_better"] + row["folds_worse"] <= 3
    assert np.isclose(row["cv_mean"], out.folds["MRR"].mean())


def test_arguments_are_checked():
    with pytest.raises(ValueError, match="ranker"):
        Candidate("x", DEFAULT, "forest")
    with pytest.raises(ValueError, match="need a ranker"):
        Candidate("x", DEFAULT, None, {"C": 1.0})
    with pytest.raises(ValueError, match="distinct labels"):
        nested_choose(synthetic_trace(100, 20, seed=1), [Candidate("a", DEFAULT)] * 2,
                      measures=["MRR"], folds=3, group_by="question")
    with pytest.raises(ValueError, match="folds must be at least 3"):
        nested_choose(synthetic_trace(100, 20, seed=1), [Candidate("a", DEFAULT)],
                      measures=["MRR"], folds=2, group_by="question")
    assert parse_ranker_spec("logistic:C=0.1") == ("logistic", {"C": 0.1})
    for bad in ("forest", "none:C=1", "logistic:C", "logistic:C=abc", ""):
        with pytest.raises(ValueError):
            parse_ranker_spec(bad)
    with pytest.raises(ValueError, match="strategies.nope"):
        grid_configs(DEFAULT, {"strategies.nope": ["plain"]})
    names = [c.name for _, c in grid_configs(
        DEFAULT, {"strategies.temporal:windowed": ["temporal", "temporal_multi_hop"]})]
    assert names == ["default", "default[temporal:windowed=temporal_multi_hop]"]


def test_the_command_writes_a_recipe_with_its_ranker_and_provenance(tmp_path, capsys,
                                                                     monkeypatch):
    monkeypatch.setattr("sys.argv", ["memlab", "tune", "synthetic:300:45"])
    code = main(["tune", "synthetic:300:45", "--group-by", "question", "--folds", "3",
                 "--measure", "MRR", "--also", "R@10", "--rankers", "logistic",
                 "--no-graph-budgets", "--name", "mine", "--out", str(tmp_path)])
    assert code == 0
    printed = capsys.readouterr().out
    assert "nested grouped 3-fold CV" in printed and "in-sample" in printed
    recipe = json.loads((tmp_path / "mine.json").read_text())
    prov = recipe["provenance"]
    assert prov["command"].startswith("memlab tune synthetic:300:45")
    assert prov["folds"] == 3 and prov["seed"] == 0 and prov["select_on"] == "MRR"
    config = load_recipe_file(tmp_path / "mine.json")
    assert config.name == "mine"
    # budgets were off only in the replays: the recipe keeps the base's
    assert config.ppr.budget_ms == DEFAULT.ppr.budget_ms
    if prov["chosen"]["ranker"]:
        assert Path(config.reranker) == (tmp_path / "mine.ranker.json").resolve()
        assert load_ranker(config.reranker).kind == prov["chosen"]["ranker"]
    else:
        assert config.reranker is None
    for csv in ("nested.csv", "folds.csv", "candidates.csv", "inner.csv"):
        assert (tmp_path / csv).is_file()


def test_the_command_refuses_what_a_nested_choice_cannot_do(tmp_path, capsys):
    assert main(["tune", "synthetic:100:20", "--rankers", "forest", "--out",
                 str(tmp_path)]) != 0
    assert "--rankers forest" in capsys.readouterr().err
    assert main(["tune", "synthetic:100:20", "--rankers", "logistic", "--space",
                 "ppr.alpha=0.5,0.8", "--out", str(tmp_path)]) != 0
    assert "--space cannot be combined" in capsys.readouterr().err
    assert main(["tune", "synthetic:100:20", "--also", "MRR", "--out", str(tmp_path)]) != 0


def _expected(recipe: dict):
    """The configuration a shipped recipe's provenance says it is: the base recipe with the
    chosen grid point, and the chosen ranker file beside it."""
    prov = recipe["provenance"]
    base = get_recipe(prov["base_recipe"])
    point = prov["chosen"]["point"]
    config = grid_configs(base, {k: [v] for k, v in point.items()})[-1][1] if point else base
    config = config.replace(name=recipe["name"])
    if prov["chosen"]["ranker"]:
        config = config.replace(reranker=str(_RECIPE_DIR / f"{recipe['name']}.ranker.json"))
    return config


@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_a_shipped_recipe_loads_by_name_and_is_what_its_provenance_says(path):
    recipe = json.loads(path.read_text())
    prov = recipe["provenance"]
    assert prov["command"].startswith("memlab tune ")
    assert f"--name {recipe['name']}" in prov["command"]
    loaded = get_recipe(path.stem)
    assert loaded == get_recipe(path.stem.upper()) == load_recipe_file(path)
    assert loaded == _expected(recipe)
    if prov["chosen"]["ranker"]:
        model = load_ranker(loaded.reranker)
        assert model.kind == prov["chosen"]["ranker"]
        for key, value in prov["chosen"]["params"].items():
            assert model.manifest["settings"][key] == value
        # the shipped model was trained on all of the trace the choice was made on
        assert model.manifest["trace"]["hash"] == prov["trace"]
        assert model.manifest["seed"] == prov["seed"] + prov["folds"]


@pytest.mark.integration
@pytest.mark.parametrize("path", SHIPPED, ids=[p.stem for p in SHIPPED])
def test_a_shipped_ranker_was_trained_on_every_judged_question_of_its_data(path):
    from memlab.cli import _load_trace
    from memlab.tuning.search import _question_frame
    recipe = json.loads(path.read_text())
    prov = recipe["provenance"]
    if not prov["chosen"]["ranker"]:
        pytest.skip("no ranker")
    trace = _load_trace(prov["command"].split()[2])
    assert trace.hash() == prov["trace"]
    cats = set(prov["categories"]) if prov["categories"] else None
    qids = set(_question_frame(trace, cats)["qid"])
    model = load_ranker(get_recipe(path.stem).reranker)
    assert set(model.manifest["train_qids"]) == qids
