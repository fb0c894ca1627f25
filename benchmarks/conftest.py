"""Shared, seeded fixtures for the benchmark suite (built once per session)."""

from __future__ import annotations

import functools
from datetime import datetime, timezone

import numpy as np
import pytest

from memlab import ManualClock, Memory
from memlab.datasets import synthetic_items
from memlab.datasets.synthetic import synthetic_vocabulary
from memlab.text import tokenize

NOW = datetime(2024, 4, 1, tzinfo=timezone.utc)


@functools.lru_cache(maxsize=None)
def items(n: int) -> tuple:
    return tuple(synthetic_items(n, seed=42))


@functools.lru_cache(maxsize=None)
def memory(n: int, mode: str = "router") -> Memory:
    mem = Memory(surfacing_mode=mode, clock=ManualClock(NOW))
    mem.add_many(items(n))
    return mem


@functools.lru_cache(maxsize=None)
def tokenized(n: int) -> list[list[str]]:
    return [tokenize(item["content"]) for item in items(n)]


def queries(count: int = 64, seed: int = 7) -> list[str]:
    """Three-word queries over mid-frequency vocabulary (ranks 20..5000 of the Zipf law)."""
    rng = np.random.default_rng(seed)
    vocab = synthetic_vocabulary(20_000)
    perm = np.random.default_rng(42).permutation(20_000)  # as in synthetic_items(seed=42)
    words = [vocab[perm[r]] for r in range(20, 5000)]
    return [" ".join(rng.choice(words, 3, replace=False)) for _ in range(count)]


class Cycle:
    """Call-to-call rotation through a list, so a benchmark does not time one query only."""

    def __init__(self, values):
        self.values, self.i = list(values), 0

    def __call__(self):
        v = self.values[self.i % len(self.values)]
        self.i += 1
        return v


@pytest.fixture
def query_cycle():
    return Cycle(queries())
