"""Score normalisation and hybrid fusion: BM25 and cosine put on one [0, 1] scale and mixed.

Two normalisers (Bruch et al., "An Analysis of Fusion Functions for Hybrid Retrieval", 2023,
compare these and others):

* ``"max"``: ``score / best``, what the seed's BM25 relevance does.
* ``"minmax"``: ``(score - floor) / (best - floor)`` clipped to [0, 1], where ``floor`` is the
  ``depth``-th best score. Cosine similarities sit in a narrow band (0.3–0.7 for most of a
  corpus), so dividing by the best leaves every item near 1 and lets BM25's steep fall-off
  decide; anchoring at the ``depth``-th best gives both signals the same spread over the head
  of the ranking, which is the part that is ever surfaced.

The same :class:`HybridScale`, fitted once per query, scores the seeds, the over-fetch and the
candidate table, so every stage sees one relevance.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["NORMALISERS", "FUSIONS", "ScoreScale", "HybridScale", "RankFusion"]

NORMALISERS = ("max", "minmax")
#: how the two sides are mixed: a convex combination of normalised scores, or of reciprocal ranks
FUSIONS = ("convex", "rrf")


@dataclass(frozen=True)
class ScoreScale:
    """``(x - low) / (high - low)`` clipped to [0, 1]; all zeros when ``high <= 0``.

    Examples
    --------
    >>> scale = ScoreScale.fit(np.array([4.0, 3.0, 2.0, 1.0]), "minmax", depth=3)
    >>> scale.low, scale.high, scale(np.array([4.0, 3.0, 1.0])).tolist()
    (2.0, 4.0, [1.0, 0.5, 0.0])
    >>> ScoreScale.fit(np.array([4.0, 2.0]), "max")(np.array([2.0])).tolist()
    [0.5]
    """

    low: float
    high: float

    @classmethod
    def fit(cls, scores: np.ndarray, method: str = "max", depth: int = 20) -> "ScoreScale":
        """Fit to ``scores``, the non-zero scores of one query (items absent from it score 0).

        With ``"minmax"`` and fewer than ``depth`` scores, the floor is 0 (the absent items').
        """
        if method not in NORMALISERS:
            raise ValueError(f"method must be one of {list(NORMALISERS)}, got {method!r}")
        scores = np.asarray(scores, dtype=np.float64)
        high = float(scores.max()) if len(scores) else 0.0
        low = 0.0
        if method == "minmax" and len(scores) >= depth:
            low = float(np.partition(scores, len(scores) - depth)[len(scores) - depth])
        if low >= high:  # ties down to the floor: fall back to dividing by the best
            low = 0.0
        return cls(max(low, 0.0), high)

    def __call__(self, x: np.ndarray) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if self.high <= 0:
            return np.zeros(x.shape)
        return np.clip((x - self.low) / (self.high - self.low), 0.0, 1.0)


@dataclass(frozen=True)
class HybridScale:
    """``(1 - weight) * lexical(bm25) + weight * semantic(max(cosine, 0))``.

    Examples
    --------
    >>> hybrid = HybridScale(ScoreScale(0.0, 10.0), ScoreScale(0.2, 0.6), weight=0.5)
    >>> hybrid(np.array([10.0, 5.0]), np.array([0.6, 0.4])).tolist()
    [1.0, 0.5]
    """

    lexical: ScoreScale
    semantic: ScoreScale
    weight: float

    def __call__(self, bm25: np.ndarray, cosine: np.ndarray) -> np.ndarray:
        return (1.0 - self.weight) * self.lexical(bm25) + \
            self.weight * self.semantic(np.maximum(np.asarray(cosine, dtype=np.float64), 0.0))


@dataclass(frozen=True)
class RankFusion:
    """Weighted reciprocal-rank fusion (Cormack et al., SIGIR 2009), scaled to [0, 1]:
    ``(k + 1) * ((1 - weight) / (k + rank_lexical) + weight / (k + rank_semantic))``.

    A side's rank is 1 + the number of the query's scores on that side strictly above the
    item's (ties share a rank); an item with no score on a side (BM25 0, similarity <= 0)
    gets nothing from it. Only ranks matter, so BM25's steep fall-off and cosine's narrow band
    no longer decide the mix. Fit once per query with :meth:`fit`.

    Examples
    --------
    >>> rrf = RankFusion.fit(np.array([9.0, 3.0, 1.0]), np.array([0.8, 0.5]), 0.5, k=1)
    >>> rrf(np.array([9.0, 1.0, 0.0]), np.array([0.5, 0.8, 0.0])).round(3).tolist()
    [0.833, 0.75, 0.0]
    """

    lexical: np.ndarray
    semantic: np.ndarray
    weight: float
    k: int = 60

    @classmethod
    def fit(cls, bm25: np.ndarray, cosine: np.ndarray, weight: float, k: int = 60
            ) -> "RankFusion":
        """From the query's non-zero BM25 scores and its items' similarities."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be an integer >= 1, got {k!r}")
        lexical = np.sort(np.asarray(bm25, dtype=np.float64))
        semantic = np.asarray(cosine, dtype=np.float64)
        return cls(lexical[lexical > 0], np.sort(semantic[semantic > 0]), float(weight), k)

    @staticmethod
    def _term(sorted_scores: np.ndarray, x: np.ndarray, k: int) -> np.ndarray:
        above = len(sorted_scores) - np.searchsorted(sorted_scores, x, side="right")
        return np.where(x > 0, 1.0 / (k + above + 1.0), 0.0)

    def __call__(self, bm25: np.ndarray, cosine: np.ndarray) -> np.ndarray:
        bm25 = np.asarray(bm25, dtype=np.float64)
        cosine = np.asarray(cosine, dtype=np.float64)
        return (self.k + 1.0) * ((1.0 - self.weight) * self._term(self.lexical, bm25, self.k)
                                 + self.weight * self._term(self.semantic, cosine, self.k))
