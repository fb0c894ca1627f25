"""Reopening a durable store is exact (issue 13, item 7): after any sequence of writes (and reads),
the reopened store serialises to the same JSON text as the live one (key order included, no
``sort_keys``) and assembles the same working contexts."""

import json
import os
import tempfile
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab import ManualClock, Memory, MemoryStore
from memlab.maintenance import MaintenanceConfig, Reasoner
from memlab.session import upsert_node
from memlab.topics import ingest, query
from _support import legacy_file

# Each example writes its own database; on tmpfs the journal's fsyncs cost nothing, so 200
# examples stay fast (the result does not depend on where the file lives).
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") and os.access("/dev/shm", os.W_OK) else None
START = datetime(2024, 3, 1, 9, 30, tzinfo=timezone.utc)
WORKSPACES = ("ws", "other", "empty")
SESSIONS = ("s1", "s2")
WORDS = ("deploy", "friday", "jwt", "auth", "rotation", "keys", "checkout", "owner", "lunch")

text = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
keys = st.sampled_from(["zeta", "alpha", "Mid", "b", "a1", "title", "label", "node_type"])
leaves = (st.none() | st.booleans() | st.integers(-10**6, 10**6) | text
          | st.floats(allow_nan=False, allow_infinity=False, width=64))
nested = st.recursive(leaves, lambda inner: st.lists(inner, max_size=3)
                      | st.dictionaries(st.sampled_from(["z", "y", "x", "k"]), inner, max_size=3),
                      max_leaves=5)
metadata = st.none() | st.dictionaries(keys, nested | text, max_size=4)
memory_types = st.sampled_from(["semantic", "episodic", "procedural"])
pick = st.integers(0, 50)
workspace = st.sampled_from(WORKSPACES)
session = st.sampled_from(SESSIONS)
entry = st.fixed_dictionaries({"content": text}, optional={
    "metadata": metadata, "memory_type": memory_types,
    "created_at": st.integers(-240, 0).map(lambda h: START + timedelta(hours=h))})

ops = st.one_of(
    st.tuples(st.just("open"), workspace),
    st.tuples(st.just("add"), workspace, text, memory_types, metadata),
    st.tuples(st.just("add_many"), workspace, st.lists(entry, min_size=1, max_size=3)),
    st.tuples(st.just("edge"), workspace, pick, pick, st.sampled_from(["RELATED", "MENTIONS"]),
              st.sampled_from([0.5, 1.0, 2.0])),
    st.tuples(st.just("remove_edge"), workspace, pick),
    st.tuples(st.just("pin"), workspace, session, pick, st.sampled_from([0.0, 0.5, 1.0])),
    st.tuples(st.just("unpin"), workspace, session, pick),
    st.tuples(st.just("anchor"), workspace, session, text, metadata),
    st.tuples(st.just("flag"), workspace, session, pick, st.booleans()),
    st.tuples(st.just("update"), workspace, pick, st.none() | text, metadata),
    st.tuples(st.just("archive"), workspace, pick),
    st.tuples(st.just("topic"), workspace, text, st.dictionaries(
        st.sampled_from(["owner", "status", "area"]), text, max_size=2)),
    st.tuples(st.just("version"), workspace, pick, text),
    st.tuples(st.just("query"), workspace, text),
    st.tuples(st.just("node"), workspace, session, st.sampled_from(["auth", "Auth!", "keys"]),
              text),
    st.tuples(st.just("maintain"), workspace, st.sampled_from([None, 2])),
    st.tuples(st.just("get"), workspace, pick),
    st.tuples(st.just("search"), workspace, text),
    st.tuples(st.just("context"), workspace, session, text),
    st.tuples(st.just("advance"), st.sampled_from([1, 5, 30, 90])),
)


def facade(store: MemoryStore, wid: str, clock: ManualClock) -> Memory:
    return Memory(store=store, workspace_id=wid, surfacing_mode="router", clock=clock)


