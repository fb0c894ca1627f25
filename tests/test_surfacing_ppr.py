"""Issue 15 item 4: the one surfacing-level PPR wrapper (memlab.surfacing.ppr.surfacing_ppr).

Each policy (seeds, node cap, cache, saturation, time budget, convergence) is decided there and
noted; none of these tests reads a clock: the methods are registered fakes that report what a
budget would have done.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest

from memlab import Memory
from memlab.errors import PPRConvergenceError
from memlab.graph.ppr import PPR_METHODS, PPRCache, PPRConfig, register_ppr_method
from memlab.surfacing import ppr as surfacing_ppr_module
from memlab.surfacing.ppr import surfacing_ppr


def _chain() -> tuple[Memory, object]:
    mem = Memory()
    for i in "abcd":
        mem.add(f"item {i}", item_id=i)
    mem.add_edges([("a", "b"), ("b", "c"), ("c", "d")])
    return mem, mem.store.workspace("default")


@pytest.fixture
def fake_method():
    """A registered method that answers seed -> 1.0 and reports what the test tells it."""
    calls = []
    report = {"budget_exhausted": False, "iterations": 3}

    def method(snapshot, seeds, config, deadline):
        calls.append(deadline)
        if report.get("raise"):
            raise PPRConvergenceError(7, 0.5, 1e-6)
        return np.asarray(seeds), np.ones(len(seeds)) / len(seeds), dict(report)

    register_ppr_method("test-wrapper", method)
    yield calls, report
    PPR_METHODS.pop("test-wrapper")


def _run(mem, ws, seeds, config, cache=None):
    return surfacing_ppr(ws, np.asarray(seeds, dtype=np.int64), config,
                         lock=mem.store.lock.shared(), cache=cache)


def test_no_seeds_and_the_node_cap_skip_without_computing(fake_method):
    calls, _ = fake_method
    mem, ws = _chain()
    result, notes = _run(mem, ws, [], PPRConfig(method="test-wrapper"))
    assert result.scores == {} and notes["skipped"] == "no_seeds" and "cache" not in notes
    result, notes = _run(mem, ws, [0], PPRConfig(method="test-wrapper", max_nodes=3))
    assert result.scores == {} and notes["skipped"] == "node_cap"
    assert calls == []  # neither computed anything
    assert _run(mem, ws, [0], PPRConfig(method="test-wrapper", max_nodes=4))[1]["skipped"] is None


def test_the_cache_is_stored_then_hit_and_can_be_switched_off(fake_method):
    calls, _ = fake_method
    mem, ws = _chain()
    config = PPRConfig(method="test-wrapper", budget_ms=None)
    first, notes = _run(mem, ws, [1, 0], config)
    assert notes["cache"] == "stored" and not notes["cache_hit"]
    assert first.scores == {"a": 0.5, "b": 0.5}
    again, notes = _run(mem, ws, [0, 1], config)  # the same seeds in another order
    assert notes["cache"] == "hit" and notes["cache_hit"] and again.scores == first.scores
    assert len(calls) == 1
    assert _run(mem, ws, [0, 1], config, cache=False)[1]["cache"] == "off"
    off = PPRConfig(method="test-wrapper", budget_ms=None, use_cache=False)
    assert _run(mem, ws, [0, 1], off)[1]["cache"] == "off"
    assert len(calls) == 3
    mem.add_edge("d", "a")  # a write changes the graph's version: the old entry is not served
    assert _run(mem, ws, [0, 1], config)[1]["cache"] == "stored"
    own = PPRCache(4)
    assert _run(mem, ws, [0, 1], config, cache=own)[1]["cache"] == "stored"
    assert len(own) == 1


def test_an_answer_the_time_budget_cut_is_used_but_never_cached(fake_method):
    calls, report = fake_method
    mem, ws = _chain()
    report.update(budget_exhausted=True, iterations=2)
    config = PPRConfig(method="test-wrapper", budget_ms=50.0)
    result, notes = _run(mem, ws, [0], config)
    assert result.scores == {"a": 1.0} and notes["budget_exhausted"]
    assert notes["cache"] == "not_stored:time_budget"
    assert _run(mem, ws, [0], config)[1]["cache"] == "not_stored:time_budget"  # recomputed
    assert len(calls) == 2 and all(math.isfinite(d) for d in calls)
    # a cut by the rounds budget is the same everywhere: it is cached
    rounds = PPRConfig(method="test-wrapper", budget_ms=None, budget_rounds=2)
    assert _run(mem, ws, [0], rounds)[1]["cache"] == "stored"
    assert calls[-1] == math.inf  # no time budget: no deadline


def test_a_saturated_caller_returns_at_once_and_says_so(fake_method):
    calls, _ = fake_method
    mem, ws = _chain()
    slots = surfacing_ppr_module._SLOTS
    taken = [slots.acquire(blocking=False) for _ in range(2)]
    try:
        assert all(taken)
        result, notes = _run(mem, ws, [0], PPRConfig(method="test-wrapper", use_cache=False))
        assert notes["saturated"] is True and result.scores == {} and calls == []
    finally:
        for _ in taken:
            slots.release()
    result, notes = _run(mem, ws, [0], PPRConfig(method="test-wrapper", use_cache=False))
    assert notes["saturated"] is False and result.scores == {"a": 1.0}


def test_a_method_that_does_not_converge_gives_no_result_and_a_noted_error(fake_method):
    _, report = fake_method
    mem, ws = _chain()
    report["raise"] = True
    result, notes = _run(mem, ws, [0], PPRConfig(method="test-wrapper"))
    assert result is None and "did not converge in 7 iterations" in notes["error"]
    assert notes["requested"] == "test-wrapper" and notes["results"] == 0


def test_the_multi_hop_stage_records_the_wrappers_notes(fake_method):
    from memlab.surfacing.config import DEFAULT

    _, report = fake_method
    mem = Memory(surfacing_mode="router",
                 config=DEFAULT.replace(ppr=PPRConfig(method="test-wrapper", budget_ms=None)))
    for i in "abc":
        mem.add(f"alpha item {i}", item_id=i)
    mem.add_edges([("a", "b"), ("b", "c")])
    mem.get_working_context("s1", "alpha", strategy="deep:multi-hop")
    notes = mem.last_context_record.notes["ppr"]
    assert notes["method"] == "test-wrapper" and notes["cache"] == "stored"
    report["raise"] = True
    mem.add_edge("c", "a")  # a new graph version: no cached answer to serve
    mem.get_working_context("s1", "alpha", strategy="deep:multi-hop")
    record = mem.last_context_record
    assert "error" in record.notes["ppr"] and set(record.candidates["centrality"]) == {0.0}


@pytest.mark.parametrize("method, backend, warmed", [("exact", "auto", True),
                                                     ("push", "auto", True),
                                                     ("exact", "numpy", False)])
def test_compiled_kernels_are_warmed_before_the_time_budget_starts(monkeypatch, method, backend,
                                                                   warmed):
    """The first PPR of a process compiles the numba kernels: that must not count against the
    query's time budget (it once cut the first query of a replay to 0 iterations)."""
    import memlab.graph.ppr as graph_ppr
    events = []
    monkeypatch.setattr(graph_ppr, "warm_kernels", lambda: events.append("warm"))
    real_counter = surfacing_ppr_module.time.perf_counter

    class _Time:  # records when the budget's clock is first read
        @staticmethod
        def perf_counter():
            events.append("clock")
            return real_counter()

    monkeypatch.setattr(surfacing_ppr_module, "time", _Time)
    _, ws = _chain()
    surfacing_ppr(ws, np.array([0]), PPRConfig(method=method, backend=backend),
                  lock=contextlib.nullcontext())
    assert events[:2] == (["warm", "clock"] if warmed else ["clock", "clock"])
