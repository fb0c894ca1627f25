"""The composite score (SPEC §3 step 4) and the ordered, budgeted selection (steps 5–6).

Shared by live assembly and by counterfactual re-scoring in the harness, so that re-ranking the
recorded candidates with unchanged weights reproduces the live ranking exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

__all__ = ["CompositeWeights", "TERM_COLUMNS", "composite", "order_candidates", "select"]

TERM_COLUMNS = ("term_base", "term_centrality", "term_strategy", "term_anchor", "term_pin",
                "term_freshness")


@dataclass(frozen=True)
class CompositeWeights:
    """The composite's constants (taken from a ``SurfacingConfig``)."""

    activation_floor: float = 0.05
    centrality_weight: float = 0.5
    pin_boost_factor: float = 0.3
    anchor_boost: float = 1.0
    freshness_weight: float = 0.2

    FIELDS = ("activation_floor", "centrality_weight", "pin_boost_factor", "anchor_boost",
              "freshness_weight")

    @classmethod
    def from_config(cls, config) -> "CompositeWeights":
        return cls(**{name: getattr(config, name) for name in cls.FIELDS})


def composite(columns: Mapping[str, np.ndarray], weights: CompositeWeights,
              legacy: bool) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Scores and their additive terms from per-candidate ``columns``.

    ``columns`` holds ``activation``, ``relevance_term``, ``recency_term``, ``centrality``,
    ``multiplier``, ``anchor_forced``, ``pin_weight`` (NaN: not pinned) and ``freshness`` (the
    unweighted freshness factor). Legacy: ``relevance * recency * max(activation, floor)``;
    router: ``base * (1 + w_c * centrality) * multiplier + anchor + pin + freshness``.
    """
    act = np.maximum(np.asarray(columns["activation"], dtype=float), weights.activation_floor)
    base = act * np.asarray(columns["relevance_term"]) * np.asarray(columns["recency_term"])
    if legacy:
        zeros = np.zeros(len(base))  # one array for every zero term (the table freezes them)
        terms = dict.fromkeys(TERM_COLUMNS, zeros)
        terms["term_base"] = base
        return base.copy(), terms
    terms = {"term_base": base}  # every other term is filled below
    centrality = np.asarray(columns["centrality"], dtype=float)
    multiplier = np.asarray(columns["multiplier"], dtype=float)
    pin_weight = np.asarray(columns["pin_weight"], dtype=float)
    lifted = base * (1.0 + weights.centrality_weight * centrality)
    terms["term_centrality"] = base * weights.centrality_weight * centrality
    terms["term_strategy"] = lifted * (multiplier - 1.0)
    terms["term_anchor"] = np.where(np.asarray(columns["anchor_forced"], dtype=bool),
                                    weights.anchor_boost, 0.0)
    terms["term_pin"] = np.where(np.isnan(pin_weight), 0.0,
                                 pin_weight * weights.pin_boost_factor)
    terms["term_freshness"] = np.asarray(columns["freshness"], dtype=float) * \
        weights.freshness_weight
    score = lifted * multiplier + terms["term_anchor"] + terms["term_pin"] + \
        terms["term_freshness"]
    return score, {name: terms[name] for name in TERM_COLUMNS}


def order_candidates(item_ids: Sequence[str], relevance: np.ndarray, score: np.ndarray,
                     mandatory: np.ndarray, filtered: np.ndarray) -> np.ndarray:
    """Mandatory first, filtered last; then score desc, relevance desc, item id asc."""
    n = len(item_ids)
    if not n:
        return np.empty(0, np.int64)
    ids = item_ids.tolist() if isinstance(item_ids, np.ndarray) else list(item_ids)
    if n <= 64:  # a few candidates (most queries): one Python sort beats a dozen numpy calls
        rel = np.asarray(relevance, dtype=float).tolist()
        sc = np.asarray(score, dtype=float).tolist()
        if not any(x != x for x in rel) and not any(x != x for x in sc):  # NaN: numpy's order
            filt = np.asarray(filtered, dtype=bool).tolist()
            mand = np.asarray(mandatory, dtype=bool).tolist()
            return np.array(sorted(range(n), key=lambda p: (filt[p], not mand[p], -sc[p],
                                                            -rel[p], ids[p])), dtype=np.int64)
    # each id's rank in id order: a stable sort of the ids (as np.argsort(kind="stable") of an
    # object array, but comparing Python strings without numpy's per-element dispatch)
    id_rank = np.empty(n, np.int64)
    id_rank[sorted(range(n), key=ids.__getitem__)] = np.arange(n)
    return np.lexsort((id_rank, -np.asarray(relevance), -np.asarray(score),
                       ~np.asarray(mandatory, dtype=bool), np.asarray(filtered, dtype=bool)))


def select(order: np.ndarray, tokens: np.ndarray, mandatory: np.ndarray, filtered: np.ndarray,
           drop: Sequence[str | None], *, k: int, max_tokens: int | None,
           legacy: bool) -> tuple[np.ndarray, list[str | None], int]:
    """Walk ``order`` and surface within ``k`` and ``max_tokens`` (SPEC §3 step 6).

    Returns ``(surfaced mask, drop reasons, tokens used)``; ``drop`` holds reasons already
    known (filters) and is copied, not changed.
    """
    drop = list(drop)
    if max_tokens is None and len(order) > 48:  # only the count cut, over many candidates:
        # vectorised (below ~50 candidates the walk over plain lists is cheaper)
        order = np.asarray(order, dtype=np.int64)
        filt = np.asarray(filtered, dtype=bool)[order]
        mand = np.asarray(mandatory, dtype=bool)[order]
        counted = ~filt if legacy else ~filt & ~mand  # what k counts, in rank order
        within = np.cumsum(counted) <= k
        keep = counted & within if legacy else (counted & within) | (~filt & mand)
        for pos in order[counted & ~within].tolist():
            drop[pos] = "k_cut"
        surfaced = np.zeros(len(order), dtype=bool)
        surfaced[order[keep]] = True
        return surfaced, drop, int(np.asarray(tokens)[order[keep]].sum())
    surfaced = [False] * len(tokens)
    # plain lists: this loop reads every candidate's entries, and a list read is far cheaper
    # than a numpy scalar read
    filtered, mandatory = np.asarray(filtered).tolist(), np.asarray(mandatory).tolist()
    tokens = np.asarray(tokens).tolist()
    used, included_optional, included_total = 0, 0, 0
    for pos in np.asarray(order).tolist():
        if filtered[pos]:
            continue
        t = int(tokens[pos])
        if mandatory[pos] and not legacy:
            surfaced[pos] = True
            used += t
            continue
        if (legacy and included_total >= k) or (not legacy and included_optional >= k):
            drop[pos] = "k_cut"
            continue
        if max_tokens is not None and used + t > max_tokens:
            drop[pos] = "budget_cut"
            continue
        surfaced[pos] = True
        used += t
        included_total += 1
        included_optional += not mandatory[pos]
    return np.array(surfaced, dtype=bool), drop, used
