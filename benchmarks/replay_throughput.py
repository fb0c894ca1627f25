"""Replay throughput (issue 18): queries per second of process CPU time, ingest included, for
one checkout. Compare checkouts as ratios, alternating (the machine is shared)::

    git worktree add --detach /tmp/before <commit>
    python benchmarks/replay_throughput.py --save-trace /tmp/deep.jsonl   # once, one trace
    for code in /tmp/before . /tmp/before .; do
        PYTHONPATH=$code python benchmarks/replay_throughput.py $code 3 /tmp/deep.jsonl
    done

Traces: the benchmark trace of ``benchmarks/test_bench_harness.py`` (10k items, ~50k edges,
1k ``deep:multi-hop`` queries) and the mixed ``synthetic_trace(10_000, 500)`` (every add at its
own time, edges, 500 queries of every kind); or one saved trace (the third argument), replayed
by every checkout alike (a checkout's own generator may differ). Each trace is replayed once
first, uncounted (imports, compiled kernels), then ``ROUNDS`` times. Prints ``{trace: [q/s per
round], ...}`` and the median.
"""

from __future__ import annotations

import statistics
import sys
import time

if len(sys.argv) > 2 and sys.argv[1] == "--save-trace":
    sys.path.insert(0, ".")
    from benchmarks.test_bench_harness import synthetic_trace as bench_trace

    print(bench_trace("deep:multi-hop").write_jsonl(sys.argv[2]))
    raise SystemExit(0)

sys.path.insert(0, sys.argv[1] if len(sys.argv) > 1 else ".")

from memlab.harness import Trace, replay  # noqa: E402

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
SAVED = sys.argv[3] if len(sys.argv) > 3 else None


def main() -> None:
    if SAVED is not None:
        traces = {SAVED: Trace.read_jsonl(SAVED)}
    else:
        from benchmarks.test_bench_harness import synthetic_trace as bench_trace
        from memlab.datasets.synthetic import synthetic_trace

        traces = {"deep:multi-hop benchmark trace": bench_trace("deep:multi-hop"),
                  "mixed synthetic:10000:500": synthetic_trace(10_000, 500, seed=0)}
    out = {}
    for name, trace in traces.items():
        queries = len(trace.queries)
        replay(trace, progress=False)  # uncounted: imports, compiled kernels, caches of code
        rates = []
        for _ in range(ROUNDS):
            start = time.process_time()
            replay(trace, progress=False)
            rates.append(queries / (time.process_time() - start))
        out[name] = {"q/s": [round(r, 1) for r in rates],
                     "median q/s": round(statistics.median(rates), 1)}
    print(sys.argv[1] if len(sys.argv) > 1 else ".", out, flush=True)


if __name__ == "__main__":
    main()
