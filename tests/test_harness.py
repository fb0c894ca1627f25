"""The research harness (SPEC §7): traces, replay, measures, experiments, counterfactuals,
sweeps, router analysis, plots, manifests and Parquet."""

import dataclasses
import json
import math

import numpy as np
import pandas as pd
import pytest
from matplotlib.figure import Figure

from memlab.datasets import fixture_trace, load_fixture
from memlab.harness import (Experiment, ReplayError, ReplayResult, Trace, TraceBuilder,
                            TraceFormatError, parse_measure, replay, rescore, router_regret,
                            sweep)
from memlab.harness.measures import evaluate, parse_measures
from memlab.harness.plots import (plot_measure_vs_parameter, plot_score_breakdown,
                                  plot_stage_latency, plot_strategy_mix)
from memlab.surfacing.config import DEFAULT as TIMED_DEFAULT
from memlab.surfacing.config import SEED_COMPAT

# DEFAULT's graph stages stop at a wall-clock budget (PPR 200 ms, spreading 150 ms); a loaded
# machine could cut one replay and not another. Tests that compare runs use the same recipe
# with the time budgets off, so no assertion here depends on wall-clock time.
DEFAULT = TIMED_DEFAULT.replace(
    ppr=dataclasses.replace(TIMED_DEFAULT.ppr, budget_ms=None),
    spreading=dataclasses.replace(TIMED_DEFAULT.spreading, budget_ms=None))


@pytest.fixture(scope="module")
def apollo():
    return fixture_trace(load_fixture("apollo_demo"))


@pytest.fixture(scope="module")
def live(apollo):
    return replay(apollo, DEFAULT, k=10)


def latency_free(frame: pd.DataFrame) -> pd.DataFrame:
    return frame.drop(columns=[c for c in frame.columns if c.endswith("_ms")
                               or c.endswith("_over_budget")])


# ---------------------------------------------------------------------------- traces
def test_trace_round_trips_through_json_lines(apollo, tmp_path):
    path = apollo.write_jsonl(tmp_path / "apollo.jsonl")
    again = Trace.read_jsonl(path)
    assert again.hash() == apollo.hash() and len(again) == len(apollo)
    assert [e.to_dict() for e in again] == [e.to_dict() for e in apollo]


@pytest.mark.parametrize("line, message", [
    ("not json", "line 3: not valid JSON"),
    ('{"type": "teleport"}', "line 3: field 'type' must be one of"),
    ('{"type": "add"}', "line 3: add event is missing field 'content'"),
    ('{"type": "add", "content": 5}', "line 3: field 'content' of a add event is invalid"),
    ('{"type": "add", "content": "x", "colour": "red"}', "line 3: add event has unknown field "
                                                          "'colour'"),
    ('{"type": "query", "qid": "q1", "query": "x", "k": 0}', "line 3: field 'k'"),
    ('{"type": "query", "qid": "q1", "query": "x", "gold": [1]}', "line 3: field 'gold'"),
    ('{"type": "add", "content": "x", "ts": "2023-01-01T00:00:00+00:00"}',
     "line 3: field 'ts' goes back in time"),
    ('{"type": "add", "content": "x", "ts": "2024-01-02"}', "line 3: field 'ts' must be"),
    ('{"type": "query", "qid": "q0", "query": "again"}', "line 3: field 'qid' repeats"),
])
def test_malformed_lines_are_rejected_with_line_and_field(line, message):
    header = ('{"type": "header", "format": "memlab-trace", "version": 1, "name": "t", '
              '"start": "2024-01-01T00:00:00+00:00"}')
    first = '{"type": "query", "qid": "q0", "query": "first", "ts": "2024-01-01T00:00:00+00:00"}'
    with pytest.raises(TraceFormatError) as err:
        Trace.from_jsonl("\n".join([header, first, line]))
    assert message in str(err.value)


def test_header_version_and_format_are_checked():
    with pytest.raises(TraceFormatError, match="line 1: field 'version' 2 is not supported"):
        Trace.from_jsonl('{"type": "header", "format": "memlab-trace", "version": 2}')
    with pytest.raises(TraceFormatError, match="line 1: field 'type' of the first line"):
        Trace.from_jsonl('{"type": "add", "content": "x"}')


def test_replay_names_the_event_memory_refused():
    trace = TraceBuilder("t").add("alpha", item_id="a").edge("a", "ghost").build()
    with pytest.raises(ReplayError, match=r"event 1 \(line 3, add_edge\).*'ghost'"):
        replay(trace)


