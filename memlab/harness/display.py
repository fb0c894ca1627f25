"""Rich display for notebooks: ``_repr_html_`` and concise ``__repr__`` of memlab's results.

Classes elsewhere (``ContextRecord``, ``ReplayResult``, ``ExperimentResult``, ``SweepResult``,
``SurfacingConfig``, ``ComparisonTable``) delegate here with one line and a lazy import, so the
rendering lives in one module and the classes' modules stay free of it. The HTML is plain
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

import html
import math
from typing import Any

import numpy as np
import pandas as pd

__all__ = ["config_diff", "config_html", "config_repr", "context_record_html",
           "context_record_repr", "replay_html", "replay_repr", "experiment_html",
           "experiment_repr", "experiment_printable", "sweep_html", "sweep_repr",
           "sweep_printable", "comparison_html", "score_bar", "point_label"]

_STYLE = ("<style>.memlab-t td,.memlab-t th{padding:2px 6px;text-align:left}"
          ".memlab-note{color:#555;font-size:90%}</style>")
# the memlab palette (Okabe–Ito, colour-blind safe); kept in step with plots.PALETTE
_BAR_SURFACED, _BAR_DROPPED = "#0072B2", "#BBBBBB"


def _e(value: Any) -> str:
    return html.escape(str(value))


def score_bar(value: float, top: float, surfaced: bool = True, width_px: int = 120) -> str:
    """An inline HTML bar of ``value`` on a scale whose full width is ``top``.

    Examples
    --------
    >>> 'width:60px' in score_bar(0.5, 1.0)
    True
    """
    fraction = 0.0 if not top or not np.isfinite(value) else max(0.0, min(1.0, value / top))
    colour = _BAR_SURFACED if surfaced else _BAR_DROPPED
    return (f'<div style="display:inline-block;width:{round(fraction * width_px)}px;height:10px;'
            f'background:{colour};vertical-align:middle"></div> '
            f'<span style="font-family:monospace">{value:.3f}</span>')


def _table_html(frame: pd.DataFrame, escape: bool = True) -> str:
    return frame.to_html(index=False, escape=escape, classes="memlab-t", border=0,
                         na_rep="–", float_format=lambda v: f"{v:.3f}")


# ---------------------------------------------------------------------------- SurfacingConfig


def config_diff(config, reference=None) -> dict[str, tuple[Any, Any]]:
    """``field -> (value in reference, value in config)`` for every field that differs (nested
    stages as ``"ppr.alpha"``); ``reference`` defaults to ``DEFAULT``.

    Examples
    --------
    >>> from memlab import DEFAULT
    >>> config_diff(DEFAULT.replace(centrality_weight=0.25))
    {'centrality_weight': (0.5, 0.25)}
    """
    from memlab.surfacing.config import DEFAULT

    reference = DEFAULT if reference is None else reference
    mine, theirs = _flat(config.to_dict()), _flat(reference.to_dict())
    diff = {key: (theirs.get(key), mine.get(key)) for key in sorted(set(mine) | set(theirs))
            if mine.get(key) != theirs.get(key)}
    for stage in ("dense", "ppr", "spreading"):  # a stage on one side only: one entry
        a, b = getattr(reference, stage), getattr(config, stage)
        if (a is None) != (b is None):
            diff = {k: v for k, v in diff.items() if not k.startswith(stage + ".")}
            diff[stage] = (None if a is None else "configured", None if b is None
                           else "configured")
    return dict(sorted(diff.items()))


def _flat(data: dict, prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in data.items():
        if key in ("spreading", "ppr", "dense") and isinstance(value, dict):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def _stage_fields(config, diff: dict) -> dict:
    """A stage configured here but not in the reference (``"dense": (None, "configured")``)
    shown by its fields (``dense.weight`` …), so a repr says what the stage is."""
    out, stages = {}, {}
    for key, value in diff.items():
        stage = getattr(config, key, None) if key in ("dense", "ppr", "spreading") else None
        if value[1] == "configured" and stage is not None:
            for name, v in stage.to_dict().items() if hasattr(stage, "to_dict") else \
                    vars(stage).items():
                if v is not None:
                    stages[f"{key}.{name}"] = (None, v)
        else:
            out[key] = value
    return {**out, **stages}  # the plain fields first, then the stage's


def config_repr(config) -> str:
    diff = config_diff(config)
    if not diff:
        return f"SurfacingConfig({config.name!r}, = DEFAULT)"
    diff = _stage_fields(config, diff)
    shown = ", ".join(f"{k}={v[1]!r}" for k, v in list(diff.items())[:6])
    more = f", … {len(diff) - 6} more" if len(diff) > 6 else ""
    return f"SurfacingConfig({config.name!r}, vs DEFAULT: {shown}{more})"


def config_html(config) -> str:
    diff = config_diff(config)
    head = f"<b>SurfacingConfig</b> <code>{_e(config.name)}</code>"
    if not diff:
        return f"{_STYLE}<div>{head}: identical to <code>DEFAULT</code></div>"
    frame = pd.DataFrame([{"field": k, "DEFAULT": _short(a), "this": _short(b)}
                          for k, (a, b) in diff.items()])
    return (f"{_STYLE}<div>{head}: {len(diff)} field(s) differ from <code>DEFAULT</code>"
            f"{_table_html(frame)}</div>")


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit - 1] + "…"


# ---------------------------------------------------------------------------- ContextRecord


def context_record_repr(record) -> str:
    return (f"ContextRecord({record.query!r:.50}, strategy={record.strategy_used!r}, "
            f"surfaced={len(record.surfaced_ids)}/{len(record.candidates.get('item_id', []))} "
            f"candidates, tokens={record.tokens_used}, "
            f"{record.timings_ms.get('total', math.nan):.1f} ms)")


def _candidate_rows(frame: pd.DataFrame, top: int, labels: dict | None = None) -> pd.DataFrame:
    frame = frame.sort_values("rank").head(top)
    best = float(frame["score"].max()) if len(frame) else 1.0
    out = pd.DataFrame({
        "rank": frame["rank"].to_numpy(),
        "item": [_e((labels or {}).get(i, i)) for i in frame["item_id"]],
        "surfaced": ["✓" if s else "" for s in frame["surfaced"]],
        "score": [score_bar(float(v), best, bool(s)) for v, s in
                  zip(frame["score"], frame["surfaced"])],
        "drop reason": [_e(r) if isinstance(r, str) and r else "" for r in
                        frame["drop_reason"]]})
    if "gold" in frame:
        out.insert(2, "gold", ["★" if g > 0 else "" for g in frame["gold"]])
    return out


def context_record_html(record, top: int = 15) -> str:
    frame = pd.DataFrame(record.candidates)
    head = (f"<b>ContextRecord</b> “{_e(record.query)}” → <code>{_e(record.strategy_used)}"
            f"</code> ({_e(record.recipe)}, {_e(record.mode)}), {len(record.surfaced_ids)} "
            f"surfaced of {len(frame)} candidates, {record.tokens_used} tokens, "
            f"{record.timings_ms.get('total', math.nan):.1f} ms")
    if frame.empty:
        return f"{_STYLE}<div>{head}</div>"
    rows = _candidate_rows(frame, top, getattr(record, "labels", None))
    more = f"<div class='memlab-note'>top {top} of {len(frame)} shown</div>" \
        if len(frame) > top else ""
    return f"{_STYLE}<div>{head}{_table_html(rows, escape=False)}{more}</div>"


# ---------------------------------------------------------------------------- ReplayResult


def replay_repr(result) -> str:
    summary = result.summary()
    shown = ", ".join(f"{k}={v:.3f}" for k, v in summary.items() if k != "Latency")
    name = result.manifest.get("trace", {}).get("name", "?")
    recipe = result.manifest.get("config", {}).get("name", "?")
    return (f"ReplayResult(trace={name!r}, recipe={recipe!r}, queries={len(result.decisions)}, "
            f"candidate rows={len(result.candidates)}{', ' + shown if shown else ''})")


def replay_html(result, n_boot: int = 1000, seed: int = 0) -> str:
    from memlab.harness.experiment import bootstrap_ci

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
    from memlab.harness.stats import interval_text
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
    from memlab.harness.stats import compare_paired, subset_order
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


def comparison_html(table, style: bool = True) -> str:
    frame = table._printable(3)
    return (_STYLE if style else "") + _table_html(frame) + \
        f"<div class='memlab-note'>{_e(table.footnote())}</div>"


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
