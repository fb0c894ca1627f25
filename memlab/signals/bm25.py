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
"""

from __future__ import annotations

import math
from collections import Counter
from typing import Iterable, Sequence

import numpy as np
import scipy.sparse as sp

from memlab._arrays import Growable, find_sorted, group_sum

__all__ = ["BM25Index", "IDF_VARIANTS", "lookup_scores"]

IDF_VARIANTS = ("lucene", "okapi")


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

    Examples
    --------
    >>> index = BM25Index()
    >>> index.add(["jwt", "auth", "token"]), index.add(["deploy", "friday"])
    (0, 1)
    >>> docs, scores = index.scores(["jwt"])
    >>> docs.tolist(), round(float(scores[0]), 4)
    ([0], 0.6407)
    """

    def __init__(self, idf: str = "lucene", epsilon: float = 0.25) -> None:
        if idf not in IDF_VARIANTS:
            raise ValueError(f"idf must be one of {IDF_VARIANTS}, got {idf!r}")
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
        self._okapi_cache = None
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
        self._total_len += len(new_tokens) - self._doc_len.data[doc]
        self._doc_len.data[doc] = len(new_tokens)
        self._okapi_cache = None

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
        self._okapi_cache = None

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
        self._doc_len.extend(lengths.astype(np.float64))
        self._total_len += float(lengths.sum())
        self._okapi_cache = None
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
        counts: dict[int, int] = {}
        for tok in tokens:
            tid = self._vocab.get(tok)
            if tid is not None:
                counts[tid] = counts.get(tid, 0) + 1
        return counts

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
        avgdl = self._total_len / n_docs
        doc_len = self._doc_len.view()
        id_parts, score_parts = [], []
        for tid, qtf in terms.items():
            docs = self._post_docs[tid].view()
            tf = self._post_tfs[tid].view().astype(np.float64)
            norm = k1 * (1.0 - b + b * doc_len[docs] / avgdl) if avgdl > 0 else k1
            id_parts.append(docs)
            score_parts.append((qtf * self._idf(tid, n_docs)) * tf * (k1 + 1.0) / (tf + norm))
        if len(id_parts) == 1:
            return id_parts[0].astype(np.int64), score_parts[0]
        ids = np.concatenate(id_parts)
        contrib = np.concatenate(score_parts)
        if len(ids) * 8 > n_docs:
            # Many postings: a dense accumulator is cheaper than sorting them.
            acc = np.bincount(ids, weights=contrib, minlength=len(self))
            hit = np.zeros(len(self), dtype=bool)
            hit[ids] = True
            docs = np.flatnonzero(hit)
            return docs, acc[docs]
        docs, inverse = np.unique(ids, return_inverse=True)
        return docs.astype(np.int64), np.bincount(inverse, weights=contrib)

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
