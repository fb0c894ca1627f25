"""Issue 14 items 2 and 3: a failed write changes nothing; invalid Unicode is refused at the door.

Item 2: a word of ≥ 1,000 "y" overflowed the recursive Porter consonant test half-way through
``add_items``. The regression test below adds such a word; the fault-injection tests make every
function each write path calls raise, one at a time, and compare ``serialize()`` (and, for a
durable store, the journal) before and after.

Item 3: a lone surrogate (or a NUL in an id) is rejected with a ValueError naming the argument,
through the library, HTTP and MCP alike.
"""

from __future__ import annotations

import asyncio
import itertools
import json

import numpy as np
import pandas as pd
import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab.maintenance import MaintenanceConfig, Reasoner
from memlab.persist import PersistenceError
from memlab.session import promote_to_long_term, search_graph, upsert_node
from memlab.session.longterm import add_interlinked_context, prune_stale_links
from memlab.stemming import porter_stem
from memlab.text import MAX_TERM_CHARS, analyze_porter
from memlab.topics import ingest, query

from tests.conftest import T0


def snapshot(store: MemoryStore) -> str:
    return json.dumps(store.serialize())


def journal_rows(store: MemoryStore) -> list[tuple[str, str]]:
    return [] if store.journal is None else list(store.journal.ops())


# ---------------------------------------------------------------------------- item 2: the stemmer
def test_issue14_failed_add_leaves_store_unchanged(tmp_path):
    """The reported case: a long run of "y" used to raise RecursionError after the item lists
    were updated but before the columns; the item then surfaced and the next add failed."""
    clock = ManualClock(T0)
    mem = Memory(path=str(tmp_path / "m.db"), surfacing_mode="router", clock=clock)
    mem.add("the deploy checklist lives in the wiki", item_id="a")
    long_id = mem.add("deploy " + "y" * 5_000)
    ws = mem.store.workspace("default")
    columns = {len(ws.items), len(ws.item_ids), ws.created_ts.size, ws.tokens.size,
               ws.eligible.size, ws.activation.stored.size, len(ws.bm25)}
    assert columns == {2}
    assert mem.add("another deploy note", item_id="c") == "c"
    ids = {item["item_id"] for item in mem.get_working_context("s1", "deploy", k=10)["items"]}
    assert ids == {"a", long_id, "c"}
    before = snapshot(mem.store)
    mem.store.close()
    assert snapshot(MemoryStore(path=tmp_path / "m.db")) == before


@pytest.mark.parametrize("word", ["y" * 2_000, "ay" * 1_500, "by" * 1_000 + "ing",
                                  "yy" * 700 + "ies", "s" + "y" * 999 + "ed"])
def test_the_stemmer_is_iterative_and_still_equals_snowball(word):
    snowball = pytest.importorskip("snowballstemmer").stemmer("porter")
    assert porter_stem(word) == snowball.stemWord(word)


def test_long_terms_are_cut_alike_for_items_and_queries():
    token = "q" * 10_000
    assert [len(t) for t in analyze_porter(token)] == [MAX_TERM_CHARS]
    mem = Memory()
    mem.add(f"blob {token}", item_id="blob")
    assert [hit["item_id"] for hit in mem.search(token)] == ["blob"]


# ---------------------------------------------------------------------------- item 2: injection
class InjectedFault(RuntimeError):
    """What a patched function raises."""


def _populated(tmp_path, durable: bool) -> Memory:
    clock = ManualClock(T0)
    path = str(tmp_path / "inject.db") if durable else None
    mem = Memory(path=path, surfacing_mode="router", clock=clock)
    mem.add_many([{"content": "Deploys run on Fridays", "item_id": "a",
                   "metadata": {"title": "Deploy day"}},
                  {"content": "The auth service issues JWT tokens", "item_id": "b"},
                  {"content": "Lunch on Friday is pizza", "item_id": "c"}])
    mem.add_edge("a", "b", "RELATED", 0.5)
    mem.pin_item("s1", "a", 1.0)
    mem.add_anchor("s1", "ship the release", item_id="goal")
    upsert_node("s1", "concept", "Auth flow", "fresh login flow", memory=mem)
    ingest("new_topic", title="Checkout service", fields={"owner": "Lena"}, topic_id="t1",
           memory=mem)
    clock.advance(hours=1)
    return mem


