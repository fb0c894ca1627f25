"""Issue 14 item 9: reads do not wait behind a write's disk I/O (group commit).

A write applies under the store's exclusive lock and queues its journal rows; the rows are
written and fsynced after the lock is released, and the write returns only once they are on
disk (:meth:`memlab.store.MemoryStore._write_journal`). These tests hold a writer inside its
journal write (``Journal.append_many`` blocked on an event) and show that searches, gets and
contexts run meanwhile, that the write is not acknowledged before its rows are durable, and
that a failed write is still undone entirely.

No test asserts on wall-clock time: threads meet at events; the waits carry generous timeouts
only so that a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab.graph.ppr import PPR_METHODS, exact_ppr, ppr_result, register_ppr_method
from memlab.persist import PersistenceError
from memlab.snapshot import state_digest

from _support import SlowDisk as _SlowDisk, start_thread as _start  # noqa: E402
SAFETY_S = 30.0  # only ever reached by a regression
START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _memory(path, batch: int = 64) -> Memory:
    store = MemoryStore(path=path, reinforce_batch=batch, compact_after=None,
                        fsync_outside_lock=True)
    mem = Memory(store=store, workspace_id="ws", clock=ManualClock(START))
    mem.add_many([{"content": text, "item_id": iid} for iid, text in
                  [("deploy", "deploys run on fridays"), ("pizza", "lunch is pizza on fridays"),
                   ("runbook", "the deploy runbook lists every step")]])
    return mem


@pytest.mark.parametrize("read", ["search", "get", "context", "search_many"])
def test_a_read_runs_while_a_writer_is_inside_its_journal_write(tmp_path, monkeypatch, read):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    disk = _SlowDisk(store.journal)
    monkeypatch.setattr(store.journal, "append_many", disk)
    rows = store.journal.count()
    writer, w_out = _start(mem.add, "the release train leaves on mondays", "semantic", None, "w")
    try:
        assert disk.entered.wait(SAFETY_S)
        # the writer is inside its fsync; the lock is free for readers
        assert not store.lock.held_exclusively() and store.lock.waiting() == (0, 0)
        calls = {"search": lambda: mem.search("fridays"),
                 "get": lambda: mem.get("pizza"),
                 "context": lambda: mem.get_working_context("s", "deploy fridays"),
                 "search_many": lambda: mem.search_many(["fridays", "runbook"])}
        reader, r_out = _start(calls[read])
        reader.join(SAFETY_S)
        assert r_out.get("done") and "error" not in r_out, r_out
        assert not disk.release.is_set() and writer.is_alive()
        assert "done" not in w_out  # not acknowledged: its row is not on disk yet
        assert store.journal.count() == rows
    finally:
        disk.release.set()
        writer.join(SAFETY_S)
    assert w_out.get("value") == "w" and "error" not in w_out
    assert store.journal.count() > rows
    store.flush()  # the read's reinforcement too
    reopened = MemoryStore(path=tmp_path / "m.db", reinforce_batch=64)
    assert state_digest(reopened) == state_digest(store)
    assert "w" in reopened.workspace("ws").index_of


def test_a_second_writer_applies_while_the_first_is_writing_and_both_commit_in_order(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    disk = _SlowDisk(store.journal)
    monkeypatch.setattr(store.journal, "append_many", disk)
    first, f_out = _start(mem.add, "first write", "semantic", None, "a")
    try:
        assert disk.entered.wait(SAFETY_S)
        second, s_out = _start(mem.add, "second write", "semantic", None, "b")
        # the second applies (the lock is free) and then waits for the first's write
        for _ in range(int(SAFETY_S / 0.002)):
            if "b" in store.workspace("ws").index_of:
                break
            threading.Event().wait(0.002)
        assert "b" in store.workspace("ws").index_of and "done" not in s_out
    finally:
        disk.release.set()
        first.join(SAFETY_S)
        second.join(SAFETY_S)
    assert f_out.get("value") == "a" and s_out.get("value") == "b"
    ops = [(op, payload) for op, payload in store.journal.ops()]
    adds = [p for op, p in ops if op == "store.add_items"]
    assert '"a"' in adds[-2] and '"b"' in adds[-1]  # the order they applied in
    assert state_digest(MemoryStore(path=tmp_path / "m.db")) == state_digest(store)


def test_a_failed_group_commit_undoes_every_write_in_it_and_what_reads_queued(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    store.flush()
    before = state_digest(store)
    disk = _SlowDisk(store.journal, fail=OSError("disk full"))
    monkeypatch.setattr(store.journal, "append_many", disk)
    first, f_out = _start(mem.add, "doomed release train", "semantic", None, "x")
    try:
        assert disk.entered.wait(SAFETY_S)
        # a read sees the applied (not yet durable) item and queues its reinforcement; the
        # second write applies it (buffered, riding in the second write's rows)
        with store.lock.shared():
            hits = mem.search("doomed")
        assert [h["item_id"] for h in hits] == ["x"] and len(store.reinforcements) == 1
        second, s_out = _start(mem.add, "also doomed", "semantic", None, "y")
        for _ in range(int(SAFETY_S / 0.002)):
            if "y" in store.workspace("ws").index_of:
                break
            threading.Event().wait(0.002)
        assert "y" in store.workspace("ws").index_of and len(store.reinforcements) == 0
        with store.lock.shared():  # another read of both undone items, left queued
            hits = mem.search("doomed")
        assert {h["item_id"] for h in hits} == {"x", "y"} and len(store.reinforcements) == 1
    finally:
        disk.release.set()
        first.join(SAFETY_S)
        second.join(SAFETY_S)
    # both writes raise (the second applied on top of the first) and neither left a trace
    assert isinstance(f_out.get("error"), PersistenceError), f_out
    assert isinstance(s_out.get("error"), PersistenceError), s_out
    assert "disk full" in str(f_out["error"])
    assert state_digest(store) == before
    # the reinforcements of the undone items are dropped, buffered and queued alike
    assert store._pending == [] and len(store.reinforcements) == 0
    monkeypatch.undo()
    z = mem.add("a later write takes item number 3", item_id="z")
    ws = store.workspace("ws")
    assert z == "z" and ws.index_of["z"] == 3
    assert not [e for e in ws.items[3].history if e["kind"] == "reinforced"]
    store.flush()
    assert state_digest(MemoryStore(path=tmp_path / "m.db")) == state_digest(store)


def test_a_write_inside_the_callers_lock_is_durable_when_the_lock_is_released(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    rows = store.journal.count()
    with store.lock:
        mem.add("inside", item_id="in")
        assert store.journal.count() == rows  # queued: written at the outermost release
    assert store.journal.count() == rows + 1
    with store.lock:
        mem.add("flushed inside", item_id="in2")
        store.flush()  # flush writes everything queued, the caller's own rows included
        assert store.journal.count() == rows + 2


def test_a_third_ppr_caller_returns_at_once_while_a_writer_waits_for_the_lock():
    """The two-slot saturation limit is taken before the store's lock: with both slots busy
    under the shared lock and a writer waiting (so new readers would wait too), a third
    caller still gets its empty answer at once."""
    mem = Memory()
    for i in "abcd":
        mem.add(f"item {i}", item_id=i)
    mem.add_edges([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")])
    entered = [threading.Event(), threading.Event()]
    release = threading.Event()
    count = iter(range(2))

    def blocking(snapshot, seeds, config, deadline):
        entered[next(count)].set()
        release.wait(SAFETY_S)
        return exact_ppr(snapshot, seeds, config, deadline)

    register_ppr_method("issue14-blocking-w", blocking)
    results: dict[int, object] = {}

    def call(slot: int) -> None:
        results[slot] = ppr_result(mem, ["a"], method="issue14-blocking-w", budget_ms=None,
                                   cache=False)

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(2)]
    try:
        for t in threads:
            t.start()
        assert entered[0].wait(SAFETY_S) and entered[1].wait(SAFETY_S)
        writer, w_out = _start(mem.add, "a write waiting for the readers")
        for _ in range(int(SAFETY_S / 0.002)):
            if mem.store.lock.waiting()[1]:
                break
            threading.Event().wait(0.002)
        assert mem.store.lock.waiting()[1] == 1  # the writer waits: new readers would too
        third, t_out = _start(call, 2)
        third.join(SAFETY_S)
        assert t_out.get("done") and not release.is_set() and "done" not in w_out
        assert results[2].saturated and results[2].scores == {}
    finally:
        release.set()
        for t in threads:
            t.join(SAFETY_S)
        writer.join(SAFETY_S)
        PPR_METHODS.pop("issue14-blocking-w", None)
    assert "error" not in w_out
    assert all(not results[i].saturated and results[i].scores for i in range(2))


def test_a_write_applies_a_bounded_slice_of_the_queue_and_order_is_kept(tmp_path):
    mem = _memory(tmp_path / "m.db", batch=1000)
    store = mem.store
    store.reinforcements.slice = 4
    queries = ["fridays", "runbook", "pizza"] * 4  # 12 queued reinforcements
    with store.lock.shared():  # every reinforcement queues
        for query in queries:
            mem.search(query)
    assert len(store.reinforcements) == 12
    mem.add("a write", item_id="w1")
    assert len(store.reinforcements) == 8 and store.reinforcements.applied == 4
    # a read that finds the lock free applies a slice, and its own goes behind the rest
    mem.search("deploy runbook")
    assert len(store.reinforcements) == 5 and store.reinforcements.applied == 8
    store.flush()
    assert len(store.reinforcements) == 0 and store.reinforcements.applied == 13
    ws = store.workspace("ws")
    runbook = [e["detail"]["via"] for e in ws.items[ws.index_of["runbook"]].history
               if e["kind"] == "reinforced"]
    assert runbook == ["search"] * 5  # four queued "runbook" searches, then the last read
    # the same reads, one caller and no queue, give the same state
    serial = _memory(tmp_path / "serial.db", batch=1000)
    for query in queries[:4]:
        serial.search(query)
    serial.add("a write", item_id="w1")
    for query in queries[4:] + ["deploy runbook"]:
        serial.search(query)
    serial.store.flush()
    assert [i.to_dict()["history"] for i in serial.store.workspace("ws").items] == \
        [i.to_dict()["history"] for i in ws.items]
    reopened = MemoryStore(path=tmp_path / "m.db", reinforce_batch=1000)
    assert state_digest(reopened) == state_digest(store)


def test_fsync_outside_lock_false_commits_under_the_lock(tmp_path, monkeypatch):
    store = MemoryStore(path=tmp_path / "m.db", fsync_outside_lock=False)
    mem = Memory(store=store, workspace_id="ws", clock=ManualClock(START))
    rows = store.journal.count()
    with store.lock:
        mem.add("inside", item_id="in")
        assert store.journal.count() == rows + 1  # written before the lock is released
    before = state_digest(store)

    def broken(ops):
        raise OSError("disk full")

    monkeypatch.setattr(store.journal, "append_many", broken)
    with pytest.raises(PersistenceError, match="disk full"):
        mem.add("fails", item_id="f")
    assert state_digest(store) == before


@pytest.mark.parametrize("bad", [0, 1, "yes", None])
def test_fsync_outside_lock_is_validated(tmp_path, bad):
    with pytest.raises(ValueError, match="fsync_outside_lock"):
        MemoryStore(path=tmp_path / "m.db", fsync_outside_lock=bad)