def run(store: MemoryStore, clock: ManualClock, operations: list[tuple]) -> None:
    """Apply ``operations``; a write refused as invalid (ValueError) must change nothing."""
    mems: dict[str, Memory] = {}

    def mem_of(wid: str) -> Memory:
        if wid not in mems:
            mems[wid] = facade(store, wid, clock)
        return mems[wid]

    def item(mem: Memory, n: int) -> str | None:
        ids = mem.store.workspace(mem.workspace_id).item_ids
        return ids[n % len(ids)] if ids else None

    for op in operations:
        kind, args = op[0], op[1:]
        if kind == "advance":
            clock.advance(minutes=args[0] * 17)
            continue
        mem = mem_of(args[0])
        ws = store.workspace(mem.workspace_id)
        try:
            if kind == "add":
                mem.add(args[1], memory_type=args[2], metadata=args[3])
            elif kind == "add_many":
                mem.add_many(args[1])
            elif kind == "edge" and len(mem):
                mem.add_edge(item(mem, args[1]), item(mem, args[2]), args[3], args[4])
            elif kind == "remove_edge" and ws.graph.table.src.size:
                store.remove_edges(mem.workspace_id, [args[1] % ws.graph.table.src.size])
            elif kind == "pin" and len(mem):
                mem.pin_item(args[1], item(mem, args[2]), args[3])
            elif kind == "unpin" and len(mem):
                mem.unpin_item(args[1], item(mem, args[2]))
            elif kind == "anchor":
                mem.add_anchor(args[1], args[2], metadata=args[3])
            elif kind == "flag":
                anchors = store.anchors(mem.workspace_id, args[1])
                if anchors:
                    anchor = ws.item_ids[anchors[args[2] % len(anchors)]]
                    if args[3]:
                        mem.flag_anchor_for_review(args[1], anchor, "scope-changed")
                    else:
                        mem.clear_anchor_review(args[1], anchor)
            elif kind == "update" and len(mem):
                idx = args[1] % len(mem)
                new = store.prepare_item(args[2] or "placeholder", metadata=args[3])
                metadata = new.metadata if args[3] is not None else None
                title = (metadata or {}).get("title")
                if (ws.items[idx].memory_type == "topic" and metadata is not None
                        and not (isinstance(title, str) and title.strip())):
                    # a topic keeps its title: the write is refused and changes nothing
                    before = json.dumps(store.serialize(), sort_keys=True)
                    with pytest.raises(ValueError, match="title"):
                        store.update_item(mem.workspace_id, idx, clock.now(), content=args[2],
                                          metadata=metadata)
                    assert json.dumps(store.serialize(), sort_keys=True) == before
                else:
                    store.update_item(mem.workspace_id, idx, clock.now(), content=args[2],
                                      metadata=metadata)
            elif kind == "archive" and len(mem):
                store.archive(mem.workspace_id, [args[1] % len(mem)], clock.now(), "superseded",
                              {"zz": 1, "aa": [2, {"y": 3, "b": 4}]})
            elif kind == "topic":
                ingest("new_topic", title=args[1], fields=args[2], memory=mem)
            elif kind == "version":
                topics = sorted(ws.topic_fields)
                if topics:
                    idx = topics[args[1] % len(topics)]
                    names = list(ws.topic_fields[idx])
                    if names:
                        ingest("version_field", topic_id=ws.item_ids[idx],
                               field=names[args[1] % len(names)], value=args[2], memory=mem)
            elif kind == "query":
                query(args[1], memory=mem)
            elif kind == "node":
                upsert_node(args[1], "concept", args[2], args[3], memory=mem)
            elif kind == "maintain":  # merge, revise, decay, inhibition: journaled writes
                Reasoner(mem, MaintenanceConfig(capacity=args[1])).run()
            elif kind == "get" and len(mem):
                mem.get(item(mem, args[1]))
            elif kind == "search":
                mem.search(args[1])
            elif kind == "context":
                mem.get_working_context(args[1], args[2], k=4)
        except ValueError:
            pass


def state_text(store: MemoryStore) -> str:
    return json.dumps(store.serialize())  # no sort_keys: key order is part of "exact"


def contexts_text(store: MemoryStore, clock: ManualClock, queries: list[str]) -> str:
    out = []
    for wid in store.workspace_ids():
        mem = facade(store, wid, clock)  # same seed on both sides: same decision ids
        legacy = Memory(store=store, workspace_id=wid, surfacing_mode="legacy", clock=clock)
        for sid in SESSIONS:
            for q in queries:
                out.append(mem.get_working_context(sid, q, k=5))
                out.append(legacy.get_working_context(sid, q, k=3))
                out.append(mem.get_pins(sid))
                out.append(mem.drift_warnings(sid))
    return json.dumps(out)


