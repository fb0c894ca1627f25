"""Strategies (SPEC §4.2) as registered, pluggable pipelines.

A strategy contributes to one query in two places of the pipeline in :mod:`memlab.surfacing.context`:

* ``expand(run)`` adds candidates beyond the relevance over-fetch (``run.add_candidates``), and may
  record notes and stage timings;
* ``adjust(run, table)`` changes per-candidate columns before the composite: ``recency_term``,
  ``multiplier`` (a strategy boost), ``centrality``, ``filtered``.

Implementations are looked up by name in :data:`STRATEGIES`; a configuration maps each strategy
to an implementation (``SurfacingConfig.strategies``). ``deep:multi-hop`` runs the graph stages
of :mod:`memlab.graph` as configured by ``SurfacingConfig.spreading`` and ``.ppr`` (whose
``method`` names a registered spreading function or PPR method, or is a callable).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Protocol

import numpy as np

from memlab.graph.ppr import PPRConvergenceError, run_ppr
from memlab.graph.spreading import run_spread
from memlab.signals.bm25 import lookup_scores
from memlab.surfacing.timewindow import parse_time_window
from memlab.text import TITLE_KEYS, leading_segment, normalise_title

if TYPE_CHECKING:  # pragma: no cover
    from memlab.surfacing.context import CandidateTable, QueryRun

__all__ = ["Strategy", "STRATEGIES", "register_strategy"]


class Strategy(Protocol):
    name: str

    def expand(self, run: "QueryRun") -> None: ...

    def adjust(self, run: "QueryRun", table: "CandidateTable") -> None: ...


class RelevanceOnly:
    """The seed's plain pipeline: the relevance over-fetch and nothing else."""

    name = "relevance"

    def expand(self, run: "QueryRun") -> None:
        pass

    def adjust(self, run: "QueryRun", table: "CandidateTable") -> None:
        pass


class RecencyStrategy(RelevanceOnly):
    """``fast:recency``: relevance candidates plus the workspace's most recently touched items."""

    name = "recency"

    def expand(self, run: "QueryRun") -> None:
        n = run.config.recent_candidates
        eligible = np.flatnonzero(run.ws.eligible.view())
        if n == 0 or not len(eligible):
            return
        ref = run.ws.recency_reference_ts(eligible)
        if len(eligible) > n:
            top = np.argpartition(-ref, n - 1)[:n]
            eligible, ref = eligible[top], ref[top]
        order = np.lexsort((eligible, -ref))
        run.add_candidates(eligible[order], "recent")

    def adjust(self, run: "QueryRun", table: "CandidateTable") -> None:
        # A query that asks for recency ("latest", "today", …) gets the full recency term; a
        # query routed here by default keeps the configuration's gentler floor.
        reasons = run.decision.reasons if run.decision is not None else ()
        if any(r.startswith("recency_signal:") for r in reasons):
            floor = run.config.recency_cue_floor
            table.recency_term = floor + (1.0 - floor) * table.recency


class PointQueryStrategy(RelevanceOnly):
    """``factual:point-query``: exact-match boost on title/label/leading text; recency de-emphasised.

    An item matches exactly when the :func:`~memlab.text.normalise_title` of the query equals
    that of its ``title``, ``label`` or ``name`` metadata, or of its content's first segment
    (:func:`~memlab.text.leading_segment`: the first line up to a colon). Equality, not a prefix:
    "cat" does not match "Catalog: …". Matches get the multiplier ``1 + exact_match_boost``; the
    recency term is raised to ``point_query_recency_exponent``.
    """

    name = "point_query"

    def adjust(self, run: "QueryRun", table: "CandidateTable") -> None:
        q = normalise_title(run.query)
        if q:
            for pos, i in enumerate(table.idx.tolist()):
                item = run.ws.items[i]
                if any(isinstance(item.metadata.get(key), str)
                       and normalise_title(item.metadata[key]) == q for key in TITLE_KEYS) or \
                        normalise_title(leading_segment(item.content)) == q:
                    table.multiplier[pos] *= 1.0 + run.config.exact_match_boost
                    table.exact_match[pos] = True
        table.recency_term **= run.config.point_query_recency_exponent


class ProceduralStrategy(RelevanceOnly):
    """``procedural:lookup``: matching ``procedural`` items join the candidates and are boosted."""

    name = "procedural"

    def expand(self, run: "QueryRun") -> None:
        docs, scores = run.matched_docs, run.matched_bm25
        mask = run.ws.procedural.view()[docs]
        docs, scores = docs[mask], scores[mask]
        order = np.lexsort((docs, -scores))[:run.k]
        run.add_candidates(docs[order], "procedural")

    def adjust(self, run: "QueryRun", table: "CandidateTable") -> None:
        table.multiplier[run.ws.procedural.view()[table.idx]] *= 1.0 + run.config.procedural_type_boost


