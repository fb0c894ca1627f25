"""Durability (SPEC §9): write-through SQLite journal, reopen restores everything, failed writes
change nothing, schema versions, and kill -9 while a client writes (slow tier)."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab.maintenance import MaintenanceConfig, Reasoner
from memlab.persist import PersistenceError, SchemaVersionError
from memlab.session import PMMemoryStore, promote_to_long_term, upsert_node
from memlab.topics import ingest, query


def frozen(store: MemoryStore) -> str:
    return json.dumps(store.serialize(), sort_keys=True)


def populate(path, clock):
    store = MemoryStore(path=path)
    mem = Memory(store=store, workspace_id="ws", surfacing_mode="router", clock=clock)
    other = Memory(store=store, workspace_id="other", surfacing_mode="router", clock=clock)
    a = mem.add("We picked JWT because sessions did not scale", memory_type="episodic")
    b = mem.add("Key rotation runbook", memory_type="procedural", metadata={"title": "Keys"})
    mem.add_many(["alpha", {"content": "beta", "item_id": "beta"}])
    mem.add_edges([(a, b, "RELATED", 0.7), (b, "beta")])
    mem.add_edge(a, b, "RELATED", 2.0)                      # re-weighted
    other.add("another workspace")
    mem.get(a)                                              # activation reinforced
    mem.search("rotation")
    mem.pin_item("s1", "beta", 0.5)
    anchor = mem.add_anchor("s1", "Goal: ship by May", item_id="goal")
    mem.flag_anchor_for_review("s1", anchor, "scope changed")
    clock.advance(hours=3)
    t = ingest("new_topic", title="Checkout", fields={"owner": "Lena"}, memory=mem)["topic_id"]
    ingest("version_field", topic_id=t, field="owner", value="Omar", memory=mem)
    query("checkout owner", memory=mem)
    upsert_node("s1", "concept", "auth", "login flow", memory=mem)
    promote_to_long_term("s1", "tokens", "JWT 15 minutes", memory=mem)
    cache = PMMemoryStore(silo_size=2, durable=store, name="agent")
    cache.set("k1", "v1")
    cache.set("k2", "v2")
    cache.peek("k1")
    cache.set("k3", "v3")                                   # evicts k2
    ingest("new_topic", title="checkout!", memory=mem)
    Reasoner(mem, MaintenanceConfig(capacity=3)).run()      # merge, decay, inhibition
    return store, mem, cache


def test_reopening_restores_everything(tmp_path):
    clock = ManualClock(datetime(2024, 3, 1, tzinfo=timezone.utc))
    store, mem, cache = populate(tmp_path / "m.db", clock)
    before, cache_before = frozen(store), cache.snapshot()
    context = mem.get_working_context("s1", "why JWT keys", k=5)
    store.close()
    again = MemoryStore(path=tmp_path / "m.db")
    assert frozen(again) == before
    assert PMMemoryStore(silo_size=2, durable=again, name="agent").snapshot() == cache_before
    mem2 = Memory(store=again, workspace_id="ws", surfacing_mode="router", clock=clock)
    assert [i["item_id"] for i in mem2.get_working_context("s1", "why JWT keys", k=5)["items"]] \
        == [i["item_id"] for i in context["items"]]
    assert mem2.get_pins("s1") == {"beta": 0.5}
    assert again.journal.integrity_check() == "ok"


def test_a_failed_write_changes_nothing_in_memory_or_on_disk(tmp_path, monkeypatch):
    clock = ManualClock(datetime(2024, 3, 1, tzinfo=timezone.utc))
    mem = Memory(path=str(tmp_path / "m.db"), surfacing_mode="router", clock=clock)
    mem.add("first", item_id="a")
    before = frozen(mem.store)
    with pytest.raises(ValueError):
        mem.add_edges([("a", "missing")])                   # bad input: nothing journaled
    ops = mem.store.journal.count()

    def broken(ops):
        raise sqlite3.OperationalError("disk I/O error")

    monkeypatch.setattr(mem.store.journal, "append_many", broken)
    with pytest.raises(PersistenceError, match="disk I/O error"):
        mem.add("second", item_id="b")                      # applied, then rolled back
    assert frozen(mem.store) == before and "b" not in mem.store.workspace("default").index_of
    with pytest.raises(PersistenceError):
        ingest("new_topic", title="T", fields={"x": "y"}, memory=mem)  # a whole transaction
    assert frozen(mem.store) == before
    monkeypatch.undo()
    assert mem.store.journal.count() == ops
    assert frozen(MemoryStore(path=tmp_path / "m.db")) == before


def test_schema_versions_are_checked(tmp_path):
    path = tmp_path / "m.db"
    MemoryStore(path=path).close()
    conn = sqlite3.connect(path)
    conn.execute("UPDATE meta SET value='99' WHERE key='schema_version'")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaVersionError, match="schema version 99, newer than this memlab"):
        MemoryStore(path=path)
    other = tmp_path / "other.db"
    conn = sqlite3.connect(other)
    conn.execute("CREATE TABLE t (x)")
    conn.commit()
    conn.close()
    with pytest.raises(SchemaVersionError, match="no memlab schema"):
        MemoryStore(path=other)
    (tmp_path / "junk.db").write_bytes(b"not a database at all" * 100)
    with pytest.raises(SchemaVersionError, match="not a memlab database"):
        MemoryStore(path=tmp_path / "junk.db")


WRITER = textwrap.dedent("""
    import sys
    from memlab import Memory
    mem = Memory(path=sys.argv[1], surfacing_mode="router")
    n = 0
    while True:
        item = mem.add(f"note number {n}", item_id=f"n{n}")
        if n:
            mem.add_edge(f"n{n - 1}", item)
        print(n, flush=True)          # acknowledged: the call returned
        n += 1
""")


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(20))
def test_kill_9_while_writing_keeps_every_acknowledged_write(tmp_path, round_):
    path = tmp_path / "m.db"
    proc = subprocess.Popen([sys.executable, "-c", WRITER, str(path)], stdout=subprocess.PIPE,
                            text=True)
    acknowledged = -1
    target = 5 + 7 * round_  # kill at a different point of the write stream each round
    while acknowledged < target:
        line = proc.stdout.readline()
        assert line, "the writer stopped early"
        acknowledged = int(line)
    os.kill(proc.pid, signal.SIGKILL)  # mid-write, most likely: it never waits for us
    proc.wait()
    store = MemoryStore(path=path)
    ws = store.workspace("default")
    assert all(f"n{i}" in ws.index_of for i in range(acknowledged + 1))
    assert store.journal.integrity_check() == "ok"
