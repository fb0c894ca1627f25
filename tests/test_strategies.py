"""Each strategy of the default recipe is a different pipeline with a measurable effect."""

from datetime import timedelta

import numpy as np
import pytest

from memlab import DEFAULT, Memory
from memlab.graph.ppr import PPR_METHODS, PPRConfig, register_ppr_method
from memlab.graph.spreading import SPREAD_METHODS, SpreadConfig, register_spread_method
from memlab.surfacing.strategies import register_strategy, STRATEGIES


def test_fast_recency_adds_recent_items(router, clock):
    router.add("alpha report", item_id="old")
    for i in range(3):
        clock.advance(hours=1)
        router.add(f"unrelated note {i}", item_id=f"new{i}")
    resp = router.get_working_context("s1", "alpha", strategy="fast:recency", k=10)
    c = router.last_context_record.candidates
    assert dict(zip(c["item_id"], c["source"])) == {"old": "relevance", "new0": "recent",
                                                    "new1": "recent", "new2": "recent"}
    assert [it["item_id"] for it in resp["items"]][0] == "old"


def test_seed_compat_fast_recency_is_relevance_only(seed_router, clock):
    seed_router.add("alpha report", item_id="old")
    seed_router.add("unrelated note", item_id="new")
    seed_router.get_working_context("s1", "alpha", strategy="fast:recency")
    assert seed_router.last_context_record.candidates["item_id"] == ["old"]


def test_point_query_exact_match_boost_and_softer_recency(router, clock):
    router.add("Sizing notes for the edge cache and the edge cache eviction", item_id="notes")
    router.add("A read-through edge cache", item_id="def", metadata={"title": "Edge Cache"})
    clock.advance(hours=48)
    router.get_working_context("s1", "edge cache", strategy="factual:point-query")
    c = router.last_context_record.candidates
    row = {i: r for r, i in enumerate(c["item_id"])}
    assert c["exact_match"][row["def"]] and c["multiplier"][row["def"]] == pytest.approx(1.5)
    floor = router.config.recency_floor
    assert c["recency_term"][row["def"]] == pytest.approx(
        (floor + (1 - floor) * np.exp(-48 / 24)) ** 0.25)
    assert c["item_id"][0] == "def"


def test_procedural_prefers_procedural_items(router):
    router.add("deploy checkout notes from the meeting about deploy", item_id="talk")
    router.add("Deploy checkout: build, push canary, promote", item_id="howto",
               memory_type="procedural")
    router.get_working_context("s1", "deploy checkout", strategy="fast:recency")
    assert router.last_context_record.candidates["item_id"][0] == "talk"
    router.get_working_context("s1", "deploy checkout", strategy="procedural:lookup")
    c = router.last_context_record.candidates
    assert c["item_id"][0] == "howto" and c["multiplier"][0] == pytest.approx(2.0)


def test_temporal_window_boosts_and_restricts(store, clock):
    start = clock.now()
    mem = Memory(store=store, clock=clock, surfacing_mode="router")
    mem.add("budget review meeting", item_id="in", created_at=start + timedelta(days=1, hours=10))
    mem.add("budget planning and budget numbers", item_id="out", created_at=start + timedelta(days=5))
    mem.add("lunch order", item_id="in2", created_at=start + timedelta(days=1, hours=12))
    clock.advance(days=10)
    resp = mem.get_working_context("s1", "budget on 2 January 2024")
    rec = mem.last_context_record
    assert resp["strategy_used"] == "temporal:windowed"
    assert rec.notes["time_window"][:2] == ["2024-01-02T00:00:00+00:00", "2024-01-03T00:00:00+00:00"]
    c = rec.candidates
    assert c["item_id"][:2] == ["in", "in2"]
    assert dict(zip(c["item_id"], c["source"]))["in2"] == "window"
    strict = Memory(store=store, clock=clock, surfacing_mode="router",
                    config=DEFAULT.replace(temporal_restrict=True))
    resp = strict.get_working_context("s1", "budget on 2 January 2024")
    assert {it["item_id"] for it in resp["items"]} == {"in", "in2"}
    c = strict.last_context_record.candidates
    assert dict(zip(c["item_id"], c["drop_reason"]))["out"] == "outside_window"


def test_temporal_without_window_notes_it(router):
    router.add("alpha")
    router.get_working_context("s1", "alpha", strategy="temporal:windowed")
    assert router.last_context_record.notes["temporal"] == "no_time_window"


