"""Issue 14 item 9: reads never serialise behind each other, reinforcing reads included.

``search``, ``get`` and ``search_many`` retrieve under the store's shared lock; their activation
reinforcement is applied at once when the write lock is free, else queued and applied by the
next write (:mod:`memlab._reinforce`). Compaction captures the state under the shared lock.

No test asserts on wall-clock time: threads meet at events, a thread is known to be blocked when
its stack shows it waiting inside the lock, and the waits carry generous timeouts only so that a
regression fails instead of hanging the suite.
"""

from __future__ import annotations

import threading
from datetime import datetime, timezone

import pytest

import memlab.memory
import memlab.store.journal
from memlab import ManualClock, Memory, MemoryStore
from memlab._rwlock import RWLock
from memlab.snapshot import state_digest
from _support import holding_shared, start_thread as _start

SAFETY_S = 30.0  # only ever reached by a regression
START = datetime(2024, 1, 1, tzinfo=timezone.utc)


def _blocked_in(lock: RWLock, side: str) -> bool:
    """Wait until a thread waits for ``lock``'s ``side`` ("shared" or "exclusive"): True, or
    False once the safety time has passed."""
    pause = threading.Event()
    for _ in range(int(SAFETY_S / 0.002)):
        if lock.waiting()[0 if side == "shared" else 1]:
            return True
        pause.wait(0.002)
    return False


def _memory(path=None, batch: int = 64) -> Memory:
    store = MemoryStore(path=path, reinforce_batch=batch)
    mem = Memory(store=store, workspace_id="ws", clock=ManualClock(START))
    mem.add_many([{"content": text, "item_id": iid} for iid, text in
                  [("deploy", "deploys run on fridays"), ("pizza", "lunch is pizza on fridays"),
                   ("runbook", "the deploy runbook lists every step")]])
    return mem


def _reinforced(mem: Memory, item_id: str) -> list[str]:
    """The ``via`` of every reinforcement event in an item's history, in order."""
    ws = mem.store.workspace(mem.workspace_id)
    return [e["detail"]["via"] for e in ws.items[ws.index_of[item_id]].history
            if e["kind"] == "reinforced"]


# ------------------------------------------------------------------ readers beside readers
@pytest.mark.parametrize("second", ["search", "get", "search_many", "context"])
def test_a_reader_held_inside_retrieval_does_not_block_another_readers_search(
        monkeypatch, second):
    mem = _memory()
    inside, release = threading.Event(), threading.Event()
    real = memlab.memory.bm25_hits

    def held(ws, config, query, top_k):
        if query == "held deploy":
            inside.set()
            release.wait(SAFETY_S)
        return real(ws, config, query, top_k)

    monkeypatch.setattr(memlab.memory, "bm25_hits", held)
    first, first_out = _start(mem.search, "held deploy")
    try:
        assert inside.wait(SAFETY_S)
        assert mem.store.lock.readers == 1  # the first search holds the shared lock
        calls = {"search": lambda: mem.search("pizza"), "get": lambda: mem.get("pizza"),
                 "search_many": lambda: mem.search_many(["pizza", "runbook"]),
                 "context": lambda: mem.get_working_context("s1", "pizza", k=5)}
        thread, out = _start(calls[second])
        thread.join(SAFETY_S)
        # it finished while the first search was still inside its retrieval (before the fix
        # it waited for the store's lock, which the first search held exclusively)
        assert out.get("done") and "error" not in out, out
        assert not release.is_set() and first.is_alive()
        if second != "context":  # its reinforcement waits in the queue, not the read
            assert len(mem.store.reinforcements) == (2 if second == "search_many" else 1)
            assert _reinforced(mem, "pizza") == []
    finally:
        release.set()
        first.join(SAFETY_S)
    assert first_out.get("done") and "error" not in first_out
    # the first search found the lock free afterwards: it applied the queue, then its own
    assert len(mem.store.reinforcements) == 0
    if second != "context":
        assert _reinforced(mem, "pizza") == ["get" if second == "get" else "search"]
        assert _reinforced(mem, "deploy")[-1] == "search"


