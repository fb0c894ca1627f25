"""Parameter sweeps (SPEC §7), run in-process, on local processes, or on a Dask cluster.

A grid maps configuration fields to the values to try: top-level ``SurfacingConfig`` fields
(``"centrality_weight"``) or fields of its graph stages (``"ppr.alpha"``,
``"spreading.depth"``) and of dense relevance (``"dense.weight"``). Every point is replayed
from scratch, so the executors only decide where the work runs: ``"serial"`` (this process),
``"local"`` (a process pool) or ``"dask"`` (``distributed``; a two-worker ``LocalCluster``
started for the call, or the scheduler at ``address``). The results are the same whichever
runs them (tested), in grid order.

``counterfactual=True`` replays once and re-scores the recorded candidates for each point,
which is much faster and exact for the composite's weights (see
:mod:`memlab.harness.counterfactual`); other fields need real replays.

:meth:`SweepResult.compare` tests every point against the best one or a named reference point,
paired by query, with Holm (default) or Benjamini–Hochberg correction across the table (see
:mod:`memlab.harness.stats`); ``where`` / ``by`` restrict the table to, or split it by, query
metadata.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from dataclasses import dataclass
from typing import Any, Iterable, Mapping, Sequence

import pandas as pd

from memlab.harness.counterfactual import RESCORABLE, rescore
from memlab.harness.experiment import bootstrap_ci, judged_n, progress_bar
from memlab.harness.measures import DEFAULT_MEASURES, Measure, check_measure_on, parse_measures
from memlab.harness.replay import (check_address, check_n_workers, dask_client, replay,
                                   resolve_config)
from memlab.harness.stats import (ComparisonTable, compare_paired, format_table_latex,
                                  format_table_markdown, query_metadata, select_queries,
                                  subset_order,
                                  subset_labels)
from memlab.harness.trace import Trace
from memlab.surfacing.config import SurfacingConfig

__all__ = ["sweep", "SweepResult", "grid_points", "apply_point", "EXECUTORS"]

EXECUTORS = ("serial", "local", "dask")


def grid_points(grid: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the grid's values, the first key varying slowest."""
    if not isinstance(grid, Mapping) or not grid:
        raise ValueError(f"grid must be a non-empty mapping of field -> values, got {grid!r}")
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ValueError(f"grid[{key!r}] must be a non-empty list of values, got {values!r}")
    keys = list(grid)
    return [dict(zip(keys, combo)) for combo in itertools.product(*(grid[k] for k in keys))]


def apply_point(base: SurfacingConfig, point: Mapping[str, Any]) -> SurfacingConfig:
    """``base`` with the point's values (``"ppr.alpha"`` reaches into a graph stage's config,
    ``"dense.weight"`` into the dense one)."""
    top: dict[str, Any] = {}
    nested: dict[str, dict[str, Any]] = {}
    key_of: dict[str, str] = {}
    for key, value in point.items():
        if "." in key:
            stage, name = key.split(".", 1)
            nested.setdefault(stage, {})[name] = value
            key_of.setdefault(stage, key)
        else:
            top[key] = value
    for stage, changes in nested.items():
        if stage not in ("ppr", "spreading", "dense"):
            raise ValueError(f"grid key {key_of[stage]!r}: only ppr.*, spreading.* and dense.* "
                             f"reach into a stage's settings, got {stage!r}")
        current = getattr(base, stage)
        if current is None:
            raise ValueError(f"grid key {key_of[stage]!r} needs a configured {stage} stage in "
                             f"the base recipe {base.name!r} (it has none)")
        try:
            top[stage] = dataclasses.replace(current, **changes)
        except TypeError as exc:
            raise ValueError(f"grid key for {stage!r}: {exc}") from None
    return base.replace(**top)


def _run_point(trace: Trace, config: SurfacingConfig, mode: str, k: int,
               measures: list[str], seed: int, measure_on: str = "retrieved") -> pd.DataFrame:
    """One grid point's per-query metrics (module level, so process pools can pickle it)."""
    return replay(trace, config, mode=mode, k=k, measures=measures, seed=seed,
                  record_candidates=False, measure_on=measure_on, progress=False).metrics


@dataclass
class SweepResult:
    """``table``: one row per point (``cfg_<field>`` columns, mean and bootstrap CI per measure);
    ``per_query``: long (point, cfg_*, qid, measure, value); ``measure_on``: the ranking the
    relevance measures read (see :func:`~memlab.harness.replay.replay`); ``subsets``: with
    ``by``, one row per (subset, point), a ``subset`` column first; ``where``: the query filter.
    """

    table: pd.DataFrame
    per_query: pd.DataFrame
    executor: str
    measure_on: str = "retrieved"
    measures: list[str] = dataclasses.field(default_factory=list)
    subsets: pd.DataFrame | None = None
    where: dict[str, Any] | None = None
    dataset: str | None = None

    def compare(self, reference: Any = "best", *, measures: Iterable[str] | None = None,
                correction: str = "holm", test: str = "wilcoxon", n_boot: int = 1000,
                seed: int = 0, warn: bool = True) -> ComparisonTable:
        """Paired comparisons of every point against ``reference``: ``"best"`` (per measure,
        the point with the best mean), a point number, or a mapping of parameter values
        (``{"ppr.alpha": 0.85}``) naming one point; corrected across the table.

        Examples
        --------
        >>> from memlab.harness.trace import TraceBuilder
        >>> trace = (TraceBuilder("t").add("JWT tokens", item_id="a").add("cat", item_id="b")
        ...          .query("q1", "JWT", gold=["a"]).build())
        >>> out = sweep(trace, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"])
        >>> out.compare({"centrality_weight": 1.0}, warn=False).table[["name", "reference"]
        ...                                                         ].values.tolist()
        [[0, 1]]
        """
        if isinstance(reference, Mapping):
            reference = self.point_of(reference)
        chosen = self.measures if measures is None else [str(m) for m in parse_measures(measures)]
        return compare_paired(self.per_query.rename(columns={"point": "name"}), key="name",
                              measures=chosen, reference=reference, correction=correction,
                              test=test, n_boot=n_boot, seed=seed, warn=warn)

    def point_of(self, values: Mapping[str, Any]) -> int:
        """The number of the point whose parameters are ``values``; ValueError otherwise."""
        mask = pd.Series(True, index=self.table.index)
        for key, value in values.items():
            column = f"cfg_{key}"
            if column not in self.table:
                raise ValueError(f"reference names {key!r}, not a swept parameter "
                                 f"{[c[4:] for c in self.table.columns if c.startswith('cfg_')]}")
            mask &= self.table[column] == value
        if int(mask.sum()) != 1:
            raise ValueError(f"reference {dict(values)!r} matches {int(mask.sum())} points, "
                             f"not one")
        return int(self.table.loc[mask, "point"].iloc[0])

    def to_markdown(self, reference: Any = "best", digits: int = 3, **compare: Any) -> str:
        """The table as a paper prints it: mean [95% CI] per measure, marks from
        :meth:`compare` (test and correction named in the footnote)."""
        from memlab.harness.display import sweep_printable
        comparisons = self.compare(reference, **compare) if len(self.table) > 1 else None
        frame, note = sweep_printable(self, digits=digits, comparisons=comparisons)
        return format_table_markdown(frame) + "\n" + note + "\n"

    def to_latex(self, reference: Any = "best", digits: int = 3, caption: str | None = None,
                 **compare: Any) -> str:
        """The :meth:`to_markdown` table as a LaTeX ``table`` (booktabs)."""
        from memlab.harness.display import sweep_printable
        comparisons = self.compare(reference, **compare) if len(self.table) > 1 else None
        frame, note = sweep_printable(self, digits=digits, comparisons=comparisons)
        return format_table_latex(frame, caption or note)

    def _repr_html_(self) -> str:
        from memlab.harness.display import sweep_html; return sweep_html(self)  # noqa: E702

    def __repr__(self) -> str:
        from memlab.harness.display import sweep_repr; return sweep_repr(self)  # noqa: E702


