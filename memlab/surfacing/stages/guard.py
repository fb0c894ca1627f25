"""The graph guard: the graph as a re-ranker that can only displace for a reason (issue 17).

Spreading and PPR lift items linked to the multi-hop seeds, and that is how a second hop
reaches the top. They also push out items that were in the top ``depth`` without the graph
(on LoCoMo, 49 missed gold turns were in the top 10 without the graph). The guard keeps such
an item unless the item that took its place is linked to a seed (one edge of the recipe's
spreading edge types away, or a seed itself). Router mode adds it before the budget of a
pipeline that has a ``spread`` or ``ppr`` stage when the recipe's ``graph_guard_depth`` is
above 0 (:func:`with_guard`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.graph.spreading import SpreadConfig, run_spread
from memlab.surfacing.composite import CompositeWeights, composite, order_candidates
from memlab.surfacing.stages.base import CandidateTable, Pipeline, QueryRun, Stage, register_stage
from memlab.surfacing.stages.retrieval import normalised_relevance
from memlab.surfacing.stages.scoring import COMPOSITE_INPUTS

__all__ = ["GraphGuard", "graph_guard", "with_guard", "guarded_scores"]

_NO_DOCS = np.empty(0, np.int64)
_GRAPH_SOURCES = ("spread",)


def guarded_scores(score: np.ndarray, plain_score: np.ndarray, rankable: np.ndarray,
                   from_graph: np.ndarray, linked: np.ndarray, item_ids, relevance: np.ndarray,
                   depth: int) -> tuple[np.ndarray, np.ndarray]:
    """Scores after the guard, and the rows it restored.

    ``score`` ranks with the graph, ``plain_score`` without it (rows the graph brought,
    ``from_graph``, are not in that ranking). The rows of the plain top ``depth`` that the
    graph pushed out of the top ``depth`` are restored, best-scored first, one for each
    newcomer to the top ``depth`` that is not ``linked`` to a seed (the lowest-scored such
    newcomers first): each restored row and its newcomer swap scores, so the top ``depth``
    becomes exactly the graph's minus those newcomers plus the restored rows, in score order.
    ``rankable``: rows that compete (neither mandatory nor filtered).

    Examples
    --------
    >>> s, restored = guarded_scores(np.array([0.9, 0.8, 0.7, 0.6]),
    ...     np.array([0.5, 0.0, 0.0, 0.6]), np.ones(4, bool), np.array([0, 1, 1, 0], bool),
    ...     np.array([0, 0, 1, 0], bool), ["a", "b", "c", "d"], np.zeros(4), depth=2)
    >>> restored.tolist(), s.tolist()
    ([3], [0.9, 0.6, 0.7, 0.8])
    """
    n = len(score)
    fixed = ~rankable
    with_graph = order_candidates(item_ids, relevance, score, np.zeros(n, bool), fixed)
    top = with_graph[:depth]
    top = top[rankable[top]]
    plain = order_candidates(item_ids, relevance, plain_score, np.zeros(n, bool),
                             fixed | from_graph)
    plain_top = plain[:depth]
    plain_top = plain_top[(rankable & ~from_graph)[plain_top]]
    in_top = np.zeros(n, bool)
    in_top[top] = True
    in_plain = np.zeros(n, bool)
    in_plain[plain_top] = True
    pushed = plain_top[~in_top[plain_top]]
    unlinked = top[~in_plain[top] & ~linked[top]]  # newcomers without a link, best first
    r = min(len(pushed), len(unlinked))
    if r == 0:
        return score, _NO_DOCS
    score = np.asarray(score, dtype=float)
    restored = pushed[np.argsort(-score[pushed], kind="stable")[:r]]  # best first
    demoted = unlinked[len(unlinked) - r:]  # the lowest-scored newcomers, best first
    out = score.copy()
    out[restored], out[demoted] = score[demoted], score[restored]
    return out, np.sort(restored)


@register_stage
@dataclass(frozen=True, repr=False)
class GraphGuard(Stage):
    """Keep the top ``depth`` of the ranking without the graph unless a replacement is linked
    to a seed (:func:`guarded_scores`). The ranking without the graph is the composite of the
    rows retrieval found (not those only spreading reached), with their relevance before any
    spreading lift and no centrality. ``depth=None``: the recipe's ``graph_guard_depth``; off
    at 0 and in legacy mode. Notes the restored items (``graph_guard``)."""

    name: ClassVar[str] = "graph_guard"
    phase: ClassVar[str] = "score"
    depth: int | None = None

    def __post_init__(self) -> None:
        d = self.depth
        if d is not None and (isinstance(d, bool) or not isinstance(d, int) or d < 0):
            raise ValueError(f"graph_guard: depth must be None or an integer >= 0, got {d!r}")

    def _depth(self, run: QueryRun) -> int:
        return run.config.graph_guard_depth if self.depth is None else self.depth

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        return not run.legacy and self._depth(run) > 0

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        if not len(table):
            return table
        config = run.config
        columns = table.column_map()
        from_graph = np.isin(table.source, _GRAPH_SOURCES)
        plain_relevance = normalised_relevance(table, table.idx)
        # where a strategy adjusted the relevance term (e.g. a window floor), keep its change
        plain_columns = {name: columns[name] for name in COMPOSITE_INPUTS}
        plain_columns["relevance_term"] = plain_relevance
        plain_columns["centrality"] = np.zeros(len(table))
        plain_score, _ = composite(plain_columns, CompositeWeights.from_config(config), False)
        seeds = table.attrs.get("ranked_docs", _NO_DOCS)[:config.multi_hop_seeds]
        linked = np.isin(table.idx, np.concatenate([seeds, _neighbours(run, seeds)]))
        rankable = ~table.mandatory & ~table.filtered
        score, restored = guarded_scores(table.score, plain_score, rankable, from_graph, linked,
                                         table.item_id, table.relevance, self._depth(run))
        run.notes["graph_guard"] = run.ws.ids_of(table.idx[restored])
        return table._with({"score": score}) if len(restored) else table


def _neighbours(run: QueryRun, seeds: np.ndarray) -> np.ndarray:
    """Items one edge (of the recipe's spreading edge types) from any seed."""
    if not len(seeds):
        return _NO_DOCS
    base = run.config.spreading or SpreadConfig()
    one_hop = dataclasses.replace(base, depth=1, max_fan_out=10**9, budget_ms=None)
    return run_spread(run.ws, seeds, one_hop).indices


def graph_guard(depth: int | None = None) -> GraphGuard:
    """The graph-guard stage (``depth=None``: the recipe's ``graph_guard_depth``)."""
    return GraphGuard(depth)


def with_guard(pipeline: Pipeline) -> Pipeline:
    """``pipeline`` with :class:`GraphGuard` before its budget when it has a ``spread`` or
    ``ppr`` stage (and no guard yet); otherwise unchanged.

    Examples
    --------
    >>> from memlab.surfacing.strategies import STRATEGIES
    >>> with_guard(STRATEGIES["multi_hop"])  # doctest: +ELLIPSIS
    bm25() >> ... >> composite() >> graph_guard() >> budget()
    >>> with_guard(STRATEGIES["relevance"]) == STRATEGIES["relevance"]
    True
    """
    names = {s.name for s in pipeline}
    if "graph_guard" in names or not names & {"spread", "ppr"}:
        return pipeline
    return pipeline.before_phase("select", GraphGuard())
