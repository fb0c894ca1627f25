"""Strategy stages that add candidates (phase ``expand``) and their matching adjustments
(phase ``adjust``) for ``fast:recency``, ``factual:point-query``, ``procedural:lookup`` and
``temporal:windowed`` (SPEC §4.2). The graph stages of ``deep:multi-hop`` are in
:mod:`memlab.surfacing.stages.graph`."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.signals.recency import recency
from memlab.signals.time_index import top_by_score_then_time
from memlab.surfacing.stages.base import (CandidateTable, QueryRun, RecipeStage, Stage,
                                          register_stage)
from memlab.surfacing.stages.retrieval import _check_count, bm25_of
from memlab.surfacing.timewindow import parse_time_window, with_tail
from memlab.text import TITLE_KEYS, leading_segment, normalise_title

__all__ = ["Recent", "RecencyCue", "ExactMatch", "ProceduralItems", "ProceduralBoost", "Window",
           "WindowBoost", "recent", "recency_cue", "exact_match", "procedural", "procedural_boost",
           "window", "window_boost"]


def _unit(stage: str, name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not 0.0 <= value <= 1.0):
        raise ValueError(f"{stage}: {name} must be None or in [0, 1], got {value!r}")


def _nonneg(stage: str, name: str, value) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not value >= 0):
        raise ValueError(f"{stage}: {name} must be None or a number >= 0, got {value!r}")


@register_stage
@dataclass(frozen=True, repr=False)
class Recent(RecipeStage):
    """The workspace's ``n`` most recently touched eligible items join (source ``recent``);
    ``n=None``: the recipe's ``recent_candidates``."""

    name: ClassVar[str] = "recent"
    phase: ClassVar[str] = "expand"
    recipe: ClassVar[dict] = {"n": "recent_candidates"}
    n: int | None = None

    def __post_init__(self) -> None:
        _check_count("recent", "n", self.n)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        n = self.setting(run, "n")
        # latest reference first, ties by item number: O(n) on the store's kept recency order
        # (memlab.signals.time_index; the tests hold it to the full sort it replaced)
        return table.add(run.ws.most_recent(n), "recent", allowed=run.eligible)


@register_stage
@dataclass(frozen=True, repr=False)
class RecencyCue(RecipeStage):
    """A query that asks for recency ("latest", "today", ...: a ``recency_signal`` reason of the
    router) gets recency term ``floor + (1 - floor) * recency``; other queries keep the recipe's
    gentler ``recency_floor``. ``floor=None``: the recipe's ``recency_cue_floor``."""

    name: ClassVar[str] = "recency_cue"
    phase: ClassVar[str] = "adjust"
    recipe: ClassVar[dict] = {"floor": "recency_cue_floor"}
    floor: float | None = None

    def __post_init__(self) -> None:
        _unit("recency_cue", "floor", self.floor)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        reasons = run.decision.reasons if run.decision is not None else ()
        if not any(r.startswith("recency_signal:") for r in reasons):
            return table
        floor = self.setting(run, "floor")
        return table.with_columns(recency_term=floor + (1.0 - floor) * table.recency)


@register_stage
@dataclass(frozen=True, repr=False)
class ExactMatch(RecipeStage):
    """``factual:point-query``: exact-match boost on title/label/leading text; recency
    de-emphasised.

    An item matches exactly when the :func:`~memlab.text.normalise_title` of the query equals
    that of its ``title``, ``label`` or ``name`` metadata, or of its content's first segment
    (:func:`~memlab.text.leading_segment`: the first line up to a colon). Equality, not a prefix:
    "cat" does not match "Catalog: …". Matches get the multiplier ``1 + boost``; the recency term
    is raised to ``recency_exponent``. None: the recipe's ``exact_match_boost`` and
    ``point_query_recency_exponent``.
    """

    name: ClassVar[str] = "exact_match"
    phase: ClassVar[str] = "adjust"
    recipe: ClassVar[dict] = {"boost": "exact_match_boost",
                              "recency_exponent": "point_query_recency_exponent"}
    boost: float | None = None
    recency_exponent: float | None = None

    def __post_init__(self) -> None:
        _nonneg("exact_match", "boost", self.boost)
        _nonneg("exact_match", "recency_exponent", self.recency_exponent)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        exponent = self.setting(run, "recency_exponent")
        q = normalise_title(run.query)
        matched = []
        if q:
            item_of = run.ws.item
            for pos, i in enumerate(table.idx.tolist()):
                item = item_of(i)
                meta = item.metadata
                if any(isinstance(meta.get(key), str) and normalise_title(meta[key]) == q
                       for key in TITLE_KEYS) or \
                        normalise_title(leading_segment(item.content)) == q:
                    matched.append(pos)
        columns = {"recency_term": table.recency_term ** exponent}
        if matched:  # most queries match nothing: the columns stay as they are
            multiplier, exact = table.multiplier.copy(), table.exact_match.copy()
            multiplier[matched] *= 1.0 + self.setting(run, "boost")
            exact[matched] = True
            columns.update(multiplier=multiplier, exact_match=exact)
        return table._with(columns)