def test_multi_hop_records_skipped_stages_and_uses_registered_methods(store, clock):
    cfg = DEFAULT.replace(spreading=None, ppr=None)
    mem = Memory(store=store, clock=clock, surfacing_mode="router", config=cfg)
    a = mem.add("alpha seed", item_id="a")
    mem.add("beta neighbour", item_id="b")
    mem.add("gamma other", item_id="g")
    mem.get_working_context("s1", "why alpha")
    notes = mem.last_context_record.notes
    assert notes["spreading"] == "not_configured" and notes["ppr"] == "not_configured"
    assert notes["multi_hop_seeds"] == [a]

    def fake_spread(snapshot, seeds, config, codes, deadline):
        return np.array([mem._ws.index_of["b"]]), np.array([1]), 1, False

    def fake_ppr(snapshot, seeds, config, deadline):
        return np.array([mem._ws.index_of["a"], mem._ws.index_of["b"]]), np.array([0.2, 0.1]), \
            {"iterations": 7}

    register_spread_method("test-spread", fake_spread)
    register_ppr_method("test-ppr", fake_ppr)
    try:
        cfg = DEFAULT.replace(spreading=SpreadConfig(method="test-spread", edge_types="*"),
                              ppr=PPRConfig(method="test-ppr"))
        mem2 = Memory(store=store, clock=clock, surfacing_mode="router", config=cfg)
        mem2.add_edge("a", "g")  # spreading runs only when some allowed edge type exists
        mem2.get_working_context("s1", "why alpha")
        rec = mem2.last_context_record
        c = dict(zip(rec.candidates["item_id"], zip(rec.candidates["source"],
                                                   rec.candidates["relevance"],
                                                   rec.candidates["centrality"])))
        assert c["b"] == ("spread", pytest.approx(0.5), pytest.approx(0.5))
        assert c["a"] == ("relevance", 1.0, 1.0)
        assert {"spread", "ppr"} <= set(rec.timings_ms)
        assert rec.notes["ppr"]["method"] == "test-ppr" and rec.notes["ppr"]["iterations"] == 7
        assert rec.notes["spreading"]["method"] == "test-spread"
        # the same configuration with callables instead of names
        direct = DEFAULT.replace(spreading=SpreadConfig(method=fake_spread, edge_types="*"),
                                 ppr=PPRConfig(method=fake_ppr))
        mem3 = Memory(store=store, clock=clock, surfacing_mode="router", config=direct)
        mem3.get_working_context("s1", "why alpha")
        assert mem3.last_context_record.candidates_frame().drop(columns="decision_id").equals(
            rec.candidates_frame().drop(columns="decision_id"))
    finally:
        SPREAD_METHODS.pop("test-spread")
        PPR_METHODS.pop("test-ppr")


def test_custom_strategy_by_name(router):
    class Reverse:
        name = "reverse"

        def expand(self, run):
            pass

        def adjust(self, run, table):
            table.multiplier[:] = 1.0 / (1.0 + table.relevance)

    register_strategy("reverse", Reverse)
    try:
        mem = Memory(store=router.store, workspace_id="ws-a", clock=router.clock,
                     surfacing_mode="router",
                     config=DEFAULT.replace(strategies=(("fast:recency", "reverse"),)))
        mem.add("alpha alpha alpha", item_id="strong")
        mem.get_working_context("s1", "alpha", strategy="fast:recency")
        assert mem.last_context_record.implementation == "reverse"
        # other strategies fall back to soft-degrade when unmapped
        mem.get_working_context("s1", "alpha", strategy="deep:multi-hop")
        assert "unimplemented_strategy_soft_degrade" in mem.last_surfacing_decision.reasons
    finally:
        STRATEGIES.pop("reverse")
    with pytest.raises(ValueError, match="strategies names 'gone'"):
        Memory(config=DEFAULT.replace(strategies=(("fast:recency", "gone"),)))


def test_config_validation_and_round_trip():
    from memlab import SEED_COMPAT, SurfacingConfig, get_recipe
    assert get_recipe("seed_compat") is SEED_COMPAT
    for bad in [{"centrality_weight": -0.5}, {"recency_tau_h": 0}, {"bm25_b": 1.5},
                {"overfetch": 0}, {"activation_floor": float("nan")}]:
        (name, value), = bad.items()
        with pytest.raises(ValueError, match=name):
            DEFAULT.replace(**bad)
    with pytest.raises(ValueError, match="unknown configuration field"):
        DEFAULT.replace(colour=1)
    with pytest.raises(ValueError, match="must implement 'fast:recency'"):
        DEFAULT.replace(strategies=(("fast:recency", None),))
    assert SurfacingConfig.from_dict(DEFAULT.to_dict()) == DEFAULT
    import json
    json.dumps(DEFAULT.to_dict())
