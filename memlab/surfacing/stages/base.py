"""Stages and their composition: ``stage_a >> stage_b`` is a :class:`Pipeline`.

A stage is a frozen dataclass with a ``name`` (the key of its timing in the record and of its
entry in :data:`STAGES`) and a ``phase`` (where in the pipeline it belongs, see
:data:`PHASES`). Calling it with the query's :class:`QueryRun` and a :class:`CandidateTable`
returns a new table; it never changes the one it was given, and it writes nothing but its
``notes`` entry. Its parameters are its dataclass fields; a field left at ``None`` means "what
the recipe (``SurfacingConfig``) says", so one pipeline serves every recipe.

A pipeline prints as the composition that built it (``bm25() >> spread() >> ...``), serialises
to a JSON-able list (:meth:`Pipeline.to_dict`, :meth:`Pipeline.from_dict`) through the stage
registry, and times every stage under its name.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, ClassVar, Iterable, Mapping

import numpy as np

from memlab._registry import register
from memlab.surfacing.table import CandidateTable

__all__ = ["Stage", "RecipeStage", "Pipeline", "QueryRun", "STAGES", "PHASES", "register_stage",
           "stage_from_dict", "per_config"]

# The order a pipeline's phases run in. "retrieve" finds candidates for the query, "expand" adds
# a strategy's own, "mandatory" adds the session's anchors and pins, "signals" computes every
# candidate's signals, "adjust" is a strategy's change to them, "score" is the composite, and
# "select" orders and cuts to the budget. Counterfactual re-scoring runs "score" and "select".
PHASES = ("retrieve", "expand", "mandatory", "signals", "adjust", "score", "select")
# the record's subtotals over a strategy's own stages (names older records and tests know)
PHASE_TIMINGS = {"expand": "strategy_expand", "adjust": "strategy_adjust"}

STAGES: dict[str, type["Stage"]] = {}


def register_stage(cls: type["Stage"] | None = None, *, replace: bool = False):
    """Make a :class:`Stage` subclass loadable by its ``name`` (a class decorator).

    A stage name already registered is refused with a ValueError; ``@register_stage(
    replace=True)`` replaces it on purpose (a notebook cell defining the stage run again).

    Examples
    --------
    >>> @register_stage
    ... @dataclass(frozen=True)
    ... class Halve(Stage):
    ...     name: ClassVar[str] = "halve_doc"
    ...     phase: ClassVar[str] = "adjust"
    ...     def __call__(self, run, table):
    ...         return table.with_columns(multiplier=table.multiplier * 0.5)
    >>> register_stage(Halve)
    Traceback (most recent call last):
    ...
    ValueError: the stage registry already holds 'halve_doc'; pass replace=True to replace it
    >>> register_stage(replace=True)(Halve).__name__
    'Halve'
    >>> STAGES.pop("halve_doc").__name__
    'Halve'
    """
    if cls is None:
        if not isinstance(replace, bool):
            raise ValueError(f"replace must be True or False, got {replace!r}")
        return lambda stage_class: register_stage(stage_class, replace=replace)
    if not (isinstance(cls, type) and issubclass(cls, Stage)):
        raise ValueError(f"register_stage takes a Stage subclass, got {cls!r}")
    if cls.phase not in PHASES:
        raise ValueError(f"{cls.__name__}.phase must be one of {PHASES}, got {cls.phase!r}")
    register(STAGES, cls.name, cls, what="stage", replace=replace)
    return cls


@dataclass
class QueryRun:
    """What every stage of one ``get_working_context`` call may read (stages do not write it,
    except for their own entry in ``notes``).

    ``terms`` are the query's BM25 terms (``tokens`` is a deprecated alias); ``anchors`` the
    session's anchor item numbers, ``pins`` the pinned item numbers and their weights (archived
    pins already left out); ``legacy`` is the seed's legacy mode.
    """

    ws: Any
    config: Any
    query: str
    terms: list[str]
    k: int
    now: datetime
    max_tokens: int | None = None
    legacy: bool = False
    decision: Any = None
    anchors: tuple[int, ...] = ()
    pins: Mapping[int, float] = field(default_factory=dict)
    lock: Any = None  # the store's shared lock (held during assembly; graph stages re-enter)
    notes: dict[str, Any] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def now_ts(self) -> float:
        return self.now.timestamp()

    @property
    def eligible(self) -> np.ndarray:
        """The workspace's eligibility mask (read-only), read once per query: nothing writes
        the store while a query runs. (Not functools.cached_property, which takes a lock on
        every read in Python 3.11.)"""
        mask = self.__dict__.get("_eligible")
        if mask is None:
            mask = self.__dict__["_eligible"] = self.ws.eligible_mask()
        return mask

    @property
    def tokens(self) -> list[str]:
        """Deprecated alias of :attr:`terms` (the query's BM25 terms, not an LLM token count)."""
        return self.terms


class Stage:
    """One step of surfacing: ``stage(run, table) -> table``. Subclasses are frozen dataclasses
    with class attributes ``name`` and ``phase``."""

    name: ClassVar[str] = "stage"
    phase: ClassVar[str] = "adjust"

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        raise NotImplementedError

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        """Whether the stage runs for this query (a disabled stage is neither run nor timed).
        By default every stage runs, except a strategy's adjustments in legacy mode."""
        return not (run.legacy and self.phase == "adjust")

    def __rshift__(self, other: "Stage | Pipeline") -> "Pipeline":
        return Pipeline((self,)) >> other

    def params(self) -> dict[str, Any]:
        """The stage's parameters (those set away from their defaults)."""
        if not dataclasses.is_dataclass(self):
            return {}
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                if getattr(self, f.name) != f.default}

    def to_dict(self) -> dict[str, Any]:
        return {"stage": self.name, **{k: _jsonable(v) for k, v in self.params().items()}}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.params().items())
        return f"{self.name}({args})"


