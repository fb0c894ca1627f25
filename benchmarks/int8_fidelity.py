"""int8 variants of MiniLM on ONNX Runtime, judged by agreement with fp32 on text that is no
evaluation data (issue 19, round 7).

    PYTHONPATH=. <dense venv>/bin/python benchmarks/int8_fidelity.py [--rounds 3]
        [--variants NAME ...]

The criterion reads neither LoCoMo nor MuSiQue. Check text: paragraphs of the Python language
reference that ships with the interpreter (``pydoc_data.topics``: prose about syntax and
semantics, a different source from the calibration text, which is standard-library docstrings,
:func:`memlab.signals.embedders.openvino_int8.calibration_texts`). 600 of its paragraphs are
"passages"; the first eight words of 200 others are "queries". For each variant, against the
fp32 export (= torch to cosine 1.0000):

- vector cosine to fp32 over the 800 texts: min, 1st percentile, mean;
- similarity error: the query x passage cosine matrix minus fp32's, RMS and 99th percentile of
  its absolute value (what moves a ranking: a near-tie flips when the error exceeds its margin);
- top-5 agreement: the mean share of each query's fp32 top-5 passages still in the variant's
  top 5.

Every text is encoded in length-sorted batches of up to 64, as the embedders do (dynamic
activation scales are per batch, so a text's vector depends a little on its batch-mates).
Cost: CPU time (``time.process_time``) per text to encode the 256-text benchmark batch on one
thread, rounds alternating over the variants; the load average beside it.

Variants (ONNX Runtime 1.32 ``quantize_dynamic`` / ``quantize_static`` on the exported fp32
graph; node names as :func:`~memlab.signals.embedders.onnx_minilm.build_minilm_graph` writes
them):

- ``fp32``: the export itself (the reference; timed too).
- ``dyn``: dynamic int8, per-channel weights, FFN output projections fp32 (the shipped
  ``minilm-onnx-int8``).
- ``dyn-all``: every weight MatMul int8.
- ``dyn+attn``: also the attention output projections fp32.
- ``dyn+l0`` / ``dyn+l5``: also every MatMul of the first / last layer fp32.
- ``dyn+ffnin``: also the FFN input projections fp32 (only Q, K, V and the attention output
  int8).
- ``dyn-rr``: ``reduce_range`` (7-bit weights).
- ``dyn-pt``: per-tensor weights.
- ``qdq-minmax`` / ``qdq-pct``: static QDQ, u8 activations (per tensor, asymmetric) and s8
  per-channel weights on the same MatMuls as ``dyn`` (never the attention products),
  calibrated on the standard-library docstrings (MinMax / 99.999th percentile).
- ``sq<alpha>``: SmoothQuant-style per-channel activation scaling before each int8 MatMul
  (``W * s`` folded into the weights, ``s_j = max|x_j|^a / max|W_j|^(1-a)`` from the
  calibration text; the input divided by ``s``: one ``Mul`` for Q, K, V, one for the FFN input,
  folded into the value projection for the attention output), then ``dyn``; ``sq0.65`` is
  ``minilm-onnx-int8-sq`` (:func:`memlab.signals.embedders.onnx_minilm.smooth_minilm`).
  ``sq0.5-mul``: a ``Mul`` for the attention output too; ``sq<alpha>-all``: the FFN output
  projections smoothed and int8 as well.
"""

from __future__ import annotations

import argparse
import os
import re
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.test_bench_embedders import texts as bench_texts
from memlab.signals.embedders._assets import minilm_files
from memlab.signals.embedders.onnx_minilm import encode_by_length, export_minilm

WORK = Path(tempfile.mkdtemp(prefix="memlab-int8fid-"))
LAYERS = 6
WEIGHT_MATMULS = tuple(f"l{i}.{n}.mm" for i in range(LAYERS)
                       for n in ("query", "key", "value", "attn", "ffn.in", "ffn.out"))
FFN_OUT = tuple(f"l{i}.ffn.out.mm" for i in range(LAYERS))


