"""Replay a trace under a configuration into tidy DataFrames (SPEC §7).

``replay`` builds a fresh store, drives a :class:`~memlab.Memory` through the trace's events on a
manual clock set from the events' timestamps, and records every query's decision and candidates.
It uses only the public API, like any user would.

Frames (every frame has ``qid`` where it concerns a query):

``decisions``
    One row per query: ``qid``, ``session_id``, ``query``, ``category``, ``strategy_used``,
    ``requested_strategy``, ``confidence``, ``reasons`` and ``signals`` (JSON text), ``k``,
    ``max_tokens``, ``tokens_used``, ``n_candidates``, ``n_surfaced``, ``n_gold``, one
    ``<stage>_ms`` column per pipeline stage (the time it took; the ``budget`` stage's is
    ``budget_stage_ms``, see :data:`TIMING_COLUMNS`) and ``total_ms``, the graph stages'
    configured time budgets and flags (``spread_budget_ms``, ``spread_over_budget``,
    ``ppr_budget_ms``, ``ppr_method``, ``ppr_cache_hit``, ``ppr_saturated``,
    ``ppr_over_budget``, …). ``budget_ms`` is a deprecated alias of ``budget_stage_ms`` for one
    release (:data:`DEPRECATED_COLUMNS`): a ``*budget_ms`` column is otherwise a time budget.
``candidates``
    One row per query × candidate, surfaced or not: ``item_id``, ``rank``, ``source``, every
    signal raw and normalised, the composite terms (``term_*``), ``score``, ``surfaced``,
    ``drop_reason``, ``gold`` (the graded relevance, 0 when not gold).
``metrics``
    Long: ``qid``, ``measure``, ``value``. Relevance measures read the ranking chosen by
    ``measure_on``: ``"retrieved"`` (the default) is the surfaced items without the session's
    mandatory ones (anchors and pins, which surface whatever the query asks, so would otherwise
    hold rank 1 of every query); ``"surfaced"`` is every surfaced item in response order. The
    manifest records the choice (``measure_on``) and the number of queries left out of the
    relevance measures for having no judgements (``unjudged_queries``).
``log``
    What the other events did: one row per event that returns something (``resolve``,
    ``maintenance``, ``cache_peek``, ``promote``, ``ingest``), with its outcome as JSON text.
"""

from __future__ import annotations

import contextlib
import json
import os
import pickle
import platform
import re
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd

from memlab.clock import ManualClock
from memlab.harness.measures import (DEFAULT_MEASURES, Measure, check_measure_on, evaluate,
                                     parse_measures)
from memlab.harness.trace import Event, Trace, parse_ts
from memlab.model import SurfacingStrategy
from memlab.surfacing.config import DEFAULT, SurfacingConfig, get_recipe

__all__ = ["ReplayResult", "ReplayError", "replay", "build_manifest", "resolve_config",
           "in_sample_note", "measured_judgements", "DEFAULT_START", "TIMING_COLUMNS",
           "DEPRECATED_COLUMNS", "timing_column"]

# the decisions frame's timing column of a stage whose "<stage>_ms" would read as something
# else: the budget stage's time is "budget_stage_ms", since "budget_ms" everywhere else (the
# graph configurations, the notes, the frame's "ppr_budget_ms"/"spread_budget_ms") is a budget
TIMING_COLUMNS = {"budget": "budget_stage_ms"}
# the decisions frame's deprecated columns (for one release): old name -> the column it repeats
DEPRECATED_COLUMNS = {"budget_ms": "budget_stage_ms"}


def timing_column(stage: str) -> str:
    """The decisions frame's column holding the time (ms) of the stage or timing key ``stage``.

    Examples
    --------
    >>> timing_column("ppr"), timing_column("budget")
    ('ppr_ms', 'budget_stage_ms')
    """
    return TIMING_COLUMNS.get(stage, f"{stage}_ms")

DEFAULT_START = datetime(2024, 1, 1, tzinfo=timezone.utc)
_FRAMES = ("decisions", "candidates", "metrics", "log")
_JSON_COLUMNS = {"decisions": ("reasons", "signals", "category", "gold"), "log": ("outcome",)}


class ReplayError(ValueError):
    """An event the memory refused during replay (the message names the event and its line;
    ``position``, when known, is the event's position in the trace)."""

    position: int | None = None


def _refused(position: int, message: str) -> ReplayError:
    """A :class:`ReplayError` for the event at trace ``position``."""
    error = ReplayError(message)
    error.position = position
    return error


def resolve_config(config: Any) -> SurfacingConfig:
    """A SurfacingConfig, a recipe name, or None (memlab's ``DEFAULT``)."""
    if config is None:
        return DEFAULT
    if isinstance(config, str):
        return get_recipe(config)
    if isinstance(config, SurfacingConfig):
        return config
    raise ValueError(f"config must be a SurfacingConfig, a recipe name or None, got {config!r}")


def build_manifest(trace: Trace, config: SurfacingConfig, *, mode: str, k: int, seed: int,
                   measures: Iterable[Measure], extra: dict | None = None,
                   measure_on: str = "retrieved",
                   config_record: dict | None = None) -> dict[str, Any]:
    """Everything needed to reproduce a result (no wall-clock time: manifests are comparable).
    ``config_record`` is :func:`_config_record` of ``config`` taken earlier (default: now)."""
    import matplotlib
    import networkx
    import scipy

    import memlab
    return {
        "trace": {"name": trace.name, "hash": trace.hash(), "events": len(trace),
                  "queries": len(trace.queries),
                  "items": sum(1 for e in trace if e.type == "add")},
        **(config_record or _config_record(config)), "mode": mode, "k": k, "seed": seed,
        "measures": [str(m) for m in measures], "measure_on": check_measure_on(measure_on),
        "versions": {"memlab": memlab.__version__, "python": sys.version.split()[0],
                     "numpy": np.__version__, "scipy": scipy.__version__,
                     "pandas": pd.__version__, "networkx": networkx.__version__,
                     "matplotlib": matplotlib.__version__},
        "platform": platform.platform(),
        **(extra or {}),
    }


def _config_record(config: SurfacingConfig) -> dict[str, Any]:
    """``config`` for a manifest, free of where its files lie (as a trace's hash is): a ranker
    file is recorded by its name, and ``reranker_file`` holds that name and the SHA-256 of the
    bytes the model was parsed from, which identifies it wherever the recipe was read from.
    :func:`replay` takes this record before it runs, from the model it then uses."""
    from memlab.surfacing.rerank import is_ranker_file, load_ranker, ranker_label
    record: dict[str, Any] = {"config": config.to_dict()}
    if is_ranker_file(config.reranker):
        record["config"]["reranker"] = ranker_label(config.reranker)
        record["reranker_file"] = {"name": ranker_label(config.reranker),
                                   "sha256": load_ranker(config.reranker).file_sha256}
    return record


@dataclass
class ReplayResult:
    """The frames of one replay and its manifest. ``save``/``load`` round-trip through Parquet."""

    decisions: pd.DataFrame
    candidates: pd.DataFrame
    metrics: pd.DataFrame
    log: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)

    def _repr_html_(self) -> str:
        from memlab.harness.display import replay_html; return replay_html(self)  # noqa: E702

    def __repr__(self) -> str:
        from memlab.harness.display import replay_repr; return replay_repr(self)  # noqa: E702

    def summary(self) -> pd.Series:
        """The mean of every measure over the queries where it is defined."""
        if self.metrics.empty:
            return pd.Series(dtype=float)
        return self.metrics.groupby("measure", sort=False)["value"].mean()

    def save(self, path: str | Path) -> Path:
        """Write the frames as Parquet and the manifest as JSON into directory ``path``."""
        _require_pyarrow()
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        for name in _FRAMES:
            frame = getattr(self, name).copy()
            for column in _JSON_COLUMNS.get(name, ()):
                if column in frame:
                    frame[column] = frame[column].map(lambda v: json.dumps(v, sort_keys=True))
            frame.to_parquet(path / f"{name}.parquet", index=False)
        (path / "manifest.json").write_text(json.dumps(self.manifest, indent=2, sort_keys=True))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "ReplayResult":
        _require_pyarrow()
        path = Path(path)
        if not (path / "manifest.json").is_file():
            raise ValueError(f"path {str(path)!r} holds no saved result (manifest.json missing)")
        frames = {}
        for name in _FRAMES:
            frame = pd.read_parquet(path / f"{name}.parquet")
            for column in _JSON_COLUMNS.get(name, ()):
                if column in frame:
                    frame[column] = frame[column].map(json.loads)
            frames[name] = frame
        decisions = frames["decisions"]
        for old, new in DEPRECATED_COLUMNS.items():  # a result saved before a rename
            if old in decisions and new not in decisions:
                decisions[new] = decisions[old]
        return cls(**frames, manifest=json.loads((path / "manifest.json").read_text()))


