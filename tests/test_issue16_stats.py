"""Issue 16: statistics a reviewer accepts (paired comparisons, Holm / Benjamini–Hochberg named
in the table, paired-bootstrap effect sizes, small-n warnings, subsets, paper tables) and rich
display."""

import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import stats as scipy_stats

from memlab import DEFAULT
from memlab.harness import Experiment, replay, run_experiment, sweep
from memlab.harness.stats import (SmallSampleWarning, adjust_pvalues, benjamini_hochberg,
                                  compare_paired, holm, paired_bootstrap_ci, paired_test,
                                  query_metadata, select_queries)
from memlab.harness.trace import TraceBuilder


# ---------------------------------------------------------------------------- corrections

def test_holm_matches_the_step_down_rule_by_hand():
    # sorted p: 0.001 (x4), 0.01 (x3), 0.02 (x2), 0.04 (x1); monotone; original order kept
    assert holm([0.04, 0.001, 0.02, 0.01]).tolist() == pytest.approx([0.04, 0.004, 0.04, 0.03])
    assert holm([0.5, 0.6]).tolist() == [1.0, 1.0]  # capped at 1
    adjusted = holm([0.01, math.nan, 0.02])
    assert adjusted[0] == pytest.approx(0.02) and math.isnan(adjusted[1])  # NaN not counted
    assert adjusted[2] == pytest.approx(0.02)


def test_benjamini_hochberg_is_scipys():
    p = [0.04, 0.001, 0.02, 0.01, 0.3]
    assert benjamini_hochberg(p).tolist() == pytest.approx(
        scipy_stats.false_discovery_control(p, method="bh").tolist())
    assert benjamini_hochberg(p).tolist() == pytest.approx([0.05, 0.005, 0.1 / 3, 0.025, 0.3])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30))
def test_holm_bounds_and_order(p):
    p = np.array(p)
    h, b = holm(p), benjamini_hochberg(p)
    assert np.all(h >= p - 1e-12) and np.all(h <= 1.0)
    assert np.all(h >= b - 1e-12)          # FWER control is the more conservative
    assert np.all(h <= np.minimum(1.0, p * len(p)) + 1e-12)  # never worse than Bonferroni
    order = np.argsort(p, kind="stable")
    assert np.all(np.diff(h[order]) >= -1e-12)  # monotone in the raw p-values


def test_adjust_pvalues_names_a_bad_correction():
    with pytest.raises(ValueError, match="correction must be one of .*'bonferroni'"):
        adjust_pvalues([0.1], "bonferroni")
    assert adjust_pvalues([0.1, 0.2], "none").tolist() == [0.1, 0.2]


# ---------------------------------------------------------------------------- tests, intervals

def test_paired_bootstrap_interval_is_seeded_and_pairs_resampled_together():
    a = np.array([0.9, 0.8, 0.7, 0.9, 1.0, 0.6, 0.8, 0.9])
    b = a - 0.1  # a constant difference: every resample has mean 0.1
    assert paired_bootstrap_ci(a, b, seed=3) == pytest.approx((0.1, 0.1))
    rng = np.random.default_rng(0)
    x, y = rng.random(40), rng.random(40)
    assert paired_bootstrap_ci(x, y, seed=1) == paired_bootstrap_ci(x, y, seed=1)
    low, high = paired_bootstrap_ci(x, y, seed=1)
    assert low < (x - y).mean() < high
    with pytest.raises(ValueError, match="paired"):
        paired_bootstrap_ci([1, 2], [1])


def test_wilcoxon_warns_below_six_nonzero_differences():
    p, warning = paired_test([1, 1, 1, 1, 1, 0], [0, 0, 0, 0, 0, 0], "wilcoxon")
    assert p == pytest.approx(0.0625) and warning == \
        "Wilcoxon signed-rank needs >= 6 non-zero differences, got 5"
    p, warning = paired_test([1] * 6, [0] * 6, "wilcoxon")
    assert p == pytest.approx(0.03125) and warning is None
    p, warning = paired_test([1.0, 2.0], [0.5, 1.0], "ttest")
    assert warning == "paired t-test needs >= 3 pairs, got 2"
    assert paired_test([1, 2, 3, 4], [0, 1, 2, 2.5], "ttest")[0] == pytest.approx(
        scipy_stats.ttest_rel([1, 2, 3, 4], [0, 1, 2, 2.5]).pvalue)


