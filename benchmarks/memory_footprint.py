"""Memory footprint of items and edges (issue 18, goal "Memory"), each variant in a fresh process.

Builds ``--items`` seeded items (8–14 words each over the Zipf vocabulary of
:func:`memlab.datasets.synthetic_items`, 90 days of creation times, 10% procedural) through
``Memory.add_many`` in chunks of 50,000, then ``--edges-per-item`` power-law edges per item
(:func:`memlab.datasets.synthetic.power_law_edges`; 80% ``RELATED``, 20% ``MENTIONS``, weights
uniform in [0.1, 2)) through the store's bulk edge write, then answers one ``deep:multi-hop``
query (which builds the CSR view). The same edges are built as an igraph weighted graph
(``Graph(n, edges, directed=True)`` plus ``es["weight"]``) in a process of its own.

Each variant reports, from ``/proc/self/status``, the resident set (``VmRSS``) after each step
and the peak (``VmHWM``), and per item / per edge:

- **per item beyond its text**: (RSS after the items − RSS before them) / items − the mean
  UTF-8 bytes of a content string (the string's object header counts as overhead);
- **per edge**: (RSS after the edges − RSS before them) / edges: the edge table and its upsert
  index (memlab), the graph with its weight attribute (igraph); and with the CSR view built by
  the first query (memlab);
- the same with ``tracemalloc`` (a second fresh process per variant, ``--tracemalloc``): the
  bytes Python and numpy hold (current) and the peak while building.

The edge arrays are generated before the baseline in both variants, so neither counts them.
Run::

    PYTHONPATH=. python benchmarks/memory_footprint.py --items 100000            # quick
    PYTHONPATH=. python benchmarks/memory_footprint.py --items 1000000 --tracemalloc
    PYTHONPATH=. python benchmarks/memory_footprint.py --items 100000 --code /path/to/main --code .

``--trim`` calls glibc's ``malloc_trim(0)`` before every reading (RSS then counts the pages
the process holds, not those its allocator keeps after frees). ``--code`` puts a folder first on ``PYTHONPATH`` of the memlab processes (to compare trees in
one run); ``--json`` prints the raw records. RSS depends on the allocator's state, not only on
what is held: compare variants of one run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

_PRELUDE = r"""
import gc, json, sys, time
import numpy as np

def status():
    out = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("VmRSS:", "VmHWM:")):
                key, value = line.split(":")
                out[key] = int(value.split()[0]) * 1024
    return out

N, PER, TRACE, TRIM = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1", sys.argv[4] == "1"
if TRIM:
    import ctypes
    _trim = ctypes.CDLL("libc.so.6").malloc_trim

def rss():
    gc.collect()
    if TRIM:  # hand the allocator's free pages back first: what is held, not what was freed
        _trim(0)
    return status()["VmRSS"]

if TRACE:
    import tracemalloc

def edges_of(n):
    from memlab.datasets.synthetic import power_law_edges
    src, dst = power_law_edges(n, PER, seed=11)
    rng = np.random.default_rng(3)
    related = rng.random(len(src)) < 0.8
    weight = rng.uniform(0.1, 2.0, size=len(src))
    return src, dst, related, weight
"""

_MEMLAB = r"""
from datetime import datetime, timezone
from memlab import ManualClock, Memory
from memlab.datasets import synthetic_items
import memlab
src, dst, related, weight = edges_of(N)
record = {"variant": "memlab", "code": memlab.__file__, "items": N, "edges_written": len(src),
          "trim": TRIM}
clock = ManualClock(datetime(2024, 4, 1, tzinfo=timezone.utc))
QUERY = "why does the deploy depend on the migration"
# warm-up in another store: imports, compiled kernels and caches are not the store's memory
warm = Memory(surfacing_mode="router", clock=clock)
warm_ids = warm.add_many(synthetic_items(200, seed=0, words=(8, 14)))
warm.add_edges([(warm_ids[i], warm_ids[i - 1]) for i in range(1, 200)])
warm.get_working_context("bench", QUERY, strategy="deep:multi-hop")
del warm, warm_ids
mem = Memory(surfacing_mode="router", clock=clock)
base = rss()
if TRACE:
    tracemalloc.start()
    t0 = tracemalloc.get_traced_memory()[0]
chunk, text_bytes, start = 50_000, 0, time.process_time()
for first in range(0, N, chunk):
    batch = synthetic_items(min(chunk, N - first), seed=first + 1, words=(8, 14))
    text_bytes += sum(len(b["content"].encode()) for b in batch)
    mem.add_many(batch)
    del batch
record["items_cpu_s"] = time.process_time() - start
record["text_bytes_per_item"] = text_bytes / N
after_items = rss()
if TRACE:
    t_items = tracemalloc.get_traced_memory()[0]