class RecipeStage(Stage):
    """A stage whose parameters left at None are the recipe's: the one place that says so.

    ``recipe`` maps a field to the :class:`~memlab.surfacing.config.SurfacingConfig` attribute
    that stands in for None, read by :meth:`setting`; ``loaders`` maps a field that holds a
    configuration object to the function rebuilding it from :meth:`Stage.to_dict`'s output
    (:meth:`from_params`); ``requires`` names a setting without which the stage does not run
    (and legacy mode, which has no strategy stages, runs none of those either).

    Examples
    --------
    >>> @dataclass(frozen=True, repr=False)
    ... class Fresh(RecipeStage):
    ...     name: ClassVar[str] = "fresh_doc"
    ...     phase: ClassVar[str] = "expand"
    ...     recipe: ClassVar[dict] = {"n": "recent_candidates"}
    ...     n: int | None = None
    >>> from memlab.surfacing.config import DEFAULT
    >>> run = QueryRun(None, DEFAULT, "q", [], 5, None)
    >>> Fresh().setting(run, "n") == DEFAULT.recent_candidates, Fresh(3).setting(run, "n")
    (True, 3)
    """

    recipe: ClassVar[Mapping[str, str]] = {}
    loaders: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}
    requires: ClassVar[str | None] = None

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> "RecipeStage":
        """The stage of :meth:`Stage.to_dict`'s parameters (configuration objects rebuilt)."""
        params = dict(params)
        for name, load in cls.loaders.items():
            if params.get(name) is not None:
                params[name] = load(params[name])
        return cls(**params)

    def setting(self, run: QueryRun, name: str) -> Any:
        """The stage's ``name`` parameter, or the recipe's when it was left at None."""
        value = getattr(self, name)
        return getattr(run.config, self.recipe[name]) if value is None else value

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        if self.requires is None:
            return Stage.enabled(self, run, table)
        return not run.legacy and self.setting(run, self.requires) is not None


_PER_CONFIG: dict[tuple[int, str], tuple[Any, Any]] = {}


