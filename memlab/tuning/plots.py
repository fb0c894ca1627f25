"""Plots of a tuning run (matplotlib): optimisation history, parameter importance, and the
measure against the two most important parameters. Each returns a matplotlib Figure, drawn in
memlab's style (:data:`memlab.harness.plots.STYLE`) and titled with the trace and its number of
questions; every value they show is the final search's, on every question: in-sample, and the
titles say so (the CV estimate is the honest number)."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["plot_history", "plot_importance", "plot_top_params", "save_plots"]


def _styled(plot):
    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        from matplotlib import style
        from memlab.harness.plots import STYLE
        with style.context(STYLE):
            return plot(*args, **kwargs)
    return wrapper


def _about(result) -> str:
    """``"<trace>, n=<questions> questions, in-sample"`` for a plot's title."""
    trace = result.manifest.get("trace", {}).get("name", "trace")
    n = result.cv["questions"].iloc[0] if "questions" in result.cv else "?"
    return f"{trace}, n={n} questions, in-sample"


def _final(result) -> Any:
    trials = result.trials
    return trials[(trials["study"] == "final") & (trials["state"] == "COMPLETE")]


@_styled
def plot_history(result):
    """Every trial's value in the final search (dots) and the best so far (line).

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> from memlab.tuning import tune
    >>> out = tune(synthetic_trace(300, 40, seed=1), {"centrality_weight": (0.0, 2.0)},
    ...            measure="MRR", folds=2, n_trials=3, group_by="question")
    >>> plot_history(out).axes[0].get_ylabel()
    'MRR (in-sample)'
    """
    import matplotlib.pyplot as plt
    final = _final(result)
    fig, ax = plt.subplots(figsize=(6, 3.5))
    from memlab.harness.plots import PALETTE
    ax.plot(final["number"], np.maximum.accumulate(final["value"].to_numpy()), "-",
            color=PALETTE[0], linewidth=2, label="best so far")
    ax.plot(final["number"], final["value"], "o", ms=4, color=PALETTE[1], label="trial")
    ax.set_xlabel("trial")
    ax.set_ylabel(f"{result.measure} (in-sample)")
    ax.set_title(f"optimisation history (final search, {len(final)} trials)\n{_about(result)}")
    ax.legend(loc="lower right")
    fig.tight_layout()
    return fig


@_styled
def plot_importance(result):
    """The final search's parameter importances (fANOVA), largest on top; when they are
    undefined (NaN: every trial scored the same, a flat objective) a note says so instead of
    empty bars."""
    import matplotlib.pyplot as plt
    imp = result.importance.fillna(0.0).sort_values()
    fig, ax = plt.subplots(figsize=(6, 1.2 + 0.45 * max(len(imp), 1)))
    if result.importance.isna().all():
        ax.text(0.5, 0.5, "no importance: the objective was flat\n(every trial scored the "
                "same)", ha="center", va="center", transform=ax.transAxes, fontsize=11,
                bbox={"boxstyle": "round", "facecolor": "#F0E442", "alpha": 0.5})
        ax.set_yticks(range(len(imp)), list(imp.index))
        ax.set_ylim(-0.5, len(imp) - 0.5)
    else:
        ax.barh(list(imp.index), imp.to_numpy())
    ax.set_xlabel("importance (fANOVA)")
    ax.set_xlim(0, 1)
    ax.set_title(f"parameter importance\n{_about(result)}")
    fig.tight_layout()
    return fig


@_styled
def plot_top_params(result):
    """The measure against the two most important parameters: one scatter per parameter, and
    (with two or more) the pair coloured by the measure."""
    import matplotlib.pyplot as plt
    final = _final(result)
    names = [n for n in result.importance.fillna(0.0).sort_values(ascending=False).index
             if f"params_{n}" in final][:2]
    panels = len(names) + (1 if len(names) == 2 else 0)
    fig, axes = plt.subplots(1, max(panels, 1), figsize=(4.2 * max(panels, 1), 3.5),
                             squeeze=False)
    axes = axes[0]
    for ax, name in zip(axes, names):
        x = final[f"params_{name}"]
        ax.scatter(x.astype(str) if x.dtype == object else x, final["value"], s=10)
        ax.set_xlabel(name)
        ax.set_ylabel(f"{result.measure} (in-sample)")
    if len(names) == 2:
        x, y = (final[f"params_{n}"] for n in names)
        if x.dtype != object and y.dtype != object:
            points = axes[2].scatter(x, y, c=final["value"], s=14, cmap="viridis")
            fig.colorbar(points, ax=axes[2], label=f"{result.measure} (in-sample)")
        axes[2].set_xlabel(names[0])
        axes[2].set_ylabel(names[1])
    fig.suptitle(f"measure vs the most important parameters ({_about(result)})")
    fig.tight_layout()
    return fig


def save_plots(result, folder: str | Path) -> list[Path]:
    """Write the three plots as PNG files into ``folder``; returns their paths."""
    import matplotlib.pyplot as plt
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    out = []
    for name, make in (("history", plot_history), ("importance", plot_importance),
                       ("top_params", plot_top_params)):
        fig = make(result)
        path = folder / f"{name}.png"
        fig.savefig(path, dpi=110)
        plt.close(fig)
        out.append(path)
    return out
