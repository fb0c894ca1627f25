"""Issue 14 item 9: reads that do not wait behind writes (the lock's turns, optimistic gets).

* ``RWLock`` turns: a reader that waits goes in once ``reader_turn`` writers' turns have ended
  since it began to wait, ahead of the writers still waiting; writers go in arrival order.
* ``RWLock.optimistic``: a read without the lock, kept when no exclusive section that may
  change state overlapped it, else run again under the shared side. ``Memory.get`` reads so,
  and the journal commit opens an ``io_window``: a get completes during a write's fsync.
* A reinforcement is encoded for the journal by its read, outside the lock: the rows are those
  of the journaled call.

Threads meet at events; a thread is known to wait when the lock counts it (``waiting()``). No
timing asserts: the timeouts only turn a regression into a failure instead of a hang.
"""

from __future__ import annotations

import sqlite3
import threading
from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab._rwlock import READER_TURN, RWLock
from memlab.errors import UnknownItemError
from memlab.persist import PersistenceError
from memlab.snapshot import state_digest

from _support import SlowDisk as _SlowDisk, start_thread as _start, until as _until  # noqa: E402
SAFETY_S = 30.0  # only ever reached by a regression
START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _memory(path=None, batch: int = 64) -> Memory:
    store = MemoryStore(path=path, reinforce_batch=batch)
    mem = Memory(store=store, workspace_id="ws", clock=ManualClock(START))
    mem.add_many([{"content": text, "item_id": iid} for iid, text in
                  [("deploy", "deploys run on fridays"), ("pizza", "lunch is pizza on fridays"),
                   ("runbook", "the deploy runbook lists every step")]])
    return mem


# ------------------------------------------------------------------ the lock's turns
def _turns(reader_turn: int, writers_after: int) -> list[str]:
    """Writer W0 holds the lock; reader R begins to wait, then writers W1..Wn, in that order.
    Returns the order in which they got the lock once W0 releases it."""
    lock = RWLock()
    lock.reader_turn = reader_turn
    order: list[str] = []

    def writer(name: str) -> None:
        with lock:
            order.append(name)

    def reader() -> None:
        with lock.shared():
            order.append("R")

    lock.acquire()
    threads = []
    try:
        t = threading.Thread(target=reader, daemon=True)
        t.start()
        threads.append(t)
        assert _until(lambda: lock.waiting()[0] == 1)
        for n in range(1, writers_after + 1):
            t = threading.Thread(target=writer, args=(f"W{n}",), daemon=True)
            t.start()
            threads.append(t)
            assert _until(lambda n=n: lock.waiting()[1] == n)  # W1..Wn arrive in this order
    finally:
        lock.release()
    for t in threads:
        t.join(SAFETY_S)
    assert not any(t.is_alive() for t in threads)
    return order


@pytest.mark.parametrize("reader_turn, expected", [
    (1, ["R", "W1", "W2", "W3", "W4"]),  # phase-fair: in as soon as W0's turn ends
    (2, ["W1", "R", "W2", "W3", "W4"]),
    (3, ["W1", "W2", "R", "W3", "W4"]),
    (10**9, ["W1", "W2", "W3", "W4", "R"]),  # writers first, as the lock used to be
])
def test_a_waiting_reader_goes_in_after_reader_turn_writers_turns(reader_turn, expected):
    assert _turns(reader_turn, 4) == expected


def test_the_default_reader_turn_is_three_and_writers_go_in_arrival_order():
    assert RWLock().reader_turn == READER_TURN == 3
    assert _turns(READER_TURN, 5) == ["W1", "W2", "R", "W3", "W4", "W5"]


def test_a_reader_arriving_while_a_writer_waits_still_waits_for_it():
    lock = RWLock()
    order: list[str] = []
    with lock.shared():  # a reader inside: the writer waits for it
        w = threading.Thread(target=lambda: (lock.acquire(), order.append("W"),
                                             lock.release()), daemon=True)
        w.start()
        assert _until(lambda: lock.waiting()[1] == 1)
        r = threading.Thread(target=lambda: (lock.acquire_shared(), order.append("R"),
                                             lock.release_shared()), daemon=True)
        r.start()
        assert _until(lambda: lock.waiting()[0] == 1)  # the new reader waits behind it
        assert order == []
    w.join(SAFETY_S)
    r.join(SAFETY_S)
    assert order == ["W", "R"]