def long_frame(values: dict[str, list[float]], measure: str = "MRR") -> pd.DataFrame:
    rows = [{"name": name, "qid": f"q{i}", "measure": measure, "value": v}
            for name, vals in values.items() for i, v in enumerate(vals)]
    return pd.DataFrame(rows)


def test_compare_against_best_and_named_reference_with_corrections():
    rng = np.random.default_rng(7)
    base = rng.random(30)
    frame = long_frame({"a": base, "b": np.clip(base + 0.2, 0, 1), "c": base + 0.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # n is large enough: no warning
        table = compare_paired(frame, key="name", measures=["MRR"], seed=1)
    assert table.correction == "holm" and set(table.table["correction"]) == {"holm"}
    assert list(table.table["reference"]) == ["b", "b"]  # the best mean
    rows = table.table.set_index("name")
    expected_p = [scipy_stats.wilcoxon(frame[frame.name == n].value.to_numpy(),
                                       frame[frame.name == "b"].value.to_numpy()).pvalue
                  for n in ("a", "c")]
    assert rows["p"].tolist() == pytest.approx(expected_p)
    assert rows["p_adjusted"].tolist() == pytest.approx(holm(expected_p).tolist())
    assert rows.loc["a", "delta"] == pytest.approx(-(np.clip(base + 0.2, 0, 1) - base).mean())
    assert rows.loc["a", "delta_ci_low"] <= rows.loc["a", "delta"] <= rows.loc["a",
                                                                             "delta_ci_high"]
    assert rows["significant"].all() and rows.loc["a", "mark"] == "▼***"  # a is below b
    named = compare_paired(frame, key="name", measures=["MRR"], reference="a",
                           correction="bh", test="ttest")
    assert list(named.table["reference"]) == ["a", "a"] and named.test == "ttest"
    assert "Benjamini–Hochberg" in named.to_markdown() and "paired t-test" in named.to_markdown()
    with pytest.raises(ValueError, match="reference must be 'best' or one of"):
        compare_paired(frame, key="name", measures=["MRR"], reference="zzz")


def test_small_n_is_marked_in_the_table_and_warned(capsys):
    frame = long_frame({"a": [0.0, 1.0, 0.5], "b": [1.0, 1.0, 1.0]})
    with pytest.warns(SmallSampleWarning, match="needs >= 6 non-zero differences, got 2"):
        table = compare_paired(frame, key="name", measures=["MRR"], reference="a")
    assert table.table["mark"].tolist() == ["†"]
    assert "† fewer than 6 non-zero paired differences: Wilcoxon cannot reach p<0.05" in \
        table.to_markdown()
    assert r"$^\dagger$" in table.to_latex()


def test_latency_best_is_the_lowest():
    frame = long_frame({"fast": [1.0] * 8, "slow": [2.0 + i for i in range(8)]}, "Latency")
    table = compare_paired(frame, key="name", measures=["Latency"], warn=False)
    assert table.table["reference"].tolist() == ["fast"]


# ---------------------------------------------------------------------------- subsets

def categorised_trace():
    builder = TraceBuilder("cats", metadata={"dataset": "toy"})
    topics = ["jwt tokens auth", "redis cache node", "stripe payment retry", "kafka queue lag"]
    for i, topic in enumerate(topics):
        builder.add(f"notes about {topic} number {i}", item_id=f"i{i}")
    for i in range(12):
        builder.query(f"q{i}", topics[i % 4].split()[0], gold=[f"i{i % 4}"], category=i % 2 + 1)
    return builder.build()


def test_query_metadata_and_select():
    meta = query_metadata(categorised_trace())
    assert list(meta.columns) == ["qid", "category", "session_id", "workspace_id", "dataset"]
    assert set(meta["dataset"]) == {"toy"} and meta["category"].tolist()[:3] == [1, 2, 1]
    assert len(select_queries(meta, {"category": 1})) == 6
    assert len(select_queries(meta, {"category": ["1", "2"]})) == 12  # the CLI passes text
    with pytest.raises(ValueError, match="where names unknown query metadata 'colour'"):
        select_queries(meta, {"colour": 1})
    with pytest.raises(ValueError, match="selects no query"):
        select_queries(meta, {"category": 9})


def test_experiment_where_and_by_subsets():
    trace = categorised_trace()
    full = Experiment(trace, {"a": "default", "b": "bm25"}, ["MRR"])
    out = run_experiment(trace, {"a": "default", "b": "bm25"}, ["MRR"],
                         where={"category": 1}, by="category")
    assert out.where == {"category": 1} and out.table["queries"].tolist() == [6, 6]
    per = full.per_query[full.per_query["qid"].isin([f"q{i}" for i in range(0, 12, 2)])]
    assert out.table.set_index("name").loc["a", "MRR"] == pytest.approx(
        per[per["name"] == "a"]["value"].mean())
    assert out.subsets["subset"].unique().tolist() == ["category=1"]
    both = Experiment(trace, {"a": "default", "b": "bm25"}, ["MRR"], by="category")
    assert both.subsets["subset"].unique().tolist() == ["category=1", "category=2"]
    assert both.subsets.groupby("subset")["queries"].first().tolist() == [6, 6]
    assert both.comparisons.table["correction"].tolist() == ["holm"]
    with pytest.raises(ValueError, match="by must be one of"):
        Experiment(trace, {"a": "default"}, ["MRR"], by="nope")


def test_sweep_where_by_and_compare_reference():
    trace = categorised_trace()
    out = sweep(trace, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"], k=5,
                where={"category": [2]}, by="category")
    assert out.table["queries"].tolist() == [6, 6] and out.dataset == "toy"
    assert out.subsets["subset"].unique().tolist() == ["category=2"]
    table = out.compare({"centrality_weight": 1.0}, warn=False)
    assert table.table[["name", "reference"]].values.tolist() == [[0, 1]]
    with pytest.raises(ValueError, match="not a swept parameter"):
        out.compare({"alpha": 1.0})
    markdown = out.to_markdown(warn=False)
    assert markdown.splitlines()[0] == "| point | centrality_weight | MRR |"
    assert "Holm–Bonferroni" in markdown
    assert "\\toprule" in out.to_latex(warn=False)


# ---------------------------------------------------------------------------- tables, display

def test_experiment_markdown_and_latex_as_papers_print_them():
    trace = categorised_trace()
    out = Experiment(trace, {"a": "default", "b": "bm25"}, ["MRR", "R@1"])
    lines = out.to_markdown().splitlines()
    assert lines[0] == "| name | n | MRR | R@1 |"
    row = out.table.set_index("name").loc["a"]
    assert lines[2].startswith(f"| a | 12 | {row['MRR']:.3f} [{row['MRR ci_low']:.3f}, "
                               f"{row['MRR ci_high']:.3f}] |")
    assert "Holm–Bonferroni" in out.to_markdown() and "vs a" in out.to_markdown()
    latex = out.to_latex()
    assert latex.startswith("\\begin{table}") and "\\midrule" in latex and "Holm--Bonferroni" \
        in latex


def test_rich_display_of_results_and_config():
    trace = categorised_trace()
    result = replay(trace, "default", k=3)
    assert repr(result).startswith("ReplayResult(trace='cats', recipe='default', queries=12,")
    html = result._repr_html_()
    assert "<table" in html and "95% CI" in html and "MRR" in html
    out = Experiment(trace, {"a": "default", "b": "bm25"}, ["MRR"], by="category")
    assert repr(out).startswith("ExperimentResult(2 configurations, baseline='a'")
    html = out._repr_html_()
    assert "Paired comparisons" in html and "Per subset" in html and "category=2" in html
    swept = sweep(trace, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"], k=3)
    assert repr(swept) == ("SweepResult(2 points over ['centrality_weight'], "
                           "executor='serial', measures=['MRR'])")
    assert "<table" in swept._repr_html_()
    config = DEFAULT.replace(name="mine", centrality_weight=0.25)
    assert repr(config) == ("SurfacingConfig('mine', vs DEFAULT: centrality_weight=0.25, "
                            "name='mine')")
    assert repr(DEFAULT) == "SurfacingConfig('default', = DEFAULT)"
    html = config._repr_html_()
    assert "2 field(s) differ from <code>DEFAULT</code>" in html and "0.25" in html


def test_context_record_display_shows_items_bars_and_drop_reasons():
    from memlab import Memory
    memory = Memory()
    for i in range(6):
        memory.add(f"jwt token note {i}")
    memory.get_working_context("s1", "jwt token", k=2)
    record = memory.last_context_record
    assert repr(record).startswith("ContextRecord('jwt token', strategy=")
    html = record._repr_html_()
    assert html.count("✓") == len(record.surfaced_ids) and "k_cut" in html
    assert "background:#0072B2" in html and "background:#BBBBBB" in html
