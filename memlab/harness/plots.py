"""Plots of replay, experiment and sweep results; each returns a matplotlib ``Figure``.

Figures are built with the object API (no pyplot state, no backend switch), inside memlab's style
sheet (:data:`STYLE`: 150 dpi, the Okabe–Ito colour-blind-safe palette, light grid) applied with
``matplotlib.style.context``, so global rcParams are left as they were. Each is an
:class:`InlineFigure`, a ``Figure`` that renders itself as PNG for IPython's display machinery:
left as the last expression of a notebook cell it shows as an image with no ``%matplotlib``
magic, whatever the backend.
"""

from __future__ import annotations

import functools
import io
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
from matplotlib import style as mpl_style
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from memlab.harness.display import point_label
from memlab.harness.replay import DEPRECATED_COLUMNS, TIMING_COLUMNS, ReplayResult
from memlab.harness.sweep import SweepResult
from memlab.surfacing.composite import TERM_COLUMNS
from memlab.surfacing.context import TIMING_ALIASES
from memlab.surfacing.stages import STAGES
from memlab.surfacing.stages.base import PHASE_TIMINGS, PHASES
from memlab.surfacing.strategies import STRATEGIES

__all__ = ["plot_score_breakdown", "plot_stage_latency", "plot_strategy_mix",
           "plot_measure_vs_parameter", "InlineFigure", "TERM_COLOURS", "PALETTE", "STYLE",
           "use_style", "item_labels", "NESTED_STAGES", "nested_stages", "point_label"]

STYLE = str(Path(__file__).with_name("memlab.mplstyle"))
# Okabe & Ito (2008): distinguishable under the common colour-vision deficiencies
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]
TERM_COLOURS = {"term_base": PALETTE[0], "term_centrality": PALETTE[2], "term_strategy": PALETTE[3],
                "term_anchor": PALETTE[4], "term_pin": PALETTE[1], "term_freshness": PALETTE[5]}


def nested_stages() -> dict[str, str]:
    """Timing key -> the key whose time includes it: each registered stage of a strategy's
    expand or adjust phase inside that phase's subtotal (``strategy_expand``,
    ``strategy_adjust``), and the query's embedding inside the ``dense`` stage.

    Examples
    --------
    >>> nested_stages()["spread"], nested_stages()["ppr"], nested_stages()["query_embedding"]
    ('strategy_expand', 'strategy_adjust', 'dense')
    """
    nested = {name: PHASE_TIMINGS[cls.phase] for name, cls in sorted(STAGES.items())
              if cls.phase in PHASE_TIMINGS}
    nested["query_embedding"] = "dense"
    return nested


def _pipeline_rank(name: str) -> tuple[int, int]:
    """Where a timing key runs in the pipeline: routing, then the phases in order (a phase's
    subtotal with its stages, in the order the built-in strategies run them), then unknown keys,
    then the response."""
    if name == "route":
        return -1, 0
    if name == "respond":
        return len(PHASES) + 1, 0
    phase = {total: phase for phase, total in PHASE_TIMINGS.items()}.get(name)
    if phase is None and name in STAGES:
        phase = STAGES[name].phase
    if name == "query_embedding":
        phase, name = "retrieve", "dense"
    known = list(dict.fromkeys(stage.name for pipeline in STRATEGIES.values()
                               for stage in pipeline))
    within = known.index(name) if name in known else len(known)
    return (PHASES.index(phase) if phase is not None else len(PHASES)), within


# the built-in stages' nesting (nested_stages() also knows stages registered later)
NESTED_STAGES = nested_stages()


def use_style() -> None:
    """Apply memlab's style sheet globally (for your own pyplot figures).

    Examples
    --------
    >>> import matplotlib
    >>> with matplotlib.rc_context():
    ...     use_style()
    ...     matplotlib.rcParams["figure.dpi"]
    150.0
    """
    mpl_style.use(STYLE)


def _figure(**kwargs: Any) -> "InlineFigure":
    return InlineFigure(**kwargs)


def _styled(plot):
    """Run a plot helper inside memlab's style (figure, axes, colours, fonts), rcParams restored
    afterwards."""
    @functools.wraps(plot)
    def wrapper(*args, **kwargs):
        with mpl_style.context(STYLE):
            return plot(*args, **kwargs)
    return wrapper


