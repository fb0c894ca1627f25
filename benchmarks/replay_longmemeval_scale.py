"""Serial vs sharded replay of a LongMemEval-shaped synthetic trace (issue 18).

    PYTHONPATH=. python benchmarks/replay_longmemeval_scale.py [QUESTIONS] [SESSIONS] [WORKERS]

``synthetic_longmemeval(QUESTIONS, SESSIONS)`` (default 500 x 50; LongMemEval_M is 500 x ~500):
one workspace per question, sessions of 2-6 turns as items at their session's date, turn
adjacency edges, one gold-labelled question per workspace. Replayed (DEFAULT without wall-clock
budgets) once serially and once
sharded by workspace on a warm LocalCluster of WORKERS (default 2) processes (started and
warmed up beforehand, not counted), the frames checked equal. The serial side is warmed up the
same way (one untimed small replay in the driver first), so neither timing carries the cold
start (imports, compiled kernels). Prints, for each, queries/s and
items ingested/s over wall time and over the CPU critical path (serially the process's CPU
time; sharded, the busiest worker's CPU time plus the driver's), and the load average.
"""

from __future__ import annotations

import json
import os
import sys
import time

from dataclasses import replace

import pandas as pd

from memlab.datasets.synthetic import synthetic_longmemeval
from memlab.harness.replay import dask_address, replay
from memlab.surfacing.config import DEFAULT

# no wall-clock budgets (PPR 200 ms, spreading 150 ms by default): on a loaded machine a budget
# cuts a search in one run and not in the other (a 500 x 50 run under DEFAULT differed in 0.4%
# of tokens_used), and the frames are compared
UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


def _cpu() -> float:
    return time.process_time()


def main() -> None:
    questions = int(sys.argv[1]) if len(sys.argv) > 1 else 500
    sessions = int(sys.argv[2]) if len(sys.argv) > 2 else 50
    workers = int(sys.argv[3]) if len(sys.argv) > 3 else 2
    t = time.process_time()
    trace = synthetic_longmemeval(questions, sessions, seed=0)
    items = sum(e.type == "add" for e in trace)
    edges = sum(e.type == "add_edge" for e in trace)
    print(f"trace {trace.name}: {len(trace):,} events, {items:,} items, {edges:,} edges, "
          f"{len(trace.queries)} queries; built in {time.process_time() - t:.1f} s CPU",
          flush=True)
    from distributed import Client
    with dask_address("dask", None, workers) as address, Client(address) as client:
        out = {"questions": questions, "sessions": sessions, "items": items, "edges": edges,
               "workers": workers}
        # the driver's cold start (imports, compiled kernels) is paid here, untimed, as the
        # workers paid theirs when the cluster was warmed up: neither side's timing carries it
        replay(synthetic_longmemeval(2, 2, seed=1), UNTIMED, progress=False)
        trace.hash()  # memoized: whichever side ran first would pay it for both
        load = os.getloadavg()[0]
        wall, cpu = time.perf_counter(), time.process_time()
        serial = replay(trace, UNTIMED, progress=False)
        out["serial"] = {"wall_s": time.perf_counter() - wall,
                         "cpu_s": time.process_time() - cpu, "load_1min": load}
        print(json.dumps(out["serial"]), flush=True)
        load = os.getloadavg()[0]
        before = client.run(_cpu)
        wall, cpu = time.perf_counter(), time.process_time()
        sharded = replay(trace, UNTIMED, progress=False, executor="dask",
                         address=address)
        wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
        after = client.run(_cpu)
        busiest = max(after[w] - before[w] for w in before)
        out["dask"] = {"wall_s": wall, "driver_cpu_s": cpu, "busiest_worker_cpu_s": busiest,
                       "cpu_s": busiest + cpu, "load_1min": load,
                       "executor": sharded.manifest["executor"]}
        print(json.dumps(out["dask"]), flush=True)
    keep = [c for c in serial.decisions.columns if not c.endswith("_ms")]
    pd.testing.assert_frame_equal(serial.decisions[keep], sharded.decisions[keep])
    pd.testing.assert_frame_equal(serial.candidates, sharded.candidates)
    for name in ("serial", "dask"):
        row = out[name]
        for clock in ("wall", "cpu"):
            row[f"queries_per_s_{clock}"] = questions / row[f"{clock}_s"]
            row[f"items_per_s_{clock}"] = items / row[f"{clock}_s"]
    out["speedup_wall"] = out["serial"]["wall_s"] / out["dask"]["wall_s"]
    out["speedup_cpu_critical_path"] = out["serial"]["cpu_s"] / out["dask"]["cpu_s"]
    out["R@10"] = float(serial.summary().get("R@10", float("nan")))
    out["load_end"] = os.getloadavg()
    print(json.dumps(out, indent=1, default=str))


if __name__ == "__main__":
    main()
