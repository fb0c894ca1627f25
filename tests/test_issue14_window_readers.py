"""Issue 14 item 9: shared readers during a write's fsync (``reads_during_fsync``, opt-in).

With ``MemoryStore(reads_during_fsync=True)`` a write whose state is complete and whose section
ends with its journal commit admits shared readers (searches, contexts) while the ``COMMIT`` of
its rows runs (``RWLock.admitting`` inside its ``io_window``). It keeps the exclusive side, so
other writers keep waiting in order, and it waits for the readers it admitted before it returns
or undoes a failed commit. Off (the default) those readers wait for the fsync.

Threads meet at events; a thread is known to wait when the lock counts it (``waiting()``) or
when its stack is inside the wait (``waiting_in``). No timing asserts: the timeouts only turn a
regression into a failure instead of a hang.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime, timezone

import pytest

import memlab.memory
from memlab import ManualClock, Memory, MemoryStore
from memlab._rwlock import RWLock
from memlab.persist import PersistenceError
from memlab.snapshot import state_digest

from _support import (SlowCommit, start_thread as _start, until as _until,  # noqa: E402
                      waiting_in as _waiting_in)
SAFETY_S = 30.0  # only ever reached by a regression
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
TEXTS = [("deploy", "deploys run on fridays"), ("pizza", "lunch is pizza on fridays"),
         ("runbook", "the deploy runbook lists every step")]


def _memory(path, on: bool = True, batch: int = 64, **options) -> Memory:
    store = MemoryStore(path=path, reinforce_batch=batch, compact_after=None,
                        reads_during_fsync=on, **options)
    mem = Memory(store=store, workspace_id="ws", clock=ManualClock(START))
    mem.add_many([{"content": text, "item_id": iid} for iid, text in TEXTS])
    return mem


def _held_commits(tmp_path, monkeypatch, **options):
    """A durable memory (:func:`_memory`) whose first journal COMMIT waits inside
    ``around_commit`` for ``slow.release``: ``(mem, store, slow)``."""
    mem = _memory(tmp_path / "m.db", **options)
    slow = SlowCommit(mem.store.journal)
    monkeypatch.setattr(mem.store.journal, "around_commit", slow)
    return mem, mem.store, slow


def _reads(mem: Memory) -> dict:
    return {"search": lambda: mem.search("fridays"),
            "context": lambda: mem.get_working_context("s", "deploy fridays"),
            "search_many": lambda: mem.search_many(["fridays", "runbook"])}


class _HeldSearch:
    """Holds a search inside its shared section (in ``bm25_hits``) until ``release``."""

    def __init__(self, monkeypatch) -> None:
        self.entered, self.release = threading.Event(), threading.Event()
        real = memlab.memory.bm25_hits

        def held(*args, **kwargs):
            if threading.current_thread().name == "held-search":
                self.entered.set()
                assert self.release.wait(SAFETY_S)
            return real(*args, **kwargs)

        monkeypatch.setattr(memlab.memory, "bm25_hits", held)


def _let_go(held, slow, *threads) -> None:
    """End a test's held search and held commit, then join its threads (None: not started)."""
    held.release.set()
    slow.release.set()
    for thread in threads:
        if thread is not None:
            thread.join(SAFETY_S)


def _reopened_equals(mem: Memory, path) -> bool:
    mem.store.flush()
    reopened = MemoryStore(path=path, reinforce_batch=mem.store.reinforce_batch)
    return state_digest(reopened) == state_digest(mem.store)


# ------------------------------------------------------------------ on: readers go in
@pytest.mark.parametrize("read", ["search", "context", "search_many"])
def test_with_the_option_a_shared_read_completes_while_a_writer_is_inside_its_fsync(
        tmp_path, monkeypatch, read):
    mem, store, slow = _held_commits(tmp_path, monkeypatch)
    writer, w_out = _start(mem.add, "the release train leaves on fridays", "semantic", None,
                           "w")
    try:
        assert slow.entered.wait(SAFETY_S)
        assert slow.admits is True and store.lock.epoch % 2 == 0
        reader, r_out = _start(_reads(mem)[read])
        reader.join(SAFETY_S)
        assert r_out.get("done") and "error" not in r_out, r_out
        assert "done" not in w_out and writer.is_alive()  # the write has not returned
        if read == "search":  # it saw the write (applied whole, on its way to disk)
            assert "w" in [hit["item_id"] for hit in r_out["value"]]
    finally:
        slow.release.set()
        writer.join(SAFETY_S)
    assert w_out.get("value") == "w" and "error" not in w_out
    assert store.lock.epoch % 2 == 0 and store.lock.readers == 0
    assert _reopened_equals(mem, tmp_path / "m.db")