def test_a_writer_still_excludes_readers():
    mem = _memory()
    holding, release = threading.Event(), threading.Event()

    def writer():
        with mem.store.lock:
            mem.add("friday deploy freeze", item_id="freeze")
            holding.set()
            release.wait(SAFETY_S)
            mem.add_edge("freeze", "deploy")  # the reader must see both or neither

    w, w_out = _start(writer)
    assert holding.wait(SAFETY_S)
    reader, out = _start(lambda: (mem.search("freeze"), mem.get_edges("freeze")))
    try:
        assert _blocked_in(mem.store.lock, "shared"), "the reader did not wait for the writer"
        assert "done" not in out
    finally:
        release.set()
        w.join(SAFETY_S)
        reader.join(SAFETY_S)
    hits, edges = out["value"]
    assert [h["item_id"] for h in hits] == ["freeze"] and len(edges) == 1
    assert "error" not in w_out


def test_a_reinforcement_waits_for_a_writer_without_making_the_read_wait(monkeypatch):
    """A writer takes the lock between a search's retrieval and its reinforcement: the search
    queues the reinforcement and returns while the writer holds the lock; the writer's next
    write applies it first."""
    mem = _memory()
    retrieved, go = threading.Event(), threading.Event()
    real = memlab.memory._search_hits

    def pause(*args):
        out = real(*args)
        retrieved.set()
        go.wait(SAFETY_S)
        return out

    monkeypatch.setattr(memlab.memory, "_search_hits", pause)
    searcher, out = _start(mem.search, "runbook")
    assert retrieved.wait(SAFETY_S)
    writer_in, writer_go = threading.Event(), threading.Event()

    def writer():
        with mem.store.lock:
            writer_in.set()
            writer_go.wait(SAFETY_S)
            queued = (len(mem.store.reinforcements), _reinforced(mem, "runbook"))
            mem.add("a later write", item_id="later")  # applies the queue first
            return queued, _reinforced(mem, "runbook")

    w, w_out = _start(writer)
    try:
        assert _blocked_in(mem.store.lock, "exclusive")  # waits for the searcher's holding
        go.set()
        searcher.join(SAFETY_S)
        assert out.get("done") and "error" not in out  # returned while the writer held it
        assert writer_in.wait(SAFETY_S) and w.is_alive()  # the writer got in and still holds it
    finally:
        go.set()
        writer_go.set()
        w.join(SAFETY_S)
    assert w_out["value"] == ((1, []), ["search"])
    assert len(mem.store.reinforcements) == 0


# ------------------------------------------------------------------ the queue
def test_queued_reinforcements_are_applied_in_order_by_the_next_write_and_journaled_first(
        tmp_path):
    mem = _memory(tmp_path / "m.db", batch=16)
    store = mem.store
    with store.lock.shared():  # a long reader: every reinforcement queues
        for query, thread_count in (("fridays", 2), ("runbook", 1)):
            for _ in range(thread_count):
                t, out = _start(mem.search, query)
                t.join(SAFETY_S)
                assert out.get("done") and "error" not in out
        t, out = _start(mem.get, "deploy")
        t.join(SAFETY_S)
        assert "history" in out["value"]
        assert len(store.reinforcements) == 4 and store.reinforcements.applied == 0
    before = store.journal.count()
    mem.add("a write", item_id="w")
    assert len(store.reinforcements) == 0 and store.reinforcements.applied == 4
    assert [op for op, _ in store.journal.ops()][before:] == ["store.record_retrievals",
                                                              "store.add_items"]
    assert _reinforced(mem, "pizza") == ["search", "search"]
    assert _reinforced(mem, "deploy") == ["search", "search", "get"]  # in order
    live = state_digest(store)
    reopened = MemoryStore(path=tmp_path / "m.db", reinforce_batch=16)  # never closed
    assert state_digest(reopened) == live