def _require_pyarrow() -> None:
    try:
        import pyarrow  # noqa: F401
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError("saving and loading results needs pyarrow: "
                          "pip install 'memlab[parquet]'") from None


def _tidy(frame: pd.DataFrame) -> pd.DataFrame:
    """Give columns that are missing on some rows one honest type, so Parquet keeps them as is:
    flags become nullable booleans, text columns use None (not NaN) where absent."""
    for column in frame.columns:
        if frame[column].dtype != object:
            continue
        present = frame[column].dropna()
        if len(present) and all(isinstance(v, (bool, np.bool_)) for v in present):
            frame[column] = frame[column].astype("boolean")
        elif all(isinstance(v, str) for v in present):
            frame[column] = frame[column].astype(object).where(frame[column].notna(), None)
    return frame


def _gold_grades(gold: Any) -> dict[str, float]:
    if gold is None:
        return {}
    if isinstance(gold, dict):
        return {k: float(v) for k, v in gold.items()}
    return {g: 1.0 for g in gold}


def _flatten_stage(prefix: str, info: Any) -> dict[str, Any]:
    if not isinstance(info, dict):
        return {f"{prefix}_status": info}
    out = {}
    for key, value in info.items():
        if isinstance(value, (list, dict)):
            value = json.dumps(value, sort_keys=True)
        out[f"{prefix}_{key}"] = value
    budget, elapsed = info.get("budget_ms"), info.get("elapsed_ms")
    if "budget_ms" in info and elapsed is not None:
        # no time budget (``budget_ms=None``) can never be overrun; a stage of several runs,
        # each with its own budget (spreading per seed), overran when one of them did
        overrun = info.get("overrun_ms")
        out[f"{prefix}_over_budget"] = budget is not None and bool(
            overrun > 0 if overrun is not None else elapsed > budget)
    return out


def _progress(total: int, enabled: bool | None):
    """The bar: when asked (True), or by default (None) for 1,000+ events and only when stderr
    is a terminal (not in a notebook, a log file or CI, where a text bar prints line upon
    line)."""
    if enabled is False or (enabled is None and (total < 1000 or not _stderr_is_terminal())):
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional (the notebooks/test extras install it)
        return None
    return tqdm(total=total, desc="replay", unit="event")


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stderr
        return False


class _Runner:
    """Applies events to one memory and collects rows."""

    def __init__(self, trace: Trace, config: SurfacingConfig, mode: str, k: int, seed: int,
                 measures: list[Measure], record_candidates: bool,
                 force_strategy: str | None, analyzer: str = "porter",
                 measure_on: str = "retrieved") -> None:
        from memlab.memory import Memory
        from memlab.session import PMMemoryStore
        from memlab.store import MemoryStore

        start = trace.start or next((e.ts for e in trace.events if e.ts is not None),
                                    DEFAULT_START)
        self.clock = ManualClock(start)
        self.store = MemoryStore(analyzer=analyzer)
        self.default_workspace = trace.workspace_id
        self.memories: dict[str, Memory] = {}
        self._new_memory = lambda ws: Memory(store=self.store, workspace_id=ws,
                                             surfacing_mode=mode, clock=self.clock,
                                             config=config, seed=seed)
        self.caches: dict[str, Any] = {}  # cache name -> its short-term cache
        self._new_cache = lambda: PMMemoryStore(silo_size=4096)
        self.k, self.measures, self.measure_on = k, measures, measure_on
        self.unjudged = 0
        self.record_candidates = record_candidates
        self.force_strategy = force_strategy
        self.decisions: list[dict] = []
        # candidate columns as per-query chunks (arrays or lists): see candidate_frame
        self.candidate_columns: dict[str, list] = {}
        self.metrics: list[tuple[str, str, float]] = []
        self.log: list[dict] = []
        # per query, in event order: its event position, candidate rows and metric rows (what
        # merging shards of a sharded replay back into event order needs)
        self.query_chunks: list[tuple[int, int, int]] = []
        self.position = 0

    def candidate_frame(self) -> pd.DataFrame | None:
        """The recorded candidates as one DataFrame (None when nothing was recorded)."""
        if not self.candidate_columns:
            return None
        return pd.DataFrame({name: _joined(chunks)
                             for name, chunks in self.candidate_columns.items()})

    # ------------------------------------------------------------------ events
    def memory_for(self, event: Event):
        ws = event.get("workspace_id", self.default_workspace)
        mem = self.memories.get(ws)
        if mem is None:
            mem = self.memories[ws] = self._new_memory(ws)
        return mem

    def apply(self, pos: int, event: Event, batch: list[Event]) -> None:
        mem = self.memory = self.memory_for(event)
        kind = event.type
        if kind == "add":
            # one write for a run of adds made at different times: each item keeps the time of
            # its own event (the clock as the event left it), as one write per event would
            stamps, at = [], self.clock.now()
            for e in batch:
                at = e.ts or at
                stamps.append(at)
            items = []
            for e in batch:
                f = e.fields
                created = f.get("created_at")
                items.append({"content": f.get("content"),
                              "memory_type": f.get("memory_type", "semantic"),
                              "metadata": f.get("metadata"), "item_id": f.get("item_id"),
                              "created_at": None if created is None else parse_ts(created)})
            if len(set(stamps)) == 1:
                mem.add_many(items)
            else:
                mem.add_many(items, added_at=stamps)
                self.clock.set(stamps[-1])
        elif kind == "add_edge":
            # the bulk path: checked column by column (what one check per edge costs ~5 us of)
            fields = [e.fields for e in batch]
            mem.add_edges(pd.DataFrame({
                "src": [f.get("src") for f in fields], "dst": [f.get("dst") for f in fields],
                "edge_type": [f.get("edge_type", "RELATED") for f in fields],
                "weight": [f.get("weight", 1.0) for f in fields]}))
        elif kind == "query":
            self.position = pos
            self.query(event)
        elif kind == "pin":
            mem.pin_item(event.get("session_id"), event.get("item_id"), event.get("weight", 1.0))
        elif kind == "unpin":
            mem.unpin_item(event.get("session_id"), event.get("item_id"))
        elif kind == "anchor":
            mem.add_anchor(event.get("session_id"), event.get("content"),
                           event.get("anchor_type", "goal"), item_id=event.get("item_id"))
        elif kind == "clock":
            self.clock.advance(seconds=event.get("advance_s", 0.0))
        else:
            self.log.append({"event": pos, "type": kind, "outcome": self.other(event)})

    def other(self, event: Event) -> Any:
        from memlab.maintenance import MaintenanceConfig, Reasoner
        from memlab.session import promote_to_long_term, resolve_context
        from memlab.topics import ingest

        mem, kind = self.memory, event.type
        cache = self.caches.get(event.get("cache", "default"))
        if cache is None:
            cache = self.caches[event.get("cache", "default")] = self._new_cache()
        if kind == "cache_set":
            return {"index": cache.set(event.get("key"), event.get("value"))}
        if kind == "cache_peek":
            hit, value, index = cache.peek(event.get("key"))
            return {"hit": hit, "value": value, "index": index}
        if kind == "promote":
            return promote_to_long_term(event.get("session_id"), event.get("key"),
                                        event.get("value"), event.get("node_type", "concept"),
                                        memory=mem)
        if kind == "resolve":
            return resolve_context(event.get("session_id"), event.get("key"), cache,
                                   memory=mem)
        if kind == "ingest":
            fields = {k: v for k, v in event.fields.items() if k != "placement"}
            return ingest(event.get("placement"), memory=mem, **fields)
        if kind == "maintenance":
            passes = event.get("passes")
            config = MaintenanceConfig() if passes is None else \
                MaintenanceConfig(passes=tuple(passes))
            report = Reasoner(mem, config).run("trace", dry_run=event.get("dry_run", False))
            return {"counts": report.counts(), "actions": report.actions}
        raise ReplayError(f"unhandled event type {kind!r}")  # pragma: no cover - schema-checked

    def query(self, event: Event) -> None:
        mem = self.memory
        qid = event.get("qid")
        k = event.get("k", self.k)
        strategy = self.force_strategy or event.get("strategy")
        if mem.surfacing_mode == "legacy" and strategy not in (None, "fast:recency"):
            strategy = None  # legacy accepts only fast:recency; a trace's hint is not an error
        mem.get_working_context(event.get("session_id", "s1"), event.get("query"),
                                k=k, max_tokens=event.get("max_tokens"), strategy=strategy)
        record = mem.last_context_record
        gold = _gold_grades(event.get("gold"))
        decision = record.decision
        columns = record.candidate_arrays()  # rank order: the surfaced rows are the response's
        item_ids = _as_list(columns["item_id"])
        row = {
            "qid": qid, "workspace_id": record.workspace_id, "session_id": record.session_id,
            "query": record.query,
            "category": event.get("category"), "mode": record.mode, "recipe": record.recipe,
            "strategy_used": record.strategy_used, "implementation": record.implementation,
            "requested_strategy": record.requested_strategy,
            "confidence": decision.confidence, "reasons": list(decision.reasons),
            "signals": dict(decision.signals), "k": k, "max_tokens": record.max_tokens,
            "tokens_used": record.tokens_used, "n_candidates": len(item_ids),
            "n_surfaced": len(record.surfaced_ids), "n_gold": len(gold), "gold": gold,
            "decision_id": record.decision_id, "now": record.now,
        }
        for stage, ms in record.timings_ms.items():
            row[timing_column(stage)] = ms
        for old, new in DEPRECATED_COLUMNS.items():
            if new in row:
                row[old] = row[new]
        for prefix, key in (("spread", "spreading"), ("ppr", "ppr")):
            if key in record.notes:
                row.update(_flatten_stage(prefix, record.notes[key]))
        self.decisions.append(row)
        n = len(item_ids) if self.record_candidates else 0
        metrics_before = len(self.metrics)
        if self.record_candidates:  # columns grow as chunks; one DataFrame at the end
            chunks = self.candidate_columns
            chunks.setdefault("qid", []).append([qid] * n)
            chunks.setdefault("decision_id", []).append([record.decision_id] * n)
            for name, values in columns.items():
                chunks.setdefault(name, []).append(item_ids if name == "item_id" else values)
            chunks.setdefault("gold", []).append([gold.get(i, 0.0) for i in item_ids])
        ranking, measured_gold = measured_judgements(
            item_ids, _as_list(columns["surfaced"]), _as_list(columns["mandatory"]), gold,
            self.measure_on)
        self.unjudged += not measured_gold
        for name, value in evaluate(self.measures, ranking, measured_gold,
                                    tokens=record.tokens_used,
                                    latency_ms=record.timings_ms["total"], qid=qid).items():
            self.metrics.append((qid, name, value))
        self.query_chunks.append((self.position, n, len(self.metrics) - metrics_before))


