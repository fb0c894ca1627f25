"""Issue 14, item 7: the reopen of a large store from its snapshot, made cheaper.

The profile (``benchmarks/reopen.py``, which reports wall time, CPU time and run-queue wait per
phase) showed the wall-vs-CPU gap of a 1M-item reopen to be time spent waiting for a core, so
the CPU time was cut: one int64 sort for the duplicate-edge check, the loaded state frozen out
of the garbage collector, item histories stored as a table of distinct events (snapshot format
2). These tests pin what those changes must not break: format-1 snapshots still load to the
same state, histories of any shape round-trip, the duplicate check agrees with a set oracle,
and the freeze happens only for large loads.
"""

from __future__ import annotations

import gc
from datetime import datetime, timezone

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import memlab.persist as persist
import memlab.snapshot as snapshot
from memlab import ManualClock, Memory
from memlab.snapshot import _live_duplicate, full_state
from memlab.store import MemoryStore

T0 = datetime(2024, 5, 1, tzinfo=timezone.utc)


def _memory(path) -> Memory:
    clock = ManualClock(T0)
    mem = Memory(path=str(path), clock=clock)
    mem.add_many([{"content": f"bulk note {i} on the release", "item_id": f"b{i}"}
                  for i in range(30)])
    for i in range(3):  # histories of two, three and four events (reads reinforce)
        for _ in range(i + 1):
            mem.get(f"b{i}")
            clock.advance(seconds=30)
    mem.add("a note with a datetime-free history", item_id="x", metadata={"when": "today"})
    return mem


def test_histories_are_a_table_of_distinct_events(tmp_path):
    mem = _memory(tmp_path / "m.db")
    header, parts = snapshot.capture(mem.store)
    by_name = {e[0]: (e, p) for e, p in zip(header["index"], parts)}
    assert "0.history" not in by_name
    events = snapshot._Reader("", persist.SnapshotInfo(1, 1, np.zeros(0, np.int64), len(parts),
                                                       header), parts).data("0.history.events")
    # 31 items created in two writes (one bulk, one single), six reads
    items = mem.store.workspace("default").items
    distinct = {repr(e) for it in items for e in it.history}
    assert len(events) == len(distinct) < sum(len(it.history) for it in items)
    counts = np.frombuffer(by_name["0.history.counts"][1], "<i8").tolist()
    assert counts == [len(it.history) for it in items] and max(counts) >= 2
    mem.store.close()


def test_a_format_1_snapshot_still_loads_to_the_same_state(tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    expected = full_state(mem.store)
    with monkeypatch.context() as m:  # the format-1 writer: every history as one JSON value
        m.setattr(persist, "SNAPSHOT_FORMAT", 1)
        m.setattr(snapshot, "_history", lambda out, p, items: out.data(
            p + "history", [it.history for it in items]))
        mem.store.compact()
    mem.store.close()
    journal = persist.Journal(tmp_path / "m.db")
    info, _, _ = journal.load()
    journal.close()
    assert info.header["format"] == 1 and ["0.history", "data"] == info.header["index"][8][:2]
    reopened = MemoryStore(path=tmp_path / "m.db")
    assert full_state(reopened) == expected
    reopened.close()


def test_histories_round_trip_through_a_format_2_snapshot(tmp_path):
    mem = _memory(tmp_path / "m.db")
    expected = full_state(mem.store)
    mem.store.compact()
    mem.store.close()
    reopened = MemoryStore(path=tmp_path / "m.db")
    assert full_state(reopened) == expected
    items = reopened.workspace("default").items
    # equal events are shared after the load; recording one appends, never edits in place
    items.record(5, {"ts": "x", "kind": "touched", "detail": {}})  # the item columns' write
    assert [len(items[i].history) for i in (4, 5, 6)] == [1, 2, 1]
    reopened.close()


@settings(max_examples=200, deadline=None)
@given(st.integers(2, 6), st.integers(1, 3), st.lists(
    st.tuples(st.integers(0, 5), st.integers(0, 5), st.integers(0, 2), st.booleans()),
    max_size=25), st.booleans())
def test_duplicate_live_edge_check_matches_a_set_oracle(n, types, rows, huge):
    rows = [(s % n, d % n, c % types, live) for s, d, c, live in rows]
    src = np.array([r[0] for r in rows], np.int64)
    dst = np.array([r[1] for r in rows], np.int64)
    code = np.array([r[2] for r in rows], np.int32)
    weight = np.array([1.0 if r[3] else 0.0 for r in rows])
    seen, dup = set(), False
    for s, d, c, live in rows:
        if live:
            dup |= (s, d, c) in seen
            seen.add((s, d, c))
    # huge: an item count whose packed key would overflow int64 (the lexsort path)
    assert _live_duplicate(src, dst, code, weight, 2 ** 31 if huge else n, types) == dup


def test_a_large_load_freezes_its_objects_and_a_small_one_does_not(tmp_path, monkeypatch):
    mem = _memory(tmp_path / "m.db")
    mem.store.compact()
    mem.store.close()
    gc.unfreeze()
    try:
        MemoryStore(path=tmp_path / "m.db").close()  # 31 items + 0 edges: below FREEZE_AT
        assert gc.get_freeze_count() == 0
        monkeypatch.setattr(snapshot, "FREEZE_AT", 10)
        store = MemoryStore(path=tmp_path / "m.db")
        assert gc.get_freeze_count() > 0 and gc.isenabled()
        store.close()
    finally:
        gc.unfreeze()
