"""Per-query CPU time of ``get_working_context`` at 10k items, per strategy, across checkouts.

Issue 15 asks that surfacing as composed stages cost no more than 10% over the code before it
(commit ``aada65f``). On a shared machine, checkouts timed one after the other see different
loads, so the comparison is interleaved: one worker process per checkout builds its memories
once, then the workers time blocks of queries in turn (a shuffled order per block), and each
block gives every checkout's median over the first checkout's. The ratio reported is the median
of those block ratios::

    git worktree add /tmp/before aada65f
    git worktree add /tmp/main main
    python benchmarks/stage_overhead.py /tmp/before /tmp/main .          # 16 blocks of 40
    python benchmarks/stage_overhead.py /tmp/before . --blocks 30 --per 50 --items 10000

Prints the load average, then per checkout ``{strategy: (median ms of process CPU time, median
ratio to the first checkout)}``. With one checkout it prints ``{strategy: median ms}`` over 300
queries (the old single-checkout mode; ``stage_overhead.py CODE N`` still reads N as the item
count).
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import statistics
import subprocess
import sys
import time

STRATEGIES = ("fast:recency", "factual:point-query", "temporal:windowed", "deep:multi-hop",
              "legacy")


def _worker(code: str, n_items: int) -> None:
    """Build the memories of checkout ``code``, then time ``"strategy count"`` requests."""
    sys.path.insert(0, code)
    from benchmarks.conftest import memory, queries

    qs = queries()

    def call(strategy: str, q: str) -> None:
        mem = memory(n_items, "legacy" if strategy == "legacy" else "router")
        suffix = " in February 2024" if strategy == "temporal:windowed" else ""
        kwargs = {} if strategy == "legacy" else {"strategy": strategy}
        mem.get_working_context("s1", q + suffix, k=20, **kwargs)

    for strategy in STRATEGIES:
        for q in qs[:10]:  # warm caches (graph views, BM25 snapshot)
            call(strategy, q)
    cycles = {s: itertools.cycle(qs) for s in STRATEGIES}
    print("ready", flush=True)
    for line in sys.stdin:
        strategy, count = line.rsplit(" ", 1)
        out = []
        for _ in range(int(count)):
            q = next(cycles[strategy])
            start = time.process_time()
            call(strategy, q)
            out.append(time.process_time() - start)
        print(json.dumps(out), flush=True)


def interleaved(codes: list[str], blocks: int, per: int, n_items: int,
                strategies: tuple[str, ...] = STRATEGIES) -> dict[str, dict[str, tuple]]:
    """``{checkout: {strategy: (median ms, median block ratio to codes[0])}}``."""
    procs = {}
    for code in codes:
        procs[code] = subprocess.Popen(
            [sys.executable, __file__, "--worker", code, "--items", str(n_items)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
            env=dict(os.environ, PYTHONPATH=code))
    for code, proc in procs.items():
        if proc.stdout.readline().strip() != "ready":
            raise RuntimeError(f"the worker of {code} did not start")
    times = {c: {s: [] for s in strategies} for c in codes}
    ratios = {c: {s: [] for s in strategies} for c in codes}
    rng = random.Random(1)
    for _ in range(blocks):
        for strategy in strategies:
            order = list(codes)
            rng.shuffle(order)
            median = {}
            for code in order:
                procs[code].stdin.write(f"{strategy} {per}\n")
                procs[code].stdin.flush()
                block = json.loads(procs[code].stdout.readline())
                times[code][strategy] += block
                median[code] = statistics.median(block)
            for code in codes:
                ratios[code][strategy].append(median[code] / median[codes[0]])
    for proc in procs.values():
        proc.stdin.close()
        proc.wait()
    return {c: {s: (round(statistics.median(times[c][s]) * 1e3, 4),
                    round(statistics.median(ratios[c][s]), 3)) for s in strategies}
            for c in codes}


def single(code: str, n_items: int) -> dict[str, float]:
    """The single-checkout mode: ``{strategy: median ms over 300 queries}``."""
    sys.path.insert(0, code)
    from benchmarks.conftest import memory, queries

    qs = queries()
    out = {}
    for strategy in STRATEGIES:
        mem = memory(n_items, "legacy" if strategy == "legacy" else "router")
        suffix = " in February 2024" if strategy == "temporal:windowed" else ""
        kwargs = {} if strategy == "legacy" else {"strategy": strategy}
        for q in qs[:10]:
            mem.get_working_context("s1", q + suffix, k=20, **kwargs)
        times = []
        for q in itertools.islice(itertools.cycle(qs), 300):
            start = time.process_time()
            mem.get_working_context("s1", q + suffix, k=20, **kwargs)
            times.append(time.process_time() - start)
        out[strategy] = round(statistics.median(times) * 1e3, 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="*", default=["."])
    parser.add_argument("--blocks", type=int, default=16)
    parser.add_argument("--per", type=int, default=40)
    parser.add_argument("--items", type=int, default=10_000)
    parser.add_argument("--strategies", default=",".join(STRATEGIES))
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        _worker(args.worker, args.items)
        return
    if len(args.checkouts) > 1 and args.checkouts[-1].isdigit():  # the old form: CODE N
        args.items = int(args.checkouts.pop())
    codes = [os.path.abspath(c) for c in args.checkouts]
    if len(codes) == 1:
        print(single(codes[0], args.items))
        return
    strategies = tuple(args.strategies.split(","))
    unknown = sorted(set(strategies) - set(STRATEGIES))
    if unknown:
        parser.error(f"--strategies names {unknown}; choose from {list(STRATEGIES)}")
    result = interleaved(codes, args.blocks, args.per, args.items, strategies)
    print("load average:", " ".join(f"{x:.1f}" for x in os.getloadavg()))
    for code, row in result.items():
        print(code, row)


if __name__ == "__main__":
    main()