def _as_list(values: Any) -> list:
    return values.tolist() if isinstance(values, np.ndarray) else list(values)


def _joined(chunks: list) -> np.ndarray | list:
    """One frame column from per-query chunks, as the frame would infer it from one list of
    every chunk's values: numeric and boolean arrays of one dtype are joined as arrays (what
    a list of their values becomes: int64, float64 or bool), anything else as one list."""
    kinds = {c.dtype for c in chunks if isinstance(c, np.ndarray)}
    if len(kinds) == 1 and all(isinstance(c, np.ndarray) for c in chunks):
        dtype = kinds.pop()
        target = {"b": np.bool_, "i": np.int64, "f": np.float64}.get(dtype.kind)
        if target is not None and dtype.itemsize <= 8:
            return np.concatenate(chunks).astype(target, copy=False)
    out: list = []
    for c in chunks:
        out.extend(c.tolist() if isinstance(c, np.ndarray) else c)
    return out


def measured_judgements(item_ids: Iterable[str], surfaced: Iterable[bool],
                        mandatory: Iterable[bool], gold: Mapping[str, float],
                        measure_on: str) -> tuple[list[str], dict[str, float]]:
    """The ranking the measures read and the gold they score it against, from candidate rows
    in rank order.

    ``"surfaced"``: every surfaced item, against all of ``gold``. ``"retrieved"``: the surfaced
    items that are not mandatory (the session's anchors and pins, a pinned item the query also
    retrieved included), against the gold without the mandatory items: an item the session
    forced in is neither a hit nor a miss of retrieval. A query whose only judged items were
    mandatory is then unjudged (no relevance measures), as trec_eval leaves out a query
    without qrels.

    Examples
    --------
    >>> measured_judgements(["goal", "a", "b", "c"], [True, True, False, True],
    ...                     [True, False, False, False], {"goal": 1, "c": 1}, "retrieved")
    (['a', 'c'], {'c': 1})
    >>> measured_judgements(["goal", "a"], [True, True], [True, False], {"goal": 1}, "retrieved")
    (['a'], {})
    """
    keep_mandatory = check_measure_on(measure_on) == "surfaced"
    rows = list(zip(item_ids, surfaced, mandatory))
    ranking = [item for item, shown, forced in rows if shown and (keep_mandatory or not forced)]
    if keep_mandatory:
        return ranking, dict(gold)
    forced = {item for item, _, is_forced in rows if is_forced}
    return ranking, {item: grade for item, grade in gold.items() if item not in forced}


def _blame_in_batch(runner: _Runner, events: list[Event], positions: list[int],
                    batch_error: ValueError) -> None:
    """Re-apply a refused bulk write's ``events`` (at trace ``positions``) one by one; raise
    :class:`ReplayError` at the first refused."""
    for pos, event in zip(positions, events):
        if event.ts is not None:
            runner.clock.set(event.ts)
        try:
            runner.apply(pos, event, [event])
        except ValueError as exc:
            raise _refused(pos, f"event {pos} (line {pos + 2}, {event.type}): {exc}") from exc
    # every event passed alone (not expected: the checks are per event), so blame the batch
    first, last = positions[0], positions[-1]
    raise _refused(first, f"events {first}..{last} (lines {first + 2}..{last + 2}, "
                          f"{events[0].type}): {batch_error}") from batch_error


_SHARED_CACHE_EVENTS = frozenset({"cache_set", "cache_peek", "promote", "resolve"})


def _workspace_of(trace: Any, event: Event) -> str:
    return event.fields.get("workspace_id", trace.workspace_id)


@dataclass
class _Shard:
    """What one worker of a sharded replay needs: its workspaces' events and the clock events,
    at their positions in the whole trace, with every run of another shard's events replaced by
    one clock event at the run's last time (the clock is set, never read, by those events, and
    the run still ends a bulk write as it does serially). About 1/n of the trace per worker,
    where shipping the whole trace to every worker cost a pickle of all of it per worker."""

    start: datetime
    workspace_id: str
    events: list[Event]
    positions: list[int]

    def __len__(self) -> int:
        return len(self.events)

    # pickled as plain tuples: a frozen dataclass instance pickles through its reduce protocol,
    # measured on 500 x 50 LongMemEval-shaped shards: 1.23 s on the driver and 2.7 s in the
    # workers, as tuples 1.01 s and 1.5 s (the Event objects rebuilt included)
    def __getstate__(self) -> tuple:
        return (self.start, self.workspace_id,
                [(e.type, e.fields, e.ts) for e in self.events], self.positions)

    def __setstate__(self, state: tuple) -> None:
        self.start, self.workspace_id, events, self.positions = state
        self.events = [Event(*e) for e in events]


def _trace_start(trace: Trace) -> datetime:
    return trace.start or next((e.ts for e in trace.events if e.ts is not None), DEFAULT_START)


def _split(trace: Trace, shards: list[frozenset[str]]) -> list[_Shard]:
    """Each shard's events (see :class:`_Shard`), in one pass over the trace."""
    owner = {ws: s for s, members in enumerate(shards) for ws in members}
    start, default = _trace_start(trace), trace.workspace_id
    parts = [_Shard(start, default, [], []) for _ in shards]
    last_ts: list[datetime | None] = [None] * len(shards)  # the open gap's last time, per shard
    in_gap = [False] * len(shards)
    for pos, event in enumerate(trace.events):
        if event.type == "clock":
            mine = range(len(shards))
        else:
            mine = (owner[event.fields.get("workspace_id", default)],)
        for s in mine:
            if in_gap[s]:
                parts[s].events.append(Event("clock", {"advance_s": 0.0}, last_ts[s]))
                parts[s].positions.append(pos - 1)
                in_gap[s], last_ts[s] = False, None
            parts[s].events.append(event)
            parts[s].positions.append(pos)
        if len(mine) == 1:
            for s in range(len(shards)):
                if s != mine[0]:
                    in_gap[s] = True
                    last_ts[s] = event.ts or last_ts[s]
    return parts