@pytest.mark.parametrize("own_reads", [False, True])
def test_a_queued_reinforcement_is_seen_late_unless_own_reads_is_on(own_reads):
    mem = _memory()
    store = mem.store
    store.reinforcements.own_reads = own_reads
    with store.lock.shared():
        t, _ = _start(mem.search, "pizza")
        t.join(SAFETY_S)
    assert len(store.reinforcements) == 1
    other, _ = _start(mem.get_working_context, "s1", "pizza")
    other.join(SAFETY_S)
    assert len(store.reinforcements) == 1  # another thread's read never waits for it
    results: list = []

    def same_thread_twice():
        with store.lock.shared():
            mem.search("runbook")  # queued (this thread holds the lock shared)
        results.append((len(store.reinforcements), _reinforced(mem, "runbook")))
        mem.get_working_context("s1", "runbook")  # with own_reads: applies its own first
        results.append((len(store.reinforcements), _reinforced(mem, "runbook")))

    t, out = _start(same_thread_twice)
    t.join(SAFETY_S)
    assert out.get("done") and "error" not in out, out
    if own_reads:
        assert results == [(2, []), (0, ["search"])]
    else:
        assert results == [(2, []), (2, [])]  # seen late: at the next write or flush
        mem.add("a write")
        assert len(store.reinforcements) == 0
    assert _reinforced(mem, "runbook") == ["search"] and _reinforced(mem, "pizza") == ["search"]


def test_the_read_that_fills_the_queue_applies_it():
    mem = _memory(batch=3)
    store = mem.store
    with holding_shared(store.lock, SAFETY_S):
        for query in ("pizza", "runbook"):
            t, out = _start(mem.search, query)
            t.join(SAFETY_S)
            assert out.get("done")
        filler, out = _start(mem.search, "deploy")
        assert _blocked_in(store.lock, "exclusive")  # the queue is full: this read waits
        assert len(store.reinforcements) == 3
    filler.join(SAFETY_S)
    assert out.get("done") and len(store.reinforcements) == 0 and store.reinforcements.applied == 3


def test_reinforce_batch_one_applies_every_reinforcement_before_the_read_returns():
    mem = _memory(batch=1)
    store = mem.store
    with holding_shared(store.lock, SAFETY_S):
        t, out = _start(mem.search, "pizza")
        assert _blocked_in(store.lock, "exclusive")
    t.join(SAFETY_S)
    assert _reinforced(mem, "pizza") == ["search"] and len(store.reinforcements) == 0


def test_a_search_inside_the_callers_own_read_section_queues_instead_of_raising():
    mem = _memory()
    with mem.store.lock.shared():
        assert [h["item_id"] for h in mem.search("pizza")] == ["pizza"]
        assert mem.get("pizza")["item_id"] == "pizza"
    assert len(mem.store.reinforcements) == 2
    mem.store.flush()
    assert _reinforced(mem, "pizza") == ["search", "get"]


def test_concurrent_reinforcing_reads_and_writes_lose_nothing_and_reopen_exactly(tmp_path):
    """Eight threads search and get while one writes; every reinforcement a read returned for
    is in the reopened store, and the reopened state equals the live one."""
    path = tmp_path / "m.db"
    mem = _memory(path, batch=8)
    store = mem.store
    clock = mem.clock
    readers, rounds = 8, 25
    counts: list[dict[str, int]] = [dict() for _ in range(readers)]
    errors: list[BaseException] = []
    start = threading.Barrier(readers + 1)

    def reader(n: int) -> None:
        try:
            start.wait(SAFETY_S)
            for i in range(rounds):
                if i % 3 == 2:
                    item = mem.get(["deploy", "pizza", "runbook"][(n + i) % 3])
                    counts[n][item["item_id"]] = counts[n].get(item["item_id"], 0) + 1
                else:
                    for hit in mem.search(["friday", "deploy runbook", "lunch"][(n + i) % 3]):
                        counts[n][hit["item_id"]] = counts[n].get(hit["item_id"], 0) + 1
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    def writer() -> None:
        try:
            start.wait(SAFETY_S)
            for i in range(30):
                mem.add(f"note {i} about the friday deploy", item_id=f"note{i}")
                clock.advance(seconds=1)
        except BaseException as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=reader, args=(n,)) for n in range(readers)]
    threads.append(threading.Thread(target=writer))
    for t in threads:
        t.start()
    for t in threads:
        t.join(SAFETY_S * 4)
    assert not errors, errors
    store.flush()
    live = state_digest(store)
    expected: dict[str, int] = {}
    for c in counts:
        for k, v in c.items():
            expected[k] = expected.get(k, 0) + v
    store.close()
    reopened = Memory(store=MemoryStore(path=path, reinforce_batch=8), workspace_id="ws")
    assert state_digest(reopened.store) == live
    for item_id, n in expected.items():
        assert len(_reinforced(reopened, item_id)) == n, item_id