class TemporalStrategy(RecencyStrategy):
    """``temporal:windowed``: restrict to, or boost, items created inside the query's time window.

    The window is parsed from the query (:func:`~memlab.surfacing.timewindow.parse_time_window`).
    Items created inside it join the candidates (most relevant first, then newest). For in-window
    items, being in the window is evidence of relevance: their relevance term is
    ``floor + (1 - floor) * relevance`` (``temporal_window_relevance_floor``), and recency is
    measured from the window's end rather than from now, so an old window is not zeroed by age.
    In-window items get the multiplier ``1 + temporal_window_boost``; with ``temporal_restrict``
    the others are filtered out (drop reason ``outside_window``). Without a window it behaves like
    ``fast:recency`` and notes ``no_time_window``.
    """

    name = "temporal"

    def expand(self, run: "QueryRun") -> None:
        window = parse_time_window(run.query, run.now)
        run.notes["time_window"] = None if window is None else \
            [window.start.isoformat(), window.end.isoformat(), window.phrase]
        if window is None:
            run.notes["temporal"] = "no_time_window"
            super().expand(run)
            return
        run.window = window
        created = run.ws.created_ts.view()
        inside = np.flatnonzero(window.contains_ts(created) & run.ws.eligible.view())
        if not len(inside):
            return
        m = run.config.temporal_window_candidates
        bm25 = run.bm25_of(inside)
        matched, rest = inside[bm25 > 0], inside[bm25 == 0]
        order = np.lexsort((matched, -created[matched], -bm25[bm25 > 0]))[:m]
        picked = [matched[order]]
        if len(order) < m and len(rest):
            need = m - len(order)
            if len(rest) > need:  # only the newest `need` unmatched items can make the cut
                rest = rest[np.argpartition(-created[rest], need - 1)[:need]]
            picked.append(rest[np.lexsort((rest, -created[rest]))])
        run.add_candidates(np.concatenate(picked), "window")

    def adjust(self, run: "QueryRun", table: "CandidateTable") -> None:
        window = getattr(run, "window", None)
        if window is None:
            return
        inside = window.contains_ts(run.ws.created_ts.view()[table.idx])
        end_ts = min(window.end.timestamp(), run.now_ts)
        table.recency[inside] = run.recency_at(table.idx[inside], end_ts)
        table.recency_term[inside] = run.recency_term(table.recency[inside])
        floor = run.config.temporal_window_relevance_floor
        table.relevance_term[inside] = floor + (1.0 - floor) * table.relevance[inside]
        table.multiplier[inside] *= 1.0 + run.config.temporal_window_boost
        if run.config.temporal_restrict:
            table.filter(~inside & ~table.mandatory, "outside_window")


class MultiHopStrategy(RelevanceOnly):
    """``deep:multi-hop``: seeds are the top relevance hits; spreading and PPR over the graph.

    Spread-only items join the candidates with relevance equal to their spread score
    (``damping ** hops``); every candidate gets centrality = its PPR mass over the maximum among
    candidates. Each stage's timing, method, cache hit, saturation and budget go in the record's
    notes; a stage configured as None is skipped and noted ``not_configured``.
    """

    name = "multi_hop"

    def expand(self, run: "QueryRun") -> None:
        seeds = run.ranked_docs[:run.config.multi_hop_seeds]
        run.notes["multi_hop_seeds"] = run.ws.ids_of(seeds)
        config = run.config.spreading
        if config is None:
            run.notes["spreading"] = "not_configured"
            return
        if run.config.spread_relevance == "seed":
            result = run_spread(run.ws, seeds, config)
            run.timings["spread"] = result.elapsed_ms
            run.notes["spreading"] = result.info()
            run.add_candidates(result.indices, "spread",
                               relevance=config.damping ** result.hops.astype(float))
            return
        # "propagated": activation leaves each seed in proportion to the seed's own relevance,
        # and lifts every item it reaches, retrieved or not, to at least what arrives there
        seed_relevance = run.normalised_relevance(seeds)
        reached: dict[int, float] = {}
        infos = []
        elapsed = 0.0
        for seed, relevance in zip(seeds.tolist(), seed_relevance.tolist()):
            result = run_spread(run.ws, np.array([seed]), config)
            elapsed += result.elapsed_ms
            infos.append(result.info())
            for node, hops in zip(result.indices.tolist(), result.hops.tolist()):
                value = relevance * config.damping ** hops
                if value > reached.get(node, 0.0):
                    reached[node] = value
        run.timings["spread"] = elapsed
        run.notes["spreading"] = {**infos[0], "elapsed_ms": elapsed,
                                  "results": len(reached), "per_seed": len(infos),
                                  "budget_exhausted": any(i["budget_exhausted"] for i in infos),
                                  "overrun_ms": 0.0 if config.budget_ms is None
                                  else max(0.0, elapsed - config.budget_ms)} \
            if infos else {"results": 0}
        nodes = np.fromiter(reached.keys(), np.int64, len(reached))
        values = np.fromiter(reached.values(), np.float64, len(reached))
        run.add_candidates(nodes, "spread", relevance=values)
        run.lift_relevance(nodes, values)

    def adjust(self, run: "QueryRun", table: "CandidateTable") -> None:
        config = run.config.ppr
        if config is None:
            run.notes["ppr"] = "not_configured"
            return
        seeds = run.ranked_docs[:run.config.multi_hop_seeds]
        try:
            result = run_ppr(run.ws, seeds, config, lock=run.lock)
        except PPRConvergenceError as exc:
            run.notes["ppr"] = {"requested": str(config.method), "error": str(exc)}
            return
        run.timings["ppr"] = result.elapsed_ms
        run.notes["ppr"] = result.info()
        order = np.argsort(result.indices)
        raw = lookup_scores(result.indices[order], result.mass[order], table.idx)
        table.centrality_raw = raw
        top = raw.max() if len(raw) else 0.0
        table.centrality = raw / top if top > 0 else np.zeros_like(raw)


STRATEGIES: dict[str, Callable[[], Strategy]] = {
    cls.name: cls for cls in (RelevanceOnly, RecencyStrategy, PointQueryStrategy,
                              ProceduralStrategy, TemporalStrategy, MultiHopStrategy)
}

def register_strategy(name: str, factory: Callable[[], Strategy]) -> None:
    """Make ``factory()`` available as an implementation name in ``SurfacingConfig.strategies``."""
    if not isinstance(name, str) or not name or not callable(factory):
        raise ValueError(f"name must be a non-empty string and factory callable, got {name!r}")
    STRATEGIES[name] = factory