def check_texts() -> tuple[list[str], list[str]]:
    """(600 passages, 200 queries) from the language reference shipped with Python."""
    from pydoc_data.topics import topics

    paragraphs = []
    for key in sorted(topics):
        for para in re.split(r"\n\s*\n", topics[key]):
            text = " ".join(para.split())
            if 40 <= len(text) <= 1200 and not text.startswith((">>>", "...", "*")) and \
                    sum(c.isalpha() or c == " " for c in text) / len(text) > 0.85:
                paragraphs.append(text)
    unique = list(dict.fromkeys(paragraphs))
    rng = np.random.default_rng(7)
    order = rng.permutation(len(unique))
    passages = [unique[i] for i in order[:600]]
    queries = [" ".join(unique[i].split()[:8]) for i in order[600:800]]
    return passages, queries


def calibration_feeds(batch_size: int = 16, width: int | None = None) -> list[dict]:
    """Length-sorted batches of the calibration text; ``width``: every batch padded to that many
    tokens and of exactly ``batch_size`` texts (histogram calibrators need equal shapes)."""
    from memlab.signals.embedders.onnx_minilm import length_batches, padded_batch
    from memlab.signals.embedders.openvino_int8 import calibration_texts

    texts = calibration_texts()
    encodings = minilm_files().tokenizer().encode_batch(texts)
    lengths = [len(e.ids) for e in encodings]
    feeds = []
    for rows in length_batches(lengths, batch_size, 4096):
        ids, mask = padded_batch(encodings, lengths, rows)
        if width is not None:
            if len(rows) < batch_size or ids.shape[1] > width:
                continue
            ids = np.pad(ids, ((0, 0), (0, width - ids.shape[1])))
            mask = np.pad(mask, ((0, 0), (0, width - mask.shape[1])))
        feeds.append({"input_ids": ids, "attention_mask": mask})
    return feeds


def dynamic(name: str, exclude=FFN_OUT, **options) -> Path:
    from onnxruntime.quantization import QuantType, quantize_dynamic
    out = WORK / f"{name}.onnx"
    quantize_dynamic(str(export_minilm()), str(out), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], per_channel=options.pop("per_channel", True),
                     nodes_to_exclude=list(exclude), **options)
    return out


def static(name: str, method: str) -> Path:
    from onnxruntime.quantization import (CalibrationDataReader, CalibrationMethod, QuantFormat,
                                          QuantType, quantize_static)

    class Reader(CalibrationDataReader):
        def __init__(self):
            self.feeds = iter(calibration_feeds(width=128 if method == "pct" else None))

        def get_next(self):
            return next(self.feeds, None)

    out = WORK / f"{name}.onnx"
    extra = {"CalibPercentile": 99.999} if method == "pct" else {}
    quantize_static(str(export_minilm()), str(out), Reader(), quant_format=QuantFormat.QDQ,
                    activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                    per_channel=True, op_types_to_quantize=["MatMul"],
                    nodes_to_quantize=[n for n in WEIGHT_MATMULS if n not in FFN_OUT],
                    calibrate_method=(CalibrationMethod.Percentile if method == "pct"
                                      else CalibrationMethod.MinMax),
                    extra_options=extra)
    return out


def activation_maxima(nodes) -> dict[str, np.ndarray]:
    """Per input channel max |x| of each MatMul in ``nodes`` over the calibration text (fp32)."""
    import onnx
    import onnxruntime as rt

    model = onnx.load(str(export_minilm()))
    inputs = {n.name: n.input[0] for n in model.graph.node if n.name in nodes}
    for tensor in sorted(set(inputs.values())):
        model.graph.output.append(onnx.helper.make_tensor_value_info(tensor, onnx.TensorProto.FLOAT,
                                                                      None))
    path = WORK / "probe.onnx"
    onnx.save(model, str(path))
    session = rt.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    maxima: dict[str, np.ndarray] = {}
    for feed in calibration_feeds():
        values = dict(zip(names, session.run(None, feed)))
        mask = feed["attention_mask"].astype(bool)
        for tensor in set(inputs.values()):
            m = np.abs(values[tensor][mask]).max(axis=0)
            maxima[tensor] = np.maximum(maxima.get(tensor, 0), m)
    return {node: maxima[t] for node, t in inputs.items()}


