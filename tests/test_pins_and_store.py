"""Pins (TTL, workspace binding, leak guard), the store's atomic writes and bad input."""

import json
from datetime import datetime, timezone

import pytest

from memlab import (DuplicateItemError, Edge, Memory, SessionPinWorkspaceConflict,
                    UnknownItemError)


def snapshot(store):
    return json.dumps(store.serialize(), sort_keys=True)


@pytest.fixture
def pair(store, clock):
    a = Memory(store=store, workspace_id="ws-a", surfacing_mode="router", clock=clock)
    b = Memory(store=store, workspace_id="ws-b", surfacing_mode="router", clock=clock)
    a.add("alpha in workspace a", item_id="x")
    b.add("alpha in workspace b", item_id="x")
    b.add("beta only in b", item_id="y")
    return a, b


def test_pin_ttl_expires_at_24h(router, clock):
    router.add("alpha", item_id="a")
    router.pin_item("s1", "a", weight=0.5)
    clock.advance(hours=23, minutes=59)
    assert router.get_pins("s1") == {"a": 0.5}
    clock.advance(minutes=1)
    assert router.get_pins("s1") == {}
    assert router.get_working_context("s1", "zzz")["items"] == []


def test_pin_write_refreshes_ttl(router, clock):
    router.add("alpha", item_id="a")
    router.add("beta", item_id="b")
    router.pin_item("s1", "a")
    clock.advance(hours=20)
    router.pin_item("s1", "b")
    clock.advance(hours=20)
    assert router.get_pins("s1") == {"a": 1.0, "b": 1.0}


def test_unpin_and_noop(router):
    router.add("alpha", item_id="a")
    router.pin_item("s1", "a")
    router.unpin_item("s1", "a")
    router.unpin_item("s1", "a")
    router.unpin_item("never", "a")
    assert router.get_pins("s1") == {}


def test_cross_workspace_pin_conflict_and_leak_guard(pair, clock):
    a, b = pair
    a.pin_item("s1", "x")
    before = snapshot(a.store)
    with pytest.raises(SessionPinWorkspaceConflict, match="session_id 's1' is bound to workspace "
                                                          "'ws-a'"):
        b.pin_item("s1", "y")
    assert snapshot(a.store) == before
    assert b.get_pins("s1") == {}                      # leak guard
    resp = b.get_working_context("s1", "beta")
    assert [it["item_id"] for it in resp["items"]] == ["y"]
    b.unpin_item("s1", "x")                            # no effect across workspaces
    assert a.get_pins("s1") == {"x": 1.0}
    clock.advance(hours=24)                            # the binding expires with the pins
    b.pin_item("s1", "y")
    assert b.get_pins("s1") == {"y": 1.0} and a.get_pins("s1") == {}


def test_nothing_of_another_workspace_surfaces(pair):
    a, b = pair
    resp = a.get_working_context("s1", "alpha beta workspace", k=100)
    assert [it["item_id"] for it in resp["items"]] == ["x"]
    assert resp["items"][0]["content"] == "alpha in workspace a"
    assert [h["content"] for h in a.search("beta")] == []
    assert len(a) == 1 and len(b) == 2


