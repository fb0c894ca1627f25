"""Issue 18, replay throughput: a run of adds made at different times is one write (each item
stamped with its own event's time), with the frames and the state of one write per event; the
trace is hashed once, line by line."""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from memlab import ManualClock, Memory
from memlab.datasets.synthetic import synthetic_trace
from memlab.harness.replay import ReplayError
from memlab.harness import TraceBuilder, replay
from memlab.harness.trace import Event, Trace

START = datetime(2024, 3, 1, tzinfo=timezone.utc)


def unbatched(trace: Trace) -> Trace:
    """The same trace with a zero clock step after every add: one write per add (the replay
    before issue 18 wrote adds at different times one by one)."""
    events = []
    for event in trace.events:
        events.append(event)
        if event.type == "add":
            events.append(Event("clock", {"advance_s": 0.0}))
    return Trace(events, name=trace.name, start=trace.start, workspace_id=trace.workspace_id,
                 metadata=trace.metadata)


def frames(result):
    decisions = result.decisions.drop(columns=[c for c in result.decisions.columns
                                               if c.endswith("_ms")])
    metrics = result.metrics[~result.metrics.measure.str.startswith("latency")]
    return decisions, result.candidates, metrics.reset_index(drop=True)


def count_add_many(monkeypatch) -> list[int]:
    sizes: list[int] = []
    original = Memory.add_many

    def counting(self, items, **kwargs):
        items = list(items)
        sizes.append(len(items))
        return original(self, items, **kwargs)

    monkeypatch.setattr(Memory, "add_many", counting)
    return sizes


def test_adds_at_different_times_are_one_write_with_identical_frames(monkeypatch):
    trace = synthetic_trace(300, 40, seed=3)  # every add has its own ts (the item's time)
    assert len({e.ts for e in trace.events if e.type == "add"}) == 300
    sizes = count_add_many(monkeypatch)
    batched = replay(trace, progress=False)
    assert sizes == [300]
    sizes.clear()
    reference = replay(unbatched(trace), progress=False)
    assert sizes == [1] * 300
    for got, want in zip(frames(batched), frames(reference)):
        pd.testing.assert_frame_equal(got, want)
    assert len(batched.decisions) == 40 and batched.candidates.shape[0] > 40


def test_adds_without_times_take_the_clock_their_event_saw(monkeypatch):
    """Adds with no ts after one with a ts inherit it; without created_at the item is created
    then; a later ts in the run moves the clock for what follows."""
    builder = TraceBuilder("t", start=START)
    builder.add("alpha one", item_id="a", ts=START + timedelta(hours=1))
    builder.add("alpha two", item_id="b")  # the clock as event 0 left it
    builder.add("alpha three", item_id="c", ts=START + timedelta(hours=5))
    builder.add("alpha four", item_id="d", created_at=START)
    builder.query("q1", "latest alpha", gold=["c"], strategy="fast:recency")
    trace = builder.build()
    sizes = count_add_many(monkeypatch)
    result = replay(trace, progress=False)
    assert sizes == [4]
    assert result.decisions["now"].tolist() == [(START + timedelta(hours=5)).isoformat()]
    reference = replay(unbatched(trace), progress=False)
    for got, want in zip(frames(result), frames(reference)):
        pd.testing.assert_frame_equal(got, want)


def test_added_at_leaves_the_state_of_one_write_per_time():
    """Memory.add_many(added_at=...) = one add per time, history and columns included."""
    times = [START, START, START + timedelta(minutes=3), START + timedelta(days=1)]
    items = [{"content": f"note {i}", "item_id": f"n{i}"} for i in range(4)]
    items[2]["created_at"] = START - timedelta(days=2)
    one = Memory(clock=ManualClock(START), workspace_id="w")
    one.add_many(items, added_at=times)
    each = Memory(clock=ManualClock(START), workspace_id="w")
    for item, at in zip(items, times):
        each.clock.set(at)
        each.add_many([item])
    states = [mem.store.serialize() for mem in (one, each)]
    assert [s["workspaces"]["w"].pop("version") for s in states] == [1, 4]  # writes counted
    assert json.dumps(states[0]) == json.dumps(states[1])
    history = one.store.workspace("w").item(3).history[0]
    assert history["ts"] == times[3].isoformat() and history["kind"] == "created"


@pytest.mark.parametrize("bad", [[START], "2024", [START, "x"]])
def test_added_at_is_validated(bad):
    mem = Memory(clock=ManualClock(START))
    with pytest.raises(ValueError, match="added_at"):
        mem.add_many(["a", "b"], added_at=bad)
    assert len(mem.store.workspace_ids()) == 0 or len(mem.store.workspace(mem.workspace_id)) == 0


def test_a_refused_add_in_a_run_names_its_own_event():
    builder = TraceBuilder("t", start=START)
    builder.add("one", item_id="a", ts=START + timedelta(hours=1))
    builder.add("two", item_id="b", ts=START + timedelta(hours=2))
    builder.add("three", item_id="a", ts=START + timedelta(hours=3))  # taken
    with pytest.raises(ReplayError, match=r"event 2 \(line 4, add\).*already exists"):
        replay(builder.build(), progress=False)


def test_the_trace_is_hashed_once_line_by_line(monkeypatch):
    trace = synthetic_trace(200, 10, seed=2)
    expected = hashlib.sha256(trace.to_jsonl().encode()).hexdigest()
    assert trace.hash() == expected
    calls = []
    monkeypatch.setattr(Event, "to_dict", lambda self, f=Event.to_dict: calls.append(1) or f(self))
    result = replay(trace, progress=False)
    assert result.manifest["trace"]["hash"] == expected and calls == []  # remembered
    trace.events.append(Event("clock", {"advance_s": 1.0}))  # a changed trace hashes again
    assert trace.hash() == hashlib.sha256(trace.to_jsonl().encode()).hexdigest() != expected
    trace.metadata["note"] = "x"
    assert trace.hash() == hashlib.sha256(trace.to_jsonl().encode()).hexdigest()


def test_added_at_survives_the_journal(tmp_path):
    from memlab import MemoryStore

    path = tmp_path / "m.db"
    store = MemoryStore(path=path)
    mem = Memory(store=store, workspace_id="w", clock=ManualClock(START))
    mem.add_many(["a", "b"], added_at=[START, START + timedelta(hours=2)])
    state = json.dumps(store.serialize())
    store.close()
    reopened = MemoryStore(path=path)
    assert json.dumps(reopened.serialize()) == state
    assert reopened.workspace("w").item(1).created_at == START + timedelta(hours=2)
