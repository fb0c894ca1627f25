"""Short-term cache, long-term graph and the solution engine (SPEC §6.1, seed 000)."""

import contextlib
import io
import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab import ManualClock, Memory
from memlab.session import (PMMemoryStore, PromotionPolicy, add_interlinked_context,
                            create_relation, get_memory_status, promote_to_long_term,
                            prune_stale_links, resolve_context, retrieve_with_traversal,
                            search_graph, set_default_memory, upsert_node)

SEED_DOC = Path(__file__).resolve().parents[2] / "shared" / "seeds" / "000_c6d8c45dccd7696d.txt"


@pytest.fixture
def mem():
    clock = ManualClock(datetime(2024, 3, 1, tzinfo=timezone.utc))
    memory = Memory(surfacing_mode="router", clock=clock)
    set_default_memory(memory)
    yield memory
    set_default_memory(None)


# ---------------------------------------------------------------------------- the cache
def test_lru_order_under_mixed_peek_and_set():
    store = PMMemoryStore(silo_size=3)
    assert [store.set(k, k.upper()) for k in "abc"] == [0, 1, 2]
    assert store.peek("a") == (True, "A", 0)      # a is now the most recent
    assert store.set("b", "B2") == 1              # an update keeps its index; b most recent
    assert store.set("d", "D") == 2               # evicts c, the least recently used
    assert "c" not in store and store.peek("c") == (False, None, -1)
    store.peek("a")
    assert store.set("e", "E") == 1               # now b is the oldest
    assert [e["key"] for e in store.snapshot()] == ["d", "a", "e"]
    assert store.access_count("a") == 3 and store.access_count("b") == 0


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["set", "peek"]), st.sampled_from("abcdef")),
                max_size=60), st.integers(1, 4))
def test_cache_matches_a_reference_lru(ops, size):
    store = PMMemoryStore(silo_size=size)
    reference: list[str] = []  # least recent first
    values: dict[str, str] = {}
    for op, key in ops:
        if op == "set":
            if key in reference:
                reference.remove(key)
            elif len(reference) == size:
                values.pop(reference.pop(0))
            reference.append(key)
            values[key] = key * 2
            store.set(key, key * 2)
        else:
            hit, value, _ = store.peek(key)
            assert hit == (key in reference)
            if hit:
                assert value == values[key]
                reference.remove(key)
                reference.append(key)
    assert [e["key"] for e in store.snapshot()] == reference
    assert sorted(e["index"] for e in store.snapshot()) == sorted(set(
        e["index"] for e in store.snapshot()))


def test_flush_empties_and_counts():
    store = PMMemoryStore(silo_size=4)
    store.set("a", "1")
    store.set("b", "2")
    assert store.flush() == 2 and len(store) == 0 and store.set("c", "3") == 0


@pytest.mark.parametrize("call, arg", [
    (lambda s: s.set("", "v"), "key"), (lambda s: s.set(3, "v"), "key"),
    (lambda s: s.set("k", ""), "value"), (lambda s: s.set("k", None), "value"),
    (lambda s: s.peek(None), "key"), (lambda s: PMMemoryStore(silo_size=0), "silo_size"),
])
def test_cache_rejects_bad_keys_and_values(call, arg):
    store = PMMemoryStore(silo_size=2)
    store.set("x", "y")
    with pytest.raises(ValueError, match=arg):
        call(store)
    assert store.snapshot() == [{"key": "x", "value": "y", "index": 0, "access_count": 1}]


# ---------------------------------------------------------------------------- seed examples
# The two examples of seeds/000 as printed there, with only the import line changed. When the
# shared seed document is present, a test checks these copies against it word for word.
SEED_EXAMPLES = {
    "Basic Usage": """from memlab import PMMemoryStore, resolve_context

store = PMMemoryStore()
store.set("pricing", "cached pricing page")

print(resolve_context("demo", "pricing", store))""",
    "Advanced Usage": """from memlab import (
    PMMemoryStore,
    promote_to_long_term,
    get_memory_status,
    resolve_context,
)

session_id = "hybrid"
store = PMMemoryStore()
store.set("auth", "fresh login flow")

promote_to_long_term(session_id, "authentication", "fresh login flow", "concept")
print(resolve_context(session_id, "authentication", store))
print(get_memory_status(session_id, store))""",
}


@pytest.mark.skipif(not SEED_DOC.exists(), reason="the shared seed documents are absent")
@pytest.mark.parametrize("title", list(SEED_EXAMPLES))
def test_seed_example_copies_match_the_seed_document(title):
    original = SEED_EXAMPLES[title].replace("from memlab import", "from pmll_memory_mcp import")
    assert f"{title}\n\n{original}\n" in SEED_DOC.read_text()


