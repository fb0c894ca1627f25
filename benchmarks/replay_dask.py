"""Serial vs sharded replay of the shared LoCoMo trace (issue 18, "beyond one machine").

    PYTHONPATH=. python benchmarks/replay_dask.py [DATA_ROOT] [WORKERS] [ROUNDS]

Wall-clock seconds of ``replay(trace, UNTIMED)`` (DEFAULT without wall-clock budgets) and of
``replay(trace, UNTIMED, executor="dask",
address=...)`` on a LocalCluster of WORKERS single-threaded processes started beforehand (its
start-up is printed apart), alternating, ROUNDS rounds each (default 3); the frames are checked
equal.
"""

from __future__ import annotations

import statistics
from dataclasses import replace
import sys
import time
from pathlib import Path

import pandas as pd

from memlab.datasets.loaders import load_locomo
from memlab.harness.replay import dask_address, replay
from memlab.surfacing.config import DEFAULT

# no wall-clock budgets (PPR 200 ms, spreading 150 ms by default): on a loaded machine a budget
# cuts a search in one run and not in another, serial or sharded alike
UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else Path("../shared/datasets")
    workers = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    trace = load_locomo(root / "locomo" / "locomo_dev.json")
    started = time.perf_counter()
    with dask_address("dask", None, workers) as address:
        print(f"LocalCluster of {workers}: {time.perf_counter() - started:.1f} s to start")
        serial_s, dask_s = [], []
        for _ in range(rounds):
            t = time.perf_counter()
            serial = replay(trace, UNTIMED, progress=False)
            serial_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            sharded = replay(trace, UNTIMED, progress=False, executor="dask",
                             address=address)
            dask_s.append(time.perf_counter() - t)
        keep = [c for c in serial.decisions.columns if not c.endswith("_ms")]
        pd.testing.assert_frame_equal(serial.decisions[keep], sharded.decisions[keep])
        pd.testing.assert_frame_equal(serial.candidates, sharded.candidates)
    s, d = statistics.median(serial_s), statistics.median(dask_s)
    print(f"{len(trace.queries)} queries, {sharded.manifest['executor']}: serial {s:.1f} s, "
          f"dask {d:.1f} s, speedup {s / d:.2f}x (rounds: {serial_s}, {dask_s})")


if __name__ == "__main__":
    main()