def _run_events(trace: Trace | _Shard, settings: tuple, progress: bool | None = False
                ) -> "_Runner":
    """Apply ``trace``'s events in order (a :class:`_Shard`'s at their trace positions) and
    return the runner."""
    (config, mode, k, seed, measures, record_candidates, force_strategy, analyzer,
     measure_on) = settings
    runner = _Runner(trace, config, mode, k, seed, measures, record_candidates, force_strategy,
                     analyzer, measure_on)
    bar = _progress(len(trace), progress)
    events = trace.events
    positions = getattr(trace, "positions", None)
    i = 0
    while i < len(events):
        event = events[i]
        end = i + 1
        if event.type in ("add", "add_edge"):  # consecutive writes go in as one bulk write
            # (adds whatever their times, each item stamped with its own; edges at one time)
            workspace = event.get("workspace_id")
            same_time = event.type == "add_edge"
            while end < len(events) and events[end].type == event.type and \
                    (not same_time or events[end].ts in (None, event.ts)) and \
                    events[end].get("workspace_id") == workspace:
                end += 1
        if event.ts is not None:
            runner.clock.set(event.ts)
        pos = i if positions is None else positions[i]
        try:
            runner.apply(pos, event, events[i:end])
        except ValueError as exc:
            if end - i == 1:
                raise _refused(pos, f"event {pos} (line {pos + 2}, {event.type}): {exc}") \
                    from exc
            # A bulk write is all or nothing, so nothing of it was applied: apply its events one
            # at a time to name the event that was refused (its own line, not the batch's first).
            _blame_in_batch(runner, events[i:end],
                            list(range(i, end)) if positions is None else positions[i:end], exc)
        if bar is not None:
            bar.update(end - i)
        i = end
    if bar is not None:
        bar.close()
    return runner


def _shards(trace: Trace, n_workers: int) -> list[frozenset[str]]:
    """The trace's workspaces in up to ``n_workers`` groups of about equal work, or one group
    when they share state a memory does not own: a short-term cache used from two workspaces,
    or a pin session in two (the store refuses the second: sharded, it would not).

    Work is counted in questions (a query weighs 20 other events: measured on LoCoMo, a
    question costs about as much in every conversation). One group per worker, because a
    group's fixed costs (a fresh store, its rows' transfer) are paid per group; the groups are
    balanced by longest-processing-time first, then improved by moving or swapping one
    workspace between the heaviest and the lightest group while that lowers the heaviest."""
    work: dict[str, int] = {}
    cache_users: dict[str, set[str]] = {}
    pin_users: dict[str, set[str]] = {}
    for event in trace.events:
        if event.type == "clock":
            continue
        ws = _workspace_of(trace, event)
        work[ws] = work.get(ws, 0) + (20 if event.type == "query" else 1)
        if event.type in _SHARED_CACHE_EVENTS:
            cache_users.setdefault(event.fields.get("cache", "default"), set()).add(ws)
        elif event.type in ("pin", "unpin"):
            pin_users.setdefault(event.fields.get("session_id"), set()).add(ws)
    if any(len(users) > 1 for users in (*cache_users.values(), *pin_users.values())):
        return [frozenset(work)]
    return [frozenset(g) for g in _balance(work, min(len(work), n_workers)) if g]


def _balance(work: Mapping[str, int], n: int) -> list[list[str]]:
    """``work``'s keys in ``n`` groups whose largest total is small (LPT, then local moves)."""
    groups: list[list[str]] = [[] for _ in range(n)]
    totals = [0] * n
    for ws in sorted(work, key=lambda w: (-work[w], w)):
        g = min(range(n), key=lambda j: (totals[j], j))
        groups[g].append(ws)
        totals[g] += work[ws]
    for _ in range(4 * len(work)):  # bounded: each step lowers the heaviest group's total
        hi = max(range(n), key=lambda j: (totals[j], -j))
        lo = min(range(n), key=lambda j: (totals[j], j))
        gap, best = totals[hi] - totals[lo], None
        for a in groups[hi]:
            for b in [None, *groups[lo]]:
                delta = work[a] - (0 if b is None else work[b])  # what moves from hi to lo
                if 0 < delta < gap and (best is None or abs(gap - 2 * delta) <
                                        abs(gap - 2 * best[0])):
                    best = (delta, a, b)
        if best is None:
            break
        delta, a, b = best
        groups[hi].remove(a)
        groups[lo].append(a)
        if b is not None:
            groups[lo].remove(b)
            groups[hi].append(b)
        totals[hi] -= delta
        totals[lo] += delta
    return [sorted(g) for g in groups]


def _encode_frame(frame: pd.DataFrame | None) -> dict[str, Any] | None:
    """``frame`` as compact columns for the trip from a worker to the driver (None stays None):
    a string column as integer codes into its distinct values (missing: -1), and as runs of
    equal codes when that halves it (a candidate row repeats its query's ``qid`` and
    ``decision_id``); a numeric or boolean column as runs of bitwise-equal values when that
    halves it, else as its array (one buffer); any other column as it is.
    :func:`_decode_frame` gives back an equal frame (dtypes, missing values and column order
    included); the driver's work is a few vectorized takes per column, none per row."""
    if frame is None:
        return None
    columns = []
    for name in frame.columns:
        values = frame[name].array
        if isinstance(values.dtype, pd.StringDtype) or (
                values.dtype == object and len(values) and
                pd.api.types.infer_dtype(values, skipna=False) == "string"):
            codes, uniques = pd.factorize(values, use_na_sentinel=True)
            codes = codes.astype(np.int32 if len(uniques) < 2 ** 31 else np.int64)
            starts = np.flatnonzero(np.diff(codes, prepend=codes[:1] - 1))
            if 2 * len(starts) <= len(codes):
                lengths = np.diff(np.append(starts, len(codes)))
                columns.append(("runs", codes[starts], lengths, uniques))
            else:
                columns.append(("codes", codes, uniques))
        elif isinstance(values.dtype, np.dtype) and values.dtype.kind in "biuf":
            # numbers and booleans: runs of bitwise-equal values (NaN and -0.0 kept as they
            # are) when that halves the column (a score term that is 0 for most candidates)
            numbers = np.ascontiguousarray(values.to_numpy())
            bits = numbers.view(f"u{numbers.dtype.itemsize}")
            starts = np.flatnonzero(np.diff(bits, prepend=bits[:1] ^ 1)) if len(bits) else bits
            if 2 * len(starts) <= len(bits) and len(bits):
                lengths = np.diff(np.append(starts, len(bits)))
                columns.append(("number_runs", numbers[starts], lengths))
            else:
                columns.append(("raw", numbers))
        else:
            columns.append(("raw", values))
    return {"columns": frame.columns, "rows": len(frame), "data": columns}


def _decode_frame(encoded: dict[str, Any] | None) -> pd.DataFrame | None:
    """The frame :func:`_encode_frame` encoded (None stays None)."""
    if encoded is None:
        return None
    arrays = []
    for column in encoded["data"]:
        kind = column[0]
        if kind == "raw":
            arrays.append(column[1])
            continue
        if kind == "number_runs":
            arrays.append(np.repeat(column[1], column[2]))
            continue
        codes = np.repeat(column[1], column[2]) if kind == "runs" else column[1]
        uniques = column[-1]
        if isinstance(uniques, np.ndarray):  # an object column of strings: no missing values
            arrays.append(uniques[codes])
        else:
            arrays.append(uniques.take(codes, allow_fill=True))
    names = encoded["columns"]
    if not arrays:
        return pd.DataFrame(index=pd.RangeIndex(encoded["rows"]), columns=names)
    return pd.DataFrame(dict(zip(names, arrays)), columns=names)