def item_labels(trace, width: int = 40) -> dict[str, str]:
    """``item_id -> label`` for the items a trace adds: the item's ``title`` metadata, else its
    content's first ``width`` characters.

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> trace = TraceBuilder("t").add("JWT was picked because sessions did not scale",
    ...                               item_id="a").build()
    >>> item_labels(trace, width=20)
    {'a': 'JWT was picked beca…'}
    """
    labels: dict[str, str] = {}
    counters: dict[str, int] = {}
    taken: set[str] = set()  # ids in the memory so far
    for event in trace:
        if event.type not in ("add", "anchor"):
            continue
        item_id = event.get("item_id")
        if item_id is None:  # the id the store generates (memlab.store: item-NNNNNN in order)
            workspace = event.get("workspace_id", trace.workspace_id)
            counter = counters.get(workspace, 0)
            while f"item-{counter:06d}" in taken:
                counter += 1
            item_id, counters[workspace] = f"item-{counter:06d}", counter + 1
        taken.add(item_id)
        title = (event.get("metadata") or {}).get("title")
        prefix = f"[{event.get('anchor_type', 'anchor')}] " if event.type == "anchor" else ""
        text = prefix + " ".join(str(title or event.get("content") or item_id).split())
        labels[item_id] = text if len(text) <= width else text[:width - 1] + "…"
    return labels


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


@_styled
def plot_score_breakdown(result: ReplayResult, qid: str, top: int = 10, *, trace=None,
                         labels: Mapping[str, str] | None = None) -> InlineFigure:
    """Stacked composite terms of the query's ``top`` candidates, best first.

    Bars of surfaced items are solid, the others faded; gold items are marked ``★``; a dashed
    line marks the k cut (items below it were ranked past ``k``) and a dotted line the token
    budget's cut; every mark is in the legend. Items are labelled by their title or content
    (from ``trace`` or ``labels``), else by id.

    Examples
    --------
    >>> from memlab.datasets import fixture_trace, load_fixture
    >>> from memlab.harness import replay
    >>> trace = fixture_trace(load_fixture("apollo_demo"))
    >>> fig = plot_score_breakdown(replay(trace, k=3), "q1", trace=trace)
    >>> fig.axes[0].get_xlabel()
    'score (sum of composite terms)'
    """
    cand = result.candidates
    if cand.empty or qid not in set(cand["qid"]):
        raise ValueError(f"qid {qid!r} has no recorded candidates in this result")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ValueError(f"top must be an integer >= 1, got {top!r}")
    names = dict(item_labels(trace)) if trace is not None else {}
    names.update(labels or {})
    rows = cand[cand["qid"] == qid].sort_values("rank").head(top).iloc[::-1]
    fig = _figure(figsize=(7.5, 0.32 * len(rows) + 1.9))
    ax = fig.add_subplot()
    left = np.zeros(len(rows))
    ticks = [("★ " if g > 0 else "") + names.get(i, str(i))
             for i, g in zip(rows["item_id"], rows["gold"])]
    y = np.arange(len(rows))
    surfaced = rows["surfaced"].to_numpy(dtype=bool)
    alpha = np.where(surfaced, 1.0, 0.3)
    handles = []
    for term in TERM_COLUMNS:
        values = rows[term].to_numpy(dtype=float)
        if not np.any(values):
            continue
        bars = ax.barh(y, values, left=left, color=TERM_COLOURS[term], height=0.7)
        for bar, a in zip(bars, alpha):
            bar.set_alpha(a)
        handles.append(Patch(color=TERM_COLOURS[term], label=term.removeprefix("term_")))
        left += values
    ax.set_yticks(y, ticks)
    for tick, gold in zip(ax.get_yticklabels(), rows["gold"]):
        if gold > 0:
            tick.set_fontweight("bold")
    # the swatches are drawn as the bars are: the first term's colour, solid or faded, and
    # only for what the plot shows
    swatch = TERM_COLOURS[next((t for t in TERM_COLUMNS if np.any(rows[t].to_numpy(
        dtype=float))), "term_base")]
    if surfaced.any():
        handles.append(Patch(facecolor=swatch, alpha=1.0, label="surfaced (solid)"))
    if (~surfaced).any():
        handles.append(Patch(facecolor=swatch, alpha=0.3, label="not surfaced (faded)"))
    if (rows["gold"] > 0).any():
        handles.append(Line2D([], [], linestyle="none", marker="$★$", color="black",
                              markersize=8, label="gold (★, bold)"))
    reasons = rows["drop_reason"].astype(object).to_numpy()
    for reason, style_, text in (("k_cut", "--", "k cut"), ("budget_cut", ":", "budget cut")):
        hit = np.flatnonzero(reasons == reason)
        if len(hit):
            # rows are drawn bottom-up: the cut sits above the best-ranked row it dropped
            cut = hit.max() + 0.5
            ax.axhline(cut, color="black", linestyle=style_, linewidth=1.0)
            handles.append(Line2D([], [], color="black", linestyle=style_, label=text))
    query = result.decisions.set_index("qid").loc[qid]
    budget = query.get("max_tokens")
    budget = f", budget {int(budget)} tokens" if budget is not None and pd.notna(budget) else ""
    ax.set_title(f"{qid}: “{query['query']!s:.60}” ({query['strategy_used']}, k={query['k']}"
                 f"{budget})")
    ax.set_xlabel("score (sum of composite terms)")
    ax.set_ylabel("candidate (best first)")
    ax.grid(axis="y", visible=False)
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def _stage_columns(decisions: pd.DataFrame) -> dict[str, str]:
    # stage timings (stage name -> column): "<stage>_ms" (replay.TIMING_COLUMNS for a few),
    # including the graph stages' own "spread_ms" and "ppr_ms", but not the graph stages'
    # budget/elapsed/overrun details ("spread_budget_ms", …) nor deprecated alias columns
    named = {column: stage for stage, column in TIMING_COLUMNS.items()}
    return {named.get(c, c.removesuffix("_ms")): c for c in decisions.columns
            if c in named or c in ("spread_ms", "ppr_ms") or (
                c.endswith("_ms") and not c.startswith(("spread_", "ppr_"))
                and c != "total_ms"
                and DEPRECATED_COLUMNS.get(c) not in decisions.columns)}


