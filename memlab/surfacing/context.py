"""``get_working_context`` (SPEC §3): candidates → signals → strategy → composite → budget → record.

The pipeline changes none of the store's content: no item, edge, activation, pin or anchor is
written and nothing is journaled (assembling a context never reinforces). It does fill derived
state that never changes a result: the workspace's PPR result cache, the graph's compacted and
inverse adjacency (built on first use), and with dense relevance the workspace's embedding rows
and the on-disk embedding cache; and it draws one decision id from the caller's generator.
Everything it considered lands in a :class:`ContextRecord`: every candidate, surfaced or not,
with raw and normalised signals, each composite term, final score, rank and drop reason, plus
per-stage timings, budgets and strategy notes.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np

from memlab._arrays import find_sorted, sorted_unique
from memlab.errors import BudgetTooSmall
from memlab.model import SurfacingDecision, SurfacingStrategy, copy_json
from memlab.signals.activation import ACTIVATION_MODELS
from memlab.signals.bm25 import lookup_scores
from memlab.signals.dense import DenseConfig, dense_search, embed_query
from memlab.signals.fusion import HybridScale, ScoreScale
from memlab.signals.recency import freshness_boost, recency
from memlab.store import MemoryStore, Workspace
from memlab.surfacing.composite import (TERM_COLUMNS, CompositeWeights, composite,
                                        order_candidates, select)
from memlab.surfacing.config import SurfacingConfig
from memlab.surfacing.router import ENTITY_DETECTORS, route
from memlab.surfacing.strategies import STRATEGIES

__all__ = ["ContextRecord", "CandidateTable", "QueryRun", "assemble", "SIGNAL_COLUMNS",
           "TERM_COLUMNS", "COMPOSITE_INPUTS"]

SIGNAL_COLUMNS = ("bm25", "dense", "relevance", "relevance_term", "recency", "recency_term", "activation",
                  "centrality_raw", "centrality", "freshness", "freshness_boost",
                  "session_pin_boost", "pin_weight", "anchor_forced", "exact_match", "title_match",
                  "multiplier", "filtered")
# what the composite reads (the harness re-scores recorded candidates from these columns)
COMPOSITE_INPUTS = ("activation", "relevance_term", "recency_term", "centrality", "multiplier",
                    "anchor_forced", "pin_weight", "freshness")


class CandidateTable:
    """Per-candidate columns (numpy arrays aligned with ``idx``) that stages fill in."""

    def __init__(self, idx: np.ndarray, sources: list[str], mandatory: np.ndarray) -> None:
        n = len(idx)
        self.idx = idx
        self.sources = sources
        self.mandatory = mandatory
        zeros = np.zeros(n)
        self.bm25 = zeros.copy()
        self.dense = zeros.copy()
        self.relevance = zeros.copy()
        self.relevance_term = zeros.copy()
        self.recency = zeros.copy()
        self.recency_term = zeros.copy()
        self.activation = zeros.copy()
        self.centrality_raw = zeros.copy()
        self.centrality = zeros.copy()
        self.freshness = zeros.copy()
        self.freshness_boost = zeros.copy()
        self.session_pin_boost = zeros.copy()
        self.pin_weight = np.full(n, np.nan)
        self.anchor_forced = np.zeros(n, dtype=bool)
        self.exact_match = np.zeros(n, dtype=bool)
        self.title_match = np.zeros(n, dtype=bool)
        self.multiplier = np.ones(n)
        self.filtered = np.zeros(n, dtype=bool)
        self.filter_reason: list[str | None] = [None] * n

    def __len__(self) -> int:
        return len(self.idx)

    def filter(self, mask: np.ndarray, reason: str) -> None:
        """Exclude candidates from surfacing (they stay in the record with ``reason``)."""
        for pos in np.flatnonzero(mask & ~self.filtered).tolist():
            self.filter_reason[pos] = reason
        self.filtered |= mask


@dataclass
class QueryRun:
    """The state of one ``get_working_context`` call, shared by the stages and strategies."""

    ws: Workspace
    config: SurfacingConfig
    query: str
    tokens: list[str]
    k: int
    now: datetime
    matched_docs: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    matched_bm25: np.ndarray = field(default_factory=lambda: np.empty(0))
    ranked_docs: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))
    notes: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    window: Any = None
    lock: Any = None  # the store's shared lock (held during assembly; graph stages re-enter)
    decision: SurfacingDecision | None = None
    _pool: dict[int, str] = field(default_factory=dict)
    _relevance_override: dict[int, float] = field(default_factory=dict)
    _relevance_lift: dict[int, float] = field(default_factory=dict)
    dense_sims: np.ndarray | None = None  # similarity of every item to the query (dense on)
    hybrid: HybridScale | None = None  # BM25 and similarity -> relevance (dense on)
    named: np.ndarray = field(default_factory=lambda: np.empty(0, np.int64))  # title matches

    @property
    def now_ts(self) -> float:
        return self.now.timestamp()

    def add_candidates(self, idx: np.ndarray, source: str,
                       relevance: np.ndarray | None = None) -> None:
        """Add candidates (first source wins); ``relevance`` overrides BM25 for new ones only."""
        rel = None if relevance is None else np.asarray(relevance, dtype=float).tolist()
        eligible = self.ws.eligible.data  # archived items (and anchors) never join this way
        for pos, i in enumerate(np.asarray(idx, dtype=np.int64).tolist()):
            if i not in self._pool and eligible[i]:
                self._pool[i] = source
                if rel is not None:
                    self._relevance_override[i] = rel[pos]

    def lift_relevance(self, idx: np.ndarray, values: np.ndarray) -> None:
        """Candidates' relevance will be at least ``values`` (e.g. activation spread to them)."""
        for i, v in zip(np.asarray(idx).tolist(), np.asarray(values, dtype=float).tolist()):
            if v > self._relevance_lift.get(i, 0.0):
                self._relevance_lift[i] = v

    def normalised_relevance(self, idx: np.ndarray, bm25: np.ndarray | None = None
                             ) -> np.ndarray:
        """The relevance signal of items ``idx`` for this query: BM25 over the query's best BM25,
        or the hybrid with dense relevance on; then mixed with the title match
        (``title_match_weight``). ``bm25``: their BM25 when the caller has it."""
        idx = np.asarray(idx, dtype=np.int64)
        bm25 = self.bm25_of(idx) if bm25 is None else bm25
        if self.hybrid is not None:
            rel = self.hybrid(bm25, self.dense_sims[idx])
        else:
            top = self.matched_bm25.max() if len(self.matched_bm25) else 0.0
            rel = bm25 / top if top > 0 else np.zeros(len(idx))
        if len(self.named):
            weight = self.config.title_match_weight
            rel = (1.0 - weight) * rel + weight * np.isin(idx, self.named)
        return rel

    def bm25_of(self, idx: np.ndarray) -> np.ndarray:
        """Raw BM25 of items ``idx`` for this query (0 where no query term occurs)."""
        return lookup_scores(self.matched_docs, self.matched_bm25, idx)

    def recency_at(self, idx: np.ndarray, at_ts: float) -> np.ndarray:
        return recency(self.ws.recency_reference_ts(idx), at_ts, self.config.recency_tau_h)

    def recency_term(self, rec: np.ndarray) -> np.ndarray:
        floor = self.config.recency_floor
        return floor + (1.0 - floor) * rec


