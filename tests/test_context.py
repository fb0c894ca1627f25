"""get_working_context (SPEC §3) pinned to hand-computed numbers."""

import json
import math

import pytest

from memlab import BudgetTooSmall, Memory

LN2 = math.log(2)


def snapshot(mem):
    return json.dumps(mem.store.serialize(), sort_keys=True)


def test_router_composite_by_hand(seed_router, clock):
    a = seed_router.add("alpha beta", item_id="a")
    seed_router.add("gamma delta", item_id="b")
    seed_router.pin_item("s1", "a", weight=2.0)
    clock.advance(hours=12)
    resp = seed_router.get_working_context("s1", "alpha", strategy="fast:recency")
    (item,) = [it for it in resp["items"] if it["item_id"] == a]
    act = 0.5 * math.exp(-LN2 * 12 / 720)
    rec = math.exp(-12 / 24)
    fresh = (1 - 12 / 24) * 0.2
    sb = item["score_breakdown"]
    assert sb == pytest.approx({"activation": act, "relevance": 1.0, "recency": rec,
                                "centrality": 0.0, "anchor_forced": False,
                                "session_pin_boost": 0.6, "freshness_boost": fresh})
    cands = seed_router.last_context_record.candidates
    row = cands["item_id"].index("a")
    expected = act * 1.0 * rec * (1 + 0.5 * 0) + 0.6 + fresh
    assert cands["score"][row] == pytest.approx(expected, rel=1e-12)
    terms = sum(cands[t][row] for t in cands if t.startswith("term_"))
    assert terms == pytest.approx(expected, rel=1e-12)
    assert cands["bm25"][row] > 0 and cands["mandatory"][row] is True


def test_legacy_composite_by_hand(legacy, clock):
    legacy.add("alpha beta", item_id="a")
    legacy.add("alpha gamma delta epsilon", item_id="b")
    clock.advance(hours=30)
    resp = legacy.get_working_context("s1", "alpha")
    cands = legacy.last_context_record.candidates
    for row, item_id in enumerate(cands["item_id"]):
        act = 0.5 * math.exp(-LN2 * 30 / 720)
        expected = cands["relevance"][row] * math.exp(-30 / 24) * max(act, 0.05)
        assert cands["score"][row] == pytest.approx(expected, rel=1e-12)
    for item in resp["items"]:
        sb = item["score_breakdown"]
        assert (sb["centrality"], sb["session_pin_boost"], sb["freshness_boost"]) == (0, 0, 0)
    assert [it["item_id"] for it in resp["items"]] == ["a", "b"]


def test_activation_floor_applies(seed_router, clock):
    seed_router.add("alpha", item_id="a")
    clock.advance(hours=720 * 5)  # 0.5 * 2**-5 = 0.015625 < 0.05
    seed_router.get_working_context("s1", "alpha", strategy="fast:recency")
    c = seed_router.last_context_record.candidates
    assert c["activation"][0] == pytest.approx(0.5 / 32)
    assert c["term_base"][0] == pytest.approx(0.05 * 1.0 * math.exp(-720 * 5 / 24))


def _budget_items(mem):
    mem.add("alpha " * 13, item_id="L")                   # 78 chars -> 19 tokens
    mem.add("alpha and some more filler words!!!!!!!!", item_id="M")  # 40 chars -> 10 tokens
    mem.add("alpha bravo charlie.", item_id="S")           # 20 chars -> 5 tokens


def test_budget_skips_not_stops_and_allows_exact_fit(seed_router):
    _budget_items(seed_router)
    resp = seed_router.get_working_context("s1", "alpha", max_tokens=15, strategy="fast:recency")
    c = seed_router.last_context_record.candidates
    assert c["item_id"] == ["L", "M", "S"] and c["tokens"] == [19, 10, 5]
    assert [it["item_id"] for it in resp["items"]] == ["M", "S"]
    assert c["drop_reason"] == ["budget_cut", None, None]
    assert resp["tokens_used"] == 15 and resp["tokens_budget"] == 15


def test_k_cut_is_recorded(seed_router):
    _budget_items(seed_router)
    resp = seed_router.get_working_context("s1", "alpha", k=2, strategy="fast:recency")
    c = seed_router.last_context_record.candidates
    assert len(resp["items"]) == 2 and c["drop_reason"] == [None, None, "k_cut"]
    assert c["surfaced"] == [True, True, False] and c["rank"] == [0, 1, 2]


def test_mandatory_items_go_in_over_budget(seed_router):
    _budget_items(seed_router)
    anchor = seed_router.add_anchor("s1", "x" * 120)  # 30 tokens
    seed_router.add("y" * 80, item_id="P")             # 20 tokens, pinned, not matching
    seed_router.pin_item("s1", "P")
    resp = seed_router.get_working_context("s1", "alpha", max_tokens=40, strategy="fast:recency")
    ids = [it["item_id"] for it in resp["items"]]
    assert ids == [anchor, "P"]
    assert resp["tokens_used"] == 50 > resp["tokens_budget"]
    c = seed_router.last_context_record.candidates
    assert c["drop_reason"][2:] == ["budget_cut"] * 3
    pinned = resp["items"][1]["score_breakdown"]
    assert pinned["relevance"] == 0.0 and pinned["session_pin_boost"] == pytest.approx(0.3)
    assert resp["items"][0]["score_breakdown"]["anchor_forced"] is True


