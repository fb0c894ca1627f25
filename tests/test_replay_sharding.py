"""Issue 18, beyond one machine: ``replay(executor="dask")`` shards a trace by workspace; the
frames are the serial run's. The shard-and-merge logic is tested in process (default tier) and
on a real two-worker LocalCluster (slow tier)."""

from __future__ import annotations

import heapq
from dataclasses import replace
from datetime import datetime, timezone

import pandas as pd
import pytest

from _support import assert_one_line_error, cli

from memlab.datasets.synthetic import synthetic_trace
from memlab.harness import TraceBuilder, replay
from memlab.harness.replay import _merge_shards, _replay_shard, _shards, _split
from memlab.harness.trace import Event, Trace
from memlab.surfacing.config import DEFAULT

START = datetime(2024, 1, 1, tzinfo=timezone.utc)
MEASURES = ["R@5", "MRR", "nDCG@10"]
# no wall-clock budgets: a loaded machine must not cut a graph search in one run and not in the
# other (what would make two serial runs differ too)
UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


def multi_workspace_trace(n_workspaces: int = 3, items: int = 150, queries: int = 12) -> Trace:
    """Seeded synthetic traces, one per workspace, interleaved in time; plus per-workspace
    anchors and pins, a maintenance event (a log row) and a global clock step."""
    streams = []
    for w in range(n_workspaces):
        part = synthetic_trace(items, queries, seed=w)
        at, stream = START, []
        for order, event in enumerate(part.events):
            at = event.ts or at
            fields = {**event.fields, "workspace_id": f"ws{w}"}
            if event.type == "query":
                fields["qid"] = f"ws{w}-{fields['qid']}"
                fields["gold"] = fields.get("gold") or []
            stream.append((at, w, order, Event(event.type, fields, event.ts)))
        streams.append(stream)
    events = [e for _, _, _, e in heapq.merge(*streams)]
    last = max(e.ts for e in events if e.ts is not None)
    extra = TraceBuilder("extra", start=last)
    for w in range(n_workspaces):
        extra.in_workspace(f"ws{w}").anchor("s1", f"goal of workspace {w}", ts=last)
        extra.pin(f"p{w}", "s3", ts=last)  # a pin session belongs to one workspace
        extra.query(f"late-{w}", "latest news", gold=["s3"], session_id=f"p{w}", ts=last)
    extra.in_workspace("ws1").maintenance(dry_run=True, ts=last)
    extra.in_workspace(None).advance(hours=5)
    extra.in_workspace("ws2").query("after-clock", "steps to deploy", gold=["s1"])
    return Trace(events + extra.build().events, name="multi", start=START)


def comparable(result):
    decisions = result.decisions.drop(columns=[c for c in result.decisions.columns
                                               if c.endswith("_ms")])
    metrics = result.metrics[result.metrics.measure.isin(MEASURES)].reset_index(drop=True)
    return decisions, result.candidates, metrics, result.log


def settings():
    return (UNTIMED, "router", 10, 0, MEASURES, True, None, "porter", "retrieved")


def test_shards_merge_back_into_the_serial_frames():
    trace = multi_workspace_trace()
    serial = replay(trace, UNTIMED, k=10, measures=MEASURES, progress=False)
    shards = _shards(trace, n_workers=2)
    assert sorted(sorted(s) for s in shards) == [["ws0", "ws1"], ["ws2"]]  # ws2: one more query
    merged = _merge_shards([_replay_shard(part, settings()) for part in _split(trace, shards)])
    assert [row["qid"] for row in merged["decisions"]] == serial.decisions["qid"].tolist()
    pd.testing.assert_frame_equal(merged["candidates"], serial.candidates)
    pd.testing.assert_frame_equal(merged["metrics"], serial.metrics)
    assert [row["event"] for row in merged["log"]] == serial.log["event"].tolist() and \
        len(merged["log"]) == 1
    assert merged["unjudged"] == serial.manifest["unjudged_queries"]
    assert serial.decisions["workspace_id"].nunique() == 3


