"""OpenVINO int8 and throughput variants of MiniLM (issue 19, round 5), beside the shipped
``minilm-openvino`` (bf16) and ``minilm-onnx-int8`` in the same run.

Variants (``--variants``, substrings of the names below):

- ``ort-int8``: the shipped ``minilm-onnx-int8`` embedder (ONNX Runtime dynamic int8, 2 threads).
- ``ov-bf16``: the shipped ``minilm-openvino`` embedder (LATENCY hint, one synchronous request on
  every core).
- ``ov-<precision>-tput``: the same exported graph compiled with ``PERFORMANCE_HINT=THROUGHPUT``
  (one stream per core, one thread per stream) and fed by an ``AsyncInferQueue`` with one
  request per stream; texts sorted by token length and batched with little padding.
- ``ov-int8-ptq-all-tput``: NNCF post-training quantisation (``nncf.quantize``,
  ``ModelType.TRANSFORMER``, mixed preset: int8 activations and weights on every weight MatMul)
  calibrated on text that is not evaluation data
  (:func:`memlab.signals.embedders.openvino_int8.calibration_texts`), same throughput setup.
- ``ov-int8 (minilm-openvino-int8)``: the new embedder: the same quantisation with the six FFN
  output projections left in float, same throughput setup.
- ``ov-int8-wc-tput``: NNCF int8 weight compression (``nncf.compress_weights``, weights int8,
  activations in the inference precision), same throughput setup.

For each: CPU seconds (this process, every thread: ``time.process_time``) and wall seconds to
encode the timing texts, rounds alternating over the variants; the load average before and
after each round; cosine to the torch vectors (min / 1st percentile / mean) on the reference
texts of ``benchmarks/embedder_variants.py`` (769 texts: the test set, the benchmark batch, 400
MuSiQue passages, 200 questions, one-word strings). Texts/s "on two idle cores" is
``texts / (cpu / 2)``: an extrapolation that assumes both cores stay busy.

Run: ``PYTHONPATH=. python benchmarks/openvino_int8.py [--rounds 3] [--variants ...]``
(needs ``dense`` for the torch reference, ``dense-onnx``, ``dense-openvino`` and ``nncf``).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.embedder_variants import reference_texts
from benchmarks.test_bench_embedders import texts as bench_texts
from memlab.signals.embedders._assets import minilm_files
from memlab.signals.embedders.onnx_minilm import export_minilm, length_batches, mean_pool, \
    padded_batch

WORK = Path(tempfile.mkdtemp(prefix="memlab-ovint8-"))


def torch_reference(texts: list[str]) -> np.ndarray:
    """Torch vectors of ``texts``, cached in the temp dir by the texts' digest (minutes under
    load)."""
    digest = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:16]
    path = Path(tempfile.gettempdir()) / f"memlab-torch-reference-{digest}.npy"
    if path.exists():
        return np.load(path)
    from memlab.signals.dense import MiniLMEmbedder
    vectors = MiniLMEmbedder().encode(texts)
    np.save(path, vectors)
    return vectors


def async_encoder(compiled, tokenizer, batch_size: int = 64, max_tokens: int = 8192):
    """encode(texts) through an AsyncInferQueue with one request per optimal request."""
    import openvino as ov
    jobs = compiled.get_property("OPTIMAL_NUMBER_OF_INFER_REQUESTS")
    queue = ov.AsyncInferQueue(compiled, jobs)
    output = compiled.output(0)

    def encode(texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 384), np.float32)
        if not texts:
            return out
        encodings = tokenizer.encode_batch(texts)
        lengths = [len(e.ids) for e in encodings]

        def done(request, userdata):
            rows, mask = userdata
            out[rows] = mean_pool(request.get_tensor(output).data, mask)

        queue.set_callback(done)
        for rows in length_batches(lengths, batch_size, max_tokens):
            ids, mask = padded_batch(encodings, lengths, rows)
            queue.start_async({"input_ids": ids, "attention_mask": mask}, (rows, mask))
        queue.wait_all()
        return out
    return encode


def calibration_texts() -> list[str]:
    from memlab.signals.embedders.openvino_int8 import calibration_texts as texts
    return texts()


def ptq_model(float_nodes=()):
    import openvino as ov

    from memlab.signals.embedders.openvino_int8 import quantize_minilm
    return quantize_minilm(ov.Core().read_model(str(export_minilm())), calibration_texts(),
                           minilm_files().tokenizer(), float_nodes=float_nodes)


def wc_model():
    import nncf
    import openvino as ov
    model = ov.Core().read_model(str(export_minilm()))
    return nncf.compress_weights(model, mode=nncf.CompressWeightsMode.INT8_ASYM)


def compile_tput(model, precision: str | None = "bf16"):
    import openvino as ov
    config = {"PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": 2, "INFERENCE_NUM_THREADS": 2}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    return ov.Core().compile_model(model, "CPU", config)


def variants() -> dict:
    import openvino as ov
    from memlab.signals.dense import EMBEDDERS
    tok = minilm_files().tokenizer()
    fp32 = lambda: ov.Core().read_model(str(export_minilm()))  # noqa: E731
    return {
        "ort-int8 (minilm-onnx-int8)": lambda: EMBEDDERS["minilm-onnx-int8"]().encode,
        "ov-bf16 (minilm-openvino)": lambda: EMBEDDERS["minilm-openvino"]().encode,
        "ov-f32-tput": lambda: async_encoder(compile_tput(fp32(), "f32"), tok),
        "ov-bf16-tput": lambda: async_encoder(compile_tput(fp32(), "bf16"), tok),
        "ov-int8-ptq-all-tput": lambda: async_encoder(compile_tput(ptq_model(), "bf16"), tok),
        "ov-int8 (minilm-openvino-int8)": lambda: EMBEDDERS["minilm-openvino-int8"]().encode,
        "ov-int8-wc-tput": lambda: async_encoder(compile_tput(wc_model(), "bf16"), tok),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="*", default=[])
    parser.add_argument("--timing", choices=["bench", "reference"], default="bench",
                        help="texts timed: the benchmark batch (256) or the 769 reference texts")
    parser.add_argument("--no-cosine", action="store_true")
    args = parser.parse_args()
    reference = reference_texts()
    timed = bench_texts()[0] if args.timing == "bench" else reference
    print(f"cpus {len(os.sched_getaffinity(0))}; load average {os.getloadavg()}", flush=True)
    truth = None if args.no_cosine else torch_reference(reference)
    encoders = {}
    for name, make in variants().items():
        if args.variants and not any(w in name for w in args.variants):
            continue
        start = time.process_time()
        encoders[name] = make()
        encoders[name](timed[:8])
        line = f"{name:30s} built in {time.process_time() - start:6.1f} s CPU"
        if truth is not None:
            cos = (encoders[name](reference) * truth).sum(axis=1)
            line += (f"; cosine to torch min {cos.min():.4f} 1% {np.percentile(cos, 1):.4f} "
                     f"mean {cos.mean():.5f}; worst {[reference[i][:12] for i in np.argsort(cos)[:3]]}")
        print(line, flush=True)
    cpu = {name: [] for name in encoders}
    wall = {name: [] for name in encoders}
    for r in range(args.rounds):
        before = os.getloadavg()[0]
        for name, encode in encoders.items():
            w, c = time.perf_counter(), time.process_time()
            encode(timed)
            wall[name].append(time.perf_counter() - w)
            cpu[name].append(time.process_time() - c)
        print(f"round {r}: load {before:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
    n = len(timed)
    print(f"{n} texts per round, {args.rounds} rounds, medians:")
    for name in encoders:
        c, w = float(np.median(cpu[name])), float(np.median(wall[name]))
        print(f"{name:30s} cpu {1e3 * c / n:6.2f} ms/text -> {n / (c / 2):6.0f} texts/s on two "
              f"idle cores | wall {n / w:6.0f} texts/s (cpu/wall {c / w:4.2f})", flush=True)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
