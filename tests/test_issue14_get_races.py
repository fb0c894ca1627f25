"""Issue 14 item 9, the concurrency review of lock-free gets: races that each test pins down.

* A get resolves its workspace inside the checked read: a failed write's undo replaces the
  workspace objects, and a read of the old one must not pass the epoch check.
* A reinforcement carries the ids of the items its read returned; applied under the exclusive
  lock, an item number that now holds another item (an undo, then an add reusing it) is dropped.
* The io window opens only at the end of the outermost exclusive section (a caller's
  ``with store.lock:`` over several writes stays atomic for gets) and never on an error path
  (a replay leading other threads' queued commit over a half-applied state).
* The lock: re-entry inside an io window closes it; ``reader_turn`` is checked; without the
  GIL an optimistic read takes the shared side.

Threads meet at events (hooks in the store's methods); a thread is known to wait when the lock
counts it (``waiting()``). No timing asserts: the timeouts only turn a regression into a
failure instead of a hang.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab._columns import ItemColumns
from memlab._rwlock import RWLock
from memlab.errors import UnknownItemError
from memlab.persist import PersistenceError
from memlab.snapshot import state_digest

from _support import SlowDisk as _SlowDisk, start_thread as _start, until as _until  # noqa: E402
SAFETY_S = 30.0  # only ever reached by a regression
START = datetime(2024, 1, 1, tzinfo=timezone.utc)
READER = "getter"  # the name of the reading thread the hooks stop


def _memory(path, **options) -> Memory:
    store = MemoryStore(path=path, compact_after=None, **options)
    mem = Memory(store=store, workspace_id="ws", clock=ManualClock(START))
    mem.add_many([{"content": text, "item_id": iid} for iid, text in
                  [("deploy", "deploys run on fridays"), ("pizza", "lunch is pizza on fridays"),
                   ("runbook", "the deploy runbook lists every step")]])
    return mem


class _Gate:
    """Wraps a store method: the reading thread stops in it (once) until let go; ``before``:
    stop before calling the real method, else after it (its result already in hand)."""

    def __init__(self, real, before: bool = False) -> None:
        self.real, self.before = real, before
        self.inside, self.go = threading.Event(), threading.Event()

    def _stop(self) -> None:
        if threading.current_thread().name == READER and not self.inside.is_set():
            self.inside.set()
            assert self.go.wait(SAFETY_S)

    def __call__(self, *args, **kwargs):
        if self.before:
            self._stop()
            return self.real(*args, **kwargs)
        value = self.real(*args, **kwargs)
        self._stop()
        return value


def _reinforced(mem: Memory, item_id: str) -> list[str]:
    """The ``via`` of each reinforcement event in ``item_id``'s history."""
    item = mem.get(item_id, reinforce=False)
    return [e["detail"]["via"] for e in item["history"] if e["kind"] == "reinforced"]


def _rows(path) -> list[tuple[str, str]]:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT op, payload FROM ops ORDER BY seq").fetchall()


def _fail_a_write_while(mem: Memory, monkeypatch, item_id: str, content: str, gated: str,
                        read, query: str, before: bool = False):
    """Add ``item_id`` with a commit that stops and then fails; while it is stopped, run
    ``read(query)`` in the reading thread until it stops at a :class:`_Gate` on the store's
    method ``gated`` (``before``: ahead of the real call); then let the commit fail (the
    undo rebuilds the store) and add ``"other"``, which takes the undone item's number.
    Returns the reading thread, its output and the gate."""
    store = mem.store
    disk = _SlowDisk(store.journal, fail=OSError("disk full"))
    monkeypatch.setattr(store.journal, "append_many", disk)
    writer, w_out = _start(mem.add, content, "semantic", None, item_id)
    assert disk.entered.wait(SAFETY_S)
    number = len(store.workspace("ws")) - 1
    gate = _Gate(getattr(store, gated), before=before)
    monkeypatch.setattr(store, gated, gate)
    reader, r_out = _start(read, query, name=READER)
    assert gate.inside.wait(SAFETY_S), r_out
    disk.release.set()
    writer.join(SAFETY_S)
    assert isinstance(w_out.get("error"), PersistenceError), w_out
    assert item_id not in store.workspace("ws").index_of
    assert mem.add("an unrelated item", item_id="other") == "other"
    assert store.workspace("ws").require("other") == number  # the undone item's number
    return reader, r_out, gate