def test_admitted_readers_go_in_before_the_next_writer_even_when_it_wakes_first():
    lock = RWLock()
    lock.reader_turn = 1
    inside = threading.Event()
    release = threading.Event()
    order: list[str] = []

    def reader() -> None:
        with lock.shared():
            order.append("R")
            inside.set()
            assert release.wait(SAFETY_S)

    lock.acquire()
    r = threading.Thread(target=reader, daemon=True)
    r.start()
    assert _until(lambda: lock.waiting()[0] == 1)
    w = threading.Thread(target=lambda: (lock.acquire(), order.append("W"), lock.release()),
                         daemon=True)
    w.start()
    assert _until(lambda: lock.waiting()[1] == 1)
    lock.release()
    assert inside.wait(SAFETY_S)
    assert order == ["R"] and lock.waiting()[1] == 1  # the writer waits for the reader
    assert not lock.try_acquire() or lock.release()  # no one jumps the queue either
    release.set()
    r.join(SAFETY_S)
    w.join(SAFETY_S)
    assert order == ["R", "W"]


# ------------------------------------------------------------------ optimistic reads
def test_an_optimistic_read_runs_beside_a_reader_and_a_free_lock():
    lock = RWLock()
    assert lock.optimistic(lambda: 1) == 1 and lock.optimistic_hits == 1
    with lock.shared():
        assert lock.optimistic(lambda: 2) == 2 and lock.optimistic_hits == 2


def test_an_optimistic_read_inside_the_callers_own_write_reads_under_it():
    lock = RWLock()
    with lock:
        assert lock.optimistic(lambda: lock.held_exclusively()) is True
    assert lock.optimistic_hits == 0


def test_an_optimistic_read_overlapped_by_a_write_is_run_again_under_the_shared_side():
    lock = RWLock()
    runs: list[bool] = []

    def read():
        runs.append(lock.held_shared())
        if len(runs) == 1:  # a writer takes and releases the lock meanwhile
            t = threading.Thread(target=lambda: (lock.acquire(), lock.release()))
            t.start()
            t.join(SAFETY_S)
        return len(runs)

    assert lock.optimistic(read) == 2
    assert runs == [False, True] and lock.optimistic_hits == 0


def test_an_optimistic_read_that_raises_unoverlapped_raises_its_own_error_once():
    lock = RWLock()
    runs: list[bool] = []

    def read():
        runs.append(lock.held_shared())
        raise KeyError("its own")

    with pytest.raises(KeyError, match="its own"):
        lock.optimistic(read)
    assert runs == [False]


def test_an_optimistic_read_torn_by_a_write_that_raises_is_decided_by_the_locked_run():
    lock = RWLock()
    runs: list[bool] = []

    def read():
        runs.append(lock.held_shared())
        if len(runs) == 1:
            t = threading.Thread(target=lambda: (lock.acquire(), lock.release()))
            t.start()
            t.join(SAFETY_S)
            raise KeyError("torn")
        return "whole"

    assert lock.optimistic(read) == "whole"
    assert runs == [False, True]


def test_while_a_writer_holds_the_lock_an_optimistic_read_waits_for_the_shared_side():
    lock = RWLock()
    lock.acquire()
    reader, out = _start(lock.optimistic, lambda: "read")
    assert _until(lambda: lock.waiting()[0] == 1)  # odd epoch: it went for the shared side
    assert "done" not in out
    lock.release()
    reader.join(SAFETY_S)
    assert out["value"] == "read" and lock.optimistic_hits == 0


def test_the_io_window_makes_the_epoch_even_only_for_its_holder():
    lock = RWLock()
    with lock.io_window():  # not held: nothing happens
        assert lock.epoch % 2 == 0
    with lock:
        before = lock.epoch
        assert before % 2 == 1
        with lock.io_window():
            assert lock.epoch % 2 == 0
            with lock.io_window():  # nested: the outer one stays open
                assert lock.epoch == before + 1
        assert lock.epoch % 2 == 1 and lock.epoch > before
    assert lock.epoch % 2 == 0


