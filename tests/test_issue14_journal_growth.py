"""Issue 14 item 7: reads group-commit their activation reinforcements (at most one journal row
per ``reinforce_batch`` reads, a bounded loss window on a crash) and the journal is compacted
into a snapshot. The kill -9 tests are in the slow tier."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab.persist import PersistenceError, decode


def frozen(store: MemoryStore) -> str:
    return json.dumps(store.serialize())


def _memory(path, batch, clock=None):
    clock = clock or ManualClock(datetime(2024, 1, 1, tzinfo=timezone.utc))
    store = MemoryStore(path=path, reinforce_batch=batch)
    mem = Memory(store=store, workspace_id="ws", clock=clock)
    return store, mem


@pytest.mark.parametrize("batch,reads", [(1, 7), (8, 1), (8, 8), (8, 30), (64, 200)])
def test_n_reads_add_at_most_ceil_n_over_batch_rows(tmp_path, batch, reads):
    store, mem = _memory(tmp_path / "m.db", batch)
    mem.add_many(["deploy on fridays", "lunch is pizza", "deploy runbook"])
    before = store.journal.count()
    for i in range(reads):
        mem.search("deploy") if i % 2 else mem.get(mem.search("pizza")[0]["item_id"])
    live = frozen(store)
    store.close()
    reopened = MemoryStore(path=tmp_path / "m.db")
    calls = 2 * (reads - reads // 2) + reads // 2  # a get read does a search first
    assert reopened.journal.count() - before <= math.ceil(calls / batch)
    assert frozen(reopened) == live  # close wrote the buffered ones


def test_a_write_takes_the_buffered_reinforcements_with_it_in_order(tmp_path):
    store, mem = _memory(tmp_path / "m.db", 1000)
    a = mem.add("deploy on fridays")
    mem.get(a)
    mem.search("deploy")
    assert len(store._pending) == 2
    mem.add("later write")  # one transaction: the reinforcements first, then the add
    assert store._pending == []
    live = frozen(store)
    reopened = MemoryStore(path=tmp_path / "m.db")  # the first is never closed (a crash)
    assert frozen(reopened) == live
    ops = [op for op, _ in reopened.journal.ops()]
    assert ops[-2:] == ["store.record_retrievals", "store.add_items"]


def test_a_crash_loses_only_the_unflushed_reinforcements(tmp_path):
    store, mem = _memory(tmp_path / "m.db", 5)
    a = mem.add("deploy on fridays")
    for _ in range(12):
        mem.get(a)
    reopened = MemoryStore(path=tmp_path / "m.db")  # no close: what a kill -9 leaves
    history = reopened.workspace("ws").items[0].history
    assert sum(e["kind"] == "reinforced" for e in history) == 10  # 2 batches of 5; 2 lost


def test_reinforce_batch_one_is_exact(tmp_path):
    store, mem = _memory(tmp_path / "m.db", 1)
    a = mem.add("deploy on fridays")
    before = store.journal.count()
    mem.get(a)
    assert store.journal.count() == before + 1 and store._pending == []
    assert frozen(MemoryStore(path=tmp_path / "m.db")) == frozen(store)


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8", 100_001])
def test_reinforce_batch_is_validated(tmp_path, bad):
    with pytest.raises(ValueError, match="reinforce_batch"):
        MemoryStore(path=tmp_path / "m.db", reinforce_batch=bad)


def test_a_failed_flush_changes_nothing_and_keeps_the_buffer(tmp_path, monkeypatch):
    store, mem = _memory(tmp_path / "m.db", 3)
    a = mem.add("deploy on fridays")
    mem.get(a)
    mem.get(a)
    live, rows = frozen(store), store.journal.count()

    def fail(ops):
        raise OSError("disk full")

    monkeypatch.setattr(store.journal, "append_many", fail)
    with pytest.raises(PersistenceError):
        mem.get(a)  # the third fills the batch; its write fails
    assert frozen(store) == live and len(store._pending) == 2
    with pytest.raises(PersistenceError):
        mem.add("a write that fails")
    assert frozen(store) == live and len(store._pending) == 2
    monkeypatch.undo()
    store.flush()
    assert store.journal.count() == rows + 1 and store._pending == []
    assert frozen(MemoryStore(path=tmp_path / "m.db")) == live


def test_the_batch_row_is_checked_on_open(tmp_path):
    store, mem = _memory(tmp_path / "m.db", 2)
    a = mem.add("deploy on fridays")
    mem.get(a)
    mem.get(a)
    store.close()
    row = MemoryStore(path=tmp_path / "m.db").journal.entries()
    seq, op, payload = list(row)[-1]
    assert op == "store.record_retrievals" and len(decode(payload)["calls"]) == 2


READER = textwrap.dedent("""
    import sys
    from memlab import Memory, MemoryStore
    store = MemoryStore(path=sys.argv[1], reinforce_batch=int(sys.argv[2]))
    mem = Memory(store=store)
    n = 0
    while True:
        item = mem.add(f"note {n} about deploys", item_id=f"n{n}")
        print("w", n, flush=True)            # acknowledged write
        for _ in range(3):
            mem.get(item)
            print("r", n, flush=True)        # acknowledged read (its reinforcement buffered)
        n += 1
""")


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(10))
def test_kill_9_during_group_commit_loses_no_write_and_at_most_a_batch(tmp_path, round_):
    path, batch = tmp_path / "m.db", 4
    proc = subprocess.Popen([sys.executable, "-c", READER, str(path), str(batch)],
                            stdout=subprocess.PIPE, text=True)
    writes, reads, target = -1, 0, 20 + 9 * round_
    while reads < target:
        line = proc.stdout.readline()
        assert line, "the writer stopped early"
        kind, n = line.split()
        if kind == "w":
            writes = int(n)
        else:
            reads += 1
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    for line in proc.stdout:  # what it acknowledged after the lines read so far
        if not line.endswith("\n"):  # cut short by the kill: not acknowledged
            break
        kind, n = line.split()
        if kind == "w":
            writes = int(n)
        else:
            reads += 1
    store = MemoryStore(path=path)
    ws = store.workspace("default")
    assert all(f"n{i}" in ws.index_of for i in range(writes + 1))
    on_disk = sum(e["kind"] == "reinforced" for item in ws.items for e in item.history)
    assert reads - (batch - 1) <= on_disk <= reads + 1
    assert store.journal.integrity_check() == "ok"


def test_the_service_flushes_buffered_reinforcements_on_shutdown(tmp_path):
    pytest.importorskip("fastapi")
    from _service_client import TestClient

    from memlab.service import ServiceState, create_app

    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False)
    with TestClient(create_app(state)) as http:
        assert http.post("/v1/items", json={"content": "deploy on fridays"}).status_code == 200
        assert http.post("/v1/search", json={"query": "deploy"}).status_code == 200
        assert state.store._pending  # buffered, not yet on disk
    assert not state.store._pending  # the shutdown wrote it
    reopened = MemoryStore(path=tmp_path / "m.db")
    assert frozen(reopened) == frozen(state.store)
