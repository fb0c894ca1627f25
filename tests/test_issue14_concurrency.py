"""Issue 14 item 9: concurrency within one store.

No test here asserts on wall-clock time: threads meet at events, and the waits carry generous
timeouts only so that a regression fails instead of hanging the suite.
"""

from __future__ import annotations

import itertools
import threading
from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab.graph.ppr import PPR_METHODS, PPRConfig, exact_ppr, register_ppr_method
from memlab.surfacing.ppr import ppr_result
from memlab.graph.spreading import SpreadConfig
from memlab.surfacing.config import DEFAULT

SAFETY_S = 30.0  # only ever reached by a regression


def _graph_memory(store: MemoryStore | None = None, workspace_id: str = "default") -> Memory:
    mem = Memory(store=store, workspace_id=workspace_id)
    for i in "abcd":
        mem.add(f"item {i}", item_id=i)
    mem.add_edges([("a", "b"), ("b", "c"), ("c", "d"), ("d", "a")])
    return mem


def test_issue14_third_ppr_caller_in_one_store_returns_at_once():
    mem = _graph_memory()
    entered = [threading.Event(), threading.Event()]
    release = threading.Event()
    arrivals = itertools.count()

    def blocking(snapshot, seeds, config, deadline):
        entered[next(arrivals)].set()
        release.wait(SAFETY_S)
        return exact_ppr(snapshot, seeds, config, deadline)

    register_ppr_method("issue14-blocking", blocking)
    results: dict[int, object] = {}

    def call(slot: int) -> None:
        results[slot] = ppr_result(mem, ["a"], method="issue14-blocking", budget_ms=None,
                                   cache=False)

    first_two = [threading.Thread(target=call, args=(i,)) for i in range(2)]
    third_done = threading.Event()
    try:
        for thread in first_two:
            thread.start()
        # both computations are inside PPR at once (before the fix the second waited on the
        # store's lock, held by the first for its whole computation)
        assert entered[0].wait(SAFETY_S) and entered[1].wait(SAFETY_S)
        third = threading.Thread(target=lambda: (call(2), third_done.set()))
        third.start()
        assert third_done.wait(SAFETY_S), "the third caller waited instead of returning"
        assert not release.is_set()  # the two were still computing when it returned
        assert results[2].saturated and results[2].scores == {}
    finally:
        release.set()
        for thread in first_two:
            thread.join(SAFETY_S)
        PPR_METHODS.pop("issue14-blocking", None)
    assert all(not results[i].saturated and results[i].scores for i in range(2))
    assert results[0].scores == results[1].scores


def test_a_writer_waits_for_readers_and_new_readers_wait_for_a_waiting_writer():
    from memlab._rwlock import RWLock  # here, so the file also runs against the old store
    lock = RWLock()
    events = {name: threading.Event() for name in
              ("reader_in", "writer_in", "late_reader_in", "release_reader")}

    def reader():
        with lock.shared():
            events["reader_in"].set()
            events["release_reader"].wait(SAFETY_S)

    def writer():
        with lock:
            events["writer_in"].set()

    def late_reader():
        with lock.shared():
            events["late_reader_in"].set()

    threads = [threading.Thread(target=reader)]
    threads[0].start()
    assert events["reader_in"].wait(SAFETY_S)
    with lock.shared():  # a second reader gets in beside the first
        assert lock.readers == 2
    threads.append(threading.Thread(target=writer))
    threads[1].start()
    while not lock._writers_waiting:  # the writer queues behind the reader
        threading.Event().wait(0.001)
    threads.append(threading.Thread(target=late_reader))
    threads[2].start()
    assert not events["writer_in"].is_set() and not events["late_reader_in"].is_set()
    events["release_reader"].set()
    for thread in threads:
        thread.join(SAFETY_S)
    assert events["writer_in"].is_set() and events["late_reader_in"].is_set()


def test_a_read_may_not_upgrade_to_a_write():
    mem = _graph_memory()
    with mem.store.lock.shared(), pytest.raises(RuntimeError, match="a read may not write"):
        mem.add("written inside a read")
    assert len(mem) == 4  # nothing was written, and the lock is free again
    mem.add("after")
    assert len(mem) == 5


# ------------------------------------------------------------------ readers beside writers
# no wall-clock budgets, so a context depends on the store's state alone
_CONFIG = DEFAULT.replace(name="issue14-untimed", ppr=PPRConfig(budget_ms=None),
                          spreading=SpreadConfig(budget_ms=None))


def _writes() -> list[tuple[str, object]]:
    """A fixed sequence of writes: items, edges between them, and pins."""
    out: list[tuple[str, object]] = []
    for i in range(12):
        out.append(("add", {"content": f"deploy notes {i} for the friday release train",
                            "item_id": f"n{i}"}))
        if i:
            out.append(("edge", (f"n{i - 1}", f"n{i}")))
        if i % 4 == 3:
            out.append(("pin", f"n{i - 2}"))
    return out


def _apply(mem: Memory, write: tuple[str, object]) -> None:
    kind, arg = write
    if kind == "add":
        mem.add(**arg)
    elif kind == "edge":
        mem.add_edge(*arg)
    else:
        mem.pin_item("s1", arg)


def _fresh(clock) -> Memory:
    mem = Memory(surfacing_mode="router", clock=clock, config=_CONFIG)
    mem.add("the friday deploy checklist", item_id="seed")
    return mem


def _surfaced(mem: Memory, strategy: str) -> list[tuple[str, list]]:
    response = mem.get_working_context("s1", "friday deploy release", k=8, strategy=strategy)
    return [(item["item_id"], sorted(item["score_breakdown"].items()))
            for item in response["items"]]


@pytest.mark.parametrize("strategy", ["factual:point-query", "deep:multi-hop", "fast:recency"])
def test_contexts_during_concurrent_writes_equal_a_serial_prefix(strategy, monkeypatch):
    # three readers, and PPR runs at most MAX_IN_FLIGHT (2) at once: a third reader would get
    # no centrality ("saturated", by design) and differ from the serial run for that reason
    # alone; this test is about consistency under writes, so every reader gets a slot
    import memlab.surfacing.ppr as surfacing_ppr
    monkeypatch.setattr(surfacing_ppr, "_SLOTS", threading.BoundedSemaphore(8))
    clock = ManualClock(datetime(2024, 1, 1, tzinfo=timezone.utc))
    mem = _fresh(clock)
    writes = _writes()
    # how many writes have applied, moved inside each write's exclusive section (a pin does not
    # move ws.version, and readers now get in between one writer's consecutive writes: the
    # lock's reader_turn)
    applied = [0]
    seen: list[tuple[int, list]] = []
    errors: list[BaseException] = []
    done = threading.Event()

    def writer():
        try:
            for j, write in enumerate(writes, start=1):
                with mem.store.lock:
                    _apply(mem, write)
                    applied[0] = j
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
        finally:
            done.set()

    def reader():
        try:
            while True:
                finished = done.is_set()
                with mem.store.lock.shared():  # the count and the context, at one moment
                    seen.append((applied[0], _surfaced(mem, strategy)))
                if finished:
                    return
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=writer)] + [threading.Thread(target=reader)
                                                    for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(SAFETY_S * 4)
    assert not errors, errors
    assert seen[-1][0] == len(writes)  # every reader's last look saw every write
    expected: dict[int, list] = {}
    for count, surfaced in seen:
        if count not in expected:
            serial = _fresh(clock)
            for write in writes[:count]:
                _apply(serial, write)
            expected[count] = _surfaced(serial, strategy)
        assert surfaced == expected[count]
