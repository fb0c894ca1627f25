"""An incremental BM25 index.

Why not one ``scipy.sparse`` doc × term matrix: scipy's compressed matrices cannot grow in place, so
every added document would copy the whole matrix (or force periodic rebuilds). The index instead
keeps one growable posting array pair (document indices, term frequencies) per term, with capacity
doubling, so adding a document appends to its terms' postings only, in amortised O(terms). A query
reads only its terms' postings; :meth:`BM25Index.doc_term_matrix` exposes the same data as a
``scipy.sparse.csr_array`` for analysis.

``k1`` and ``b`` are query-time arguments (the index stores raw term frequencies and lengths), so a
configuration sweep never re-indexes.

Bookkeeping invariant: after any sequence of :meth:`BM25Index.add`, :meth:`~BM25Index.add_many`,
:meth:`~BM25Index.replace` and :meth:`~BM25Index.remove`, the index scores exactly as a fresh index
built from the surviving documents: the vocabulary holds exactly the terms of at least one live
document (a term whose last document left is dropped, so it cannot enter the Okapi mean-idf floor),
and ``N`` and the average length count live documents only.

Reads go through a frozen snapshot when one is current: the postings concatenated into one CSR
(term × document) array pair plus, per ``(k1, b)``, the finished BM25 weight of every
(term, document) posting, so a query only gathers and sums. Any write drops the snapshot; it is
rebuilt lazily once the queries answered without it have done about as much work as a rebuild
costs (so a write-heavy stream never pays for rebuilds it does not use, and a read-heavy one pays
for one rebuild over many queries). :meth:`BM25Index.freeze` builds it at once. Without the
snapshot, scores are computed from the growable postings directly; both give the same bits (same
formula, same summation order). With numba installed (the ``fast`` extra) single-query top-k and
batch top-k run as compiled loops over the snapshot; ``backend="numpy"`` keeps the pure-numpy
reference path, tested equal.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import threading
from collections import Counter
from itertools import repeat
from typing import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from memlab._arrays import Growable, find_sorted, group_sum

__all__ = ["BACKENDS", "BM25Index", "IDF_VARIANTS", "SNAPSHOT_POLICIES", "lookup_scores",
           "numba_available"]

IDF_VARIANTS = ("lucene", "okapi")
BACKENDS = ("auto", "numba", "numpy")
SNAPSHOT_POLICIES = ("lazy", "always", "never")
_MAX_CACHED_WEIGHTS = 4  # (k1, b) weight arrays kept per snapshot (a sweep evicts the oldest)
_TERM_WORK = 256  # postings-equivalent cost of one query term on the unfrozen path (dispatch)
_kernels = None


@functools.lru_cache(maxsize=1)
def numba_available() -> bool:
    """Whether numba (the ``fast`` extra) is installed, so ``backend="auto"`` compiles.

    Examples
    --------
    >>> isinstance(numba_available(), bool)
    True
    """
    return importlib.util.find_spec("numba") is not None


def _numba_kernels():
    """The compiled kernels, imported on first use (numba's import costs ~0.5 s)."""
    global _kernels
    if _kernels is None:
        from memlab.signals import _bm25_numba
        _kernels = _bm25_numba
    return _kernels


def _select_top_k(docs: np.ndarray, scores: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The best ``k`` of ``(docs, scores)``: score descending, then document ascending.

    ``np.partition`` finds the k-th best score; every candidate at least as good (ties included)
    is then ordered exactly, so the answer equals a full ``lexsort`` cut at ``k``.
    """
    if len(scores) > k:
        threshold = np.partition(scores, len(scores) - k)[len(scores) - k]
        keep = scores >= threshold
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))[:k]
    return docs[order].astype(np.int64, copy=False), scores[order]


_NO_MASK = np.zeros(1, dtype=np.bool_)


def _check_k(k) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return int(k)


def _check_k1_b(k1, b) -> tuple[float, float]:
    k1, b = float(k1), float(b)
    if not (math.isfinite(k1) and k1 >= 0):
        raise ValueError(f"k1 must be a finite number >= 0, got {k1!r}")
    if not 0.0 <= b <= 1.0:
        raise ValueError(f"b must be in [0, 1], got {b!r}")
    return k1, b


class _Frozen:
    """A read snapshot: postings as CSR over term ids, and BM25 weights per ``(k1, b)``."""

    __slots__ = ("indptr", "docs", "n_docs", "weights")

    def __init__(self, indptr: np.ndarray, docs: np.ndarray, n_docs: int) -> None:
        self.indptr, self.docs, self.n_docs = indptr, docs, n_docs
        self.weights: dict[tuple[float, float], np.ndarray] = {}


def lookup_scores(docs: np.ndarray, scores: np.ndarray, wanted: np.ndarray) -> np.ndarray:
    """Scores of ``wanted`` documents from a ``(docs ascending, scores)`` result; 0 when absent.

    Examples
    --------
    >>> lookup_scores(np.array([2, 5]), np.array([0.5, 0.7]), np.array([5, 3])).tolist()
    [0.7, 0.0]
    """
    pos, found = find_sorted(docs, np.asarray(wanted, dtype=np.int64))
    out = np.zeros(len(pos))
    out[found] = scores[pos[found]]
    return out


class BM25Index:
    """Incremental BM25 over token lists; documents are numbered 0, 1, 2, … in order of addition.

    Parameters
    ----------
    idf : {"lucene", "okapi"}
        ``"lucene"``: ``log(1 + (N - df + 0.5) / (df + 0.5))``, never negative (the default, since
        relevance is normalised by its maximum). ``"okapi"``: rank-bm25's ``BM25Okapi`` idf,
        ``log((N - df + 0.5) / (df + 0.5))`` with negative values replaced by
        ``epsilon * mean idf over the vocabulary``.
    epsilon : float
        The okapi floor factor (rank-bm25's default 0.25).
    backend : {"auto", "numba", "numpy"}
        Who runs top-k queries over the snapshot: numba's compiled loops (the ``fast`` extra;
        ``"auto"`` uses them when numba is installed) or numpy (the reference; same bits).
    snapshot : {"lazy", "always", "never"}
        When reads build the frozen snapshot after a write: once the unfrozen queries have done
        about a rebuild's work (``"lazy"``), at the first read (``"always"``), or only on
        :meth:`freeze` (``"never"``).

    Examples
    --------
    >>> index = BM25Index()
    >>> index.add(["jwt", "auth", "token"]), index.add(["deploy", "friday"])
    (0, 1)
    >>> docs, scores = index.scores(["jwt"])
    >>> docs.tolist(), round(float(scores[0]), 4)
    ([0], 0.6407)
    """

    def __init__(self, idf: str = "lucene", epsilon: float = 0.25, backend: str = "auto",
                 snapshot: str = "lazy") -> None:
        if idf not in IDF_VARIANTS:
            raise ValueError(f"idf must be one of {IDF_VARIANTS}, got {idf!r}")
        if snapshot not in SNAPSHOT_POLICIES:
            raise ValueError(f"snapshot must be one of {SNAPSHOT_POLICIES}, got {snapshot!r}")
        self.snapshot_policy = snapshot
        self.backend = backend
        self.idf_variant = idf
        self.epsilon = float(epsilon)
        self._vocab: dict[str, int] = {}
        self._post_docs: list[Growable] = []
        self._post_tfs: list[Growable] = []
        self._free: list[int] = []  # term slots whose term left the vocabulary (empty postings)
        self._doc_len = Growable(np.float64, 64)
        self._total_len = 0.0
        self._removed: set[int] = set()  # document numbers taken out by remove()
        self._okapi_cache: tuple[int, float] | None = None
        self._n_postings = 0  # live postings (the cost of a snapshot rebuild)
        self._frozen: _Frozen | None = None
        self._pending: dict[tuple[float, float], int] = {}  # unfrozen query work since a write
        self._build_lock = threading.Lock()
        self._scratch_pool: list = []  # scratch sets of the compiled kernels (_run_kernel)

    @property
    def backend(self) -> str:
        """``"auto"``, ``"numba"`` or ``"numpy"``; may be changed at any time (the answers do
        not change, only who computes them)."""
        return self._backend

    @backend.setter
    def backend(self, backend: str) -> None:
        if backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
        if backend == "numba" and not numba_available():
            raise ValueError("backend='numba' needs numba: pip install 'memlab[fast]'")
        self._backend = backend
        self._use_numba = backend == "numba" or (backend == "auto" and numba_available())

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        for name in ("_build_lock", "_frozen"):
            del state[name]
        state["_pending"], state["_scratch_pool"] = {}, []
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        self._frozen = None
        self._build_lock = threading.Lock()

    def _written(self) -> None:
        """Every write: scores change, so the snapshot and the okapi mean idf go."""
        self._okapi_cache = None
        self._frozen = None
        self._pending = {}

    # ----------------------------------------------------------------- writing
    def __len__(self) -> int:
        """Document numbers handed out so far (removed documents keep their number)."""
        return self._doc_len.size

    @property
    def live_documents(self) -> int:
        """Documents that count in ``N``: added and not removed."""
        return self._doc_len.size - len(self._removed)

    @property
    def vocabulary_size(self) -> int:
        """Distinct terms of the live documents."""
        return len(self._vocab)

    def _term_id(self, term: str) -> int:
        tid = self._vocab.get(term)
        if tid is None:
            if self._free:  # reuse an emptied slot (its postings are empty)
                tid = self._vocab[term] = self._free.pop()
            else:
                tid = self._vocab[term] = len(self._post_docs)
                self._post_docs.append(Growable(np.int32))
                self._post_tfs.append(Growable(np.float32))
        return tid

    def _drop_posting(self, term: str, doc: int) -> None:
        """Delete ``doc`` from ``term``'s postings; a term left with none leaves the vocabulary."""
        tid = self._vocab[term]
        docs = self._post_docs[tid]
        pos = int(np.searchsorted(docs.view(), doc))
        docs.delete(pos)
        self._post_tfs[tid].delete(pos)
        self._n_postings -= 1
        if docs.size == 0:
            del self._vocab[term]
            self._free.append(tid)

    def _compact(self) -> None:
        """Renumber terms 0..V-1 without the emptied slots (keeps the vocabulary's order)."""
        if not self._free:
            return
        order = sorted(self._vocab.items(), key=lambda kv: kv[1])
        self._post_docs = [self._post_docs[tid] for _, tid in order]
        self._post_tfs = [self._post_tfs[tid] for _, tid in order]
        self._vocab = {term: new for new, (term, _) in enumerate(order)}
        self._free = []

    def _check_doc(self, doc: int) -> None:
        if not 0 <= doc < self._doc_len.size or doc in self._removed:
            raise ValueError(f"document {doc} is not a live document of this index")

    def add(self, tokens: Sequence[str]) -> int:
        """Index one document and return its number. Touches only its own terms' postings."""
        doc = self._doc_len.size
        counts: dict[str, int] = {}
        for tok in tokens:
            counts[tok] = counts.get(tok, 0) + 1
        for term, tf in counts.items():
            tid = self._term_id(term)
            self._post_docs[tid].append(doc)
            self._post_tfs[tid].append(tf)
        self._doc_len.append(len(tokens))
        self._total_len += len(tokens)
        self._n_postings += len(counts)
        self._written()
        return doc

    def replace(self, doc: int, old_tokens: Sequence[str], new_tokens: Sequence[str]) -> None:
        """Re-index document ``doc`` (which was indexed from ``old_tokens``) as ``new_tokens``.

        Only the terms of the two versions are touched; postings stay sorted by document, so the
        document keeps its number.

        Examples
        --------
        >>> index = BM25Index(); _ = index.add(["jwt", "auth"]); _ = index.add(["deploy"])
        >>> index.replace(0, ["jwt", "auth"], ["deploy", "friday"])
        >>> index.scores(["jwt"])[0].tolist(), index.scores(["deploy"])[0].tolist()
        ([], [0, 1])
        """
        self._check_doc(doc)
        old, new = Counter(old_tokens), Counter(new_tokens)
        for term in sorted(old.keys() - new.keys()):
            self._drop_posting(term, doc)
        for term, tf in new.items():
            tid = self._term_id(term)
            docs = self._post_docs[tid]
            pos = int(np.searchsorted(docs.view(), doc))
            if pos < docs.size and docs.data[pos] == doc:
                self._post_tfs[tid].data[pos] = tf
            else:
                docs.insert(pos, doc)
                self._post_tfs[tid].insert(pos, tf)
                self._n_postings += 1
        self._total_len += len(new_tokens) - self._doc_len.data[doc]
        self._doc_len.data[doc] = len(new_tokens)
        self._written()

    def remove(self, doc: int, tokens: Sequence[str]) -> None:
        """Take document ``doc`` (which was indexed from ``tokens``) out of the index.

        It keeps its number (later documents are not renumbered) but no longer counts in ``N``,
        the average length or any term's document frequency; terms it alone held leave the
        vocabulary.

        Examples
        --------
        >>> index = BM25Index(); _ = index.add(["jwt", "auth"]); _ = index.add(["deploy"])
        >>> index.remove(0, ["jwt", "auth"])
        >>> index.live_documents, index.vocabulary_size, index.scores(["jwt"])[0].tolist()
        (1, 1, [])
        """
        self._check_doc(doc)
        for term in sorted(set(tokens)):
            self._drop_posting(term, doc)
        self._total_len -= self._doc_len.data[doc]
        self._doc_len.data[doc] = 0.0
        self._removed.add(doc)
        self._written()

    def add_many(self, token_lists: Iterable[Sequence[str]]) -> range:
        """Index many documents at once.

        Term ids are assigned in one pass over the tokens; term frequencies and posting order come
        from one ``np.unique`` over ``(term, doc)`` keys, and each touched term's postings are
        extended once.
        """
        token_lists = list(token_lists)
        self._compact()  # new term ids are len(vocab), len(vocab) + 1, …: no emptied slots
        first = self._doc_len.size
        lengths = np.fromiter(map(len, token_lists), dtype=np.int64, count=len(token_lists))
        vocab = self._vocab
        setdefault = vocab.setdefault
        old_vocab = len(vocab)
        ids = [setdefault(tok, len(vocab)) for tokens in token_lists for tok in tokens]
        for _ in range(old_vocab, len(vocab)):
            self._post_docs.append(Growable(np.int32))
            self._post_tfs.append(Growable(np.float32))
        if ids:
            docs = np.repeat(np.arange(first, first + len(token_lists), dtype=np.int64), lengths)
            keys, tfs = np.unique((np.asarray(ids, dtype=np.int64) << 32) | docs, return_counts=True)
            terms = keys >> 32  # sorted by term, then document: posting order
            doc_ids = (keys & 0xFFFFFFFF).astype(np.int32)
            tfs = tfs.astype(np.float32)
            starts = np.flatnonzero(np.r_[True, terms[1:] != terms[:-1]])
            ends = np.r_[starts[1:], len(terms)]
            for tid, s, e in zip(terms[starts].tolist(), starts.tolist(), ends.tolist()):
                self._post_docs[tid].extend(doc_ids[s:e])
                self._post_tfs[tid].extend(tfs[s:e])
            self._n_postings += len(keys)
        self._doc_len.extend(lengths.astype(np.float64))
        self._total_len += float(lengths.sum())
        self._written()
        return range(first, self._doc_len.size)

    # ----------------------------------------------------------------- reading
    def _idf(self, tid: int, n_docs: int) -> float:
        df = self._post_docs[tid].size
        if self.idf_variant == "lucene":
            return math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
        idf = math.log(n_docs - df + 0.5) - math.log(df + 0.5)
        if idf < 0:
            return self.epsilon * self._okapi_mean_idf(n_docs)
        return idf

    def _okapi_mean_idf(self, n_docs: int) -> float:
        # rank-bm25 averages idf over the whole vocabulary (the live documents' terms: emptied
        # slots are skipped); cached until the next write.
        if self._okapi_cache is None or self._okapi_cache[0] != n_docs:
            df = np.fromiter((p.size for p in self._post_docs), dtype=np.float64,
                             count=len(self._post_docs))
            df = df[df > 0]
            idf = np.log(n_docs - df + 0.5) - np.log(df + 0.5)
            self._okapi_cache = (n_docs, float(idf.mean()) if len(idf) else 0.0)
        return self._okapi_cache[1]

    def _query_terms(self, tokens: Sequence[str]) -> dict[int, int]:
        """Term id -> count in the query, ascending term ids: every read path sums a document's
        contributions in this order, so all give the same bits."""
        counts: dict[int, int] = {}
        for tok in tokens:
            tid = self._vocab.get(tok)
            if tid is not None:
                counts[tid] = counts.get(tid, 0) + 1
        return dict(sorted(counts.items())) if len(counts) > 1 else counts

    def _term_weights(self, tid: int, n_docs: int, avgdl: float, k1: float, b: float
                      ) -> tuple[np.ndarray, np.ndarray]:
        """One term's postings and their BM25 weights, from the growable postings (the reference
        formula; the snapshot evaluates the same expression elementwise)."""
        docs = self._post_docs[tid].view()
        tf = self._post_tfs[tid].view().astype(np.float64)
        norm = k1 * (1.0 - b + b * self._doc_len.view()[docs] / avgdl) if avgdl > 0 else k1
        return docs, self._idf(tid, n_docs) * (tf * (k1 + 1.0) / (tf + norm))

    def _build_frozen(self) -> _Frozen:
        sizes = np.fromiter((p.size for p in self._post_docs), dtype=np.int64,
                            count=len(self._post_docs))
        index_dtype = np.int32 if self._n_postings < 2**31 - 1 else np.int64  # scipy's choice
        indptr = np.zeros(len(sizes) + 1, dtype=index_dtype)
        np.cumsum(sizes, out=indptr[1:])
        docs = (np.concatenate([p.view() for p in self._post_docs]) if len(sizes)
                else np.empty(0, np.int32)).astype(index_dtype, copy=False)
        return _Frozen(indptr, docs, len(self))

    def _frozen_weights(self, frozen: _Frozen, k1: float, b: float) -> np.ndarray:
        n_docs = self.live_documents
        avgdl = self._total_len / n_docs if n_docs else 0.0
        sizes = np.diff(frozen.indptr)
        if not len(sizes) or not sizes.sum():
            return np.empty(0)
        idf = np.array([self._idf(tid, n_docs) if size else 0.0
                        for tid, size in enumerate(sizes.tolist())])
        tf = np.concatenate([p.view() for p in self._post_tfs]).astype(np.float64)
        norm = (k1 * (1.0 - b + b * self._doc_len.view()[frozen.docs] / avgdl) if avgdl > 0
                else k1)
        return np.repeat(idf, sizes) * (tf * (k1 + 1.0) / (tf + norm))

    def freeze(self, *, k1: float = 1.2, b: float = 0.75) -> None:
        """Build the read snapshot for ``(k1, b)`` now (otherwise built once queries have paid for
        it). Useful after a bulk load, before a burst of queries.

        Examples
        --------
        >>> index = BM25Index(); _ = index.add_many([["jwt", "auth"], ["deploy"]])
        >>> index.freeze(); index.is_frozen()
        True
        >>> _ = index.add(["friday"]); index.is_frozen()
        False
        """
        k1, b = _check_k1_b(k1, b)
        self._snapshot(k1, b, None)

    def is_frozen(self, *, k1: float = 1.2, b: float = 0.75) -> bool:
        """Whether a current snapshot holds the weights for ``(k1, b)``."""
        frozen = self._frozen
        return frozen is not None and (float(k1), float(b)) in frozen.weights

    def _snapshot(self, k1: float, b: float, work
                  ) -> tuple[_Frozen, np.ndarray] | None:
        """The snapshot and its ``(k1, b)`` weights if current, or worth building now that the
        unfrozen queries have done ``work()`` more (``None``: build unconditionally); else
        None."""
        key = (k1, b)
        frozen = self._frozen
        if frozen is not None:
            weights = frozen.weights.get(key)
            if weights is not None:
                return frozen, weights
        if work is not None and self.snapshot_policy == "never":
            return None
        if work is not None and self.snapshot_policy == "lazy":
            pending = self._pending.get(key, 0) + work()
            if pending < self._n_postings:
                self._pending[key] = pending  # a racing reader may lose an increment: harmless
                return None
        with self._build_lock:  # concurrent readers (the store's shared lock) build once
            frozen = self._frozen
            if frozen is None:
                frozen = self._build_frozen()
            weights = frozen.weights.get(key)
            if weights is None:
                weights = self._frozen_weights(frozen, k1, b)
                if len(frozen.weights) >= _MAX_CACHED_WEIGHTS:
                    del frozen.weights[next(iter(frozen.weights))]
                frozen.weights[key] = weights
            self._frozen = frozen
            self._pending.pop(key, None)
        return frozen, weights

    def _query_work(self, terms: dict[int, int]) -> int:
        return sum(self._post_docs[tid].size for tid in terms) + _TERM_WORK * len(terms)

    def _parts(self, terms: dict[int, int], k1: float, b: float, snapshot
               ) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Each query term's postings and ``qtf * weight`` contributions."""
        id_parts, score_parts = [], []
        if snapshot is not None:
            frozen, weights = snapshot
            indptr = frozen.indptr
            for tid, qtf in terms.items():
                lo, hi = indptr[tid], indptr[tid + 1]
                id_parts.append(frozen.docs[lo:hi])
                score_parts.append(qtf * weights[lo:hi])
            return id_parts, score_parts
        n_docs = self.live_documents
        avgdl = self._total_len / n_docs
        for tid, qtf in terms.items():
            docs, weight = self._term_weights(tid, n_docs, avgdl, k1, b)
            id_parts.append(docs)
            score_parts.append(qtf * weight)
        return id_parts, score_parts

    def _accumulate(self, id_parts: list[np.ndarray], score_parts: list[np.ndarray]
                    ) -> tuple[np.ndarray, np.ndarray]:
        if len(id_parts) == 1:
            return id_parts[0].astype(np.int64), score_parts[0]
        ids = np.concatenate(id_parts)
        contrib = np.concatenate(score_parts)
        if len(ids) * 8 > self.live_documents:
            # Many postings: a dense accumulator is cheaper than sorting them.
            acc = np.bincount(ids, weights=contrib, minlength=len(self))
            hit = np.zeros(len(self), dtype=bool)
            hit[ids] = True
            docs = np.flatnonzero(hit)
            return docs, acc[docs]
        docs, inverse = np.unique(ids, return_inverse=True)
        return docs.astype(np.int64), np.bincount(inverse, weights=contrib)

    def scores(self, tokens: Sequence[str], *, k1: float = 1.2, b: float = 0.75
               ) -> tuple[np.ndarray, np.ndarray]:
        """BM25 of every document containing at least one query term.

        Returns ``(doc_ids, scores)``, ``doc_ids`` ascending. A repeated query term counts once per
        occurrence (as in rank-bm25 and Lucene). Documents matching no term are absent.
        """
        n_docs = self.live_documents
        terms = self._query_terms(tokens)
        if not terms or n_docs == 0:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        k1, b = float(k1), float(b)
        snapshot = self._snapshot(k1, b, lambda: self._query_work(terms))
        return self._accumulate(*self._parts(terms, k1, b, snapshot))

    def _run_kernel(self, kernel, *args):
        """Call a compiled kernel with a zeroed scratch set (accumulator, seen flags, touched
        list; the kernels leave them zeroed). Sets are pooled, not per thread: a server with many
        threads holds as many sets as queries it ran at once."""
        pool = self._scratch_pool
        try:
            scratch = pool.pop()
        except IndexError:
            scratch = None
        if scratch is None or len(scratch[0]) < len(self):
            size = max(len(self), 64)
            scratch = (np.zeros(size), np.zeros(size, dtype=np.bool_),
                       np.empty(size, dtype=np.int64))
        try:
            return kernel(*args, *scratch)
        finally:
            pool.append(scratch)

    def _check_mask(self, mask) -> np.ndarray | None:
        if mask is None:
            return None
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ or mask.ndim != 1 or len(mask) < len(self):
            raise ValueError(f"mask must be a 1-D bool array over the {len(self)} document numbers,"
                             f" got {mask.dtype} of shape {mask.shape}")
        return mask

    def top_k(self, tokens: Sequence[str], k: int = 10, *, k1: float = 1.2, b: float = 0.75,
              mask: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``k`` best documents for one query: ``(doc_ids, scores)``, best first (score
        descending, then document number ascending); fewer when fewer match.

        ``mask`` (bool per document number) keeps only the documents where it is True. The
        answer equals :meth:`scores` sorted and cut at ``k``.

        Examples
        --------
        >>> index = BM25Index(); _ = index.add_many([["jwt", "auth"], ["jwt"], ["deploy"]])
        >>> docs, scores = index.top_k(["jwt", "auth"], 2)
        >>> docs.tolist(), [round(float(s), 3) for s in scores]
        ([0, 1], [1.204, 0.524])
        >>> index.top_k(["jwt"], 5, mask=np.array([False, True, True]))[0].tolist()
        [1]
        """
        k = _check_k(k)
        mask = self._check_mask(mask)
        terms = self._query_terms(tokens)
        if not terms or self.live_documents == 0:
            return np.empty(0, np.int64), np.empty(0, np.float64)
        k1, b = _check_k1_b(k1, b)
        snapshot = self._snapshot(k1, b, lambda: self._query_work(terms))
        if snapshot is not None and self._use_numba:
            frozen, weights = snapshot
            tids = np.fromiter(terms.keys(), dtype=np.int64, count=len(terms))
            qtfs = np.fromiter(terms.values(), dtype=np.float64, count=len(terms))
            return self._run_kernel(_numba_kernels().accumulate_top_k,
                                    frozen.indptr, frozen.docs, weights, tids, qtfs,
                                    mask if mask is not None else _NO_MASK, mask is not None, k)
        docs, scores = self._accumulate(*self._parts(terms, k1, b, snapshot))
        if mask is not None:
            keep = mask[docs]
            docs, scores = docs[keep], scores[keep]
        return _select_top_k(docs, scores, k)

    def _batch_terms(self, token_lists) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every query's distinct known terms, flattened: ``(q_ptr, term ids, counts)`` with
        query ``i``'s terms (ascending, as :meth:`_query_terms`) at ``q_ptr[i]:q_ptr[i + 1]``.
        One pass over all tokens and one sort, instead of a dict per query."""
        if isinstance(token_lists, str) or not isinstance(token_lists, Iterable):
            raise ValueError(f"token_lists must be a list of token lists, got {token_lists!r}")
        lengths, flat = [], []
        for tokens in token_lists:
            if type(tokens) is not list and (isinstance(tokens, str)  # noqa: E721 (fast path)
                                             or not isinstance(tokens, Sequence)):
                raise ValueError(f"each query must be a sequence of tokens, got {tokens!r}")
            lengths.append(len(tokens))
            flat.extend(tokens)
        n_queries = len(lengths)
        ids = np.fromiter(map(self._vocab.get, flat, repeat(-1)), dtype=np.int64, count=len(flat))
        query = np.repeat(np.arange(n_queries, dtype=np.int64), lengths)
        known = ids >= 0
        keys = np.sort(query[known] * (len(self._post_docs) + 1) + ids[known])
        starts = np.flatnonzero(np.r_[True, keys[1:] != keys[:-1]]) if len(keys) else keys
        counts = np.diff(np.r_[starts, len(keys)]).astype(np.float64)
        keys = keys[starts]
        query, tids = np.divmod(keys, len(self._post_docs) + 1)
        q_ptr = np.searchsorted(query, np.arange(n_queries + 1), side="left")
        return q_ptr.astype(np.int64), tids, counts

    def _batch_work(self, tids: np.ndarray) -> int:
        sizes = np.fromiter((self._post_docs[t].size for t in tids.tolist()), dtype=np.int64,
                            count=len(tids))
        return int(sizes.sum()) + _TERM_WORK * len(tids)

    @staticmethod
    def _row_terms(q_ptr, tids, counts, row: int) -> dict[int, float]:
        lo, hi = q_ptr[row], q_ptr[row + 1]
        return dict(zip(tids[lo:hi].tolist(), counts[lo:hi].tolist()))

    def batch_scores(self, token_lists: Iterable[Sequence[str]], *, k1: float = 1.2,
                     b: float = 0.75) -> sp.csr_array:
        """BM25 of many queries at once: a ``(queries × document numbers)`` sparse matrix whose
        row ``i`` holds what :meth:`scores` gives for query ``i`` (sorted indices; a score of
        exactly 0, possible only with an okapi idf of 0, is not stored, as scipy's product drops
        it).

        With a current snapshot this is one sparse product: (query × term counts) @ (term ×
        document weights).

        Examples
        --------
        >>> index = BM25Index(); _ = index.add_many([["jwt", "auth"], ["jwt"], ["deploy"]])
        >>> m = index.batch_scores([["jwt"], ["deploy", "deploy"], ["unicorn"]])
        >>> m.shape, m.nnz, round(float(m[1, 2]), 3)
        ((3, 3), 3, 2.185)
        """
        q_ptr, tids, counts = self._batch_terms(token_lists)
        k1, b = _check_k1_b(k1, b)
        n_queries = len(q_ptr) - 1
        shape = (n_queries, len(self))
        snapshot = (self._snapshot(k1, b, lambda: self._batch_work(tids))
                    if self.live_documents and n_queries else None)
        if snapshot is not None:
            frozen, weights = snapshot
            queries = sp.csr_array((counts, tids, q_ptr),
                                   shape=(n_queries, len(frozen.indptr) - 1))
            postings = sp.csr_array((weights, frozen.docs, frozen.indptr),
                                    shape=(len(frozen.indptr) - 1, shape[1]))
            out = sp.csr_array(queries @ postings)
            out.sort_indices()
            return out
        rows, cols, vals = [], [], []
        for i in range(n_queries):
            terms = self._row_terms(q_ptr, tids, counts, i)
            if terms and self.live_documents:
                docs, scores = self._accumulate(*self._parts(terms, k1, b, None))
                rows.append(np.full(len(docs), i))
                cols.append(docs)
                vals.append(scores)
        if not rows:
            return sp.csr_array(shape)
        out = sp.csr_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                           shape=shape)
        out.eliminate_zeros()
        return out

    def batch_top_k(self, token_lists: Iterable[Sequence[str]], k: int = 10, *,
                    k1: float = 1.2, b: float = 0.75, mask: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`top_k` for many queries: ``(doc_ids, scores)`` of shape ``(queries, k)``, row
        ``i`` best first for query ``i``, padded with -1 and NaN where fewer than ``k`` match.

        Examples
        --------
        >>> index = BM25Index(); _ = index.add_many([["jwt", "auth"], ["jwt"], ["deploy"]])
        >>> docs, scores = index.batch_top_k([["jwt"], ["deploy"], []], 2)
        >>> docs.tolist()
        [[1, 0], [2, -1], [-1, -1]]
        """
        k = _check_k(k)
        mask = self._check_mask(mask)
        q_ptr, tids, counts = self._batch_terms(token_lists)
        k1, b = _check_k1_b(k1, b)
        n_queries = len(q_ptr) - 1
        if not self.live_documents or not n_queries:
            return np.full((n_queries, k), -1, np.int64), np.full((n_queries, k), np.nan)
        snapshot = self._snapshot(k1, b, lambda: self._batch_work(tids))
        if snapshot is not None and self._use_numba:
            frozen, weights = snapshot
            return self._run_kernel(_numba_kernels().batch_top_k,
                                    frozen.indptr, frozen.docs, weights, q_ptr, tids, counts,
                                    mask if mask is not None else _NO_MASK, mask is not None, k)
        out_docs = np.full((n_queries, k), -1, np.int64)
        out_scores = np.full((n_queries, k), np.nan)
        for i in range(n_queries):
            terms = self._row_terms(q_ptr, tids, counts, i)
            if not terms:
                continue
            docs, scores = self._accumulate(*self._parts(terms, k1, b, snapshot))
            if mask is not None:
                keep = mask[docs]
                docs, scores = docs[keep], scores[keep]
            docs, scores = _select_top_k(docs, scores, k)
            out_docs[i, :len(docs)] = docs
            out_scores[i, :len(docs)] = scores
        return out_docs, out_scores

    def coverage(self, tokens: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
        """An absolute match score in [0, 1]: the idf-weighted share of the distinct query terms
        each document contains (1.0: every term; a term no document has still counts, with the
        highest idf). Returns ``(doc_ids ascending, coverage)`` for documents with any term.

        Unlike BM25 normalised by the best hit, this does not call the best of bad matches 1.0.

        Examples
        --------
        >>> index = BM25Index(); _ = index.add(["jwt", "auth"]); _ = index.add(["deploy"])
        >>> docs, cov = index.coverage(["jwt", "auth"])
        >>> docs.tolist(), cov.tolist()
        ([0], [1.0])
        >>> round(float(index.coverage(["jwt", "unicorn"])[1][0]), 3)
        0.279
        """
        n_docs = self.live_documents
        terms = sorted(set(tokens))
        if not terms or n_docs == 0:
            return np.empty(0, np.int64), np.empty(0)
        total = 0.0
        docs_parts, weight_parts = [], []
        for term in terms:
            tid = self._vocab.get(term)
            df = 0 if tid is None else self._post_docs[tid].size
            idf = math.log(1.0 + (n_docs - df + 0.5) / (df + 0.5))
            total += idf
            if df:
                docs = self._post_docs[tid].view()
                docs_parts.append(docs)
                weight_parts.append(np.full(len(docs), idf))
        if not docs_parts:
            return np.empty(0, np.int64), np.empty(0)
        docs, covered = group_sum(np.concatenate(docs_parts).astype(np.int64),
                                  np.concatenate(weight_parts))
        return docs, np.minimum(covered / total, 1.0)

    def score_docs(self, tokens: Sequence[str], doc_ids: np.ndarray, *, k1: float = 1.2,
                   b: float = 0.75) -> np.ndarray:
        """BM25 of the given documents (0 where no query term occurs)."""
        docs, scores = self.scores(tokens, k1=k1, b=b)
        return lookup_scores(docs, scores, doc_ids)

    def doc_term_matrix(self) -> tuple[sp.csr_array, list[str]]:
        """The raw term-frequency matrix (documents × terms) and the term of each column."""
        rows, cols, vals = [], [], []
        terms = sorted(self._vocab, key=self._vocab.__getitem__)  # live terms only
        for col, term in enumerate(terms):
            tid = self._vocab[term]
            rows.append(self._post_docs[tid].view())
            cols.append(np.full(self._post_docs[tid].size, col, dtype=np.int32))
            vals.append(self._post_tfs[tid].view())
        if not rows:
            return sp.csr_array((len(self), 0)), terms
        matrix = sp.coo_array((np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))),
                              shape=(len(self), len(terms))).tocsr()
        return matrix, terms