@pytest.mark.parametrize("title", list(SEED_EXAMPLES))
def test_seed_examples_run_with_only_the_import_changed(mem, title):
    code = SEED_EXAMPLES[title]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, f"seed-{title}", "exec"), {})
    printed = out.getvalue()
    if title == "Basic Usage":
        assert printed.strip() == str({"source": "short_term", "value": "cached pricing page",
                                       "score": 1.0})
    else:
        assert "'source': 'long_term', 'value': 'fresh login flow', 'score': 1.0" in printed
        assert "'nodes': 1" in printed and "'promotion_threshold': 3" in printed


# ---------------------------------------------------------------------------- resolve
def test_resolve_short_term_long_term_and_miss_with_true_scores(mem):
    store = PMMemoryStore()
    store.set("pricing", "cached pricing page")
    assert resolve_context("s1", "pricing", store) == {
        "source": "short_term", "value": "cached pricing page", "score": 1.0}
    node = upsert_node("s1", "fact", "refund policy",
                       "refunds are possible within 30 days of purchase")
    upsert_node("s1", "fact", "office plants", "the ficus needs water on mondays")
    exact = resolve_context("s1", "refund policy", store)
    assert exact == {"source": "long_term", "value": "refunds are possible within 30 days of "
                     "purchase", "score": 1.0, "node_id": node}
    # "refund" and "purchase" match (idf log 2 each), "window" matches nothing (idf log 6)
    assert resolve_context("s1", "refund purchase window", store)["source"] == "miss"
    partial = resolve_context("s1", "refund purchase window", store, min_score=0.4)
    assert partial["source"] == "long_term"
    assert partial["score"] == pytest.approx(2 * math.log(2) / (2 * math.log(2) + math.log(6)))
    assert resolve_context("s1", "quarterly tax filing", store) == {
        "source": "miss", "value": None, "score": 0.0}
    # a node sharing one word out of three is below the minimum score: a miss, not a hit
    assert resolve_context("s1", "water cooler gossip", store)["source"] == "miss"
    assert resolve_context("s1", "water cooler gossip", store, min_score=0.1)["source"] == \
        "long_term"


def test_no_promotion_on_a_read_unless_the_policy_is_on(mem):
    store = PMMemoryStore()
    store.set("auth", "fresh login flow")
    for _ in range(5):
        resolve_context("s1", "auth", store)
    assert get_memory_status("s1", store)["long_term"]["nodes"] == 0
    policy = PromotionPolicy(threshold=3)
    watched = PMMemoryStore(promotion_policy=policy)
    watched.set("auth", "fresh login flow")                    # count 1
    resolve_context("s1", "auth", watched)                     # count 2
    assert policy.promotions == []
    resolve_context("s1", "auth", watched)                     # count 3: promoted
    resolve_context("s1", "auth", watched)                     # already promoted
    assert [(p["key"], p["access_count"]) for p in policy.promotions] == [("auth", 3)]
    node = policy.promotions[0]["node_id"]
    assert mem.get(node)["content"] == "fresh login flow"
    watched.set("auth", "login flow v2")                       # a new value is promoted anew
    resolve_context("s1", "auth", watched)
    assert len(policy.promotions) == 2 and policy.promotions[1]["node_id"] == node
    assert mem.get(node)["content"] == "login flow v2"


def test_status_numbers_after_a_known_sequence(mem):
    store = PMMemoryStore(silo_size=8)
    store.set("a", "alpha")
    store.set("b", "beta")
    a = promote_to_long_term("s1", "authentication", "fresh login flow")["node_id"]
    b = promote_to_long_term("s1", "tokens", "JWT for 15 minutes", node_type="fact")["node_id"]
    c = upsert_node("s1", "event", "outage", "checkout down on 2 March")
    create_relation("s1", a, b)
    create_relation("s1", c, a, "CAUSES")
    mem.add("a plain memory, not a node")
    before = json.dumps(mem.store.serialize())
    status = get_memory_status("s1", store)
    assert json.dumps(mem.store.serialize()) == before  # purely observational
    assert status == {
        "session_id": "s1", "short_term": {"slots_used": 2, "silo_size": 8},
        "long_term": {"nodes": 3, "edges": 2, "node_types": {"concept": 1, "event": 1, "fact": 1},
                      "edge_types": {"CAUSES": 1, "RELATED": 1}},
        "promotion_threshold": 3, "promotion_policy": "off", "promotions": 0}


