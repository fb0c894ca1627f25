"""The query-embedding stage of ``get_working_context`` per embedder (issue 19, item 5).

Builds a memory of 500 synthetic items per embedder (a fresh cache directory, so every query
is a cache miss and is really encoded), runs 200 distinct queries and prints the median and
90th percentile of ``timings_ms["query_embedding"]`` and of ``total``, with the machine's load.

Run: ``PYTHONPATH=. python benchmarks/query_stage.py [embedder ...]``
"""

from __future__ import annotations

import os
import sys
import tempfile

import numpy as np

from benchmarks.conftest import NOW, items, queries
from memlab import ManualClock, Memory
from memlab.signals.dense import hybrid_recipe
from memlab.surfacing.config import DEFAULT


def main(names: list[str]) -> None:
    print(f"load average {os.getloadavg()}")
    for name in names:
        cache = tempfile.mkdtemp()
        config = hybrid_recipe(DEFAULT, embedder=name, cache_dir=cache)
        mem = Memory(surfacing_mode="router", clock=ManualClock(NOW), config=config)
        mem.add_many(items(500))
        qs = queries(201, seed=19)
        mem.get_working_context("s1", qs[0], k=20)  # first query: loads the model, encodes items
        stage, total = [], []
        for q in qs[1:]:
            mem.get_working_context("s1", q, k=20)
            t = mem.last_context_record.timings_ms
            stage.append(t["query_embedding"])
            total.append(t["total"])
        print(f"{name:18s} query_embedding median {np.median(stage):6.2f} ms, p90 "
              f"{np.percentile(stage, 90):6.2f} ms; total median {np.median(total):6.1f} ms")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main(sys.argv[1:] or ["minilm", "minilm-onnx", "minilm-onnx-int8", "minilm-static"])