@_styled
def plot_stage_latency(result: ReplayResult, percentiles: Iterable[float] = (50, 95, 99), *,
                       memory_size: int | None = None) -> InlineFigure:
    """Per-stage latency percentiles (ms), nested stages drawn nested under their parent.

    Each stage's percentiles are over the queries that ran it (``n`` by its name); a stage timed
    inside another (:func:`nested_stages`: a strategy's expand and adjust stages, such as
    spreading and PageRank, inside its subtotals; the query embedding inside ``dense``) is drawn hatched and indented right under its parent (its time is
    part of the parent's), not as a sibling. The title names the recipe, the memory size (items
    the trace added, or ``memory_size``) and the strategy mix; the axis is logarithmic when the
    values span more than 100×.

    Examples
    --------
    >>> from memlab.datasets import fixture_trace, load_fixture
    >>> from memlab.harness import replay
    >>> fig = plot_stage_latency(replay(fixture_trace(load_fixture("apollo_demo")), k=5))
    >>> fig.axes[0].get_xlabel()
    'ms, percentiles over the queries that ran the stage'
    """
    decisions = result.decisions
    percentiles = list(percentiles)
    if not percentiles or any(not 0 <= p <= 100 for p in percentiles):
        raise ValueError(f"percentiles must be values in [0, 100], got {percentiles!r}")
    stages = _stage_columns(decisions)
    if decisions.empty or not stages:
        raise ValueError("result has no decisions with stage timings")
    ran = {n: decisions[c].dropna() for n, c in stages.items()}
    names = [n for n in stages if len(ran[n])]
    # deprecated timing keys repeat a stage's own (context.TIMING_ALIASES): drawn once
    names = [n for n in names if TIMING_ALIASES.get(n) not in names]
    # pipeline order, each nested stage right under its parent (siblings in pipeline order)
    parent_of = {n: p for n, p in nested_stages().items() if n in names and p in names}
    # pipeline order (records list a stage's key when a query first ran it, so a frame's
    # column order is not it), a parent drawn where its first child ran, children right under it
    names = sorted(names, key=_pipeline_rank)
    order: list[str] = []
    for n in names:
        parent = parent_of.get(n)
        if parent is None and n not in parent_of.values():
            order.append(n)
        elif parent is not None and parent not in order:
            order += [parent] + [c for c in names if parent_of.get(c) == parent]
    table = {n: [float(np.percentile(ran[n], p)) for p in percentiles] for n in names}
    fig = _figure(figsize=(9.5, 0.42 * len(order) + 1.4))
    ax = fig.add_subplot()
    height = 0.8 / len(percentiles)
    y = -np.arange(len(order), dtype=float)  # first stage on top
    handles = []
    for i, p in enumerate(percentiles):
        colour = PALETTE[i % len(PALETTE)]
        for j, n in enumerate(order):
            nested = n in parent_of
            ax.barh(y[j] + (len(percentiles) - 1) / 2 * height - i * height, table[n][i],
                    height, color=colour, hatch="////" if nested else None,
                    edgecolor="white" if nested else None, linewidth=0)
        handles.append(Patch(color=colour, label=f"p{p:g}"))
    labels = []
    for n in order:
        labels.append(f"└ {n} (in {parent_of[n]}, n={len(ran[n])})"
                      if n in parent_of else f"{n} (n={len(ran[n])})")
    ax.set_yticks(y, labels)
    for tick, n in zip(ax.get_yticklabels(), order):
        if n in parent_of:
            tick.set_fontstyle("italic")
    if parent_of:
        handles.append(Patch(facecolor="#777777", hatch="////", edgecolor="white",
                             label="nested stage (time inside its parent)"))
    positive = [v for row in table.values() for v in row if v > 0]
    if positive and max(positive) / min(positive) > 100:
        ax.set_xscale("log")
    ax.grid(axis="y", visible=False)
    ax.set_xlabel("ms, percentiles over the queries that ran the stage")
    mix = decisions["strategy_used"].value_counts(normalize=True)
    strategy = mix.index[0] if len(mix) == 1 else ", ".join(
        f"{k} {v:.0%}" for k, v in mix.head(3).items()) + (
        f", {len(mix) - 3} more" if len(mix) > 3 else "")
    size = memory_size if memory_size is not None else \
        result.manifest.get("trace", {}).get("items")
    recipe = result.manifest.get("config", {}).get("name", "?")
    ax.set_title(f"stage latency: {recipe}, {'?' if size is None else f'{size:,}'} items, "
                 f"{len(decisions)} queries\nstrategy: {strategy}")
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


