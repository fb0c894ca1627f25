"""Issue 18, "every strategy is O(k + matches)": ``fast:recency`` and ``temporal:windowed`` at
100k and 1M items, on the store's kept time orders (``memlab.signals.time_index``) and, in the
same run and on the same store, through the O(n) scans they replaced (the code before issue 18,
as a recipe whose two strategies run it). Few rounds: the 1M memory takes the time.

    python -m pytest benchmarks/test_bench_strategies.py --benchmark-only \\
        --benchmark-group-by=param:strategy,param:n --benchmark-columns=median,rounds
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest

from benchmarks.conftest import memory
from memlab import DEFAULT, Memory
from memlab.surfacing.stages import recency_cue, window_boost
from memlab.surfacing.stages.base import CandidateTable, QueryRun, Stage
from memlab.surfacing.stages.retrieval import bm25_of
from memlab.surfacing.strategies import strategy_pipeline
from memlab.surfacing.timewindow import parse_time_window

SIZES = [100_000, 1_000_000]


@dataclass(frozen=True, repr=False)
class ScanRecent(Stage):
    """``Recent`` before issue 18: every eligible item's reference time, then a partition."""

    name: ClassVar[str] = "recent"
    phase: ClassVar[str] = "expand"

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        n = run.config.recent_candidates
        eligible = np.flatnonzero(run.ws.eligible_mask())
        if n == 0 or not len(eligible):
            return table
        ref = run.ws.recency_reference_ts(eligible)
        if len(eligible) > n:
            top = np.argpartition(-ref, n - 1)[:n]
            eligible, ref = eligible[top], ref[top]
        order = np.lexsort((eligible, -ref))
        return table.add(eligible[order], "recent", allowed=run.ws.eligible_mask())


@dataclass(frozen=True, repr=False)
class ScanWindow(Stage):
    """``Window`` before issue 18: every eligible item inside the window, BM25 looked up for
    each."""

    name: ClassVar[str] = "window"
    phase: ClassVar[str] = "expand"

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        window = parse_time_window(run.query, run.now)
        if window is None:
            return ScanRecent()(run, table)
        table = table.with_attrs(window=window)
        created, eligible = run.ws.created_column(), run.ws.eligible_mask()
        inside = np.flatnonzero(window.contains_ts(created) & eligible)
        if not len(inside):
            return table
        m = run.config.temporal_window_candidates
        bm25 = bm25_of(table, inside)
        matched, rest = inside[bm25 > 0], inside[bm25 == 0]
        order = np.lexsort((matched, -created[matched], -bm25[bm25 > 0]))[:m]
        picked = [matched[order]]
        if len(order) < m and len(rest):
            need = m - len(order)
            if len(rest) > need:
                rest = rest[np.argpartition(-created[rest], need - 1)[:need]]
            picked.append(rest[np.lexsort((rest, -created[rest]))])
        return table.add(np.concatenate(picked), "window", allowed=eligible)


SCAN = DEFAULT.replace(strategies=tuple(
    (name, strategy_pipeline("recency", (ScanRecent(),), (recency_cue(),)))
    if name == "fast:recency" else
    (name, strategy_pipeline("temporal", (ScanWindow(),), (window_boost(),)))
    if name == "temporal:windowed" else (name, impl)
    for name, impl in DEFAULT.strategies))


def _memory(n: int, path: str) -> Memory:
    mem = memory(n)
    if path == "kept order":
        return mem
    # the same store and workspace, read through the recipe that runs the O(n) scans
    return Memory(store=mem.store, workspace_id=mem.workspace_id, clock=mem.clock, config=SCAN,
                  surfacing_mode="router")


@pytest.mark.benchmark(group="strategy-scaling")
@pytest.mark.parametrize("path", ["kept order", "O(n) scan"])
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("strategy", ["fast:recency", "temporal:windowed"])
def test_strategy_at_scale(benchmark, strategy, n, path, query_cycle):
    mem = _memory(n, path)
    suffix = " in February 2024" if strategy == "temporal:windowed" else ""
    benchmark.extra_info.update(items=n, strategy=strategy, path=path)
    mem.get_working_context("s1", query_cycle() + suffix, k=20, strategy=strategy)  # warm
    context = benchmark.pedantic(
        lambda: mem.get_working_context("s1", query_cycle() + suffix, k=20, strategy=strategy),
        rounds=30 if n < 1_000_000 else 15, iterations=1, warmup_rounds=2)
    assert context["strategy_used"] == strategy
