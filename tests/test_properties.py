"""Property tests: any query, k and budget give a valid, honest response."""

import string

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab import BudgetTooSmall, Memory, MemoryStore, ManualClock
from memlab.text import estimate_tokens
from tests.conftest import T0

WORDS = ["alpha", "beta", "gamma", "delta", "Deploy", "JWT", "why", "latest", "how", "list"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=30).map(" ".join)
queries = st.one_of(st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join),
                    st.text(alphabet=string.printable, max_size=100))


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(texts, min_size=0, max_size=25), other=st.lists(texts, max_size=10),
       query=queries, k=st.integers(1, 100), budget=st.one_of(st.none(), st.integers(1, 200)),
       mode=st.sampled_from(["legacy", "router"]), recipe=st.sampled_from(["default", "seed_compat"]),
       anchors=st.lists(texts, max_size=2), pins=st.integers(0, 3), hours=st.floats(0, 2000))
def test_any_query_gives_a_valid_response(items, other, query, k, budget, mode, recipe, anchors,
                                          pins, hours):
    store, clock = MemoryStore(), ManualClock(T0)
    mem = Memory(store=store, workspace_id="a", surfacing_mode=mode, clock=clock, config=recipe)
    foreign = Memory(store=store, workspace_id="b", surfacing_mode=mode, clock=clock)
    ids = mem.add_many(items)
    foreign_ids = set(foreign.add_many([{"content": t, "item_id": f"b-{i}"}
                                        for i, t in enumerate(other)]))
    anchor_ids = [mem.add_anchor("s", t) for t in anchors]
    for item_id in ids[:pins]:
        mem.pin_item("s", item_id)
    clock.advance(hours=hours)
    try:
        resp = mem.get_working_context("s", query, k=k, max_tokens=budget)
    except BudgetTooSmall:
        assert budget is not None and min(estimate_tokens(t) for t in anchors) > budget
        return
    rec = mem.last_context_record
    out = [it["item_id"] for it in resp["items"]]
    assert len(out) == len(set(out))
    assert not set(out) & foreign_ids - set(ids)
    assert set(out) <= set(ids) | set(anchor_ids)
    assert resp["tokens_used"] == sum(estimate_tokens(it["content"]) for it in resp["items"])
    mandatory = [i for i, m, s in zip(rec.candidates["item_id"], rec.candidates["mandatory"],
                                      rec.candidates["surfaced"]) if m and s]
    optional = [i for i in out if i not in mandatory]
    if mode == "router":
        assert len(optional) <= k
        mandatory_tokens = sum(estimate_tokens(it["content"]) for it in resp["items"]
                               if it["item_id"] in mandatory)
        if budget is not None and mandatory_tokens <= budget:
            assert resp["tokens_used"] <= budget
    else:
        assert len(out) <= k
        if budget is not None:
            assert resp["tokens_used"] <= budget
    assert rec.surfaced_ids == out
    assert sum(rec.candidates["surfaced"]) == len(out)
    for sb in (it["score_breakdown"] for it in resp["items"]):
        for key in ("activation", "relevance", "recency", "centrality"):
            assert 0.0 <= sb[key] <= 1.0
    for reason, surfaced in zip(rec.candidates["drop_reason"], rec.candidates["surfaced"]):
        assert (reason is None) == surfaced