def test_mandatory_first_then_score_and_k_is_additive(seed_router):
    _budget_items(seed_router)
    anchor = seed_router.add_anchor("s1", "remember the goal")
    resp = seed_router.get_working_context("s1", "alpha", k=3, strategy="fast:recency")
    assert [it["item_id"] for it in resp["items"]] == [anchor, "L", "M", "S"]


def test_budget_too_small(seed_router):
    seed_router.add_anchor("s1", "x" * 120)  # 30 tokens
    before = snapshot(seed_router)
    with pytest.raises(BudgetTooSmall, match=r"^budget_too_small"):
        seed_router.get_working_context("s1", "alpha", max_tokens=29)
    assert snapshot(seed_router) == before
    assert isinstance(BudgetTooSmall("x"), ValueError)
    seed_router.add_anchor("s1", "y" * 32)  # 8 tokens: the smallest anchor now fits
    resp = seed_router.get_working_context("s1", "alpha", max_tokens=10)
    assert resp["tokens_used"] == 38


def test_legacy_caps_total_at_k_and_reports_dropped_anchors(legacy):
    _budget_items(legacy)
    a1 = legacy.add_anchor("s1", "first goal of the session")
    a2 = legacy.add_anchor("s1", "second goal of the session")
    resp = legacy.get_working_context("s1", "alpha", k=1)
    assert len(resp["items"]) == 1 and resp["items"][0]["item_id"] in (a1, a2)
    c = legacy.last_context_record.candidates
    dropped = {i: r for i, r in zip(c["item_id"], c["drop_reason"]) if r}
    assert set(dropped) == {a1, a2, "L", "M", "S"} - {resp["items"][0]["item_id"]}
    assert set(dropped.values()) == {"k_cut"}


def test_legacy_does_not_fetch_unmatched_pins(legacy):
    legacy.add("alpha", item_id="a")
    legacy.add("unrelated", item_id="u")
    legacy.pin_item("s1", "u")
    resp = legacy.get_working_context("s1", "alpha")
    assert [it["item_id"] for it in resp["items"]] == ["a"]


def test_router_fetches_unmatched_pins_with_relevance_zero(router):
    router.add("alpha", item_id="a")
    router.add("unrelated", item_id="u")
    router.pin_item("s1", "u", weight=0.5)
    resp = router.get_working_context("s1", "alpha")
    assert [it["item_id"] for it in resp["items"]] == ["u", "a"]
    assert resp["items"][0]["score_breakdown"]["relevance"] == 0.0
    assert resp["items"][0]["score_breakdown"]["session_pin_boost"] == pytest.approx(0.15)


def test_response_shape_is_json_and_exact(router):
    router.add("alpha", metadata={"speaker": "Ann"})
    resp = router.get_working_context("s1", "alpha", max_tokens=100)
    json.dumps(resp)
    assert set(resp) == {"decision_id", "strategy_used", "items", "drift_warnings", "tokens_used",
                         "tokens_budget", "deprecation"}
    assert set(resp["items"][0]) == {"item_id", "content", "memory_type", "metadata",
                                     "score_breakdown"}
    assert set(resp["items"][0]["score_breakdown"]) == {
        "activation", "relevance", "recency", "centrality", "anchor_forced", "session_pin_boost",
        "freshness_boost"}
    assert len(resp["decision_id"]) == 32 and resp["deprecation"] is None
    resp["items"][0]["metadata"]["speaker"] = "mutated"
    assert router.get_working_context("s1", "alpha")["items"][0]["metadata"]["speaker"] == "Ann"


def test_decision_ids_are_unique_and_seeded(store, clock):
    a = Memory(store=store, clock=clock, seed=7)
    b = Memory(store=store, clock=clock, seed=7)
    ids_a = [a.get_working_context("s", "q")["decision_id"] for _ in range(3)]
    ids_b = [b.get_working_context("s", "q")["decision_id"] for _ in range(3)]
    assert ids_a == ids_b and len(set(ids_a)) == 3


@pytest.mark.parametrize("k", [0, 101, -1, 2.5, True, "5"])
def test_k_bounds(router, k):
    with pytest.raises(ValueError, match=f"k must be an int in 1..100, got {k!r}"):
        router.get_working_context("s1", "q", k=k)


@pytest.mark.parametrize("session_id", ["", "  ", None, 3])
def test_empty_session(router, session_id):
    with pytest.raises(ValueError, match="session_id must be a non-empty string"):
        router.get_working_context(session_id, "q")


@pytest.mark.parametrize("max_tokens", [0, -5, 1.5, "10"])
def test_bad_max_tokens(router, max_tokens):
    with pytest.raises(ValueError, match="max_tokens"):
        router.get_working_context("s1", "q", max_tokens=max_tokens)


