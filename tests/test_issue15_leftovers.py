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
from memlab.surfacing.router import ROUTER_RULE_ALIASES, ROUTER_RULES, rule_recency_words


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
    with pytest.warns(DeprecationWarning, match="'score' is now called 'bm25'"):
        (many,) = mem.search_many(["friday deploys"])
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