def _replay_shard(shard: _Shard, settings: tuple) -> dict[str, Any]:
    """One shard's replay on a worker: its frames' rows, the large ones as DataFrames built on
    the worker (column arrays travel at memory speed, where lists of millions of small objects
    cost seconds to pickle and to turn into a frame; measured on LoCoMo), and per query its
    trace position and its numbers of candidate and metric rows. Measures travel by name."""
    settings = settings[:4] + (parse_measures(settings[4]),) + settings[5:]
    runner = _run_events(shard, settings)
    return {"decisions": runner.decisions,
            "candidates": _encode_frame(runner.candidate_frame()),
            "metrics": _encode_frame(pd.DataFrame(runner.metrics,
                                                  columns=["qid", "measure", "value"])),
            "log": runner.log, "unjudged": runner.unjudged,
            "chunks": np.array(runner.query_chunks, dtype=np.int64).reshape(-1, 3)}


def _replay_shard_pickled(shard: bytes, settings: tuple) -> bytes:
    """:func:`_replay_shard` of a pickled shard, its result as one pickle (Dask's messages
    carry bytes as they are). A :class:`ValueError` of the trace's own (a :class:`ReplayError`,
    a refused event) is returned inside the pickle, not raised, as plain data: its trace
    position (None when it has none), its class's name and its message (an exception object
    may not unpickle on the driver: ``LimitExceeded`` needs arguments its pickle does not
    carry). The driver raises the one at the smallest position, as the serial run would have.
    Whatever else a worker meets is raised (once: a shard's replay is deterministic)."""
    try:
        out = _replay_shard(pickle.loads(shard), settings)
    except ValueError as exc:
        out = {"error": {"position": getattr(exc, "position", None),
                         "type": type(exc).__name__, "message": str(exc)}}
    return pickle.dumps(out, protocol=pickle.HIGHEST_PROTOCOL)


# A shard is run again this many times when its worker is lost (its events, scattered to that
# worker, are lost with it, so Dask cancels its task): the driver sends the events again to a
# live worker and submits the task again. A shard's replay is a pure function of its events and
# settings (deterministic, nothing written outside the worker), so a rerun gives the same rows;
# an error it raises is raised at once (Dask's ``retries`` would only repeat it).
_SHARD_RETRIES = 2
# How long the driver waits to open connections to the workers (all at once) before it sends
# the shards through the scheduler instead (a remote scheduler behind a gateway: its workers'
# addresses are not reachable from the driver), how long an "unreachable" answer is kept (a
# slow handshake should not send every later replay through the scheduler), and how long the
# driver waits for a live worker after losing one.
_PROBE_TIMEOUT_S = 5.0
_UNREACHABLE_TTL_S = 60.0
_WORKER_WAIT_S = 120.0
# (scheduler address, worker address) -> (reached?, time.monotonic() of the answer)
_REACHABLE: dict[tuple[str, str], tuple[bool, float]] = {}
# schedulers whose workers this process was told it cannot reach (warned once each)
_WARNED_UNREACHABLE: set[str] = set()


async def _tcp_open(host: str, port: int) -> None:
    """Open (and close) a plain TCP connection to ``host:port``: a refused port raises
    :class:`ConnectionRefusedError` at once, where Dask's ``connect`` retries it until its
    time-out."""
    import asyncio

    _, writer = await asyncio.open_connection(host, port)
    writer.close()


_SCHEDULER_TIMEOUT_S = 10.0


def _probe_scheduler(address: str, timeout: float | None = None) -> None:
    """Raise :class:`OSError` (naming why, in one line) unless a Dask *scheduler* answers at
    ``address`` within ``timeout`` s: a refused port fails at once, and something else that
    answers (an HTTP server, whose reply Dask's handshake would read as a frame of exabytes,
    or a silent peer, which would make the client wait for ever) fails at the time-out. It runs
    on its own event loop in a thread, so a caller inside a running loop (Jupyter) can use it.
    """
    import asyncio

    timeout = _SCHEDULER_TIMEOUT_S if timeout is None else timeout

    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    async def identify() -> Any:
        scheme, location = parse_address(address)
        if scheme in ("tcp", "tls"):
            await _tcp_open(*parse_host_port(location))
        comm = await connect(address, timeout=timeout)
        try:
            await comm.write({"op": "identity", "reply": True})
            return await comm.read()
        finally:
            comm.abort()

    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["reply"] = asyncio.run(asyncio.wait_for(identify(), timeout))
        except BaseException as exc:  # noqa: BLE001 - reported below, as an OSError
            outcome["error"] = exc

    thread = threading.Thread(target=run, daemon=True, name="memlab-probe-scheduler")
    thread.start()
    thread.join(timeout + 5.0)
    error, reply = outcome.get("error"), outcome.get("reply")
    if thread.is_alive() or isinstance(error, (asyncio.TimeoutError, TimeoutError)):
        raise OSError(f"nothing answered as a Dask scheduler within {timeout:g} s")
    if error is not None:
        raise OSError(f"{type(error).__name__}: {' '.join(str(error).split())[:200]}")
    if not isinstance(reply, dict) or reply.get("type") != "Scheduler":
        raise OSError(f"what answers is not a Dask scheduler (identity {str(reply)[:80]!r})")


async def _probe_worker(address: str, timeout: float, connection_args: dict) -> None:
    """Raise unless a Dask connection to the worker at ``address`` opens (a plain TCP connection
    first, for ``tcp://`` and ``tls://``, so a refused port fails fast)."""
    from distributed.comm import connect
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, location = parse_address(address)
    if scheme in ("tcp", "tls"):
        await _tcp_open(*parse_host_port(location))
    comm = await connect(address, timeout=timeout, **connection_args)
    await comm.close()


async def _probe_workers(workers: list[str], timeout: float,
                         connection_args: dict) -> dict[str, bool]:
    """Every worker probed at once, for ``timeout`` s in all; stops at the first failure.
    The answers known: the failed worker(s) False, those that answered True, and on a
    time-out the unanswered ones False (a stop at a failure leaves them unknown)."""
    import asyncio

    tasks = {asyncio.ensure_future(_probe_worker(w, timeout, connection_args)): w
             for w in workers}
    try:
        done, pending = await asyncio.wait(tasks, timeout=timeout,
                                           return_when=asyncio.FIRST_EXCEPTION)
    finally:
        for task in tasks:
            task.cancel()
    known = {tasks[t]: t.exception() is None for t in done}
    if all(known.values()):  # a time-out: the ones still waiting did not answer
        known.update({tasks[t]: False for t in pending})
    return known


def _known_reachable(scheduler: str, worker: str) -> bool | None:
    entry = _REACHABLE.get((scheduler, worker))
    if entry is None or (not entry[0] and
                         time.monotonic() - entry[1] > _UNREACHABLE_TTL_S):
        return None
    return entry[0]


def _remember_reachable(scheduler: str, answers: Mapping[str, bool]) -> None:
    if len(_REACHABLE) > 4096:  # schedulers come and go: forget the old ones' answers
        _REACHABLE.clear()
    now = time.monotonic()
    for worker, ok in answers.items():
        _REACHABLE[(scheduler, worker)] = (ok, now)


def _workers_reachable(client: Any, workers: list[str],
                       timeout: float = _PROBE_TIMEOUT_S) -> bool:
    """Whether this process can open a connection to every worker in ``workers``. The workers
    not answered for yet are probed at once (``timeout`` s in all, stopping at the first
    refusal); the answers are kept per (scheduler, worker) address, an "unreachable" one for
    ``_UNREACHABLE_TTL_S`` s. Sending a shard straight to its worker
    (``scatter(direct=True)``) and gathering its rows straight back need this; a driver that
    cannot reach the workers sends and gathers through the scheduler instead."""
    scheduler = client.scheduler.address
    known = {w: _known_reachable(scheduler, w) for w in workers}
    if False in known.values():
        return False
    missing = [w for w, ok in known.items() if ok is None]
    if not missing:
        return True
    answers = client.sync(_probe_workers, missing, timeout, dict(client.connection_args))
    _remember_reachable(scheduler, answers)
    return all(answers.get(w, False) for w in missing)