def test_a_get_completes_while_a_write_holds_the_lock_for_its_fsync(tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    assert store.fsync_outside_lock is False  # the default: the commit runs under the lock
    disk = _SlowDisk(store.journal, store.lock)
    monkeypatch.setattr(store.journal, "append_many", disk)
    writer, w_out = _start(mem.add, "the release train leaves on mondays", "semantic", None, "w")
    try:
        assert disk.entered.wait(SAFETY_S)
        assert disk.seen == [(0, True)]  # under the exclusive lock, inside its io window
        hits = store.lock.optimistic_hits
        reader, r_out = _start(mem.get, "pizza")
        reader.join(SAFETY_S)
        assert r_out.get("done") and "error" not in r_out, r_out
        assert r_out["value"]["item_id"] == "pizza" and store.lock.optimistic_hits == hits + 1
        assert "done" not in w_out and writer.is_alive()  # the write has not returned
        assert len(store.reinforcements) == 1  # the lock is taken: the get's reinforcement queued
    finally:
        disk.release.set()
        writer.join(SAFETY_S)
    assert w_out.get("value") == "w" and "error" not in w_out
    assert store.lock.epoch % 2 == 0
    store.flush()
    reopened = MemoryStore(path=tmp_path / "m.db")
    assert state_digest(reopened) == state_digest(store)


def test_a_get_during_a_failed_commit_sees_the_write_whose_undo_drops_its_reinforcement(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    disk = _SlowDisk(store.journal, store.lock, fail=OSError("disk full"))
    monkeypatch.setattr(store.journal, "append_many", disk)
    writer, w_out = _start(mem.add, "a write that will not reach the disk", "semantic", None,
                           "lost")
    try:
        assert disk.entered.wait(SAFETY_S)
        reader, r_out = _start(mem.get, "lost")
        reader.join(SAFETY_S)
        # documented: during the fsync a get sees a write its caller was not told about yet
        assert r_out["value"]["item_id"] == "lost"
        assert len(store.reinforcements) == 1
    finally:
        disk.release.set()
        writer.join(SAFETY_S)
    assert isinstance(w_out.get("error"), PersistenceError)
    assert "lost" not in store.workspace("ws").index_of
    assert len(store.reinforcements) == 0  # the undone item's reinforcement is dropped
    with pytest.raises(UnknownItemError):
        mem.get("lost")
    store.flush()
    assert state_digest(MemoryStore(path=tmp_path / "m.db")) == state_digest(store)


def test_a_get_alone_still_sees_its_own_reinforcement_at_once(tmp_path):
    mem = _memory(tmp_path / "m.db")
    item = mem.get("deploy")
    assert [e["kind"] for e in item["history"]][-1] == "reinforced"
    assert mem.store.reinforcements.applied == 1 and len(mem.store.reinforcements) == 0
    assert mem.get("deploy", reinforce=False) == mem.store.workspace("ws").item(0).to_dict()


def test_get_of_a_missing_item_raises_as_before():
    mem = _memory()
    with pytest.raises(UnknownItemError, match="'nope'"):
        mem.get("nope")
    with pytest.raises(ValueError):
        mem.get("")


# ------------------------------------------------------------------ encoded by the read
def _rows(path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT op, payload FROM ops ORDER BY seq").fetchall()


def test_queued_and_direct_reinforcements_write_the_same_journal_rows(tmp_path):
    # the reads' reinforcements queue, each encoded by its read (retrieval_payload); the same
    # record_retrieval calls made directly go through the journaled wrapper, which encodes
    # them itself: the journal rows must be equal, and each store must reopen to its state
    queued, direct = _memory(tmp_path / "a.db"), _memory(tmp_path / "b.db")
    store = queued.store
    calls, encode = [], store.retrieval_payload
    store.retrieval_payload = lambda call: calls.append(call) or encode(call)
    reads = [("search", "fridays"), ("get", "runbook"), ("search", "deploy runbook"),
             ("get", "pizza")]
    with store.lock.shared():  # every reinforcement queues, encoded by its read
        for kind, arg in reads:
            getattr(queued, kind)(arg)
    del store.retrieval_payload
    assert len(store.reinforcements) == len(reads) == len(calls)
    assert [call["kind"] for call in calls] == [kind for kind, _ in reads]
    for call in calls:  # the journaled call, encoded by the wrapper
        direct.store.record_retrieval(**call)
    for mem in (queued, direct):
        mem.add("a write after the reads", item_id="after")
        mem.store.flush()
    rows = _rows(tmp_path / "a.db")
    assert rows == _rows(tmp_path / "b.db")
    assert ("store.record_retrievals",
            '{"calls": [' + ", ".join(encode(call) for call in calls) + "]}") in rows
    assert state_digest(queued.store) == state_digest(direct.store)
    for name, mem in (("a.db", queued), ("b.db", direct)):
        assert state_digest(MemoryStore(path=tmp_path / name)) == state_digest(mem.store)
    payload = direct.store.retrieval_payload(direct._retrieval([0], START, "get"))
    assert payload.startswith('{"workspace_id": "ws", "idx": [0], "now": ')


def test_an_in_memory_store_encodes_nothing():
    mem = _memory()
    assert mem.store.retrieval_payload(mem._retrieval([0], START, "get")) is None
    with mem.store.lock.shared():
        mem.search("fridays")
    mem.store.flush()
    assert mem.store.reinforcements.applied == 1
