"""Rich display for notebooks: ``_repr_html_`` and concise ``__repr__`` of memlab's results.

The harness's classes (``ReplayResult``, ``ExperimentResult``, ``SweepResult``,
``ComparisonTable``) delegate here with one line and a lazy import; ``SurfacingConfig`` and
``ContextRecord`` delegate to :mod:`memlab.surfacing.display` (below the harness), whose
functions this module re-exports. The HTML is plain
(pandas' ``DataFrame.to_html`` and inline-styled ``<div>`` score bars): no jinja2, no widgets,
and it renders the same in JupyterLab, VS Code and a static nbconvert export.

Examples
--------
>>> from memlab import DEFAULT
>>> "centrality_weight" in config_html(DEFAULT.replace(centrality_weight=0.25))
True
>>> config_repr(DEFAULT.replace(name="mine", centrality_weight=0.25))
"SurfacingConfig('mine', vs DEFAULT: centrality_weight=0.25, name='mine')"
"""

from __future__ import annotations

import math
from typing import Any

import pandas as pd

from memlab.harness.stats import (bootstrap_ci, compare_paired, comparison_html, interval_text,
                                  subset_order)
from memlab.surfacing import display as _surfacing
from memlab.surfacing.config import DEFAULT
from memlab.surfacing.display import (_STYLE, _e, _table_html, context_record_html,
                                      context_record_repr, score_bar)

__all__ = ["config_diff", "config_html", "config_repr", "context_record_html",
           "context_record_repr", "replay_html", "replay_repr", "experiment_html",
           "experiment_repr", "experiment_printable", "sweep_html", "sweep_repr",
           "sweep_printable", "comparison_html", "score_bar", "point_label"]


def config_diff(config, reference=None) -> dict[str, tuple[Any, Any]]:
    """``field -> (value in reference, value in config)`` for every field that differs (nested
    stages as ``"ppr.alpha"``); ``reference`` defaults to ``DEFAULT``.

    Examples
    --------
    >>> from memlab import DEFAULT
    >>> config_diff(DEFAULT.replace(centrality_weight=0.25))
    {'centrality_weight': (0.5, 0.25)}
    """
    return _surfacing.config_diff(config, DEFAULT if reference is None else reference)


def config_repr(config) -> str:
    """One line: the recipe's name and its fields that differ from ``DEFAULT``."""
    return _surfacing.config_repr(config, DEFAULT)


def config_html(config) -> str:
    """The fields that differ from ``DEFAULT`` as an HTML table."""
    return _surfacing.config_html(config, DEFAULT)


# ---------------------------------------------------------------------------- ReplayResult


def replay_repr(result) -> str:
    summary = result.summary()
    shown = ", ".join(f"{k}={v:.3f}" for k, v in summary.items() if k != "Latency")
    name = result.manifest.get("trace", {}).get("name", "?")
    recipe = result.manifest.get("config", {}).get("name", "?")
    return (f"ReplayResult(trace={name!r}, recipe={recipe!r}, queries={len(result.decisions)}, "
            f"candidate rows={len(result.candidates)}{', ' + shown if shown else ''})")


def replay_html(result, n_boot: int = 1000, seed: int = 0) -> str:

    name = result.manifest.get("trace", {}).get("name", "?")
    recipe = result.manifest.get("config", {}).get("name", "?")
    head = (f"<b>ReplayResult</b> of <code>{_e(name)}</code> under <code>{_e(recipe)}</code>: "
            f"{len(result.decisions)} queries, {len(result.candidates)} candidate rows")
    rows = []
    for measure, values in result.metrics.groupby("measure", sort=False)["value"]:
        low, high = bootstrap_ci(values.to_numpy(), n_boot=n_boot, seed=seed)
        rows.append({"measure": measure, "n": len(values), "mean": float(values.mean()),
                     "95% CI": "–" if math.isnan(low) else f"[{low:.3f}, {high:.3f}]"})
    body = _table_html(pd.DataFrame(rows)) if rows else "<div>no measures</div>"
    mix = ""
    if len(result.decisions):
        counts = result.decisions["strategy_used"].value_counts()
        mix = "<div class='memlab-note'>strategies: " + ", ".join(
            f"{_e(k)} {v}" for k, v in counts.items()) + "</div>"
    return f"{_STYLE}<div>{head}{body}{mix}</div>"


# ---------------------------------------------------------------------------- experiments


def _mean_ci(row, label: str, digits: int) -> str:
    return interval_text(row.get(label, math.nan), row.get(f"{label} ci_low", math.nan),
                         row.get(f"{label} ci_high", math.nan), digits)


def experiment_printable(result, digits: int = 3) -> tuple[pd.DataFrame, str]:
    """The experiment table as text cells (mean [95% CI] + marks) and its footnote."""
    marks: dict[tuple[str, str], str] = {}
    comparisons = result.comparisons
    if comparisons is not None:
        for row in comparisons.table.itertuples(index=False):
            marks[(row.name, row.measure)] = row.mark
    rows = []
    for row in result.table.to_dict("records"):
        out = {"name": row["name"], "n": row.get("n", row["queries"])}
        for label in result.measures:
            out[label] = _mean_ci(row, label, digits) + marks.get((row["name"], label), "")
        rows.append(out)
    note = (f"Mean [95% bootstrap CI] over the n judged queries (measures read the "
            f"{result.measure_on} ranking)")
    if result.where:
        note += f"; queries where {result.where}"
    if comparisons is not None:
        note += f"; vs {result.baseline}, " + comparisons.marks_note()
    else:
        note += "."
    for name, replayed in (result.results or {}).items():
        if replayed.manifest.get("in_sample"):
            note += f" WARNING ({name}): {replayed.manifest['in_sample']}."
    return pd.DataFrame(rows), note


