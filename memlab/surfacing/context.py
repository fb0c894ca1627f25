"""``get_working_context`` (SPEC §3): route → the strategy's pipeline of stages → record.

The pipeline itself is a :class:`~memlab.surfacing.stages.Pipeline` (see
:mod:`memlab.surfacing.strategies` for the built-in ones): retrieval, the strategy's candidates,
the session's mandatory items, signals, the strategy's adjustments, the composite and the budget.
This module routes the query to a strategy, runs its pipeline and turns the final candidate
table into the response and the :class:`ContextRecord`.

The pipeline changes none of the store's content: no item, edge, activation, pin or anchor is
written and nothing is journaled (assembling a context never reinforces). It does fill derived
state that never changes a result: the workspace's PPR result cache, the graph's compacted and
inverse adjacency (built on first use), and with dense relevance the workspace's embedding rows
and the on-disk embedding cache; and it draws one decision id from the caller's generator.
Everything it considered lands in a :class:`ContextRecord`: every candidate, surfaced or not,
with raw and normalised signals, each composite term, final score, rank and drop reason, plus
per-stage timings (one per stage, under the stage's name), budgets and strategy notes.
"""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

import numpy as np

from memlab.errors import BudgetTooSmall
from memlab.model import SurfacingDecision, SurfacingStrategy, copy_json
from memlab.store import MemoryStore, Workspace
from memlab.surfacing.composite import TERM_COLUMNS
from memlab.surfacing.config import SurfacingConfig
from memlab.surfacing.router import ENTITY_DETECTORS, route
from memlab.surfacing.stages import (COMPOSITE_INPUTS, PPR, CandidateTable, GraphRerank,
                                     Pipeline, QueryRun, Spread)
from memlab.surfacing.stages.ranker_features import (HOP_FEATURE_COLUMNS,
                                                     RANKER_FEATURE_COLUMNS, RankerFeatures)
from memlab.surfacing.stages.scoring import Rerank
from memlab.surfacing.stages.variants import with_spelling
from memlab.surfacing.strategies import STRATEGIES

__all__ = ["ContextRecord", "CandidateTable", "QueryRun", "assemble", "SIGNAL_COLUMNS",
           "TERM_COLUMNS", "COMPOSITE_INPUTS", "TIMING_ALIASES"]

SIGNAL_COLUMNS = ("bm25", "dense", "relevance", "relevance_term", "recency", "recency_term", "activation",
                  "centrality_raw", "centrality", "freshness", "freshness_boost",
                  "session_pin_boost", "pin_weight", "anchor_forced", "exact_match", "title_match",
                  "multiplier", "filtered")
# the record's candidate columns after item_id and rank, in this order
_RECORD_COLUMNS = ("source", "mandatory", "tokens") + SIGNAL_COLUMNS + TERM_COLUMNS + (
    "score", "surfaced", "drop_reason")
# deprecated timing keys of records before stages were named (kept for one release): key ->
# the stage whose timing it repeats
TIMING_ALIASES = {"relevance": "bm25", "select": "budget"}


def _record_columns(table_columns, order) -> dict[str, list]:
    """The record's candidate columns (``item_id``, ``rank``, then :data:`_RECORD_COLUMNS`) in
    rank order, as lists."""
    out = {"item_id": table_columns["item_id"][order].tolist(), "rank": list(range(len(order)))}
    for name in _RECORD_COLUMNS + _feature_columns(table_columns):
        out[name] = table_columns[name][order].tolist()
    return out


def _feature_columns(table_columns) -> tuple[str, ...]:
    """The ranker-feature columns (``rf_*``) the table has: recorded after the others when the
    recipe's ``ranker_features`` stage ran (issue 17)."""
    return tuple(name for name in RANKER_FEATURE_COLUMNS + HOP_FEATURE_COLUMNS
                 if name in table_columns)


def _record_arrays(table_columns, order) -> dict[str, np.ndarray]:
    """:func:`_record_columns` as numpy arrays (read-only columns, in rank order)."""
    out = {"item_id": table_columns["item_id"][order],
           "rank": np.arange(len(order), dtype=np.int64)}
    for name in _RECORD_COLUMNS + _feature_columns(table_columns):
        out[name] = table_columns[name][order]
    return out


def _labels(texts: list[tuple[str, str]], width: int = 60) -> dict[str, str]:
    """The surfaced items' short labels from ``(item_id, title or content)`` pairs: the text on
    one line, cut to ``width`` characters."""
    out = {}
    prefix = 4 * width
    for item_id, raw in texts:
        # whitespace-collapsing a prefix gives a prefix of the collapsed whole (perhaps without
        # its last space): once that is longer than the label, the label is decided, and a long
        # content is not split word by word
        text = " ".join(raw[:prefix].split())
        if len(text) <= width and len(raw) > prefix:
            text = " ".join(raw.split())
        out[item_id] = text if len(text) <= width else text[:width - 1] + "…"
    return out


