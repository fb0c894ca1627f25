"""Retrieval stages: ``bm25`` (the relevance over-fetch) and ``fuse`` (re-rank it by the full
relevance once dense similarity or title matches join), and the query's relevance signal.

The dense stage lives in :mod:`memlab.surfacing.stages.dense`, the title stage in
:mod:`memlab.surfacing.stages.title`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Sequence

import numpy as np

from memlab._arrays import find_sorted, sorted_unique
from memlab.signals.bm25 import lookup_scores
from memlab.surfacing.stages.base import CandidateTable, QueryRun, Stage, register_stage

__all__ = ["BM25", "Fuse", "bm25", "bm25_hits", "bm25_hits_many", "fuse", "normalised_relevance",
           "bm25_of", "top_by_score"]

_NO_DOCS = np.empty(0, np.int64)
_NO_SCORES = np.empty(0)


def top_by_score(docs: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` best scores, score descending then document number ascending.

    Examples
    --------
    >>> top_by_score(np.array([4, 2, 9]), np.array([0.5, 0.5, 0.9]), 2).tolist()
    [2, 1]
    """
    if len(docs) > n:
        kth = np.partition(scores, len(scores) - n)[len(scores) - n]
        keep = np.flatnonzero(scores >= kth)  # every tie at the cut competes on document number
        order = keep[np.lexsort((docs[keep], -scores[keep]))]
        return order[:n]
    return np.lexsort((docs, -scores))


def bm25_of(table: CandidateTable, idx: np.ndarray) -> np.ndarray:
    """Raw BM25 of items ``idx`` for the query (0 where no query term occurs)."""
    attrs = table.attrs
    return lookup_scores(attrs.get("matched_docs", _NO_DOCS),
                         attrs.get("matched_bm25", _NO_SCORES), idx)


def normalised_relevance(table: CandidateTable, idx: np.ndarray,
                         bm25: np.ndarray | None = None) -> np.ndarray:
    """The relevance signal of items ``idx``: BM25 over the query's best BM25, or the hybrid
    when the dense stage ran; then mixed with the title match when the title stage named items
    (``(1 - w) * relevance + w * named``). ``bm25``: their BM25 when the caller has it."""
    attrs = table.attrs
    idx = np.asarray(idx, dtype=np.int64)
    bm25 = bm25_of(table, idx) if bm25 is None else bm25
    hybrid = attrs.get("hybrid")
    if hybrid is not None:
        rel = hybrid(bm25, attrs["dense_sims"][idx])
    else:
        matched = attrs.get("matched_bm25", _NO_SCORES)
        top = matched.max() if len(matched) else 0.0
        rel = bm25 / top if top > 0 else np.zeros(len(idx))
    named = attrs.get("named")
    if named is not None and len(named):
        weight = attrs["title_weight"]
        rel = (1.0 - weight) * rel + weight * np.isin(idx, named)
    return rel


@register_stage
@dataclass(frozen=True, repr=False)
class BM25(Stage):
    """The query's BM25 matches among eligible items; the best ``n`` join (source
    ``relevance``). ``n=None``: the recipe's ``overfetch * k``.

    Leaves ``matched_docs``/``matched_bm25`` (every eligible match, sorted by item number) and
    ``ranked_docs`` (the over-fetch, best first) in ``attrs``. ``analyzer``: the text analyzer
    (a name in :data:`memlab.text.ANALYZERS`; None: the recipe's, whose terms are ``run.terms``).
    """

    name: ClassVar[str] = "bm25"
    phase: ClassVar[str] = "retrieve"
    n: int | None = None
    analyzer: str | None = None

    def __post_init__(self) -> None:
        _check_count("bm25", "n", self.n, 1)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        config = run.config
        if self.analyzer is None:
            _, index = run.ws.bm25_for(config.analyzer)
            terms = run.terms
        else:
            analyze, index = run.ws.bm25_for(self.analyzer)
            terms = analyze(run.query)
        docs, scores = index.scores(terms, k1=config.bm25_k1, b=config.bm25_b)
        # (batched, without a table: hits_many, the same matches, eligibility and order)
        eligible = run.eligible
        if len(docs):
            live = eligible[docs]
            docs, scores = docs[live], scores[live]
        depth = config.overfetch * run.k if self.n is None else self.n
        ranked = docs[top_by_score(docs, scores, depth)]
        return table.add(ranked, "relevance", allowed=eligible).with_attrs(
            matched_docs=docs, matched_bm25=scores, ranked_docs=ranked, relevance_depth=depth)


