"""What the trigram spelling field costs per query as a store grows (issue 17 item 3).

    PYTHONPATH=. .venv/bin/python benchmarks/spelling_cost.py [n_items ...]

Replays a synthetic trace (``synthetic_trace(n, 200, seed=0)``) under ``DEFAULT`` and under
``DEFAULT.replace(spelling_weight=0.2)`` in one process and prints each recipe's median
per-query ``total_ms`` and the ratio. A trigram query matches nearly every item (common
trigrams are in most texts), so the field's scoring grows with the store where BM25's grows
with its terms' postings. Compare ratios from one run: absolute times depend on the load.
"""

from __future__ import annotations

import sys

import pandas as pd

from memlab.datasets.synthetic import synthetic_trace
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT


def main(argv: list[str]) -> pd.DataFrame:
    sizes = [int(a) for a in argv] or [2_000, 20_000]
    rows = []
    for n in sizes:
        trace = synthetic_trace(n, 200, seed=0)
        medians = {}
        for label, config in (("DEFAULT", DEFAULT),
                              ("spelling 0.2", DEFAULT.replace(spelling_weight=0.2))):
            result = replay(trace, config, k=20, measures=["R@10"], record_candidates=False,
                            progress=False)
            medians[label] = float(result.decisions["total_ms"].median())
        rows.append({"items": n, **{f"{k} median ms": round(v, 2) for k, v in medians.items()},
                     "ratio": round(medians["spelling 0.2"] / medians["DEFAULT"], 2)})
    table = pd.DataFrame(rows)
    print(table.to_string(index=False))
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
