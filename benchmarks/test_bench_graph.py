"""Graph benchmarks (issue 3): PPR exact / push against networkx.pagerank, spreading,
``deep:multi-hop`` contexts, bulk build and the view's memory, at 100k and 1M items.

Every memory here is built through the public API: ``Memory.add_many`` for the items and
``Memory.add_edges`` with a DataFrame for ~5 power-law edges per item. Seeds rotate through 64
seeded sets so no benchmark times one query; the PPR cache is off wherever PPR itself is timed.
"""

from __future__ import annotations

import tracemalloc

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from benchmarks.conftest import NOW, Cycle, items
from memlab import ManualClock, Memory
from memlab.datasets.synthetic import power_law_edges
from memlab.graph import PPRConfig, SpreadConfig, spread_result
from memlab.surfacing.config import DEFAULT
from memlab.surfacing.ppr import ppr_result

SIZES = [100_000, 1_000_000]
EDGES_PER_ITEM = 5
_BUILT: dict[int, Memory] = {}


def edge_frame(ids: list[str], n: int) -> pd.DataFrame:
    src, dst = power_law_edges(n, EDGES_PER_ITEM, seed=11)
    labels = np.array(ids, dtype=object)
    types = np.where(np.random.default_rng(3).random(len(src)) < 0.8, "RELATED", "MENTIONS")
    return pd.DataFrame({"src": labels[src], "dst": labels[dst], "edge_type": types})


def build(n: int) -> Memory:
    mem = Memory(surfacing_mode="router", clock=ManualClock(NOW))
    ids = mem.add_many(items(n))
    mem.add_edges(edge_frame(ids, n))
    return mem


def graph_memory(n: int) -> Memory:
    if n not in _BUILT:
        _BUILT[n] = build(n)
    return _BUILT[n]


def seed_sets(mem: Memory, count: int = 64, size: int = 5) -> Cycle:
    rng = np.random.default_rng(5)
    ids = [item.item_id for item in mem._ws.items]
    return Cycle([[ids[i] for i in rng.choice(len(ids), size, replace=False)]
                  for _ in range(count)])


@pytest.mark.benchmark(group="graph-build")
@pytest.mark.parametrize("n", SIZES)
def test_build_memory_bulk(benchmark, n):
    """n items and ~5n edges through Memory.add_many + Memory.add_edges(DataFrame)."""
    items(n)  # generate the synthetic texts outside the timing
    mem = benchmark.pedantic(build, args=(n,), rounds=1, iterations=1)
    _BUILT[n] = mem
    benchmark.extra_info.update(items=n, edges=len(mem._ws.graph.table))
    assert len(mem) == n


@pytest.mark.benchmark(group="graph-build")
@pytest.mark.parametrize("n", SIZES)
def test_graph_view_rebuild(benchmark, n):
    """A full rebuild of the CSR view (directed + undirected) from the edge table."""
    mem = graph_memory(n)
    view = mem._ws.graph
    codes = view.table.codes_for(SpreadConfig().allowed(view.table.type_names))

    def rebuild():
        view._stale = True
        return view.snapshot(n, undirected=[codes])

    benchmark.extra_info.update(items=n, edges=len(view.table))
    benchmark.pedantic(rebuild, rounds=2, iterations=1)


@pytest.mark.benchmark(group="graph-memory")
def test_graph_view_memory_1m(benchmark):
    """Bytes the 1M-node view holds (tracemalloc sees numpy) against its CSR arrays' nbytes."""
    n = 1_000_000
    view = graph_memory(n)._ws.graph
    codes = view.table.codes_for(SpreadConfig().allowed(view.table.type_names))

    def measure():
        view._stale = True
        view._base = None  # release the old base so only the new one is counted
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        view.snapshot(n, undirected=[codes])
        retained, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        return retained - before, peak - before

    retained, peak = benchmark.pedantic(measure, rounds=1, iterations=1)
    sizes = view.nbytes()
    arrays = sizes["csr"] + sizes["undirected"]
    benchmark.extra_info.update(items=n, retained_bytes=retained, peak_bytes=peak,
                                csr_array_bytes=arrays, ratio=retained / arrays)


@pytest.mark.benchmark(group="ppr-100k")
def test_ppr_exact_networkx_rule(benchmark):
    """Exact PPR with networkx's stopping rule (L1 change < n * 1e-6), cache off."""
    mem = graph_memory(100_000)
    seeds = seed_sets(mem)
    probe = ppr_result(mem, seeds.values[0], method="exact", tol_scaled_by_n=True, cache=False)
    benchmark.extra_info.update(items=100_000, iterations=probe.iterations, method="exact")
    benchmark(lambda: ppr_result(mem, seeds(), method="exact", tol_scaled_by_n=True,
                                 cache=False))


