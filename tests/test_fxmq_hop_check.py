"""Review 7's findings on the second-hop groups and ``dense-multihop`` (branch fxmq):

- a recipe whose ranker reads groups (or ``rf_*`` features) it does not record is refused when
  it is loaded (``get_recipe``, ``Memory(config=...)``, ``--config``), naming the ranker file,
  its groups and ``second_hop_features``; one recording groups its ranker does not read warns;
- the nested choice labels and records a grid point by the configuration's canonical value;
- the nested choice's folds record the split's seed and held-out question ids, and
  ``benchmarks/nested_vs_recipes.py`` checks fold membership, not only sizes;
- ``benchmarks/ranker_features_cost.py`` alternates the configurations' order per round.
"""

import json
import shutil
import warnings

import numpy as np
import pandas as pd
import pytest

from memlab import Memory
from memlab.surfacing.config import (DEFAULT, _RECIPE_DIR, check_reranker_file, get_recipe,
                                     load_recipe_file)
from memlab.surfacing.rerank import HOP_FEATURE_GROUPS, HOP_FEATURES
from memlab.surfacing.stages.ranker_features import HOP_GROUPS


def _recipe_copy(tmp_path, name: str, **changes):
    """``name``'s shipped recipe file with ``changes`` to its config, beside a copy of its
    ranker file (as memlab tune writes them)."""
    data = json.loads((_RECIPE_DIR / f"{name}.json").read_text())
    data["config"].update(changes, name=f"{name}-changed")
    shutil.copy(_RECIPE_DIR / f"{name}.ranker.json", tmp_path / f"{name}.ranker.json")
    path = tmp_path / f"{name}-changed.json"
    path.write_text(json.dumps(data))
    return path


@pytest.mark.parametrize("value", ["title", "homonym", "title+homonym", False])
def test_a_recipe_lacking_its_rankers_groups_is_refused_by_get_recipe(tmp_path, value):
    path = _recipe_copy(tmp_path, "dense-multihop", second_hop_features=value)
    with pytest.raises(ValueError) as err:
        get_recipe(str(path))
    message = str(err.value)
    assert "dense-multihop.ranker.json" in message
    assert "reads the second-hop group(s) ['prf']" in message
    assert f"second_hop_features={value!r}" in message
    assert "second_hop_features='prf'" in message  # the fix it suggests


def test_a_config_lacking_its_rankers_groups_is_refused_by_memory_before_any_query():
    shipped = get_recipe("dense-multihop")
    for value in ("title", False):
        with pytest.raises(ValueError, match=r"dense-multihop\.ranker\.json.*\['prf'\].*"
                                             rf"second_hop_features={value!r}"):
            Memory(surfacing_mode="router", config=shipped.replace(second_hop_features=value))


def test_a_ranker_reading_rf_features_needs_ranker_features():
    lacking = get_recipe("dense-conversational").replace(ranker_features=False)
    with pytest.raises(ValueError, match=r"ranker_features=False .*rf_\*"):
        Memory(surfacing_mode="router", config=lacking)


def test_the_cli_config_option_refuses_it(tmp_path):
    from memlab.cli import _Fail, _load_config
    path = _recipe_copy(tmp_path, "dense-multihop", second_hop_features="homonym")
    with pytest.raises(_Fail, match=r"--config .*dense-multihop\.ranker\.json.*"
                                    r"second_hop_features='homonym'"):
        _load_config(str(path))
    # a bare SurfacingConfig.to_dict() file naming the ranker is checked the same way
    config = get_recipe("dense-multihop").replace(second_hop_features="title")
    plain = tmp_path / "plain.json"
    plain.write_text(json.dumps(config.to_dict()))
    with pytest.raises(_Fail, match=r"second_hop_features='title'"):
        _load_config(str(plain))


@pytest.mark.parametrize("value, unread", [(True, "['title', 'homonym']"),
                                           ("prf+homonym", "['homonym']")])
def test_a_recipe_recording_more_groups_than_its_ranker_reads_warns(tmp_path, value, unread):
    path = _recipe_copy(tmp_path, "dense-multihop", second_hop_features=value)
    with pytest.warns(UserWarning, match=r"records the second-hop group\(s\) "
                                         + unread.replace("[", r"\[").replace("]", r"\]")):
        config = load_recipe_file(path)
    assert config.second_hop_features == value
    with pytest.warns(UserWarning, match="cost CPU"):
        Memory(surfacing_mode="router", config=config)


@pytest.mark.parametrize("name", ["dense-multihop", "dense-conversational", "multihop",
                                  "conversational"])
def test_the_shipped_recipes_load_without_a_warning(name):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        config = get_recipe(name)
        check_reranker_file(config)
        Memory(surfacing_mode="router", config=config)