def _run_shards_on_dask(trace: Trace, settings: tuple, shards: list[frozenset[str]],
                        address: str | None, n_workers: int
                        ) -> tuple[list[dict[str, Any]], int, bool]:
    """Each shard's replay on the cluster (results in shard order), how many shards were run
    again after their worker was lost, and whether the shards went through the scheduler (the
    driver could not reach the workers)."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    shipped = settings[:4] + ([str(m) for m in settings[4]],) + settings[5:]
    # a LocalCluster memlab starts gets no more workers than there are shards
    with dask_client(address, n_workers if address is not None
                     else min(n_workers, len(shards))) as client:
        scheduler = client.scheduler.address
        workers = sorted(client.scheduler_info()["workers"])
        if address is not None and len(workers) not in (0, n_workers):
            shards = _shards(trace, len(workers)) or shards  # one group per worker it has
        parts = [pickle.dumps(part, protocol=pickle.HIGHEST_PROTOCOL)
                 for part in _split(trace, shards)]
        # one shard per worker, in order (Dask may still move one to an idle worker); its
        # events go straight to that worker, as bytes: passed in the task, they went through
        # the scheduler, which unpickles a task's arguments and pickles them again for the
        # worker (measured at 500 x 100 LongMemEval-shaped: ~12 s of the driver's CPU, where
        # the LocalCluster's scheduler runs). A driver that cannot reach the workers sends them
        # through the scheduler, and gathers the rows through it, for the rest of the replay
        # (a direct send or gather that fails anyway switches it there too).
        direct = bool(workers) and _workers_reachable(client, workers)
        via_scheduler = bool(workers) and not direct

        def unreachable(where: list[str]) -> None:
            nonlocal direct, via_scheduler
            direct, via_scheduler = False, True
            _remember_reachable(scheduler, {w: False for w in where})

        def submit(data: bytes, where: list[str] | None):
            if where is not None:
                if direct:
                    try:
                        [data] = client.scatter([data], workers=where, direct=True, hash=False)
                    except OSError:  # unreachable after all: the scheduler from now on
                        unreachable(where)
                if not direct:
                    [data] = client.scatter([data], workers=where, direct=False, hash=False)
            return client.submit(_replay_shard_pickled, data, shipped, pure=False,
                                 workers=where, allow_other_workers=True)

        def gather(future) -> bytes:
            if direct:
                # straight from the workers: through the scheduler (in this process for a
                # LocalCluster) every byte of the rows was handled twice on the driver's side
                # (measured: ~90% of its CPU during a sharded LoCoMo replay was outside its
                # main thread)
                try:
                    return client.gather(future, direct=True)
                except OSError:  # a worker unreachable after all: the scheduler from now on
                    unreachable(workers)
            return client.gather(future, direct=False)

        futures = [submit(data, [workers[i % len(workers)]] if workers else None)
                   for i, data in enumerate(parts)]
        shard_of = {future.key: i for i, future in enumerate(futures)}
        results: list[Any] = [None] * len(parts)
        reruns = [0] * len(parts)
        try:
            pending = as_completed(futures, loop=client.loop)  # not the default client's loop
            for future in pending:
                i = shard_of[future.key]
                try:
                    results[i] = pickle.loads(gather(future))
                    continue
                except Exception as exc:
                    # lost with its worker: its events (scattered there) are gone, so Dask
                    # cancels the task; anything else (the task's own error, a broken
                    # connection to the scheduler) is raised as it is
                    if future.status not in ("cancelled", "lost") and \
                            not isinstance(exc, KilledWorker):
                        raise
                    if reruns[i] >= _SHARD_RETRIES:
                        names = ", ".join(map(repr, sorted(shards[i])))
                        raise RuntimeError(
                            f"shard {i} of the sharded replay (workspaces {names}): its worker "
                            f"was lost {reruns[i] + 1} times; memory limit?") from exc
                reruns[i] += 1
                for placing in range(3):
                    client.wait_for_workers(1, timeout=_WORKER_WAIT_S)
                    # the live worker with the fewest tasks (a new one, started in the lost
                    # one's place, has none), ties by address
                    processing = client.processing()
                    live = sorted(client.scheduler_info()["workers"])
                    if not live:  # the worker that wait saw is gone again
                        if placing == 2:
                            raise RuntimeError(
                                f"shard {i} of the sharded replay: no live worker to run it "
                                f"again on (every worker was lost)") from None
                        continue
                    where = [min(live, key=lambda w: len(processing.get(w, ())))]
                    if direct and not _workers_reachable(client, where):
                        unreachable(where)
                    try:
                        retry = submit(parts[i], where)
                        break
                    except KeyError:  # that worker was lost too, since (the scheduler's
                        if placing == 2:  # scatter names the worker it no longer has)
                            raise
                shard_of[retry.key] = i
                futures[i] = retry
                pending.add(retry)
        finally:
            left = [f for f in futures if not f.done()]
            if left:
                client.cancel(left)
    errors = [result["error"] for result in results if "error" in result]
    if errors:
        # the serial run stops at the trace's first refused event: the smallest position
        first = min(errors, key=lambda e: (e["position"] is None, e["position"] or 0))
        if first["position"] is not None:
            raise _refused(first["position"], first["message"])
        raise ValueError(f"{first['type']}: {first['message']}")
    if via_scheduler and scheduler not in _WARNED_UNREACHABLE:
        import warnings

        _WARNED_UNREACHABLE.add(scheduler)
        warnings.warn(f"the Dask workers of the scheduler at {scheduler} are not reachable from "
                      f"this process: the shards and their rows go through the scheduler "
                      f"(slower; the manifest's executor says so)", RuntimeWarning,
                      stacklevel=3)
    return results, sum(reruns), via_scheduler


def _distributed():
    """``distributed``'s ``Client`` and ``LocalCluster``, or an ImportError naming the extra."""
    try:
        from distributed import Client, LocalCluster
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError("executor='dask' needs distributed: pip install 'memlab[dist]'") \
            from None
    return Client, LocalCluster


def _warm_worker() -> None:
    """Import the replay path and load its compiled kernels in a new worker process: a tiny
    replay, so a cluster's first sharded replay does not pay them inside its shards."""
    from memlab.harness.trace import TraceBuilder
    trace = (TraceBuilder("warm", start=DEFAULT_START)
             .add("the deploy waits for the migration", item_id="a")
             .add("the migration waits for the review", item_id="b").edge("a", "b")
             .query("q", "why does the deploy wait", gold=["b"]).build())
    replay(trace, progress=False)


def _prepare_worker() -> None:
    """A new worker process of a LocalCluster memlab starts: warmed up (:func:`_warm_worker`),
    then everything it holds so far (Python's modules, Dask's, memlab's: ~250k objects) moved
    out of the garbage collector's sight (``gc.freeze``). A full collection walks every tracked
    object; in a worker it came every second shard and took 0.11-0.16 s of a LoCoMo shard's
    ~1.1 s (measured with ``gc.callbacks``), nearly all of it walking these startup objects,
    which live as long as the process. Only workers memlab starts (processes it owns) do this;
    the driver, a serial replay's process and a scheduler's own workers are left as they are.
    """
    import gc

    _warm_worker()
    gc.collect()
    gc.freeze()


def _prepare_worker_plugin_class():
    from distributed.diagnostics.plugin import WorkerPlugin

    class PrepareWorker(WorkerPlugin):
        """Runs :func:`_prepare_worker` in every worker of a LocalCluster memlab starts, the
        ones there when it is registered and any the nanny starts later."""

        name = "memlab-prepare-worker"

        def setup(self, worker: Any) -> None:
            _prepare_worker()

    return PrepareWorker


def __getattr__(name: str) -> Any:
    # ``_PrepareWorker`` made on first use: importing this module does not import distributed
    if name == "_PrepareWorker":
        cls = _prepare_worker_plugin_class()
        cls.__module__, cls.__qualname__ = __name__, "_PrepareWorker"
        globals()["_PrepareWorker"] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def max_workers() -> int:
    """The most workers (``n_workers`` / ``--workers``) a LocalCluster or a process pool may
    have: max(2, 4 x the CPUs), so a typo cannot start a cluster that exhausts the memory."""
    return max(2, 4 * (os.cpu_count() or 1))


def check_n_workers(n_workers: Any, name: str = "n_workers") -> None:
    """ValueError naming ``name`` unless ``n_workers`` is an integer in 1..:func:`max_workers`."""
    if isinstance(n_workers, bool) or not isinstance(n_workers, int) or n_workers < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {n_workers!r}")
    if n_workers > (limit := max_workers()):
        raise ValueError(f"{name} {n_workers} is more than the limit {limit} "
                         f"(max(2, 4 x {os.cpu_count() or 1} CPUs))")


