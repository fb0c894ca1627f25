"""Strategies (SPEC §4.2) as named compositions of stages (:mod:`memlab.surfacing.stages`).

Every strategy is a :class:`~memlab.surfacing.stages.Pipeline`: the shared retrieval
(``bm25 >> dense >> title_match >> fuse``), the strategy's own candidates (phase ``expand``), the
session's mandatory items and every candidate's signals, the strategy's adjustments (phase
``adjust``), then the composite and the budget. A configuration maps each strategy to the name
of a registered implementation, or to a pipeline itself (``SurfacingConfig.strategies``)::

    >>> STRATEGIES["multi_hop"]
    bm25() >> dense() >> title_match() >> fuse() >> spread() >> mandatory() >> signals() >> ppr() >> composite() >> budget()

Register a new one with :func:`register_strategy` (a pipeline; see the README's "Writing a
strategy"). The old protocol (an object with ``expand(run)`` and ``adjust(run, table)`` that
changed the run and table in place) still registers, through an adapter, for one release.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Callable, ClassVar

import numpy as np

from memlab._deprecation import RenamedEntries, caller_stacklevel
from memlab._registry import register
from memlab.errors import MemlabDeprecationWarning
from memlab.surfacing.stages import (
    Pipeline,
    Stage,
    bm25,
    budget,
    composite,
    dense,
    exact_match,
    fuse,
    mandatory,
    ppr,
    procedural,
    procedural_boost,
    recency_cue,
    recent,
    signals,
    spread,
    title_match,
    window,
    window_boost,
)
from memlab.surfacing.stages.base import CandidateTable, QueryRun
from memlab.surfacing.stages.retrieval import bm25_of, normalised_relevance

__all__ = ["STRATEGIES", "STRATEGY_ALIASES", "register_strategy", "strategy_pipeline", "RETRIEVE",
           "TAIL"]

#: the retrieval every built-in strategy starts with
RETRIEVE = bm25() >> dense() >> title_match() >> fuse()
#: the composite and the budgeted cut every strategy ends with (counterfactual re-scoring's tail)
TAIL = composite() >> budget()


def strategy_pipeline(name: str, expand: tuple[Stage, ...] = (),
                      adjust: tuple[Stage, ...] = ()) -> Pipeline:
    """``RETRIEVE >> *expand >> mandatory() >> signals() >> *adjust >> TAIL``, named ``name``.

    Examples
    --------
    >>> strategy_pipeline("fresh", expand=(recent(5),))
    bm25() >> dense() >> title_match() >> fuse() >> recent(n=5) >> mandatory() >> signals() >> composite() >> budget()
    """
    return Pipeline(RETRIEVE.stages + tuple(expand) + (mandatory(), signals()) + tuple(adjust)
                    + TAIL.stages, name)


#: implementation names of one release ago, deprecated (they are also the names of signals):
#: old name -> its new name. ``STRATEGIES[old]`` and a recipe naming one still work, with a
#: DeprecationWarning.
STRATEGY_ALIASES = {"relevance": "plain", "recency": "recent_items"}


def deprecated_strategy_name(name: str, *, stacklevel: int = 2) -> str:
    """The current name of a deprecated implementation name (with a DeprecationWarning), or
    ``name`` itself."""
    new = STRATEGY_ALIASES.get(name)
    if new is None:
        return name
    warnings.warn(f"the strategy implementation {name!r} is now called {new!r} ({name!r} is "
                  f"also the name of a signal); the old name goes in the next release",
                  MemlabDeprecationWarning, stacklevel=stacklevel + 1)
    return new


# the built-in strategies: name -> (its own candidate stages, its own adjustments)
_BUILT_IN: dict[str, tuple[tuple[Stage, ...], tuple[Stage, ...]]] = {
    # the seed's plain pipeline: the relevance over-fetch and nothing else
    "plain": ((), ()),
    # fast:recency: plus the most recently touched items; full recency when the query asks
    "recent_items": ((recent(),), (recency_cue(),)),
    # factual:point-query: exact-title boost, recency de-emphasised
    "point_query": ((), (exact_match(),)),
    # procedural:lookup: matching procedural items join and are boosted
    "procedural": ((procedural(),), (procedural_boost(),)),
    # temporal:windowed: the query's time window (or recent items without one)
    "temporal": ((window(),), (window_boost(),)),
    # deep:multi-hop: spreading from the seeds, PPR centrality
    "multi_hop": ((spread(),), (ppr(),)),
    # temporal:windowed that keeps the graph (issue 17): the window's items join and are
    # boosted (or restricted to) inside the multi-hop pipeline instead of replacing it
    "temporal_multi_hop": ((window(), spread()), (window_boost(), ppr())),
}
# the registry: its deprecated names (STRATEGY_ALIASES) still look up the renamed entry, warned
STRATEGIES: dict[str, Pipeline] = RenamedEntries(
    {name: strategy_pipeline(name, expand, adjust) for name, (expand, adjust) in _BUILT_IN.items()},
    STRATEGY_ALIASES, lambda old: deprecated_strategy_name(old, stacklevel=caller_stacklevel()))


def register_strategy(name: str, strategy: Pipeline | Callable[[], Any], *,
                      replace: bool = False) -> None:
    """Make ``strategy`` available as an implementation name in ``SurfacingConfig.strategies``.

    A name already registered (a built-in, or a deprecated alias of one, included) is refused
    with a ValueError unless ``replace=True``.

    ``strategy`` is a :class:`~memlab.surfacing.stages.Pipeline` (stored under ``name``). A
    factory of an old-style strategy object (``expand(run)``/``adjust(run, table)``) is still
    accepted, with a DeprecationWarning, and runs through an adapter between the shared stages.

    Examples
    --------
    >>> register_strategy("fresh_first", strategy_pipeline("x", expand=(recent(20),)))
    >>> register_strategy("fresh_first", strategy_pipeline("x", expand=(recent(5),)))
    Traceback (most recent call last):
    ...
    ValueError: the strategy registry already holds 'fresh_first'; pass replace=True to replace it
    >>> register_strategy("fresh_first", strategy_pipeline("x", expand=(recent(5),)),
    ...                   replace=True)
    >>> STRATEGIES.pop("fresh_first").name
    'fresh_first'
    """
    if isinstance(strategy, Pipeline):
        strategy.check_strategy(f"strategy {name!r}")
        pipeline = strategy.named(name)
    elif callable(strategy) and not isinstance(strategy, Stage):
        warnings.warn("registering an expand/adjust strategy object is deprecated; register a "
                      "Pipeline of stages instead", MemlabDeprecationWarning, stacklevel=2)
        pipeline = strategy_pipeline(name, (LegacyExpand(strategy),), (LegacyAdjust(strategy),))
    else:
        raise ValueError(f"strategy must be a Pipeline (compose stages with >>) or a strategy "
                         f"factory, got {strategy!r}")
    register(STRATEGIES, name, pipeline, what="strategy", check_callable=False, replace=replace)


# -- the deprecated expand/adjust protocol ---------------------------------------------------

class _LegacyRun:
    """The old ``QueryRun`` surface an expand/adjust strategy object used, over a table."""

    def __init__(self, run: QueryRun, table: CandidateTable) -> None:
        self.__dict__.update(run.__dict__)
        self._table = table
        self.tokens = run.terms
        attrs = table.attrs
        self.matched_docs = attrs.get("matched_docs", np.empty(0, np.int64))
        self.matched_bm25 = attrs.get("matched_bm25", np.empty(0))
        self.ranked_docs = attrs.get("ranked_docs", np.empty(0, np.int64))
        self.dense_sims = attrs.get("dense_sims")
        self.hybrid = attrs.get("hybrid")
        self.named = attrs.get("named", np.empty(0, np.int64))
        self.window = attrs.get("window")

    @property
    def now_ts(self) -> float:
        return self.now.timestamp()

    def add_candidates(self, idx, source, relevance=None) -> None:
        self._table = self._table.add(idx, source, relevance, allowed=self.ws.eligible_mask())

    def lift_relevance(self, idx, values) -> None:
        from memlab.surfacing.stages.graph import _merge_lift

        self._table = _merge_lift(self._table, np.asarray(idx, dtype=np.int64),
                                  np.asarray(values, dtype=float))

    def normalised_relevance(self, idx, bm25=None):
        return normalised_relevance(self._table, idx, bm25)

    def bm25_of(self, idx):
        return bm25_of(self._table, idx)

    def recency_at(self, idx, at_ts):
        from memlab.signals.recency import recency

        return recency(self.ws.recency_reference_ts(idx), at_ts, self.config.recency_tau_h)

    def recency_term(self, rec):
        floor = self.config.recency_floor
        return floor + (1.0 - floor) * rec


class _LegacyTable:
    """Writable copies of a table's columns, for an old-style ``adjust(run, table)``."""

    def __init__(self, table: CandidateTable) -> None:
        for name in table.columns:
            setattr(self, name, table[name].copy())
        self.sources = list(table.source)
        self.filter_reason = list(table.filter_reason)

    def __len__(self) -> int:
        return len(self.idx)

    def filter(self, mask, reason: str) -> None:
        for pos in np.flatnonzero(mask & ~self.filtered).tolist():
            self.filter_reason[pos] = reason
        self.filtered = self.filtered | mask


@dataclass(frozen=True, repr=False)
class LegacyExpand(Stage):
    name: ClassVar[str] = "strategy_object_expand"
    phase: ClassVar[str] = "expand"
    factory: Any = None

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        obj = self.factory()
        shim = _LegacyRun(run, table)
        obj.expand(shim)
        return shim._table.with_attrs(legacy_strategy=(obj, shim))


@dataclass(frozen=True, repr=False)
class LegacyAdjust(Stage):
    name: ClassVar[str] = "strategy_object_adjust"
    phase: ClassVar[str] = "adjust"
    factory: Any = None

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        obj, shim = table.attrs.get("legacy_strategy") or (self.factory(), None)
        shim = shim if shim is not None else _LegacyRun(run, table)
        mutable = _LegacyTable(table)
        obj.adjust(shim, mutable)
        columns = {name: getattr(mutable, name) for name in table.columns if name != "idx"}
        columns["filter_reason"] = np.array(mutable.filter_reason, dtype=object)
        return table.with_columns(**columns)
