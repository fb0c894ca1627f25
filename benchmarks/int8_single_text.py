"""MuSiQue under the int8 MiniLM paths with every text encoded on its own (batch size 1), so
that no text's dynamic activation range depends on its batch-mates (issue 19, round 7).

    PYTHONPATH=. <dense venv>/bin/python benchmarks/int8_single_text.py [../shared/datasets]

Replays MuSiQue as ``benchmarks/int8_diagnose.py`` does (``dense-start.json``, graph budgets
off, k = 20) with ``minilm-onnx-int8`` and ``minilm-onnx-int8-sq`` built with ``batch_size=1``
(no embedding cache), and prints R@2 / R@5 / R@10 / MRR.
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.int8_noise_null import scores
from memlab.datasets import shared_data_dir
from memlab.datasets.loaders import load_hipporag
from memlab.signals.dense import register_embedder
from memlab.signals.embedders.onnx_minilm import OnnxMiniLMEmbedder


def main(argv: list[str]) -> None:
    root = Path(argv[0]) if argv else shared_data_dir()
    trace = load_hipporag(root / "hipporag" / "musique_train.json",
                          root / "hipporag" / "musique_train_corpus.json")
    for smooth in (False, True):
        name = f"int8-one-text-at-a-time{'-sq' if smooth else ''}"
        register_embedder(name, lambda smooth=smooth: OnnxMiniLMEmbedder(
            quantize=True, smooth=smooth, batch_size=1), replace=True)
        print(name, {k: round(v, 2) for k, v in sorted(scores(trace, name).items())}, flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