store, ws = mem.store, mem.store.workspace(mem.workspace_id)
start = time.process_time()
step = 1_000_000
for first in range(0, len(src), step):
    sl = slice(first, first + step)
    types = np.where(related[sl], "RELATED", "MENTIONS").tolist()
    store.add_edge_arrays(mem.workspace_id, src[sl], dst[sl], types, weight[sl])
    del types
record["edges_cpu_s"] = time.process_time() - start
record["edges"] = int(ws.graph.table.alive().sum())
after_edges = rss()
if TRACE:
    t_edges = tracemalloc.get_traced_memory()[0]
mem.get_working_context("bench", QUERY, strategy="deep:multi-hop")
after_query = rss()
if TRACE:
    t_query, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    record["traced"] = {"per_item": (t_items - t0) / N - record["text_bytes_per_item"],
                        "per_edge": (t_edges - t_items) / record["edges"],
                        "per_edge_with_view": (t_query - t_items) / record["edges"],
                        "total_mib": (t_query - t0) / 2**20, "peak_mib": (peak - t0) / 2**20}
record.update({"rss_base_mib": base / 2**20, "rss_items_mib": after_items / 2**20,
               "rss_edges_mib": after_edges / 2**20, "rss_query_mib": after_query / 2**20,
               "hwm_mib": status()["VmHWM"] / 2**20,
               "per_item": (after_items - base) / N - record["text_bytes_per_item"],
               "per_edge": (after_edges - after_items) / record["edges"],
               "per_edge_with_view": (after_query - after_items) / record["edges"]})
print(json.dumps(record))
"""

_IGRAPH = r"""
import igraph as ig
src, dst, related, weight = edges_of(N)
# igraph keeps parallel edges; memlab's upsert keeps one per (src, dst, type): give igraph the
# same distinct edges
key = (src * N + dst) * 2 + related
_, keep = np.unique(key, return_index=True)
keep.sort()
src, dst, weight = src[keep], dst[keep], weight[keep]
pairs = np.column_stack([src, dst])
base = rss()
if TRACE:
    tracemalloc.start()
    t0 = tracemalloc.get_traced_memory()[0]
g = ig.Graph(n=N, edges=pairs, directed=True)
g.es["weight"] = weight.tolist()  # igraph keeps an attribute as a list of Python floats
after = rss()
record = {"variant": "igraph", "version": ig.__version__, "items": N, "edges": g.ecount(),
          "trim": TRIM,
          "rss_base_mib": base / 2**20, "rss_edges_mib": after / 2**20,
          "hwm_mib": status()["VmHWM"] / 2**20, "per_edge": (after - base) / g.ecount()}
if TRACE:
    cur, peak = tracemalloc.get_traced_memory()
    record["traced"] = {"per_edge": (cur - t0) / g.ecount(), "peak_mib": (peak - t0) / 2**20}
print(json.dumps(record))
"""


def run(body: str, n: int, per: int, trace: bool, code: str | None, trim: bool = False) -> dict:
    """One variant in a fresh interpreter; returns its JSON record."""
    env = dict(os.environ)
    if code is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(Path(code).resolve()),
                                             env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    script = textwrap.dedent(_PRELUDE) + textwrap.dedent(body)
    done = subprocess.run([sys.executable, "-P", "-c", script, str(n), str(per),
                           "1" if trace else "0", "1" if trim else "0"],
                          env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"variant failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def measure(n: int, per: int = 5, codes: list[str | None] | None = None,
            trace: bool = False, igraph: bool = True, trim: bool = False) -> list[dict]:
    """Every variant's record (memlab under each code tree, then igraph), RSS then traced;
    ``trim``: glibc's ``malloc_trim(0)`` before every RSS reading."""
    records = []
    for code in codes or [None]:
        records.append(run(_MEMLAB, n, per, False, code, trim))
        if trace:
            records[-1]["traced"] = run(_MEMLAB, n, per, True, code)["traced"]
    if igraph:
        if importlib.util.find_spec("igraph") is None:
            print("igraph is not installed (the peers extra): its variant is skipped",
                  file=sys.stderr)
        else:
            records.append(run(_IGRAPH, n, per, False, None, trim))
            if trace:
                records[-1]["traced"] = run(_IGRAPH, n, per, True, None)["traced"]
    return records


