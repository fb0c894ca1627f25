"""all-MiniLM-L6-v2 on ONNX Runtime: no torch, at export or at run time.

The ONNX graph is written here, layer by layer, from the packaged safetensors (read with
``safetensors.numpy``) with ``onnx.helper``. Exporting with ``torch.onnx`` would be the usual
route, but it needs torch at the one moment this path exists to avoid it (first use on a
torch-free install); BERT's encoder is twelve standard operators, and the vectors are held to the
torch path's by a test (cosine >= 0.999 fp32, >= 0.99 int8). The graph is exported once per
weights digest into :func:`~memlab.signals.embedders._assets.models_dir`, and its dynamic int8
form (``onnxruntime.quantization.quantize_dynamic``: int8 per-channel weights on the MatMuls but
the FFN output projections) beside it. ``smooth``: the int8 form of a SmoothQuant-scaled graph
(:func:`smooth_minilm`, alpha :data:`SMOOTH_ALPHA`, activation ranges from the standard-library
calibration text of :func:`~memlab.signals.embedders.calibration.calibration_texts`): the
float graph computes the same function, but the activations the int8 products see have their
outlying channels scaled down (issue 19, round 7; ``minilm-onnx-int8-sq``: chosen by agreement
with fp32 on Python's language reference, no evaluation text).

Encoding tokenises with the packaged ``tokenizer.json`` (``tokenizers``), sorts the texts by
length and runs batches of similar length (little padding), mean-pools over the attention mask
and L2-normalises, as sentence-transformers does for this model. ONNX Runtime's intra-op pool
uses every core this process may run on (a single text runs on one thread).
"""

from __future__ import annotations

import hashlib
import logging
import os
import threading
from pathlib import Path
from typing import Sequence

import numpy as np

from memlab.signals.embedders._assets import check_texts, minilm_files, models_dir, write_json

__all__ = ["build_minilm_graph", "export_minilm", "OnnxMiniLMEmbedder", "length_batches", "padded_batch", "mean_pool",
           "encode_by_length", "smooth_minilm", "activation_maxima", "SMOOTH_ALPHA",
           "INT8_VERSION"]

GRAPH_VERSION = 1  # bump when build_minilm_graph changes: exported files are named by it
# the smoothed int8 recipe (minilm-onnx-int8-sq): SmoothQuant alpha before dynamic int8, FFN
# output projections fp32. Chosen (issue 19, round 7) as the variant with the smallest query x
# passage cosine error against fp32 on the language reference shipped with Python
# (benchmarks/int8_fidelity.py), before any quality run; its int8 file is named by INT8_VERSION
SMOOTH_ALPHA = 0.65
INT8_VERSION = "sq065"
LAYERS = 6
_EXPORT_LOCK = threading.Lock()


def _QUIET_PREPROCESS(record) -> bool:
    return "pre-processing before quantization" not in record.getMessage()