def sweep(trace: Trace, grid: Mapping[str, Sequence[Any]], *, base: Any = None,
          mode: str = "router", k: int = 20, measures: Iterable[str | Measure] | None = None,
          executor: str = "serial", address: str | None = None, n_workers: int = 2,
          seed: int = 0, n_boot: int = 1000, counterfactual: bool = False,
          measure_on: str = "retrieved", where: Mapping[str, Any] | None = None,
          by: str | None = None, progress: bool = False) -> SweepResult:
    """Replay ``trace`` at every point of ``grid`` (see the module notes).

    ``where`` filters the queries the table reads by their metadata (``{"category": [1, 2]}``,
    see :func:`~memlab.harness.stats.query_metadata`); with ``by`` (``"category"``) ``subsets``
    has one summary per metadata value and point. ``progress`` shows a bar naming the point
    being replayed (serial executor; the others report points as they finish).

    ``measure_on`` is the ranking relevance measures read, as in
    :func:`~memlab.harness.replay.replay` (``"retrieved"``: the session's anchors and pins left
    out; ``"surfaced"``: everything surfaced).

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> trace = (TraceBuilder("t", start="2024-01-01T00:00:00+00:00")
    ...          .add("JWT was picked because sessions did not scale", item_id="a")
    ...          .query("q1", "why JWT", gold=["a"]).build())
    >>> out = sweep(trace, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"])
    >>> out.table[["cfg_centrality_weight", "MRR"]].values.tolist()
    [[0.0, 1.0], [1.0, 1.0]]
    """
    if executor not in EXECUTORS:
        raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
    check_n_workers(n_workers)
    check_address(address)
    check_measure_on(measure_on)
    base = resolve_config(base)
    measures = [str(m) for m in (DEFAULT_MEASURES if measures is None
                                 else parse_measures(measures))]
    points = grid_points(grid)
    configs = [apply_point(base, p) for p in points]  # validates every point before any work
    metadata = select_queries(query_metadata(trace), where)
    labels = subset_labels(metadata, by) if by is not None else None
    if counterfactual:
        unknown = sorted(set(grid) - set(RESCORABLE))
        if unknown:
            raise ValueError(f"counterfactual sweeps can vary only {list(RESCORABLE)}; "
                             f"{unknown} need replays")
        live = replay(trace, base, mode=mode, k=k, measures=measures, seed=seed,
                      measure_on=measure_on, progress=progress and None)
        frames = [rescore(live, p, measures).metrics for p in points]
    elif executor == "serial":
        bar = progress_bar(len(configs), "sweep", progress)
        frames = []
        for point, c in zip(points, configs):
            if bar is not None:
                bar.set_description("sweep: " + ", ".join(f"{k_}={v}" for k_, v in point.items()))
            frames.append(_run_point(trace, c, mode, k, measures, seed, measure_on))
            if bar is not None:
                bar.update(1)
        if bar is not None:
            bar.close()
    elif executor == "local":
        from concurrent.futures import ProcessPoolExecutor
        with ProcessPoolExecutor(max_workers=n_workers) as pool:
            frames = list(pool.map(_run_point, [trace] * len(configs), configs,
                                   [mode] * len(configs), [k] * len(configs),
                                   [measures] * len(configs), [seed] * len(configs),
                                   [measure_on] * len(configs)))
    else:
        frames = _run_dask(trace, configs, mode, k, measures, seed, address, n_workers,
                           measure_on)
    selected = set(metadata["qid"]) if where is not None else None
    per_query = []
    for index, (point, frame) in enumerate(zip(points, frames)):
        cfg = {f"cfg_{key}": value for key, value in point.items()}
        if selected is not None:
            frame = frame[frame["qid"].isin(selected)]
        per_query.append(frame.assign(point=index, **cfg))
    rows = _point_rows(points, per_query, measures, n_boot, seed)
    subsets = None
    if labels is not None:
        parts = []
        for label in subset_order(labels):
            chosen = [f[f["qid"].map(labels) == label] for f in per_query]
            parts.append(pd.DataFrame(_point_rows(points, chosen, measures, n_boot, seed)
                                      ).assign(subset=label))
        subsets = pd.concat(parts, ignore_index=True)
        subsets = subsets[["subset", *[c for c in subsets.columns if c != "subset"]]]
    per_query_frame = pd.concat(per_query, ignore_index=True) if per_query else pd.DataFrame()
    return SweepResult(pd.DataFrame(rows), per_query_frame,
                       "counterfactual" if counterfactual else executor, measure_on, measures,
                       subsets, None if where is None else dict(where),
                       str(trace.metadata.get("dataset", trace.name)))


def _point_rows(points: list[dict], frames: list[pd.DataFrame], measures: list[str],
                n_boot: int, seed: int) -> list[dict]:
    rows = []
    for index, (point, frame) in enumerate(zip(points, frames)):
        row: dict[str, Any] = {"point": index, **{f"cfg_{key}": value
                                                  for key, value in point.items()}}
        row["queries"] = int(frame["qid"].nunique()) if len(frame) else 0
        row["n"] = judged_n(frame, measures) if len(frame) else 0
        for m in measures:
            values = frame.loc[frame["measure"] == m, "value"].to_numpy()
            row[m] = float(values.mean()) if len(values) else math.nan
            row[f"{m} ci_low"], row[f"{m} ci_high"] = bootstrap_ci(values, n_boot=n_boot,
                                                                   seed=seed)
        rows.append(row)
    return rows


def _run_dask(trace, configs, mode, k, measures, seed, address, n_workers,
              measure_on="retrieved"):
    with dask_client(address, n_workers) as client:
        shared = client.scatter(trace, broadcast=True)
        futures = [client.submit(_run_point, shared, c, mode, k, measures, seed, measure_on,
                                 pure=False)
                   for c in configs]
        return client.gather(futures)
