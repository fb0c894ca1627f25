"""Review 4, fix brief B: ranker settings are checked before any work (finding 2), the shipped
recipes load without a warning (finding 5), and ``memlab eval`` names the dense rows' embedder
and says its table is in-sample (finding 9)."""

import json
import warnings

import pytest

from memlab.cli import main
from memlab.surfacing.config import _RECIPE_DIR, get_recipe, load_recipe_file

RECIPES = sorted(p for p in _RECIPE_DIR.glob("*.json") if not p.name.endswith(".ranker.json"))


# -- finding 5: shipped recipes --------------------------------------------------------------

def test_there_are_shipped_recipes():
    assert {p.stem for p in RECIPES} >= {"multihop", "conversational", "dense"}


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_loading_a_shipped_recipe_raises_no_warning_at_all(path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_recipe_file(path)
        get_recipe(path.stem)


@pytest.mark.parametrize("path", RECIPES, ids=lambda p: p.stem)
def test_a_shipped_recipe_uses_no_deprecated_router_rule(path):
    from memlab.surfacing.router import ROUTER_RULE_ALIASES
    rules = json.loads(path.read_text())["config"].get("router_rules", [])
    assert not set(rules) & set(ROUTER_RULE_ALIASES)


# -- finding 2: ranker settings --------------------------------------------------------------

sklearn = pytest.importorskip("sklearn")
pytest.importorskip("lightgbm")

from memlab.learn.nested import Candidate, nested_choose, parse_ranker_spec  # noqa: E402
from memlab.learn.ranker import check_ranker_params, cv_ranker, fit_ranker  # noqa: E402

BAD = [("logistic", {"nosuch": 1}, "nosuch=1"),
       ("logistic", {"C": -1}, "C=-1"),
       ("lambdarank", {"num_leaves": 0}, "num_leaves=0"),
       ("lambdarank", {"nosuch": 1}, "nosuch=1"),
       ("lambdarank", {"random_state": 3}, "random_state=3")]


@pytest.mark.parametrize("kind,params,named", BAD)
def test_bad_ranker_settings_are_one_line_value_errors_naming_the_setting(kind, params, named):
    with pytest.raises(ValueError) as err:
        check_ranker_params(kind, params)
    text = str(err.value)
    assert named in text and "\n" not in text and " at /" not in text


def test_good_ranker_settings_pass():
    check_ranker_params("logistic", {"C": 0.1})
    check_ranker_params("lambdarank", {"num_leaves": 7, "n_estimators": 100})
    check_ranker_params("lambdarank", {"feature_fraction": 0.5})  # a LightGBM parameter
    check_ranker_params("logistic", None)
    check_ranker_params("logistic", {"class_weight": {0: 1.0, 1: 5.0}})  # unhashable value
    with pytest.raises(ValueError, match="class_weight"):
        check_ranker_params("logistic", {"class_weight": {0: -1.0, 1: "x"}})


def test_lightgbm_refusal_prints_nothing(capfd):
    with pytest.raises(ValueError):
        check_ranker_params("lambdarank", {"num_leaves": 1})
    out, err = capfd.readouterr()
    assert out == "" and err == ""


@pytest.mark.parametrize("kind,params,named", BAD)
def test_the_library_entries_refuse_bad_settings_before_any_work(kind, params, named,
                                                                  monkeypatch):
    import memlab.learn.nested as nested
    import memlab.learn.ranker as ranker

    def no_work(*args, **kwargs):
        raise AssertionError("replayed before the settings were checked")

    monkeypatch.setattr(nested, "replay", no_work)
    monkeypatch.setattr(ranker, "replay", no_work)
    monkeypatch.setattr(ranker, "frame_features", no_work)
    with pytest.raises(ValueError, match=named):
        Candidate("x", "default", kind, params)
    spec = f"{kind}:" + ",".join(f"{k}={v}" for k, v in params.items())
    with pytest.raises(ValueError, match=named):
        parse_ranker_spec(spec)
    with pytest.raises(ValueError, match=named):
        fit_ranker(object(), kind=kind, params=params)
    from memlab.datasets.synthetic import synthetic_trace
    with pytest.raises(ValueError, match=named):
        cv_ranker(synthetic_trace(50, 10, seed=1), kind=kind, params=params)
    assert nested_choose  # the entry builds Candidates, which check


@pytest.mark.parametrize("spec", ["logistic:nosuch=1", "lambdarank:num_leaves=0",
                                  "logistic:C=-1"])
def test_tune_refuses_bad_rankers_in_one_line_before_any_work(spec, tmp_path, capsys,
                                                               monkeypatch):
    import memlab.learn.nested as nested

    def no_work(*args, **kwargs):
        raise AssertionError("replayed before --rankers was checked")

    monkeypatch.setattr(nested, "replay", no_work)
    code = main(["tune", "fixture:apollo_demo", "--measure", "MRR", "--group-by", "question",
                 "--folds", "3", "--rankers", spec, "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert err.count("\n") == 0 and "Traceback" not in err
    assert f"--rankers {spec}" in err


# -- finding 9: eval names the dense rows' embedder and says it is in-sample ------------------

def _row(config):
    row = {"dataset": "musique", "subset": "all", "config": config, "queries": 3,
           "measure_on": "retrieved"}
    for m, v in (("R@2", 50.0), ("R@5", 70.0), ("R@10", 80.0), ("MRR", 55.0)):
        row.update({m: v, f"{m} ci_low": v - 5, f"{m} ci_high": v + 5})
    return row


def test_eval_notes_name_the_dense_embedder_and_say_in_sample(monkeypatch):
    from memlab.evaluation import eval_configs, eval_notes
    monkeypatch.delenv("MEMLAB_EMBEDDER", raising=False)
    own = get_recipe("dense").dense.embedder
    notes = eval_notes(eval_configs(dense=True))
    assert len(notes) == 2
    assert "'memlab DEFAULT + dense'" in notes[0] and f"embedder {own}" in notes[0]
    assert "In-sample" in notes[1] and "dense recipe" in notes[1]
    swapped = eval_notes(eval_configs(embedder="hashing"))[0]
    assert "embedder hashing" in swapped and f"recipe's own: {own}" in swapped
    plain = eval_notes(eval_configs())
    assert len(plain) == 1 and plain[0].startswith("In-sample") and "dense" not in plain[0]


def test_results_md_and_stdout_carry_the_notes_and_the_digits_are_unchanged(tmp_path, capsys,
                                                                              monkeypatch):
    import memlab.evaluation as evaluation
    monkeypatch.delenv("MEMLAB_EMBEDDER", raising=False)
    notes = evaluation.eval_notes(evaluation.eval_configs(dense=True))
    rows = [_row("memlab DEFAULT"), _row("memlab DEFAULT + dense")]
    table = evaluation._eval_table(rows, {}, tmp_path / "a", 10, 0, notes)
    bare = evaluation._eval_table(rows, {}, tmp_path / "b", 10, 0)
    md = (tmp_path / "a" / "results.md").read_text()
    for note in notes:
        assert note in md
    # the rows themselves are what they were without the notes
    bare_md = (tmp_path / "b" / "results.md").read_text()
    assert [ln for ln in md.splitlines() if ln.startswith("|")] == \
        [ln for ln in bare_md.splitlines() if ln.startswith("|")]
    assert (tmp_path / "a" / "results.csv").read_text() == \
        (tmp_path / "b" / "results.csv").read_text()
    assert "In-sample" in evaluation.interval_markdown(table, 100)
    assert "In-sample" not in evaluation.interval_markdown(bare, 100)

    def fake_run_eval(*args, **kwargs):
        return evaluation._eval_table(rows, {}, None, 10, 0, notes)

    monkeypatch.setattr(evaluation, "run_eval", fake_run_eval)
    data = tmp_path / "data"  # run_eval is faked: the files need only exist
    for name in evaluation.DATASET_FILES["locomo"] + evaluation.DATASET_FILES["musique"]:
        (data / name).parent.mkdir(parents=True, exist_ok=True)
        (data / name).write_text("[]")
    assert main(["eval", "--data", str(data), "--dense", "--out", str(tmp_path / "c")]) == 0
    out = " ".join(capsys.readouterr().out.split())
    own = get_recipe("dense").dense.embedder
    assert f"embedder {own}" in out and "In-sample" in out
