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
    out += peer_lines(rows)
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


def _size(n: int) -> str:
    return f"{n // 1_000_000}M" if n >= 1_000_000 and n % 1_000_000 == 0 else \
        f"{n // 1000}k" if n >= 1000 and n % 1000 == 0 else f"{n:,}"


def _us(ms: float) -> str:
    return f"{ms * 1e3:,.1f} µs" if ms < 1 else f"{ms:,.1f} ms"


def peer_lines(rows: dict) -> list[str]:
    """The peer table (issue 18): memlab beside tantivy, bm25s and igraph, ratios measured in the
    same run (``benchmarks/test_bench_peers.py``: CPU-time medians, paired per query)."""
    peers = [row for row in rows.values()
             if row["extra_info"].get("goal") in ("bm25-top10", "bm25-batch", "bm25-index")]
    if not peers:
        return ppr_lines(rows)
    out = ["", "| operation | size | memlab, numba | memlab, numpy | peer | memlab ÷ peer "
           "(numba / numpy) | accuracy | load avg |", "|---|---:|---:|---:|---:|---:|---|---|"]
    order = {"bm25-top10": 0, "bm25-batch": 1, "bm25-index": 2}
    for row in sorted(peers, key=lambda r: (order.get(r["extra_info"]["goal"], 9),
                                            r["extra_info"].get("items", 0))):
        info = row["extra_info"]
        goal, med, ratio = info["goal"], info["median_ms"], info["ratio_vs_peer"]
        load = info.get("loadavg_before", "?").split()[0]
        if goal == "bm25-top10":
            acc = info["accuracy"]["top10_overlap_tantivy_vs_memlab"]
            out.append(f"| BM25 top-10, one query from text | {_size(info['items'])} docs | "
                       f"{_us(med['memlab-numba'])} | {_us(med['memlab-numpy'])} | tantivy "
                       f"{_us(med['tantivy'])} | **{ratio['memlab-numba']:.2f}** / "
                       f"{ratio['memlab-numpy']:.2f} (time; ≤ 1 is ahead) | top-10 overlap "
                       f"{acc:.2f} | {load} |")
        elif goal == "bm25-batch":
            qps, thr = info["queries_per_s"], info["throughput_ratio_vs_bm25s"]
            acc = info["accuracy"]["top10_overlap_bm25s_vs_memlab"]
            size = "MuSiQue 1,890 docs" if info["dataset"] == "musique" else \
                f"{_size(info['items'])} docs"
            out.append(f"| BM25 batch top-10 ({info['queries']:,} queries; "
                       f"`Memory.search_many` from text: {qps['Memory.search_many']:,.0f} q/s) | "
                       f"{size} | {qps['memlab-numba']:,.0f} q/s | {qps['memlab-numpy']:,.0f} q/s "
                       f"| bm25s numba {qps['bm25s']:,.0f} q/s | **{thr['memlab-numba']:.2f}** / "
                       f"{thr['memlab-numpy']:.2f} (throughput; ≥ 1 is ahead) | top-10 overlap "
                       f"{acc:.2f}; differences beyond score ties: "
                       f"{info['accuracy']['queries_differing_beyond_ties']} queries | {load} |")
        elif goal == "bm25-index":
            dps = info["docs_per_s"]
            out.append(f"| BM25 indexing (`add_many` + `freeze`) | {_size(info['items'])} docs | "
                       f"{dps['memlab add_many+freeze']:,.0f} docs/s | (same) | bm25s "
                       f"{dps['bm25s']:,.0f} docs/s; tantivy from text "
                       f"{dps['tantivy (from text)']:,.0f} docs/s | "
                       f"{1 / ratio['memlab add_many+freeze']:.2f} (throughput vs bm25s) | "
                       f"same postings | {load} |")
    return out + ppr_lines(rows)


def _l1(x: float | None) -> str:
    return "–" if x is None else f"L1 {x:.1e}"


