"""Every MiniLM runtime variant tried for issue 19 (round 4), on one thread: CPU time per text on
the benchmark batch and cosine to the torch vectors on 769 texts.

The variants: ONNX Runtime dynamic int8 (FFN outputs fp32, as ``minilm-onnx-int8``; every
MatMul), static QDQ u8 x s8 with MinMax calibration (ONNX Runtime and OpenVINO), OpenVINO on the
dynamic int8 graph, with int8 weights (with and without its dynamic activation quantisation), in
fp32 and in bf16 (``minilm-openvino``), and torch in fp32 and under bf16 autocast. The texts:
the test set (``tests/test_dense_embedders.py``), the benchmark batch, 400 MuSiQue passages and
200 questions (seeded sample of the shared data), "x", "yes", "ok". Calibration for the static
graph: every other benchmark text and every fourth passage (not a held-out set: the static
variant failed even so).

Needs the ``dense``, ``dense-onnx`` and ``dense-openvino`` extras and the shared data
(``MEMLAB_SHARED_DATA``, default ``../shared/datasets``).

Run: ``PYTHONPATH=. python benchmarks/embedder_variants.py [variant ...]``
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.test_bench_embedders import texts as bench_texts
from memlab.signals.embedders._assets import minilm_files
from memlab.signals.embedders.onnx_minilm import encode_by_length, export_minilm
from tests.test_dense_embedders import SENTENCES

WORK = Path(tempfile.mkdtemp(prefix="memlab-variants-"))


def reference_texts() -> list[str]:
    data = Path(os.environ.get("MEMLAB_SHARED_DATA", "../shared/datasets")) / "hipporag"
    corpus = json.loads((data / "musique_train_corpus.json").read_text())
    picked = np.random.default_rng(0).choice(len(corpus), 400, replace=False)
    passages = [f"{corpus[i]['title']}\n{corpus[i]['text']}" for i in picked]
    questions = [q["question"] for q in json.loads((data / "musique_train.json").read_text())[:200]]
    return list(SENTENCES) + bench_texts()[0] + passages + questions + ["x", "yes", "ok"]


def ort(path):
    import onnxruntime as rt
    options = rt.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = rt.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda ids, mask: session.run(None, {"input_ids": ids, "attention_mask": mask})[0]


def openvino(path, precision="bf16", **extra):
    import openvino as ov
    compiled = ov.Core().compile_model(str(path), "CPU", {
        "INFERENCE_NUM_THREADS": 1, "INFERENCE_PRECISION_HINT": precision,
        "PERFORMANCE_HINT": "LATENCY", **extra})
    request = compiled.create_infer_request()
    return lambda ids, mask: np.array(request.infer({"input_ids": ids, "attention_mask": mask})[
        compiled.output(0)], copy=True)


def dynamic_all() -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    out = WORK / "dynamic-all.onnx"
    quantize_dynamic(str(export_minilm()), str(out), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], per_channel=True)
    return out


def static_qdq(tokenizer, texts: list[str]) -> Path:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )
    calibration = texts[10:266:2] + texts[266:666:4]
    feeds = []

    def collect(ids, mask):
        feeds.append({"input_ids": ids, "attention_mask": mask})
        return np.zeros(ids.shape + (384,), np.float32)

    encode_by_length(tokenizer, calibration, collect, 16, 8192)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.it = iter(feeds)

        def get_next(self):
            return next(self.it, None)

    out = WORK / "static-qdq.onnx"
    quantize_static(str(export_minilm()), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    op_types_to_quantize=["MatMul"], per_channel=True,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
    return out


def int8_weights() -> Path:
    """The fp32 graph with each weight as int8 + per-column scale behind a DequantizeLinear."""
    import onnx
    from onnx import helper, numpy_helper
    model = onnx.load(str(export_minilm()))
    inits = {i.name: i for i in model.graph.initializer}
    nodes = []
    for node in model.graph.node:
        name = node.input[1] if node.op_type == "MatMul" and len(node.input) > 1 else ""
        if name.endswith("weight_t") and name in inits:
            w = numpy_helper.to_array(inits[name])
            scale = (np.abs(w).max(axis=0) / 127.0).astype(np.float32)
            q = np.clip(np.round(w / scale), -127, 127).astype(np.int8)
            model.graph.initializer.remove(inits[name])
            model.graph.initializer.extend([numpy_helper.from_array(q, f"{name}_q"),
                                            numpy_helper.from_array(scale, f"{name}_s")])
            nodes.append(helper.make_node("DequantizeLinear", [f"{name}_q", f"{name}_s"], [name],
                                          axis=1, name=f"{name}_dq"))
        nodes.append(node)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    out = WORK / "int8-weights.onnx"
    onnx.save(model, str(out))
    return out


def torch_encoder(bf16: bool):
    import torch

    from memlab.signals.dense import MiniLMEmbedder
    torch.set_num_threads(1)
    model = MiniLMEmbedder().model

    def encode(texts):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return np.asarray(model.encode(texts, batch_size=64, normalize_embeddings=True,
                                           convert_to_numpy=True), np.float32)
    return encode


def main(wanted: list[str]) -> None:
    tokenizer = minilm_files().tokenizer()
    texts = reference_texts()
    batch = bench_texts()[0]
    reference = torch_encoder(False)(texts)
    variants = {
        "ort-int8 (minilm-onnx-int8)": lambda: ort(export_minilm(quantize=True)),
        "ort-int8-all": lambda: ort(dynamic_all()),
        "ort-static-qdq": lambda: ort(static_qdq(tokenizer, texts)),
        "ov-static-qdq": lambda: openvino(static_qdq(tokenizer, texts)),
        "ov-on-ort-int8": lambda: openvino(export_minilm(quantize=True)),
        "ov-int8-weights": lambda: openvino(int8_weights()),
        "ov-int8-weights-dq32": lambda: openvino(int8_weights(),
                                                 DYNAMIC_QUANTIZATION_GROUP_SIZE=32),
        "ov-fp32": lambda: openvino(export_minilm(), "f32"),
        "ov-bf16 (minilm-openvino)": lambda: openvino(export_minilm(), "bf16"),
        "torch-fp32": lambda: torch_encoder(False),
        "torch-bf16-autocast": lambda: torch_encoder(True),
    }
    print(f"load average {os.getloadavg()}", flush=True)
    for name, make in variants.items():
        if wanted and not any(w in name for w in wanted):
            continue
        run = make()
        encode = run if name.startswith("torch") else (
            lambda t, run=run: encode_by_length(tokenizer, t, run, 64, 8192))
        cosines = (encode(texts) * reference).sum(axis=1)
        encode(batch[:8])
        cpu = []
        for _ in range(3):
            start = time.process_time()
            encode(batch)
            cpu.append(time.process_time() - start)
        c = sorted(cpu)[1]
        print(f"{name:28s} cpu {1e3 * c / len(batch):6.2f} ms/text (~{len(batch) / (c / 2):5.0f}"
              f" texts/s on two idle cores)  cosine to torch min {cosines.min():.4f} "
              f"1% {np.percentile(cosines, 1):.4f} mean {cosines.mean():.5f}  "
              f"load {os.getloadavg()[0]:.1f}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
