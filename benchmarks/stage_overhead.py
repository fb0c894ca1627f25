"""Per-query CPU time of ``get_working_context`` at 10k items, per strategy, for one checkout.

Issue 15 asks that surfacing as composed stages cost no more than 10% over the code before it.
Run it once per checkout, alternating, and compare the medians as ratios (the machine is shared,
so repeat the pair)::

    git worktree add /tmp/before aada65f
    for code in /tmp/before .; do PYTHONPATH=$code python benchmarks/stage_overhead.py $code; done

Prints ``{strategy: median ms of process CPU time over 300 queries}``.
"""

from __future__ import annotations

import itertools
import statistics
import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")

from benchmarks.conftest import memory, queries  # noqa: E402  (after the path is set)

N_ITEMS = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
STRATEGIES = ("fast:recency", "factual:point-query", "temporal:windowed", "deep:multi-hop",
              "legacy")


def main() -> None:
    qs = queries()
    out = {}
    for strategy in STRATEGIES:
        mem = memory(N_ITEMS, "legacy" if strategy == "legacy" else "router")
        suffix = " in February 2024" if strategy == "temporal:windowed" else ""
        kwargs = {} if strategy == "legacy" else {"strategy": strategy}
        for q in qs[:10]:  # warm caches (graph views, BM25 snapshot)
            mem.get_working_context("s1", q + suffix, k=20, **kwargs)
        times = []
        for q in itertools.islice(itertools.cycle(qs), 300):
            start = time.process_time()
            mem.get_working_context("s1", q + suffix, k=20, **kwargs)
            times.append(time.process_time() - start)
        out[strategy] = round(statistics.median(times) * 1e3, 4)
    print(out)


if __name__ == "__main__":
    main()
