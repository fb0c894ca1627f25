"""Reopening a large durable store: journal replay vs. snapshot + tail (issue 14, item 7).

Builds a store of ``--items`` items (8 words each from a 20,000-word vocabulary) and ``--edges``
edges (3 types) in one workspace, written in bulk batches through the journal; optionally
reopens it by replaying the journal; compacts it; then reopens it from the snapshot. Each reopen
runs in a fresh Python process, which reports its wall time and its peak RSS (``ru_maxrss``),
so one reopen's memory is not counted in the next.

Run::

    PYTHONPATH=. python benchmarks/reopen.py --items 100000 --edges 500000 --replay
    PYTHONPATH=. python benchmarks/reopen.py --items 1000000 --edges 5000000

Each reopen reports its wall time and CPU time, and the time its main thread spent runnable but
waiting for a core (``runqueue_wait_s``, from ``/proc/thread-self/schedstat``), per phase:
``read`` (SQLite reads of the snapshot parts and the rows after it, checksums), ``restore``
(decoding, checking and building the store from the parts, and the garbage collector's pass
after it), ``import`` and the rest (the tail's replay). On a loaded machine the wall time is
the CPU time plus that wait (issue 14's profile: the gap between the two was all run-queue
wait, no I/O), so the CPU time is what a change can cut.

To compare code trees on one database in one run (same load for both), reopen it under each in
turn (``--code``, each a folder put first on ``PYTHONPATH``; ``--db`` reuses a compacted
database instead of building one)::

    PYTHONPATH=. python benchmarks/reopen.py --db big.db --keep --items 1000000 \\
        --edges 5000000 --code /path/to/old/checkout --code . --rounds 3

(``--db old.db --db new.db`` with two ``--code``: each tree reopens its own database, e.g.
when the old one cannot read the new snapshot format; build both with the same ``--items``
and ``--edges``: the content is the same, seeded.)

The numbers depend on the machine and its load; compare reopens of one run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np

from memlab.store import MemoryStore

NOW = datetime(2024, 6, 1, tzinfo=timezone.utc)
TYPES = np.array(["RELATED", "MENTIONS", "CAUSES"])

_REOPEN = """
import json, resource, sys, time


