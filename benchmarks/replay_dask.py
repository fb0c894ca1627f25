"""Serial vs sharded replay of the shared LoCoMo trace (issue 18, "beyond one machine").

    PYTHONPATH=. python benchmarks/replay_dask.py [DATA_ROOT] [WORKERS] [ROUNDS] [--cold]

``replay(trace, UNTIMED)`` (DEFAULT without wall-clock budgets) against ``replay(trace, UNTIMED,
executor="dask", address=...)`` on a LocalCluster of WORKERS single-threaded processes started
(and warmed up) beforehand, its start printed apart; ROUNDS rounds (default 3), the frames
checked equal. Within a round the order alternates (serial first in even rounds, sharded first
in odd ones), so neither side always runs right after the other.

Each round also times a **frozen serial** control: the serial replay with the driver's heap
frozen (``gc.collect(); gc.freeze()`` before it, ``gc.unfreeze()`` after), as the workers of a
LocalCluster memlab starts are frozen after their warm-up; without it the sharded side has an
advantage the serial side could have had too (fewer full garbage collections).

Two speedups are printed, as medians over rounds, against the plain and the frozen serial run:

- wall clock (what a user waits for; on a shared machine it mostly measures the others' load);
- the critical path in CPU seconds: serially the process's CPU time of the replay; sharded, the
  largest CPU time any worker process spent during the call (``time.process_time`` read on
  every worker before and after, Dask's own work in the worker included) plus the driver's.
  That is the wall time the call would take on an idle machine with a core per process.

The load average (1 min) is printed beside each round. Both sides are warmed the same way
before the first round (the workers when the cluster starts, the driver here: one tiny replay
each, ``_warm_worker``). Phases: the **first round (warmed cluster)** is each side's first
LoCoMo replay (the workers' first shard, the driver process's first serial replay); the
**later rounds (reused cluster)** are what a researcher sweeping parameters on one cluster gets
from the second replay on. Neither includes a cluster's start. ``--cold`` is a different
measure: one ``replay(executor="dask")`` that starts (and warms) its own cluster, timed whole,
its start included.
"""

from __future__ import annotations

import gc
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from memlab.datasets.loaders import load_locomo
from memlab.harness.replay import _warm_worker, dask_address, replay
from memlab.surfacing.config import DEFAULT

# no wall-clock budgets (PPR 200 ms, spreading 150 ms by default): on a loaded machine a budget
# cuts a search in one run and not in another, serial or sharded alike
UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


FIRST, LATER = "first round (warmed cluster)", "later rounds (reused cluster)"
serial = sharded = None  # the last round's results, checked equal


def _cpu() -> float:
    return time.process_time()


def timed(client, call):
    """(result, wall s, driver CPU s, {worker: CPU s}) of ``call()``."""
    before = client.run(_cpu)
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = client.run(_cpu)
    return out, wall, cpu, {w: after[w] - before[w] for w in before}


def comparable(result):
    keep = [c for c in result.decisions.columns if not c.endswith("_ms")]
    return result.decisions[keep], result.candidates, result.metrics, result.log


def main() -> None:
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = Path(args[0]) if args else Path("../shared/datasets")
    workers = int(args[1]) if len(args) > 1 else 2
    rounds = int(args[2]) if len(args) > 2 else 3
    trace = load_locomo(root / "locomo" / "locomo_dev.json")
    from distributed import Client

    started = time.perf_counter()
    with dask_address("dask", None, workers) as address, Client(address) as client:
        print(f"LocalCluster of {workers} (warmed up): {time.perf_counter() - started:.1f} s "
              f"to start, load {os.getloadavg()[0]:.1f}", flush=True)
        _warm_worker()  # the driver as the workers were: a tiny replay, untimed
        rows = []
        for r in range(rounds):
            load = os.getloadavg()[0]
            row = {"round": r, "phase": FIRST if r == 0 else LATER, "load_1min": round(load, 2),
                   "order": "serial first" if r % 2 == 0 else "sharded first"}

            def run_serial():
                global serial
                serial, s_wall, s_cpu, _ = timed(
                    client, lambda: replay(trace, UNTIMED, progress=False))
                row.update(serial_wall_s=round(s_wall, 2), serial_cpu_s=round(s_cpu, 2))
                gc.collect()
                gc.freeze()  # the control: the driver's heap frozen, as the workers' is
                try:
                    _, f_wall, f_cpu, _ = timed(
                        client, lambda: replay(trace, UNTIMED, progress=False))
                finally:
                    gc.unfreeze()
                row.update(frozen_serial_wall_s=round(f_wall, 2),
                           frozen_serial_cpu_s=round(f_cpu, 2))

            def run_sharded():
                global sharded
                sharded, d_wall, d_cpu, d_workers = timed(
                    client, lambda: replay(trace, UNTIMED, progress=False, executor="dask",
                                           address=address))
                row.update(dask_wall_s=round(d_wall, 2), dask_driver_cpu_s=round(d_cpu, 2),
                           dask_worker_cpu_s=sorted(round(v, 2) for v in d_workers.values()),
                           dask_critical_path_s=round(max(d_workers.values()) + d_cpu, 2))

            for run in ((run_serial, run_sharded) if r % 2 == 0 else (run_sharded, run_serial)):
                run()
            rows.append(row)
            print(json.dumps(row), flush=True)
        for got, want in zip(comparable(sharded), comparable(serial)):
            pd.testing.assert_frame_equal(got, want)
    cold = None
    if "--cold" in sys.argv:
        t = time.perf_counter()
        replay(trace, UNTIMED, progress=False, executor="dask", n_workers=workers)
        cold = round(time.perf_counter() - t, 2)

    def median(key, phase):
        return statistics.median(row[key] for row in rows if row["phase"] == phase)

    print(f"{len(trace.queries)} queries, {sharded.manifest['executor']}, frames equal")
    for phase in (FIRST, LATER):
        if not any(row["phase"] == phase for row in rows):
            continue
        n = sum(row["phase"] == phase for row in rows)
        d_wall, d_path = median("dask_wall_s", phase), median("dask_critical_path_s", phase)
        busiest = statistics.median(max(row["dask_worker_cpu_s"]) for row in rows
                                    if row["phase"] == phase)
        print(f"{phase} ({n} round{'s' * (n > 1)}, medians): dask wall {d_wall:.2f} s, "
              f"critical path (CPU) {d_path:.2f} s (busiest worker {busiest:.2f} s + driver "
              f"{median('dask_driver_cpu_s', phase):.2f} s)")
        for side, prefix in (("serial", "serial"), ("frozen serial", "frozen_serial")):
            s_wall, s_cpu = median(f"{prefix}_wall_s", phase), median(f"{prefix}_cpu_s", phase)
            print(f"  against {side}: wall {s_wall:.2f} s, speedup {s_wall / d_wall:.2f}x; "
                  f"CPU {s_cpu:.2f} s, speedup {s_cpu / d_path:.2f}x")
    if cold is not None:
        print(f"--cold (not a phase above): replay(executor='dask') starting its own cluster, "
              f"its start included: {cold:.2f} s wall")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