def test_workspaces_that_share_a_cache_or_a_pin_session_are_not_sharded():
    builder = TraceBuilder("t", start=START)
    builder.in_workspace("a").add("alpha", item_id="x").cache_set("k", "v")
    builder.in_workspace("b").add("beta", item_id="y")
    assert len(_shards(builder.build(), 2)) == 2
    builder.cache_peek("k")  # the default cache, now used from two workspaces
    assert _shards(builder.build(), 2) == [frozenset({"a", "b"})]
    pins = TraceBuilder("t", start=START)
    pins.in_workspace("a").add("alpha", item_id="x").pin("s", "x")
    pins.in_workspace("b").add("beta", item_id="y").pin("s", "y")
    assert _shards(pins.build(), 2) == [frozenset({"a", "b"})]


@pytest.mark.parametrize("kwargs, match", [({"executor": "spark"}, "executor"),
                                           ({"executor": "dask", "n_workers": 0}, "n_workers"),
                                           ({"address": "tcp://x:1"}, "address")])
def test_replay_validates_the_executor(kwargs, match):
    trace = TraceBuilder("t", start=START).add("a").build()
    with pytest.raises(ValueError, match=match):
        replay(trace, **kwargs)


def test_one_workspace_runs_serially_whatever_the_executor():
    trace = synthetic_trace(50, 3, seed=1)
    result = replay(trace, executor="dask", progress=False)  # nothing to shard: no cluster
    assert result.manifest["executor"] == "serial"


@pytest.mark.slow
def test_a_sharded_replay_on_a_two_worker_cluster_equals_the_serial_one():
    pytest.importorskip("distributed")
    trace = multi_workspace_trace()
    serial = replay(trace, UNTIMED, k=10, measures=MEASURES, progress=False)
    sharded = replay(trace, UNTIMED, k=10, measures=MEASURES, executor="dask", n_workers=2)
    assert sharded.manifest["executor"] == "dask (2 shards by workspace)"
    for got, want in zip(comparable(sharded), comparable(serial)):
        pd.testing.assert_frame_equal(got, want)
    assert {k: v for k, v in sharded.manifest.items() if k != "executor"} == \
        {k: v for k, v in serial.manifest.items() if k != "executor"}


@pytest.mark.slow
def test_an_experiment_shards_its_replays_on_one_cluster():
    pytest.importorskip("distributed")
    from memlab.harness import Experiment

    trace = multi_workspace_trace(items=80, queries=6)
    configs = {"memlab": UNTIMED, "bm25": "bm25"}
    serial = Experiment(trace, configs, MEASURES, k=10, n_boot=200)
    sharded = Experiment(trace, configs, MEASURES, k=10, n_boot=200, executor="dask",
                         n_workers=2)
    pd.testing.assert_frame_equal(serial.table, sharded.table)
    pd.testing.assert_frame_equal(serial.per_query, sharded.per_query)


def test_experiment_and_eval_validate_the_executor(tmp_path):
    from memlab.evaluation import run_eval
    from memlab.harness import Experiment

    trace = TraceBuilder("t", start=START).add("a").query("q", "a").build()
    with pytest.raises(ValueError, match="executor"):
        Experiment(trace, {"memlab": "default"}, ["MRR"], executor="ray")
    with pytest.raises(ValueError, match="executor"):
        run_eval(tmp_path, executor="ray", datasets=())


@pytest.mark.parametrize("args, fragment", [
    (["--address", "tcp://x:1"], "--address 'tcp://x:1' needs --executor dask"),
    (["--executor", "dask", "--workers", "0"], "--workers must be at least 1, got 0"),
])
def test_cli_eval_executor_bad_input_is_one_line(data_root, tmp_path, capsys, args, fragment):
    code, lines = cli(capsys, "eval", "--data", str(data_root), "--out", str(tmp_path / "o"),
                      *args)
    assert_one_line_error(code, lines, "eval", fragment)


@pytest.mark.slow
def test_memlab_eval_on_dask_writes_the_serial_results(data_root, tmp_path, capsys):
    pytest.importorskip("distributed")
    for name, extra in (("serial", []), ("dask", ["--executor", "dask", "--workers", "2"])):
        code, err = cli(capsys, "eval", "--data", str(data_root), "--out", str(tmp_path / name),
                        *extra)
        assert code == 0, err
    serial, dask = (pd.read_csv(tmp_path / name / "results.csv").drop(columns="seconds")
                    for name in ("serial", "dask"))
    pd.testing.assert_frame_equal(serial, dask)