def test_the_hop_feature_groups_are_derived_from_the_stages_groups():
    from memlab.surfacing.rerank import _hop_feature_names
    for group, columns in HOP_GROUPS.items():
        assert HOP_FEATURE_GROUPS[group] == _hop_feature_names(columns)
        # each column gives its own feature, first
        assert [f"hop_{c.removeprefix('rf_hop_')}" for c in columns] == [
            name for name in HOP_FEATURE_GROUPS[group] if name.startswith("hop_")
            and not name.endswith("_share")]
    assert HOP_FEATURES == sum(HOP_FEATURE_GROUPS.values(), ())


def test_grid_points_are_labelled_and_recorded_by_the_canonical_value():
    from memlab.learn.nested import grid_configs
    points = grid_configs(DEFAULT, {"second_hop_features": ["prf+title", "PRF",
                                                            "title+prf+homonym", " Homonym "]})
    assert [(p, c.name) for p, c in points[1:]] == [
        ({"second_hop_features": "title+prf"}, "default[second_hop_features=title+prf]"),
        ({"second_hop_features": "prf"}, "default[second_hop_features=prf]"),
        ({"second_hop_features": True}, "default[second_hop_features=True]"),
        ({"second_hop_features": "homonym"}, "default[second_hop_features=homonym]")]
    for point, config in points[1:]:
        assert point["second_hop_features"] == config.second_hop_features
        # the recorded point rebuilds the same configuration (as memlab tune's recipe does)
        again = grid_configs(DEFAULT, {k: [v] for k, v in point.items()})[-1][1]
        assert again == config


def test_a_nested_stage_key_is_recorded_as_the_stage_keeps_it():
    from memlab.learn.nested import grid_configs
    points = grid_configs(DEFAULT, {"ppr.alpha": [0.5], "spelling_weight": [0.2]})
    assert points[-1][0] == {"ppr.alpha": 0.5, "spelling_weight": 0.2}
    assert points[-1][1].name == "default[ppr.alpha=0.5,spelling_weight=0.2]"


@pytest.fixture(scope="module")
def nested_plain():
    """A nested choice among plain configurations (no ranker: needs neither extra)."""
    from memlab.datasets.synthetic import synthetic_trace
    from memlab.learn.nested import Candidate, nested_choose
    trace = synthetic_trace(300, 40, seed=4)
    cands = [Candidate("default", DEFAULT),
             Candidate("spelling", DEFAULT.replace(spelling_weight=0.2, name="spelling"))]
    return trace, nested_choose(trace, cands, measures=["MRR"], folds=4, group_by="question",
                                seed=7)


def test_the_nested_folds_record_the_seed_and_held_out_questions(nested_plain):
    _, out = nested_plain
    assert out.folds["seed"].tolist() == [7] * 4
    recorded = [json.loads(q) for q in out.folds["qids"]]
    assert recorded == [sorted(str(q) for q in fold) for fold in out.split]
    assert [len(q) for q in recorded] == out.folds["n_test"].tolist()


def test_nested_vs_recipes_checks_fold_membership_not_only_sizes(nested_plain, tmp_path):
    from benchmarks.nested_vs_recipes import same_split
    from memlab.tuning.search import _groups, _question_frame
    trace, out = nested_plain
    out.folds.to_csv(tmp_path / "folds.csv", index=False)  # as memlab tune --out writes it
    folds = pd.read_csv(tmp_path / "folds.csv")
    groups = _groups(_question_frame(trace, None), "question")
    assert same_split(folds, groups) == out.split
    # the same sizes, other members: refused (a size check cannot see this)
    swapped = folds.copy()
    a, b = json.loads(folds.loc[0, "qids"]), json.loads(folds.loc[1, "qids"])
    a[0], b[0] = b[0], a[0]
    swapped.loc[0, "qids"], swapped.loc[1, "qids"] = json.dumps(a), json.dumps(b)
    assert [len(json.loads(q)) for q in swapped["qids"]] == folds["n_test"].tolist()
    with pytest.raises(ValueError, match="fold 0"):
        same_split(swapped, groups)
    # another seed deals other folds of the same sizes: refused
    with pytest.raises(ValueError, match="differs"):
        same_split(folds.assign(seed=0), groups)
    with pytest.raises(ValueError, match=r"lacks the column\(s\) \['seed', 'qids'\]"):
        same_split(folds.drop(columns=["seed", "qids"]), groups)


def test_ranker_features_cost_alternates_the_order_per_round(monkeypatch, capsys):
    import benchmarks.ranker_features_cost as bench
    calls = []

    def fake_replay(trace, config, **kwargs):
        calls.append(config.second_hop_features)
        np.linalg.svd(np.ones((60, 60)) + np.eye(60))  # some CPU, so no ratio divides by 0

    monkeypatch.setattr(bench, "_shared_trace", lambda spec: spec)
    monkeypatch.setattr(bench, "replay", fake_replay)
    bench.main(["musique", "--rounds", "3", "--second-hop", "PRF+title", "true"])
    order = [False, "title+prf", True]
    assert calls == order + order + order[::-1] + order  # warm-up, then rounds 0, 1, 2
    assert "dense+hop=PRF+title" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        bench.main(["musique", "--second-hop", "prf,title"])
    with pytest.raises(SystemExit):
        bench.main(["musique", "--second-hop", "nope"])
