"""Plots of replay, experiment and sweep results; each returns a matplotlib ``Figure``.

Figures are built with the object API (no pyplot state, no backend switch, no rcParams change), so
they work headless and save with ``savefig``. Each is an :class:`InlineFigure`, a ``Figure`` that
renders itself as PNG for IPython's display machinery: left as the last expression of a notebook
cell it shows as an image with no ``%matplotlib`` magic, whatever the backend.
"""

from __future__ import annotations

import io
from typing import Iterable, Mapping

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from memlab.harness.replay import ReplayResult
from memlab.harness.sweep import SweepResult
from memlab.surfacing.composite import TERM_COLUMNS

__all__ = ["plot_score_breakdown", "plot_stage_latency", "plot_strategy_mix",
           "plot_measure_vs_parameter", "InlineFigure", "TERM_COLOURS"]

TERM_COLOURS = {"term_base": "#4C72B0", "term_centrality": "#55A868", "term_strategy": "#C44E52",
                "term_anchor": "#8172B2", "term_pin": "#CCB974", "term_freshness": "#64B5CD"}


class InlineFigure(Figure):
    """A matplotlib ``Figure`` that IPython displays as a PNG image.

    A bare ``Figure`` made with the object API has no display hook of its own: Jupyter shows only
    its text repr (``<Figure size 800x565 with 1 Axes>``) unless pyplot's inline backend has been
    loaded. This subclass adds ``_repr_png_``, which IPython's PNG formatter calls when the figure
    is the last expression of a cell. It is rendered by Agg into memory; pyplot's figure manager
    never sees it, so it is displayed once, and no global matplotlib state changes. When the
    inline backend *is* active, its formatter for ``Figure`` takes precedence and the figure is
    still shown once.

    Everything else is a plain ``Figure``: ``savefig``, ``axes``, pickling.
    """

    def _repr_png_(self) -> bytes:
        """Render the figure as PNG bytes (Agg, in memory, tight bounding box).

        Returns
        -------
        bytes
            The PNG image, at the figure's own dpi.
        """
        buffer = io.BytesIO()
        self.savefig(buffer, format="png", bbox_inches="tight")
        return buffer.getvalue()


def plot_score_breakdown(result: ReplayResult, qid: str, top: int = 10) -> InlineFigure:
    """Stacked composite terms of the query's ``top`` candidates, best first.

    Bars of surfaced items are solid, the others faded; gold items are marked ``★``.
    """
    cand = result.candidates
    if cand.empty or qid not in set(cand["qid"]):
        raise ValueError(f"qid {qid!r} has no recorded candidates in this result")
    rows = cand[cand["qid"] == qid].sort_values("rank").head(top).iloc[::-1]
    fig = InlineFigure(figsize=(8, 0.45 * len(rows) + 1.6))
    ax = fig.add_subplot()
    left = np.zeros(len(rows))
    labels = [("★ " if g > 0 else "") + str(i) for i, g in zip(rows["item_id"], rows["gold"])]
    alpha = np.where(rows["surfaced"].to_numpy(dtype=bool), 1.0, 0.35)
    for term in TERM_COLUMNS:
        values = rows[term].to_numpy(dtype=float)
        if not np.any(values):
            continue
        bars = ax.barh(labels, values, left=left, color=TERM_COLOURS[term],
                       label=term.removeprefix("term_"))
        for bar, a in zip(bars, alpha):
            bar.set_alpha(a)
        left += values
    query = result.decisions.set_index("qid").loc[qid]
    ax.set_title(f"{qid}: {query['query']!s:.60} ({query['strategy_used']})")
    ax.set_xlabel("score (sum of composite terms)")
    ax.set_ylabel("candidate")
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return fig


def plot_stage_latency(result: ReplayResult, percentiles: Iterable[float] = (50, 95, 99)
                       ) -> InlineFigure:
    """Per-stage latency percentiles (ms) over the replay's queries."""
    decisions = result.decisions
    # stage timings: "<stage>_ms", including the graph stages' own "spread_ms" and "ppr_ms",
    # but not the graph stages' budget/elapsed/overrun details ("spread_budget_ms", …)
    stages = [c for c in decisions.columns if c in ("spread_ms", "ppr_ms") or (
        c.endswith("_ms") and not c.startswith(("spread_", "ppr_")))]
    percentiles = list(percentiles)
    if decisions.empty or not stages:
        raise ValueError("result has no decisions with stage timings")
    table = pd.DataFrame({p: decisions[stages].quantile(p / 100.0) for p in percentiles})
    fig = InlineFigure(figsize=(9, 4))
    ax = fig.add_subplot()
    width = 0.8 / len(percentiles)
    x = np.arange(len(stages))
    for i, p in enumerate(percentiles):
        ax.bar(x + i * width, table[p].to_numpy(), width, label=f"p{p:g}")
    ax.set_xticks(x + width * (len(percentiles) - 1) / 2,
                  [s.removesuffix("_ms") for s in stages], rotation=45, ha="right")
    ax.set_ylabel("ms")
    ax.set_title("stage latency percentiles")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_strategy_mix(results: ReplayResult | Mapping[str, ReplayResult]) -> InlineFigure:
    """How often each strategy was used (one bar group per result)."""
    if isinstance(results, ReplayResult):
        results = {"replay": results}
    counts = pd.DataFrame({name: r.decisions["strategy_used"].value_counts()
                           for name, r in results.items()}).fillna(0).sort_index()
    fig = InlineFigure(figsize=(8, 4))
    ax = fig.add_subplot()
    width = 0.8 / max(1, counts.shape[1])
    x = np.arange(len(counts))
    for i, name in enumerate(counts.columns):
        ax.bar(x + i * width, counts[name].to_numpy(), width, label=name)
    ax.set_xticks(x + width * (counts.shape[1] - 1) / 2, counts.index, rotation=20, ha="right")
    ax.set_ylabel("queries")
    ax.set_title("strategy mix")
    ax.legend()
    fig.tight_layout()
    return fig


def plot_measure_vs_parameter(sweep: SweepResult, parameter: str, measure: str) -> InlineFigure:
    """A measure's mean against one swept parameter, with its bootstrap 95% band.

    With more than one swept parameter, one line per combination of the others.
    """
    table = sweep.table
    column = f"cfg_{parameter}"
    if column not in table or measure not in table:
        raise ValueError(f"sweep has no parameter {parameter!r} or measure {measure!r}")
    others = [c for c in table.columns if c.startswith("cfg_") and c != column]
    fig = InlineFigure(figsize=(7, 4))
    ax = fig.add_subplot()
    groups = table.groupby(others, sort=True) if others else [((), table)]
    for key, group in groups:
        group = group.sort_values(column)
        label = ", ".join(f"{o.removeprefix('cfg_')}={v}" for o, v in
                          zip(others, key if isinstance(key, tuple) else (key,))) or measure
        ax.plot(group[column], group[measure], marker="o", label=label)
        ax.fill_between(group[column], group[f"{measure} ci_low"], group[f"{measure} ci_high"],
                        alpha=0.2)
    ax.set_xlabel(parameter)
    ax.set_ylabel(measure)
    ax.set_title(f"{measure} against {parameter} (95% bootstrap band)")
    ax.legend(fontsize="small")
    fig.tight_layout()
    return fig
