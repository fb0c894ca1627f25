"""Issue 16: every plot helper's figure is checked, not just run: the written PNG's size, its
pixels (not blank, the memlab palette present), and its title, labels and legend."""

import copy
import io

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from matplotlib.figure import Figure
from matplotlib.image import imread

from memlab.datasets import fixture_trace, load_fixture
from memlab.harness import replay, sweep
from memlab.harness.plots import (NESTED_STAGES, PALETTE, STYLE, item_labels,
                                  plot_measure_vs_parameter, plot_score_breakdown,
                                  plot_stage_latency, plot_strategy_mix)
from memlab.harness.trace import TraceBuilder


@pytest.fixture(scope="module")
def apollo():
    return fixture_trace(load_fixture("apollo_demo"))


@pytest.fixture(scope="module")
def live(apollo):
    return replay(apollo, k=5)


@pytest.fixture(scope="module")
def swept(apollo):
    return sweep(apollo, {"centrality_weight": [0.0, 0.5, 1.0, 2.0]}, measures=["MRR", "R@2"],
                 k=10, counterfactual=True)


def written_png(fig: Figure, tmp_path) -> np.ndarray:
    """Save as a user would (plain ``savefig``) and read the file back as RGB pixels."""
    path = tmp_path / "figure.png"
    fig.savefig(path)
    raw = path.read_bytes()
    assert raw.startswith(b"\x89PNG\r\n\x1a\n")
    return imread(io.BytesIO(raw), format="png")[..., :3]


def check_pixels(pixels: np.ndarray, fig: Figure) -> None:
    """150 dpi, not blank (ink on more than 3% of the canvas, many colours), palette present."""
    width, height = fig.get_size_inches() * 150
    assert pixels.shape[:2] == (round(height), round(width))
    ink = np.any(pixels < 0.95, axis=-1).mean()
    assert ink > 0.03, ink
    assert len(np.unique(pixels.reshape(-1, 3).round(2), axis=0)) > 20
    blue = np.array(to_rgb(PALETTE[0]))
    assert (np.abs(pixels - blue).max(axis=-1) < 0.02).sum() > 50  # Okabe–Ito blue bars


def test_check_pixels_rejects_a_blank_figure(tmp_path):
    fig = Figure(figsize=(4, 3), dpi=150)
    fig.add_subplot()
    with pytest.raises(AssertionError):
        check_pixels(written_png(fig, tmp_path), fig)


def test_style_sheet_is_150_dpi_and_colour_blind_safe_palette():
    text = open(STYLE).read()
    assert "figure.dpi: 150" in text and "savefig.dpi: 150" in text
    assert "'0072B2', 'E69F00', '009E73', 'D55E00', 'CC79A7'" in text  # Okabe & Ito


