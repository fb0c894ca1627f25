"""Issue 15 leftovers: the router rule renamed from a signal's name, ``Memory.search``'s
deprecated ``"score"`` key, the record's lazily built columns, and one PPR policy."""

from __future__ import annotations

import copy
import json
import pickle
import warnings

import pytest

from memlab import Memory
from memlab.surfacing.config import DEFAULT, SEED_COMPAT, SurfacingConfig
from memlab.surfacing.router import (
    ROUTER_RULE_ALIASES,
    ROUTER_RULES,
    rule_recency_words,
)


def test_the_recency_rule_is_recency_words_and_the_old_name_warns():
    assert ROUTER_RULE_ALIASES == {"recency": "recency_words"}
    assert "recency_words" in DEFAULT.router_rules and "recency_words" in SEED_COMPAT.router_rules
    assert "recency" not in dict(ROUTER_RULES)  # registered once, under the new name
    with pytest.warns(DeprecationWarning, match="'recency' is now called 'recency_words'"):
        assert ROUTER_RULES["recency"] is rule_recency_words
    with pytest.warns(DeprecationWarning, match="'recency' is now called 'recency_words'"):
        cfg = DEFAULT.replace(router_rules=("multi_hop", "recency", "point_query"))
    assert cfg.router_rules == ("multi_hop", "recency_words", "point_query")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the stored new name routes and reloads without a warning
        assert SurfacingConfig.from_dict(cfg.to_dict()) == cfg
        mem = Memory(surfacing_mode="router", config=cfg)
        mem.add("the latest deploy notes")
        mem.get_working_context("s1", "latest deploy")
        assert mem.last_surfacing_decision.reasons == ("recency_signal:latest",)


def test_search_hits_warn_when_score_is_read():
    mem = Memory()
    mem.add("deploys run on fridays")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (hit,) = mem.search("friday deploys")
        bm25 = hit["bm25"]
        assert bm25 > 0 and hit.get("content") == "deploys run on fridays"
        assert json.loads(json.dumps(hit))["score"] == bm25  # the plain dict keeps the key
        assert dict(hit)["score"] == bm25 and "score" in hit
    with pytest.warns(DeprecationWarning, match="'score' is now called 'bm25'"):
        assert hit["score"] == bm25
    with pytest.warns(DeprecationWarning, match="'score' is now called 'bm25'"):
        assert hit.get("score") == bm25
    (many,) = mem.search_many(["friday deploys"])
    with pytest.warns(DeprecationWarning, match="'score' is now called 'bm25'"):
        assert many[0]["score"] == bm25


def test_record_columns_and_labels_built_on_read_are_what_an_eager_record_held():
    mem = Memory(surfacing_mode="router")
    for i in range(30):
        mem.add(f"deploy note {i} about fridays", metadata={"title": f"note {i}"} if i % 2 else {})
    mem.get_working_context("s1", "deploy fridays", k=5)
    rec = mem.last_context_record
    assert "_candidates" in rec.__dict__  # nothing built yet
    cands = rec.candidates
    assert cands is rec.candidates  # built once
    n = len(cands["item_id"])
    assert cands["rank"] == list(range(n)) and sum(cands["surfaced"]) == 5
    assert [i for i, s in zip(cands["item_id"], cands["surfaced"]) if s] == rec.surfaced_ids
    assert set(rec.labels) == set(rec.surfaced_ids)
    assert all(len(v) <= 60 for v in rec.labels.values())
    # serialising, pickling and copying see the built fields
    out = rec.to_dict()
    assert out["candidates"] == cands and out["labels"] == rec.labels
    assert not any(key.startswith("_") for key in out)
    mem.get_working_context("s1", "deploy fridays", k=5)
    fresh = mem.last_context_record
    back = pickle.loads(pickle.dumps(fresh))
    same = json.dumps(fresh.candidates)  # NaN pin weights: compare the JSON text
    assert json.dumps(back.candidates) == same and back.labels == fresh.labels
    assert json.dumps(copy.copy(fresh).candidates) == same


# -- one PPR policy --------------------------------------------------------------------------

def _chain():
    mem = Memory()
    for i in "abcd":
        mem.add(f"item {i}", item_id=i)
    mem.add_edges([("a", "b"), ("b", "c"), ("c", "d")])
    return mem