_FRESH = itertools.count()  # fresh field names: a call that succeeds must not block the next

# Each public write path, as a call on the populated memory.
WRITES = {
    "add": lambda m: m.add("Deploys need a checklist", metadata={"title": "Checklist"}),
    "add_many": lambda m: m.add_many(["alpha note", {"content": "beta note",
                                                     "metadata": {"name": "Beta"}}]),
    "add_edge": lambda m: m.add_edge("b", "c", "MENTIONS", 2.0),
    "add_edges": lambda m: m.add_edges([("b", "c"), ("c", "a", "RELATED", 0.3)]),
    "add_edges_frame": lambda m: m.add_edges(pd.DataFrame({"src": ["c"], "dst": ["b"]})),
    "pin_item": lambda m: m.pin_item("s1", "b", 0.5),
    "unpin_item": lambda m: m.unpin_item("s1", "a"),
    "add_anchor": lambda m: m.add_anchor("s2", "keep the API stable", "constraint"),
    "flag_anchor": lambda m: m.flag_anchor_for_review("s1", "goal", "drifted"),
    "get": lambda m: m.get("b"),
    "search": lambda m: m.search("friday deploys"),
    "upsert_node_new": lambda m: upsert_node("s1", "concept", "Billing", "invoices monthly",
                                             memory=m),
    "upsert_node_existing": lambda m: upsert_node("s1", "concept", "auth FLOW",
                                                  "login flow v2", {"label2": "x"}, memory=m),
    "promote": lambda m: promote_to_long_term("s1", "pricing", "three tiers", memory=m),
    "search_graph": lambda m: search_graph("s1", "auth flow", memory=m),
    "ingest_new": lambda m: ingest("new_topic", title="Search service",
                                   fields={"owner": "Omar"}, memory=m),
    "ingest_extend": lambda m: ingest("extend_topic", topic_id="t1",
                                      fields={f"tier{next(_FRESH)}": {"value": 1, "type": "number"}},
                                      memory=m),
    "ingest_version": lambda m: ingest("version_field", topic_id="t1", field="owner",
                                       value="Ada", memory=m),
    "topic_query": lambda m: query("checkout owner", memory=m),
    "interlinked": lambda m: add_interlinked_context(
        "s1", [{"label": "Queue", "content": "jobs queue"},
               {"label": "Worker", "content": "jobs worker"}], memory=m),
    "prune_links": lambda m: prune_stale_links("s1", older_than_days=0.0, min_weight=10.0,
                                               memory=m),
    "maintenance": lambda m: Reasoner(m, MaintenanceConfig(enabled=True)).run("test"),
}
# Writes that make one store call: all-or-nothing even in memory. The others (several store
# calls) are all-or-nothing through a transaction, which needs a durable store to roll back.
SINGLE_CALL = {"add", "add_many", "add_edge", "add_edges", "add_edges_frame", "pin_item",
               "unpin_item", "add_anchor", "flag_anchor", "get", "search", "upsert_node_new",
               "upsert_node_existing", "promote", "search_graph"}

# What may fail before a write changes anything: validation, analysis, titles, node keys.
COMPUTE_STEPS = [
    ("memlab.text", "porter_stem"), ("memlab.text", "words"),
    ("memlab.store", "estimate_tokens"), ("memlab.store", "node_key_of"),
    ("memlab.store", "index_text"), ("memlab.text.Gazetteer", "phrases"),
    ("memlab.store.Workspace", "generate_ids"), ("memlab.store.Workspace", "check_rows"),
    ("memlab.store.Workspace", "require"), ("memlab.store", "validate_weight"),
    ("memlab.store", "validate_id"),
    ("memlab.store", "validate_edge_type"), ("memlab.store", "validate_text"),
    ("memlab.store", "validate_metadata"), ("memlab.model.MemoryItem", "__init__"),
]
# The steps of applying (out of memory, a bug): a durable store is rebuilt from its journal.
APPLY_STEPS = [
    ("memlab.signals.bm25.BM25Index", "add"), ("memlab.signals.bm25.BM25Index", "add_many"),
    ("memlab.signals.bm25.BM25Index", "replace"), ("memlab._arrays.Growable", "extend"),
    ("memlab.signals.activation.ActivationState", "add"),
    ("memlab.signals.activation.ActivationState", "reinforce"),
    ("memlab.text.Gazetteer", "add_phrases"), ("memlab.text.Gazetteer", "remove_phrases"),
    ("memlab.graph.csr.GraphView", "write"), ("memlab.graph.csr.GraphView", "remove"),
    ("memlab.model.MemoryItem", "record"), ("memlab.store", "encode"),
    ("memlab.persist.Journal", "append_many"),
]


