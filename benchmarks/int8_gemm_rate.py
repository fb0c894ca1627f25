"""The int8 GEMM rate ONNX Runtime reaches on this CPU, one core (issue 19, round 7).

    PYTHONPATH=. <dense venv>/bin/python benchmarks/int8_gemm_rate.py [--m 512 2048] [--seconds 3]

One-node graphs on a one-thread session, ``(M x 384) @ (384 x 1536)`` (MiniLM's FFN input
projection; ``M`` tokens): ``MatMulInteger`` with u8 activations x s8 weights (what
``quantize_dynamic`` emits), the same with s8 x s8, and fp32 ``MatMul``; also the
``DynamicQuantizeMatMul`` contrib op that ORT fuses the dynamic int8 graph into (quantise the
activations, int8 GEMM, rescale: the whole cost of one int8 projection). Rate = ``2 M K N``
operations per second of process CPU time (``time.process_time``; the inputs are made once),
best of three repeats of at least ``--seconds`` each, with the load average beside it.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

K, N = 384, 1536


def _session(model):
    import onnxruntime as rt
    options = rt.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return rt.InferenceSession(model.SerializeToString(), options,
                               providers=["CPUExecutionProvider"])


def _model(op: str, a_type, b: np.ndarray, domain: str = ""):
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(b, "B")]
    inputs = ["A", "B"]
    if op == "MatMulInteger":
        inits.append(numpy_helper.from_array(np.array(0, b.dtype), "b_zp"))
        inputs = ["A", "B", "", "b_zp"]
        out_type = TensorProto.INT32
    elif op == "DynamicQuantizeMatMul":
        inits.append(numpy_helper.from_array(np.full(N, 0.01, np.float32), "b_scale"))
        inputs = ["A", "B", "b_scale"]
        out_type = TensorProto.FLOAT
    else:
        out_type = TensorProto.FLOAT
    node = helper.make_node(op, inputs, ["Y"], domain=domain)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("A", a_type, ["M", K])],
                              [helper.make_tensor_value_info("Y", out_type, ["M", N])], inits)
    opsets = [helper.make_opsetid("", 17)] + ([helper.make_opsetid("com.microsoft", 1)]
                                              if domain else [])
    model = helper.make_model(graph, opset_imports=opsets)
    model.ir_version = 8
    return model


def rate(session, a: np.ndarray, seconds: float) -> float:
    """Best-of-three GOPS (2 M K N per run, process CPU time)."""
    feed = {"A": a}
    session.run(None, feed)
    best = 0.0
    for _ in range(3):
        runs, start = 0, time.process_time()
        while True:
            session.run(None, feed)
            runs += 1
            spent = time.process_time() - start
            if spent >= seconds:
                break
        best = max(best, 2 * a.shape[0] * K * N * runs / spent / 1e9)
    return best


def main() -> None:
    from onnx import TensorProto
    parser = argparse.ArgumentParser()
    parser.add_argument("--m", type=int, nargs="*", default=[512, 2048])
    parser.add_argument("--seconds", type=float, default=3.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    b8 = rng.integers(-127, 128, (K, N), dtype=np.int8)
    bf = rng.standard_normal((K, N)).astype(np.float32)
    cases = {
        "MatMulInteger u8 x s8": (_model("MatMulInteger", TensorProto.UINT8, b8),
                                  lambda m: rng.integers(0, 256, (m, K), dtype=np.uint8)),
        "MatMulInteger s8 x s8": (_model("MatMulInteger", TensorProto.INT8, b8),
                                  lambda m: rng.integers(-128, 128, (m, K), dtype=np.int8)),
        "DynamicQuantizeMatMul (f32 in/out, u8 x s8)": (
            _model("DynamicQuantizeMatMul", TensorProto.FLOAT, b8, "com.microsoft"),
            lambda m: rng.standard_normal((m, K)).astype(np.float32)),
        "MatMul fp32": (_model("MatMul", TensorProto.FLOAT, bf),
                        lambda m: rng.standard_normal((m, K)).astype(np.float32)),
    }
    import onnxruntime as rt
    print(f"onnxruntime {rt.__version__}; one thread; load average {os.getloadavg()}")
    for m in args.m:
        for name, (model, make) in cases.items():
            gops = rate(_session(model), make(m), args.seconds)
            print(f"M={m:5d} ({m}x{K} @ {K}x{N}) {name:45s} {gops:8.1f} GOPS", flush=True)
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