@pytest.mark.benchmark(group="ppr-100k")
def test_ppr_networkx_pagerank(benchmark):
    """The seed's path: build an nx.DiGraph from the workspace per call, run nx.pagerank."""
    mem = graph_memory(100_000)
    seeds = seed_sets(mem)
    ours = ppr_result(mem, seeds.values[0], method="exact", tol_scaled_by_n=True, top_k=None,
                      cache=False).scores
    ref = ppr_result(mem, seeds.values[0], method="networkx", tol_scaled_by_n=True, top_k=None,
                     cache=False).scores
    l1 = sum(abs(ours.get(k, 0.0) - ref.get(k, 0.0)) for k in set(ours) | set(ref))
    benchmark.extra_info.update(items=100_000, method="networkx", l1_vs_exact=l1)
    benchmark.pedantic(lambda: ppr_result(mem, seeds(), method="networkx", tol_scaled_by_n=True,
                                          cache=False), rounds=3, iterations=1)


@pytest.mark.benchmark(group="ppr-100k")
def test_ppr_networkx_pagerank_only(benchmark):
    """nx.pagerank alone on a prebuilt DiGraph (conversion not charged), for reference."""
    mem = graph_memory(100_000)
    seeds = seed_sets(mem)
    coo = mem._ws.graph.snapshot(len(mem)).matrix().tocoo()
    graph = nx.DiGraph()
    graph.add_nodes_from(range(len(mem)))
    graph.add_weighted_edges_from(zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()))
    index_of = mem._ws.index_of
    benchmark.extra_info.update(items=100_000, method="nx.pagerank only")
    benchmark.pedantic(lambda: nx.pagerank(graph, personalization={index_of[s]: 1.0
                                                                   for s in seeds()}),
                       rounds=3, iterations=1)


@pytest.mark.benchmark(group="ppr-100k")
def test_ppr_exact_tight(benchmark):
    """Exact PPR with memlab's default rule (absolute L1 change < 1e-6)."""
    mem = graph_memory(100_000)
    seeds = seed_sets(mem)
    probe = ppr_result(mem, seeds.values[0], method="exact", cache=False, budget_ms=10_000)
    benchmark.extra_info.update(items=100_000, iterations=probe.iterations, method="exact")
    benchmark(lambda: ppr_result(mem, seeds(), method="exact", cache=False, budget_ms=10_000))


@pytest.mark.benchmark(group="ppr-100k")
def test_ppr_matvec(benchmark):
    """One CSR mat-vec of the 100k graph: times the iteration count, the floor of exact PPR."""
    mem = graph_memory(100_000)
    snap = mem._ws.graph.snapshot(len(mem))
    z = np.random.default_rng(0).random(snap.n)
    benchmark.extra_info.update(items=100_000, nnz=int(snap.base.out.nnz))
    benchmark(lambda: snap.base.out.T @ z)


@pytest.mark.benchmark(group="ppr-push")
@pytest.mark.parametrize("n", SIZES)
def test_ppr_push(benchmark, n):
    """Push with its default epsilon (``auto_epsilon`` of the graph's size), the default backend
    (numba with the fast extra), cache off."""
    mem = graph_memory(n)
    seeds = seed_sets(mem)
    probe = ppr_result(mem, seeds.values[0], method="push", cache=False)
    benchmark.extra_info.update(items=n, method="push", epsilon=probe.epsilon,
                                backend=probe.backend)
    benchmark(lambda: ppr_result(mem, seeds(), method="push", cache=False))


@pytest.mark.benchmark(group="spread")
@pytest.mark.parametrize("n", SIZES)
def test_spread(benchmark, n):
    mem = graph_memory(n)
    seeds = seed_sets(mem)
    spread_result(mem, seeds.values[0])  # builds the undirected view once
    benchmark.extra_info.update(items=n, results=len(spread_result(mem, seeds.values[1]).scores))
    benchmark(lambda: spread_result(mem, seeds()))


@pytest.mark.benchmark(group="context-graph")
@pytest.mark.parametrize("n", SIZES)
def test_context_multi_hop(benchmark, n, query_cycle):
    """get_working_context(strategy="deep:multi-hop") on a memory with ~5 edges per item.

    The PPR cache is off: the 64 queries cycle, and cached repeats would flatter the median.
    """
    built = graph_memory(n)
    mem = Memory(store=built.store, surfacing_mode="router", clock=built.clock,
                 config=DEFAULT.replace(ppr=PPRConfig(use_cache=False)))
    mem.get_working_context("s1", query_cycle(), k=20, strategy="deep:multi-hop")  # warm views
    notes = mem.last_context_record.notes
    benchmark.extra_info.update(items=n, ppr_method=notes["ppr"]["method"],
                                spread_results=notes["spreading"]["results"])
    benchmark(lambda: mem.get_working_context("s1", query_cycle(), k=20,
                                              strategy="deep:multi-hop"))