# ------------------------------------------------------------------ off: they wait
@pytest.mark.parametrize("read", ["search", "context"])
def test_without_the_option_a_shared_read_waits_for_the_fsync(tmp_path, monkeypatch, read):
    mem = _memory(tmp_path / "m.db", on=False)
    store = mem.store
    assert MemoryStore(path=tmp_path / "other.db").reads_during_fsync is False  # the default
    slow = SlowCommit(store.journal)
    monkeypatch.setattr(store.journal, "around_commit", slow)
    writer, w_out = _start(mem.add, "the release train leaves on fridays", "semantic", None,
                           "w")
    try:
        assert slow.entered.wait(SAFETY_S)
        assert not slow.admits
        reader, r_out = _start(_reads(mem)[read])
        assert _until(lambda: store.lock.waiting()[0] == 1 or r_out.get("done"))
        assert "done" not in r_out and store.lock.waiting()[0] == 1  # waits for the fsync
    finally:
        slow.release.set()
        writer.join(SAFETY_S)
    reader.join(SAFETY_S)
    assert w_out.get("value") == "w" and r_out.get("done") and "error" not in r_out, r_out


def test_fsync_outside_lock_with_the_option_still_lets_readers_in(tmp_path, monkeypatch):
    """Group commit runs the commit after the lock is released: the option changes nothing."""
    mem, store, slow = _held_commits(tmp_path, monkeypatch, fsync_outside_lock=True)
    writer, w_out = _start(mem.add, "the release train leaves on fridays", "semantic", None,
                           "w")
    try:
        assert slow.entered.wait(SAFETY_S)
        assert not slow.admits and not store.lock.held_exclusively()
        reader, r_out = _start(_reads(mem)["search"])
        reader.join(SAFETY_S)
        assert r_out.get("done") and "error" not in r_out and "done" not in w_out
    finally:
        slow.release.set()
        writer.join(SAFETY_S)
    assert w_out.get("value") == "w"
    assert _reopened_equals(mem, tmp_path / "m.db")


# ------------------------------------------------------------------ writers keep their order
def test_a_second_writer_waits_for_the_first_while_readers_go_in(tmp_path, monkeypatch):
    mem, store, slow = _held_commits(tmp_path, monkeypatch)
    first, f_out = _start(mem.add, "first write", "semantic", None, "a")
    try:
        assert slow.entered.wait(SAFETY_S) and slow.admits
        second, s_out = _start(mem.add, "second write", "semantic", None, "b")
        assert _until(lambda: store.lock.waiting()[1] == 1)  # the second waits for the lock
        reader, r_out = _start(_reads(mem)["search"])  # a reader still goes in
        reader.join(SAFETY_S)
        assert r_out.get("done") and "error" not in r_out, r_out
        assert "b" not in store.workspace("ws").index_of and "done" not in s_out
        assert "done" not in f_out
    finally:
        slow.release.set()
        first.join(SAFETY_S)
        second.join(SAFETY_S)
    assert f_out.get("value") == "a" and s_out.get("value") == "b"
    adds = [p for op, p in store.journal.ops() if op == "store.add_items"]
    assert '"a"' in adds[-2] and '"b"' in adds[-1]  # the order they applied in
    reopened = MemoryStore(path=tmp_path / "m.db")
    assert reopened.workspace("ws").item_ids[-2:] == ["a", "b"]
    assert _reopened_equals(mem, tmp_path / "m.db")


# ------------------------------------------------------------------ the writer waits for them
def test_a_writer_waits_for_the_reader_it_admitted_before_it_returns(tmp_path, monkeypatch):
    mem, store, slow = _held_commits(tmp_path, monkeypatch)
    held = _HeldSearch(monkeypatch)
    writer, w_out = _start(mem.add, "the release train leaves on fridays", "semantic", None,
                           "w")
    reader = None
    try:
        assert slow.entered.wait(SAFETY_S) and slow.admits
        reader, r_out = _start(_reads(mem)["search"], name="held-search")
        assert held.entered.wait(SAFETY_S)  # admitted, inside its search
        slow.release.set()
        assert slow.committed.wait(SAFETY_S)  # the rows are committed ...
        # ... and the writer waits for the reader it admitted before it goes on
        assert _until(lambda: _waiting_in(writer, "_close_admission"))
        assert store.lock.readers == 1 and "done" not in w_out and writer.is_alive()
        # a third party asking for the exclusive side waits behind the writer
        other, o_out = _start(mem.add, "after both", "semantic", None, "later")
        assert _until(lambda: store.lock.waiting()[1] == 1)
        assert "done" not in o_out
    finally:
        _let_go(held, slow, writer, reader)
    other.join(SAFETY_S)
    assert w_out.get("value") == "w" and o_out.get("value") == "later"
    assert "w" in [hit["item_id"] for hit in r_out["value"]]
    assert _reopened_equals(mem, tmp_path / "m.db")


