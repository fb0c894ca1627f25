"""Turn pytest-benchmark JSON into the README's performance table.

Usage: ``python benchmarks/report.py benchmarks/results.json``
"""

from __future__ import annotations

import json
import sys


def main(path: str) -> str:
    data = json.load(open(path))
    rows = {b["name"]: b for b in data["benchmarks"]}
    out = [f"Machine: {data['machine_info'].get('cpu', {}).get('brand_raw', '?')}, "
           f"Python {data['machine_info']['python_version']}; medians.", "",
           "| benchmark | items | median | ops/s |", "|---|---:|---:|---:|"]
    for name, b in rows.items():
        median = b["stats"]["median"]
        unit = f"{median * 1e3:.3f} ms" if median < 1 else f"{median:.2f} s"
        out.append(f"| {name.removeprefix('test_')} | {b['extra_info'].get('items', '')} | {unit} "
                   f"| {1 / median:,.0f} |")
    out.append("")
    for n in (10_000, 100_000):
        mem = rows.get(f"test_bm25_query_memlab[{n}]")
        ref = rows.get(f"test_bm25_query_rank_bm25[{n}]")
        if mem and ref:
            out.append(f"- BM25 query at {n:,} items: memlab is "
                       f"{ref['stats']['median'] / mem['stats']['median']:,.0f}x faster than rank-bm25")
    add = rows.get("test_add_one_item_memlab[100000]")
    rebuild = rows.get("test_add_one_item_rank_bm25_rebuild")
    if add and rebuild:
        out.append(f"- Adding one item: memlab {add['stats']['mean'] * 1e3:.3f} ms (mean, into 100k); "
                   f"rank-bm25 must rebuild: {rebuild['stats']['median'] * 1e3:,.0f} ms at 10k docs")
    bulk = rows.get("test_add_many_50k_short_items")
    if bulk:
        out.append(f"- add_many: {50_000 / bulk['stats']['median']:,.0f} items/s")
    out += graph_lines(rows)
    out += replay_lines(rows)
    return "\n".join(out)


def replay_lines(rows: dict) -> list[str]:
    """Replay throughput and the cost of recording every candidate (issue 5)."""
    out = []
    for strategy in ("fast:recency", "deep:multi-hop"):
        with_c = rows.get(f"test_replay_throughput[{strategy}-candidates]")
        without = rows.get(f"test_replay_throughput[{strategy}-no-candidates]")
        if not (with_c and without):
            continue
        info = with_c["extra_info"]
        end_to_end = info["queries"] / with_c["stats"]["median"]
        in_queries = info["queries"] / (info["query_ms_total"] / 1e3)
        overhead = with_c["stats"]["median"] / without["stats"]["median"] - 1.0
        out.append(f"- replay, {strategy}, {info['items']:,} items + {info['queries']:,} queries: "
                   f"{with_c['stats']['median']:.2f} s end to end ({end_to_end:,.0f} queries/s "
                   f"including ingest, {in_queries:,.0f} queries/s in get_working_context); "
                   f"recording every candidate ({info['candidate_rows']:,} rows) costs "
                   f"{overhead:+.1%} (target <= 20%)")
    return out


def _median(rows: dict, name: str) -> float | None:
    row = rows.get(name)
    return row["stats"]["median"] if row else None


def graph_lines(rows: dict) -> list[str]:
    """The graph section's ratios and targets (issue 3)."""
    out = []
    exact, nx_full = _median(rows, "test_ppr_exact_networkx_rule"), \
        _median(rows, "test_ppr_networkx_pagerank")
    nx_only, matvec = _median(rows, "test_ppr_networkx_pagerank_only"), \
        _median(rows, "test_ppr_matvec")
    if exact and nx_full:
        out.append(f"- PPR at 100k, networkx's stopping rule: exact {exact * 1e3:.1f} ms vs "
                   f"networkx.pagerank with its per-call graph build {nx_full * 1e3:,.0f} ms: "
                   f"**{nx_full / exact:,.0f}x** (target >= 20x)"
                   + (f"; vs nx.pagerank alone on a prebuilt graph {nx_only / exact:,.0f}x"
                      if nx_only else ""))
    for name in ("test_ppr_exact_networkx_rule", "test_ppr_exact_tight"):
        row = rows.get(name)
        if row and matvec:
            iters = row["extra_info"]["iterations"]
            floor = iters * matvec
            out.append(f"- {name.removeprefix('test_')}: {iters} iterations; matvec floor "
                       f"{floor * 1e3:.1f} ms ({iters} x {matvec * 1e3:.2f} ms); exact is "
                       f"{row['stats']['median'] / floor:.2f}x the floor (target <= 2x)")
    for n, label in ((100_000, "100k"), (1_000_000, "1M")):
        push = _median(rows, f"test_ppr_push[{n}]")
        spread = _median(rows, f"test_spread[{n}]")
        ctx = _median(rows, f"test_context_multi_hop[{n}]")
        build = _median(rows, f"test_build_memory_bulk[{n}]")
        rebuild = _median(rows, f"test_graph_view_rebuild[{n}]")
        parts = []
        if push:
            parts.append(f"push PPR {push * 1e3:.2f} ms")
        if spread:
            parts.append(f"spreading {spread * 1e3:.2f} ms")
        if ctx:
            parts.append(f"deep:multi-hop context {ctx * 1e3:.1f} ms")
        if build:
            parts.append(f"bulk build {build:.1f} s")
        if rebuild:
            parts.append(f"full view rebuild {rebuild:.2f} s")
        if parts:
            out.append(f"- {label} items: " + ", ".join(parts))
    mem = rows.get("test_graph_view_memory_1m")
    if mem:
        info = mem["extra_info"]
        out.append(f"- 1M-node view: retains {info['retained_bytes'] / 2**20:,.0f} MiB for "
                   f"{info['csr_array_bytes'] / 2**20:,.0f} MiB of CSR arrays "
                   f"({info['ratio']:.2f}x; target <= 2x); build peak "
                   f"{info['peak_bytes'] / 2**20:,.0f} MiB")
    return out


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results.json"))
