"""Surfacing as stages: the immutable candidate table, composition with >>, serialisation with
the recipe, per-stage timings, and a new strategy written in one file (docs/examples)."""

import importlib.util
import json
import pathlib
import sys

import numpy as np
import pandas as pd
import pytest

from memlab import DEFAULT, Memory, SurfacingConfig
from memlab.graph.ppr import PPRConfig
from memlab.surfacing.composite import CompositeWeights
from memlab.surfacing.stages import (STAGES, CandidateTable, Pipeline, QueryRun, bm25, budget,
                                     composite, mandatory, ppr, recent, signals, spread,
                                     stage_from_dict, title_match)
from memlab.surfacing.strategies import STRATEGIES, TAIL, register_strategy, strategy_pipeline

EXAMPLE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "examples" / \
    "decisions_first.py"


def _load_example():
    spec = importlib.util.spec_from_file_location("decisions_first", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    sys.modules["decisions_first"] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def decisions_first():
    module = _load_example()
    yield module
    STRATEGIES.pop("decisions_first", None)
    STAGES.pop("metadata_boost", None)
    sys.modules.pop("decisions_first", None)


def test_table_add_keeps_the_first_source_and_respects_allowed():
    allowed = np.array([True, True, False, True, True])
    t = CandidateTable.empty().add(np.array([3, 1, 3, 2]), "bm25", allowed=allowed)
    assert t.idx.tolist() == [3, 1] and t.source.tolist() == ["bm25", "bm25"]
    t2 = t.add(np.array([4, 1]), "spread", relevance=np.array([0.25, 0.5]), allowed=allowed)
    assert t2.idx.tolist() == [3, 1, 4]
    assert t2.source.tolist() == ["bm25", "bm25", "spread"]
    assert np.isnan(t2.relevance_override[:2]).all() and t2.relevance_override[2] == 0.25
    assert len(t) == 2  # the first table is unchanged


def test_table_is_immutable():
    t = CandidateTable({"idx": [0, 1], "score": [1.0, 2.0]})
    with pytest.raises(ValueError, match="read-only"):
        t.score[0] = 5.0
    with pytest.raises(AttributeError, match="immutable"):
        t.score = np.zeros(2)
    with pytest.raises(ValueError, match="'score' must have 2 rows"):
        t.with_columns(score=[1.0])
    f = t.filter(np.array([True, False]), "outside_window").filter(np.array([True, True]), "x")
    assert f.filtered.tolist() == [True, True] and f.filter_reason.tolist() == [
        "outside_window", "x"]
    assert "filtered" not in t
    assert t.take([1, 0]).score.tolist() == [2.0, 1.0]
    assert t.with_attrs(a=1).attrs["a"] == 1 and "a" not in t.attrs
    with pytest.raises(TypeError):
        t.with_attrs(a=1).attrs["a"] = 2


def test_pipeline_prints_composes_and_round_trips():
    p = bm25(50) >> title_match(0.25) >> spread(relevance="propagated") >> mandatory() >> \
        signals() >> ppr(PPRConfig(method="exact")) >> composite(CompositeWeights(
            centrality_weight=0.8)) >> budget(10, 2000)
    assert repr(p).startswith("bm25(n=50) >> title_match(weight=0.25) >> "
                              "spread(relevance='propagated') >> mandatory() >> signals() >> ppr(")
    assert repr(p).endswith(">> budget(k=10, max_tokens=2000)")
    data = p.to_dict()
    assert data[0] == {"stage": "bm25", "n": 50}
    assert data[-1] == {"stage": "budget", "k": 10, "max_tokens": 2000}
    assert Pipeline.from_dict(json.loads(json.dumps(data))) == p
    assert [s.name for s in p.tail("score")] == ["composite", "budget"]
    with pytest.raises(ValueError, match="'nope', which is not registered"):
        stage_from_dict({"stage": "nope"})
    with pytest.raises(ValueError, match="bm25: n must be None or an integer >= 1, got 0"):
        bm25(0)
    with pytest.raises(ValueError, match="title_match: weight must be None or in"):
        title_match(2.0)


def test_builtin_strategies_are_named_compositions():
    assert repr(STRATEGIES["multi_hop"]) == (
        "bm25() >> dense() >> title_match() >> fuse() >> spread() >> mandatory() >> signals() "
        ">> ppr() >> composite() >> budget()")
    assert STRATEGIES["temporal"].name == "temporal"
    assert [s.name for s in STRATEGIES["recent_items"]] == [
        "bm25", "dense", "title_match", "fuse", "recent", "mandatory", "signals", "recency_cue",
        "composite", "budget"]
    assert TAIL == composite() >> budget()


def test_timings_come_from_the_stage_names(router):
    router.add("alpha beta", item_id="a")
    router.get_working_context("s1", "why alpha and beta", strategy="deep:multi-hop")
    t = router.last_context_record.timings_ms
    ran = {"bm25", "title_match", "fuse", "spread", "mandatory", "signals", "ppr", "composite",
           "budget"}
    assert ran <= set(t) and "dense" not in t  # a disabled stage is not timed
    assert t["strategy_expand"] == t["spread"] and t["strategy_adjust"] == t["ppr"]
    assert t["relevance"] == t["bm25"] and t["select"] == t["budget"]


def test_stages_never_change_the_table_they_are_given(router):
    for i, text in enumerate(["alpha beta", "alpha gamma", "gamma delta"]):
        router.add(text, item_id=f"i{i}")
    router.add_edge("i0", "i2", "RELATED")
    mem = router
    ws = mem.store.workspace("ws-a")
    analyze, _ = ws.bm25_for(None)
    run = QueryRun(ws, DEFAULT, "alpha", analyze("alpha"), 5, mem.clock.now(),
                   lock=mem.store.lock.shared())
    table = CandidateTable.empty()
    for stage in STRATEGIES["multi_hop"]:
        if not stage.enabled(run, table):
            continue
        before = {name: table[name].copy() for name in table.columns}
        new = stage(run, table)
        for name, values in before.items():
            assert np.array_equal(table[name], values, equal_nan=values.dtype.kind == "f")
        table = new
    assert table.ranked().rank.tolist() == list(range(len(table)))
    assert set(table.item_id) == {"i0", "i1", "i2"} and table.source[table.item_id == "i2"] == \
        ["spread"]


def test_a_strategy_in_one_file_is_used_by_name_from_a_recipe(decisions_first, store, clock):
    recipe = DEFAULT.replace(name="decisions", strategies={
        **dict(DEFAULT.strategies), "fast:recency": "decisions_first"})
    mem = Memory(store=store, clock=clock, surfacing_mode="router", config=recipe)
    mem.add("alpha alpha alpha plan", item_id="strong")
    mem.add("alpha decision", item_id="picked", metadata={"kind": "decision"})
    resp = mem.get_working_context("s1", "alpha", strategy="fast:recency")
    record = mem.last_context_record
    assert record.implementation == "decisions_first"
    frame = record.candidates_frame().set_index("item_id")
    assert frame.loc["picked", "multiplier"] == 2.0 and frame.loc["strong", "multiplier"] == 1.0
    assert [it["item_id"] for it in resp["items"]] == ["picked", "strong"]
    assert "metadata_boost" in record.timings_ms
    # without the strategy the stronger BM25 match comes first
    plain = Memory(store=store, clock=clock, surfacing_mode="router", config=DEFAULT)
    assert [it["item_id"] for it in plain.get_working_context(
        "s1", "alpha", strategy="fast:recency")["items"]] == ["strong", "picked"]


def test_a_pipeline_travels_with_the_recipe(decisions_first, store, clock):
    inline = DEFAULT.replace(name="inline", strategies={
        **dict(DEFAULT.strategies), "fast:recency": decisions_first.DECISIONS_FIRST})
    data = json.loads(json.dumps(inline.to_dict()))
    assert data["strategies"]["fast:recency"][-3] == {"stage": "metadata_boost"}
    back = SurfacingConfig.from_dict(data)
    assert back == inline
    mem = Memory(store=store, clock=clock, surfacing_mode="router", config=back)
    mem.add("alpha alpha alpha plan", item_id="strong")
    mem.add("alpha decision", item_id="picked", metadata={"kind": "decision"})
    resp = mem.get_working_context("s1", "alpha", strategy="fast:recency")
    assert [it["item_id"] for it in resp["items"]] == ["picked", "strong"]
    with pytest.raises(ValueError, match="the pipeline for 'fast:recency' is invalid"):
        SurfacingConfig.from_dict({**data, "strategies": {
            **data["strategies"], "fast:recency": [{"stage": "gone"}]}})


def test_register_strategy_takes_a_pipeline_and_rejects_a_stage():
    register_strategy("fresh", strategy_pipeline("x", expand=(recent(3),)))
    try:
        assert STRATEGIES["fresh"].name == "fresh"
    finally:
        STRATEGIES.pop("fresh")
    with pytest.raises(ValueError, match="strategy must be a Pipeline"):
        register_strategy("bad", recent())
    with pytest.raises(ValueError, match="name must be a non-empty string"):
        register_strategy("", strategy_pipeline("x"))


def test_the_tail_reproduces_the_live_order_from_the_recorded_frame(router):
    for i in range(6):
        router.add(f"alpha note {i} " + "beta " * i, item_id=f"n{i}")
    router.pin_item("s1", "n5")
    router.get_working_context("s1", "alpha beta", k=3, max_tokens=200)
    record = router.last_context_record
    frame = record.candidates_frame().sample(frac=1.0, random_state=3).reset_index(drop=True)
    table = CandidateTable({**{c: frame[c].to_numpy() for c in frame.columns},
                            "idx": np.arange(len(frame)),
                            "filter_reason": np.full(len(frame), None, dtype=object)})
    run = QueryRun(None, DEFAULT, record.query, [], record.k, None, max_tokens=200)
    out = TAIL(run, table).ranked()
    assert out.item_id.tolist() == record.candidates["item_id"]
    assert out.score.tolist() == record.candidates["score"]
    assert out.surfaced.tolist() == record.candidates["surfaced"]
    assert out.attrs["tokens_used"] == record.tokens_used
    pd.testing.assert_frame_equal(
        out.to_frame()[["item_id", "rank"]],
        pd.DataFrame({"item_id": record.candidates["item_id"],
                      "rank": np.arange(len(frame))}), check_dtype=False)