def test_the_graph_layer_keeps_deprecated_aliases_of_the_moved_entry_points():
    import memlab
    import memlab.graph.ppr as graph_ppr
    import memlab.surfacing.ppr as policy
    from memlab import graph

    assert memlab.personalized_pagerank is policy.personalized_pagerank
    mem = _chain()
    want = policy.ppr_result(mem, ["a"], method="exact", budget_ms=None, cache=False)
    for alias in (graph.ppr_result, graph_ppr.ppr_result):
        with pytest.warns(DeprecationWarning, match="moved to memlab.surfacing.ppr.ppr_result"):
            got = alias(mem, ["a"], method="exact", budget_ms=None, cache=False)
        assert got.scores == want.scores
    with pytest.warns(DeprecationWarning, match="memlab.surfacing.ppr.personalized_pagerank"):
        assert graph.personalized_pagerank(mem, ["a"], method="exact", budget_ms=None,
                                           cache=False) == want.scores
    ws = mem.store.workspace("default")
    with pytest.warns(DeprecationWarning, match="memlab.surfacing.ppr.run_ppr"):
        old = graph_ppr.run_ppr(ws, [0], policy.PPRConfig(method="exact", budget_ms=None),
                                lock=mem.store.lock.shared(), cache=False)
    assert old.scores == want.scores
    with pytest.warns(DeprecationWarning, match="MAX_IN_FLIGHT"):
        assert graph_ppr.MAX_IN_FLIGHT == policy.MAX_IN_FLIGHT == 2
    with pytest.raises(AttributeError):
        graph_ppr.not_a_name  # noqa: B018


def test_the_user_facing_functions_and_the_stage_share_one_policy():
    """ppr_result (user-facing) and surfacing_ppr (the stage's) answer alike, share the
    workspace cache and the concurrency slots, and differ only in how they report."""
    import threading

    import numpy as np

    import memlab.surfacing.ppr as policy
    from memlab.errors import PPRConvergenceError, PPRUnavailable

    mem = _chain()
    ws = mem.store.workspace("default")
    config = policy.PPRConfig(method="exact", budget_ms=None, tol=1e-12)
    first = policy.ppr_result(mem, ["a"], method="exact", budget_ms=None, tol=1e-12)
    assert not first.cache_hit
    result, notes = policy.surfacing_ppr(ws, np.array([0]), config, lock=mem.store.lock.shared())
    assert notes["cache"] == "hit" and result.scores == first.scores  # the same cache entry
    # node cap: a note for the stage, an error for the user
    _, capped = policy.surfacing_ppr(ws, np.array([0]), policy.PPRConfig(max_nodes=2),
                                     lock=mem.store.lock.shared())
    assert capped["skipped"] == "node_cap"
    with pytest.raises(PPRUnavailable, match="node_cap"):
        policy.personalized_pagerank(mem, ["a"], max_nodes=2)
    # saturation: with every slot taken both return at once, flagged
    slots = policy._SLOTS
    taken = [slots.acquire(blocking=False) for _ in range(policy.MAX_IN_FLIGHT)]
    try:
        assert all(taken)
        fresh = policy.PPRConfig(method="exact", budget_ms=None, use_cache=False)
        assert policy.surfacing_ppr(ws, np.array([1]), fresh,
                                    lock=threading.Lock())[1]["saturated"] is True
        with pytest.raises(PPRUnavailable, match="saturated"):
            policy.personalized_pagerank(mem, ["b"], cache=False)
    finally:
        for _ in taken:
            slots.release()
    # a method that cannot converge: an error note for the stage, the exception for the user
    mem.add_edge("d", "a")  # a cycle: no sweep order settles it in two iterations
    stuck = policy.PPRConfig(method="exact", max_iter=2, tol=1e-15, budget_ms=None,
                             use_cache=False)
    none, noted = policy.surfacing_ppr(ws, np.array([0]), stuck, lock=mem.store.lock.shared())
    assert none is None and "did not converge" in noted["error"]
    with pytest.raises(PPRConvergenceError, match="did not converge"):
        policy.run_ppr(ws, np.array([0]), stuck, lock=mem.store.lock.shared())
