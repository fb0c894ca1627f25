"""Query-time CPU cost of the ranker-feature stage (issue 17): the ``dense`` recipe replayed
on a shared trace with and without ``ranker_features``, alternated, by process CPU time.

    PYTHONPATH=. <venv with dense>/bin/python benchmarks/ranker_features_cost.py locomo [--rounds 2]
        [--second-hop prf true ...]

``--second-hop VALUE ...`` measures ``second_hop_features=VALUE`` (a group, groups joined by
``+``, or ``true``) instead of ``ranker_features``, each against ``dense`` in the same rounds.
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
    ap.add_argument("--second-hop", nargs="+", default=None, metavar="VALUE")
    args = ap.parse_args(argv)
    trace = _shared_trace(f"shared:{args.data}")
    dense = get_recipe("dense")
    dense = dense.replace(**{s: dataclasses.replace(getattr(dense, s), budget_ms=None)
                             for s in ("ppr", "spreading")})
    configs = {"dense": dense, "dense+rf": dense.replace(ranker_features=True)}
    if args.second_hop:
        configs = {"dense": dense}
        for value in args.second_hop:
            option = {"true": True, "false": False}.get(value.lower(), value)
            configs[f"dense+hop={value}"] = dense.replace(second_hop_features=option)
    for config in configs.values():  # warm caches, indexes
        replay(trace, config, k=20, record_candidates=False)
    cpu = {name: [] for name in configs}
    for _ in range(args.rounds):
        for name, config in configs.items():
            t = time.process_time()
            replay(trace, config, k=20, record_candidates=False)
            cpu[name].append(time.process_time() - t)
    base = sum(cpu["dense"])
    print(f"{args.data}: CPU s per replay {[round(v, 1) for v in cpu['dense']]} for dense")
    for name in list(configs)[1:]:
        print(f"  {name}: {[round(v, 1) for v in cpu[name]]}; ratio {sum(cpu[name]) / base:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