# ---------------------------------------------------------------------------- long-term graph
def test_upsert_matches_by_type_and_label_and_nodes_surface(mem):
    a = upsert_node("s1", "concept", "Auth Flow", "login with passwords")
    assert upsert_node("s2", "concept", "auth flow!", "login with passkeys") == a
    assert upsert_node("s1", "fact", "Auth Flow", "a different node type") != a
    item = mem.get(a)
    assert item["content"] == "login with passkeys" and item["metadata"]["session_id"] == "s2"
    assert [e["kind"] for e in item["history"]][:2] == ["created", "upserted"]
    ctx = mem.get_working_context("s9", "passkeys login", k=5)
    assert a in [it["item_id"] for it in ctx["items"]]  # one store: surfacing sees the node


def test_search_graph_scores_are_absolute_and_include_neighbours(mem):
    a = upsert_node("s1", "concept", "authentication", "fresh login flow")
    b = upsert_node("s1", "fact", "tokens", "JWT tokens expire after 15 minutes")
    c = upsert_node("s1", "fact", "rotation", "signing keys rotate monthly")
    create_relation("s1", a, b)
    create_relation("s1", b, c)
    hits = search_graph("s1", "authentication", max_depth=2)
    assert [(h["node_id"], h["coverage"], h["depth"], h["via"]) for h in hits] == [
        (a, 1.0, 0, None), (b, 0.5, 1, a), (c, 0.25, 2, a)]
    assert all(0 <= h["coverage"] <= 1 for h in search_graph("s1", "tokens expire keys", top_k=3))
    assert search_graph("s1", "nothing matches this") == []


def test_traversal_interlinking_and_pruning(mem):
    out = add_interlinked_context("s1", [{"label": "alpha", "content": "first thing"},
                                         {"label": "beta", "content": "second thing"},
                                         {"label": "gamma", "content": "third", "node_type": "fact"}])
    a, b, g = out["node_ids"]
    assert out["relations"] == 6
    view = retrieve_with_traversal("s1", a, max_depth=1)
    assert view["node"]["label"] == "alpha" and {r["node_id"] for r in view["related"]} == {b, g}
    assert prune_stale_links("s1")["pruned"] == 0       # fresh edges are not stale
    mem.clock.advance(days=40)
    create_relation("s1", a, b, weight=1.0)            # refreshed: not stale
    create_relation("s1", b, g, weight=0.2)            # refreshed but weak: not stale yet
    planned = prune_stale_links("s1", min_weight=1.5, dry_run=True)
    assert planned["pruned"] == 4 and planned["dry_run"]
    assert len(mem.get_edges()) == 6
    done = prune_stale_links("s1", min_weight=1.5)
    assert done["pruned"] == 4 and len(mem.get_edges()) == 2
    with pytest.raises(ValueError, match="items\\[1\\]: node_type"):
        add_interlinked_context("s1", [{"label": "x", "content": "y"},
                                       {"label": "z", "content": "w", "node_type": "unknown"}])


def test_bad_input_names_the_argument_and_writes_nothing(mem):
    store = PMMemoryStore()
    before = json.dumps(mem.store.serialize())
    cases = [
        (lambda: upsert_node("s1", "planet", "x", "y"), "node_type"),
        (lambda: upsert_node("", "concept", "x", "y"), "session_id"),
        (lambda: upsert_node("s1", "concept", "", "y"), "label"),
        (lambda: upsert_node("s1", "concept", "!!", "y"), "label"),
        (lambda: upsert_node("s1", "concept", "x", ""), "content"),
        (lambda: upsert_node("s1", "concept", "x", "y", metadata=[1]), "metadata"),
        (lambda: resolve_context("s1", "", store), "key"),
        (lambda: resolve_context("s1", "k", {}), "store"),
        (lambda: resolve_context("s1", "k", store, min_score=0), "min_score"),
        (lambda: promote_to_long_term("s1", "k", 5), "content"),
        (lambda: promote_to_long_term("s1", "k", "v", node_type="nope"), "node_type"),
        (lambda: search_graph("s1", "q", max_depth=-1), "max_depth"),
        (lambda: search_graph("s1", "q", top_k=0), "top_k"),
        (lambda: create_relation("s1", "ghost", "ghost2"), "src"),
        (lambda: prune_stale_links("s1", older_than_days=-1), "older_than_days"),
        (lambda: PromotionPolicy(threshold=0), "threshold"),
    ]
    for call, name in cases:
        with pytest.raises(ValueError, match=name):
            call()
    assert json.dumps(mem.store.serialize()) == before