@dataclass
class ContextRecord:
    """Everything one ``get_working_context`` call considered and decided.

    ``candidates`` holds one column per field, aligned, in rank order (rank 0 first); the harness
    turns it into the ``candidates`` frame. ``timings_ms`` has one entry per stage and ``total``.
    """

    decision_id: str
    workspace_id: str
    session_id: str
    query: str
    mode: str
    recipe: str
    k: int
    max_tokens: int | None
    decision: SurfacingDecision
    requested_strategy: str | None
    strategy_used: str
    implementation: str
    tokens_used: int
    surfaced_ids: list[str]
    candidates: dict[str, list]
    timings_ms: dict[str, float]
    notes: dict[str, Any]
    now: str

    def candidates_frame(self):
        """The candidates as a pandas DataFrame (one row per candidate, rank order)."""
        import pandas as pd

        frame = pd.DataFrame(self.candidates)
        frame.insert(0, "decision_id", self.decision_id)
        return frame

    def to_dict(self) -> dict[str, Any]:
        out = dict(self.__dict__)
        out["decision"] = self.decision.to_dict()
        return out


def _top_by_score(docs: np.ndarray, scores: np.ndarray, n: int) -> np.ndarray:
    """Positions of the ``n`` best scores, score descending then document number ascending."""
    if len(docs) > n:
        kth = np.partition(scores, len(scores) - n)[len(scores) - n]
        keep = np.flatnonzero(scores >= kth)  # every tie at the cut competes on document number
        order = keep[np.lexsort((docs[keep], -scores[keep]))]
        return order[:n]
    return np.lexsort((docs, -scores))