# ---------------------------------------------------------------------------- replay
def test_replay_frames_have_the_contracted_columns(live, apollo):
    d, c, m = live.decisions, live.candidates, live.metrics
    assert len(d) == len(apollo.queries) and d["qid"].is_unique
    assert {"qid", "strategy_used", "confidence", "total_ms", "route_ms", "tokens_used",
            "reasons", "signals", "gold"} <= set(d.columns)
    assert {"qid", "item_id", "rank", "surfaced", "drop_reason", "gold", "relevance", "recency",
            "activation", "centrality", "score", "term_base"} <= set(c.columns)
    assert c["surfaced"].dtype == bool and set(c["drop_reason"].dropna()) <= {
        "k_cut", "budget_cut", "outside_window"}
    assert set(m.columns) == {"qid", "measure", "value"}
    assert m["value"].between(0, 1).all()
    multi = d[d["strategy_used"] == "deep:multi-hop"]
    assert {"ppr_method", "ppr_cache_hit", "ppr_saturated", "spread_budget_ms",
            "ppr_over_budget"} <= set(multi.columns)
    gold_rows = c[c["gold"] > 0]
    assert set(gold_rows["qid"]) <= set(d["qid"])
    manifest = live.manifest
    assert manifest["trace"]["hash"] == apollo.hash() and manifest["config"]["name"] == "default"
    assert {"memlab", "python", "numpy", "pandas"} <= set(manifest["versions"])


def test_replay_is_deterministic(apollo, live):
    again = replay(apollo, DEFAULT, k=10)
    for name in ("decisions", "candidates", "metrics"):
        pd.testing.assert_frame_equal(latency_free(getattr(live, name)),
                                      latency_free(getattr(again, name)))
    assert again.manifest == live.manifest


def test_save_and_load_are_lossless(live, tmp_path):
    live.save(tmp_path / "run")
    back = ReplayResult.load(tmp_path / "run")
    for name in ("decisions", "candidates", "metrics", "log"):
        pd.testing.assert_frame_equal(getattr(back, name), getattr(live, name),
                                      check_dtype=False)
    assert back.manifest == json.loads(json.dumps(live.manifest))
    with pytest.raises(ValueError, match="no saved result"):
        ReplayResult.load(tmp_path)


def test_replay_runs_the_other_event_types():
    trace = (TraceBuilder("ops", start="2024-01-01T00:00:00+00:00")
             .add("alpha service owns billing", item_id="a").add("beta", item_id="b")
             .pin("s1", "b").cache_set("k", "cached").cache_peek("k").resolve("s1", "k")
             .promote("s1", "billing owner", "alpha team").resolve("s2", "billing owner")
             .ingest("new_topic", title="Billing", fields={"owner": "alpha"})
             .anchor("s1", "Goal: ship billing", item_id="goal").advance(hours=2)
             .maintenance(dry_run=True).unpin("s1", "b")
             .query("q1", "billing owner", session_id="s1", gold=["a"]).build())
    result = replay(trace)
    log = result.log.set_index("type")["outcome"]
    assert log["cache_peek"] == {"hit": True, "value": "cached", "index": 0}
    resolves = result.log[result.log["type"] == "resolve"]["outcome"].tolist()
    assert [r["source"] for r in resolves] == ["short_term", "long_term"]
    assert log["ingest"]["version_ids"][0].endswith("/owner@1")
    assert result.decisions.loc[0, "now"] == "2024-01-01T02:00:00+00:00"
    surfaced = result.candidates[result.candidates["surfaced"]]["item_id"].tolist()
    assert surfaced[0] == "goal" and "b" not in surfaced   # anchor first; unpinned


def test_progress_bar_does_not_change_results(apollo, live, capsys):
    shown = replay(apollo, DEFAULT, k=10, progress=True)
    pd.testing.assert_frame_equal(latency_free(shown.metrics), latency_free(live.metrics))


