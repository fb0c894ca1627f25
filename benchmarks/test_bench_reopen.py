"""Reopening a durable store: journal replay vs. snapshot + tail (issue 14, item 7).

The 1M-item / 5M-edge measurement is ``python benchmarks/reopen.py --items 1000000 --edges
5000000`` (see its docstring); these benchmarks time both reopens at 20,000 items and 100,000
edges, in one run, so they can be compared as a ratio.
"""

from __future__ import annotations

import shutil

import pytest

from benchmarks.reopen import build
from memlab.store import MemoryStore


@pytest.fixture(scope="module")
def stores(tmp_path_factory):
    folder = tmp_path_factory.mktemp("reopen")
    journal, snapshot = folder / "journal.db", folder / "snapshot.db"
    build(journal, 20_000, 100_000)
    shutil.copy(journal, snapshot)
    store = MemoryStore(path=snapshot, compact_after=None)
    store.compact()
    store.close()
    return journal, snapshot


def _open(path):
    store = MemoryStore(path=path, compact_after=None)
    store.close()
    return store


@pytest.mark.benchmark(group="reopen")
@pytest.mark.parametrize("kind", ["journal", "snapshot"])
def test_reopen(benchmark, stores, kind):
    path = stores[0] if kind == "journal" else stores[1]
    benchmark.extra_info.update(items=20_000, edges=100_000, reopen=kind)
    store = benchmark.pedantic(_open, args=(path,), rounds=3, iterations=1)
    assert len(store.workspace("bench")) == 20_000
