"""Query-time CPU cost of the ranker-feature stage (issue 17): the ``dense`` recipe replayed
on a shared trace with and without ``ranker_features``, alternated, by process CPU time.

    PYTHONPATH=. <venv with dense>/bin/python benchmarks/ranker_features_cost.py locomo [--rounds 2]
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from memlab.cli import _shared_trace
from memlab.harness.replay import replay
from memlab.surfacing.config import get_recipe


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", choices=["locomo", "musique"])
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args(argv)
    trace = _shared_trace(f"shared:{args.data}")
    dense = get_recipe("dense")
    dense = dense.replace(**{s: dataclasses.replace(getattr(dense, s), budget_ms=None)
                             for s in ("ppr", "spreading")})
    configs = {"dense": dense, "dense+rf": dense.replace(ranker_features=True)}
    replay(trace, configs["dense+rf"], k=20, record_candidates=False)  # warm caches, indexes
    cpu = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, config in configs.items():
            t = time.process_time()
            replay(trace, config, k=20, record_candidates=False)
            cpu[name].append(time.process_time() - t)
    base, new = sum(cpu["dense"]), sum(cpu["dense+rf"])
    print(f"{args.data}: CPU s per replay {[round(v, 1) for v in cpu['dense']]} without, "
          f"{[round(v, 1) for v in cpu['dense+rf']]} with ranker_features; ratio "
          f"{new / base:.2f}; load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
