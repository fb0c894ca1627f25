"""Replay throughput (issue 18): queries per second of process CPU time, ingest included, for
one checkout. Compare two checkouts as ratios, alternating (the machine is shared)::

    git worktree add /tmp/before <commit>
    for code in /tmp/before .; do PYTHONPATH=$code python benchmarks/replay_throughput.py $code; done

Traces: the benchmark trace of ``benchmarks/test_bench_harness.py`` (10k items, ~50k edges,
1k ``deep:multi-hop`` queries) and the mixed ``synthetic_trace(10_000, 500)`` (every add at its
own time, edges, 500 queries of every kind). Prints ``{trace: [q/s per round], ...}`` and the
median, and the share of the replay spent hashing the trace for the manifest.
"""

from __future__ import annotations

import statistics
import sys
import time

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")

from benchmarks.test_bench_harness import synthetic_trace as bench_trace  # noqa: E402
from memlab.datasets.synthetic import synthetic_trace  # noqa: E402
from memlab.harness import replay  # noqa: E402

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3


def main() -> None:
    traces = {"deep:multi-hop benchmark trace": bench_trace("deep:multi-hop"),
              "mixed synthetic:10000:500": synthetic_trace(10_000, 500, seed=0)}
    out = {}
    for name, trace in traces.items():
        queries = len(trace.queries)
        rates = []
        for _ in range(ROUNDS):
            start = time.process_time()
            replay(trace, progress=False)
            rates.append(queries / (time.process_time() - start))
        out[name] = {"q/s": [round(r, 1) for r in rates],
                     "median q/s": round(statistics.median(rates), 1)}
    print(out)


if __name__ == "__main__":
    main()