@_styled
def plot_strategy_mix(results: ReplayResult | Mapping[str, ReplayResult]) -> InlineFigure:
    """How often each strategy was used (one bar group per result)."""
    if isinstance(results, ReplayResult):
        results = {"replay": results}
    counts = pd.DataFrame({name: r.decisions["strategy_used"].value_counts()
                           for name, r in results.items()}).fillna(0).sort_index()
    fig = _figure(figsize=(7, 3.6))
    ax = fig.add_subplot()
    width = 0.8 / max(1, counts.shape[1])
    x = np.arange(len(counts))
    for i, name in enumerate(counts.columns):
        ax.bar(x + i * width, counts[name].to_numpy(), width, label=name)
    ax.set_xticks(x + width * (counts.shape[1] - 1) / 2, counts.index, rotation=20, ha="right")
    ax.set_xlabel("strategy used")
    ax.set_ylabel("queries")
    sizes = ", ".join(f"{name}: n={len(r.decisions)}" for name, r in results.items())
    ax.set_title(f"strategy mix ({sizes})" if len(sizes) <= 70 else
                 f"strategy mix (n={sum(len(r.decisions) for r in results.values())} queries)")
    ax.legend()
    fig.tight_layout()
    return fig


def _wrap(text: str, width: int = 28) -> str:
    import textwrap
    return "\n".join(textwrap.wrap(text, width)) or text


