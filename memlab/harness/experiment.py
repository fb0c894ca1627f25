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
from memlab.harness.replay import ReplayResult, replay, resolve_config
from memlab.harness.trace import Trace

__all__ = ["Experiment", "ExperimentResult", "bootstrap_ci", "paired_tests", "run_spec"]


def bootstrap_ci(values: np.ndarray, *, n_boot: int = 1000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean (NaN, NaN for fewer than two values).

    Examples
    --------
    >>> low, high = bootstrap_ci(np.array([0.0, 1.0, 1.0, 0.0, 1.0]), seed=1)
    >>> 0.0 <= low < 0.6 < high <= 1.0
    True
    """
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = values[rng.integers(0, len(values), size=(n_boot, len(values)))].mean(axis=1)
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return float(low), float(high)


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
    """``table``: one row per configuration; ``per_query``: long (name, qid, measure, value);
    ``measure_on``: the ranking the relevance measures read (see :func:`replay`)."""

    table: pd.DataFrame
    per_query: pd.DataFrame
    results: dict[str, ReplayResult] = field(default_factory=dict)
    baseline: str | None = None
    measure_on: str = "retrieved"

    def _repr_html_(self) -> str:  # pragma: no cover - notebook display
        return self.table._repr_html_()


def Experiment(trace: Trace, configs: Mapping[str, Any] | Iterable[Any],  # noqa: N802 - as pt.Experiment
               measures: Iterable[str | Measure] | None = None, baseline: str | None = None, *,
               k: int = 20, n_boot: int = 1000, seed: int = 0,
               measure_on: str = "retrieved") -> ExperimentResult:
    """Replay ``trace`` under each configuration and compare them.

    Parameters
    ----------
    configs : mapping name -> spec, or a list of specs
        A spec is a ``SurfacingConfig``, a recipe name, or ``(mode, config)``.
    baseline : str, optional
        The name the others are tested against (the first configuration when omitted).
    measure_on : {"retrieved", "surfaced"}
        The ranking relevance measures read, as in :func:`~memlab.harness.replay.replay`
        (``"retrieved"``: the session's anchors and pins left out).

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
    results: dict[str, ReplayResult] = {}
    specs: dict[str, tuple[str, Any]] = {}
    for name, spec in named:
        mode, config = run_spec(spec)
        specs[name] = (mode, config)
        results[name] = replay(trace, config, mode=mode, k=k, measures=measures, seed=seed,
                               measure_on=measure_on)
    per_query = pd.concat([r.metrics.assign(name=name) for name, r in results.items()],
                          ignore_index=True)[["name", "qid", "measure", "value"]]
    rows = []
    for name in names:
        mode, config = specs[name]
        row: dict[str, Any] = {"name": name, "mode": mode, "recipe": config.name,
                               "queries": len(results[name].decisions)}
        mine = per_query[per_query["name"] == name]
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
    return ExperimentResult(pd.DataFrame(rows), per_query, results, baseline, measure_on)
