"""Hot paths under two code trees in one run (issue 18: the memory rework must not slow them).

Each tree runs in a fresh process, alternating A, B, A, B, … (``--rounds``), and times, in
process CPU time, the median of each operation over a seeded 100k-item memory (the
``benchmarks/conftest.py`` items) with ~5 power-law edges per item: ``get_working_context``
per strategy, ``Memory.search``, ``Memory.get``, ``Memory.add`` of one item, a 10-edge
``add_edges`` and ``add_many`` of 50k items. The ratio B / A per operation is the median of the
per-round ratios (so load that changes between rounds cancels out as far as it can). Run::

    PYTHONPATH=. python benchmarks/hot_paths_ab.py /path/to/main . --rounds 3
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

_SCRIPT = r"""
import json, sys, time
import numpy as np
from benchmarks.conftest import NOW, items, queries
from memlab import ManualClock, Memory
from memlab.datasets.synthetic import power_law_edges

n = int(sys.argv[1])
clock = ManualClock(NOW)
mem = Memory(surfacing_mode="router", clock=clock)
t = time.process_time()
ids = mem.add_many(items(n))
add_many_s = time.process_time() - t
src, dst = power_law_edges(n, 5, seed=11)
mem.store.add_edge_arrays(mem.workspace_id, src, dst, "RELATED", np.ones(len(src)))
qs = queries(64)
out = {"add_many_per_item_us": add_many_s / n * 1e6}

def timed(name, fn, reps):
    fn(0)  # warm
    times = []
    for r in range(reps):
        t = time.process_time_ns()
        fn(r)
        times.append(time.process_time_ns() - t)
    out[name] = float(np.median(times)) / 1e3

for strategy in ("fast:recency", "factual:point-query", "temporal:windowed", "deep:multi-hop"):
    timed(f"context {strategy}", lambda r, s=strategy: mem.get_working_context(
        "bench", qs[r % 64] + (" in February 2024" if s == "temporal:windowed" else ""),
        strategy=s), 200)
timed("search top 10", lambda r: mem.search(qs[r % 64], top_k=10), 300)
timed("get", lambda r: mem.get(ids[(r * 7919) % n]), 300)
timed("add one item", lambda r: mem.add(f"fresh note {r} about deploys"), 300)
timed("add_edges 10", lambda r: mem.add_edges([(ids[(r * 31 + j) % n], ids[(r * 17 + j + 1) % n])
                                               for j in range(10)]), 200)
print(json.dumps(out))
"""


def run(code: str, n: int) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(Path(code).resolve()),
                                         str(Path(__file__).resolve().parent.parent)])
    done = subprocess.run([sys.executable, "-P", "-c", _SCRIPT, str(n)], env=env,
                          capture_output=True, text=True, check=False)
    if done.returncode:
        raise RuntimeError(done.stderr[-3000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a")
    parser.add_argument("b")
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args(argv)
    if args.rounds < 1 or args.items < 100:
        raise ValueError(f"--rounds must be >= 1 and --items >= 100, got {args.rounds}, "
                         f"{args.items}")
    runs: dict[str, list[dict]] = {"a": [], "b": []}
    loads = []
    for _ in range(args.rounds):
        for side in ("a", "b"):
            loads.append(os.getloadavg()[0])
            runs[side].append(run(getattr(args, side), args.items))
    print(f"load average {min(loads):.1f}–{max(loads):.1f}")
    print("| operation | A (µs, median of rounds) | B | B / A (median of per-round ratios) |")
    print("|---|---:|---:|---:|")
    result = {}
    for name in runs["a"][0]:
        a = [r[name] for r in runs["a"]]
        b = [r[name] for r in runs["b"]]
        ratio = statistics.median(y / x for x, y in zip(a, b))
        result[name] = ratio
        print(f"| {name} | {statistics.median(a):.1f} | {statistics.median(b):.1f} | "
              f"{ratio:.2f} |")
    return result


if __name__ == "__main__":
    main()