def _dense_stage(run: QueryRun, dense: DenseConfig, lap) -> np.ndarray:
    """Hybrid retrieval: the nearest items join (and are returned), and the hybrid scale is
    fitted to this query. The query's embedding is timed as its own stage."""
    vector = embed_query(run.query, dense)
    lap("query_embedding")
    _, sims = dense_search(run.ws, run.query, dense, query_vector=vector)
    run.dense_sims = sims
    finite = np.flatnonzero(np.isfinite(sims))
    nearest = finite[_top_by_score(finite, sims[finite], dense.candidates)] \
        if dense.candidates else np.empty(0, np.int64)
    semantic = np.maximum(sims[finite], 0.0)
    run.hybrid = HybridScale(
        ScoreScale.fit(run.matched_bm25, dense.normalise, dense.norm_depth),
        ScoreScale.fit(semantic[semantic > 0], dense.normalise, dense.norm_depth), dense.weight)
    run.add_candidates(nearest, "dense")
    run.notes["dense"] = {"embedder": dense.embedder, "weight": dense.weight,
                          "normalise": dense.normalise, "nearest": len(nearest)}
    return nearest


def _title_stage(run: QueryRun) -> np.ndarray:
    """Items whose title the query names (the workspace gazetteer) join the candidates."""
    named = np.asarray(run.ws.gazetteer.items_named(run.query), dtype=np.int64)
    named = named[run.ws.eligible.view()[named]] if len(named) else named
    run.named = named
    run.add_candidates(named, "title")
    run.notes["title_match"] = run.ws.ids_of(named)
    return named


