"""Embedder throughput (issue 19): every installed embedder in the same session, torch beside
the ONNX and static paths, so their ratios are measured under the same load.

Groups: ``embed-batch`` (a batch of 256 texts: 128 passages of MuSiQue's shape, a title and
three to six sentences, and 128 one-sentence questions; texts/s = 256 / mean) and
``embed-single`` (one short query, as ``get_working_context`` embeds it). The embedders are the
raw models, without the disk cache. An embedder whose extra is missing is skipped, saying so.

Run: ``PYTHONPATH=. python -m pytest benchmarks/test_bench_embedders.py --benchmark-only``
(the ``bench`` extra, and ``dense`` / ``dense-onnx`` / ``dense-openvino`` / ``dense-static`` for
each embedder).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from benchmarks.conftest import Cycle
from memlab.signals.dense import EMBEDDERS

NAMES = ["minilm", "minilm-onnx", "minilm-onnx-int8", "minilm-openvino", "minilm-openvino-int8",
         "minilm-static"]
_SUBJECTS = ["The river", "A committee", "The composer", "This species", "The railway station",
             "Her second album", "The treaty", "The observatory"]
_VERBS = ["was founded in", "is located near", "was renamed after", "moved its offices to",
          "was described by", "lies north of"]
_OBJECTS = ["the old harbour town", "a Benedictine abbey", "the provincial capital",
            "the 1923 exhibition", "a mountain pass in the Alps", "the university library"]


@functools.lru_cache(maxsize=None)
def texts() -> tuple[list[str], list[str]]:
    """(256 batch texts, 64 single queries), seeded."""
    rng = np.random.default_rng(19)

    def sentence() -> str:
        return (f"{rng.choice(_SUBJECTS)} {rng.choice(_VERBS)} {rng.choice(_OBJECTS)} "
                f"in {int(rng.integers(1700, 2020))}.")

    passages = [f"Title {i}\n" + " ".join(sentence() for _ in range(int(rng.integers(3, 7))))
                for i in range(128)]
    questions = [f"When {sentence()[:-1].lower()}?" for _ in range(128)]
    queries = [f"who {rng.choice(_VERBS)} {rng.choice(_OBJECTS)}" for _ in range(64)]
    return passages + questions, queries


@functools.lru_cache(maxsize=None)
def embedder(name: str):
    try:
        return EMBEDDERS[name]()
    except ImportError as exc:
        return exc


def _get(name: str):
    e = embedder(name)
    if isinstance(e, ImportError):
        pytest.skip(f"{name}: {e}")
    return e


@pytest.mark.benchmark(group="embed-batch")
@pytest.mark.parametrize("name", NAMES)
def test_embed_batch(benchmark, name):
    e = _get(name)
    batch, _ = texts()
    e.encode(batch[:8])  # warm-up: first-call allocations are not throughput
    benchmark.extra_info.update(embedder=name, texts=len(batch))
    vectors = benchmark.pedantic(e.encode, args=(batch,), rounds=3, iterations=1)
    assert vectors.shape[0] == len(batch)
    benchmark.extra_info["texts_per_s"] = round(len(batch) / benchmark.stats.stats.mean, 1)


@pytest.mark.benchmark(group="embed-single")
@pytest.mark.parametrize("name", NAMES)
def test_embed_single(benchmark, name):
    e = _get(name)
    queries = Cycle(texts()[1])
    e.encode([queries()])
    benchmark.extra_info.update(embedder=name)
    vector = benchmark(lambda: e.encode([queries()]))
    assert vector.shape[0] == 1
