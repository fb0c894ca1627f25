"""The stages every strategy shares after its candidates are found: ``mandatory`` (the session's
anchors and pins, each item once), ``signals`` (SPEC §2), ``composite`` (SPEC §3 step 4) and
``budget`` (the order and the budgeted cut, steps 5-6). ``composite >> budget`` is the tail that
counterfactual re-scoring runs on recorded candidates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.signals.activation import ACTIVATION_MODELS
from memlab.signals.recency import freshness_boost, recency
from memlab.surfacing.composite import (TERM_COLUMNS, CompositeWeights, composite,
                                        order_candidates, select)
from memlab.surfacing.stages.base import (CandidateTable, QueryRun, Stage, per_config,
                                          register_stage)
from memlab.surfacing.stages.retrieval import _check_instance, bm25_of, normalised_relevance
from memlab.surfacing.table import constant_column
from memlab._arrays import find_sorted

__all__ = ["Mandatory", "Signals", "Composite", "Budget", "mandatory", "signals", "composite",
           "budget", "COMPOSITE_INPUTS"]

# what the composite reads (counterfactual re-scoring feeds recorded candidates' columns)
COMPOSITE_INPUTS = ("activation", "relevance_term", "recency_term", "centrality", "multiplier",
                    "anchor_forced", "pin_weight", "freshness")


@register_stage
@dataclass(frozen=True, repr=False)
class Mandatory(Stage):
    """The session's anchors, then its pins the query did not retrieve, join as mandatory rows
    before the retrieved ones; every item enters once. An anchor that is also pinned stays an
    anchor (keeping its pin weight); a pinned item the query retrieved keeps its retrieval
    source and becomes mandatory. Legacy mode fetches no pin the query did not retrieve.
    Adds the columns ``mandatory``, ``anchor_forced`` and ``pin_weight`` (NaN: not pinned)."""

    name: ClassVar[str] = "mandatory"
    phase: ClassVar[str] = "mandatory"

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        n = len(table)
        if not run.anchors and not run.pins:  # the common case: the rows stay as they are
            no = constant_column("false", n)  # one immutable array serves both columns
            return table._with({"mandatory": no, "anchor_forced": no,
                                "pin_weight": np.full(n, np.nan)})
        anchors = list(dict.fromkeys(run.anchors))
        anchor_set = set(anchors)
        pool = table.idx.tolist()
        in_pool = set(pool)
        mandatory_set = set(anchor_set)
        fetched_pins = []
        for i in run.pins:
            if i in anchor_set:
                continue  # already mandatory, and already in the table as an anchor
            if run.legacy and i not in in_pool:
                continue  # legacy mode does not fetch pinned items the query did not retrieve
            mandatory_set.add(i)
            if i not in in_pool:
                fetched_pins.append(i)
        keep = [pos for pos, i in enumerate(pool) if i not in anchor_set]
        head = anchors + fetched_pins
        idx = np.array(head + [pool[p] for p in keep], dtype=np.int64)
        keep_arr = np.array(keep, dtype=np.int64)
        source = np.concatenate([np.array(["anchor"] * len(anchors) + ["pin"] * len(fetched_pins),
                                          dtype=object), table.source[keep_arr]])
        override = np.concatenate([np.full(len(head), np.nan),
                                   table.relevance_override[keep_arr]])
        idx_list = idx.tolist()
        return CandidateTable({
            "idx": idx, "source": source, "relevance_override": override,
            "mandatory": np.fromiter((i in mandatory_set for i in idx_list), bool, len(idx)),
            "anchor_forced": np.fromiter((i in anchor_set for i in idx_list), bool, len(idx)),
            "pin_weight": np.array([run.pins.get(i, np.nan) for i in idx_list], dtype=float),
        }, table.attrs)


@register_stage
@dataclass(frozen=True, repr=False)
class Signals(Stage):
    """Every candidate's signals (SPEC §2): BM25, relevance (fetched pins get 0; a stage's
    relevance override and lifts apply), dense similarity, title match, recency and its term,
    activation, freshness, the item id and its token estimate; and neutral values for the
    columns strategies adjust (``multiplier`` 1, ``centrality`` 0, nothing ``filtered``)."""

    name: ClassVar[str] = "signals"
    phase: ClassVar[str] = "signals"

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        ws, config, attrs = run.ws, run.config, table.attrs
        idx = table.idx
        n = len(idx)
        now_ts = run.now_ts
        # only the mandatory stage adds "pin" rows, and only when the session has pins
        pinned_only = table.source == "pin" if run.pins else None
        bm25 = bm25_of(table, idx)
        relevance = normalised_relevance(table, idx, bm25)  # a new array
        if pinned_only is not None:
            relevance = np.where(pinned_only, 0.0, relevance)  # SPEC §3
        override = table.relevance_override
        unset = np.isnan(override)
        if not unset.all():  # e.g. spread-only items: relevance = spread score
            relevance = np.where(unset, relevance, override)
        lift_nodes, lift_values = attrs.get("relevance_lift", (None, None))
        if lift_nodes is not None and len(lift_nodes):
            pos, found = find_sorted(lift_nodes, idx)
            lifted = np.where(found, lift_values[np.where(found, pos, 0)], -np.inf)
            relevance = np.where(found & (lifted > relevance), lifted, relevance)
        dense_sims = attrs.get("dense_sims")
        named = attrs.get("named")
        rec = recency(ws.recency_reference_ts(idx), now_ts, config.recency_tau_h)
        floor = config.recency_floor
        created = ws.created_column()[idx]
        # columns are immutable, so one (shared) array serves every column that starts at 0 (or
        # False), and relevance_term starts as relevance itself: a stage that adjusts one copies it
        zeros, no = constant_column("zeros", n), constant_column("false", n)
        return table._with(dict(  # every array here is new: frozen unchecked
            item_id=np.array(ws.ids_of(idx), dtype=object),
            tokens=ws.token_estimates()[idx],
            bm25=bm25,
            dense=zeros if dense_sims is None else np.maximum(dense_sims[idx], 0.0)
            if pinned_only is None else np.where(pinned_only, 0.0, np.maximum(dense_sims[idx], 0.0)),
            relevance=relevance,
            relevance_term=relevance,
            recency=rec,
            recency_term=rec if run.legacy else floor + (1.0 - floor) * rec,
            activation=np.array(  # a copy: a registered model may hand back its own array
                # the recipe's model, built once per recipe (and per registered factory)
                per_config(config, ACTIVATION_MODELS[config.activation_model],
                           ACTIVATION_MODELS[config.activation_model])(
                    ws.activation_state(), idx, now_ts, created), dtype=float),
            centrality_raw=zeros, centrality=zeros,
            freshness=zeros if run.legacy else  # the unweighted factor (composite weighs it)
            freshness_boost(created, now_ts, weight=1.0, window_h=config.freshness_window_h),
            freshness_boost=zeros, session_pin_boost=zeros,
            exact_match=no,
            title_match=np.isin(idx, named) if named is not None and len(named) else no,
            multiplier=constant_column("ones", n),
            filtered=no,
            filter_reason=constant_column("none", n),
        ))


@register_stage
@dataclass(frozen=True, repr=False)
class Composite(Stage):
    """The composite score and its additive terms (:func:`memlab.surfacing.composite.composite`)
    from the :data:`COMPOSITE_INPUTS` columns. ``weights=None``: the recipe's."""

    name: ClassVar[str] = "composite"
    phase: ClassVar[str] = "score"
    weights: CompositeWeights | None = None

    def __post_init__(self) -> None:
        _check_instance("composite", "weights", self.weights, CompositeWeights)

    @classmethod
    def from_params(cls, params: dict) -> "Composite":
        weights = params.get("weights")
        return cls(None if weights is None else CompositeWeights(**weights))

    def params(self) -> dict:
        return {} if self.weights is None else {"weights": self.weights}

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        weights = self.weights if self.weights is not None else \
            per_config(run.config, "composite_weights", CompositeWeights.from_config)
        columns = table.column_map()
        score, terms = composite({name: columns[name] for name in COMPOSITE_INPUTS}, weights,
                                 run.legacy)
        return table._with({"score": score, "session_pin_boost": terms["term_pin"],
                            "freshness_boost": terms["term_freshness"],
                            **{name: terms[name] for name in TERM_COLUMNS}})


