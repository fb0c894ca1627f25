"""Issue 13, items 2 and 3: measures with trec_eval / ir_measures semantics on every edge case,
checked to lie in [0, 1] on every replay, and the choice of the ranking they read."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab.cli import main
from memlab.harness import Experiment, TraceBuilder, replay, rescore, sweep
from memlab.harness.measures import (Measure, MeasureRangeError, evaluate, parse_measure,
                                     parse_measures)

ALL = ["R@1", "R@2", "R@5", "P@1", "P@2", "P@5", "nDCG@1", "nDCG@2", "nDCG@5", "MRR", "MRR@1",
       "MRR@2", "Hit@1", "Hit@2", "Hit@5"]


def anchored_trace():
    """A session whose goal anchor surfaces first on every query (and is never gold)."""
    return (TraceBuilder("anchored", start="2024-01-01T00:00:00+00:00")
            .anchor("s1", "ship the release on Friday", item_id="goal")
            .add("We picked JWT because sessions did not scale", item_id="a")
            .add("Lunch on Friday is pizza", item_id="b")
            .query("q1", "why JWT", gold=["a"], session_id="s1")
            .query("q2", "lunch pizza", gold={"b": 2}, session_id="s1")
            .build())


# ---------------------------------------------------------------------------- item 2
def test_issue13_duplicate_ranking_is_scored_once():
    values = evaluate(parse_measures(["R@2", "P@2", "nDCG@2", "MRR", "Hit@1"]),
                      ["a", "a", "b"], {"a": 1})
    assert values == {"R@2": 1.0, "P@2": 0.5, "nDCG@2": 1.0, "MRR": 1.0, "Hit@1": 1.0}
    # the first occurrence wins: a later repeat does not move an item up
    assert parse_measure("MRR").compute(["x", "a", "x", "a"], {"a": 1}) == 0.5
    assert parse_measure("R@2").compute(["x", "x", "a"], {"a": 1}) == 1.0


def test_issue13_judged_without_relevant_scores_zero():
    judged_none = {"a": 0, "b": 0}
    assert evaluate(parse_measures(ALL), ["a", "b"], judged_none) == {m: 0.0 for m in ALL}
    # no judgements at all: left out (None), for gold None and for empty gold
    assert evaluate(parse_measures(ALL), ["a"], None) == {}
    assert evaluate(parse_measures(ALL), ["a"], {}) == {}
    trace = (TraceBuilder("judged", start="2024-01-01T00:00:00+00:00")
             .add("JWT was picked because sessions did not scale", item_id="a")
             .query("q1", "why JWT", gold={"a": 0})
             .query("q2", "why JWT", gold={"a": 1})
             .query("q3", "why JWT").build())
    result = replay(trace, measures=["R@2", "MRR"])
    metrics = result.metrics.set_index(["qid", "measure"])["value"].to_dict()
    assert metrics == {("q1", "R@2"): 0.0, ("q1", "MRR"): 0.0,
                       ("q2", "R@2"): 1.0, ("q2", "MRR"): 1.0}
    assert result.summary()["MRR"] == 0.5  # the judged-but-empty query is in the mean
    assert result.manifest["unjudged_queries"] == 1


def test_issue13_measures_are_checked_in_unit_interval_on_every_replay(monkeypatch):
    trace = anchored_trace()
    assert replay(trace).metrics["value"].between(0, 1).all()
    original = Measure.compute

    def broken(self, ranking, gold, **kwargs):
        value = original(self, ranking, gold, **kwargs)
        return value * 2.0 + 0.5 if self.name == "R" and value is not None else value

    monkeypatch.setattr(Measure, "compute", broken)
    with pytest.raises(MeasureRangeError, match=r"measure R@2 of query 'q1' is 2.5"):
        replay(trace)
    live = replay(trace, measures=["MRR"])
    with pytest.raises(MeasureRangeError, match="R@5"):
        rescore(live, measures=["R@5"])
    # Tokens and Latency are not fractions, and are not checked
    assert evaluate(parse_measures(["Tokens"]), [], None, tokens=500) == {"Tokens": 500.0}


ids = st.sampled_from(list("abcdefgh"))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ranking=st.lists(ids, max_size=12),
       gold=st.dictionaries(ids, st.integers(0, 3), max_size=6),
       cutoff=st.integers(1, 10))
def test_measures_match_ir_measures_on_random_rankings(ranking, gold, cutoff):
    ir_measures = pytest.importorskip("ir_measures")
    from ir_measures import RR, P, R, Success, nDCG

    pairs = {f"R@{cutoff}": R @ cutoff, f"P@{cutoff}": P @ cutoff,
             f"nDCG@{cutoff}": nDCG @ cutoff, "MRR": RR, f"MRR@{cutoff}": RR @ cutoff,
             f"Hit@{cutoff}": Success @ cutoff}
    ours = evaluate(parse_measures(list(pairs)), ranking, gold)
    # trec_eval reads a run as one score per item: the first occurrence's rank decides
    first = list(dict.fromkeys(ranking))
    run = {"q": {item: float(len(first) - pos) for pos, item in enumerate(first)}}
    qrels = {"q": dict(gold)} if gold else {}
    theirs = {str(m.measure): m.value
              for m in ir_measures.iter_calc(list(pairs.values()), qrels, run)}
    if not gold:  # no judgements: neither scores the query
        assert ours == {} and theirs == {}
        return
    for name, measure in pairs.items():
        assert ours[name] == pytest.approx(theirs[str(measure)], abs=1e-12), name
        assert 0.0 <= ours[name] <= 1.0


# ---------------------------------------------------------------------------- item 3
def test_issue13_mandatory_items_left_out_of_measured_ranking():
    trace = anchored_trace()
    retrieved = replay(trace, measures=["R@1", "MRR", "nDCG@2"])
    surfaced = replay(trace, measures=["R@1", "MRR", "nDCG@2"], measure_on="surfaced")
    assert retrieved.manifest["measure_on"] == "retrieved"
    assert surfaced.manifest["measure_on"] == "surfaced"
    # the anchor holds rank 1 of every query: surfaced, R@1 is 0 and MRR 0.5
    assert retrieved.summary().to_dict() == {"R@1": 1.0, "MRR": 1.0, "nDCG@2": 1.0}
    assert surfaced.summary()["R@1"] == 0.0 and surfaced.summary()["MRR"] == 0.5
    # the frames themselves are the same; only what the measures read differs
    assert retrieved.candidates["item_id"].tolist() == surfaced.candidates["item_id"].tolist()
    assert retrieved.candidates.groupby("qid")["item_id"].first().tolist() == ["goal", "goal"]
    # the default replay is the retrieved one
    assert replay(trace, measures=["MRR"]).manifest["measure_on"] == "retrieved"


def test_measure_on_reaches_rescore_experiment_and_sweep():
    trace = anchored_trace()
    surfaced = replay(trace, measures=["MRR"], measure_on="surfaced")
    assert rescore(surfaced).summary()["MRR"] == 0.5  # the replay's own choice by default
    assert rescore(surfaced, measure_on="retrieved").summary()["MRR"] == 1.0
    old = replay(trace, measures=["MRR"], measure_on="surfaced")
    del old.manifest["measure_on"]  # a result saved before the choice existed
    assert rescore(old).manifest["measure_on"] == "surfaced"
    for measure_on, mrr in (("retrieved", 1.0), ("surfaced", 0.5)):
        out = Experiment(trace, {"a": "default"}, ["MRR"], measure_on=measure_on, n_boot=10)
        assert out.measure_on == measure_on and out.table.loc[0, "MRR"] == mrr
        assert out.results["a"].manifest["measure_on"] == measure_on
        grid = sweep(trace, {"centrality_weight": [0.0]}, measures=["MRR"], n_boot=10,
                     measure_on=measure_on)
        assert grid.measure_on == measure_on and grid.table.loc[0, "MRR"] == mrr
        counterfactual = sweep(trace, {"centrality_weight": [0.0]}, measures=["MRR"], n_boot=10,
                               measure_on=measure_on, counterfactual=True)
        assert counterfactual.table.loc[0, "MRR"] == mrr


@pytest.mark.parametrize("call", [
    lambda t, v: replay(t, measure_on=v),
    lambda t, v: Experiment(t, {"a": "default"}, measure_on=v),
    lambda t, v: sweep(t, {"centrality_weight": [0.0]}, measure_on=v),
    lambda t, v: rescore(replay(t), measure_on=v),
])
@pytest.mark.parametrize("value", ["everything", 1, "Retrieved", ""])
def test_measure_on_is_validated(call, value):
    with pytest.raises(ValueError, match=r"measure_on must be one of .*, got None"):
        replay(anchored_trace(), measure_on=None)  # rescore alone reads None as "the replay's"
    with pytest.raises(ValueError, match=r"measure_on must be one of \['retrieved', "
                                         r"'surfaced'\], got " + repr(value).replace("'", "\\'")):
        call(anchored_trace(), value)


def test_cli_measure_on_option(tmp_path, capsys):
    trace = anchored_trace().write_jsonl(tmp_path / "t.jsonl")
    assert main(["replay", str(trace), "--measures", "MRR", "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "MRR   1.0000" in out and "retrieved ranking" in out
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["measure_on"] == "retrieved"
    assert main(["replay", str(trace), "--measures", "MRR", "--measure-on", "surfaced",
                 "--out", str(tmp_path / "s")]) == 0
    out = capsys.readouterr().out
    assert "MRR   0.5000" in out and "--measure-on surfaced" in out
    assert json.loads((tmp_path / "s" / "manifest.json").read_text())["measure_on"] == "surfaced"
    assert main(["experiment", str(trace), "--config", "a=default", "--measures", "MRR",
                 "--measure-on", "surfaced", "--out", str(tmp_path / "e")]) == 0
    assert "--measure-on surfaced" in capsys.readouterr().out
    assert main(["sweep", str(trace), "--grid", "centrality_weight=0", "--measures", "MRR",
                 "--out", str(tmp_path / "w")]) == 0
    assert "--measure-on retrieved" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["replay", str(trace), "--measure-on", "all"])
    assert exc.value.code == 2
    assert "--measure-on" in capsys.readouterr().err


def test_review_pinned_gold_item_is_neither_hit_nor_miss_of_retrieval():
    """A pinned gold item surfaces because the session forced it: under ``"retrieved"`` it
    leaves the gold too, so the query is not scored 0 for showing the right item."""
    from memlab.harness import TraceBuilder
    b = TraceBuilder(name="pinned-gold", start="2024-05-11T00:00:00+00:00")
    b.add("deploy the checkout service", item_id="d")
    b.add("checkout latency dashboard", item_id="e")
    b.anchor("s", "Goal: ship checkout", item_id="goal")
    b.pin("s", "d")
    b.query("only-pinned", "deploy checkout", session_id="s", k=3, gold=["d"])
    b.query("pinned-and-retrieved", "checkout dashboard", session_id="s", k=3,
            gold=["d", "e"])
    trace = b.build()
    retrieved = replay(trace, measures=["R@2", "MRR"])
    surfaced = replay(trace, measures=["R@2", "MRR"], measure_on="surfaced")
    per_query = retrieved.metrics.pivot(index="qid", columns="measure", values="value")
    # the only gold item was pinned: nothing left to judge retrieval by
    assert "only-pinned" not in per_query.index
    assert retrieved.manifest["unjudged_queries"] == 1
    # the retrieved gold item is scored against the gold without the pinned one
    assert per_query.loc["pinned-and-retrieved"].to_dict() == {"MRR": 1.0, "R@2": 1.0}
    # surfaced scores everything, mandatory gold included
    assert surfaced.manifest["unjudged_queries"] == 0
    assert surfaced.metrics.query("qid == 'only-pinned' and measure == 'R@2'")["value"].item() \
        == 1.0