def test_a_failed_fsync_waits_for_its_admitted_reader_then_undoes_and_drops_its_reinforcement(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    store.flush()
    before, digest = json.dumps(store.serialize(), default=str), state_digest(store)
    slow = SlowCommit(store.journal, fail=OSError("disk full"))
    monkeypatch.setattr(store.journal, "around_commit", slow)
    held = _HeldSearch(monkeypatch)
    writer, w_out = _start(mem.add, "a doomed release train", "semantic", None, "doomed")
    reader = None
    try:
        assert slow.entered.wait(SAFETY_S) and slow.admits
        reader, r_out = _start(lambda: mem.search("doomed"), name="held-search")
        assert held.entered.wait(SAFETY_S)
        slow.release.set()  # the commit fails ...
        assert slow.committed.wait(SAFETY_S)
        # ... and the undo waits for the admitted reader: the item is still there
        assert _until(lambda: _waiting_in(writer, "_close_admission"))
        assert "doomed" in store.workspace("ws").index_of and "done" not in w_out
    finally:
        _let_go(held, slow, writer, reader)
    # the reader saw the write that was then undone
    assert [hit["item_id"] for hit in r_out["value"]] == ["doomed"]
    assert isinstance(w_out.get("error"), PersistenceError) and "disk full" in str(w_out["error"])
    assert "doomed" not in store.workspace("ws").index_of
    assert json.dumps(store.serialize(), default=str) == before and state_digest(store) == digest
    monkeypatch.undo()
    # the next add takes the undone item's number: the reader's reinforcement must not land on it
    assert mem.add("a later write takes item number 3", item_id="z") == "z"
    store.reinforcements.drain()
    store.flush()
    ws = store.workspace("ws")
    assert ws.index_of["z"] == 3
    assert not [e for e in ws.items[3].history if e["kind"] == "reinforced"]
    assert _reopened_equals(mem, tmp_path / "m.db")


# ------------------------------------------------------------------ a caller's own section
def test_a_callers_section_of_two_writes_never_admits_readers_between_them(
        tmp_path, monkeypatch):
    mem, store, slow = _held_commits(tmp_path, monkeypatch)

    def two_writes():
        with store.lock:
            mem.add("first of two releases", item_id="r1")
            mem.add("second of two releases", item_id="r2")

    writer, w_out = _start(two_writes)
    try:
        assert slow.entered.wait(SAFETY_S)  # the first write's commit, mid-section
        assert not slow.admits
        reader, r_out = _start(lambda: mem.search("releases"))
        assert _until(lambda: store.lock.waiting()[0] == 1 or r_out.get("done"))
        assert "done" not in r_out and store.lock.waiting()[0] == 1
    finally:
        slow.release.set()
        writer.join(SAFETY_S)
    reader.join(SAFETY_S)
    assert "error" not in w_out, w_out
    assert {hit["item_id"] for hit in r_out["value"]} == {"r1", "r2"}  # both, or none
    assert _reopened_equals(mem, tmp_path / "m.db")


def test_a_transaction_admits_readers_only_at_its_end(tmp_path, monkeypatch):
    mem, store, slow = _held_commits(tmp_path, monkeypatch)

    def group():
        with store.transaction():
            mem.add("first of two releases", item_id="r1")
            mem.add("second of two releases", item_id="r2")

    writer, w_out = _start(group)
    try:
        assert slow.entered.wait(SAFETY_S) and slow.admits  # the one commit, at the end
        reader, r_out = _start(lambda: mem.search("releases"))
        reader.join(SAFETY_S)
        assert {hit["item_id"] for hit in r_out["value"]} == {"r1", "r2"}
        assert "done" not in w_out
    finally:
        slow.release.set()
        writer.join(SAFETY_S)
    assert "error" not in w_out, w_out
    assert _reopened_equals(mem, tmp_path / "m.db")


# ------------------------------------------------------------------ the option itself
@pytest.mark.parametrize("value", ["yes", 1, None, 0.0])
def test_reads_during_fsync_must_be_a_bool(tmp_path, value):
    with pytest.raises(ValueError, match=rf"reads_during_fsync must be a bool, got {value!r}"):
        MemoryStore(path=tmp_path / "m.db", reads_during_fsync=value)
    with pytest.raises(ValueError, match="reads_during_fsync"):
        MemoryStore(reads_during_fsync=value)


def test_in_memory_the_option_is_accepted_and_changes_nothing():
    on, off = (Memory(store=MemoryStore(reads_during_fsync=flag), workspace_id="ws",
                      clock=ManualClock(START)) for flag in (True, False))
    for mem in (on, off):
        mem.add_many([{"content": text, "item_id": iid} for iid, text in TEXTS])
        mem.search("fridays")
    assert on.store.reads_during_fsync is True
    assert state_digest(on.store) == state_digest(off.store)
    assert on.store.serialize() == off.store.serialize()


def test_the_option_is_not_state(tmp_path):
    on = _memory(tmp_path / "on.db")
    off = _memory(tmp_path / "off.db", on=False)
    assert state_digest(on.store) == state_digest(off.store)
    assert json.dumps(on.store.serialize(), default=str) == \
        json.dumps(off.store.serialize(), default=str)
    on.store.compact()
    assert state_digest(MemoryStore(path=tmp_path / "on.db")) == state_digest(off.store)


def _mixed_load(mem: Memory, writes) -> None:
    """Two writer threads (``writes("a")``, ``writes("b")``), a searching and a context
    reader, released together; every thread ends without an error."""
    start = threading.Barrier(4)

    def writer(tag: str) -> None:
        start.wait(SAFETY_S)
        writes(tag)

    def reader(kind: str) -> None:
        start.wait(SAFETY_S)
        for i in range(20):
            if kind == "search":
                mem.search("release fridays")
            else:
                mem.get_working_context(f"s{i % 3}", "release deploy")

    threads = [_start(writer, "a"), _start(writer, "b"), _start(reader, "search"),
               _start(reader, "context")]
    for thread, _ in threads:
        thread.join(SAFETY_S)
    assert all(out.get("done") and "error" not in out for _, out in threads), threads


def test_mixed_reads_and_writes_with_the_option_reopen_to_the_live_state(tmp_path):
    mem = _memory(tmp_path / "m.db", batch=4)

    def writes(tag: str) -> None:
        for i in range(12):
            mem.add(f"release {tag} {i} leaves on fridays", item_id=f"{tag}{i}")
            if i % 4 == 3:
                mem.add_edge(f"{tag}{i}", f"{tag}{i - 1}")

    _mixed_load(mem, writes)
    assert len(mem.store.workspace("ws")) == 3 + 24
    assert mem.store.lock.readers == 0 and mem.store.lock.waiting() == (0, 0)
    assert _reopened_equals(mem, tmp_path / "m.db")


# ------------------------------------------------------------------ RWLock.admitting
def _hold_shared(lock: RWLock):
    """A thread that takes ``lock`` shared, reports ``inside`` and holds it until ``release``."""
    inside, release = threading.Event(), threading.Event()

    def hold():
        with lock.shared():
            inside.set()
            assert release.wait(SAFETY_S)

    thread, out = _start(hold)
    return thread, out, inside, release


def test_admitting_does_nothing_outside_an_io_window_or_for_a_non_holder():
    lock = RWLock()
    with lock.admitting() as admits:
        assert admits is False
    with lock:
        with lock.admitting() as admits:
            assert admits is False
            thread, out, inside, release = _hold_shared(lock)
            assert _until(lambda: lock.waiting()[0] == 1)
            assert not inside.is_set()
    assert inside.wait(SAFETY_S)
    release.set()
    thread.join(SAFETY_S)
    assert out.get("done") and "error" not in out


def test_admitting_lets_a_waiting_reader_in_and_its_end_waits_for_it():
    lock = RWLock()
    opened, go, ended = threading.Event(), threading.Event(), threading.Event()
    lock.acquire()  # held while the reader begins to wait; handed to the writer thread below
    thread, out, inside, release = _hold_shared(lock)
    assert _until(lambda: lock.waiting()[0] == 1)  # waits: a writer holds the lock
    with lock.admitting() as admits:  # outside an io_window: nothing
        assert admits is False
    lock.release()
    assert inside.wait(SAFETY_S)
    release.set()
    thread.join(SAFETY_S)

    def writer():
        with lock, lock.io_window(), lock.admitting() as admits:
            assert admits is True
            opened.set()
            assert go.wait(SAFETY_S)
        ended.set()

    w, w_out = _start(writer)
    assert opened.wait(SAFETY_S)
    with lock.admitting() as admits:  # not the holder: nothing
        assert admits is False
    hits = lock.optimistic_hits
    assert lock.epoch % 2 == 0 and lock.optimistic(lambda: 5) == 5  # gets as before
    assert lock.optimistic_hits == hits + 1
    thread, out, inside, release = _hold_shared(lock)
    assert inside.wait(SAFETY_S) and lock.readers == 1  # in beside the writer
    go.set()
    assert _until(lambda: _waiting_in(w, "_close_admission"))  # the end waits for it
    assert not ended.is_set()
    release.set()
    w.join(SAFETY_S)
    thread.join(SAFETY_S)
    assert ended.is_set() and "error" not in w_out and out.get("done") and "error" not in out
    assert lock.readers == 0 and lock.epoch % 2 == 0


def test_the_holder_reentering_inside_admitting_waits_for_the_admitted_readers():
    lock = RWLock()
    reentered = threading.Event()
    state = {}

    def writer():
        with lock, lock.io_window(), lock.admitting():
            state["admitting"] = True
            assert state_go.wait(SAFETY_S)
            with lock:  # a nested section (an undo): after the admitted readers only
                state["readers_at_reentry"] = lock.readers
                reentered.set()

    state_go = threading.Event()
    w, w_out = _start(writer)
    assert _until(lambda: state.get("admitting"))
    thread, out, inside, release = _hold_shared(lock)
    assert inside.wait(SAFETY_S)  # admitted beside the writer
    state_go.set()
    assert _until(lambda: _waiting_in(w, "_close_admission"))
    assert not reentered.is_set()
    release.set()
    w.join(SAFETY_S)
    thread.join(SAFETY_S)
    assert reentered.is_set() and state["readers_at_reentry"] == 0 and "error" not in w_out
    # after the nested section no reader is admitted any more (the admission closed)
    assert lock.readers == 0 and lock.waiting() == (0, 0)


def test_while_admitting_a_second_writer_still_waits():
    lock = RWLock()
    go = threading.Event()
    order = []

    def first():
        with lock, lock.io_window(), lock.admitting():
            order.append("first in")
            assert go.wait(SAFETY_S)
            order.append("first out")

    def second():
        with lock:
            order.append("second")

    f, f_out = _start(first)
    assert _until(lambda: order == ["first in"])
    s, s_out = _start(second)
    assert _until(lambda: lock.waiting()[1] == 1)
    thread, out, inside, release = _hold_shared(lock)
    assert inside.wait(SAFETY_S)  # a reader goes in, the waiting writer does not
    release.set()
    thread.join(SAFETY_S)
    assert order == ["first in"]
    go.set()
    f.join(SAFETY_S)
    s.join(SAFETY_S)
    assert order == ["first in", "first out", "second"]


def test_mixed_reads_and_writes_with_failing_commits_reopen_to_the_live_state(
        tmp_path, monkeypatch):
    """Every third commit fails (deterministically, by count) while readers go in during the
    commits: each failed write raises and is gone, each acknowledged one is on disk, and the
    file reopens to exactly the live state."""
    mem = _memory(tmp_path / "m.db", batch=1000)  # reinforcements ride with the writes' rows
    store = mem.store
    real = store.journal.around_commit
    count = {"n": 0, "failed admitting": 0}
    count_lock = threading.Lock()

    def flaky():
        with count_lock:
            count["n"] += 1
            fail = count["n"] % 3 == 0
        gate = real()

        class _Flaky:
            def __enter__(self):
                if gate.__enter__() and fail:
                    count["failed admitting"] += 1
                if fail:
                    gate.__exit__(None, None, None)
                    raise OSError("disk full")

            def __exit__(self, *exc):
                return gate.__exit__(*exc)

        return _Flaky()

    monkeypatch.setattr(store.journal, "around_commit", flaky)
    acked: dict[str, set] = {"a": set(), "b": set()}

    def writes(tag: str) -> None:
        for i in range(12):
            try:
                mem.add(f"release {tag} {i} leaves on fridays", item_id=f"{tag}{i}")
                acked[tag].add(f"{tag}{i}")
            except PersistenceError:
                pass

    _mixed_load(mem, writes)
    monkeypatch.undo()
    ws = store.workspace("ws")
    live = set(ws.item_ids) - {iid for iid, _ in TEXTS}
    assert live == acked["a"] | acked["b"] and len(live) < 24  # some failed, none half-kept
    assert count["failed admitting"] >= 1  # failures while readers were admitted
    assert store.lock.readers == 0 and store.lock.waiting() == (0, 0)
    store.reinforcements.drain()
    assert _reopened_equals(mem, tmp_path / "m.db")