def table(records: list[dict]) -> str:
    """A markdown table of the records (per item, per edge, totals and ratios to igraph)."""
    peer = next((r for r in records if r["variant"] == "igraph"), None)
    lines = [("| variant | items | edges | B/item beyond text | B/edge (table + index) | "
              "B/edge with CSR view | ÷ igraph per edge | RSS total | peak RSS | traced B/item, "
              "B/edge, peak |"), "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in records:
        traced = r.get("traced")
        if r["variant"] == "igraph":
            tr = f"–, {traced['per_edge']:.0f}, {traced['peak_mib']:.0f} MiB" if traced else ""
            lines.append(f"| igraph {r['version']} (weighted){' trimmed' if r['trim'] else ''} | {r['items']:,} | {r['edges']:,} | "
                         f"– | {r['per_edge']:.0f} | – | 1.00 | "
                         f"{r['rss_edges_mib']:,.0f} MiB | {r['hwm_mib']:,.0f} MiB | {tr} |")
            continue
        ratio = f"{r['per_edge'] / peer['per_edge']:.2f} / " \
                f"{r['per_edge_with_view'] / peer['per_edge']:.2f}" if peer else "–"
        tr = (f"{traced['per_item']:.0f}, {traced['per_edge']:.0f}, {traced['peak_mib']:,.0f} MiB"
              if traced else "")
        lines.append(f"| memlab `{Path(r['code']).parent.parent}`"
                     f"{' trimmed' if r['trim'] else ''} | {r['items']:,} | "
                     f"{r['edges']:,} | {r['per_item']:.0f} | {r['per_edge']:.0f} | "
                     f"{r['per_edge_with_view']:.0f} | {ratio} | {r['rss_query_mib']:,.0f} MiB | "
                     f"{r['hwm_mib']:,.0f} MiB | {tr} |")
    return "\n".join(lines)


def breakdown(n: int) -> dict[str, float]:
    """Bytes per item of each part of a workspace of ``n`` items (the same items as the
    variants, no edges), counted in this process: ``sys.getsizeof`` for Python objects, the
    capacity (``data.nbytes``) of every numpy column. What the per-item figure is made of."""
    from datetime import datetime, timezone

    from memlab import ManualClock, Memory
    from memlab.datasets import synthetic_items
    mem = Memory(clock=ManualClock(datetime(2024, 4, 1, tzinfo=timezone.utc)))
    for first in range(0, n, 50_000):
        mem.add_many(synthetic_items(min(50_000, n - first), seed=first + 1, words=(8, 14)))
    ws = mem.store.workspace(mem.workspace_id)
    cols = ws.items
    size = sys.getsizeof

    def arrays(*columns) -> int:
        return sum(c.data.nbytes for c in columns)

    text = sum(len(c.encode()) for c in cols.contents)
    bm = ws.bm25
    act = ws.activation
    parts = {
        "content str objects (header; text excluded)": sum(map(size, cols.contents)) - text,
        "content list": size(cols.contents),
        "item id str objects": sum(map(size, ws.item_ids)),
        "item id list": size(ws.item_ids),
        "index_of dict (id -> row)": size(ws.index_of),
        "item columns (times x3, salience, archived, type; capacity)": arrays(
            cols.created_ts, cols.updated_ts, cols.added_ts, cols.salience, cols.archived,
            cols.type_code),
        "workspace columns (eligible, tokens, procedural, longterm)": arrays(
            ws.eligible, ws.tokens, ws.procedural, ws.longterm),
        "activation columns": arrays(act.stored, act.decay_ref_ts, act.last_boost_ts),
        "BM25 postings (doc, tf; capacity) and doc lengths": arrays(
            *bm._post_docs, *bm._post_tfs, bm._doc_len),
        "BM25 per-term objects (Growables, lists, vocabulary)": sum(
            size(g) + size(g.data) - g.data.nbytes for g in bm._post_docs + bm._post_tfs)
        + size(bm._post_docs) + size(bm._post_tfs) + size(bm._vocab)
        + sum(map(size, bm._vocab)),
        "sparse item dicts (metadata, history, exact times)": sum(size(d) for d in (
            cols.metadata, cols.history, cols.created_exact, cols.updated_exact,
            cols.history_dropped)),
        "creation-time index": arrays(ws.created_order._rows, ws.created_order._ts),
    }
    out = {name: value / n for name, value in parts.items()}
    out["total"] = sum(parts.values()) / n
    out["text bytes"] = text / n
    return out


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--edges-per-item", type=int, default=5)
    parser.add_argument("--code", action="append", default=None,
                        help="a folder put first on PYTHONPATH of a memlab variant (repeatable)")
    parser.add_argument("--tracemalloc", action="store_true",
                        help="also run each variant under tracemalloc (a second process)")
    parser.add_argument("--no-igraph", action="store_true")
    parser.add_argument("--trim", action="store_true",
                        help="call glibc's malloc_trim(0) before each RSS reading (the pages "
                             "the process holds, without the allocator's freed ones)")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--breakdown", action="store_true",
                        help="print what the bytes per item are made of (in this process)")
    args = parser.parse_args(argv)
    if args.items < 2 or args.edges_per_item < 1:
        raise ValueError(f"--items must be >= 2 and --edges-per-item >= 1, got {args.items} and "
                         f"{args.edges_per_item}")
    if args.breakdown:
        for name, value in breakdown(args.items).items():
            print(f"| {name} | {value:,.1f} |")
        return []
    print(f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    records = measure(args.items, args.edges_per_item, args.code, args.tracemalloc,
                      not args.no_igraph, args.trim)
    print(json.dumps(records, indent=1) if args.json else table(records))
    print(f"load average {os.getloadavg()[0]:.2f}", file=sys.stderr)
    return records


if __name__ == "__main__":
    main()
