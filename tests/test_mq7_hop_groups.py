"""``second_hop_features`` naming groups (issue 17, MuSiQue's dense target): a recipe may record
only some second-hop groups (``"prf"``, ``"title+homonym"``), so that a nested choice can
choose among feature groups (``memlab tune --grid second_hop_features=false,title,prf,...``);
a ranker then sees exactly those groups' features, live and from the frame alike."""

import warnings

import numpy as np
import pytest

from memlab import Memory
from memlab.datasets.synthetic import synthetic_trace
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT, SurfacingConfig
from memlab.surfacing.rerank import (EXTRA_FEATURES, FEATURES, HOP_FEATURE_GROUPS, HOP_FEATURES,
                                     candidate_features)
from memlab.surfacing.stages.ranker_features import (HOP_FEATURE_COLUMNS, HOP_GROUPS,
                                                     RANKER_FEATURE_COLUMNS, hop_groups)

from _support import (SECOND_HOP_QUERY, assert_live_ranks_as_the_frame,  # noqa: E402
                      second_hop_memory)

QUERY = SECOND_HOP_QUERY
GROUPS = ("title", "prf", "homonym")


def test_groups_partition_the_columns_and_features_in_order():
    assert tuple(HOP_GROUPS) == GROUPS == tuple(HOP_FEATURE_GROUPS)
    assert sum(HOP_GROUPS.values(), ()) == HOP_FEATURE_COLUMNS
    assert sum(HOP_FEATURE_GROUPS.values(), ()) == HOP_FEATURES


@pytest.mark.parametrize("value, canonical", [
    (False, False), (True, True), ("prf", "prf"), ("PRF", "prf"), (" title ", "title"),
    ("prf+title", "title+prf"), (["homonym", "title"], "title+homonym"), (("prf",), "prf"),
    ("title+prf+homonym", True), (["homonym", "prf", "title"], True),
])
def test_the_option_takes_groups_and_keeps_one_canonical_value(value, canonical):
    config = DEFAULT.replace(second_hop_features=value)
    assert config.second_hop_features == canonical
    assert SurfacingConfig.from_dict(config.to_dict()) == config
    assert hop_groups(config.second_hop_features) == hop_groups(value)


@pytest.mark.parametrize("value", ["yes", "", "prf+", "prf+prf", [], ["prf", "prf"], ["nope"],
                                   1, 0, None, 1.0, {"prf": True}, ["prf", 1]])
def test_a_bad_value_is_refused_by_name(value):
    with pytest.raises(ValueError, match="second_hop_features") as err:
        DEFAULT.replace(second_hop_features=value)
    assert repr(value) in str(err.value)


def _memory(option, **more) -> Memory:
    return second_hop_memory(option, **more)


def _record(mem: Memory) -> dict:
    mem.get_working_context("s", QUERY)
    return mem.last_context_record.candidates


@pytest.mark.parametrize("option", ["title", "prf", "homonym", "title+homonym", "prf+homonym"])
def test_a_group_records_only_its_columns_with_the_values_of_all(option):
    every = _record(_memory(True))
    some = _record(_memory(option))
    wanted = [c for g in hop_groups(option) for c in HOP_GROUPS[g]]
    recorded = [c for c in some if c.startswith("rf_")]
    assert recorded == [c for c in HOP_FEATURE_COLUMNS if c in wanted]
    assert some["item_id"] == every["item_id"]  # no order changes
    for column in wanted:
        assert list(some[column]) == list(every[column]), column
    # the planted evidence is where it should be
    row = {i: r for r, i in enumerate(some["item_id"])}
    if "title" in option:
        assert some["rf_hop_title_top1"][row["lindau"]] == 1.0
    if "prf" in option:
        assert some["rf_hop_prf_content"][row["lindau"]] > some["bm25"][row["lindau"]] > 0
    if "homonym" in option:
        assert some["rf_hop_homonym"][row["homonym"]] == 1.0


def test_groups_with_a_dense_recipe_and_the_other_feature_stage():
    from memlab.signals.dense import DenseConfig
    dense = DenseConfig(embedder="hashing", cache_dir="")
    every = _record(_memory(True, dense=dense, ranker_features=True))
    prf = _record(_memory("prf", dense=dense, ranker_features=True))
    assert [c for c in prf if c.startswith("rf_")] == \
        list(RANKER_FEATURE_COLUMNS) + list(HOP_GROUPS["prf"])
    for column in RANKER_FEATURE_COLUMNS + HOP_GROUPS["prf"]:
        assert list(prf[column]) == list(every[column]), column
    assert any(v != 0.0 for v in prf["rf_hop_dense_top1"])


def _base_columns(n=3) -> dict:
    cols = {name: [1.0, 3.0, 2.0][:n] for name in (
        "bm25", "dense", "relevance", "relevance_term", "recency", "activation",
        "centrality_raw", "centrality", "freshness", "multiplier", "score")}
    cols.update(title_match=[False, True, False], exact_match=[False] * 3,
                source=["relevance", "spread", "dense"])
    return cols