@register_stage
@dataclass(frozen=True, repr=False)
class Fuse(Stage):
    """Re-rank the over-fetch by the full relevance (:func:`normalised_relevance`) over BM25's
    matches, the dense stage's nearest items and the items the query names; the new best join
    (source ``relevance``) and become ``ranked_docs`` (the multi-hop seeds). Runs only after a
    dense or title stage; with only a title stage that named nothing, BM25's ranking stands."""

    name: ClassVar[str] = "fuse"
    phase: ClassVar[str] = "retrieve"

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        return "extra_candidates" in table.attrs

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        attrs = table.attrs
        extra = attrs["extra_candidates"]
        if attrs.get("hybrid") is None and not any(len(e) for e in extra):
            return table  # a title stage that named nothing: BM25's ranking stands
        extra = sorted_unique(np.concatenate(extra))
        docs, bm25 = attrs.get("matched_docs", _NO_DOCS), attrs.get("matched_bm25", _NO_SCORES)
        # BM25's matches are sorted and unique: only the (few) others need a lookup
        extra = extra[~find_sorted(docs, extra)[1]]
        union = np.concatenate([docs, extra])
        relevance = np.concatenate([normalised_relevance(table, docs, bm25),
                                    normalised_relevance(table, extra)])
        depth = attrs.get("relevance_depth", run.config.overfetch * run.k)
        ranked = union[top_by_score(union, relevance, depth)]
        return table.add(ranked, "relevance", allowed=run.eligible).with_attrs(
            ranked_docs=ranked)


def _check_count(stage: str, name: str, value, minimum: int = 0) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                              or value < minimum):
        raise ValueError(f"{stage}: {name} must be None or an integer >= {minimum}, "
                         f"got {value!r}")


def _check_instance(stage: str, name: str, value, kind: type) -> None:
    if value is not None and not isinstance(value, kind):
        raise ValueError(f"{stage}: {name} must be None or a {kind.__name__}, got {value!r}")


def bm25(n: int | None = None, analyzer: str | None = None) -> BM25:
    """The BM25 relevance over-fetch stage (``n`` candidates; None: ``overfetch * k``)."""
    return BM25(n, analyzer)


def bm25_hits(ws, config, query: str, n: int, analyzer: str | None = None
              ) -> tuple[np.ndarray, np.ndarray]:
    """The best ``n`` eligible BM25 matches of ``query`` and their raw BM25, best first: the
    :class:`BM25` stage alone (what ``Memory.search`` runs).

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory(); _ = mem.add("deploys run on fridays"); _ = mem.add("lunch is pizza")
    >>> docs, scores = bm25_hits(mem.store.workspace("default"), mem.config, "friday deploys", 5)
    >>> docs.tolist()
    [0]
    """
    run = QueryRun(ws, config, query, [], n, None)
    table = BM25(n, analyzer or ws.analyzer_name())(run, CandidateTable.empty())
    ranked = table.attrs["ranked_docs"]
    return ranked, bm25_of(table, ranked)


def bm25_hits_many(ws, config, queries: Sequence[str], n: int, analyzer: str | None = None
                   ) -> list[tuple[np.ndarray, np.ndarray]]:
    """:func:`bm25_hits` for many queries at once (what ``Memory.search_many`` runs): one
    ``(docs, raw BM25)`` pair per query, best first.

    The :class:`BM25` stage's retrieval (the analyzer's index, the recipe's ``k1``/``b``, only
    eligible items, score descending then item number), batched: one call of
    :meth:`memlab.signals.bm25.BM25Index.batch_top_k` (compiled with the ``fast`` extra)
    instead of one scoring pass per query.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory(); _ = mem.add("deploys run on fridays"); _ = mem.add("lunch is pizza")
    >>> ws = mem.store.workspace("default")
    >>> [docs.tolist() for docs, _ in bm25_hits_many(ws, mem.config, ["friday", "pizza"], 5)]
    [[0], [1]]
    """
    analyze, index = ws.bm25_for(analyzer or ws.analyzer_name())
    docs, scores = index.batch_top_k([analyze(q) for q in queries], n, k1=config.bm25_k1,
                                     b=config.bm25_b, mask=ws.eligible_mask())
    out = []
    for row_docs, row_scores in zip(docs, scores):
        found = row_docs >= 0  # rows are padded with -1 where fewer than n match
        out.append((row_docs[found], row_scores[found]))
    return out


def fuse() -> Fuse:
    """The stage that re-ranks the over-fetch by the full (hybrid, title-mixed) relevance."""
    return Fuse()