def _resolve(target: str):
    import importlib
    parts = target.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            obj = getattr(obj, name)
        return obj
    raise ImportError(target)


def _owners(target: str, attr: str) -> list:
    """Where ``target.attr`` is looked up when called: the object itself, or for a name the
    ``memlab.store`` package's modules import (``validate_id``, ``encode``, …) every module of
    the package that binds it (the package is split by concern; each module has its own)."""
    import importlib
    import pkgutil
    owner = _resolve(target)
    if not hasattr(owner, "__path__"):
        return [owner]
    modules = [importlib.import_module(f"{target}.{info.name}")
               for info in pkgutil.iter_modules(owner.__path__)]
    owners = [m for m in modules if attr in vars(m)]
    assert owners and len({id(getattr(m, attr)) for m in owners}) == 1, (target, attr)
    return owners


def _inject(monkeypatch, target: str, attr: str, fired: list) -> None:
    """Make ``target.attr`` raise on its first call (a transient fault: out of memory, a bug
    hit once); later calls, such as the replay that restores a durable store, go through."""
    owners = _owners(target, attr)
    original = getattr(owners[0], attr)
    state = {"armed": True}

    def boom(*args, **kwargs):
        if state["armed"]:
            state["armed"] = False
            fired.append(f"{target}.{attr}")
            raise InjectedFault(f"{target}.{attr}")
        return original(*args, **kwargs)
    for owner in owners:
        monkeypatch.setattr(owner, attr, boom)


def _check_each_step(tmp_path, monkeypatch, write: str, steps, durable: bool) -> list[str]:
    mem = _populated(tmp_path, durable)
    fired: list[str] = []
    for target, attr in steps:
        before, rows = snapshot(mem.store), journal_rows(mem.store)
        with monkeypatch.context() as patch:
            _inject(patch, target, attr, fired)
            count = len(fired)
            try:
                WRITES[write](mem)
            except (InjectedFault, PersistenceError):
                pass
            else:
                assert len(fired) == count, f"{write}: the fault in {attr} was swallowed"
                continue
        after = snapshot(mem.store)
        if after != before:
            diff = [k for k in range(min(len(before), len(after))) if before[k] != after[k]][:1]
            at = max(0, (diff[0] if diff else min(len(before), len(after))) - 150)
            raise AssertionError(f"{write} changed the store when {attr} failed: "
                                 f"{before[at:at + 300]!r} -> {after[at:at + 300]!r}")
        assert journal_rows(mem.store) == rows
    # the store still works: a write succeeds and a context assembles
    mem.add("written after the faults")
    mem.get_working_context("s1", "deploy auth checkout", k=10)
    if durable:
        after = snapshot(mem.store)
        mem.store.close()
        assert snapshot(MemoryStore(path=tmp_path / "inject.db")) == after
    return fired


@pytest.mark.parametrize("write", sorted(SINGLE_CALL))
def test_a_fault_before_applying_changes_nothing_in_memory(tmp_path, monkeypatch, write):
    fired = _check_each_step(tmp_path, monkeypatch, write, COMPUTE_STEPS, durable=False)
    assert fired, f"no step of {write} was injected"


@pytest.mark.parametrize("write", sorted(WRITES))
def test_a_fault_at_any_step_changes_nothing_in_a_durable_store(tmp_path, monkeypatch, write):
    fired = _check_each_step(tmp_path, monkeypatch, write, COMPUTE_STEPS + APPLY_STEPS,
                             durable=True)
    assert fired, f"no step of {write} was injected"