def ppr_lines(rows: dict) -> list[str]:
    """The PPR table (issue 18): memlab's numba and numpy backends beside igraph's PRPACK and
    scikit-network, an accuracy column beside every time (CPU-time medians, paired per query)."""
    exact = [r for r in rows.values() if r["extra_info"].get("goal") == "ppr-exact"]
    push = [r for r in rows.values() if r["extra_info"].get("goal") == "ppr-push"]
    if not exact and not push:
        return []
    out = ["", "| PPR | graph | memlab, numba | accuracy | memlab, numpy | accuracy | "
           "igraph PRPACK | accuracy | scikit-network BiCGSTAB | accuracy | memlab ÷ PRPACK "
           "(numba / numpy) | load avg |", "|---|---|---:|---|---:|---|---:|---|---:|---|---:|---|"]
    for row in sorted(exact, key=lambda r: (r["extra_info"].get("shape") != "power-law",
                                            r["extra_info"]["items"])):
        info = row["extra_info"]
        med, ratio, acc = info["median_ms"], info["ratio_vs_peer"], info["accuracy"]
        its = info.get("iterations", {})
        shape = "" if info.get("shape", "power-law") == "power-law" else \
            ", 30% of edges also reversed (cyclic)"
        numba = f"{_us(med['memlab-numba'])} ({its.get('numba')} sweeps)" \
            if "memlab-numba" in med else "–"
        skn = med.get("scikit-network bicgstab")
        out.append(
            f"| exact, tol 1e-6 ({info['seed_sets']} seed sets of 5) | {_size(info['items'])} "
            f"nodes, {info['edges']:,} edges{shape} | {numba} | "
            f"{_l1(acc.get('l1_max_memlab-numba'))} | {_us(med['memlab-numpy'])} "
            f"({its.get('numpy')} iterations) | {_l1(acc.get('l1_max_memlab-numpy'))} | "
            f"{_us(med['igraph prpack'])} | {_l1(acc.get('l1_max_igraph prpack'))} | "
            f"{_us(skn) if skn is not None else '–'} | "
            f"{_l1(acc.get('l1_max_scikit-network bicgstab'))} | "
            f"**{ratio.get('memlab-numba', float('nan')):.2f}** / "
            f"{ratio['memlab-numpy']:.2f} | {info.get('loadavg_before', '?').split()[0]} |")
    for row in sorted(push, key=lambda r: r["extra_info"]["items"]):
        info = row["extra_info"]
        med, ratio, acc = info["median_ms"], info["ratio_vs_peer"], info["accuracy"]

        def cell(name):
            a = acc.get(name)
            if a is None:
                return "–"
            return (f"top-10 {a['top10_median']:g}/10 (min {a['top10_min']}), top-100 "
                    f"{a['top100_median']:g}/100 (min {a['top100_min']}), L1 {a['l1_median']:.2g}")
        fixed = next((k for k in med if k.startswith("memlab push eps 1e-4")), None)
        out.append(
            f"| `auto` → push, ε = auto_epsilon = {info['auto_epsilon']:.0e} "
            f"({info['seed_sets']} seed sets; medians) | {_size(info['items'])} nodes, "
            f"{info['edges']:,} edges | "
            f"{_us(med['memlab auto-numba']) if 'memlab auto-numba' in med else '–'} | "
            f"{cell('memlab auto-numba')} | {_us(med['memlab auto-numpy'])} | "
            f"{cell('memlab auto-numpy')} | (exact only, above) | | | | "
            f"numba ÷ numpy {ratio.get('memlab auto-numba', float('nan')):.2f} | "
            f"{info.get('loadavg_before', '?').split()[0]} |")
        if fixed:
            out.append(f"| push, fixed ε = 1e-4 (the old default), numba | {_size(info['items'])} "
                       f"nodes | {_us(med[fixed])} | {cell(fixed)} | | | | | | | | |")
    ones = [(r["extra_info"]["items"], r["extra_info"].get("shape"), r["extra_info"]["one_off_ms"])
            for r in exact if r["extra_info"].get("one_off_ms")]
    if ones:
        out.append("")
        out.append("- built once per graph version, not in the times above: " + "; ".join(
            f"{_size(n)}{'' if shape == 'power-law' else ' cyclic'}: transpose "
            f"{o['transpose_ms']:,.0f} ms" + (f", sweep order {o['sweep_order_ms']:,.0f} ms"
                                               if "sweep_order_ms" in o else "")
            for n, shape, o in sorted(ones, key=lambda t: (t[1] != "power-law", t[0]))))
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
            # with numba an iteration is a Gauss-Seidel sweep (issue 18): the answer's cost is
            # its iterations, its result building and the per-graph-version caches' lookups
            iters = row["extra_info"]["iterations"]
            out.append(f"- {name.removeprefix('test_')}: {iters} iterations, "
                       f"{row['stats']['median'] * 1e3:.1f} ms = "
                       f"{row['stats']['median'] / matvec:.1f} scipy CSR mat-vecs of "
                       f"{matvec * 1e3:.2f} ms")
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