@pytest.mark.parametrize("call, match", [
    (lambda m: m.pin_item("s1", "missing"), "item_id 'missing' does not exist"),
    (lambda m: m.pin_item("s1", "a", weight=-1), "weight must be finite and >= 0, got -1.0"),
    (lambda m: m.pin_item("s1", "a", weight=float("nan")), "weight must be finite"),
    (lambda m: m.pin_item("", "a"), "session_id must be a non-empty string"),
    (lambda m: m.add_edge("a", "missing"), "dst 'missing' does not exist"),
    (lambda m: m.add_edge("missing", "a"), "src 'missing' does not exist"),
    (lambda m: m.add_edge("a", "b", "not-valid"), "edge_type must match"),
    (lambda m: m.add_edge("a", "b", weight=-0.5), "weight must be finite and > 0, got -0.5"),
    (lambda m: m.add_edge("a", "b", weight=0), "weight must be finite and > 0"),
    (lambda m: m.add_edge("a", "a"), "dst must differ from src"),
    (lambda m: m.add("", item_id="c"), "content must be a non-empty string"),
    (lambda m: m.add(5), "content must be a non-empty string"),
    (lambda m: m.add("x", memory_type="semantc"), "memory_type must be one of .* got 'semantc'"),
    (lambda m: m.add("x", metadata={"f": object()}), "metadata must be JSON-serialisable"),
    (lambda m: m.add("x", metadata=[1]), "metadata must be a dict or None"),
    (lambda m: m.add("x", item_id="a"), "item_id 'a' already exists"),
    (lambda m: m.add("x", item_id=""), "item_id must be a non-empty string"),
    (lambda m: m.add("x", created_at="2024-01-01"), "created_at must be a datetime"),
    (lambda m: m.get("missing"), "item_id 'missing' does not exist"),
    (lambda m: m.search("x", top_k=0), "top_k must be an int in 1..1000, got 0"),
    (lambda m: m.search(None), "query must be a string"),
    (lambda m: m.get_working_context("s1", None), "query must be a string"),
    (lambda m: m.add_many(["ok", ""]), r"items\[1\]: content must be a non-empty string"),
    (lambda m: m.add_many(["ok", {"content": "y", "item_id": "a"}]), "item_id 'a' already exists"),
    (lambda m: m.add_many(["ok", {"content": "y", "colour": 1}]), r"items\[1\]: unknown keys"),
    (lambda m: m.add_many([{"content": "y", "item_id": "d"}, {"content": "z", "item_id": "d"}]),
     r"item_id 'd' is given twice in this batch \(items 0 and 1\)"),
    (lambda m: m.add_edges([("a", "b"), ("a", "zz")]), r"edges\[1\]: dst 'zz' does not exist"),
    (lambda m: m.add_edges([Edge("a", "b"), ("a", "b", "X", -1)]), r"edges\[1\]: weight"),
    (lambda m: m.add_edges([("a",)]), r"edges\[0\]: must be an Edge"),
    (lambda m: m.flag_anchor_for_review("s1", "a", "r"), "is not an anchor of session"),
])
def test_bad_input_raises_and_changes_nothing(router, call, match):
    router.add("alpha", item_id="a")
    router.add("beta", item_id="b")
    router.add_edge("a", "b")
    before = snapshot(router.store)
    with pytest.raises(ValueError, match=match):
        call(router)
    assert snapshot(router.store) == before


def test_named_errors_are_value_errors(router):
    router.add("alpha", item_id="a")
    with pytest.raises(UnknownItemError):
        router.get("b")
    with pytest.raises(DuplicateItemError):
        router.add("again", item_id="a")


@pytest.mark.parametrize("kwargs, match", [
    ({"workspace_id": ""}, "workspace_id"),
    ({"config": "fastest"}, "recipe must be one of"),
    ({"config": 3}, "config must be a SurfacingConfig"),
    ({"clock": object()}, "clock must have a now"),
    ({"seed": "x"}, "seed must be an int"),
    ({"store": {}}, "store must be a MemoryStore"),
])
def test_bad_constructor_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Memory(**kwargs)


def test_add_many_and_edges_bulk(router):
    ids = router.add_many(["alpha", {"content": "beta", "item_id": "b", "memory_type": "procedural",
                                     "metadata": {"title": "Beta"},
                                     "created_at": datetime(2023, 1, 1)}])
    assert ids == ["item-000000", "b"]
    assert router.get("b")["created_at"] == "2023-01-01T00:00:00+00:00"
    n = router.add_edges([Edge(ids[0], "b", "MENTIONS"), (ids[0], "b"), {"src": "b", "dst": ids[0],
                                                                          "weight": 2}])
    assert n == 3
    assert router.get_edges() == [
        {"src": ids[0], "dst": "b", "edge_type": "MENTIONS", "weight": 1.0},
        {"src": ids[0], "dst": "b", "edge_type": "RELATED", "weight": 1.0},
        {"src": "b", "dst": ids[0], "edge_type": "RELATED", "weight": 2.0}]
    router.add_edge(ids[0], "b", "MENTIONS", 0.25)  # re-weights, does not duplicate
    assert len(router.get_edges()) == 3 and router.get_edges("b")[0]["weight"] == 0.25


def test_generated_ids_skip_taken_ones(router):
    router.add("x", item_id="item-000000")
    assert router.add("y") == "item-000001"


def test_naive_created_at_is_utc(router):
    router.add("x", item_id="a", created_at=datetime(2024, 5, 1, 12))
    assert router.get("a")["created_at"] == "2024-05-01T12:00:00+00:00"


def test_store_is_shared_and_memory_defaults():
    m = Memory()
    assert (m.workspace_id, m.surfacing_mode) == ("default", "legacy")
    m.add("hello world")
    assert m.get_working_context("s", "hello")["items"][0]["content"] == "hello world"
    assert m.clock.now().tzinfo == timezone.utc


def test_custom_memory_types(clock):
    from memlab import MemoryStore
    m = Memory(store=MemoryStore(memory_types=["note"]), clock=clock)
    assert m.get(m.add("x", memory_type="note"))["memory_type"] == "note"