_ADDRESS = re.compile(r"^(?:[A-Za-z][A-Za-z0-9+.-]*://)?(?:\[[0-9A-Fa-f:.]+\]|[^\s:/\[\]]+)"
                      r":[0-9]{1,5}$")


def check_address(address: Any, name: str = "address") -> None:
    """ValueError naming ``name`` unless ``address`` is None or a scheduler address of the form
    ``scheme://host:port`` or ``host:port`` (numeric port), checked before any connection."""
    if address is None:
        return
    if not isinstance(address, str) or not _ADDRESS.match(address) or \
            not 0 < int(address.rsplit(":", 1)[1]) < 65536:
        raise ValueError(f"{name} must be a Dask scheduler address 'host:port' or "
                         f"'scheme://host:port' (numeric port 1..65535), got {address!r}")


# Dask's own periodic work, slowed or off in the clusters memlab starts: its event-loop tick
# check (every 20 ms), system monitor (500 ms), worker memory monitor (100 ms), statistical
# profiler (every 10 ms in each worker) and work stealing (1 s). A LocalCluster's scheduler runs
# in the driver process, so this burned CPU there for as long as a replay took (measured on this
# machine, idle cluster of 2: driver 33-59 ms of CPU per second of wall clock, each worker
# 26-37 ms; with these settings 6 and 2.5 ms). One shard per worker needs none of it.
_QUIET_DASK = {"distributed.admin.tick.interval": "1s",
               "distributed.admin.system-monitor.interval": "5s",
               "distributed.worker.memory.monitor-interval": "1s",
               "distributed.worker.profile.enabled": False,
               "distributed.scheduler.work-stealing": False}


def _local_cluster(n_workers: int):
    """A LocalCluster of ``n_workers`` single-threaded processes, each warmed up, with Dask's
    periodic housekeeping slowed (``_QUIET_DASK``; the workers inherit it from the driver)."""
    check_n_workers(n_workers)
    client_class, cluster_class = _distributed()
    import dask

    with dask.config.set(_QUIET_DASK):
        cluster = cluster_class(n_workers=n_workers, threads_per_worker=1, processes=True,
                                dashboard_address=None)
    try:
        with client_class(cluster) as client:
            # a plugin, not client.run: a worker the nanny starts again (after a crash or an
            # out-of-memory kill) runs its setup too, so it is prepared as the first ones were
            client.register_plugin(getattr(sys.modules[__name__], "_PrepareWorker")())
    except BaseException:
        cluster.close()
        raise
    return cluster


def _current_client(address: str | None):
    """This process's default Dask client when it talks to the scheduler at ``address``
    (reused: a client costs a connection, a handshake and an event-loop thread), else None."""
    if address is None:
        return None
    try:
        from distributed import default_client
        client = default_client()
    except (ImportError, ValueError):  # no distributed, or no client yet
        return None
    if client.status != "running" or client.scheduler is None or \
            client.scheduler.address != address:
        return None
    return client


@contextlib.contextmanager
def dask_client(address: str | None, n_workers: int):
    """A Dask client of the scheduler at ``address`` (this process's default client when it
    has one there, left open), or of a ``LocalCluster`` of ``n_workers`` single-threaded
    processes started (and warmed up) for the block; closed (with its cluster) at the end."""
    check_address(address)
    reused = _current_client(address)
    if reused is not None:
        yield reused
        return
    client_class, _ = _distributed()
    cluster = None
    if address is None:
        cluster = _local_cluster(n_workers)
        client = client_class(cluster, set_as_default=False)
    else:
        _probe_scheduler(address)
        client = client_class(address, set_as_default=False, timeout=_SCHEDULER_TIMEOUT_S)
    try:
        yield client
    finally:
        client.close()
        if cluster is not None:
            cluster.close()


@contextlib.contextmanager
def dask_address(executor: str, address: str | None, n_workers: int):
    """The scheduler address many sharded replays share: ``address`` as given, or a
    ``LocalCluster`` of ``n_workers`` processes started (and warmed up) once for the block (None
    when ``executor`` is not ``"dask"``), so that an experiment or an evaluation starts one
    cluster, not one per replay; with one client for the block, which the replays reuse.

    Examples
    --------
    >>> with dask_address("serial", None, 2) as address:
    ...     print(address)
    None
    """
    if executor != "dask":
        yield address
        return
    check_address(address)
    client_class, _ = _distributed()
    if address is not None:
        if _current_client(address) is not None:
            yield address
            return
        _probe_scheduler(address)
        with client_class(address, timeout=_SCHEDULER_TIMEOUT_S):  # the default client while
            # the block runs
            yield address
        return
    with _local_cluster(n_workers) as cluster, client_class(cluster):
        yield cluster.scheduler_address