def test_score_breakdown_png_title_labels_legend_and_cuts(live, apollo, tmp_path):
    fig = plot_score_breakdown(live, "q1", top=12, trace=apollo)
    check_pixels(written_png(fig, tmp_path), fig)
    ax = fig.axes[0]
    assert fig.dpi == 150
    assert ax.get_title() == "q1: “Why did we pick JWT?” (deep:multi-hop, k=5)"
    assert ax.get_xlabel() == "score (sum of composite terms)"
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    # labelled by content, not by item id (the anchor's generated id included)
    assert not any(t.startswith(("item-", "turn-", "★ turn-")) for t in ticks), ticks
    assert "[goal] Goal: ship Project Apollo checko…" in ticks
    assert "★ Decision: we picked JWT with 15 minute …" in ticks
    legend = [t.get_text() for t in ax.get_legend().texts]
    assert legend == ["base", "centrality", "anchor", "surfaced (solid)",
                      "not surfaced (faded)", "gold (★, bold)", "k cut"]
    # the surfaced / not surfaced swatches are drawn as the bars are (colour and alpha)
    handles = dict(zip(legend, ax.get_legend().legend_handles))
    bars = ax.patches
    for label, alpha in (("surfaced (solid)", 1.0), ("not surfaced (faded)", 0.3)):
        swatch = handles[label].get_facecolor()
        assert swatch[3] == pytest.approx(alpha)
        assert any(np.allclose(b.get_facecolor()[:3], swatch[:3]) and
                   (b.get_alpha() or 1.0) == pytest.approx(alpha) for b in bars)
    # the legend is outside the bars: its box starts right of the axes
    fig.canvas.draw()
    assert ax.get_legend().get_window_extent().x0 > ax.get_window_extent().x1
    # the k cut sits between the last surfaced row and the first dropped one
    (cut,) = [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
    rows = live.candidates[live.candidates["qid"] == "q1"].sort_values("rank").head(12)
    first_dropped = int(np.flatnonzero(rows["drop_reason"].to_numpy() == "k_cut")[0])
    assert cut == len(rows) - first_dropped - 0.5


def test_score_breakdown_marks_the_budget_cut():
    trace = (TraceBuilder("budget").add("alpha beta " * 30, item_id="long")
             .add("alpha beta gamma", item_id="short").add("alpha", item_id="tiny")
             .query("q1", "alpha beta", gold=["short"], max_tokens=8).build())
    result = replay(trace, "default", k=5)
    assert "budget_cut" in set(result.candidates["drop_reason"].dropna())
    fig = plot_score_breakdown(result, "q1", trace=trace)
    assert "budget cut" in [t.get_text() for t in fig.axes[0].get_legend().texts]
    assert fig.axes[0].get_title().endswith(", k=5, budget 8 tokens)")


def test_item_labels_follow_generated_ids_and_titles():
    trace = (TraceBuilder("t").add("first text", metadata={"title": "A title"})
             .add("second", item_id="item-000001").add("third text").build())
    labels = item_labels(trace)
    assert labels == {"item-000000": "A title", "item-000001": "second",
                      "item-000002": "third text"}
    # the same ids the store generates when the trace replays
    result = replay(trace, "default", k=5, measures=["Tokens"])
    assert set(result.candidates["item_id"]) <= set(labels) or result.candidates.empty


def test_stage_latency_png_nested_stages_title_and_log_axis(live, tmp_path):
    fig = plot_stage_latency(live)
    check_pixels(written_png(fig, tmp_path), fig)
    ax = fig.axes[0]
    assert ax.get_title().startswith("stage latency: default, 28 items, 7 queries\nstrategy: ")
    assert ax.get_xlabel() == "ms, percentiles over the queries that ran the stage"
    ticks = [t.get_text() for t in ax.get_yticklabels()]
    ran = {name: int(live.decisions[f"{name}_ms"].notna().sum())
           for name in NESTED_STAGES if f"{name}_ms" in live.decisions}
    assert {"spread", "ppr"} <= set(ran)
    for child, parent in NESTED_STAGES.items():
        if not ran.get(child):
            continue
        parent_at = next(i for i, t in enumerate(ticks) if t.startswith(parent + " "))
        # drawn nested: in the block right under its parent, its n the queries that ran it
        block = []
        for tick in ticks[parent_at + 1:]:
            if not tick.startswith("└ "):
                break
            block.append(tick)
        assert f"└ {child} (in {parent}, n={ran[child]})" in block
    # pipeline order: a phase subtotal where its stages ran (after retrieval, before the budget)
    at = {t.split(" ")[0]: i for i, t in enumerate(ticks)}
    assert at["bm25"] < at["strategy_expand"] < at["signals"] < at["strategy_adjust"] \
        < at["composite"] < at["budget"]
    # the deprecated alias keys (relevance = bm25, select = budget) are not drawn twice
    assert not any(t.startswith(("relevance ", "select ")) for t in ticks)
    # whatever order the frame's columns are in (a record lists a key when a query first ran it)
    shuffled = copy.copy(live)
    shuffled.decisions = live.decisions[live.decisions.columns[::-1]]
    assert [t.get_text() for t in plot_stage_latency(shuffled).axes[0].get_yticklabels()] == ticks
    assert ran["spread"] < len(live.decisions)
    values = [p.get_width() for p in ax.patches if p.get_width() > 0]
    assert ax.get_xscale() == ("log" if max(values) / min(values) > 100 else "linear")
    assert [t.get_text() for t in ax.get_legend().texts] == [
        "p50", "p95", "p99", "nested stage (time inside its parent)"]


def test_stage_latency_names_memory_size_and_validates(live):
    fig = plot_stage_latency(live, percentiles=(50,), memory_size=100_000)
    assert "100,000 items" in fig.axes[0].get_title()
    with pytest.raises(ValueError, match="percentiles"):
        plot_stage_latency(live, percentiles=(150,))


def test_measure_vs_parameter_png_title_range_legend_and_differences(swept, tmp_path):
    fig = plot_measure_vs_parameter(swept, "centrality_weight", "R@2", reference=0)
    check_pixels(written_png(fig, tmp_path), fig)
    ax, dax = fig.axes
    assert ax.get_title() == "R@2 against centrality_weight: apollo-demo, n=7 queries"
    assert ax.get_ylim() == (0.0, 1.0)  # the full range of the measure, no truncated axis
    assert ax.get_ylabel() == "R@2 (mean, 95% CI)" and dax.get_ylabel() == "Δ R@2 vs centrality_weight=0.0"
    assert dax.get_xlabel() == "centrality_weight"
    fig.canvas.draw()
    for axes in (ax, dax):  # legends outside the data
        assert axes.get_legend().get_window_extent().x0 > axes.get_window_extent().x1
    assert "reference: centrality_weight=0.0" in [t.get_text() for t in ax.get_legend().texts]
    # the lower panel plots the paired differences the comparison table holds
    table = swept.compare(0, measures=["R@2"], warn=False).table.set_index("name")
    line = dax.get_lines()[0]
    assert list(line.get_ydata()) == [0.0, *table.loc[[1, 2, 3], "delta"]]


def test_strategy_mix_png(live, tmp_path):
    fig = plot_strategy_mix({"memlab": live})
    check_pixels(written_png(fig, tmp_path), fig)
    assert fig.axes[0].get_title() == "strategy mix (memlab: n=7)"
    assert fig.axes[0].get_xlabel() == "strategy used"