def test_a_rejected_write_does_not_rebuild_the_store(tmp_path, monkeypatch):
    """Validation failures raise before applying, so they never trigger a replay."""
    mem = _populated(tmp_path, durable=True)
    replays = []
    monkeypatch.setattr(MemoryStore, "_replay", lambda self: replays.append(1))
    with pytest.raises(ValueError, match="already exists"):
        mem.add("dup", item_id="a")
    other = Memory(store=mem.store, workspace_id="other", clock=mem.clock)
    other.add("elsewhere", item_id="e")
    replays.clear()
    with pytest.raises(ValueError, match="bound to workspace"):
        other.pin_item("s1", "e")
    with pytest.raises(ValueError, match="does not exist"):
        mem.add_edge("a", "ghost")
    assert replays == []


def test_store_level_writes_check_item_numbers_before_applying():
    mem = Memory()
    mem.add("alpha", item_id="a")
    before = snapshot(mem.store)
    for write in (lambda s: s.set_salience("default", [0, 5], [2.0, 2.0]),
                  lambda s: s.archive("default", [0, -1], T0, "x"),
                  lambda s: s.add_edge_arrays("default", np.array([0]), np.array([3]),
                                              "RELATED", np.array([1.0])),
                  lambda s: s.record_retrieval("default", [0, 9], T0, increment=0.1,
                                               half_life_h=1.0, kind="get"),
                  lambda s: s.remove_edges("default", [4])):
        with pytest.raises(ValueError):
            write(mem.store)
        assert snapshot(mem.store) == before


