"""Embedder cost in CPU time as well as wall time (issue 19), for a loaded shared machine.

Wall-clock throughput on a machine whose load average is several times its core count says
more about the neighbours than about the embedder. This encodes the benchmark's batch (256
texts, :func:`benchmarks.test_bench_embedders.texts`) three times per embedder and prints wall
texts/s, CPU seconds (this process, all threads) per text, and the texts/s two cores would give
if they were this process's alone: ``texts / (cpu seconds / 2)``, an extrapolation that assumes
the embedder keeps both cores busy (the static embedder runs on one: halve its figure). Then 64
single queries, one at a time: median wall and CPU milliseconds. The static embedder's word
cache is cleared before each batch (the cold case: every word of the batch tokenised afresh) (a single ONNX query runs on one
thread, so its CPU time is its wall time on an idle core).

Run: ``PYTHONPATH=. python benchmarks/embedder_cpu.py [embedder ...]``
"""

from __future__ import annotations

import os
import sys
import time

import numpy as np

from benchmarks.test_bench_embedders import NAMES, texts
from memlab.signals.dense import EMBEDDERS


def main(names: list[str]) -> None:
    batch, queries = texts()
    print(f"load average {os.getloadavg()}")
    for name in names:
        try:
            e = EMBEDDERS[name]()
        except ImportError as exc:
            print(f"{name}: skipped ({exc})")
            continue
        e.encode(batch[:8])
        wall, cpu = [], []
        for _ in range(3):
            words = getattr(e, "words", None)  # the static embedder's word cache: start cold
            if words is not None:
                words.cache.clear()
            w, c = time.perf_counter(), time.process_time()
            e.encode(batch)
            wall.append(time.perf_counter() - w)
            cpu.append(time.process_time() - c)
        w, c = sorted(wall)[1], sorted(cpu)[1]
        print(f"{name:18s} batch: wall {len(batch) / w:9.1f} texts/s   cpu {1e3 * c / len(batch):7.3f} "
              f"ms/text   two idle cores ~ {len(batch) / (c / 2):9.1f} texts/s")
        wall, cpu = [], []
        for query in queries:
            w, c = time.perf_counter(), time.process_time()
            e.encode([query])
            wall.append(time.perf_counter() - w)
            cpu.append(time.process_time() - c)
        print(f"{name:18s} single query: wall median {1e3 * np.median(wall):8.2f} ms, cpu median "
              f"{1e3 * np.median(cpu):8.2f} ms")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main(sys.argv[1:] or NAMES)