# ---------------------------------------------------------------------------- measures
def test_measures_equal_hand_computed_values():
    ranking = ["x", "a", "y", "b", "z"]
    gold = {"a": 1, "b": 2, "c": 1}
    values = evaluate(parse_measures(["R@2", "R@5", "P@2", "P@5", "MRR", "MRR@1", "Hit@1",
                                      "Hit@2", "nDCG@5"]), ranking, gold)
    dcg = 1 / math.log2(3) + 2 / math.log2(5)
    idcg = 2 / math.log2(2) + 1 / math.log2(3) + 1 / math.log2(4)
    assert values == pytest.approx({"R@2": 1 / 3, "R@5": 2 / 3, "P@2": 0.5, "P@5": 0.4,
                                    "MRR": 0.5, "MRR@1": 0.0, "Hit@1": 0.0, "Hit@2": 1.0,
                                    "nDCG@5": dcg / idcg})
    assert evaluate(parse_measures(["R@5", "Tokens"]), ranking, {}, tokens=42) == {"Tokens": 42}
    for bad in ("R", "nDCG@0", "Tokens@5", "recall@5", "", None, "__import__('os')"):
        with pytest.raises(ValueError, match="measure"):
            parse_measure(bad)
    assert str(parse_measure("nDCG@10")) == "nDCG@10"


def test_measures_agree_with_ir_measures_on_a_replay(live):
    ir_measures = pytest.importorskip("ir_measures")
    from ir_measures import RR, P, R, Success, nDCG

    qrels, run = {}, {}
    for row in live.decisions.itertuples():
        if row.gold:
            qrels[row.qid] = {k: int(v) for k, v in row.gold.items()}
    # the replay measures the retrieved ranking: surfaced items without anchors and pins
    assert live.manifest["measure_on"] == "retrieved"
    shown = live.candidates[live.candidates["surfaced"] & ~live.candidates["mandatory"]]
    for qid, group in shown.groupby("qid"):
        ranked = group.sort_values("rank")["item_id"].tolist()
        run[qid] = {item: float(len(ranked) - pos) for pos, item in enumerate(ranked)}
    theirs = {(m.query_id, str(m.measure)): m.value for m in ir_measures.iter_calc(
        [R @ 2, R @ 5, P @ 5, nDCG @ 10, RR, Success @ 5], qrels, run)}
    ours = rescore(live, measures=["R@2", "R@5", "P@5", "nDCG@10", "MRR", "Hit@5"]).metrics
    names = {"MRR": "RR", "Hit@5": "Success@5"}
    compared = 0
    for row in ours.itertuples():
        key = (row.qid, names.get(row.measure, row.measure))
        if key in theirs:
            assert row.value == pytest.approx(theirs[key], abs=1e-9), key
            compared += 1
    assert compared == 6 * len(qrels)


# ---------------------------------------------------------------------------- experiments
def test_experiment_table_and_statistics(apollo):
    out = Experiment(apollo, {"seed": ("legacy", SEED_COMPAT), "same": ("legacy", SEED_COMPAT),
                              "memlab": ("router", DEFAULT)}, ["R@5", "MRR", "Latency"],
                     baseline="seed", k=10)
    table = out.table.set_index("name")
    assert list(table.index) == ["seed", "same", "memlab"]
    for name in table.index:
        assert table.loc[name, "R@5 ci_low"] <= table.loc[name, "R@5"] <= \
            table.loc[name, "R@5 ci_high"]
    assert table.loc["same", "R@5 p_ttest"] == 1.0 and table.loc["same", "R@5 p_wilcoxon"] == 1.0
    assert table.loc["same", "R@5 delta"] == 0.0
    assert 0 <= table.loc["memlab", "MRR p_wilcoxon"] <= 1
    assert "Latency p95" in table.columns and "R@5 p_ttest" not in table.loc[["seed"]].dropna(
        axis=1).columns
    assert set(out.per_query.columns) == {"name", "qid", "measure", "value"}
    with pytest.raises(ValueError, match="baseline"):
        Experiment(apollo, {"a": "default"}, ["MRR"], baseline="zzz")


# ---------------------------------------------------------------------------- counterfactual
def test_unchanged_weights_reproduce_the_live_ranking_exactly(live):
    same = rescore(live)
    pd.testing.assert_frame_equal(same.candidates, live.candidates)
    pd.testing.assert_frame_equal(same.metrics, live.metrics)
    assert same.decisions["tokens_used"].tolist() == live.decisions["tokens_used"].tolist()


def test_new_weights_match_a_fresh_replay_with_those_weights(apollo, live):
    changes = {"centrality_weight": 2.0, "freshness_weight": 0.0, "anchor_boost": 0.1}
    counterfactual = rescore(live, changes)
    fresh = replay(apollo, DEFAULT.replace(**changes), k=10)
    cols = ["qid", "item_id", "rank", "surfaced", "drop_reason", "score"]
    pd.testing.assert_frame_equal(counterfactual.candidates[cols], fresh.candidates[cols])
    pd.testing.assert_frame_equal(counterfactual.metrics, fresh.metrics)
    with pytest.raises(ValueError, match="change the candidates themselves"):
        rescore(live, {"recency_tau_h": 5})


# ---------------------------------------------------------------------------- sweeps
def test_sweep_grid_and_nested_fields(apollo):
    out = sweep(apollo, {"centrality_weight": [0.0, 1.0], "ppr.alpha": [0.5, 0.85]},
                measures=["MRR"], k=10, base=DEFAULT)
    assert out.table[["cfg_centrality_weight", "cfg_ppr.alpha"]].values.tolist() == [
        [0.0, 0.5], [0.0, 0.85], [1.0, 0.5], [1.0, 0.85]]
    quick = sweep(apollo, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"], k=10,
                  counterfactual=True, base=DEFAULT)
    slow = sweep(apollo, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"], k=10,
                 base=DEFAULT)
    pd.testing.assert_frame_equal(quick.table, slow.table)
    with pytest.raises(ValueError, match="grid"):
        sweep(apollo, {})
    with pytest.raises(ValueError, match="executor"):
        sweep(apollo, {"centrality_weight": [1.0]}, executor="cloud")
    from memlab.harness.sweep import apply_point
    from memlab.signals.dense import DenseConfig
    hybrid = DEFAULT.replace(dense=DenseConfig(embedder="hashing", cache_dir=""))
    assert apply_point(hybrid, {"dense.weight": 0.7}).dense.weight == 0.7
    with pytest.raises(ValueError, match="'dense.weight' needs a configured dense stage in the "
                                         "base recipe 'default'"):
        apply_point(DEFAULT, {"dense.weight": 0.7})
    with pytest.raises(ValueError, match=r"'weights.foo': only ppr\.\*, spreading\.\* and "
                                         r"dense\.\* reach into"):
        apply_point(DEFAULT, {"weights.foo": 0.7})
    with pytest.raises(ValueError, match="sentence_weight must be in"):
        apply_point(hybrid, {"dense.sentence_weight": 2.0})


def test_sweeps_give_the_same_results_on_processes_and_on_a_dask_cluster(apollo):
    pytest.importorskip("distributed")
    grid = {"centrality_weight": [0.0, 2.0], "spreading.depth": [1, 2]}
    serial = sweep(apollo, grid, measures=["R@5", "MRR"], k=10, base=DEFAULT)
    local = sweep(apollo, grid, measures=["R@5", "MRR"], k=10, executor="local", base=DEFAULT)
    dask = sweep(apollo, grid, measures=["R@5", "MRR"], k=10, executor="dask", n_workers=2,
                 base=DEFAULT)
    pd.testing.assert_frame_equal(serial.table, local.table)
    pd.testing.assert_frame_equal(serial.table, dask.table)
    pd.testing.assert_frame_equal(serial.per_query, dask.per_query)


# ---------------------------------------------------------------------------- analysis, plots
def test_router_regret_per_query(apollo):
    frame = router_regret(apollo, measure="MRR", k=10)
    assert set(frame["qid"]) == {q.get("qid") for q in apollo.queries}
    assert (frame["regret"] >= 0).all()
    assert (frame["best_value"] == frame[[c for c in frame if c.startswith("value_")]]
            .max(axis=1)).all()
    chosen_col = frame.apply(lambda r: r[f"value_{r['chosen']}"], axis=1)
    assert np.allclose(chosen_col, frame["chosen_value"])


def test_plots_return_labelled_figures(live, apollo):
    fig = plot_score_breakdown(live, "q1")
    ax = fig.axes[0]
    assert isinstance(fig, Figure) and ax.get_xlabel().startswith("score")
    assert ax.get_title().startswith("q1:") and ax.get_legend() is not None
    assert any("★" in t.get_text() for t in ax.get_yticklabels())
    fig = plot_stage_latency(live)
    assert fig.axes[0].get_xlabel().startswith("ms") and \
        [t.get_text() for t in fig.axes[0].get_legend().texts][:3] == ["p50", "p95", "p99"]
    fig = plot_strategy_mix({"memlab": live})
    assert fig.axes[0].get_title() == "strategy mix (memlab: n=7)"
    out = sweep(apollo, {"centrality_weight": [0.0, 1.0, 2.0]}, measures=["MRR"], k=10,
                counterfactual=True)
    fig = plot_measure_vs_parameter(out, "centrality_weight", "MRR")
    assert fig.axes[1].get_xlabel() == "centrality_weight" and \
        fig.axes[0].get_ylabel().startswith("MRR")
    with pytest.raises(ValueError, match="qid"):
        plot_score_breakdown(live, "nope")