def test_a_failed_add_to_a_new_workspace_leaves_no_workspace(monkeypatch):
    store = MemoryStore()
    new = store.prepare_item("alpha")
    monkeypatch.setattr("memlab.store.items.estimate_tokens", lambda text: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        store.add_items("fresh", [new], T0)
    assert store.workspace_ids() == []


# ---------------------------------------------------------------------------- item 3: Unicode
BAD = "deploy \udc00 checklist"


@pytest.mark.parametrize("call, message", [
    (lambda m: m.add(BAD), "content contains a lone surrogate at 7"),
    (lambda m: m.add("ok", metadata={"k": BAD}), r"metadata\['k'\] contains a lone surrogate"),
    (lambda m: m.add("ok", metadata={"a": [{"b": BAD}]}),
     r"metadata\['a'\]\[0\]\['b'\] contains a lone surrogate at 7"),
    (lambda m: m.add("ok", metadata={BAD: 1}), "metadata key .* contains a lone surrogate"),
    (lambda m: m.add("ok", item_id=BAD), "item_id contains a lone surrogate"),
    (lambda m: m.add("ok", item_id="a\x00b"), "item_id must not contain NUL"),
    (lambda m: m.add_many([{"content": "x", "metadata": {"t": ["\ud800"]}}]),
     r"items\[0\]: metadata\['t'\]\[0\] contains a lone surrogate at 0"),
    (lambda m: m.search(BAD), "query contains a lone surrogate at 7"),
    (lambda m: m.get_working_context("s1", BAD), "query contains a lone surrogate"),
    (lambda m: m.get_working_context(BAD, "q"), "session_id contains a lone surrogate"),
    (lambda m: m.get_working_context("s\x00", "q"), "session_id must not contain NUL"),
    (lambda m: m.pin_item(BAD, "a"), "session_id contains a lone surrogate"),
    (lambda m: m.add_anchor("s1", BAD), "content contains a lone surrogate"),
    (lambda m: upsert_node("s1", "concept", BAD, "c", memory=m), "label contains a lone"),
    (lambda m: upsert_node("s1", "concept", "L", BAD, memory=m), "content contains a lone"),
    (lambda m: ingest("new_topic", title=BAD, memory=m), "title contains a lone surrogate"),
    (lambda m: ingest("new_topic", title="T", fields={"f": BAD}, memory=m),
     "field 'f' value contains a lone surrogate"),
    (lambda m: ingest("new_topic", title="T", fields={"f": {"value": [BAD], "type": "json"}},
                      memory=m), r"value\[0\] contains a lone surrogate"),
    (lambda m: query(BAD, memory=m), "q contains a lone surrogate"),
    (lambda m: m.add("ok", metadata={"deep": _nested(40)}), "nests deeper than 32 levels"),
    (lambda m: m.add("ok", metadata={"n": float("nan")}), "JSON-serialisable"),
    (lambda m: m.add("ok", metadata={"n": 10 ** 5000}), "JSON-serialisable"),
])
def test_invalid_unicode_is_rejected_by_the_library(call, message, tmp_path):
    mem = Memory(path=str(tmp_path / "u.db"), surfacing_mode="router", clock=ManualClock(T0))
    mem.add("deploy checklist", item_id="a")
    before, rows = snapshot(mem.store), journal_rows(mem.store)
    with pytest.raises(ValueError, match=message):
        call(mem)
    assert snapshot(mem.store) == before and journal_rows(mem.store) == rows
    json.dumps(mem.get_working_context("s1", "deploy checklist"), allow_nan=False)


def _nested(depth: int):
    value: object = "leaf"
    for _ in range(depth):
        value = {"k": value}
    return value


def test_invalid_unicode_is_rejected_over_http(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from _service_client import TestClient
    from memlab.service import ServiceState, create_app
    state = ServiceState(db_path=str(tmp_path / "h.db"), maintenance=False)
    http = TestClient(create_app(state))
    assert http.post("/v1/items", json={"content": "deploy checklist"}).status_code == 200
    cases = [("/v1/items", {"content": BAD}, "content contains a lone surrogate at 7"),
             ("/v1/items", {"content": "x", "metadata": {"a": {"b": BAD}}},
              "metadata['a']['b'] contains a lone surrogate at 7"),
             ("/v1/items/bulk", {"items": [{"content": BAD}]}, "items[0]: content contains"),
             ("/v1/context", {"session_id": "s1", "query": BAD}, "query contains a lone"),
             ("/v1/search", {"query": BAD}, "query contains a lone surrogate"),
             ("/v1/graph/nodes", {"session_id": "s1", "node_type": "concept", "label": BAD,
                                  "content": "c"}, "label contains a lone surrogate"),
             ("/v1/cache/set", {"key": "k", "value": BAD}, "value contains a lone surrogate")]
    for route, body, message in cases:
        # json.dumps escapes the surrogate as \udc00, as a client in another language would
        response = http.post(route, content=json.dumps(body),
                             headers={"content-type": "application/json"})
        assert response.status_code == 400, (route, response.text)
        assert message in response.json()["detail"]
    # an id with NUL is refused (400, the field named) before any write, as in a bulk item
    response = http.post("/v1/items", content=json.dumps({"content": "x", "item_id": "a\x00"}),
                         headers={"content-type": "application/json"})
    assert response.status_code == 400, response.text
    assert "item_id must not contain NUL" in response.text
    context = http.post("/v1/context", json={"session_id": "s1", "query": "deploy checklist"})
    assert context.status_code == 200
    assert [i["content"] for i in context.json()["items"]] == ["deploy checklist"]


def test_invalid_unicode_is_rejected_over_mcp(tmp_path):
    pytest.importorskip("mcp")
    from mcp import Client
    from memlab.service import ServiceState, create_mcp_server
    server = create_mcp_server(ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False))

    async def go():
        async with Client(server) as client:
            out = []
            for args in ({"content": BAD}, {"content": "x", "metadata": {"k": [BAD]}},
                         {"content": "x", "item_id": "a\x00"}):
                out.append(await client.call_tool("add_memory", args))
            out.append(await client.call_tool("upsert_memory_node", {
                "session_id": "s1", "node_type": "concept", "label": "L", "content": BAD}))
            out.append(await client.call_tool("get_working_context",
                                              {"session_id": "s1", "query": BAD}))
            ok = await client.call_tool("get_working_context",
                                        {"session_id": "s1", "query": "deploy"})
            return out, ok
    rejected, ok = asyncio.run(go())
    messages = [r.content[0].text for r in rejected]
    assert all(r.is_error for r in rejected), messages
    assert "content contains a lone surrogate at 7" in messages[0]
    assert "metadata['k'][0] contains a lone surrogate at 7" in messages[1]
    assert "item_id must not contain NUL" in messages[2]
    assert "content contains a lone surrogate" in messages[3]
    assert "query contains a lone surrogate" in messages[4]
    assert not ok.is_error