def assemble(store: MemoryStore, ws: Workspace, *, session_id: str, query: str, k: int,
             max_tokens: int | None, requested: SurfacingStrategy | None, mode: str,
             config: SurfacingConfig, now: datetime, rng: random.Random
             ) -> tuple[dict[str, Any], ContextRecord]:
    """Run the pipeline (arguments already validated). Returns the response and its record."""
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    mark = [t_start]

    def lap(stage: str) -> None:
        t = time.perf_counter()
        timings[stage] = (t - mark[0]) * 1e3
        mark[0] = t

    legacy = mode == "legacy"
    anchors = store.anchors(ws.workspace_id, session_id)
    tok = ws.tokens.view()
    if max_tokens is not None and anchors:
        smallest = int(tok[anchors].min())
        if smallest > max_tokens:
            raise BudgetTooSmall(f"budget_too_small: max_tokens={max_tokens} is below the smallest "
                                 f"anchor of session {session_id!r} ({smallest} tokens)")

    # 1. strategy --------------------------------------------------------------------------
    if legacy:
        decision = SurfacingDecision(SurfacingStrategy.FAST_RECENCY, 1.0, ("legacy_mode",), {})
        impl_name = "relevance"
    else:
        if requested is not None:
            decision = SurfacingDecision(requested, 1.0, ("caller_explicit",), {})
        else:
            decision = route(query, config.router_rules, now=now,
                             detector=ENTITY_DETECTORS[config.entity_detector],
                             gazetteer=ws.gazetteer)
        impl_name = config.strategy_impl(decision.strategy.value)
        if impl_name is None:
            decision = SurfacingDecision(SurfacingStrategy.FAST_RECENCY, decision.confidence,
                                         decision.reasons + ("unimplemented_strategy_soft_degrade",),
                                         decision.signals)
            impl_name = config.strategy_impl(SurfacingStrategy.FAST_RECENCY.value)
    strategy = STRATEGIES[impl_name]()
    lap("route")

    # 2. relevance candidates --------------------------------------------------------------
    analyze, index = ws.bm25_for(config.analyzer)  # the recipe's analyzer (None: the store's)
    run = QueryRun(ws, config, query, analyze(query), k, now, timings=timings,
                   lock=store.lock.shared(), decision=decision)
    docs, bm25 = index.scores(run.tokens, k1=config.bm25_k1, b=config.bm25_b)
    if len(docs):
        live = ws.eligible.view()[docs]
        docs, bm25 = docs[live], bm25[live]
    run.matched_docs, run.matched_bm25 = docs, bm25
    top = _top_by_score(docs, bm25, config.overfetch * k)
    run.ranked_docs = docs[top]
    run.add_candidates(run.ranked_docs, "relevance")
    lap("relevance")
    if not legacy and (config.dense is not None or config.title_match_weight > 0):
        # more signals than BM25: the over-fetch (and so the multi-hop seeds) is re-ranked by
        # the full relevance over BM25's matches, the nearest items and the items named
        extra = []
        if config.dense is not None:
            extra.append(_dense_stage(run, config.dense, lap))
            lap("dense")
        if config.title_match_weight > 0:
            extra.append(_title_stage(run))
            lap("title_match")
        extra = sorted_unique(np.concatenate(extra))
        if config.dense is not None or len(extra):  # else BM25's ranking stands
            # BM25's matches are sorted and unique: only the (few) others need a lookup
            extra = extra[~find_sorted(docs, extra)[1]]
            union = np.concatenate([docs, extra])
            relevance = np.concatenate([run.normalised_relevance(docs, bm25),
                                        run.normalised_relevance(extra)])
            run.ranked_docs = union[_top_by_score(union, relevance, config.overfetch * k)]
            run.add_candidates(run.ranked_docs, "relevance")

    # 3. strategy candidates ---------------------------------------------------------------
    strategy.expand(run)
    lap("strategy_expand")

    # 4. mandatory items: anchors, then pins -----------------------------------------------
    pins = store.pins(ws.workspace_id, session_id, now)
    pin_idx = {ws.index_of[item_id]: w for item_id, w in pins.items() if item_id in ws.index_of}
    archived_pins = sorted(ws.item_ids[i] for i in pin_idx if ws.items[i].archived)
    if archived_pins:  # archived items never surface, pinned or not
        run.notes["archived_pins_skipped"] = archived_pins
        pin_idx = {i: w for i, w in pin_idx.items() if not ws.items[i].archived}
    # every item enters the table once: an anchor that is also pinned stays an anchor (it
    # keeps its pin weight), and a pinned item the query retrieved keeps its retrieval source
    anchors = list(dict.fromkeys(anchors))
    anchor_set = set(anchors)
    mandatory_set = set(anchor_set)  # pins join it below
    for i in anchors:
        run._pool.pop(i, None)
    pool_items = list(run._pool.items())
    fetched_pins = []
    for i in pin_idx:
        if i in anchor_set:
            continue  # already mandatory, and already in the table as an anchor
        if legacy and i not in run._pool:
            continue  # legacy mode does not fetch pinned items the query did not retrieve
        mandatory_set.add(i)
        if i not in run._pool:
            fetched_pins.append(i)
    ordered = [(i, "anchor") for i in anchors] + [(i, "pin") for i in fetched_pins] + pool_items
    idx = np.fromiter((i for i, _ in ordered), dtype=np.int64, count=len(ordered))
    table = CandidateTable(idx, [s for _, s in ordered],
                           np.fromiter((i in mandatory_set for i, _ in ordered), bool, len(ordered)))
    lap("mandatory")

    # 5. signals ---------------------------------------------------------------------------
    now_ts = now.timestamp()
    table.bm25 = run.bm25_of(idx)
    pinned_only = np.array([s == "pin" for s in table.sources], dtype=bool)
    # SPEC §3: fetched pins get relevance 0
    table.relevance = np.where(pinned_only, 0.0, run.normalised_relevance(idx))
    table.title_match = np.isin(idx, run.named)
    if run.dense_sims is not None:
        table.dense = np.where(pinned_only, 0.0, np.maximum(run.dense_sims[idx], 0.0))
    for pos, i in enumerate(idx.tolist()):
        if i in run._relevance_override:  # e.g. spread-only items: relevance = spread score
            table.relevance[pos] = run._relevance_override[i]
        lift = run._relevance_lift.get(i)
        if lift is not None and lift > table.relevance[pos]:
            table.relevance[pos] = lift
    table.relevance_term = table.relevance.copy()
    table.recency = run.recency_at(idx, now_ts)
    table.recency_term = table.recency.copy() if legacy else run.recency_term(table.recency)
    table.activation = ACTIVATION_MODELS[config.activation_model](config)(
        ws.activation, idx, now_ts, ws.created_ts.view()[idx])
    table.anchor_forced = np.isin(idx, np.asarray(anchors, dtype=np.int64))
    table.pin_weight = np.array([pin_idx.get(i, np.nan) for i in idx.tolist()])
    if not legacy:  # the unweighted factor; the composite applies freshness_weight
        table.freshness = freshness_boost(ws.created_ts.view()[idx], now_ts, weight=1.0,
                                          window_h=config.freshness_window_h)
    lap("signals")

    # 6. strategy adjustments (legacy mode has none) --------------------------------------
    if not legacy:
        strategy.adjust(run, table)
    lap("strategy_adjust")

    # 7. composite -------------------------------------------------------------------------
    weights = CompositeWeights.from_config(config)
    score, terms = composite({name: getattr(table, name) for name in COMPOSITE_INPUTS},
                             weights, legacy)
    table.session_pin_boost = terms["term_pin"]
    table.freshness_boost = terms["term_freshness"]
    n = len(idx)
    lap("composite")

    # 8. order and budget ------------------------------------------------------------------
    item_ids = ws.ids_of(idx)
    order = order_candidates(item_ids, table.relevance, score, table.mandatory, table.filtered)
    item_tokens = tok[idx]
    surfaced, drop, used = select(order, item_tokens, table.mandatory, table.filtered,
                                  table.filter_reason, k=k, max_tokens=max_tokens, legacy=legacy)
    lap("select")

    # 9. response and record ---------------------------------------------------------------
    decision_id = uuid.UUID(int=rng.getrandbits(128), version=4).hex
    items = []
    for pos in order.tolist():
        if not surfaced[pos]:
            continue
        item = ws.items[int(idx[pos])]
        items.append({
            "item_id": item.item_id, "content": item.content, "memory_type": item.memory_type,
            "metadata": copy_json(item.metadata),
            "score_breakdown": {
                "activation": float(table.activation[pos]),
                "relevance": float(table.relevance[pos]),
                "recency": float(table.recency[pos]),
                "centrality": float(table.centrality[pos]),
                "anchor_forced": bool(table.anchor_forced[pos]),
                "session_pin_boost": float(table.session_pin_boost[pos]),
                "freshness_boost": float(table.freshness_boost[pos]),
            },
        })
    drift = store.drift_warnings(ws.workspace_id, session_id)
    response = {
        "decision_id": decision_id, "strategy_used": decision.strategy.value, "items": items,
        "drift_warnings": drift, "tokens_used": int(used), "tokens_budget": max_tokens,
        "deprecation": None,
    }
    columns: dict[str, list] = {
        "item_id": [item_ids[p] for p in order.tolist()],
        "rank": list(range(n)),
        "source": [table.sources[p] for p in order.tolist()],
        "mandatory": table.mandatory[order].tolist(),
        "tokens": item_tokens[order].tolist(),
    }
    for name in SIGNAL_COLUMNS:
        columns[name] = getattr(table, name)[order].tolist()
    for name in TERM_COLUMNS:
        columns[name] = terms[name][order].tolist()
    columns["score"] = score[order].tolist()
    columns["surfaced"] = surfaced[order].tolist()
    columns["drop_reason"] = [drop[p] for p in order.tolist()]
    lap("respond")
    timings["total"] = (time.perf_counter() - t_start) * 1e3
    record = ContextRecord(
        decision_id=decision_id, workspace_id=ws.workspace_id, session_id=session_id, query=query,
        mode=mode, recipe=config.name, k=k, max_tokens=max_tokens, decision=decision,
        requested_strategy=None if requested is None else requested.value,
        strategy_used=decision.strategy.value, implementation=impl_name, tokens_used=int(used),
        surfaced_ids=[it["item_id"] for it in items], candidates=columns, timings_ms=timings,
        notes=run.notes, now=now.isoformat())
    return response, record
