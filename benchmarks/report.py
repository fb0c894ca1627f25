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
    return "\n".join(out)


if __name__ == "__main__":
    print(main(sys.argv[1] if len(sys.argv) > 1 else "benchmarks/results.json"))
