"""Core benchmarks: get_working_context, BM25 query and add, bulk ingest; rank-bm25 alongside.

Run with ``make bench``; ``python benchmarks/report.py benchmarks/results.json`` prints the table.
"""

from __future__ import annotations

import itertools

import pytest
from rank_bm25 import BM25Okapi

from benchmarks.conftest import NOW, items, memory, queries, tokenized
from memlab import ManualClock, Memory
from memlab.signals.bm25 import BM25Index
from memlab.text import tokenize

SIZES = [10_000, 100_000]


@pytest.mark.benchmark(group="context")
@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("strategy", ["fast:recency", "factual:point-query", "temporal:windowed",
                                      "deep:multi-hop"])
def test_context_router(benchmark, n, strategy, query_cycle):
    mem = memory(n)
    # temporal queries name a window (the synthetic items span Jan-Mar 2024)
    suffix = " in February 2024" if strategy == "temporal:windowed" else ""
    benchmark.extra_info.update(items=n, strategy=strategy)
    benchmark(lambda: mem.get_working_context("s1", query_cycle() + suffix, k=20,
                                              strategy=strategy))


@pytest.mark.benchmark(group="context")
@pytest.mark.parametrize("n", SIZES)
def test_context_legacy(benchmark, n, query_cycle):
    mem = memory(n, "legacy")
    benchmark.extra_info.update(items=n, strategy="legacy")
    benchmark(lambda: mem.get_working_context("s1", query_cycle(), k=20))


@pytest.mark.benchmark(group="bm25-query")
@pytest.mark.parametrize("n", SIZES)
def test_bm25_query_memlab(benchmark, n):
    index = BM25Index(idf="okapi")
    index.add_many(tokenized(n))
    qs = itertools.cycle([tokenize(q) for q in queries()])
    benchmark.extra_info.update(items=n, impl="memlab")
    benchmark(lambda: index.scores(next(qs)))


@pytest.mark.benchmark(group="bm25-query")
@pytest.mark.parametrize("n", SIZES)
def test_bm25_query_rank_bm25(benchmark, n):
    ref = BM25Okapi(tokenized(n), k1=1.2, b=0.75)
    qs = itertools.cycle([tokenize(q) for q in queries()])
    benchmark.extra_info.update(items=n, impl="rank-bm25")
    benchmark.pedantic(lambda: ref.get_scores(next(qs)), rounds=10 if n > 10_000 else 30,
                       iterations=1)


@pytest.mark.benchmark(group="add")
@pytest.mark.parametrize("n", SIZES)
def test_add_one_item_memlab(benchmark, n):
    """Memory.add into a memory already holding n items (amortised over many calls)."""
    mem = Memory(surfacing_mode="router", clock=ManualClock(NOW))
    mem.add_many(items(n))
    texts = itertools.cycle(item["content"] for item in items(10_000))
    benchmark.extra_info.update(items=n, impl="memlab Memory.add")
    benchmark.pedantic(lambda: mem.add(next(texts)), rounds=2000, iterations=1)


@pytest.mark.benchmark(group="add")
def test_add_one_item_rank_bm25_rebuild(benchmark):
    """rank-bm25 cannot add to an index: adding one document means rebuilding it (10k docs)."""
    corpus = tokenized(10_000)
    benchmark.extra_info.update(items=10_000, impl="rank-bm25 rebuild")
    benchmark.pedantic(lambda: BM25Okapi(corpus), rounds=5, iterations=1)


@pytest.mark.benchmark(group="add_many")
def test_add_many_50k_short_items(benchmark):
    batch = [item["content"] for item in items(50_000)]

    def run():
        mem = Memory(clock=ManualClock(NOW))
        mem.add_many(batch)
        return mem

    benchmark.extra_info.update(items=50_000, impl="memlab Memory.add_many")
    mem = benchmark.pedantic(run, rounds=3, iterations=1)
    assert len(mem) == 50_000