def build_minilm_graph(weights: dict[str, np.ndarray], *, layers: int = 6, heads: int = 12,
                       eps: float = 1e-12):
    """A BERT encoder (``BertModel`` without pooler) as an ONNX model (opset 17).

    Inputs ``input_ids`` and ``attention_mask`` (int64, batch x length); output
    ``last_hidden_state`` (float32, batch x length x hidden). Token types are all 0, as
    sentence-transformers sends for one sentence.
    """
    from onnx import TensorProto, helper, numpy_helper

    hidden = weights["embeddings.word_embeddings.weight"].shape[1]
    head_dim = hidden // heads
    inits, nodes = [], []

    def const(name: str, array) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(op: str, inputs: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def linear(x: str, prefix: str, out: str) -> str:
        w = const(f"{prefix}.weight_t", np.ascontiguousarray(weights[f"{prefix}.weight"].T))
        b = const(f"{prefix}.bias", weights[f"{prefix}.bias"])
        return node("Add", [node("MatMul", [x, w], f"{out}.mm"), b], out)

    def layer_norm(x: str, prefix: str, out: str) -> str:
        return node("LayerNormalization", [x, const(f"{prefix}.weight", weights[f"{prefix}.weight"]),
                                           const(f"{prefix}.bias", weights[f"{prefix}.bias"])],
                    out, axis=-1, epsilon=eps)

    # embeddings: word + position (first `length` rows) + token type 0, then LayerNorm
    const("zero1", np.array([0], np.int64))
    const("one1", np.array([1], np.int64))
    words = node("Gather", [const("word_embeddings", weights["embeddings.word_embeddings.weight"]),
                            "input_ids"], "emb.words")
    length = node("Slice", [node("Shape", ["input_ids"], "ids.shape"), "one1",
                            const("two1", np.array([2], np.int64))], "ids.length")
    positions = node("Slice", [const("position_embeddings",
                                     weights["embeddings.position_embeddings.weight"]),
                               "zero1", length, "zero1"], "emb.positions")
    x = node("Add", [node("Add", [words, positions], "emb.wp"),
                     const("token_type0", weights["embeddings.token_type_embeddings.weight"][0])],
             "emb.sum")
    x = layer_norm(x, "embeddings.LayerNorm", "emb.out")

    # attention bias: 0 where attended, -1e4 at padding (batch x 1 x 1 x length)
    mask = node("Cast", [node("Unsqueeze", ["attention_mask", const("axes12", np.array([1, 2],
                                                                                       np.int64))],
                              "mask.4d")], "mask.f", to=TensorProto.FLOAT)
    bias = node("Mul", [node("Sub", [const("one_f", np.array(1.0, np.float32)), mask], "mask.inv"),
                        const("neg_big", np.array(-10000.0, np.float32))], "mask.bias")
    split = const("split_heads", np.array([0, 0, heads, head_dim], np.int64))
    merge = const("merge_heads", np.array([0, 0, hidden], np.int64))
    scale = const("scale", np.array(1.0 / np.sqrt(head_dim), np.float32))
    sqrt2 = const("sqrt2", np.array(np.sqrt(2.0), np.float32))
    half, one = const("half", np.array(0.5, np.float32)), "one_f"

    for i in range(layers):
        p, n = f"encoder.layer.{i}", f"l{i}"

        def heads_of(name: str, perm: list[int]) -> str:
            y = linear(x, f"{p}.attention.self.{name}", f"{n}.{name}")
            return node("Transpose", [node("Reshape", [y, split], f"{n}.{name}.split")],
                        f"{n}.{name}.t", perm=perm)

        q, k, v = heads_of("query", [0, 2, 1, 3]), heads_of("key", [0, 2, 3, 1]), \
            heads_of("value", [0, 2, 1, 3])
        scores = node("Add", [node("Mul", [node("MatMul", [q, k], f"{n}.qk"), scale],
                                   f"{n}.qk.scaled"), bias], f"{n}.scores")
        probs = node("Softmax", [scores], f"{n}.probs", axis=-1)
        ctx = node("Reshape", [node("Transpose", [node("MatMul", [probs, v], f"{n}.ctx")],
                                    f"{n}.ctx.t", perm=[0, 2, 1, 3]), merge], f"{n}.ctx.merged")
        attn = linear(ctx, f"{p}.attention.output.dense", f"{n}.attn")
        x = layer_norm(node("Add", [x, attn], f"{n}.res1"), f"{p}.attention.output.LayerNorm",
                       f"{n}.ln1")
        h = linear(x, f"{p}.intermediate.dense", f"{n}.ffn.in")
        gelu = node("Mul", [node("Mul", [h, half], f"{n}.gelu.half"),
                            node("Add", [one, node("Erf", [node("Div", [h, sqrt2], f"{n}.gelu.div")],
                                                   f"{n}.gelu.erf")], f"{n}.gelu.1p")],
                    f"{n}.gelu")  # exact (erf) GELU, as BERT's "gelu"
        out = linear(gelu, f"{p}.output.dense", f"{n}.ffn.out")
        x = layer_norm(node("Add", [x, out], f"{n}.res2"), f"{p}.output.LayerNorm", f"{n}.ln2")
    nodes.append(helper.make_node("Identity", [x], ["last_hidden_state"], name="output"))

    graph = helper.make_graph(
        nodes, "all-MiniLM-L6-v2",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "length"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "length"])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT,
                                       ["batch", "length", hidden])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="memlab")
    model.ir_version = 8
    return model


def export_minilm(directory: str | Path | None = None, *, quantize: bool = False,
                  smooth: bool = False) -> Path:
    """The exported ONNX model's path, exporting it first if absent (once per weights digest).

    ``quantize``: the dynamic int8 form (weights of the MatMuls but the FFN output projections
    in int8 per channel, activations quantised per batch), made from the fp32 export;
    ``smooth`` (with ``quantize``): made from the fp32 export after :func:`smooth_minilm` (a
    file named by :data:`INT8_VERSION` and the calibration text's digest).

    Examples
    --------
    >>> path = export_minilm(quantize=True)  # doctest: +SKIP
    >>> path.name  # doctest: +SKIP
    'all-MiniLM-L6-v2-53aa51172d14-g1-int8.onnx'
    """
    files = minilm_files()
    directory = Path(directory) if directory is not None else models_dir()
    stem = f"all-MiniLM-L6-v2-{files.digest}-g{GRAPH_VERSION}"
    fp32 = directory / f"{stem}-fp32.onnx"
    if smooth and not quantize:
        raise ValueError("smooth applies to the int8 form: pass quantize=True with smooth=True")
    texts = []
    if not quantize:
        int8 = fp32
    elif not smooth:
        int8 = directory / f"{stem}-int8.onnx"
    else:
        from memlab.signals.embedders.calibration import calibration_texts
        texts = calibration_texts()
        calibration = hashlib.sha256("\x00".join(texts).encode()).hexdigest()[:12]
        int8 = directory / f"{stem}-{INT8_VERSION}-c{calibration}-int8.onnx"
    target = int8 if quantize else fp32
    with _EXPORT_LOCK:
        if target.is_file():
            return target
        import onnx
        from safetensors.numpy import load

        directory.mkdir(parents=True, exist_ok=True)
        if not fp32.is_file():
            model = build_minilm_graph(load(files.safetensors))
            onnx.checker.check_model(model)
            tmp = fp32.with_name(f".{fp32.name}.{os.getpid()}.tmp")
            onnx.save(model, str(tmp))
            tmp.replace(fp32)
        if quantize:
            from onnxruntime.quantization import QuantType, quantize_dynamic

            source = fp32
            tmp_fp32 = int8.with_name(f".{int8.name}.{os.getpid()}.smoothed.tmp.onnx")
            if smooth:
                smoothed = smooth_minilm(onnx.load(str(fp32)), activation_maxima(
                    fp32, texts, files.tokenizer()), SMOOTH_ALPHA)
                onnx.save(smoothed, str(tmp_fp32))
                source = tmp_fp32
            tmp = int8.with_name(f".{int8.name}.{os.getpid()}.tmp.onnx")
            # quantize_dynamic logs a generic "consider pre-processing" warning on the root
            # logger (shape inference; our graph has none to do): kept out of users' output
            logging.getLogger().addFilter(_QUIET_PREPROCESS)
            try:
                # the FFN output projections (after GELU: the outlying activations) stay fp32:
                # with them in int8, passages fell to cosine 0.98 against torch; without, >= 0.99
                quantize_dynamic(str(source), str(tmp), weight_type=QuantType.QInt8,
                                 op_types_to_quantize=["MatMul"], per_channel=True,
                                 nodes_to_exclude=[f"l{i}.ffn.out.mm" for i in range(LAYERS)])
            finally:
                logging.getLogger().removeFilter(_QUIET_PREPROCESS)
                tmp_fp32.unlink(missing_ok=True)
            tmp.replace(int8)
        write_json(directory / f"{stem}.json", {"source": files.source, "digest": files.digest,
                                                 "graph_version": GRAPH_VERSION, "opset": 17})
    return target


def activation_maxima(fp32_path: str | Path, texts: Sequence[str], tokenizer,
                      *, batch_size: int = 16) -> dict[str, np.ndarray]:
    """Per input channel, the largest ``|x|`` over the real (unpadded) tokens of ``texts`` at
    the input of each weight MatMul of the fp32 graph at ``fp32_path`` (name -> vector), run on
    one thread in length-sorted batches.

    Examples
    --------
    >>> from memlab.signals.embedders._assets import minilm_files  # doctest: +SKIP
    >>> m = activation_maxima(export_minilm(), ["a red apple"], minilm_files().tokenizer())
    ... # doctest: +SKIP
    >>> m["l0.query.mm"].shape  # doctest: +SKIP
    (384,)
    """
    import onnx
    import onnxruntime as ort

    texts = list(texts)
    if not texts:
        raise ValueError("texts must hold at least one text, got none")
    model = onnx.load(str(fp32_path))
    inputs = {n.name: n.input[0] for n in model.graph.node
              if n.op_type == "MatMul" and n.name.endswith(".mm")}
    for tensor in sorted(set(inputs.values())):
        model.graph.output.append(onnx.helper.make_tensor_value_info(
            tensor, onnx.TensorProto.FLOAT, None))
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    encodings = tokenizer.encode_batch(texts)
    lengths = [len(e.ids) for e in encodings]
    maxima: dict[str, np.ndarray] = {}
    for rows in length_batches(lengths, batch_size, 4096):
        ids, mask = padded_batch(encodings, lengths, rows)
        values = dict(zip(names, session.run(None, {"input_ids": ids, "attention_mask": mask})))
        for tensor in set(inputs.values()):
            m = np.abs(values[tensor][mask.astype(bool)]).max(axis=0)
            maxima[tensor] = np.maximum(maxima[tensor], m) if tensor in maxima else m
    return {node: maxima[tensor] for node, tensor in sorted(inputs.items())}


def smooth_minilm(model, maxima: dict[str, np.ndarray], alpha: float = SMOOTH_ALPHA,
                  layers: int = LAYERS):
    """The MiniLM graph ``model`` (from :func:`build_minilm_graph`) with SmoothQuant-style
    per-channel scaling at the inputs of the MatMuls that are quantised (Q, K, V, the attention
    output and the FFN input projections of each layer): the same function in float, with the
    activations' outlying channels moved into the weights.

    For each group of MatMuls sharing an input, ``s_j = max|x_j|^alpha / max|W_j|^(1-alpha)``
    (``maxima`` from :func:`activation_maxima`; clipped to [0.01, 100]); the weights' rows are
    multiplied by ``s``, and the input divided by it: Q, K and V by one shared ``Mul`` node, the
    FFN input by another, and the attention output projection by dividing the value
    projection's columns and bias (attention mixes tokens, not channels: exact, and free).
    ``model`` is changed in place and returned.

    Examples
    --------
    >>> import onnx  # doctest: +SKIP
    >>> fp32 = export_minilm()  # doctest: +SKIP
    >>> texts = ["a red apple", "The capital of France is Paris."]  # doctest: +SKIP
    >>> smoothed = smooth_minilm(onnx.load(str(fp32)), activation_maxima(
    ...     fp32, texts, minilm_files().tokenizer()))  # doctest: +SKIP
    """
    import onnx
    from onnx import numpy_helper

    if isinstance(alpha, bool) or not isinstance(alpha, (int, float)) or not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be a number in [0, 1], got {alpha!r}")
    inits = {i.name: i for i in model.graph.initializer}
    by_name = {n.name: n for n in model.graph.node}

    def array(name: str) -> np.ndarray:
        return numpy_helper.to_array(inits[name])

    def put(name: str, value: np.ndarray) -> None:
        inits[name].CopyFrom(numpy_helper.from_array(value.astype(np.float32), name))

    muls = {}
    for i in range(layers):
        for names, fold in (([f"l{i}.query.mm", f"l{i}.key.mm", f"l{i}.value.mm"], False),
                            ([f"l{i}.attn.mm"], True), ([f"l{i}.ffn.in.mm"], False)):
            missing = [n for n in names if n not in maxima or n not in by_name]
            if missing:
                raise ValueError(f"maxima must cover every smoothed MatMul, missing {missing}")
            x_max = np.max([maxima[n] for n in names], axis=0)
            w_max = np.max([np.abs(array(by_name[n].input[1])).max(axis=1) for n in names],
                           axis=0)
            s = np.clip(np.maximum(x_max, 1e-5) ** alpha
                        / np.maximum(w_max, 1e-5) ** (1 - alpha), 1e-2, 1e2).astype(np.float32)
            for n in names:
                put(by_name[n].input[1], array(by_name[n].input[1]) * s[:, None])
            if fold:
                value_w = by_name[f"l{i}.value.mm"].input[1]
                value_b = by_name[f"l{i}.value"].input[1]
                put(value_w, array(value_w) / s[None, :])
                put(value_b, array(value_b) / s)
                continue
            x = by_name[names[0]].input[0]
            inverse = numpy_helper.from_array((1.0 / s).astype(np.float32), f"{names[0]}.sq")
            model.graph.initializer.append(inverse)
            scaled = f"{names[0]}.sq.x"
            muls[x] = onnx.helper.make_node("Mul", [x, inverse.name], [scaled], name=scaled)
            for n in names:
                by_name[n].input[0] = scaled
    nodes = []
    for node in model.graph.node:
        nodes.append(node)
        nodes.extend(muls[o] for o in node.output if o in muls)
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    return model


def length_batches(lengths: Sequence[int], batch_size: int, max_tokens: int
                   ) -> list[np.ndarray]:
    """Positions grouped for padding-light batches: sorted by length, at most ``batch_size``
    texts and (but for a single text) ``max_tokens`` padded tokens per batch.

    Examples
    --------
    >>> [b.tolist() for b in length_batches([5, 1, 9, 2, 8], batch_size=2, max_tokens=100)]
    [[1, 3], [0, 4], [2]]
    >>> [b.tolist() for b in length_batches([5, 1, 9, 2, 8], batch_size=8, max_tokens=16)]
    [[1, 3, 0], [4], [2]]
    """
    order = np.argsort(np.asarray(lengths, np.int64), kind="stable")
    batches, start = [], 0
    while start < len(order):
        end = start + 1
        while end < len(order) and end - start < batch_size \
                and (end - start + 1) * lengths[order[end]] <= max_tokens:
            end += 1
        batches.append(order[start:end])
        start = end
    return batches


class OnnxMiniLMEmbedder:
    """all-MiniLM-L6-v2 on ONNX Runtime (``quantize``: dynamic int8; ``smooth``: of the
    SmoothQuant-scaled graph), 384-dimensional unit vectors like the torch ``minilm`` embedder's.

    Examples
    --------
    >>> e = OnnxMiniLMEmbedder(quantize=True)  # doctest: +SKIP
    >>> e.encode(["a red apple"]).shape  # doctest: +SKIP
    (1, 384)
    """

    def __init__(self, quantize: bool = False, *, smooth: bool = False, batch_size: int = 64,
                 max_tokens: int = 8192, threads: int | None = None,
                 directory: str | Path | None = None) -> None:
        for name, value in (("batch_size", batch_size), ("max_tokens", max_tokens)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        try:
            import onnxruntime as ort
        except ImportError:
            raise ImportError("the minilm-onnx embedders need the dense-onnx extra: pip install "
                              "'memlab[dense-onnx]' (onnxruntime, onnx, tokenizers)") from None
        if not isinstance(smooth, bool) or (smooth and not quantize):
            raise ValueError(f"smooth must be True only with quantize=True, got {smooth!r}")
        self.name = "all-MiniLM-L6-v2-onnx-" + (f"int8-{INT8_VERSION}" if smooth else
                                                "int8" if quantize else "fp32")
        self.path = export_minilm(directory, quantize=quantize, smooth=smooth)
        self.tokenizer = minilm_files().tokenizer()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads or len(os.sched_getaffinity(0))
        options.inter_op_num_threads = 1
        # no busy-waiting between ops: on a shared machine spinning threads starve each other
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.session = ort.InferenceSession(str(self.path), options,
                                            providers=["CPUExecutionProvider"])
        # one query on one thread: a dozen tokens give the pool nothing to share, and waking a
        # second thread ~100 times per query costs more than it saves on a busy machine
        single = ort.SessionOptions()
        single.intra_op_num_threads = single.inter_op_num_threads = 1
        single.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        self.single = ort.InferenceSession(str(self.path), single,
                                           providers=["CPUExecutionProvider"])
        self.batch_size, self.max_tokens = batch_size, max_tokens

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length mean-pooled vectors, one row per text (384 columns).

        Examples
        --------
        >>> OnnxMiniLMEmbedder().encode(["a red apple", "a green pear"]).shape  # doctest: +SKIP
        (2, 384)
        """
        texts = check_texts(texts)
        session = self.single if len(texts) == 1 else self.session
        return encode_by_length(
            self.tokenizer, texts,
            lambda ids, mask: session.run(None, {"input_ids": ids, "attention_mask": mask})[0],
            self.batch_size, self.max_tokens)



def padded_batch(encodings: Sequence, lengths: Sequence[int], rows: Sequence[int]
                 ) -> tuple[np.ndarray, np.ndarray]:
    """The ``input_ids`` and ``attention_mask`` (int64, right-padded to the batch's longest)
    of the tokenizer ``encodings`` at positions ``rows``.

    Examples
    --------
    >>> from types import SimpleNamespace as E
    >>> ids, mask = padded_batch([E(ids=[5, 6]), E(ids=[7])], [2, 1], [0, 1])
    >>> ids.tolist(), mask.tolist()
    ([[5, 6], [7, 0]], [[1, 1], [1, 0]])
    """
    width = max(lengths[i] for i in rows)
    ids = np.zeros((len(rows), width), np.int64)
    mask = np.zeros((len(rows), width), np.int64)
    for r, i in enumerate(rows):
        ids[r, :lengths[i]] = encodings[i].ids
        mask[r, :lengths[i]] = 1
    return ids, mask


def mean_pool(hidden: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """Sentence vectors: the mean of ``hidden`` (batch, tokens, dim) over the tokens ``mask``
    keeps, scaled to unit length (float32).

    Examples
    --------
    >>> mean_pool(np.array([[[3.0, 0.0], [0.0, 4.0]]]), np.array([[1, 0]])).tolist()
    [[1.0, 0.0]]
    """
    m = mask[:, :, None].astype(np.float32)
    pooled = (hidden * m).sum(axis=1) / np.maximum(m.sum(axis=1), 1e-9)
    norms = np.linalg.norm(pooled, axis=1, keepdims=True)
    return (pooled / np.maximum(norms, 1e-12)).astype(np.float32, copy=False)

def encode_by_length(tokenizer, texts: Sequence[str], run, batch_size: int, max_tokens: int,
                     dim: int = 384) -> np.ndarray:
    """Tokenise ``texts``, run padding-light batches (:func:`length_batches`) through ``run(ids,
    mask) -> last_hidden_state``, mean-pool over the mask and L2-normalise, as
    sentence-transformers does for MiniLM; rows in the order of ``texts``.

    Examples
    --------
    >>> from memlab.signals.embedders._assets import minilm_files  # doctest: +SKIP
    >>> fake = lambda ids, mask: np.ones(ids.shape + (4,), np.float32)
    >>> encode_by_length(minilm_files().tokenizer(), ["a b", "c"], fake, 8, 64, dim=4)[0]
    ... # doctest: +SKIP
    array([0.5, 0.5, 0.5, 0.5], dtype=float32)
    """
    out = np.zeros((len(texts), dim), np.float32)
    if not texts:
        return out
    encodings = tokenizer.encode_batch(texts)
    lengths = [len(e.ids) for e in encodings]
    for batch in length_batches(lengths, batch_size, max_tokens):
        ids, mask = padded_batch(encodings, lengths, batch)
        out[batch] = mean_pool(run(ids, mask), mask)
    return out
