"""The spelling-variant stage: a second BM25 field (character trigrams by default) fused with
BM25, so that "favourite" finds "favorite" and "impostors" finds "imposter" (issue 17).

Router mode inserts it right after ``bm25`` when the recipe's ``spelling_weight`` is above 0
(:func:`with_spelling`); the strategies' pipelines themselves are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab._arrays import find_sorted
from memlab.surfacing.stages.base import CandidateTable, Pipeline, QueryRun, Stage, register_stage
from memlab.surfacing.stages.retrieval import top_by_score

__all__ = ["SpellingVariants", "spelling_variants", "with_spelling", "fuse_fields"]

_NO_DOCS = np.empty(0, np.int64)


def fuse_fields(docs: np.ndarray, scores: np.ndarray, other_docs: np.ndarray,
                other_scores: np.ndarray, weight: float, depth: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """BM25 fused with a second field: ``bm25 + weight * best_bm25 * other / best_other``.

    ``docs``/``scores`` are BM25's matches (sorted by item number), ``other_*`` the second
    field's. Every BM25 match keeps its place in the union and gains its second-field share;
    of the items only the second field matches, the best ``depth`` join (a trigram field
    matches nearly every item). The result stays in BM25's units (its best is the scale), so
    the relevance signal, the dense hybrid and the window stage read it as they read BM25.
    Returns the union sorted by item number and the fused scores.

    Examples
    --------
    >>> d, s = fuse_fields(np.array([1, 3]), np.array([4.0, 2.0]),
    ...                    np.array([1, 2, 3]), np.array([10.0, 5.0, 0.0]), 0.5, depth=5)
    >>> d.tolist(), s.tolist()
    ([1, 2, 3], [6.0, 1.0, 2.0])
    """
    if weight == 0 or not len(other_docs):
        return docs, scores
    best = float(scores.max()) if len(scores) else 1.0
    best_other = float(other_scores.max())
    if best_other <= 0:
        return docs, scores
    share = weight * best * other_scores / best_other
    pos, found = find_sorted(docs, other_docs)
    fused = scores.astype(float, copy=True)
    fused[pos[found]] += share[found]
    only = np.flatnonzero(~found)
    only = only[top_by_score(other_docs[only], share[only], depth)] if len(only) else only
    union = np.concatenate([docs, other_docs[only]])
    values = np.concatenate([fused, share[only]])
    order = np.argsort(union, kind="stable")
    return union[order], values[order]


@register_stage
@dataclass(frozen=True, repr=False)
class SpellingVariants(Stage):
    """BM25's matches fused with a second BM25 field (:func:`fuse_fields`) and the over-fetch
    re-ranked by the fused score (the new best join, source ``relevance``). ``weight`` and
    ``analyzer`` None: the recipe's ``spelling_weight`` and ``spelling_analyzer``; off at 0 and
    in legacy mode. Runs after ``bm25`` and before the dense and title stages."""

    name: ClassVar[str] = "spelling"
    phase: ClassVar[str] = "retrieve"
    weight: float | None = None
    analyzer: str | None = None

    def __post_init__(self) -> None:
        w = self.weight
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float))
                              or not 0.0 <= w <= 1.0):
            raise ValueError(f"spelling: weight must be None or in [0, 1], got {w!r}")
        if self.analyzer is not None:
            from memlab.text import ANALYZERS
            if self.analyzer not in ANALYZERS:
                raise ValueError(f"spelling: analyzer must be None or one of "
                                 f"{sorted(ANALYZERS)}, got {self.analyzer!r}")

    def _weight(self, run: QueryRun) -> float:
        return run.config.spelling_weight if self.weight is None else self.weight

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        return not run.legacy and self._weight(run) > 0

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        config = run.config
        analyzer = config.spelling_analyzer if self.analyzer is None else self.analyzer
        analyze, index = run.ws.bm25_for(analyzer)
        other_docs, other = index.scores(analyze(run.query), k1=config.bm25_k1, b=config.bm25_b)
        eligible = run.ws.eligible_mask()
        if len(other_docs):
            live = eligible[other_docs]
            other_docs, other = other_docs[live], other[live]
        attrs = table.attrs
        depth = attrs.get("relevance_depth", config.overfetch * run.k)
        docs, scores = fuse_fields(attrs.get("matched_docs", _NO_DOCS),
                                   attrs.get("matched_bm25", np.empty(0)), other_docs, other,
                                   self._weight(run), depth)
        ranked = docs[top_by_score(docs, scores, depth)]
        run.notes["spelling"] = {"analyzer": analyzer, "weight": self._weight(run),
                                 "matched": int(len(other_docs))}
        return table.add(ranked, "relevance", allowed=eligible).with_attrs(
            matched_docs=docs, matched_bm25=scores, ranked_docs=ranked)


def spelling_variants(weight: float | None = None,
                      analyzer: str | None = None) -> SpellingVariants:
    """The spelling-variant stage (None: the recipe's ``spelling_weight``/``analyzer``)."""
    return SpellingVariants(weight, analyzer)


def with_spelling(pipeline: Pipeline) -> Pipeline:
    """``pipeline`` with :class:`SpellingVariants` after each ``bm25`` stage (once), keeping
    its name; unchanged when it already has one.

    Examples
    --------
    >>> from memlab.surfacing.strategies import STRATEGIES
    >>> with_spelling(STRATEGIES["plain"])  # doctest: +ELLIPSIS
    bm25() >> spelling() >> dense() >> ...
    """
    if any(isinstance(s, SpellingVariants) for s in pipeline):
        return pipeline
    stages: list[Stage] = []
    for stage in pipeline:
        stages.append(stage)
        if stage.name == "bm25":
            stages.append(SpellingVariants())
    return Pipeline(stages, pipeline.name)
