"""all-MiniLM-L6-v2 on OpenVINO: bfloat16 matrix products on the CPU's AMX tiles, no torch.

OpenVINO reads the same ONNX graph the ONNX Runtime path exports from the packaged safetensors
(:func:`~memlab.signals.embedders.onnx_minilm.export_minilm`, fp32) and compiles it for the CPU.
On a CPU with bfloat16 support (AMX or AVX-512 BF16) its default inference precision is
bfloat16: the matrix products run as AMX bf16 GEMMs with fp32 accumulation, and OpenVINO keeps
the precision-sensitive operations (LayerNorm, Softmax, the residual adds) in fp32. On this
project's machine that is about twice the texts per CPU-second of ONNX Runtime's dynamic int8
path, and the vectors stay at cosine >= 0.9999 to torch's (int8: >= 0.97 on one-word strings).
Elsewhere OpenVINO runs fp32 (the name says which: :attr:`OpenVINOMiniLMEmbedder.precision`).

Why not int8 here: ONNX Runtime's int8 GEMMs do use AMX (U8S8; S8S8 does not), but the rest of
its graph then dominates; OpenVINO with int8 weights (dequantised or dynamically quantised
activations) measured slower than bf16 and less exact. See the README, "Choosing an embedder".
"""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memlab.signals.embedders._assets import check_counts, check_texts, minilm_files
from memlab.signals.embedders.onnx_minilm import encode_by_length, export_minilm

__all__ = ["OpenVINOMiniLMEmbedder"]

PRECISIONS = ("auto", "bf16", "f32")


class OpenVINOMiniLMEmbedder:
    """all-MiniLM-L6-v2 compiled by OpenVINO for the CPU (384-dimensional unit vectors, like the
    torch ``minilm`` embedder's).

    Parameters
    ----------
    precision : {"auto", "bf16", "f32"}
        Inference precision of the matrix products: ``"auto"`` is OpenVINO's choice for this CPU
        (bf16 where the CPU has it, else f32).
    batch_size, max_tokens : int
        At most ``batch_size`` texts and ``max_tokens`` padded tokens per batch (texts are
        batched by token length).
    threads : int or None
        Threads for batches (default: every core this process may run on); a single text runs
        on one thread.
    directory : path or None
        Where the ONNX export is cached (default ``$MEMLAB_CACHE/models``).

    Examples
    --------
    >>> e = OpenVINOMiniLMEmbedder()  # doctest: +SKIP
    >>> e.encode(["a red apple"]).shape  # doctest: +SKIP
    (1, 384)
    >>> e.precision  # doctest: +SKIP
    'bf16'
    """

    def __init__(self, precision: str = "auto", *, batch_size: int = 64, max_tokens: int = 8192,
                 threads: int | None = None, directory: str | Path | None = None) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
        check_counts(batch_size=batch_size, max_tokens=max_tokens, threads=threads,
                     optional=("threads",))
        try:
            import openvino as ov
        except ImportError:
            raise ImportError("the minilm-openvino embedder needs the dense-openvino extra: pip "
                              "install 'memlab[dense-openvino]' (openvino, onnx, tokenizers)") \
                from None
        self.path = export_minilm(directory)
        self.tokenizer = minilm_files().tokenizer()
        core = ov.Core()
        model = core.read_model(str(self.path))

        def compile_for(n_threads: int):
            config = {"INFERENCE_NUM_THREADS": n_threads, "PERFORMANCE_HINT": "LATENCY"}
            if precision != "auto":
                config["INFERENCE_PRECISION_HINT"] = precision
            return core.compile_model(model, "CPU", config)

        self._batch = compile_for(threads or len(os.sched_getaffinity(0)))
        # one query on one thread, as the ONNX Runtime path does: a dozen tokens give a pool
        # nothing to share
        self._single = compile_for(1)
        hint = self._batch.get_property("INFERENCE_PRECISION_HINT")
        self.precision = hint.to_string() if hasattr(hint, "to_string") else str(hint)
        self.name = f"all-MiniLM-L6-v2-openvino-{self.precision}"
        # an infer request is not thread-safe: one per compiled model, used under a lock
        self._requests = {False: self._batch.create_infer_request(),
                          True: self._single.create_infer_request()}
        self._output = self._batch.output(0)
        self._lock = threading.Lock()
        self.batch_size, self.max_tokens = batch_size, max_tokens

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length mean-pooled vectors, one row per text (384 columns).

        Examples
        --------
        >>> OpenVINOMiniLMEmbedder().encode(["a red apple", "a pear"]).shape  # doctest: +SKIP
        (2, 384)
        """
        texts = check_texts(texts)
        request = self._requests[len(texts) == 1]

        def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
            result = request.infer({"input_ids": ids, "attention_mask": mask})
            return np.array(result[request.model_outputs[0]], np.float32, copy=True)

        with self._lock:
            return encode_by_length(self.tokenizer, texts, run, self.batch_size, self.max_tokens)