@register_stage
@dataclass(frozen=True, repr=False)
class ProceduralItems(Stage):
    """``procedural:lookup``: the best ``n`` BM25 matches among ``procedural`` items join
    (source ``procedural``); ``n=None``: ``k``."""

    name: ClassVar[str] = "procedural"
    phase: ClassVar[str] = "expand"
    n: int | None = None

    def __post_init__(self) -> None:
        _check_count("procedural", "n", self.n)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        docs = table.attrs.get("matched_docs", np.empty(0, np.int64))
        scores = table.attrs.get("matched_bm25", np.empty(0))
        mask = run.ws.procedural_mask()[docs]
        docs, scores = docs[mask], scores[mask]
        order = np.lexsort((docs, -scores))[:run.k if self.n is None else self.n]
        return table.add(docs[order], "procedural", allowed=run.eligible)


@register_stage
@dataclass(frozen=True, repr=False)
class ProceduralBoost(RecipeStage):
    """``procedural`` items get the multiplier ``1 + boost`` (None: the recipe's
    ``procedural_type_boost``)."""

    name: ClassVar[str] = "procedural_boost"
    phase: ClassVar[str] = "adjust"
    recipe: ClassVar[dict] = {"boost": "procedural_type_boost"}
    boost: float | None = None

    def __post_init__(self) -> None:
        _nonneg("procedural_boost", "boost", self.boost)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        boost = self.setting(run, "boost")
        multiplier = table.multiplier.copy()
        multiplier[run.ws.procedural_mask()[table.idx]] *= 1.0 + boost
        return table.with_columns(multiplier=multiplier)


@register_stage
@dataclass(frozen=True, repr=False)
class Window(RecipeStage):
    """``temporal:windowed``: items created inside the query's time window join (source
    ``window``), most relevant first, then newest, at most ``n`` (None: the recipe's
    ``temporal_window_candidates``).

    The window is parsed from the query (:func:`~memlab.surfacing.timewindow.parse_time_window`),
    extended by the recipe's ``temporal_window_tail_days`` past its end
    (:func:`~memlab.surfacing.timewindow.with_tail`) and left in ``attrs["window"]`` for
    :class:`WindowBoost`. Without a window the stage behaves
    like :class:`Recent` and notes ``no_time_window``.
    """

    name: ClassVar[str] = "window"
    phase: ClassVar[str] = "expand"
    recipe: ClassVar[dict] = {"n": "temporal_window_candidates"}
    n: int | None = None

    def __post_init__(self) -> None:
        _check_count("window", "n", self.n)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        window = with_tail(parse_time_window(run.query, run.now),
                           run.config.temporal_window_tail_days)
        run.notes["time_window"] = None if window is None else \
            [window.start.isoformat(), window.end.isoformat(), window.phrase]
        if window is None:
            run.notes["temporal"] = "no_time_window"
            return Recent()(run, table)
        table = table.with_attrs(window=window)
        created = run.ws.created_column()
        eligible = run.eligible
        m = self.setting(run, "n")
        # O(matches + m): the window's BM25 matches, then the newest unmatched items walked from
        # the window's end on the store's creation-time order (memlab.signals.time_index)
        docs = table.attrs.get("matched_docs", np.empty(0, np.int64))
        scores = table.attrs.get("matched_bm25", np.empty(0))
        inside = (scores > 0) & window.contains_ts(created[docs]) & eligible[docs]
        matched, bm25 = docs[inside], scores[inside]
        picked = [matched[top_by_score_then_time(matched, bm25, created[matched], m)]]
        need = m - len(picked[0])
        if need > 0:
            picked.append(run.ws.newest_created(
                window.start.timestamp(), window.end.timestamp(), need,
                lambda idx: eligible[idx] & (bm25_of(table, idx) == 0)))
        return table.add(np.concatenate(picked), "window", allowed=eligible)


