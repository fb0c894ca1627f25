"""all-MiniLM-L6-v2 on OpenVINO with int8 matrix products: NNCF post-training quantisation,
batches through an asynchronous request queue (issue 19, round 5).

The fp32 graph exported from the packaged safetensors
(:func:`~memlab.signals.embedders.onnx_minilm.export_minilm`) is quantised once with NNCF
(``nncf.quantize``, ``ModelType.TRANSFORMER``, mixed preset: int8 weights per channel and int8
activations on the MatMuls), calibrated on text that belongs to no evaluation set
(:func:`calibration_texts`: standard-library documentation), and saved as OpenVINO IR under
``$MEMLAB_CACHE/models``, named by the weights' digest, the graph version, the calibration
texts' digest and NNCF's version. The six FFN output projections stay in float, as in
``minilm-onnx-int8``: their inputs (after GELU) hold the outlying activations, and with them in
int8 the worst cosine to torch on 769 texts fell from 0.986 to 0.935.

Batches run with ``PERFORMANCE_HINT=THROUGHPUT`` (one stream per core, one thread per stream)
fed by an ``AsyncInferQueue``; texts are sorted by token length and batched with little
padding. A single text runs synchronously on one thread. OpenVINO picks the int8 kernels the
CPU offers (VNNI, AMX); the layers left in float run in its default inference precision for the
CPU (bf16 where it has it, else f32). On this project's 2-core Zen 4 (AVX-512 VNNI and BF16, no
AMX) this is about 1.3-1.5x the texts per CPU-second of ``minilm-openvino`` (see the README,
"Choosing an embedder", round 5).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import logging
import os
import threading
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from memlab.signals.embedders.calibration import calibration_texts
from memlab.signals.embedders._assets import (check_counts, check_texts, minilm_files,
                                              models_dir, write_json)
from memlab.signals.embedders.onnx_minilm import (
    GRAPH_VERSION,
    encode_by_length,
    export_minilm,
    length_batches,
    mean_pool,
    padded_batch,
)

__all__ = ["OpenVINOInt8MiniLMEmbedder", "calibration_texts", "quantize_minilm",
           "FLOAT_NODES"]

# MatMuls left in float: the FFN output projections (inputs after GELU, the outliers)
FLOAT_NODES = tuple(f"l{i}.ffn.out.mm" for i in range(6))
_LOCK = threading.Lock()




def quantize_minilm(model, texts: Sequence[str], tokenizer, *, batch_size: int = 16,
                    float_nodes: Sequence[str] = FLOAT_NODES):
    """NNCF post-training int8 quantisation of the OpenVINO ``model`` (the exported MiniLM
    graph), calibrated on ``texts`` in length-sorted batches; ``float_nodes`` stay in float.

    Examples
    --------
    >>> import openvino as ov  # doctest: +SKIP
    >>> model = ov.Core().read_model(str(export_minilm()))  # doctest: +SKIP
    >>> q = quantize_minilm(model, calibration_texts(), minilm_files().tokenizer())
    ... # doctest: +SKIP
    """
    import nncf

    texts = list(texts)
    if not texts:
        raise ValueError("texts must hold at least one calibration text, got none")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an integer >= 1, got {batch_size!r}")
    encodings = tokenizer.encode_batch(texts)
    lengths = [len(e.ids) for e in encodings]
    feeds = []
    for rows in length_batches(lengths, batch_size, 4096):
        ids, mask = padded_batch(encodings, lengths, rows)
        feeds.append({"input_ids": ids, "attention_mask": mask})
    kwargs = {"ignored_scope": nncf.IgnoredScope(names=list(float_nodes))} if float_nodes else {}
    # NNCF logs its plan at INFO and prints progress bars and the ignored nodes to stdout: a
    # one-time step that should not fill an evaluation's output
    logger = logging.getLogger("nncf")
    level = logger.level
    logger.setLevel(logging.WARNING)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return nncf.quantize(model, nncf.Dataset(feeds),
                                 model_type=nncf.ModelType.TRANSFORMER,
                                 preset=nncf.QuantizationPreset.MIXED, subset_size=len(feeds),
                                 **kwargs)
    finally:
        logger.setLevel(level)


def quantized_minilm_path(directory: str | Path | None = None) -> Path:
    """The NNCF int8 IR of MiniLM (``.xml``; ``.bin`` beside it), quantised on first use and
    cached; its name carries the weights' digest, the graph version, the calibration texts'
    digest and NNCF's version.

    Examples
    --------
    >>> quantized_minilm_path().name  # doctest: +SKIP
    'all-MiniLM-L6-v2-53aa51172d14-g1-ovint8-c1a2b3c4d5e6-nncf3.4.0.xml'
    """
    import nncf
    import openvino as ov

    files = minilm_files()
    directory = Path(directory) if directory is not None else models_dir()
    texts = calibration_texts()
    calibration = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
    stem = (f"all-MiniLM-L6-v2-{files.digest}-g{GRAPH_VERSION}-ovint8-c{calibration}"
            f"-nncf{nncf.__version__}")
    target = directory / f"{stem}.xml"
    with _LOCK:
        if target.is_file() and target.with_suffix(".bin").is_file():
            return target
        fp32 = export_minilm(directory)
        model = quantize_minilm(ov.Core().read_model(str(fp32)), texts, files.tokenizer())
        tmp = directory / f".{stem}.{os.getpid()}.tmp.xml"
        ov.save_model(model, str(tmp), compress_to_fp16=False)
        tmp.with_suffix(".bin").replace(target.with_suffix(".bin"))
        tmp.replace(target)
        write_json(directory / f"{stem}.json", {"source": files.source, "digest": files.digest,
                                                 "graph_version": GRAPH_VERSION,
                                                 "calibration_texts": len(texts),
                                                 "calibration_digest": calibration,
                                                 "nncf": nncf.__version__,
                                                 "float_nodes": list(FLOAT_NODES)})
    return target


class OpenVINOInt8MiniLMEmbedder:
    """all-MiniLM-L6-v2 with NNCF int8 matrix products on OpenVINO (384-dimensional unit
    vectors, like the torch ``minilm`` embedder's); registered as ``minilm-openvino-int8``.

    Parameters
    ----------
    batch_size, max_tokens : int
        At most ``batch_size`` texts and ``max_tokens`` padded tokens per batch (texts are
        batched by token length).
    streams : int or None
        Parallel inference streams for batches, one thread each (default: every core this
        process may run on); each has one request in the queue.
    directory : path or None
        Where the exported and quantised models are cached (default ``$MEMLAB_CACHE/models``).

    Examples
    --------
    >>> e = OpenVINOInt8MiniLMEmbedder()  # doctest: +SKIP
    >>> e.encode(["a red apple"]).shape  # doctest: +SKIP
    (1, 384)
    >>> e.name  # doctest: +SKIP
    'all-MiniLM-L6-v2-openvino-int8'
    """

    name = "all-MiniLM-L6-v2-openvino-int8"

    def __init__(self, *, batch_size: int = 64, max_tokens: int = 8192,
                 streams: int | None = None, directory: str | Path | None = None) -> None:
        check_counts(batch_size=batch_size, max_tokens=max_tokens, streams=streams,
                     optional=("streams",))
        try:
            import nncf  # noqa: F401
            import openvino as ov
        except ImportError:
            raise ImportError("the minilm-openvino-int8 embedder needs the dense-openvino-int8 "
                              "extra: pip install 'memlab[dense-openvino-int8]' (openvino, nncf, "
                              "onnx, tokenizers)") from None
        self.path = quantized_minilm_path(directory)
        self.tokenizer = minilm_files().tokenizer()
        core = ov.Core()
        model = core.read_model(str(self.path))
        n = streams or len(os.sched_getaffinity(0))
        self._batch = core.compile_model(model, "CPU", {
            "PERFORMANCE_HINT": "THROUGHPUT", "NUM_STREAMS": n, "INFERENCE_NUM_THREADS": n})
        self._single = core.compile_model(model, "CPU", {
            "PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": 1})
        self._queue = ov.AsyncInferQueue(self._batch, n)
        self._request = self._single.create_infer_request()
        self._output = self._batch.output(0)
        self._lock = threading.Lock()
        self.batch_size, self.max_tokens, self.streams = batch_size, max_tokens, n

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length mean-pooled vectors, one row per text (384 columns).

        Examples
        --------
        >>> OpenVINOInt8MiniLMEmbedder().encode(["a red apple", "a pear"]).shape
        ... # doctest: +SKIP
        (2, 384)
        """
        texts = check_texts(texts)
        with self._lock:
            if len(texts) <= 1:
                request = self._request

                def run(ids: np.ndarray, mask: np.ndarray) -> np.ndarray:
                    result = request.infer({"input_ids": ids, "attention_mask": mask})
                    return np.array(result[request.model_outputs[0]], np.float32, copy=True)

                return encode_by_length(self.tokenizer, texts, run, self.batch_size,
                                        self.max_tokens)
            return self._encode_async(texts)

    def _encode_async(self, texts: list[str]) -> np.ndarray:
        out = np.zeros((len(texts), 384), np.float32)
        encodings = self.tokenizer.encode_batch(texts)
        lengths = [len(e.ids) for e in encodings]
        output = self._output

        def done(request, userdata) -> None:
            rows, mask = userdata
            out[rows] = mean_pool(request.get_tensor(output).data, mask)

        self._queue.set_callback(done)
        try:
            for rows in length_batches(lengths, self.batch_size, self.max_tokens):
                ids, mask = padded_batch(encodings, lengths, rows)
                self._queue.start_async({"input_ids": ids, "attention_mask": mask}, (rows, mask))
        finally:  # requests in flight finish into this call's rows, even when a submit failed
            self._queue.wait_all()
        return out
