"""Experiments: several configurations over one trace, with honest statistics (SPEC §7).

Each configuration's per-query values come from :func:`~memlab.harness.replay.replay`. The table
has, per configuration and measure, the mean over queries, a bootstrap 95% confidence interval
(percentile method, seeded), and against the baseline the mean paired difference with the
p-values of a paired t-test and of the Wilcoxon signed-rank test (scipy). Latency and token
measures also get their 50th and 95th percentiles.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
from scipy import stats

from memlab.harness.measures import DEFAULT_MEASURES, Measure, check_measure_on, parse_measures
from memlab.harness.replay import ReplayResult, dask_address, replay, resolve_config
from memlab.harness.stats import (ComparisonTable, bootstrap_ci, compare_paired, format_table_latex,
                                  format_table_markdown, query_metadata, select_queries,
                                  subset_order,
                                  subset_labels)
from memlab.harness.trace import Trace

__all__ = ["Experiment", "run_experiment", "ExperimentResult", "bootstrap_ci", "paired_tests",
           "judged_n",
           "run_spec", "progress_bar"]


def judged_n(frame: pd.DataFrame, measures: Iterable[Measure | str]) -> int:
    """How many queries a table row's means are over: the judged queries (those with a value of
    a relevance measure) when the row has one, else the queries with any value (long ``frame``:
    ``qid``, ``measure``, ``value``).

    Examples
    --------
    >>> frame = pd.DataFrame({"qid": ["a", "b", "b"], "measure": ["Latency", "Latency", "MRR"],
    ...                       "value": [1.0, 2.0, 0.5]})
    >>> judged_n(frame, ["MRR", "Latency"]), judged_n(frame, ["Latency"])
    (1, 2)
    """
    parsed = parse_measures(list(measures))
    relevance = [str(m) for m in parsed if m.needs_gold]
    chosen = frame[frame["measure"].isin(relevance or [str(m) for m in parsed])]
    return int(chosen["qid"].nunique())


def paired_tests(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    """(paired t-test p, Wilcoxon signed-rank p) of ``a`` against ``b``.

    Identical samples give p = 1 for both (scipy would return NaN or raise); fewer than two
    pairs give NaN.
    """
    a, b = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if len(a) < 2:
        return math.nan, math.nan
    diff = a - b
    if np.all(diff == 0):
        return 1.0, 1.0
    t_p = float(stats.ttest_rel(a, b).pvalue) if np.std(diff) > 0 else 0.0
    w_p = float(stats.wilcoxon(a, b).pvalue)
    return t_p, w_p


def run_spec(spec: Any) -> tuple[str, Any]:
    """``(mode, config)`` from a configuration, a recipe name or a ``(mode, config)`` pair."""
    if isinstance(spec, tuple) and len(spec) == 2 and spec[0] in ("router", "legacy"):
        return spec[0], resolve_config(spec[1])
    return "router", resolve_config(spec)


@dataclass
class ExperimentResult:
    """What :func:`Experiment` returns.

    ``table``: one row per configuration; ``per_query``: long (name, qid, measure, value);
    ``measure_on``: the ranking the relevance measures read (see :func:`replay`);
    ``comparisons``: every configuration against the baseline, paired, Holm-corrected
    (:meth:`compare` for another reference, test or correction); ``subsets``: with ``by``, one
    summary row per (subset, configuration), a ``subset`` column first; ``where``: the query
    filter applied.
    """

    table: pd.DataFrame
    per_query: pd.DataFrame
    results: dict[str, ReplayResult] = field(default_factory=dict)
    baseline: str | None = None
    measure_on: str = "retrieved"
    comparisons: ComparisonTable | None = None
    subsets: pd.DataFrame | None = None
    where: dict[str, Any] | None = None
    measures: list[str] = field(default_factory=list)
    labels: pd.Series | None = None  # qid -> subset label (with ``by``)

    def compare(self, reference: Any = None, *, measures: Iterable[str] | None = None,
                correction: str = "holm", test: str = "wilcoxon", n_boot: int = 1000,
                seed: int = 0) -> ComparisonTable:
        """Paired comparisons of every configuration against ``reference`` (the baseline when
        None; ``"best"``: the best per measure), corrected across the table.

        Examples
        --------
        >>> from memlab.harness.trace import TraceBuilder
        >>> trace = (TraceBuilder("t").add("JWT tokens", item_id="a").add("the cat", item_id="b")
        ...          .query("q1", "JWT", gold=["a"]).build())
        >>> out = Experiment(trace, {"one": "default", "two": "bm25"}, ["MRR"])
        >>> out.compare(correction="bh").table[["name", "reference", "correction"]].values.tolist()
        [['two', 'one', 'bh']]
        """
        reference = self.baseline if reference is None else reference
        chosen = self.measures if measures is None else [str(m) for m in parse_measures(measures)]
        return compare_paired(self.per_query, key="name", measures=chosen, reference=reference,
                              correction=correction, test=test, n_boot=n_boot, seed=seed)

    def to_markdown(self, digits: int = 3) -> str:
        """The table as a paper prints it: mean [95% CI] per measure, significance marks against
        the baseline (adjusted p, the test and correction named in the footnote)."""
        from memlab.harness.display import experiment_printable, subset_printable
        frame, note = experiment_printable(self, digits)
        text = format_table_markdown(frame) + "\n" + note + "\n"
        for label, cells, marks in subset_printable(self, digits):
            text += f"\n{label}\n\n" + format_table_markdown(cells) + "\n" + marks + "\n"
        return text

    def to_latex(self, digits: int = 3, caption: str | None = None) -> str:
        """The :meth:`to_markdown` table as a LaTeX ``table`` (booktabs)."""
        from memlab.harness.display import experiment_printable
        frame, note = experiment_printable(self, digits)
        return format_table_latex(frame, caption or note)

    def _repr_html_(self) -> str:
        from memlab.harness import display; return display.experiment_html(self)  # noqa: E702

    def __repr__(self) -> str:
        from memlab.harness import display; return display.experiment_repr(self)  # noqa: E702


def run_experiment(trace: Trace, configs: Mapping[str, Any] | Iterable[Any],
                   measures: Iterable[str | Measure] | None = None, baseline: str | None = None,
                   *, k: int = 20, n_boot: int = 1000, seed: int = 0,
                   measure_on: str = "retrieved", where: Mapping[str, Any] | None = None,
                   by: str | None = None, correction: str = "holm", test: str = "wilcoxon",
                   progress: bool = False, executor: str = "serial",
                   address: str | None = None, n_workers: int = 2) -> ExperimentResult:
    """Replay ``trace`` under each configuration and compare them; returns an
    :class:`ExperimentResult`.

    ``Experiment`` is the same function (a factory named after PyTerrier's ``pt.Experiment``;
    it returns a result, it is not a class).

    Parameters
    ----------
    configs : mapping name -> spec, or a list of specs
        A spec is a ``SurfacingConfig``, a recipe name, or ``(mode, config)``.
    baseline : str, optional
        The name the others are tested against (the first configuration when omitted).
    measure_on : {"retrieved", "surfaced"}
        The ranking relevance measures read, as in :func:`~memlab.harness.replay.replay`
        (``"retrieved"``: the session's anchors and pins left out).
    where : mapping, optional
        Query metadata filter: ``{"category": [1, 2]}``, ``{"workspace_id": "w1"}``,
        ``{"dataset": "locomo"}`` (see :func:`~memlab.harness.stats.query_metadata`). Every
        query still replays (the memory's state depends on all of them); the table and tests read
        only the selected queries.
    by : str, optional
        A metadata column (``"category"``): ``subsets`` then has one summary per value.
    correction, test : str
        For ``comparisons`` (see :mod:`memlab.harness.stats`): ``"holm"`` / ``"bh"`` /
        ``"none"`` and ``"wilcoxon"`` / ``"ttest"``.
    progress : bool
        A progress bar (tqdm; a widget in Jupyter) naming the configuration being replayed.
    executor, address, n_workers
        ``executor="dask"`` shards every replay by workspace over one Dask cluster (the
        scheduler at ``address``, else a ``LocalCluster`` of ``n_workers`` started once), as
        :func:`~memlab.harness.replay.replay` does; the frames are the serial ones.

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> trace = (TraceBuilder("t", start="2024-01-01T00:00:00+00:00")
    ...          .add("JWT was picked because sessions did not scale", item_id="a")
    ...          .add("the JWT library is pinned to 9.1", item_id="b")
    ...          .query("q1", "why JWT", gold=["a"]).query("q2", "JWT library", gold=["b"])
    ...          .build())
    >>> out = Experiment(trace, {"legacy": ("legacy", "seed_compat"), "memlab": "default"},
    ...                  ["R@1", "MRR"])
    >>> out.table[["name", "R@1", "MRR"]].values.tolist()
    [['legacy', 1.0, 1.0], ['memlab', 1.0, 1.0]]
    """
    measures = DEFAULT_MEASURES if measures is None else parse_measures(measures)
    check_measure_on(measure_on)
    if isinstance(configs, Mapping):
        named = list(configs.items())
    else:
        named = []
        for spec in configs:
            mode, config = run_spec(spec)
            named.append((f"{config.name}/{mode}", spec))
    if not named:
        raise ValueError("configs must name at least one configuration")
    names = [name for name, _ in named]
    if len(set(names)) != len(names):
        raise ValueError(f"configs has repeated names {names}")
    baseline = names[0] if baseline is None else baseline
    if baseline not in names:
        raise ValueError(f"baseline must be one of {names}, got {baseline!r}")
    metadata = select_queries(query_metadata(trace), where)
    labels = subset_labels(metadata, by) if by is not None else None
    from memlab.harness.stats import CORRECTIONS, TESTS, check_choice
    check_choice("correction", correction, CORRECTIONS)
    check_choice("test", test, TESTS)
    results: dict[str, ReplayResult] = {}
    specs: dict[str, tuple[str, Any]] = {}
    if executor not in ("serial", "dask"):
        raise ValueError(f"executor must be 'serial' or 'dask', got {executor!r}")
    bar = progress_bar(len(named), "experiment", progress)
    with dask_address(executor, address, n_workers) as shared_address:
        for name, spec in named:
            mode, config = run_spec(spec)
            specs[name] = (mode, config)
            if bar is not None:
                bar.set_description(f"experiment: {name}")
            results[name] = replay(trace, config, mode=mode, k=k, measures=measures, seed=seed,
                                   measure_on=measure_on, progress=False,  # one bar: this one
                                   executor=executor, address=shared_address,
                                   n_workers=n_workers)
            if bar is not None:
                bar.update(1)
    if bar is not None:
        bar.close()
    per_query = pd.concat([r.metrics.assign(name=name) for name, r in results.items()],
                          ignore_index=True)[["name", "qid", "measure", "value"]]
    if where is not None:
        per_query = per_query[per_query["qid"].isin(set(metadata["qid"]))].reset_index(drop=True)
    table = pd.DataFrame(_summary_rows(per_query, names, specs, results, measures, baseline,
                                       n_boot, seed, None if where is None else len(metadata)))
    subsets = None
    if labels is not None:
        frames = []
        for label in subset_order(labels):
            chosen = per_query[per_query["qid"].map(labels) == label]
            frames.append(pd.DataFrame(_summary_rows(
                chosen, names, specs, results, measures, baseline, n_boot, seed,
                int((labels == label).sum()))).assign(subset=label))
        subsets = pd.concat(frames, ignore_index=True)
        subsets = subsets[["subset", *[c for c in subsets.columns if c != "subset"]]]
    labels_ = [str(m) for m in measures]
    comparisons = compare_paired(per_query, key="name", measures=labels_, reference=baseline,
                                 correction=correction, test=test, n_boot=n_boot,
                                 seed=seed) if len(names) > 1 else None
    return ExperimentResult(table, per_query, results, baseline, measure_on, comparisons,
                            subsets, None if where is None else dict(where), labels_, labels)


Experiment = run_experiment  # as pt.Experiment: a function returning an ExperimentResult


def _summary_rows(per_query: pd.DataFrame, names: list[str], specs: dict, results: dict,
                  measures: list[Measure], baseline: str, n_boot: int, seed: int,
                  queries: int | None = None) -> list[dict]:
    """One summary row per configuration over the queries in ``per_query`` (``queries``: how
    many were selected; every replayed query when None)."""
    rows = []
    for name in names:
        mode, config = specs[name]
        mine = per_query[per_query["name"] == name]
        row: dict[str, Any] = {"name": name, "mode": mode, "recipe": config.name,
                               "queries": len(results[name].decisions) if queries is None
                               else queries, "n": judged_n(mine, measures)}
        for m in measures:
            label = str(m)
            values = mine[mine["measure"] == label].set_index("qid")["value"]
            row[label] = float(values.mean()) if len(values) else math.nan
            row[f"{label} ci_low"], row[f"{label} ci_high"] = bootstrap_ci(
                values.to_numpy(), n_boot=n_boot, seed=seed)
            if m.name in ("Latency", "Tokens") and len(values):
                row[f"{label} p50"], row[f"{label} p95"] = (
                    float(np.percentile(values, 50)), float(np.percentile(values, 95)))
            if name != baseline:
                base = per_query[(per_query["name"] == baseline) & (per_query["measure"] == label)]
                paired = pd.concat([values, base.set_index("qid")["value"]], axis=1,
                                   join="inner").to_numpy()
                row[f"{label} delta"] = float((paired[:, 0] - paired[:, 1]).mean()) \
                    if len(paired) else math.nan
                row[f"{label} p_ttest"], row[f"{label} p_wilcoxon"] = paired_tests(
                    paired[:, 0], paired[:, 1])
        rows.append(row)
    return rows


def progress_bar(total: int, desc: str, enabled: bool):
    """A tqdm bar (``tqdm.auto``: a widget in Jupyter with ipywidgets), or None when disabled
    or tqdm is not installed."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional (the notebooks/test extras install it)
        return None
    return tqdm(total=total, desc=desc, unit="config")