def smoothquant(name: str, alpha: float, *, ffn_out: bool = False, folded: bool = True,
                reduce_range: bool = False) -> Path:
    """SmoothQuant-style scaling, then dynamic int8 (``ffn_out``: the FFN output projections
    in int8 too). Per input channel ``s_j = max|x_j|^a / max|W_j|^(1-a)`` over the calibration
    text; ``W`` rows are multiplied by ``s`` and the activation divided by it: for Q, K, V (one
    input) by one shared ``Mul``; for the attention output projection, with ``folded``, by
    dividing the value projection's columns and bias (attention mixes tokens, not channels, so
    this is exact and costs nothing), else by a ``Mul``; for the FFN input (and output) by a
    ``Mul``."""
    import onnx
    from onnx import numpy_helper
    from onnxruntime.quantization import QuantType, quantize_dynamic

    smoothed = [n for n in WEIGHT_MATMULS if ffn_out or n not in FFN_OUT]
    maxima = activation_maxima(smoothed)
    model = onnx.load(str(export_minilm()))
    inits = {i.name: i for i in model.graph.initializer}
    by_name = {n.name: n for n in model.graph.node}

    def weight(node_name):
        return numpy_helper.to_array(inits[by_name[node_name].input[1]])

    def put(init_name, array):
        inits[init_name].CopyFrom(numpy_helper.from_array(array.astype(np.float32), init_name))

    groups = []  # (MatMuls sharing one input, fold into V?)
    for i in range(LAYERS):
        groups.append(([f"l{i}.query.mm", f"l{i}.key.mm", f"l{i}.value.mm"], False))
        groups.append(([f"l{i}.attn.mm"], folded))
        groups.append(([f"l{i}.ffn.in.mm"], False))
        if ffn_out:
            groups.append(([f"l{i}.ffn.out.mm"], False))
    muls = {}  # input tensor -> (Mul node, its output)
    for names, fold in groups:
        x_max = np.max([maxima[n] for n in names], axis=0)
        w_max = np.max([np.abs(weight(n)).max(axis=1) for n in names], axis=0)
        s = np.clip(np.maximum(x_max, 1e-5) ** alpha / np.maximum(w_max, 1e-5) ** (1 - alpha),
                    1e-2, 1e2).astype(np.float32)
        for n in names:
            put(by_name[n].input[1], weight(n) * s[:, None])
        if fold:
            i = names[0].split(".")[0]
            v = by_name[f"{i}.value.mm"]
            put(v.input[1], numpy_helper.to_array(inits[v.input[1]]) / s[None, :])
            bias = by_name[f"{i}.value"].input[1]
            put(bias, numpy_helper.to_array(inits[bias]) / s)
            continue
        x = by_name[names[0]].input[0]
        inv = numpy_helper.from_array((1.0 / s).astype(np.float32), f"{names[0]}.sq")
        model.graph.initializer.append(inv)
        out = f"{names[0]}.sq.x"
        muls[x] = (onnx.helper.make_node("Mul", [x, inv.name], [out], name=out), out)
        for n in names:
            by_name[n].input[0] = out
    nodes = []
    for node in model.graph.node:
        nodes.append(node)
        for o in node.output:
            if o in muls:
                nodes.append(muls[o][0])
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    onnx.checker.check_model(model)
    path = WORK / f"{name}-fp32.onnx"
    onnx.save(model, str(path))
    out = WORK / f"{name}.onnx"
    quantize_dynamic(str(path), str(out), weight_type=QuantType.QInt8,
                     op_types_to_quantize=["MatMul"], per_channel=True,
                     nodes_to_exclude=[] if ffn_out else list(FFN_OUT),
                     reduce_range=reduce_range)
    return out


def layer(i: int) -> tuple[str, ...]:
    return tuple(n for n in WEIGHT_MATMULS if n.startswith(f"l{i}."))