def per_config(config: Any, what: Any, build: Callable[[Any], Any]) -> Any:
    """``build(config)``, built once per configuration object and kept (a recipe is frozen): what
    a stage derives from the recipe (the composite's weights, the activation model) is not
    rebuilt on every query.

    >>> from memlab.surfacing.config import DEFAULT
    >>> per_config(DEFAULT, "doc", lambda c: object()) is per_config(DEFAULT, "doc", None)
    True
    """
    key = (id(config), what)
    hit = _PER_CONFIG.get(key)
    if hit is not None and hit[0] is config:  # the config is kept alive: its id is not reused
        return hit[1]
    if len(_PER_CONFIG) >= 256:
        _PER_CONFIG.clear()
    value = build(config)
    _PER_CONFIG[key] = (config, value)
    return value


def _jsonable(value: Any) -> Any:
    to_dict = getattr(value, "to_dict", None)
    if callable(to_dict):
        return to_dict()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    if isinstance(value, tuple):
        return [_jsonable(v) for v in value]
    return value


def stage_from_dict(data: Mapping[str, Any]) -> Stage:
    """The stage :meth:`Stage.to_dict` wrote; ValueError for anything else."""
    if not isinstance(data, Mapping) or not isinstance(data.get("stage"), str):
        raise ValueError(f"a stage must be a mapping with a 'stage' name, got {data!r}")
    cls = STAGES.get(data["stage"])
    if cls is None:
        raise ValueError(f"stage names {data['stage']!r}, which is not registered; "
                         f"registered: {sorted(STAGES)}")
    params = {k: v for k, v in data.items() if k != "stage"}
    try:
        return cls.from_params(params) if hasattr(cls, "from_params") else cls(**params)
    except TypeError as exc:
        raise ValueError(f"stage {data['stage']!r} has invalid parameters {params!r} ({exc})"
                         ) from None