@register_stage
@dataclass(frozen=True, repr=False)
class Rerank(Stage):
    """A learned ranking model's score replaces the composite score
    (:mod:`memlab.surfacing.rerank`); ordering rules and the budget are unchanged.
    ``model=None``: the recipe's ``reranker`` (a ranker file's path or a registered name).
    Router mode adds this stage before the budget whenever the recipe names a reranker."""

    name: ClassVar[str] = "rerank"
    phase: ClassVar[str] = "score"
    model: str | None = None

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        from memlab.surfacing.rerank import rerank_scores  # pandas, only when a model is used
        spec = self.model if self.model is not None else run.config.reranker
        if spec is None:
            raise ValueError("rerank: model is None and the recipe names no reranker")
        run.notes["reranker"] = spec
        score = rerank_scores(spec, table.column_map(), run.decision.strategy.value, run.query)
        return table._with({"score": score})


@register_stage
@dataclass(frozen=True, repr=False)
class Budget(Stage):
    """Order the candidates (mandatory first, filtered last; then score, relevance, item id)
    and surface within ``k`` items and ``max_tokens`` tokens (SPEC §3 steps 5-6). Adds ``rank``,
    ``surfaced`` and ``drop_reason``; ``attrs["order"]`` holds the row positions in rank order
    (:meth:`CandidateTable.ranked` is the table in that order) and ``attrs["tokens_used"]`` the
    tokens surfaced. None: the call's ``k`` and ``max_tokens``."""

    name: ClassVar[str] = "budget"
    phase: ClassVar[str] = "select"
    k: int | None = None
    max_tokens: int | None = None

    def __post_init__(self) -> None:
        for name in ("k", "max_tokens"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)
                                      or value < 1):
                raise ValueError(f"budget: {name} must be None or an integer >= 1, "
                                 f"got {value!r}")

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        k = run.k if self.k is None else self.k
        max_tokens = run.max_tokens if self.max_tokens is None else self.max_tokens
        mandatory, filtered = table.mandatory, table.filtered
        order = order_candidates(table.item_id, table.relevance, table.score, mandatory,
                                 filtered)
        surfaced, drop, used = select(order, table.tokens, mandatory, filtered,
                                      table.filter_reason, k=k, max_tokens=max_tokens,
                                      legacy=run.legacy)
        drop_col = np.array(drop, dtype=object)  # None or a reason string per candidate
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return table._with({"surfaced": surfaced, "drop_reason": drop_col, "rank": rank},
                           {"order": order, "tokens_used": int(used)})


def mandatory() -> Mandatory:
    """The stage that adds the session's anchors and pins (each item once)."""
    return Mandatory()


def signals() -> Signals:
    """The stage that computes every candidate's signals."""
    return Signals()


def composite_stage(weights: CompositeWeights | None = None) -> Composite:
    """The composite-score stage (``weights=None``: the recipe's)."""
    return Composite(weights)


def rerank(model: str | None = None) -> Rerank:
    """The learned re-ranking stage (``model=None``: the recipe's ``reranker``)."""
    return Rerank(model)


def budget(k: int | None = None, max_tokens: int | None = None) -> Budget:
    """The order-and-cut stage (None: the call's ``k`` and ``max_tokens``)."""
    return Budget(k, max_tokens)
