"""Harness benchmarks (issue 5): replay throughput of a 10k-item, 1k-query synthetic trace under
``fast:recency`` and ``deep:multi-hop``, recording every candidate or none."""

from __future__ import annotations

import functools

import numpy as np
import pytest

from benchmarks.conftest import NOW, items, queries
from memlab.datasets.synthetic import power_law_edges
from memlab.harness import TraceBuilder, replay

N_ITEMS, N_QUERIES = 10_000, 1_000


@functools.lru_cache(maxsize=None)
def synthetic_trace(strategy: str):
    """10k items, ~5 power-law edges per item, then 1k three-word queries asking ``strategy``."""
    builder = TraceBuilder(f"synthetic-{strategy}", start=NOW)
    for i, item in enumerate(items(N_ITEMS)):
        builder.add(item["content"], item_id=f"i{i}", memory_type=item["memory_type"],
                    created_at=item["created_at"])
    src, dst = power_law_edges(N_ITEMS, 5, seed=11)
    for s, d in zip(src.tolist(), dst.tolist()):
        builder.edge(f"i{s}", f"i{d}")
    rng = np.random.default_rng(3)
    for q, text in enumerate(queries(N_QUERIES)):
        builder.query(f"q{q}", text, strategy=strategy, gold=[f"i{rng.integers(N_ITEMS)}"])
    return builder.build()


@pytest.mark.benchmark(group="replay")
@pytest.mark.parametrize("record", [True, False], ids=["candidates", "no-candidates"])
@pytest.mark.parametrize("strategy", ["fast:recency", "deep:multi-hop"])
def test_replay_throughput(benchmark, strategy, record):
    trace = synthetic_trace(strategy)
    result = benchmark.pedantic(replay, args=(trace,),
                                kwargs={"record_candidates": record, "progress": False},
                                rounds=5, iterations=1)
    benchmark.extra_info.update(items=N_ITEMS, queries=N_QUERIES, strategy=strategy,
                                record_candidates=record, candidate_rows=len(result.candidates),
                                query_ms_total=float(result.decisions["total_ms"].sum()))
    assert len(result.decisions) == N_QUERIES