@_styled
def plot_measure_vs_parameter(sweep: SweepResult, parameter: str, measure: str, *,
                              reference: Any = "best", correction: str = "holm",
                              dataset: str | None = None) -> InlineFigure:
    """A measure's mean against one swept parameter (bootstrap 95% band, full y range), and
    below it each point's paired difference from the ``reference`` point with its paired
    bootstrap 95% band; points whose difference is significant after ``correction`` are filled.

    The title names the dataset and the number of queries; with more than one swept parameter,
    one line per combination of the others. The legend sits outside the data.

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> from memlab.harness import sweep
    >>> trace = (TraceBuilder("t").add("JWT tokens", item_id="a").add("cat", item_id="b")
    ...          .query("q1", "JWT", gold=["a"]).build())
    >>> swept = sweep(trace, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"])
    >>> fig = plot_measure_vs_parameter(swept, "centrality_weight", "MRR")
    >>> fig.axes[0].get_title()
    'MRR against centrality_weight: t, n=1 queries'
    """
    table = sweep.table
    column = f"cfg_{parameter}"
    if column not in table or measure not in table:
        raise ValueError(f"sweep has no parameter {parameter!r} or measure {measure!r}")
    import warnings

    from memlab.harness.stats import LOWER_IS_BETTER, SmallSampleWarning
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SmallSampleWarning)  # shown as hollow markers instead
        comparisons = sweep.compare(reference, measures=[measure], correction=correction)
    diffs = comparisons.table.set_index("name")
    ref_point = int(diffs["reference"].iloc[0]) if len(diffs) else int(table["point"].iloc[0])
    others = [c for c in table.columns if c.startswith("cfg_") and c != column]
    fig = _figure(figsize=(7, 5.2))
    ax, dax = fig.subplots(2, 1, sharex=True, height_ratios=[3, 2])
    groups = table.groupby(others, sort=True) if others else [((), table)]
    for n, (key, group) in enumerate(groups):
        colour = PALETTE[n % len(PALETTE)]
        group = group.sort_values(column)
        label = ", ".join(f"{o.removeprefix('cfg_')}={v}" for o, v in
                          zip(others, key if isinstance(key, tuple) else (key,))) or measure
        ax.plot(group[column], group[measure], marker="o", color=colour, label=label)
        ax.fill_between(group[column], group[f"{measure} ci_low"], group[f"{measure} ci_high"],
                        alpha=0.2, color=colour, linewidth=0)
        xs, deltas, lows, highs, filled = [], [], [], [], []
        for point, value in zip(group["point"], group[column]):
            if point == ref_point:
                xs.append(value), deltas.append(0.0), lows.append(0.0), highs.append(0.0)
                filled.append(False)
            elif point in diffs.index:
                row = diffs.loc[point]
                xs.append(value), deltas.append(row["delta"])
                lows.append(row["delta_ci_low"]), highs.append(row["delta_ci_high"])
                filled.append(bool(row["significant"]))
        dax.plot(xs, deltas, color=colour, linewidth=1.2)
        dax.fill_between(xs, lows, highs, alpha=0.2, color=colour, linewidth=0)
        for xv, dv, f in zip(xs, deltas, filled):
            dax.plot([xv], [dv], marker="o", color=colour,
                     markerfacecolor=colour if f else "white")
    ref_row = table[table["point"] == ref_point].iloc[0]
    ref_name = point_label(table, ref_point)
    ax.plot([ref_row[column]], [ref_row[measure]], marker="*", markersize=12, color="black",
            linestyle="none", label=f"reference: {ref_name}")
    relevance = measure.split("@")[0] not in LOWER_IS_BETTER
    if relevance:
        ax.set_ylim(0.0, 1.0)  # the measure's full range: no truncated axis to exaggerate
    else:
        ax.set_ylim(bottom=0.0)
    dax.axhline(0.0, color="black", linewidth=0.8)
    low, high = dax.get_ylim()
    if high - low < 1e-9:  # every difference zero: a readable axis around it
        dax.set_ylim(-0.05, 0.05)
    dax.plot([], [], marker="o", color="grey", linestyle="none",
             label=f"significant ({comparisons.correction}, p<0.05)")
    dax.plot([], [], marker="o", color="grey", markerfacecolor="white", linestyle="none",
             label="not significant")
    ax.set_ylabel(f"{measure} (mean, 95% CI)")
    dax.set_ylabel(f"Δ {measure} vs {_wrap(ref_name)}")
    dax.set_xlabel(parameter)
    name = dataset if dataset is not None else (sweep.dataset or "trace")
    n = int(table["n"].max()) if "n" in table else int(table["queries"].max()) \
        if "queries" in table else int(sweep.per_query["qid"].nunique())
    ax.set_title(f"{measure} against {parameter}: {name}, n={n} queries")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    dax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig
