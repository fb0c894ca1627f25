"""Model-backed embedders for dense relevance beyond the torch one (issue 19).

- :mod:`~memlab.signals.embedders.onnx_minilm`: all-MiniLM-L6-v2 on ONNX Runtime, fp32 or
  dynamic int8 (registered as ``minilm-onnx`` and ``minilm-onnx-int8``; extra ``dense-onnx``).
- :mod:`~memlab.signals.embedders.openvino_minilm`: the same exported graph on OpenVINO, bf16
  matrix products on AMX where the CPU has them (``minilm-openvino``; extra ``dense-openvino``).
- :mod:`~memlab.signals.embedders.openvino_int8`: the same graph with NNCF int8 matrix products
  on OpenVINO, batches through an asynchronous queue (``minilm-openvino-int8``; extra
  ``dense-openvino-int8``).
- :mod:`~memlab.signals.embedders.static`: static vectors distilled from it with model2vec
  (``minilm-static``; extra ``dense-static``).

Importing this package imports none of their dependencies; the registry and the cache are in
:mod:`memlab.signals.dense`.
"""