class _Deferred:
    """A record field computed on first read (``build(*args)``), from immutable inputs: the
    candidate table's read-only columns and strings. Most callers of ``get_working_context``
    never read the record's candidate columns or labels, so assembling a context does not
    pay for them (issue 15: stage overhead)."""

    __slots__ = ("args", "build")

    def __init__(self, build, *args) -> None:
        self.build, self.args = build, args


def _deferred_field(name: str) -> property:
    key = "_" + name

    def get(self):
        value = self.__dict__[key]
        if value.__class__ is _Deferred:
            value = self.__dict__[key] = value.build(*value.args)
        return value

    def set(self, value) -> None:
        self.__dict__[key] = value

    return property(get, set, doc=f"The record's ``{name}`` (built on first read).")


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
    # item_id -> a short label (the title metadata, else the content's first 60 characters) of
    # the surfaced items only, so displays show what was surfaced, not ids (kept small)
    labels: dict[str, str] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        from memlab.surfacing.display import context_record_html; return context_record_html(self)  # noqa: E702,E501

    def __repr__(self) -> str:
        from memlab.surfacing.display import context_record_repr; return context_record_repr(self)  # noqa: E702,E501

    def candidate_arrays(self) -> dict[str, np.ndarray | list]:
        """:attr:`candidates` column by column as numpy arrays, without building its lists
        (what the replay harness records; a column set as a list stays one).

        Examples
        --------
        >>> from memlab import Memory
        >>> mem = Memory()
        >>> _ = mem.add("deploys run on fridays", item_id="a")
        >>> _ = mem.get_working_context("s", "when do deploys run")
        >>> arrays = mem.last_context_record.candidate_arrays()
        >>> arrays["item_id"].tolist(), arrays["rank"].tolist()
        (['a'], [0])
        """
        value = self.__dict__["_candidates"]
        if value.__class__ is _Deferred and value.build is _record_columns:
            return _record_arrays(*value.args)
        return dict(value)

    def candidates_frame(self):
        """The candidates as a pandas DataFrame (one row per candidate, rank order)."""
        import pandas as pd

        frame = pd.DataFrame(self.candidates)
        frame.insert(0, "decision_id", self.decision_id)
        return frame

    def to_dict(self) -> dict[str, Any]:
        out = {f.name: getattr(self, f.name) for f in fields(self)}
        out["decision"] = self.decision.to_dict()
        return out

    def __getstate__(self) -> dict[str, Any]:  # pickle and copy see the built fields
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            setattr(self, name, value)


# the candidate columns and the labels are built on first read (the dataclass's __init__
# stores what it is given through these properties)
ContextRecord.candidates = _deferred_field("candidates")
ContextRecord.labels = _deferred_field("labels")


def _strategy(config: SurfacingConfig, decision: SurfacingDecision, legacy: bool
              ) -> tuple[SurfacingDecision, str, Pipeline]:
    """The decision (soft-degraded when its strategy has no implementation), the
    implementation's name and its pipeline."""
    if legacy:
        impl = "plain"
    else:
        impl = config.strategy_impl(decision.strategy.value)
        if impl is None:
            decision = SurfacingDecision(SurfacingStrategy.FAST_RECENCY, decision.confidence,
                                         decision.reasons + ("unimplemented_strategy_soft_degrade",),
                                         decision.signals)
            impl = config.strategy_impl(SurfacingStrategy.FAST_RECENCY.value)
    if isinstance(impl, Pipeline):
        return decision, impl.name or repr(impl), impl
    return decision, impl, STRATEGIES[impl]