VARIANTS = {
    "fp32": lambda: export_minilm(),
    "dyn": lambda: dynamic("dyn"),
    "dyn-all": lambda: dynamic("dyn-all", exclude=()),
    "dyn+attn": lambda: dynamic("dyn+attn", FFN_OUT + tuple(f"l{i}.attn.mm" for i in range(6))),
    "dyn+l0": lambda: dynamic("dyn+l0", FFN_OUT + layer(0)),
    "dyn+l5": lambda: dynamic("dyn+l5", FFN_OUT + layer(5)),
    "dyn+ffnin": lambda: dynamic("dyn+ffnin", FFN_OUT + tuple(f"l{i}.ffn.in.mm"
                                                                for i in range(6))),
    "dyn-rr": lambda: dynamic("dyn-rr", reduce_range=True),
    "dyn-pt": lambda: dynamic("dyn-pt", per_channel=False),
    "qdq-minmax": lambda: static("qdq-minmax", "minmax"),
    "qdq-pct": lambda: static("qdq-pct", "pct"),
    **{f"sq{a}": (lambda a=a: smoothquant(f"sq{a}", a)) for a in (0.3, 0.5, 0.65, 0.8)},
    "sq0.5-mul": lambda: smoothquant("sq0.5-mul", 0.5, folded=False),
    **{f"sq{a}-all": (lambda a=a: smoothquant(f"sq{a}-all", a, ffn_out=True))
       for a in (0.5, 0.8)},
}


def session(path: Path, threads: int = 1):
    import onnxruntime as rt
    options = rt.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    s = rt.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])
    return lambda ids, mask: s.run(None, {"input_ids": ids, "attention_mask": mask})[0]


def fidelity(vectors: np.ndarray, truth: np.ndarray, n_passages: int) -> dict:
    cos = (vectors * truth).sum(axis=1)
    p, q = vectors[:n_passages], vectors[n_passages:]
    tp, tq = truth[:n_passages], truth[n_passages:]
    sim, tsim = q @ p.T, tq @ tp.T
    err = np.abs(sim - tsim)
    top_t = np.argsort(-tsim, axis=1)[:, :5]
    top_v = np.argsort(-sim, axis=1)[:, :5]
    agree = np.mean([len(set(a) & set(b)) / 5 for a, b in zip(top_t, top_v)])
    return {"cos_min": cos.min(), "cos_p1": np.percentile(cos, 1), "cos_mean": cos.mean(),
            "sim_rms": float(np.sqrt((err ** 2).mean())), "sim_p99": np.percentile(err, 99),
            "top5": agree}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--variants", nargs="*", default=list(VARIANTS))
    args = parser.parse_args()
    passages, queries = check_texts()
    texts = passages + queries
    tok = minilm_files().tokenizer()
    print(f"load average {os.getloadavg()}; check text {len(passages)} passages, "
          f"{len(queries)} queries", flush=True)
    runs = {}
    for name in args.variants:
        runs[name] = session(VARIANTS[name]())
    truth = encode_by_length(tok, texts, runs["fp32"] if "fp32" in runs else
                             session(export_minilm()), 64, 8192)
    print("| variant | cos min | cos 1% | cos mean | sim err RMS | sim err p99 | top-5 agree |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for name, run in runs.items():
        f = fidelity(encode_by_length(tok, texts, run, 64, 8192), truth, len(passages))
        print(f"| {name} | {f['cos_min']:.4f} | {f['cos_p1']:.4f} | {f['cos_mean']:.5f} | "
              f"{f['sim_rms']:.5f} | {f['sim_p99']:.5f} | {100 * f['top5']:.1f} % |", flush=True)
    timed = bench_texts()[0]
    cpu = {name: [] for name in runs}
    for r in range(args.rounds):
        before = os.getloadavg()[0]
        for name, run in runs.items():
            c = time.process_time()
            encode_by_length(tok, timed, run, 64, 8192)
            cpu[name].append(time.process_time() - c)
        print(f"round {r}: load {before:.1f} -> {os.getloadavg()[0]:.1f}", flush=True)
    base = float(np.median(cpu["fp32"])) if "fp32" in cpu else None
    for name in runs:
        c = float(np.median(cpu[name]))
        rel = f" ({c / base:.2f}x fp32)" if base else ""
        print(f"{name:12s} one thread: {1e3 * c / len(timed):6.2f} ms CPU/text{rel}", flush=True)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
