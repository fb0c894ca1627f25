"""Measures the ir_measures way: a registry of measure objects parsed from names, each computed
over a run frame (qid, item_id, rank) and a qrels frame."""

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab.harness.measures import (MEASURES, Measure, evaluate, evaluate_frame, parse_measure,
                                     parse_measures, register_measure)

ids = st.sampled_from(list("abcdefgh"))


def test_every_builtin_name_parses_to_a_registered_definition():
    assert {"R", "P", "nDCG", "MRR", "Hit", "Tokens", "Latency"} <= set(MEASURES)
    assert parse_measure("nDCG@10") == Measure("nDCG", 10) and str(Measure("MRR", 5)) == "MRR@5"
    assert parse_measure("Tokens").compute([], None, tokens=12) == 12.0
    with pytest.raises(ValueError, match="needs a cutoff"):
        parse_measure("Hit")
    with pytest.raises(ValueError, match="takes no cutoff"):
        parse_measure("Latency@3")
    with pytest.raises(ValueError, match="measure must look like .* got 'Bogus@3'"):
        parse_measure("Bogus@3")


def test_a_registered_measure_parses_and_computes_everywhere():
    register_measure("Gold1", lambda top, relevant, k: float(len(top) > 0 and top[0] in relevant),
                     cutoff="none")
    try:
        m = parse_measure("Gold1")
        assert evaluate([m], ["x", "a"], {"a": 1}) == {"Gold1": 0.0}
        assert evaluate([m], ["a"], {"a": 1}) == {"Gold1": 1.0}
        with pytest.raises(ValueError, match="takes no cutoff"):
            parse_measure("Gold1@2")
    finally:
        del MEASURES["Gold1"]
    with pytest.raises(ValueError, match="name must be a word"):
        register_measure("R@5", lambda *a: 0.0)
    with pytest.raises(ValueError, match="fn must be callable"):
        register_measure("Nope", 3)
    assert "Nope" not in MEASURES


def test_evaluate_frame_pins_a_small_run():
    run = pd.DataFrame({"qid": ["q1"] * 3 + ["q2"] * 2 + ["q3"],
                        "item_id": ["a", "b", "c", "d", "e", "f"], "rank": [3, 1, 2, 1, 2, 1]})
    qrels = pd.DataFrame({"qid": ["q1", "q1", "q2"], "item_id": ["a", "c", "x"],
                          "grade": [2, 1, 0]})
    out = evaluate_frame(["R@2", "MRR", "nDCG@3"], run, qrels)
    # q1 ranks b, c, a: nDCG@3 = (1/log2 3 + 2/2) / (2 + 1/log2 3); q2 is judged with nothing
    # relevant; q3 is unjudged (left out)
    got = {(q, m): round(v, 6) for q, m, v in out.itertuples(index=False)}
    assert got == {("q1", "R@2"): 0.5, ("q1", "MRR"): 0.5, ("q1", "nDCG@3"): 0.619906,
                   ("q2", "R@2"): 0.0, ("q2", "MRR"): 0.0, ("q2", "nDCG@3"): 0.0}
    with pytest.raises(ValueError, match=r"run must be a DataFrame with columns .*'rank'"):
        evaluate_frame(["MRR"], run.drop(columns="rank"), qrels)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(rankings=st.lists(st.lists(ids, max_size=8), min_size=1, max_size=4),
       golds=st.lists(st.dictionaries(ids, st.integers(0, 3), max_size=5), min_size=4,
                      max_size=4), cutoff=st.integers(1, 6))
def test_evaluate_frame_is_ir_measures_on_random_runs(rankings, golds, cutoff):
    ir_measures = pytest.importorskip("ir_measures")
    from ir_measures import RR, P, R, Success, nDCG

    pairs = {f"R@{cutoff}": R @ cutoff, f"P@{cutoff}": P @ cutoff,
             f"nDCG@{cutoff}": nDCG @ cutoff, "MRR": RR, f"Hit@{cutoff}": Success @ cutoff}
    rows, qrel_rows, run_dict, qrels_dict = [], [], {}, {}
    for q, ranking in enumerate(rankings):
        first = list(dict.fromkeys(ranking))
        rows += [(f"q{q}", item, pos) for pos, item in enumerate(first)]
        run_dict[f"q{q}"] = {item: float(len(first) - pos) for pos, item in enumerate(first)}
        if golds[q]:
            qrels_dict[f"q{q}"] = dict(golds[q])
            qrel_rows += [(f"q{q}", item, grade) for item, grade in golds[q].items()]
    run = pd.DataFrame(rows, columns=["qid", "item_id", "rank"])
    qrels = pd.DataFrame(qrel_rows, columns=["qid", "item_id", "grade"])
    ours = {(q, m): v for q, m, v in evaluate_frame(list(pairs), run, qrels).itertuples(
        index=False)}
    theirs = {(m.query_id, str(m.measure)): m.value
              for m in ir_measures.iter_calc(list(pairs.values()), qrels_dict, run_dict)}
    named = {str(v): k for k, v in pairs.items()}
    theirs = {(q, named[m]): v for (q, m), v in theirs.items()}
    assert set(ours) == set(theirs)
    for key, value in ours.items():
        assert value == pytest.approx(theirs[key], abs=1e-12), key
    assert parse_measures(list(pairs)) == [parse_measure(p) for p in pairs]