def test_context_assembly_never_reinforces_but_search_and_get_do(router, clock):
    router.add("alpha beta", item_id="a")
    clock.advance(hours=1)
    before = snapshot(router)
    for _ in range(5):
        router.get_working_context("s1", "alpha")
    assert snapshot(router) == before
    stored = router.store.workspace("ws-a").activation.stored.view()
    decayed = 0.5 * math.exp(-LN2 * 1 / 720)
    router.search("alpha")
    assert stored[0] == pytest.approx(decayed + 0.05)
    router.get("a")
    assert stored[0] == pytest.approx(decayed + 0.10)
    kinds = [e["kind"] for e in router.get("a")["history"]]
    assert kinds == ["created", "reinforced", "reinforced", "reinforced"]


def test_reinforcement_clamps_at_one(router):
    router.add("alpha", item_id="a")
    for _ in range(20):
        router.get("a")
    assert router.store.workspace("ws-a").activation.stored.view()[0] == 1.0


def test_recency_reference_is_last_boost(router, clock):
    router.add("alpha", item_id="a")
    clock.advance(hours=48)
    router.get("a")
    router.get_working_context("s1", "alpha", strategy="fast:recency")
    assert router.last_context_record.candidates["recency"][0] == pytest.approx(1.0)


def test_anchors_and_drift_warnings(router):
    anchor = router.add_anchor("s1", "Ship by Friday", anchor_type="deadline")
    resp = router.get_working_context("s1", "anything")
    assert resp["items"][0]["item_id"] == anchor and resp["drift_warnings"] == []
    router.flag_anchor_for_review("s1", anchor, "deadline moved")
    resp = router.get_working_context("s1", "anything")
    assert resp["drift_warnings"] == [{"anchor_id": anchor, "anchor_type": "deadline",
                                       "reason": "deadline moved"}]
    assert router.drift_warnings("s1") == resp["drift_warnings"]
    # another session neither gets the anchor nor its warnings
    other = router.get_working_context("s2", "Ship by Friday")
    assert other["items"] == [] and other["drift_warnings"] == []
    router.clear_anchor_review("s1", anchor)
    assert router.drift_warnings("s1") == []
    with pytest.raises(ValueError, match="anchor_id"):
        router.flag_anchor_for_review("s2", anchor, "x")


def test_every_stage_is_timed(router):
    router.add("alpha")
    router.get_working_context("s1", "alpha")
    t = router.last_context_record.timings_ms
    assert set(t) >= {"route", "relevance", "strategy_expand", "mandatory", "signals",
                      "strategy_adjust", "composite", "select", "respond", "total"}
    assert all(v >= 0 for v in t.values())


def test_on_record_hook_and_frame(store, clock):
    seen = []
    mem = Memory(store=store, clock=clock, surfacing_mode="router", on_record=seen.append)
    mem.add("alpha", item_id="a")
    mem.add("beta", item_id="b")
    mem.get_working_context("s1", "alpha", k=1, strategy="fast:recency")
    frame = seen[0].candidates_frame()
    assert list(frame["item_id"]) == ["a", "b"]
    assert list(frame["source"]) == ["relevance", "recent"]
    assert frame["surfaced"].tolist() == [True, False]
    assert frame["drop_reason"].isna().tolist() == [True, False]
    assert frame["drop_reason"].iloc[1] == "k_cut"
    assert {"relevance", "recency", "activation", "centrality", "term_base", "score"} <= set(frame)


def test_naming_an_items_title_mixes_into_relevance():
    from memlab.surfacing.config import DEFAULT
    mem = Memory(surfacing_mode="router", config=DEFAULT)
    mem.add_many([
        {"content": "Admiral Twin\nA drive-in theater in Tulsa.", "item_id": "a",
         "metadata": {"title": "Admiral Twin (theater)"}},
        {"content": "The admiral ordered the twin ships to open fire when they could.",
         "item_id": "b"},
        {"content": "Twin Peaks opened on television.", "item_id": "c"}])
    mem.get_working_context("s1", "When did the Admiral Twin open?", k=3,
                            strategy="factual:point-query")
    record = mem.last_context_record
    c = record.candidates
    assert record.notes["title_match"] == ["a"] and "title_match" in record.timings_ms
    rows = {item: r for r, item in enumerate(c["item_id"])}
    assert [c["title_match"][rows[i]] for i in "abc"] == [True, False, False]
    top_bm25 = max(c["bm25"])
    w = DEFAULT.title_match_weight
    for item in "abc":
        r = rows[item]
        named = 1.0 if item == "a" else 0.0
        assert c["relevance"][r] == pytest.approx((1 - w) * c["bm25"][r] / top_bm25 + w * named)
    # off: relevance is BM25 alone and no stage runs
    mem2 = Memory(surfacing_mode="router", config=DEFAULT.replace(title_match_weight=0.0))
    mem2.add_many([{"content": "Admiral Twin\nA drive-in theater in Tulsa.", "item_id": "a",
                    "metadata": {"title": "Admiral Twin"}}])
    mem2.get_working_context("s1", "When did the Admiral Twin open?", k=3)
    assert "title_match" not in mem2.last_context_record.notes
    with pytest.raises(ValueError, match="title_match_weight must be in"):
        DEFAULT.replace(title_match_weight=1.5)
