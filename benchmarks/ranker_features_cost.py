"""Query-time CPU cost of the ranker-feature stage (issue 17): the ``dense`` recipe replayed
on a shared trace with and without ``ranker_features``, alternated (the configurations run in
one order in even rounds and in the reverse order in odd ones), by process CPU time.

    PYTHONPATH=. <venv with dense>/bin/python benchmarks/ranker_features_cost.py locomo [--rounds 2]
        [--second-hop prf true ...]

``--second-hop VALUE ...`` measures ``second_hop_features=VALUE`` (a group, groups joined by
``+``, or ``true``; read as ``memlab tune --grid`` reads a value) instead of
``ranker_features``, each against ``dense`` in the same rounds.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

from memlab.cli import _Fail, _grid, _shared_trace
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
        if any("," in value for value in args.second_hop):
            ap.error(f"--second-hop takes one value per argument, got {args.second_hop}")
        try:  # the values as memlab tune --grid reads them (JSON true/false, else the text)
            values = _grid([f"second_hop_features={','.join(args.second_hop)}"])
            for text, option in zip(args.second_hop, values["second_hop_features"]):
                configs[f"dense+hop={text}"] = dense.replace(second_hop_features=option)
        except (_Fail, ValueError) as exc:
            ap.error(f"--second-hop: {exc}")
    for config in configs.values():  # warm caches, indexes
        replay(trace, config, k=20, record_candidates=False)
    cpu = {name: [] for name in configs}
    for r in range(args.rounds):
        # alternated: the reverse order in odd rounds, so no configuration always runs first
        for name in (list(configs) if r % 2 == 0 else list(configs)[::-1]):
            t = time.process_time()
            replay(trace, configs[name], k=20, record_candidates=False)
            cpu[name].append(time.process_time() - t)
    base = sum(cpu["dense"])
    print(f"{args.data}: CPU s per replay {[round(v, 1) for v in cpu['dense']]} for dense")
    for name in list(configs)[1:]:
        print(f"  {name}: {[round(v, 1) for v in cpu[name]]}; ratio {sum(cpu[name]) / base:.2f}")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
