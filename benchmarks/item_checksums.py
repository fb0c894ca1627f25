"""What the per-item checksums of issue 14 (``memlab recover`` item by item) cost: CPU time of
``add_many`` of N items (one ``item_sums`` row per ``add_items`` row) and of a snapshot capture
(format 3 adds two checksum parts per workspace), with and without them, alternating in one run.

    PYTHONPATH=. python benchmarks/item_checksums.py --items 100000 --rounds 3

Only ratios within one run mean anything (CPU time, not wall; the machine may be shared).
"""

from __future__ import annotations

import argparse
import os
import pathlib
import statistics
import tempfile
import time

import memlab.persist as persist
from memlab import Memory
from memlab.snapshot import capture


def one(with_sums: bool, n: int) -> tuple[float, float]:
    """(add_many CPU s, capture CPU s) for ``n`` items, with or without the checksums."""
    real_sums, real_format = persist.item_sums, persist.SNAPSHOT_FORMAT
    if not with_sums:
        persist.item_sums = lambda payload: None
        persist.SNAPSHOT_FORMAT = 2  # no per-item checksum parts in the capture
    try:
        with tempfile.TemporaryDirectory() as folder:
            mem = Memory(path=str(pathlib.Path(folder) / "m.db"))
            items = [f"item {i} about deploy {i % 97} and release train {i % 13}"
                     for i in range(n)]
            start = time.process_time()
            mem.add_many(items)
            add = time.process_time() - start
            start = time.process_time()
            capture(mem.store)
            cap = time.process_time() - start
            mem.store.close()
    finally:
        persist.item_sums, persist.SNAPSHOT_FORMAT = real_sums, real_format
    return add, cap


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    times: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
    for _ in range(args.rounds):
        for with_sums in (False, True):
            times[with_sums].append(one(with_sums, args.items))
    for with_sums, label in ((False, "without"), (True, "with")):
        adds, caps = zip(*times[with_sums])
        print(f"{label:>7} checksums: add_many {statistics.median(adds):.2f} s CPU "
              f"(runs {', '.join(f'{a:.2f}' for a in adds)}); capture "
              f"{statistics.median(caps):.2f} s CPU (runs {', '.join(f'{c:.2f}' for c in caps)})")
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