@register_stage
@dataclass(frozen=True, repr=False)
class WindowBoost(RecipeStage):
    """In-window items (the :class:`Window` stage's window): being in the window is evidence of
    relevance, so their relevance term is ``floor + (1 - floor) * relevance``; recency is
    measured from the window's end rather than from now; their multiplier is ``1 + boost``. With
    ``restrict`` the others are filtered out (drop reason ``outside_window``). None: the recipe's
    ``temporal_window_relevance_floor``, ``temporal_window_boost``, ``temporal_restrict``."""

    name: ClassVar[str] = "window_boost"
    phase: ClassVar[str] = "adjust"
    recipe: ClassVar[dict] = {"floor": "temporal_window_relevance_floor",
                              "boost": "temporal_window_boost", "restrict": "temporal_restrict"}
    floor: float | None = None
    boost: float | None = None
    restrict: bool | None = None

    def __post_init__(self) -> None:
        _unit("window_boost", "floor", self.floor)
        _nonneg("window_boost", "boost", self.boost)
        if self.restrict is not None and not isinstance(self.restrict, bool):
            raise ValueError(f"window_boost: restrict must be None, True or False, "
                             f"got {self.restrict!r}")

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        window = table.attrs.get("window")
        if window is None:
            return table
        config = run.config
        idx = table.idx
        inside = window.contains_ts(run.ws.created_column()[idx])
        end_ts = min(window.end.timestamp(), run.now_ts)
        rec, rec_term = table.recency.copy(), table.recency_term.copy()
        rec[inside] = recency(run.ws.recency_reference_ts(idx[inside]), end_ts,
                              config.recency_tau_h)
        rec_floor = config.recency_floor
        rec_term[inside] = rec_floor + (1.0 - rec_floor) * rec[inside]
        floor = self.setting(run, "floor")
        rel_term = table.relevance_term.copy()
        rel_term[inside] = floor + (1.0 - floor) * table.relevance[inside]
        multiplier = table.multiplier.copy()
        multiplier[inside] *= 1.0 + self.setting(run, "boost")
        table = table.with_columns(recency=rec, recency_term=rec_term, relevance_term=rel_term,
                                   multiplier=multiplier)
        if self.setting(run, "restrict"):
            table = table.filter(~inside & ~table.mandatory, "outside_window")
        return table


def recent(n: int | None = None) -> Recent:
    """The most recently touched items join (``n=None``: ``recent_candidates``)."""
    return Recent(n)


def recency_cue(floor: float | None = None) -> RecencyCue:
    """Full recency for queries that ask for it (``floor=None``: ``recency_cue_floor``)."""
    return RecencyCue(floor)


def exact_match(boost: float | None = None,
                recency_exponent: float | None = None) -> ExactMatch:
    """The point-query exact-match boost and recency exponent."""
    return ExactMatch(boost, recency_exponent)


def procedural(n: int | None = None) -> ProceduralItems:
    """The best-matching procedural items join (``n=None``: ``k``)."""
    return ProceduralItems(n)


def procedural_boost(boost: float | None = None) -> ProceduralBoost:
    """Procedural items' multiplier (``boost=None``: ``procedural_type_boost``)."""
    return ProceduralBoost(boost)


def window(n: int | None = None) -> Window:
    """Items inside the query's time window join (``n=None``: ``temporal_window_candidates``)."""
    return Window(n)


def window_boost(floor: float | None = None, boost: float | None = None,
                 restrict: bool | None = None) -> WindowBoost:
    """In-window items' relevance floor, recency from the window's end, boost, restriction."""
    return WindowBoost(floor, boost, restrict)