class Pipeline:
    """Stages run in order: each takes the table the previous one returned.

    Examples
    --------
    >>> from memlab.surfacing.stages import bm25, spread, mandatory, signals, ppr, composite, budget
    >>> p = bm25() >> spread() >> mandatory() >> signals() >> ppr() >> composite() >> budget()
    >>> p
    bm25() >> spread() >> mandatory() >> signals() >> ppr() >> composite() >> budget()
    >>> Pipeline.from_dict(p.to_dict()) == p
    True
    >>> p.tail("score")
    composite() >> budget()
    """

    __slots__ = ("stages", "name", "_cached_plan")

    def __init__(self, stages: Iterable[Stage], name: str | None = None) -> None:
        stages = tuple(stages)
        for s in stages:
            if not isinstance(s, Stage):
                raise ValueError(f"a pipeline's stages must be Stage objects, got {s!r}")
        self.stages = stages
        self.name = name
        self._cached_plan = None

    def __rshift__(self, other: "Stage | Pipeline") -> "Pipeline":
        if isinstance(other, Stage):
            return Pipeline(self.stages + (other,))
        if isinstance(other, Pipeline):
            return Pipeline(self.stages + other.stages)
        raise ValueError(f">> composes stages and pipelines, got {other!r}")

    def named(self, name: str) -> "Pipeline":
        """The same stages under ``name`` (how a strategy is registered)."""
        return Pipeline(self.stages, name)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Pipeline) and self.stages == other.stages

    def __hash__(self) -> int:
        return hash(self.stages)

    def __len__(self) -> int:
        return len(self.stages)

    def __iter__(self):
        return iter(self.stages)

    def __repr__(self) -> str:
        return " >> ".join(repr(s) for s in self.stages) or "Pipeline(())"

    #: the phases a strategy's pipeline must hold (a surfacing from query to selection)
    STRATEGY_PHASES: ClassVar[tuple[str, ...]] = ("mandatory", "signals", "score", "select")

    def check_strategy(self, what: str) -> None:
        """Refuse, with a ValueError naming ``what``, a pipeline that cannot serve as a
        strategy: one missing a stage of any of :attr:`STRATEGY_PHASES` (the mandatory rows,
        the signals, the composite and the budgeted selection later stages read), or whose
        stages are out of :data:`PHASES` order (nothing may run after the selection).

        Examples
        --------
        >>> from memlab.surfacing.stages import bm25, signals, composite
        >>> (bm25() >> signals() >> composite()).check_strategy("strategy 'x'")
        Traceback (most recent call last):
        ...
        ValueError: strategy 'x' lacks a stage of phase 'mandatory', 'select' (bm25() >> signals() >> composite())
        """
        phases = [s.phase for s in self.stages]
        missing = [p for p in self.STRATEGY_PHASES if p not in phases]
        if missing:
            raise ValueError(f"{what} lacks a stage of phase {', '.join(map(repr, missing))} "
                             f"({self!r})")
        order = [PHASES.index(p) for p in phases]
        for before, after, stage in zip(order, order[1:], self.stages[1:]):
            if after < before:
                raise ValueError(f"{what} runs {stage!r} (phase {stage.phase!r}) after a later "
                                 f"phase; stages run in the order {PHASES} ({self!r})")

    def tail(self, phase: str) -> "Pipeline":
        """The stages from the first of ``phase`` (or a later phase) on."""
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        start = PHASES.index(phase)
        return Pipeline(s for s in self.stages if PHASES.index(s.phase) >= start)

    def before_phase(self, phase: str, stage: "Stage") -> "Pipeline":
        """This pipeline with ``stage`` inserted before its first stage of ``phase`` (or of a
        later phase; at the end if there is none), keeping the name.

        >>> from memlab.surfacing.stages import bm25, budget, composite
        >>> from memlab.surfacing.stages.scoring import Rerank
        >>> (bm25() >> composite() >> budget()).before_phase("select", Rerank("m.json"))
        bm25() >> composite() >> rerank(model='m.json') >> budget()
        """
        if phase not in PHASES:
            raise ValueError(f"phase must be one of {PHASES}, got {phase!r}")
        start = PHASES.index(phase)
        at = next((i for i, s in enumerate(self.stages) if PHASES.index(s.phase) >= start),
                  len(self.stages))
        return Pipeline(self.stages[:at] + (stage,) + self.stages[at:], self.name)

    def to_dict(self) -> list[dict[str, Any]]:
        return [s.to_dict() for s in self.stages]

    @classmethod
    def from_dict(cls, data: Any, name: str | None = None) -> "Pipeline":
        if isinstance(data, (str, bytes, Mapping)) or not isinstance(data, (list, tuple)):
            raise ValueError(f"a pipeline must be a list of stages, got {data!r}")
        return cls((stage_from_dict(d) for d in data), name)

    def __call__(self, run: QueryRun, table: CandidateTable | None = None) -> CandidateTable:
        """Run every enabled stage, timing each under its name in ``run.timings`` (ms)."""
        table = _EMPTY if table is None else table
        timings = run.timings
        for key in PHASE_TIMINGS.values():
            if key not in timings:
                timings[key] = 0.0
        clock = time.perf_counter_ns  # one clock read per stage boundary
        t0 = clock()
        for stage, name, phase_key, check in self._plan():
            if check is not None and not check(run, table):
                continue
            table = stage(run, table)
            t1 = clock()
            ms = (t1 - t0) * 1e-6
            t0 = t1
            timings[name] = timings.get(name, 0.0) + ms
            if phase_key is not None:
                timings[phase_key] += ms
        return table

    def _plan(self) -> list:
        """``(stage, name, phase timing key, enabled check or None)`` per stage, built once:
        a stage that keeps the default ``enabled`` outside the adjust phase always runs, so
        its check is not called per query."""
        plan = self._cached_plan
        if plan is None:
            plan = self._cached_plan = [
                (s, s.name, PHASE_TIMINGS.get(s.phase),
                 None if type(s).enabled is Stage.enabled and s.phase != "adjust"
                 else s.enabled)
                for s in self.stages]
        return plan


def as_array(values: Any, dtype=np.int64) -> np.ndarray:
    return np.asarray(values, dtype=dtype)


_EMPTY = CandidateTable.empty()
