"""Where a slow search or get spends its time (issue 14, item 9): lock, write lock, fsync, GIL.

Runs the in-process mixes of :mod:`concurrent_reads` (8 threads on one durable store) with the
store's lock and journal instrumented, and splits every request's wall time into:

* ``shared``: waiting to take the store's lock shared (a writer holds it or waits);
* ``excl``: waiting to take it exclusively (a write, or a read that applies reinforcements);
* ``fsync``: inside :meth:`memlab.persist.Journal.append_many` (the SQLite commit and fsync),
  whoever's rows it writes;
* ``cpu``: the thread's own CPU time (``time.thread_time``), outside the three above;
* ``gil``: the rest: runnable but not running (waiting for the GIL, or for a core).

It prints, per request kind, p50 and p99 of the wall time, and the mean of each part over the
slowest 1 % of requests (what sets p99) and over all of them, plus how often the slowest 1 %
took the write side or ran a commit. Works on any tree (``--trees``), one process per tree and
round, trees alternating::

    python benchmarks/read_waits.py --trees /path/to/base /path/to/main . --rounds 2

A tree written ``PATH+turn=K`` sets the lock's ``reader_turn`` to K; ``PATH+switch=S`` runs the
worker with ``sys.setswitchinterval(S)`` (what ``memlab serve --switch-interval S`` does).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
from concurrent_reads import KINDS, MIXES, _content  # noqa: E402

PARTS = ("shared", "excl", "fsync", "cpu", "gil")


def _instrument():
    """Wrap the lock's blocking acquires and the journal's commit; return the per-thread
    accumulator (``.acc``: part -> seconds, ``.flags``: set of events)."""
    from memlab import _rwlock, persist

    local = threading.local()

    def acc() -> dict:
        if not hasattr(local, "acc"):
            local.acc, local.flags, local.cpu_out = {p: 0.0 for p in PARTS}, set(), 0.0
        return local.acc

    def timed(part: str, fn, flag: str | None = None):
        def wrapper(*args, **kwargs):
            a = acc()
            depth = getattr(local, "depth", 0)
            if depth:  # nested (a commit inside an exclusive acquire): counted by the outer
                return fn(*args, **kwargs)
            local.depth = 1
            t, c = time.perf_counter(), time.thread_time()
            try:
                return fn(*args, **kwargs)
            finally:
                local.depth = 0
                a[part] += time.perf_counter() - t
                local.cpu_out += time.thread_time() - c
                if flag:
                    local.flags.add(flag)
        return wrapper

    lock = _rwlock.RWLock
    lock.acquire_shared = timed("shared", lock.acquire_shared)
    lock.acquire = timed("excl", lock.acquire, "write-side")
    persist.Journal.append_many = timed("fsync", persist.Journal.append_many, "commit")
    return local


def worker(mix: str, clients: int, ops: int, items: int, seed: int, options: dict) -> dict:
    from memlab import Memory, MemoryStore

    rng = random.Random(seed)
    path = Path(tempfile.mkdtemp(prefix="memlab-waits-")) / "m.db"
    store = MemoryStore(path=str(path))
    Memory(store=store, surfacing_mode="router", config="default").add_many(
        [{"content": _content(rng, i), "item_id": f"i{i}"} for i in range(items)])
    store.close()
    local = _instrument()
    turn = options.pop("reader_turn", None)
    interval = options.pop("switch_interval", None)
    if interval is not None:  # PATH+switch=S: this worker process's GIL switch interval
        sys.setswitchinterval(interval)
    store = MemoryStore(path=str(path), compact_after=None, **options)
    if turn is not None:
        store.lock.reader_turn = turn
    mem = Memory(store=store, surfacing_mode="router", config="default")
    words = [f"w{i}" for i in range(400)]
    plan = MIXES[mix]
    start = threading.Barrier(clients)
    records: list[dict] = []

    def client(n: int) -> None:
        r = random.Random(seed * 1000 + n)
        start.wait()
        for i in range(ops):
            kind = plan[(i + n) % len(plan)]
            local.acc, local.flags, local.cpu_out = {p: 0.0 for p in PARTS}, set(), 0.0
            t, c = time.perf_counter(), time.thread_time()
            if kind == "search":
                mem.search(" ".join(r.choice(words) for _ in range(3)))
            elif kind == "get":
                mem.get(f"i{r.randrange(items)}")
            elif kind == "context":
                mem.get_working_context(f"s{n}", " ".join(r.choice(words) for _ in range(3)))
            else:
                mem.add(f"client {n} note {i} " + " ".join(r.choice(words) for _ in range(3)))
            wall, cpu = time.perf_counter() - t, time.thread_time() - c
            parts = dict(local.acc)
            parts["cpu"] = max(0.0, cpu - local.cpu_out)
            parts["gil"] = max(0.0, wall - sum(parts[p] for p in PARTS if p != "gil"))
            records.append({"kind": kind, "wall": wall, "parts": parts,
                            "flags": sorted(local.flags)})

    threads = [threading.Thread(target=client, args=(n,)) for n in range(clients)]
    wall, cpu = time.perf_counter(), time.process_time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    store.close()
    return {"records": records, "seconds": wall, "cpu_ms": cpu / len(records) * 1e3}


def summarise(records: list[dict]) -> dict:
    out = {}
    for kind in KINDS:
        rs = sorted((r for r in records if r["kind"] == kind), key=lambda r: r["wall"])
        if not rs:
            continue
        tail = rs[-max(1, len(rs) // 100):]
        out[kind] = {
            "n": len(rs), "p50": rs[len(rs) // 2]["wall"] * 1e3,
            "p99": rs[min(len(rs) - 1, int(len(rs) * 0.99))]["wall"] * 1e3,
            "tail": {p: statistics.mean(r["parts"][p] for r in tail) * 1e3 for p in PARTS},
            "all": {p: statistics.mean(r["parts"][p] for r in rs) * 1e3 for p in PARTS},
            "tail_write_side": sum("write-side" in r["flags"] for r in tail) / len(tail),
            "tail_commit": sum("commit" in r["flags"] for r in tail) / len(tail),
            "all_write_side": sum("write-side" in r["flags"] for r in rs) / len(rs),
            "all_commit": sum("commit" in r["flags"] for r in rs) / len(rs),
        }
    return out


def _tree_spec(tree: str) -> tuple[str, dict]:
    """``PATH``, ``PATH+group-commit``, ``PATH+turn=K`` or ``PATH+switch=S``: the source tree
    and the worker's options; ValueError naming the tree and the value it cannot read."""
    if tree.endswith("+group-commit"):
        return tree[: -len("+group-commit")], {"fsync_outside_lock": True}
    if "+turn=" in tree:  # PATH+turn=K: the lock's reader_turn set to K
        path, turn = tree.split("+turn=", 1)
        try:
            return path, {"reader_turn": int(turn)}
        except ValueError:
            raise ValueError(f"tree {tree!r}: +turn= needs an int, got {turn!r}") from None
    if "+switch=" in tree:  # PATH+switch=S: sys.setswitchinterval(S) first
        path, interval = tree.split("+switch=", 1)
        try:
            seconds = float(interval)
        except ValueError:
            seconds = float("nan")
        if not 1e-6 <= seconds <= 1:  # NaN too; Python keeps it in microseconds
            raise ValueError(f"tree {tree!r}: the switch interval must be a number of seconds "
                             f"in [1e-06, 1], got {interval!r}")
        return path, {"switch_interval": seconds}
    return tree, {}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=[str(Path(__file__).parents[1])])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--ops", type=int, default=300)
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--mixes", nargs="+", default=["reads", "load"], choices=sorted(MIXES))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--options", default="{}", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        result = worker(args.worker, args.clients, args.ops, args.items, 7,
                        json.loads(args.options))
        print(json.dumps({"kinds": summarise(result["records"]), "seconds": result["seconds"],
                          "cpu_ms": result["cpu_ms"]}))
        return
    for tree in args.trees:  # every spelling checked before the first run
        try:
            _tree_spec(tree)
        except ValueError as exc:
            parser.error(str(exc))
    if os.path.exists("/proc/loadavg"):
        print("load average:", Path("/proc/loadavg").read_text().split()[:3], flush=True)
    for rnd in range(args.rounds):
        for mix in args.mixes:
            trees = args.trees if rnd % 2 == 0 else list(reversed(args.trees))
            for tree in trees:
                path, options = _tree_spec(tree)
                env = dict(os.environ, PYTHONPATH=str(Path(path).resolve()))
                out = subprocess.run(
                    [sys.executable, __file__, "--worker", mix, "--clients", str(args.clients),
                     "--ops", str(args.ops), "--items", str(args.items),
                     "--options", json.dumps(options)],
                    env=env, capture_output=True, text=True, check=True,
                    cwd=tempfile.gettempdir())
                result = json.loads(out.stdout.strip().splitlines()[-1])
                print(f"\nround {rnd} {mix} {tree}: {result['seconds']:.2f} s, CPU "
                      f"{result['cpu_ms']:.2f} ms per request, load average "
                      + (Path("/proc/loadavg").read_text().split()[0]
                         if os.path.exists("/proc/loadavg") else "?"))
                for kind, s in result["kinds"].items():
                    tail = " ".join(f"{p} {s['tail'][p]:5.1f}" for p in PARTS)
                    every = " ".join(f"{p} {s['all'][p]:5.2f}" for p in PARTS)
                    print(f"  {kind:7s} p50 {s['p50']:6.2f} p99 {s['p99']:6.2f} | slowest 1%: "
                          f"{tail} | write side {s['tail_write_side']:.0%} commit "
                          f"{s['tail_commit']:.0%} || all: {every} | write side "
                          f"{s['all_write_side']:.0%} commit {s['all_commit']:.0%}", flush=True)


if __name__ == "__main__":
    main()