# ------------------------------------------------------------------ compaction
def test_compaction_captures_beside_readers_and_writers_wait(tmp_path, monkeypatch):
    path = tmp_path / "m.db"
    mem = _memory(path, batch=4)
    mem.search("pizza")  # a buffered reinforcement: compaction writes it first
    inside, release = threading.Event(), threading.Event()
    real = memlab.store.journal.capture

    def held(store):
        inside.set()
        release.wait(SAFETY_S)
        return real(store)

    monkeypatch.setattr(memlab.store.journal, "capture", held)
    compactor, c_out = _start(mem.compact)
    writer = None
    try:
        assert inside.wait(SAFETY_S)
        assert mem.store.lock.readers == 1 and not mem.store.lock.held_exclusively()
        # readers go on while the state is captured (before: they waited for the capture)
        for call in (lambda: mem.search("runbook"), lambda: mem.get("deploy"),
                     lambda: mem.get_working_context("s1", "deploy", k=5),
                     lambda: mem.store.serialize()):
            t, out = _start(call)
            t.join(SAFETY_S)
            assert out.get("done") and "error" not in out, out
        assert len(mem.store.reinforcements) == 2  # the two reinforcements wait
        writer, w_out = _start(mem.add, "written during compaction", "semantic", None, "late")
        assert _blocked_in(mem.store.lock, "exclusive")  # a write waits for the capture
    finally:
        release.set()
        compactor.join(SAFETY_S)
        if writer is not None:
            writer.join(SAFETY_S)
    assert "error" not in c_out and c_out["value"].upto > 0
    assert w_out.get("value") == "late" and len(mem.store.reinforcements) == 0
    assert _reinforced(mem, "runbook") == ["search"] and _reinforced(mem, "deploy")[-1] == "get"
    live = state_digest(mem.store)
    reopened = MemoryStore(path=path, reinforce_batch=4)  # snapshot + later rows, never closed
    assert state_digest(reopened) == live


def test_compaction_inside_a_write_still_captures_under_it(tmp_path):
    mem = _memory(tmp_path / "m.db")
    with mem.store.lock:
        report = mem.compact()
        assert mem.store.lock.held_exclusively()
    assert report.upto > 0 and mem.store.lock.readers == 0
    mem.add("after")  # the lock is free


# ------------------------------------------------------------------ the lock's new operations
def test_try_acquire_never_waits_and_respects_a_waiting_writer():
    lock = RWLock()
    reader_in, release = threading.Event(), threading.Event()

    def reader():
        with lock.shared():
            reader_in.set()
            release.wait(SAFETY_S)

    r, _ = _start(reader)
    assert reader_in.wait(SAFETY_S)
    assert lock.try_acquire() is False  # a reader holds it
    w, _ = _start(lambda: (lock.acquire(), lock.release()))
    assert _blocked_in(lock, "exclusive")
    release.set()
    r.join(SAFETY_S)
    w.join(SAFETY_S)
    assert lock.try_acquire() is True and lock.try_acquire() is True  # nested
    lock.release()
    lock.release()
    assert lock.try_acquire() is True
    lock.release()


def test_downgrade_lets_readers_in_and_keeps_writers_out():
    lock = RWLock()
    lock.acquire()
    lock.downgrade()
    t, out = _start(lambda: lock.try_acquire())
    t.join(SAFETY_S)
    assert out["value"] is False
    with lock.shared():  # re-entry of the downgraded holding
        pass
    r, r_out = _start(lambda: (lock.acquire_shared(), lock.release_shared()))
    r.join(SAFETY_S)
    assert r_out.get("done") and "error" not in r_out  # another reader got in at once
    w, w_out = _start(lambda: (lock.acquire(), lock.release()))
    assert _blocked_in(lock, "exclusive")
    lock.release_shared()
    w.join(SAFETY_S)
    assert w_out.get("done") and "error" not in w_out
    lock.acquire()
    lock.acquire()
    with pytest.raises(RuntimeError, match="downgrade"):
        lock.downgrade()  # nested: the outer caller counts on the exclusive side
    lock.release()
    lock.release()
