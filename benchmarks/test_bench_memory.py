"""Memory footprint (issue 18, goal "Memory"): items and edges beside igraph, each built in a
fresh process (``benchmarks/memory_footprint.py``). One round, no timing: the numbers are in
``extra_info`` (bytes per item beyond its text, per edge, RSS totals, the ratio to igraph)."""

from __future__ import annotations

import pytest

from benchmarks.memory_footprint import measure


@pytest.mark.benchmark(group="memory-footprint")
@pytest.mark.parametrize("n", [100_000])
def test_memory_footprint(benchmark, n):
    records = benchmark.pedantic(lambda: measure(n, 5, trace=True), rounds=1, iterations=1)
    mine = records[0]
    info = {"items": n, "edges": mine["edges"], "bytes_per_item": mine["per_item"],
            "bytes_per_edge": mine["per_edge"], "rss_total_mib": mine["rss_query_mib"],
            "traced_bytes_per_item": mine["traced"]["per_item"],
            "traced_bytes_per_edge": mine["traced"]["per_edge"]}
    peer = next((r for r in records if r["variant"] == "igraph"), None)
    if peer is not None:
        info.update(igraph_bytes_per_edge=peer["per_edge"],
                    edge_ratio_to_igraph=mine["per_edge"] / peer["per_edge"])
    benchmark.extra_info.update(info)