def test_the_feature_builder_reads_each_recorded_group():
    hop = {name: [float(i), 2.0 * i, 0.5] for i, name in enumerate(HOP_FEATURE_COLUMNS)}
    every = candidate_features({**_base_columns(), **hop}, "deep:multi-hop", 5)
    assert list(every.columns) == list(FEATURES + HOP_FEATURES)
    for option in ("title", "prf", "homonym", "title+prf", "prf+homonym", "title+homonym"):
        groups = hop_groups(option)
        cols = {c: v for c, v in hop.items() if any(c in HOP_GROUPS[g] for g in groups)}
        f = candidate_features({**_base_columns(), **cols}, "deep:multi-hop", 5)
        expected = [name for g in groups for name in HOP_FEATURE_GROUPS[g]]
        assert list(f.columns) == list(FEATURES) + expected
        # the same values as with every group recorded (shares and ranks within the group)
        assert f.equals(every[list(f.columns)])
    # a group counts only when all its columns are there
    partial = {c: hop[c] for c in HOP_GROUPS["prf"][:2]}
    assert list(candidate_features({**_base_columns(), **partial}, "x", 5).columns) == \
        list(FEATURES)
    rf = {name: [0.0] * 3 for name in RANKER_FEATURE_COLUMNS}
    both = candidate_features({**_base_columns(), **rf,
                               **{c: hop[c] for c in HOP_GROUPS["homonym"]}}, "x", 5)
    assert list(both.columns) == list(FEATURES + EXTRA_FEATURES + HOP_FEATURE_GROUPS["homonym"])


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace(300, 48, seed=4)


@pytest.fixture(scope="module")
def replays(trace):
    # plain replays: needs neither sklearn nor lightgbm (the tests training models skip alone)
    return {option: replay(trace, DEFAULT.replace(second_hop_features=option),
                           measures=["R@10", "MRR"])
            for option in (True, "prf", "title+homonym")}


def test_a_group_replay_is_the_full_replay_without_the_other_columns(replays):
    every = replays[True]
    for option in ("prf", "title+homonym"):
        live = replays[option]
        dropped = [c for c in HOP_FEATURE_COLUMNS if c not in live.candidates]
        assert dropped and len(dropped) < len(HOP_FEATURE_COLUMNS)
        assert live.candidates.equals(every.candidates.drop(columns=dropped))
        np.testing.assert_array_equal(live.metrics["value"], every.metrics["value"])


@pytest.mark.parametrize("kind, option", [("logistic", "prf"), ("lambdarank", "prf"),
                                          ("lambdarank", "title+homonym")])
def test_the_model_sees_its_groups_and_ranks_live_as_on_the_frame(trace, replays, kind,
                                                                  option, tmp_path):
    pytest.importorskip("sklearn")
    pytest.importorskip("lightgbm")
    live = replays[option]
    expected = [name for g in hop_groups(option) for name in HOP_FEATURE_GROUPS[g]]
    columns = [c for g in hop_groups(option) for c in HOP_GROUPS[g]]
    path = assert_live_ranks_as_the_frame(trace, live, kind, tmp_path, "second_hop_features",
                                          list(FEATURES) + expected, columns, value=option)
    # a recipe recording other groups (or none) refuses the model, naming the features
    other = "homonym" if option == "prf" else "prf"
    for refused in (other, False):
        with pytest.raises(ValueError, match="lack"):
            replay(trace, DEFAULT.replace(second_hop_features=refused, reranker=str(path)))


def test_the_grid_and_the_nested_choice_take_groups(trace, replays):
    pytest.importorskip("lightgbm")
    from memlab.cli import _grid
    from memlab.learn.nested import Candidate, grid_configs, nested_choose
    grid = _grid(["second_hop_features=false,title,prf,homonym,true"])
    assert grid == {"second_hop_features": [False, "title", "prf", "homonym", True]}
    points = grid_configs(DEFAULT, grid)
    assert [c.name for _, c in points] == [
        "default", "default[second_hop_features=title]", "default[second_hop_features=prf]",
        "default[second_hop_features=homonym]", "default[second_hop_features=True]"]
    configs = {c.second_hop_features: c for _, c in points}
    cands = [Candidate("default", configs[False])] + [
        Candidate(f"{configs[o].name}+lambdarank", configs[o], "lambdarank",
                  {"n_estimators": 30}) for o in ("prf", True)]
    given = {configs["prf"].name: replays["prf"], configs[True].name: replays[True]}
    out = nested_choose(trace, cands, measures=["MRR"], folds=3, group_by="question",
                        replays=given)
    assert len(out.folds) == 3 and set(out.folds["chosen"]) <= {c.label for c in cands}
    # every candidate but the plain base has a ranker, and the base cannot win here (asserted
    # so the check below cannot pass vacuously): the shipped model reads its groups only
    assert out.chosen.ranker == "lambdarank" and out.model is not None
    groups = hop_groups(out.config.second_hop_features)
    assert groups
    assert out.model.features == list(FEATURES) + [
        name for g in groups for name in HOP_FEATURE_GROUPS[g]]


def _locomo_slice():
    from memlab.datasets import load_fixture_trace
    return load_fixture_trace("locomo_sample")


