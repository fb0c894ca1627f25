"""Issue 18 (beyond one machine, round 4): shards balanced one per worker, the shards' frames
stitched back into the serial ones, the LongMemEval-shaped synthetic trace, and ``memlab
replay`` / ``memlab experiment`` on Dask. Real clusters run in the slow tier."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from _support import assert_one_line_error, cli

from memlab.datasets.synthetic import synthetic_longmemeval
from memlab.harness import replay
from memlab.harness.replay import (_balance, _merge_shards, _replay_shard, _shards, _split,
                                   _stitch)
from memlab.surfacing.config import DEFAULT

UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))
MEASURES = ["R@5", "MRR"]


def settings():
    return (UNTIMED, "router", 10, 0, MEASURES, True, None, "porter", "retrieved")


# ---------------------------------------------------------------- balancing
def test_balance_puts_every_workspace_in_one_group_and_finds_locomos_best_split():
    # LoCoMo's five conversations, in questions: LPT alone gives 564 / 435
    work = {"conv-42": 260, "conv-43": 242, "conv-41": 193, "conv-30": 154, "conv-26": 150}
    groups = _balance(work, 2)
    assert sorted(ws for g in groups for ws in g) == sorted(work)
    totals = sorted(sum(work[w] for w in g) for g in groups)
    assert totals == [497, 502]


@pytest.mark.parametrize("seed", range(5))
def test_balance_is_never_worse_than_lpt(seed):
    rng = np.random.default_rng(seed)
    work = {f"w{i}": int(v) for i, v in enumerate(rng.integers(1, 100, size=23))}
    groups = _balance(work, 3)
    assert sorted(ws for g in groups for ws in g) == sorted(work)
    lpt = [0, 0, 0]
    for ws in sorted(work, key=lambda w: (-work[w], w)):
        lpt[lpt.index(min(lpt))] += work[ws]
    assert max(sum(work[w] for w in g) for g in groups) <= max(lpt)
    assert max(sum(work[w] for w in g) for g in groups) - sum(work.values()) / 3 < 100


def test_one_shard_per_worker_and_never_more_than_the_workspaces():
    trace = synthetic_longmemeval(7, 3, seed=2)
    assert len(_shards(trace, 2)) == 2
    assert len(_shards(trace, 3)) == 3
    assert len(_shards(trace, 50)) == 7


# ---------------------------------------------------------------- shipping and stitching
def test_a_shard_holds_its_own_events_and_one_clock_event_per_foreign_run():
    trace = synthetic_longmemeval(4, 3, seed=1)
    shards = _shards(trace, 2)
    parts = _split(trace, shards)
    for keep, part in zip(shards, parts):
        own = [e for e in trace.events if e.fields.get("workspace_id") in keep]
        assert [e for e in part.events if e.type != "clock"] == own
        assert part.positions == sorted(part.positions)
        # a foreign run becomes one clock event at its last time: never two in a row
        kinds = [e.type for e in part.events]
        assert all(not (a == b == "clock") for a, b in zip(kinds, kinds[1:]))
        for pos, event in zip(part.positions, part.events):
            if event.type == "clock":
                assert event.get("advance_s") == 0.0
                assert event.ts == trace.events[pos].ts or trace.events[pos].ts is None
    assert sum(len(p.events) for p in parts) < 2 * len(trace)


def test_sharded_rows_stitch_into_the_serial_frames():
    trace = synthetic_longmemeval(6, 4, seed=3)
    serial = replay(trace, UNTIMED, k=10, measures=MEASURES, progress=False)
    parts = [_replay_shard(p, settings()) for p in _split(trace, _shards(trace, 3))]
    merged = _merge_shards(parts)
    pd.testing.assert_frame_equal(merged["candidates"], serial.candidates)
    pd.testing.assert_frame_equal(merged["metrics"], serial.metrics)
    assert [r["qid"] for r in merged["decisions"]] == serial.decisions["qid"].tolist()


def test_a_column_typed_differently_in_two_shards_is_rebuilt_as_serially():
    # one shard's column is float (no None), the other's all None: serially one float column
    a = pd.DataFrame({"x": [1.0, 2.0], "s": ["p", "q"]})
    b = pd.DataFrame({"x": [None, None], "s": ["r", None]})
    assert a["x"].dtype != b["x"].dtype
    rows = np.array([2, 0, 3, 1])
    want = pd.DataFrame({"x": [None, 1.0, None, 2.0], "s": ["r", "p", None, "q"]})
    pd.testing.assert_frame_equal(_stitch([a, b], rows), want)
    same = pd.DataFrame({"x": [3.0], "s": ["t"]})
    pd.testing.assert_frame_equal(_stitch([a, same], np.array([2, 1])),
                                  pd.DataFrame({"x": [3.0, 2.0], "s": ["t", "q"]}))


# ---------------------------------------------------------------- the synthetic trace
def test_synthetic_longmemeval_has_longmemevals_shape():
    trace = synthetic_longmemeval(5, 6, seed=4)
    assert trace.hash() == synthetic_longmemeval(5, 6, seed=4).hash()
    assert trace.hash() != synthetic_longmemeval(5, 6, seed=5).hash()
    queries = trace.queries
    assert [q.get("workspace_id") for q in queries] == [q.get("qid") for q in queries]
    assert sorted(q.get("qid") for q in queries) == [f"q{i}" for i in range(5)]
    adds = [e for e in trace if e.type == "add"]
    for q in queries:
        ws = q.get("workspace_id")
        mine = [e for e in adds if e.get("workspace_id") == ws]
        assert len({e.get("metadata")["session"] for e in mine}) == 6
        assert all(e.ts < q.ts for e in mine)  # asked after its last session
        (gold,) = q.get("gold")
        assert gold in {e.get("item_id") for e in mine}
        per_session: dict[str, int] = {}
        for e in mine:
            per_session[e.get("metadata")["session"]] = \
                per_session.get(e.get("metadata")["session"], 0) + 1
        assert all(2 <= n <= 6 for n in per_session.values())  # turns=(2, 6)
    stamps = [e.ts for e in trace if e.ts is not None]
    assert stamps == sorted(stamps)
    # the haystacks interleave in time, as the loader merges them
    owners = [e.get("workspace_id") for e in adds]
    assert sum(a != b for a, b in zip(owners, owners[1:])) > 5


def test_synthetic_longmemeval_questions_find_their_evidence():
    result = replay(synthetic_longmemeval(4, 8, seed=6), measures=["R@10"], progress=False)
    assert result.summary()["R@10"] == 1.0


@pytest.mark.parametrize("kwargs, name", [
    ({"n_questions": 0}, "n_questions"), ({"n_sessions": True}, "n_sessions"),
    ({"turns": (3, 2)}, "turns"), ({"words": (0, 4)}, "words"),
    ({"span_days": 0}, "span_days"), ({"vocabulary": 10}, "vocabulary"),
    ({"n_questions": 100_000, "n_sessions": 100_000}, "items")])
def test_synthetic_longmemeval_validates_its_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        synthetic_longmemeval(**kwargs)


# ---------------------------------------------------------------- the CLI
@pytest.fixture
def trace_file(tmp_path):
    path = tmp_path / "lme.jsonl"
    path.write_text(synthetic_longmemeval(4, 3, seed=1).to_jsonl())
    return path


@pytest.mark.parametrize("args, fragment", [
    (["--workers", "3"], "--workers 3 has no effect with --executor serial (it replays in this process); use --executor dask"),
    (["--address", "tcp://127.0.0.1:1"], "--address 'tcp://127.0.0.1:1' needs --executor dask"),
    (["--executor", "dask", "--workers", "0"], "--workers must be at least 1, got 0"),
    (["--executor", "dask", "--workers", "2", "--address", "tcp://127.0.0.1:1"],
     "(that scheduler's cluster has its own workers)"),
])
@pytest.mark.parametrize("command", ["replay", "experiment"])
def test_cli_executor_bad_input_is_one_line(trace_file, tmp_path, capsys, command, args,
                                            fragment):
    extra = ["--config", "a=default"] if command == "experiment" else []
    code, lines = cli(capsys, command, str(trace_file), *extra, "--out", str(tmp_path / "o"),
                      *args)
    assert_one_line_error(code, lines, command, fragment)


@pytest.mark.parametrize("command", ["replay", "experiment"])
def test_cli_unreachable_scheduler_is_one_line(trace_file, tmp_path, capsys, command):
    pytest.importorskip("distributed")
    import dask
    extra = ["--config", "a=default"] if command == "experiment" else []
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code, lines = cli(capsys, command, str(trace_file), *extra, "--out",
                          str(tmp_path / "o"), "--executor", "dask", "--address",
                          "tcp://127.0.0.1:9")
    assert_one_line_error(code, lines, command, "cannot reach the Dask scheduler")


# ---------------------------------------------------------------- real clusters (slow)
@pytest.mark.slow
def test_longmemeval_shaped_trace_sharded_on_two_workers_equals_serial():
    """The benchmark's smoke test at a small scale (benchmarks/replay_longmemeval_scale.py)."""
    pytest.importorskip("distributed")
    from distributed import Client

    from memlab.harness.replay import dask_address
    trace = synthetic_longmemeval(12, 5, seed=0)
    serial = replay(trace, UNTIMED, progress=False)
    with dask_address("dask", None, 2) as address, Client(address) as client:
        sharded = replay(trace, UNTIMED, progress=False, executor="dask", address=address)
        again = replay(trace, UNTIMED, progress=False, executor="dask", address=address)
        assert client.status == "running"  # the replays reused this client, not closed it
    assert sharded.manifest["executor"] == "dask (2 shards by workspace)"
    keep = [c for c in serial.decisions.columns if not c.endswith("_ms")]
    for result in (sharded, again):
        pd.testing.assert_frame_equal(result.decisions[keep], serial.decisions[keep])
        pd.testing.assert_frame_equal(result.candidates, serial.candidates)
        pd.testing.assert_frame_equal(result.metrics[result.metrics.measure != "latency_ms"]
                                      .reset_index(drop=True),
                                      serial.metrics[serial.metrics.measure != "latency_ms"]
                                      .reset_index(drop=True))


@pytest.mark.slow
def test_cli_replay_on_dask_saves_the_serial_frames(trace_file, tmp_path, capsys):
    pytest.importorskip("distributed")
    pytest.importorskip("pyarrow")
    for name, extra in (("serial", []), ("dask", ["--executor", "dask", "--workers", "2"])):
        code = cli(capsys, "replay", str(trace_file), "--out", str(tmp_path / name), *extra)[0]
        assert code == 0
    frames = {name: pd.read_parquet(tmp_path / name / "candidates.parquet")
              for name in ("serial", "dask")}
    pd.testing.assert_frame_equal(frames["serial"], frames["dask"])
    manifest = json.loads((tmp_path / "dask" / "manifest.json").read_text())
    assert manifest["executor"] == "dask (2 shards by workspace)"