def mark():
    try:  # this thread's time on a core and time runnable but waiting for one (ns)
        with open("/proc/thread-self/schedstat") as f:
            wait = int(f.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        wait = float("nan")
    return time.perf_counter(), time.process_time(), wait


phases = {}


def add(label, m0, m1):
    d = phases.setdefault(label, {"wall_s": 0.0, "cpu_s": 0.0, "runqueue_wait_s": 0.0})
    for key, a, b in zip(d, m0, m1):
        d[key] += b - a


def timed(cls, name, label):
    f = getattr(cls, name)

    def wrapper(*args, **kwargs):
        m0 = mark()
        try:
            return f(*args, **kwargs)
        finally:
            add(label, m0, mark())
    setattr(cls, name, wrapper)


start = mark()
from memlab.persist import Journal
from memlab.store import MemoryStore
imported = mark()
add("import", start, imported)
timed(Journal, "load", "read")
timed(MemoryStore, "load_snapshot", "restore")
store = MemoryStore(path=sys.argv[1], compact_after=None)
opened = mark()
known = {k: dict(v) for k, v in phases.items()}
add("tail and the rest", imported, opened)
for label in ("read", "restore"):
    for key in known.get(label, {}):
        phases["tail and the rest"][key] -= known[label][key]
ws = store.workspace("bench")
t = time.perf_counter()
hits = store.workspace("bench").bm25.scores(ws.analyze("term17 term4242"))[0]
first_query = time.perf_counter() - t
usage = resource.getrusage(resource.RUSAGE_SELF)
import memlab
print(json.dumps({"memlab": memlab.__file__,
                  "seconds": opened[0] - start[0], "open_s": opened[0] - imported[0],
                  "cpu_seconds": opened[1] - start[1],
                  "runqueue_wait_s": opened[2] - start[2], "phases": phases,
                  "items": len(ws), "edges": len(ws.graph.table),
                  "tail_rows": store.journal.tail_rows(), "first_bm25_query_s": first_query,
                  "hits": int(len(hits)),
                  "peak_rss_mb": usage.ru_maxrss / 1024}))
store.close()
"""


def build(path: Path, items: int, edges: int, seed: int = 0, batch: int = 50_000) -> float:
    """Write the store; returns seconds."""
    rng = np.random.default_rng(seed)
    vocab = [f"term{i}" for i in range(20_000)]
    start = time.perf_counter()
    store = MemoryStore(path=path, compact_after=None)
    for first in range(0, items, batch):
        words = rng.integers(0, len(vocab), size=(min(batch, items - first), 8)).tolist()
        store.add_items("bench", [store.prepare_item(" ".join(vocab[w] for w in row))
                                  for row in words], NOW)
    for first in range(0, edges, 1_000_000):
        n = min(1_000_000, edges - first)
        src = rng.integers(0, items, size=n)
        dst = (src + rng.integers(1, items, size=n)) % items
        store.add_edge_arrays("bench", src, dst, TYPES[rng.integers(0, 3, size=n)].tolist(),
                              rng.uniform(0.1, 2.0, size=n), NOW)
    store.close()
    return time.perf_counter() - start


def reopen(path: Path, code: str | None = None) -> dict:
    """Open the store in a fresh process (importing memlab from folder ``code`` when given):
    its wall, CPU and run-queue wait times, per phase, its peak RSS and what it holds."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(([str(code)] if code else []) + sys.path))
    # -P: the working folder is not put ahead of PYTHONPATH (``code`` must be the memlab used)
    out = subprocess.run([sys.executable, "-P", "-c", _REOPEN, str(Path(path).resolve())],
                         check=True, capture_output=True, text=True, env=env)
    return json.loads(out.stdout)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--edges", type=int, default=500_000)
    parser.add_argument("--replay", action="store_true", help="also time a reopen by replay")
    parser.add_argument("--dir", default=None, help="where to write the database (a temporary "
                        "folder by default, removed afterwards)")
    parser.add_argument("--db", action="append", default=None, help="a database this script "
                        "built and compacted before (with the same --items/--edges): reopen "
                        "it, build nothing; with --keep, build it there when it does not "
                        "exist. Given once per --code, each code tree reopens its own (e.g. "
                        "one compacted in a snapshot format the other does not read)")
    parser.add_argument("--keep", action="store_true", help="with --db: build the database "
                        "there if it does not exist, and keep it")
    parser.add_argument("--code", action="append", default=[], metavar="DIR",
                        help="reopen the snapshot under the memlab found in DIR (repeatable: "
                        "each in turn, --rounds times, on the same database)")
    parser.add_argument("--rounds", type=int, default=1, help="reopens per --code folder")
    args = parser.parse_args(argv)
    if args.items < 2 or args.edges < 0:
        parser.error("--items must be >= 2 and --edges >= 0")
    if args.rounds < 1:
        parser.error("--rounds must be >= 1")
    if args.db is not None:
        codes = args.code or [None]
        if len(args.db) not in (1, len(codes)):
            parser.error("give --db once, or once per --code")
        dbs = [Path(d) for d in args.db] * (len(codes) if len(args.db) == 1 else 1)
        for db in dbs:
            if not db.is_file():
                if not args.keep:
                    parser.error(f"--db {str(db)!r} does not exist (add --keep to build it)")
                build(db, args.items, args.edges)
                store = MemoryStore(path=db, compact_after=None)
                store.compact()
                store.close()
        report = {"items": args.items, "edges": args.edges, "db": [str(d) for d in dbs],
                  "snapshot_reopens": {}}
        for _ in range(args.rounds):
            for code, db in zip(codes, dbs):
                report["snapshot_reopens"].setdefault(code or "(PYTHONPATH)", []).append(
                    dict(reopen(db, code), db=str(db)))
        print(json.dumps(report, indent=2))
        return report
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        path = Path(tmp) / "reopen.db"
        report: dict = {"items": args.items, "edges": args.edges}
        report["build_s"] = build(path, args.items, args.edges)
        report["journal_file_mb"] = path.stat().st_size / 2 ** 20
        if args.replay:
            report["replay_reopen"] = reopen(path)
        store = MemoryStore(path=path, compact_after=None)
        start = time.perf_counter()
        compaction = store.compact()
        report["compact_s"] = time.perf_counter() - start
        store.close()
        report["snapshot_mb"] = compaction.snapshot_bytes / 2 ** 20
        report["rows_removed"] = compaction.rows_removed
        report["file_mb_after_compaction"] = path.stat().st_size / 2 ** 20
        report["snapshot_reopen"] = reopen(path)
        if args.replay:
            report["reopen_speedup"] = (report["replay_reopen"]["seconds"]
                                        / report["snapshot_reopen"]["seconds"])
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