# ------------------------------------------------------------------ 1: the workspace
def test_a_get_that_took_the_workspace_before_an_undo_does_not_return_the_undone_item(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store

    # the get is stopped right after it looked its workspace up (the old object)
    reader, r_out, gate = _fail_a_write_while(mem, monkeypatch, "lost", "never durable",
                                              "workspace", mem.get, "lost")
    gate.go.set()
    reader.join(SAFETY_S)
    assert r_out.get("done")
    # the old workspace object still held the undone item: reading it is a torn read
    assert isinstance(r_out.get("error"), UnknownItemError), r_out
    assert _reinforced(mem, "other") == []
    mem.add("a later innocent write", item_id="later")  # no ValueError from a stray number
    store.flush()
    monkeypatch.undo()  # the hooks are instance attributes: not part of the state
    assert state_digest(MemoryStore(path=tmp_path / "m.db")) == state_digest(store)


# ------------------------------------------------------------------ 2: reinforcements carry ids
def test_a_get_reinforcement_submitted_after_an_undo_skips_the_item_that_took_its_number(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store

    # the get has read "lost" (during the failing commit's fsync) and stops before submit
    reader, r_out, gate = _fail_a_write_while(mem, monkeypatch, "lost", "never durable",
                                              "retrieval_payload", mem.get, "lost", before=True)
    rows = _rows(tmp_path / "m.db")
    gate.go.set()
    reader.join(SAFETY_S)
    # documented: during the fsync a get sees the write its caller was not told about yet
    assert r_out.get("value", {}).get("item_id") == "lost", r_out
    assert _reinforced(mem, "other") == []  # not the item that took the number
    assert store.reinforcements.applied == 1 and len(store.reinforcements) == 0
    store.flush()
    assert _rows(tmp_path / "m.db") == rows  # nothing journaled for it
    monkeypatch.undo()  # the hooks are instance attributes: not part of the state
    assert state_digest(MemoryStore(path=tmp_path / "m.db")) == state_digest(store)


def test_a_search_reinforcement_after_an_undo_keeps_only_the_items_it_returned(
        tmp_path, monkeypatch):
    # fsync outside the lock: the search runs under the shared side while the write's rows
    # are being written, and its reinforcement names the write's item too
    mem = _memory(tmp_path / "m.db", fsync_outside_lock=True)
    store = mem.store

    reader, r_out, gate = _fail_a_write_while(mem, monkeypatch, "lost",
                                              "fridays fridays never durable",
                                              "retrieval_payload", mem.search, "fridays",
                                              before=True)
    gate.go.set()
    reader.join(SAFETY_S)
    hits = [hit["item_id"] for hit in r_out["value"]]
    assert "lost" in hits and {"deploy", "pizza"} <= set(hits), hits
    assert _reinforced(mem, "other") == []
    assert _reinforced(mem, "deploy") == ["search"] and _reinforced(mem, "pizza") == ["search"]
    store.flush()
    # the journal row holds the call without the dropped number, encoded as the read would
    ws = store.workspace("ws")
    kept = [ws.require(i) for i in hits if i != "lost"]
    row = json.loads(_rows(tmp_path / "m.db")[-1][1])
    assert [call["idx"] for call in row["calls"]] == [kept]
    call = mem._retrieval(kept, START, "search")
    assert row == json.loads('{"calls": [' + gate.real(call) + ']}')
    monkeypatch.undo()  # the hooks are instance attributes: not part of the state
    assert state_digest(MemoryStore(path=tmp_path / "m.db")) == state_digest(store)


def test_record_encoded_skips_a_call_whose_items_are_all_gone(tmp_path):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    call = mem._retrieval([1], START, "get")
    payload = store.retrieval_payload(call)
    with store.lock:
        assert store.record_encoded(call, payload, ["not-pizza"]) is False
        assert store.record_encoded(mem._retrieval([7], START, "get"), payload, ["x"]) is False
        assert store.record_encoded(call, payload, ["pizza"]) is True
    assert _reinforced(mem, "pizza") == ["get"]


# ------------------------------------------------------------------ 3: the outermost section
def test_a_callers_section_of_two_writes_stays_atomic_for_gets(tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    disk = _SlowDisk(store.journal)
    monkeypatch.setattr(store.journal, "append_many", disk)

    def revise():
        with store.lock:  # the caller's section: v2 and v1's supersession, atomically
            mem.add("policy v2: never deploy on fridays", item_id="v2")
            store.update_item("ws", store.workspace("ws").require("deploy"), START,
                              metadata={"superseded_by": "v2"})

    writer, w_out = _start(revise)
    try:
        assert disk.entered.wait(SAFETY_S)  # the first write's commit, mid-section
        hits = store.lock.optimistic_hits
        reader, r_out = _start(lambda: mem.get("deploy", reinforce=False))
        # the get waits for the shared side: the section is not over
        assert _until(lambda: store.lock.waiting()[0] == 1 or r_out.get("done"))
        assert not r_out.get("done"), r_out
        assert store.lock.epoch % 2 == 1
    finally:
        disk.release.set()
        writer.join(SAFETY_S)
    reader.join(SAFETY_S)
    assert "error" not in w_out, w_out
    assert r_out["value"]["metadata"] == {"superseded_by": "v2"}
    assert store.lock.optimistic_hits == hits


def test_one_write_in_the_facades_own_section_still_lets_gets_read_during_its_fsync(
        tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    store = mem.store
    disk = _SlowDisk(store.journal)
    monkeypatch.setattr(store.journal, "append_many", disk)
    writer, w_out = _start(mem.add_edge, "deploy", "runbook")
    try:
        assert disk.entered.wait(SAFETY_S)
        reader, r_out = _start(lambda: mem.get("pizza", reinforce=False))
        reader.join(SAFETY_S)
        assert r_out["value"]["item_id"] == "pizza" and "done" not in w_out
    finally:
        disk.release.set()
        writer.join(SAFETY_S)
    assert "error" not in w_out, w_out


# ------------------------------------------------------------------ 4: no window on error paths
def test_a_replay_never_leads_a_commit_inside_an_io_window(tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db", fsync_outside_lock=True)
    store = mem.store
    doc = store.workspace("ws").require("deploy")
    # thread A's write is queued; A stops after releasing the lock, before it commits
    real_after = store.lock.after_release
    a_released, a_go = threading.Event(), threading.Event()

    def after():
        if threading.current_thread().name == "A":
            a_released.set()
            assert a_go.wait(SAFETY_S)
        real_after()

    monkeypatch.setattr(store.lock, "after_release", after)
    a = threading.Thread(target=mem.add, args=("from A",), kwargs={"item_id": "a"}, name="A",
                         daemon=True)
    a.start()
    assert a_released.wait(SAFETY_S)
    disk = _SlowDisk(store.journal)  # the commit of A's rows, when B's replay leads it
    monkeypatch.setattr(store.journal, "append_many", disk)
    real_set_metadata = ItemColumns.set_metadata

    def boom(self, i, metadata):
        raise MemoryError("injected after the content changed")

    monkeypatch.setattr(ItemColumns, "set_metadata", boom)
    b, b_out = _start(lambda: store.update_item("ws", doc, START, content="NEW content",
                                                metadata={"rev": 2}))
    try:
        assert disk.entered.wait(SAFETY_S)  # B, half-applied, replays: first A's rows
        reader, r_out = _start(lambda: mem.get("deploy", reinforce=False))
        assert _until(lambda: store.lock.waiting()[0] == 1 or r_out.get("done"))
        assert not r_out.get("done"), r_out  # a torn state is not readable
        monkeypatch.setattr(ItemColumns, "set_metadata", real_set_metadata)
    finally:
        disk.release.set()
        b.join(SAFETY_S)
        a_go.set()
        a.join(SAFETY_S)
    reader.join(SAFETY_S)
    assert isinstance(b_out.get("error"), MemoryError)
    assert r_out["value"]["content"] == "deploys run on fridays"
    assert mem.get("a", reinforce=False)["item_id"] == "a"


# ------------------------------------------------------------------ 5-7: the lock
@pytest.mark.parametrize("reenter, leave", [("acquire", "release"),
                                            ("try_acquire", "release"),
                                            ("acquire_shared", "release_shared")])
def test_reentering_the_lock_inside_an_io_window_closes_the_window(reenter, leave):
    lock = RWLock()
    with lock:
        with lock.io_window():
            assert lock.epoch % 2 == 0
            getattr(lock, reenter)()  # a nested section may change state
            assert lock.epoch % 2 == 1
            hits = lock.optimistic_hits
            seen, out = _start(lock.optimistic, lambda: "read")
            assert _until(lambda: lock.waiting()[0] == 1)  # not lock-free any more
            getattr(lock, leave)()
            assert lock.epoch % 2 == 1
        assert lock.epoch % 2 == 1
    seen.join(SAFETY_S)
    assert out["value"] == "read" and lock.optimistic_hits == hits
    assert lock.epoch % 2 == 0


@pytest.mark.parametrize("value", [0, -1, True, 1.5, "3", None])
def test_reader_turn_must_be_an_int_of_at_least_one(value):
    lock = RWLock()
    with pytest.raises(ValueError, match=f"reader_turn must be an int >= 1, got {value!r}"):
        lock.reader_turn = value
    assert lock.reader_turn == 3
    lock.reader_turn = 1
    lock.reader_turn = 10**9
    assert lock.reader_turn == 10**9


def test_without_the_gil_an_optimistic_read_takes_the_shared_side(monkeypatch):
    lock = RWLock()
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: False, raising=False)
    assert lock.optimistic(lock.held_shared) is True
    assert lock.optimistic_hits == 0
    monkeypatch.setattr(sys, "_is_gil_enabled", lambda: True, raising=False)
    assert lock.optimistic(lock.held_shared) is False
    assert lock.optimistic_hits == 1
