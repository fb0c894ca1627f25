"""How far MuSiQue R@5 moves under random, unbiased vector noise of int8's size (issue 19,
round 7): the null distribution against which int8's -0.8 is read.

    PYTHONPATH=. <dense venv>/bin/python benchmarks/int8_noise_null.py [../shared/datasets]
        [--cosine 0.9964] [--seeds 6]

Each "embedder" is the fp32 ONNX vectors (``minilm-onnx``, through its cache) plus isotropic
Gaussian noise, renormalised: per component ``sigma = sqrt((1/c^2 - 1) / 384)`` so that the
expected cosine to fp32 is ``c`` (``--cosine``; 0.9964 is the old ``minilm-onnx-int8``'s mean
cosine to fp32 on the language-reference check text of ``benchmarks/int8_fidelity.py``, 0.9988
the SmoothQuant variant's). The noise of a text is seeded by the text and the seed, so a text
gets the same vector wherever it appears. MuSiQue is replayed as ``benchmarks/int8_diagnose.py``
does (``dense-start.json``, budgets off, k = 20); prints each seed's R@2 / R@5 / R@10 / MRR minus
fp32's, and their spread.
"""

from __future__ import annotations

import hashlib
import sys
from pathlib import Path

import numpy as np

from benchmarks.int8_diagnose import START, _option
from memlab.datasets import shared_data_dir
from memlab.datasets.loaders import load_hipporag
from memlab.harness.replay import replay
from memlab.signals.dense import DenseConfig, get_embedder, register_embedder


class NoisyFp32:
    def __init__(self, cosine: float, seed: int) -> None:
        self.name = f"noisy-fp32-{cosine}-{seed}"
        self.sigma = float(np.sqrt((1 / cosine ** 2 - 1) / 384))
        self.seed = seed
        self.base = None  # made on first use: get_embedder holds its lock while making us

    def encode(self, texts):
        if self.base is None:
            self.base = get_embedder(DenseConfig(embedder="minilm-onnx"))
        v = self.base.encode(list(texts)).astype(np.float64)
        for i, t in enumerate(texts):
            s = int.from_bytes(hashlib.sha256(f"{self.seed}\x00{t}".encode()).digest()[:8],
                               "little")
            v[i] += np.random.default_rng(s).standard_normal(v.shape[1]) * self.sigma
        return (v / np.linalg.norm(v, axis=1, keepdims=True)).astype(np.float32)


def scores(trace, embedder: str) -> dict:
    config = START.replace(dense=START.dense.__class__(
        **{**START.dense.to_dict(), "embedder": embedder, "cache_dir": ""}))
    m = replay(trace, config, k=20, measures=["R@2", "R@5", "R@10", "MRR"], seed=0,
               record_candidates=False, progress=False).metrics
    return (m.groupby("measure")["value"].mean() * 100).to_dict()


def main(argv: list[str]) -> None:
    cosine = float(_option(argv, "--cosine", ["0.9964"])[0])
    seeds = int(_option(argv, "--seeds", ["6"])[0])
    used = {str(cosine), str(seeds), *_option(argv, "--cosine", []), *_option(argv, "--seeds", [])}
    paths = [a for a in argv if not a.startswith("--") and a not in used]
    root = Path(paths[0]) if paths else shared_data_dir()
    trace = load_hipporag(root / "hipporag" / "musique_train.json",
                          root / "hipporag" / "musique_train_corpus.json")
    ref = scores(trace, "minilm-onnx")
    print("fp32", {k: round(v, 2) for k, v in ref.items()}, flush=True)
    deltas = []
    for seed in range(seeds):
        name = f"noisy-fp32-{cosine}-{seed}"
        register_embedder(name, lambda seed=seed: NoisyFp32(cosine, seed), replace=True)
        d = {k: v - ref[k] for k, v in scores(trace, name).items()}
        deltas.append(d)
        print(f"seed {seed}: " + "  ".join(f"{k} {v:+.2f}" for k, v in sorted(d.items())),
              flush=True)
    for k in sorted(ref):
        x = np.array([d[k] for d in deltas])
        print(f"{k}: mean {x.mean():+.2f}, sd {x.std(ddof=1):.2f}, range [{x.min():+.2f}, "
              f"{x.max():+.2f}], |delta| > 0.5 in {(np.abs(x) > 0.5).sum()} of {len(x)}")


if __name__ == "__main__":
    main(sys.argv[1:])