def subset_printable(result, digits: int = 3) -> list[tuple[str, pd.DataFrame, str]]:
    """Per subset (in :func:`~memlab.harness.stats.subset_order`): its label, its table as
    text cells (name, n, mean [95% CI] + marks from the subset's own paired comparisons
    against the baseline) and the marks' note."""
    if result.subsets is None:
        return []
    out = []
    for label in subset_order(result.subsets["subset"]):
        group = result.subsets[result.subsets["subset"] == label]
        marks: dict[tuple[str, str], str] = {}
        note = "Mean [95% bootstrap CI] over the n judged queries of this subset."
        labels = getattr(result, "labels", None)
        if labels is not None and len(group) > 1:
            chosen = result.per_query[result.per_query["qid"].map(labels) == label]
            if chosen["name"].nunique() > 1:
                compared = compare_paired(chosen, key="name", measures=result.measures,
                                          reference=result.baseline, warn=False)
                marks = {(r.name, r.measure): r.mark
                         for r in compared.table.itertuples(index=False)}
                note = note[:-1] + f"; vs {result.baseline}, " + compared.marks_note()
        cells = pd.DataFrame({"name": group["name"].to_numpy(),
                              "n": group["n"].to_numpy() if "n" in group
                              else group["queries"].to_numpy()})
        for m in result.measures:
            cells[m] = [_mean_ci(row, m, digits) + marks.get((row["name"], m), "")
                        for row in group.to_dict("records")]
        out.append((label, cells, note))
    return out


def experiment_repr(result) -> str:
    first = result.measures[0] if result.measures else None
    best = ""
    if first is not None and first in result.table and len(result.table):
        top = result.table.sort_values(first, ascending=False).iloc[0]
        best = f", best {first}: {top['name']} {top[first]:.3f}"
    return (f"ExperimentResult({len(result.table)} configurations, baseline={result.baseline!r}, "
            f"measures={result.measures}{best})")


def experiment_html(result) -> str:
    frame, note = experiment_printable(result)
    parts = [_STYLE, "<div><b>ExperimentResult</b>", _table_html(frame),
             f"<div class='memlab-note'>{_e(note)}</div>"]
    if result.comparisons is not None and len(result.comparisons.table):
        parts += ["<b>Paired comparisons</b>", comparison_html(result.comparisons, style=False)]
    if result.subsets is not None:
        cells = result.subsets[["subset", "name", "n", *result.measures]]
        parts += ["<b>Per subset</b>", _table_html(cells)]
    return "".join(parts) + "</div>"


# ---------------------------------------------------------------------------- sweeps


def point_label(table: pd.DataFrame, point: int) -> str:
    """A sweep point named by its parameter values (``damping=0.3, α=0.85``), not its number.

    Examples
    --------
    >>> table = pd.DataFrame({"point": [0, 1], "cfg_spreading.damping": [0.3, 0.7],
    ...                       "cfg_ppr.alpha": [0.85, 0.5]})
    >>> point_label(table, 1)
    'damping=0.7, α=0.5'
    """
    row = table[table["point"] == point].iloc[0]
    parts = []
    for column in [c for c in table.columns if c.startswith("cfg_")]:
        name = column.removeprefix("cfg_").split(".")[-1]
        name = {"alpha": "α"}.get(name, name)
        parts.append(f"{name}={row[column]}")
    return ", ".join(parts) or f"point {point}"


def sweep_printable(result, measures: list[str] | None = None, digits: int = 3,
                    comparisons=None) -> tuple[pd.DataFrame, str]:
    """The sweep table as text cells (point, parameters, mean [95% CI] + marks) and a note."""
    measures = measures or result.measures
    parameters = [c for c in result.table.columns if c.startswith("cfg_")]
    marks: dict[tuple[Any, str], str] = {}
    if comparisons is not None:
        for row in comparisons.table.itertuples(index=False):
            marks[(row.name, row.measure)] = row.mark
    rows = []
    for row in result.table.to_dict("records"):
        out = {"point": row["point"], **{c.removeprefix("cfg_"): row[c] for c in parameters}}
        for label in measures:
            out[label] = _mean_ci(row, label, digits) + marks.get((row["point"], label), "")
        rows.append(out)
    note = "Mean [95% bootstrap CI] over queries"
    if comparisons is not None:
        refs = sorted(set(comparisons.table["reference"]))
        named = "; ".join(f"point {r} ({point_label(result.table, r)})" for r in refs)
        note += f"; each point vs {named}, " + comparisons.marks_note()
    else:
        note += "."
    return pd.DataFrame(rows), note


def sweep_repr(result) -> str:
    parameters = [c.removeprefix("cfg_") for c in result.table.columns if c.startswith("cfg_")]
    return (f"SweepResult({len(result.table)} points over {parameters}, "
            f"executor={result.executor!r}, measures={result.measures})")


def sweep_html(result) -> str:
    comparisons = result.compare(warn=False) if len(result.table) > 1 else None
    frame, note = sweep_printable(result, comparisons=comparisons)
    parts = [_STYLE, "<div><b>SweepResult</b>", _table_html(frame),
             f"<div class='memlab-note'>{_e(note)}</div>"]
    if result.subsets is not None:
        keep = ["subset", "point", *[c for c in result.subsets.columns if c.startswith("cfg_")],
                "n", *result.measures]
        parts += ["<b>Per subset</b>", _table_html(result.subsets[keep])]
    return "".join(parts) + "</div>"
