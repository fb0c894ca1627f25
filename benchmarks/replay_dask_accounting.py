"""Where a sharded replay's workers spend more than half the serial CPU (issue 18, round 6).

    PYTHONPATH=. python benchmarks/replay_dask_accounting.py [DATA_ROOT] [PAIRS]

Reproduces the accounting numbers of the README ("Sharded replay on Dask") on the shared LoCoMo
trace, DEFAULT without wall-clock budgets, two shards:

1. In this process, warm (CPU seconds, minimum of 3): the whole trace serially, and each shard
   replayed alone (``_replay_shard`` of its events, as a worker runs it): the shards' balance
   and whether sharding adds work per event.
2. On a LocalCluster of 2 memlab starts (warmed up, startup heap frozen), PAIRS alternating
   pairs (default 4): the two shards run one after the other (each on its own worker, the
   second submitted when the first is done) and run together; each worker's CPU during its
   shard (``time.process_time`` read on the workers). The busiest worker together against one
   after the other is the side-by-side tax.
"""

from __future__ import annotations

import pickle
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

from memlab.datasets.loaders import load_locomo
from memlab.harness.measures import DEFAULT_MEASURES
from memlab.harness.replay import (_replay_shard, _replay_shard_pickled, _shards, _split,
                                   _warm_worker, dask_address, replay)
from memlab.surfacing.config import DEFAULT

UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))
SETTINGS = (UNTIMED, "router", 20, 0, DEFAULT_MEASURES, True, None, "porter", "retrieved")
SHIPPED = SETTINGS[:4] + ([str(m) for m in DEFAULT_MEASURES],) + SETTINGS[5:]


def cpu_of(call) -> float:
    started = time.process_time()
    call()
    return time.process_time() - started


def _cpu() -> float:
    return time.process_time()


def main() -> None:
    args = sys.argv[1:]
    root = Path(args[0]) if args else Path("../shared/datasets")
    pairs = int(args[1]) if len(args) > 1 else 4
    trace = load_locomo(root / "locomo" / "locomo_dev.json")
    groups = _shards(trace, 2)
    shards = _split(trace, groups)
    _warm_worker()
    serial = min(cpu_of(lambda: replay(trace, UNTIMED, progress=False)) for _ in range(3))
    alone = [min(cpu_of(lambda: _replay_shard(s, SETTINGS)) for _ in range(3)) for s in shards]
    print(f"1. in one warm process (CPU, min of 3): whole trace {serial:.3f} s; shards "
          f"{' / '.join(f'{a:.3f}' for a in alone)} s (sum {sum(alone):.3f} s, "
          f"workspaces {[sorted(g) for g in groups]})", flush=True)

    from distributed import Client, wait
    data = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL) for s in shards]
    with dask_address("dask", None, 2) as address, Client(address) as client:
        workers = sorted(client.scheduler_info()["workers"])

        def run(which: list[int]) -> dict[str, float]:
            before = client.run(_cpu)
            futures = []
            for i in which:
                [d] = client.scatter([data[i]], workers=[workers[i]], direct=True, hash=False)
                futures.append(client.submit(_replay_shard_pickled, d, SHIPPED, pure=False,
                                             workers=[workers[i]]))
            wait(futures)
            after = client.run(_cpu)
            return {w: after[w] - before[w] for w in workers}

        apart, together = [], []
        for p in range(pairs):
            for mode in (("apart", "together") if p % 2 == 0 else ("together", "apart")):
                if mode == "apart":
                    first, second = run([0]), run([1])
                    apart.append(max(first[workers[0]], second[workers[1]]))
                else:
                    both = run([0, 1])
                    together.append(max(both.values()))
            print(f"pair {p}: busiest worker one after the other {apart[-1]:.3f} s, "
                  f"together {together[-1]:.3f} s", flush=True)
    a, t = statistics.median(apart), statistics.median(together)
    print(f"2. busiest worker (median of {pairs}): one after the other {a:.3f} s "
          f"(range {min(apart):.3f}-{max(apart):.3f}), together {t:.3f} s "
          f"(range {min(together):.3f}-{max(together):.3f}): side-by-side tax "
          f"{100 * (t / a - 1):.0f}% (pairs {min(x / y for x, y in zip(together, apart)) - 1:.0%}"
          f"-{max(x / y for x, y in zip(together, apart)) - 1:.0%})")


if __name__ == "__main__":
    main()