def assert_reopens_exactly(operations: list[tuple], queries: list[str]) -> None:
    clock = ManualClock(START)
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        path = Path(tmp) / "m.db"
        live = MemoryStore(path=path)
        try:
            run(live, clock, operations)
            live.flush()  # reads' reinforcements are group-committed (issue 14 item 7)
            before = state_text(live)
            reopened = MemoryStore(path=path)
            try:
                assert state_text(reopened) == before
                clock.advance(hours=1)
                assert contexts_text(reopened, clock, queries) == contexts_text(live, clock,
                                                                                 queries)
                assert state_text(live) == before  # contexts are reads: nothing changed
                assert state_text(reopened) == before
            finally:
                reopened.close()
        finally:
            live.close()


@settings(max_examples=200, deadline=None)
@given(st.lists(ops, min_size=1, max_size=10), st.lists(text, min_size=1, max_size=2))
def test_reopened_store_serialises_and_surfaces_as_the_live_one(operations, queries):
    assert_reopens_exactly(operations, queries)


def test_issue13_empty_workspace_survives_reopen(tmp_path):
    store = MemoryStore(path=tmp_path / "m.db")
    Memory(store=store, workspace_id="empty")
    Memory(store=store, workspace_id="empty")  # an existing workspace: nothing more journaled
    assert store.journal.count() == 1
    store.close()
    again = MemoryStore(path=tmp_path / "m.db")
    assert again.workspace_ids() == ["empty"]
    assert state_text(again) == state_text(store)


def test_issue13_metadata_key_order_survives_reopen(tmp_path):
    clock = ManualClock(START)
    mem = Memory(path=str(tmp_path / "m.db"), clock=clock)
    meta = {"zeta": 1, "alpha": {"z": [1, {"y": 2, "b": 3}], "a": None}, "Mid": "x"}
    mem.add("deploys run on fridays", metadata=meta, item_id="d")
    mem.store.close()
    again = Memory(path=str(tmp_path / "m.db"), clock=clock)
    got = again.store.workspace("default").items[0].metadata
    assert json.dumps(got) == json.dumps(meta)
    assert state_text(again.store) == state_text(mem.store)


def test_issue13_reading_expired_pins_changes_nothing(tmp_path):
    # A read of an expired pin session used to drop it from memory (not journaled), so the live
    # store and the reopened one differed.
    assert_reopens_exactly([("add", "ws", "deploy friday", "semantic", None),
                            ("pin", "ws", "s1", 0, 1.0),
                            ("advance", 30), ("advance", 30), ("advance", 30),
                            ("context", "ws", "s1", "deploy")], ["deploy"])


def test_a_version_1_journal_opens_and_is_migrated_to_version_3(tmp_path):
    import sqlite3

    from memlab.persist import SCHEMA_VERSION

    # Write a store, then rewrite it as memlab wrote version 1: payload keys sorted, no
    # create_workspace rows, no checksums, schema_version 1.
    clock = ManualClock(START)
    mem = Memory(path=str(tmp_path / "m.db"), workspace_id="ws", clock=clock)
    mem.add("deploys run on fridays", metadata={"zeta": 1, "alpha": {"z": 2, "a": 3}})
    mem.pin_item("s1", mem.store.workspace("ws").item_ids[0])
    mem.store.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    rows = conn.execute("SELECT op, payload FROM ops ORDER BY seq").fetchall()
    conn.close()
    assert [op for op, _ in rows] == ["store.create_workspace", "store.add_items", "store.pin"]
    legacy_file(tmp_path / "v1.db", [(op, json.dumps(json.loads(payload), sort_keys=True))
                                     for op, payload in rows[1:]], 1)
    again = MemoryStore(path=tmp_path / "v1.db")
    assert again.workspace_ids() == ["ws"]
    item = again.workspace("ws").items[0]
    assert item.content == "deploys run on fridays"
    assert json.dumps(item.metadata) == '{"alpha": {"a": 3, "z": 2}, "zeta": 1}'  # as v1 stored
    assert again.pins("ws", "s1", clock.now()) == {item.item_id: 1.0}
    state = state_text(again)
    again.close()
    conn = sqlite3.connect(tmp_path / "v1.db")
    assert conn.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0] \
        == str(SCHEMA_VERSION) == "3"
    assert conn.execute("SELECT count(*) FROM ops WHERE crc < 0").fetchone()[0] == 0
    conn.close()
    assert state_text(MemoryStore(path=tmp_path / "v1.db")) == state  # migrated once, reads