def _ranges(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """The row numbers ``starts[i] .. starts[i] + lengths[i] - 1``, for every i in order."""
    total = int(lengths.sum())
    offsets = np.cumsum(lengths) - lengths
    return np.repeat(starts - offsets, lengths) + np.arange(total, dtype=np.int64)


def _stitch(frames: list[pd.DataFrame], rows: np.ndarray) -> pd.DataFrame:
    """The shards' frames as one, rows ``rows`` (numbers into their concatenation) in that
    order. Columns whose type differs between shards (e.g. a float column holding None in only
    one of them) are rebuilt from their values, as the serial run builds them from one list."""
    if len(frames) == 1:
        return frames[0].take(rows).reset_index(drop=True)
    columns = list(frames[0].columns)
    if all(list(f.columns) == columns for f in frames) and \
            all((f.dtypes == frames[0].dtypes).all() for f in frames[1:]):
        return pd.concat(frames, ignore_index=True).take(rows).reset_index(drop=True)
    columns = list(dict.fromkeys(c for f in frames for c in f.columns))
    out = {}
    for c in columns:
        values = np.concatenate([f[c].to_numpy(dtype=object) if c in f else
                                 np.full(len(f), None, dtype=object) for f in frames])
        out[c] = values[rows].tolist()
    return pd.DataFrame(out, columns=columns)


def _merge_shards(parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The shards' rows back in event order, as one serial run would have collected them:
    ``decisions`` and ``log`` as rows, ``candidates`` and ``metrics`` as frames (the workers
    send them encoded: :func:`_encode_frame`)."""
    parts = [{**p, "candidates": _decode_frame(p["candidates"]),
              "metrics": _decode_frame(p["metrics"])} for p in parts]
    chunks = [p["chunks"] for p in parts]
    order = np.argsort(np.concatenate([c[:, 0] for c in chunks]), kind="stable")
    shard_of = np.concatenate([np.full(len(c), s) for s, c in enumerate(chunks)])[order]
    query_of = np.concatenate([np.arange(len(c)) for c in chunks])[order]
    decisions = [parts[s]["decisions"][q] for s, q in zip(shard_of.tolist(), query_of.tolist())]

    def stitched(name: str, column: int) -> pd.DataFrame | None:
        # a shard without such a frame has no queries (or candidates were not recorded, in
        # every shard): its chunks are empty, so leaving it out keeps ``order`` valid
        # (an empty frame adds no rows either, and its columns' types say nothing)
        kept = [(p[name], c[:, column]) for p, c in zip(parts, chunks)
                if p[name] is not None and len(p[name])]
        if not kept:
            return next((p[name] for p in parts if p[name] is not None), None)
        starts, base = [], 0
        for frame, counts in kept:
            starts.append(base + np.cumsum(counts) - counts)
            base += len(frame)
        counts = np.concatenate([c for _, c in kept])
        return _stitch([f for f, _ in kept],
                       _ranges(np.concatenate(starts)[order], counts[order]))

    log = sorted((row for part in parts for row in part["log"]), key=lambda row: row["event"])
    return {"decisions": decisions, "candidates": stitched("candidates", 1),
            "metrics": stitched("metrics", 2), "log": log,
            "unjudged": sum(part["unjudged"] for part in parts)}


def replay(trace: Trace, config: Any = None, *, mode: str = "router", k: int = 20,
           measures: Iterable[str | Measure] | None = None, record_candidates: bool = True,
           progress: bool | None = None, seed: int = 0,
           force_strategy: str | None = None, analyzer: str = "porter",
           measure_on: str = "retrieved", executor: str = "serial",
           address: str | None = None, n_workers: int = 2) -> ReplayResult:
    """Replay ``trace`` and return its frames (see the module notes).

    Parameters
    ----------
    trace : Trace
    config : SurfacingConfig, recipe name or None
        None is memlab's ``DEFAULT`` recipe.
    mode : {"router", "legacy"}
    k : int
        Items per context when a query event does not say.
    measures : list of str, optional
        Default ``R@2``, ``R@5``, ``R@10``, ``MRR``, ``nDCG@10`` (defined where gold exists).
    record_candidates : bool
        Keep every candidate (the ``candidates`` frame); False leaves it empty.
    progress : bool, optional
        A tqdm bar (when tqdm is installed); by default on for traces of 1,000+ events when
        stderr is a terminal (off in notebooks and logs; pass True for one there).
    seed : int
        Seeds decision ids, so two replays give identical frames (latency columns aside).
    force_strategy : str, optional
        Ask every query for this strategy (router analysis).
    analyzer : {"porter", "plain"}
        The store's BM25 analyzer (see :class:`~memlab.MemoryStore`), which surfacing reads
        under recipes whose ``analyzer`` is None (``DEFAULT``, ``BM25_ONLY``); a recipe naming
        its own (``SEED_COMPAT``: ``"plain"``) uses that.
    measure_on : {"retrieved", "surfaced"}
        The ranking relevance measures read: ``"retrieved"`` leaves the session's mandatory
        items (anchors and pins) out; ``"surfaced"`` scores every surfaced item. Recorded in the
        manifest.
    executor : {"serial", "dask"}
        ``"dask"`` shards the trace by workspace (each workspace is its own memory) over a Dask
        cluster: a ``LocalCluster`` of ``n_workers`` single-threaded processes started for the
        call, or the scheduler at ``address`` (this process's Dask client of it is reused when
        there is one; see :func:`dask_address` to start one cluster for many replays). One
        shard per worker, balanced by question count; each worker receives its workspaces'
        events (others' only as clock steps) and returns its rows as frames; they come back in
        event order, so
        the frames are the serial run's (latency columns aside; tested on a real two-worker
        cluster), as long as no wall-clock budget (``ppr.budget_ms``, ``spreading.budget_ms``)
        cuts a graph search in one run and not in the other, which makes two serial runs on a
        loaded machine differ too (``budget_ms=None`` for comparisons). A trace with one workspace, or whose workspaces share a short-term cache or
        a pin session, runs serially (the manifest's ``executor`` says which ran). Custom
        measures must be registered in the workers too (they travel by name). A worker lost
        mid-replay costs a rerun of its shard on a live worker (up to 2 times; the manifest's
        ``executor`` counts them; a third loss raises a RuntimeError naming the shard's
        workspaces); a driver that cannot reach the workers sends the shards through the
        scheduler (the manifest's ``executor`` says so, and a RuntimeWarning once). A refused
        event raises the serial run's :class:`ReplayError` (the trace's first refused event).
    address, n_workers
        The Dask scheduler's address (None: start a LocalCluster) and its number of workers.

    Raises
    ------
    ValueError
        A bad argument (named with its value), or :class:`ReplayError` for an event the memory
        refused.
    MeasureRangeError
        A relevance measure outside [0, 1] (a defect in memlab; checked on every query).

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> trace = (TraceBuilder("tiny", start="2024-01-01T00:00:00+00:00")
    ...          .add("We picked JWT because sessions did not scale", item_id="a")
    ...          .add("Lunch on Friday is pizza", item_id="b")
    ...          .query("q1", "why JWT", gold=["a"]).build())
    >>> result = replay(trace)
    >>> result.decisions[["qid", "strategy_used"]].values.tolist()
    [['q1', 'deep:multi-hop']]
    >>> float(result.summary()["R@2"])
    1.0
    """
    if not isinstance(trace, Trace):
        raise ValueError(f"trace must be a Trace, got {type(trace).__name__}")
    config = resolve_config(config)
    if mode not in ("router", "legacy"):
        raise ValueError(f"mode must be 'router' or 'legacy', got {mode!r}")
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
        raise ValueError(f"k must be an int in 1..100, got {k!r}")
    measures = DEFAULT_MEASURES if measures is None else parse_measures(measures)
    if force_strategy is not None:
        SurfacingStrategy.parse(force_strategy, "force_strategy")
    from memlab.text import ANALYZERS
    if analyzer not in ANALYZERS:
        raise ValueError(f"analyzer must be one of {sorted(ANALYZERS)}, got {analyzer!r}")
    check_measure_on(measure_on)
    if executor not in ("serial", "dask"):
        raise ValueError(f"executor must be 'serial' or 'dask', got {executor!r}")
    check_n_workers(n_workers)
    if address is not None and (executor != "dask" or not isinstance(address, str)):
        raise ValueError(f"address must be None or a scheduler address with executor='dask', "
                         f"got {address!r}")
    check_address(address)
    ran = "serial"
    # the ranker file's identity is taken now, from the model the replay will use: a file
    # rewritten or removed while it runs neither mislabels nor loses the finished result
    config_record = _config_record(config)
    settings = (config, mode, k, seed, measures, record_candidates, force_strategy, analyzer,
                measure_on)
    if executor == "dask" and len(shards := _shards(trace, n_workers)) > 1:
        parts, reruns, via_scheduler = _run_shards_on_dask(trace, settings, shards, address,
                                                           n_workers)
        merged = _merge_shards(parts)
        notes = [f"{len(parts)} shards by workspace"]  # a cluster may re-shard
        if reruns:
            notes.append(f"{reruns} run again after a lost worker")
        if via_scheduler:
            notes.append("through the scheduler: workers unreachable from the driver")
        ran = f"dask ({', '.join(notes)})"
        rows, candidates, metrics = merged["decisions"], merged["candidates"], merged["metrics"]
        log_rows, unjudged = merged["log"], merged["unjudged"]
    else:
        runner = _run_events(trace, settings, progress)
        rows, log_rows, unjudged = runner.decisions, runner.log, runner.unjudged
        candidates = runner.candidate_frame()
        metrics = pd.DataFrame(runner.metrics, columns=["qid", "measure", "value"])
    decisions = _tidy(pd.DataFrame(rows))
    if candidates is None:
        candidates = pd.DataFrame(columns=["qid", "item_id", "rank", "surfaced", "drop_reason",
                                           "gold"])
    log = pd.DataFrame(log_rows, columns=["event", "type", "outcome"])
    manifest = build_manifest(trace, config, mode=mode, k=k, seed=seed, measures=measures,
                              measure_on=measure_on, config_record=config_record,
                              extra={"force_strategy": force_strategy, "analyzer": analyzer,
                                     "record_candidates": record_candidates,
                                     "unjudged_queries": unjudged, "executor": ran})
    note = in_sample_note(trace, config, metrics["qid"].unique())
    if note is not None:
        import warnings

        from memlab.errors import InSampleWarning
        manifest["in_sample"] = note
        warnings.warn(note, InSampleWarning, stacklevel=2)
    return ReplayResult(decisions, candidates, metrics, log, manifest)


def in_sample_note(trace: Trace, config: SurfacingConfig, judged: Iterable[Any]) -> str | None:
    """``"in-sample: the ranker was trained on N of these questions"`` when ``config``'s learned
    ``reranker`` (a ranker file, or a registered :class:`~memlab.surfacing.rerank.RankerModel`)
    lists in its training manifest ``N > 0`` of the ``judged`` question ids of ``trace``, and
    was trained on this trace (same hash or name; query ids alone such as ``q0`` repeat across
    traces); else None. :func:`replay` issues it as an
    :class:`~memlab.errors.InSampleWarning` and records it in the manifest (``in_sample``).
    """
    if config.reranker is None:
        return None
    from memlab.surfacing.rerank import ranker_label, resolve_reranker
    try:
        scorer = resolve_reranker(config.reranker)
    except ValueError:
        return None
    manifest = getattr(getattr(scorer, "__self__", None), "manifest", None) or {}
    source = manifest.get("trace") or {}
    if source.get("hash") != trace.hash() and source.get("name") != trace.name:
        return None
    shared = set(map(str, manifest.get("train_qids") or ())) & set(map(str, judged))
    if not shared:
        return None
    return (f"in-sample: the ranker {ranker_label(config.reranker)!r} was trained on {len(shared)} of these "
            f"questions (of trace {trace.name!r}); its score flatters it - estimate it with "
            f"memlab.learn.cv_ranker")