@pytest.mark.parametrize("embedder", ["shipped", "hashing"])
def test_dense_conversational_records_and_ranks_as_before(embedder):
    """``dense-conversational`` (``second_hop_features`` off) records exactly the rf_* columns
    and no rf_hop_* one, its ranker reads the features it was trained on, and a replay ranks
    exactly as the ranker ranks the recorded frame (with the shipped embedder when installed,
    and with the hashing one, which needs nothing)."""
    pytest.importorskip("sklearn")
    from memlab.learn import frame_features
    from memlab.signals.dense import DenseConfig
    from memlab.surfacing.config import get_recipe
    from memlab.surfacing.rerank import load_ranker
    from memlab.tuning.evaluate import rank_frame
    recipe = get_recipe("dense-conversational")
    assert recipe.second_hop_features is False and recipe.ranker_features is True
    if embedder == "hashing":
        recipe = recipe.replace(dense=DenseConfig(**{**recipe.dense.to_dict(),
                                                     "embedder": "hashing", "cache_dir": ""}))
    else:
        pytest.importorskip("onnxruntime")
    trace = _locomo_slice()
    measures = ["R@1", "R@3", "MRR"]
    # the frame the ranker reads: the recipe without its ranker (the stage changes no order)
    live = replay(trace, recipe.replace(reranker=None), measures=measures, progress=False)
    rf = [c for c in live.candidates.columns if c.startswith("rf_")]
    assert rf == list(RANKER_FEATURE_COLUMNS)
    model = load_ranker(recipe.reranker)
    assert model.features == list(FEATURES + EXTRA_FEATURES)
    feats = frame_features(live)[0]
    assert list(feats.columns) == list(FEATURES + EXTRA_FEATURES)
    scores = model.predict(feats)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        staged = replay(trace, recipe, measures=measures, progress=False)
    key = ["qid", "item_id"]
    assert live.candidates.set_index(key)[rf].sort_index().equals(
        staged.candidates.set_index(key)[rf].sort_index())
    for measure in measures:
        offline = rank_frame(live.candidates, live.decisions, scores, measure)
        online = staged.metrics[staged.metrics["measure"] == measure].set_index("qid")["value"]
        assert offline.index.tolist() == online.index.tolist()
        np.testing.assert_array_equal(offline.to_numpy(), online.to_numpy())
    # and the order itself: the staged record ranks each question's candidates by the model
    frame = live.candidates.assign(model=scores)
    for qid, got in staged.candidates.groupby("qid", sort=False):
        want = frame[frame["qid"] == qid].sort_values(["model", "item_id"],
                                                      ascending=[False, True])
        assert got.sort_values("rank")["item_id"].tolist() == want["item_id"].tolist(), qid


def test_dense_multihop_is_the_dense_recipe_plus_its_chosen_groups_and_ranker(trace):
    """The shipped ``dense-multihop``: ``dense`` with the chosen second-hop groups and the
    chosen ranker, which reads exactly those groups' features; chosen by the nested choice over
    the groups the command declares; runnable (a replay records only its groups' columns)."""
    import json

    pytest.importorskip("lightgbm")
    from memlab.signals.dense import DenseConfig
    from memlab.surfacing.config import _RECIPE_DIR, get_recipe
    from memlab.surfacing.rerank import load_ranker
    recipe = json.loads((_RECIPE_DIR / "dense-multihop.json").read_text())
    prov = recipe["provenance"]
    assert prov["base_recipe"] == "dense" and "--group-by question" in prov["command"]
    assert "--grid second_hop_features=false,title,prf,homonym,true" in prov["command"]
    assert len(prov["candidates"]) == 20 and prov["fold_choices"] and len(prov["cv"]) == 3
    loaded, dense = get_recipe("dense-multihop"), get_recipe("dense")
    differs = {k for k, v in loaded.to_dict().items() if dense.to_dict()[k] != v}
    assert differs == {"name", "reranker", "second_hop_features"}
    assert loaded.second_hop_features == prov["chosen"]["point"]["second_hop_features"]
    model = load_ranker(loaded.reranker)
    assert model.kind == prov["chosen"]["ranker"]
    assert model.manifest["trace"]["hash"] == prov["trace"]
    assert len(model.manifest["train_qids"]) == 100
    groups = hop_groups(loaded.second_hop_features)
    assert model.features == list(FEATURES) + [n for g in groups for n in HOP_FEATURE_GROUPS[g]]
    cv = {row["measure"]: row for row in prov["cv"]}
    for row in cv.values():
        assert row["ci_low"] <= row["cv_mean"] <= row["ci_high"]
        assert np.isclose(row["diff_mean"], row["cv_mean"] - row["base_cv_mean"])
    # runnable anywhere (the hashing embedder needs no model files): its groups' columns only
    cheap = loaded.replace(dense=DenseConfig(**{**loaded.dense.to_dict(), "embedder": "hashing",
                                                "cache_dir": ""}))
    out = replay(trace, cheap, measures=["MRR"], progress=False)
    assert [c for c in out.candidates if c.startswith("rf_")] == \
        [c for g in groups for c in HOP_GROUPS[g]]