def assemble(store: MemoryStore, ws: Workspace, *, session_id: str, query: str, k: int,
             max_tokens: int | None, requested: SurfacingStrategy | None, mode: str,
             config: SurfacingConfig, now: datetime, rng: random.Random
             ) -> tuple[dict[str, Any], ContextRecord]:
    """Run the pipeline (arguments already validated). Returns the response and its record."""
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    legacy = mode == "legacy"
    anchors = store.anchors(ws.workspace_id, session_id)
    tok = ws.token_estimates()
    if max_tokens is not None and anchors:
        smallest = int(tok[anchors].min())
        if smallest > max_tokens:
            raise BudgetTooSmall(f"budget_too_small: max_tokens={max_tokens} is below the smallest "
                                 f"anchor of session {session_id!r} ({smallest} tokens)")

    # route ------------------------------------------------------------------------------
    if legacy:
        decision = SurfacingDecision(SurfacingStrategy.FAST_RECENCY, 1.0, ("legacy_mode",), {})
    elif requested is not None:
        decision = SurfacingDecision(requested, 1.0, ("caller_explicit",), {})
    else:
        decision = route(query, config.router_rules, now=now,
                         detector=ENTITY_DETECTORS[config.entity_detector],
                         gazetteer=ws.titles())
    decision, impl_name, pipeline = _strategy(config, decision, legacy)
    notes: dict[str, Any] = {}
    pins = store.pins(ws.workspace_id, session_id, now)
    pin_idx = {ws.row_of(item_id): w for item_id, w in pins.items()
               if ws.row_of(item_id) is not None}
    archived_pins = sorted(ws.item_id_of(i) for i in pin_idx if ws.item(i).archived)
    if archived_pins:  # archived items never surface, pinned or not
        notes["archived_pins_skipped"] = archived_pins
        pin_idx = {i: w for i, w in pin_idx.items() if not ws.item(i).archived}
    analyze, _ = ws.bm25_for(config.analyzer)  # the recipe's analyzer (None: the store's)
    run = QueryRun(ws, config, query, analyze(query), k, now, max_tokens=max_tokens,
                   legacy=legacy, decision=decision, anchors=tuple(anchors), pins=pin_idx,
                   lock=store.lock.shared(), notes=notes, timings=timings)
    timings["route"] = (time.perf_counter() - t_start) * 1e3

    # the strategy's stages ----------------------------------------------------------------
    if not legacy and (config.graph_bridge_boost > 0 or config.graph_guard_k > 0) and \
            any(isinstance(s, (Spread, PPR)) for s in pipeline):  # issue 17: graph re-ranking
        pipeline = pipeline.before_phase("select", GraphRerank())
    if not legacy and (config.ranker_features or config.second_hop_features):  # rf_* columns
        pipeline = pipeline.before_phase("select", RankerFeatures())
    if not legacy and config.reranker is not None:  # a learned stage re-scores before the budget
        pipeline = pipeline.before_phase("select", Rerank())
    if not legacy and config.spelling_weight > 0:  # a second BM25 field right after bm25
        pipeline = with_spelling(pipeline)
    table = pipeline(run)
    for alias, stage in TIMING_ALIASES.items():
        if stage in timings:
            timings[alias] = timings[stage]
    t_respond = time.perf_counter()
    used = table.attrs.get("tokens_used", 0)

    # 9. response and record ---------------------------------------------------------------
    decision_id = uuid.UUID(int=rng.getrandbits(128), version=4).hex
    order = table.attrs["order"]
    shown = order[table.surfaced[order]]  # the surfaced rows, in rank order
    items, texts = [], []
    activation, relevance, recency, centrality, anchor_forced, pin_boost, fresh_boost = (
        table[name][shown].astype(bool if name == "anchor_forced" else float, copy=False
                                  ).tolist() for name in (
            "activation", "relevance", "recency", "centrality", "anchor_forced",
            "session_pin_boost", "freshness_boost"))
    for pos, i in enumerate(table.idx[shown].tolist()):
        item = ws.item(i)
        meta = item.metadata
        texts.append((item.item_id, str((meta.get("title") if meta.__class__ is dict else None)
                                        or item.content or item.item_id)))
        items.append({
            "item_id": item.item_id, "content": item.content, "memory_type": item.memory_type,
            "metadata": copy_json(meta),
            "score_breakdown": {
                "activation": activation[pos],
                "relevance": relevance[pos],
                "recency": recency[pos],
                "centrality": centrality[pos],
                "anchor_forced": anchor_forced[pos],
                "session_pin_boost": pin_boost[pos],
                "freshness_boost": fresh_boost[pos],
            },
        })
    drift = store.drift_warnings(ws.workspace_id, session_id)
    response = {
        "decision_id": decision_id, "strategy_used": decision.strategy.value, "items": items,
        "drift_warnings": drift, "tokens_used": int(used), "tokens_budget": max_tokens,
        "deprecation": None,
    }
    timings["respond"] = (time.perf_counter() - t_respond) * 1e3
    timings["total"] = (time.perf_counter() - t_start) * 1e3
    record = ContextRecord(
        decision_id=decision_id, workspace_id=ws.workspace_id, session_id=session_id, query=query,
        mode=mode, recipe=config.name, k=k, max_tokens=max_tokens, decision=decision,
        requested_strategy=None if requested is None else requested.value,
        strategy_used=decision.strategy.value, implementation=impl_name, tokens_used=int(used),
        surfaced_ids=[it["item_id"] for it in items],
        candidates=_Deferred(_record_columns, table.column_map(), order), timings_ms=timings,
        notes=notes, now=now.isoformat(), labels=_Deferred(_labels, texts))
    return response, record
