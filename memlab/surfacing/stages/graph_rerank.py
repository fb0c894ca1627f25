"""The graph as a re-ranker that can only help (issue 17): bridges up, unsupported jumps out.

On multi-hop questions the second hop was often among the candidates and linked to the first
hop, but spreading and PPR centrality did not lift it into the top 5, while hub passages that
PPR favours pushed retrieval's own good hits out. This stage runs after the composite of a
strategy with graph stages (router mode inserts it before the budget when the recipe turns it
on) and changes only the order of the optional candidates:

1. **Bridges.** The ``hits`` best candidates by the composite are the top hits. A candidate
   linked (an edge of the recipe's ``graph_link_types``, by default the spreading's types,
   either direction) to at least ``links`` of them is a bridge, and its score is multiplied by
   ``1 + boost``.
2. **Guard.** The retrieval's own top ``guard_k`` (the fused relevance over-fetch,
   ``attrs["ranked_docs"]``, before any graph stage) is what the query found without the
   graph. An item of it that the graph ranking pushes out of the top ``guard_k`` comes back,
   unless the candidate that replaced it is linked to a seed (the ``multi_hop_seeds`` best
   retrieved items) or is a bridge. Returned items take exactly the places of the lowest
   unsupported replacements, which take theirs (:func:`guard_order`): every other candidate
   keeps its place.

The new order is written as the ``score`` column (the composite's scores, reassigned in the new
order, so the budget's ordering is this stage's); ``notes["graph_rerank"]`` counts the bridges
lifted and the items restored and lists the restored items (``restored_items``); the replay's
decisions have its time as ``graph_rerank_ms``. Counterfactual re-scoring
(``composite >> budget`` on recorded candidates) does not re-run this stage.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.graph.spreading import SpreadConfig
from memlab.surfacing.composite import order_candidates
from memlab.surfacing.stages.base import CandidateTable, QueryRun, Stage, register_stage
from memlab.surfacing.stages.retrieval import _check_count

__all__ = ["GraphRerank", "graph_rerank", "guard_order", "linked_counts"]

_DEFAULT_SPREAD = SpreadConfig()


def linked_counts(ws, hubs: np.ndarray, nodes: np.ndarray,
                  spreading: SpreadConfig | None,
                  edge_types: tuple[str, ...] | None = None) -> np.ndarray:
    """For each of ``nodes``, how many of ``hubs`` it shares an edge with (undirected, over
    ``edge_types``, or when None the types ``spreading`` allows, the default spreading's when
    that is None too). A node is not linked to itself.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> ids = [mem.add(t) for t in ("a", "b", "c", "d")]
    >>> mem.add_edge(ids[0], ids[2]); mem.add_edge(ids[1], ids[2])
    >>> ws = mem.store.workspace("default")
    >>> linked_counts(ws, np.array([0, 1]), np.array([2, 3, 0]), None).tolist()
    [2, 0, 0]
    """
    nodes = np.asarray(nodes, dtype=np.int64)
    out = np.zeros(len(nodes), dtype=np.int64)
    hubs = np.asarray(hubs, dtype=np.int64)
    if not len(hubs) or not len(nodes):
        return out
    table = ws.graph_view().table
    types = (spreading or _DEFAULT_SPREAD).allowed(table.type_names) if edge_types is None \
        else [t for t in edge_types if t in table.type_names]
    codes = table.codes_for(types)
    if not len(codes):
        return out
    snapshot = ws.graph_view().snapshot(len(ws), undirected=[codes])
    fan_out = max(len(ws), 1)
    for hub in hubs.tolist():
        neighbours = snapshot.strongest_neighbours(np.array([hub]), codes, fan_out)
        out += np.isin(nodes, neighbours) & (nodes != hub)
    return out


def guard_order(order: np.ndarray, base_top: np.ndarray, supported: np.ndarray,
                k: int) -> tuple[np.ndarray, np.ndarray]:
    """The guard's new order of the rows, and the rows it restored.

    ``order``: the rows best first as the graph ranks them; ``base_top``: the rows of
    retrieval's own top ``k``, retrieval's best first (rows of ``order`` only); ``supported``:
    per row, whether it may replace a retrieval hit (linked to a seed, or a bridge). The rows of
    ``base_top`` pushed out of the top ``k`` come back, retrieval's best first, one for each
    unsupported newcomer to the top ``k`` (the lowest-ranked such newcomers first). Each
    restored row and its newcomer swap places (the best-ranked restored row takes the
    best-ranked demoted newcomer's place), so the top ``k`` becomes exactly the graph's minus
    those newcomers plus the restored rows, and every other row keeps its place.

    Examples
    --------
    >>> new, restored = guard_order(np.array([0, 1, 4, 3, 5, 2]), np.array([0, 3, 5]),
    ...                             np.array([0, 0, 0, 0, 1, 0], bool), 3)
    >>> new.tolist(), restored.tolist()
    ([0, 3, 4, 1, 5, 2], [3])
    """
    order = np.asarray(order, dtype=np.int64)
    base_top = np.asarray(base_top, dtype=np.int64)
    top = order[:k]
    pushed = base_top[~np.isin(base_top, top)]  # retrieval's best first
    newcomers = top[~np.isin(top, base_top)]  # the graph's best first
    unsupported = newcomers[~np.asarray(supported, bool)[newcomers]]
    n = min(len(pushed), len(unsupported))
    if not n:
        return order, np.empty(0, np.int64)
    back = pushed[:n]  # retrieval's best of those pushed out
    demoted = unsupported[len(unsupported) - n:]  # the lowest unsupported newcomers
    rank = np.empty(int(order.max()) + 1, dtype=np.int64)
    rank[order] = np.arange(len(order))
    back_slots = np.sort(rank[back])
    out = order.copy()
    out[rank[demoted]] = order[back_slots]  # both best first: the pairs swap places
    out[back_slots] = demoted
    return out, back


def _check_unit_free(stage: str, name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not value >= 0 or value == float("inf")):
        raise ValueError(f"{stage}: {name} must be None or a finite number >= 0, got {value!r}")


@register_stage
@dataclass(frozen=True, repr=False)
class GraphRerank(Stage):
    """Bridges lifted, retrieval's top ``guard_k`` kept unless a seed-linked candidate or a
    bridge replaces it (see the module notes). None: the recipe's ``graph_bridge_boost``,
    ``graph_bridge_hits``, ``graph_bridge_links`` and ``graph_guard_k``. Runs only when a boost
    or a guard is on, and never in legacy mode."""

    name: ClassVar[str] = "graph_rerank"
    phase: ClassVar[str] = "score"
    boost: float | None = None
    hits: int | None = None
    links: int | None = None
    guard_k: int | None = None

    def __post_init__(self) -> None:
        _check_unit_free("graph_rerank", "boost", self.boost)
        _check_count("graph_rerank", "hits", self.hits, 1)
        _check_count("graph_rerank", "links", self.links, 1)
        _check_count("graph_rerank", "guard_k", self.guard_k)

    def _settings(self, run: QueryRun) -> tuple[float, int, int, int]:
        c = run.config
        pick = lambda mine, theirs: theirs if mine is None else mine  # noqa: E731
        return (pick(self.boost, c.graph_bridge_boost), pick(self.hits, c.graph_bridge_hits),
                pick(self.links, c.graph_bridge_links), pick(self.guard_k, c.graph_guard_k))

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        boost, _, _, guard_k = self._settings(run)
        return not run.legacy and (boost > 0 or guard_k > 0)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        boost, hits, links, guard_k = self._settings(run)
        optional = np.flatnonzero(~table.mandatory & ~table.filtered)
        if len(optional) < 2:
            return table
        ws, config = run.ws, run.config
        score = table.score.copy()
        idx = table.idx

        def ranking() -> np.ndarray:  # optional rows, best first, as the budget orders them
            order = order_candidates(table.item_id, table.relevance, score, table.mandatory,
                                     table.filtered)
            return order[np.isin(order, optional)]

        order = ranking()
        bridge = np.zeros(len(table), dtype=bool)
        if boost > 0:
            top = order[:hits]
            count = linked_counts(ws, idx[top], idx[optional], config.spreading,
                                  config.graph_link_types)
            bridge[optional[count >= links]] = True
            bridge[top] = False  # a top hit is not its own bridge
            score[bridge] *= 1.0 + boost
            order = ranking()
        restored = np.empty(0, np.int64)
        if guard_k > 0:
            ranked_docs = np.asarray(table.attrs.get("ranked_docs", np.empty(0, np.int64)))
            pos_of = {int(i): p for p, i in enumerate(idx.tolist())}
            allowed = set(optional.tolist())
            base_top = np.array([pos_of[i] for i in ranked_docs[:guard_k].tolist()
                                 if i in pos_of and pos_of[i] in allowed], dtype=np.int64)
            top = order[:guard_k]
            newcomers = top[~np.isin(top, base_top)]
            if len(newcomers) and not np.isin(base_top, top).all():
                seeds = ranked_docs[:config.multi_hop_seeds]
                supported = bridge.copy()
                supported[newcomers] |= linked_counts(ws, seeds, idx[newcomers],
                                                      config.spreading,
                                                      config.graph_link_types) > 0
                order, restored = guard_order(order, base_top, supported, guard_k)
        run.notes["graph_rerank"] = {"bridges": int(bridge.sum()), "restored": len(restored),
                                     "restored_items": ws.ids_of(idx[restored])}
        # the composite's scores handed out again in the new order (strictly decreasing, so
        # that the budget's ties on relevance and item id cannot undo it)
        values = np.sort(score[order])[::-1] - np.arange(len(order)) * 1e-12
        new_score = table.score.copy()
        new_score[order] = values
        return table._with({"score": new_score})


def graph_rerank(boost: float | None = None, hits: int | None = None, links: int | None = None,
                 guard_k: int | None = None) -> GraphRerank:
    """The graph re-ranking stage (None: the recipe's ``graph_bridge_*`` and ``graph_guard_k``).

    Examples
    --------
    >>> graph_rerank(boost=0.5, guard_k=5)
    graph_rerank(boost=0.5, guard_k=5)
    """
    return GraphRerank(boost, hits, links, guard_k)
