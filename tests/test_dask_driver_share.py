"""Issue 18 (round 5, the driver's share of a sharded replay): the compact column encoding a
worker sends its frames in round-trips exactly (dtypes, NaN and None, empty shards), and the
LocalCluster memlab starts carries its quiet Dask settings into the workers."""

from __future__ import annotations

import pickle

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab.datasets.synthetic import synthetic_longmemeval
from memlab.harness.replay import (_QUIET_DASK, _decode_frame, _encode_frame, _merge_shards,
                                   _replay_shard, _shards, _split)

FLOATS = st.floats(allow_nan=True, allow_infinity=True, width=64)
STRINGS = st.sampled_from(["a", "b", "", "conv-26:q1", "é", "a b"])


def _column(kind: str, values: list):
    if kind == "str":  # the frame's own inference: str dtype, None -> NaN
        return values
    if kind == "object":  # mixed: stays object, None and NaN kept apart
        return pd.array(values, dtype=object)
    return np.array(values, dtype=kind)


COLUMN_KINDS = {
    "float64": st.lists(FLOATS | st.sampled_from([0.0, -0.0, float("nan")])),
    "float32": st.lists(st.floats(width=32, allow_nan=True)),
    "int64": st.lists(st.integers(-2 ** 63, 2 ** 63 - 1) | st.sampled_from([0, 1])),
    "int8": st.lists(st.integers(-128, 127)),
    "bool": st.lists(st.booleans()),
    "str": st.lists(STRINGS | st.none()),
    "object": st.lists(STRINGS | st.none() | st.just(float("nan")) | st.integers(0, 3)),
}


@st.composite
def frames(draw):
    n = draw(st.integers(0, 40))
    kinds = draw(st.lists(st.sampled_from(sorted(COLUMN_KINDS)), max_size=6))
    data = {}
    for i, kind in enumerate(kinds):
        # long runs too (a query's qid repeats over its candidates)
        values = draw(COLUMN_KINDS[kind].filter(lambda v: len(v) > 0)) if n else []
        if n:
            reps = draw(st.sampled_from([1, 3, n]))
            values = (values * reps)[:n]
            values = (values * (n // max(len(values), 1) + 1))[:n]
        data[f"c{i}_{kind}"] = _column(kind, values)
    return pd.DataFrame(data, index=pd.RangeIndex(n), columns=list(data))


@settings(max_examples=300, deadline=None)
@given(frames())
def test_an_encoded_frame_decodes_to_an_equal_frame(frame):
    shipped = pickle.loads(pickle.dumps(_encode_frame(frame), protocol=5))
    back = _decode_frame(shipped)
    pd.testing.assert_frame_equal(back, frame, check_exact=True)
    for name in frame.columns:  # bit for bit: NaN where NaN, -0.0 where -0.0, None where None
        a, b = back[name].to_numpy(), frame[name].to_numpy()
        if a.dtype.kind == "f":
            assert a.tobytes() == b.tobytes()
        elif a.dtype == object:
            assert [type(x) for x in a] == [type(x) for x in b]


def test_none_and_an_empty_frame_round_trip():
    assert _decode_frame(_encode_frame(None)) is None
    empty = pd.DataFrame(columns=["qid", "measure", "value"])
    pd.testing.assert_frame_equal(_decode_frame(_encode_frame(empty)), empty)
    no_columns = pd.DataFrame(index=pd.RangeIndex(3))
    pd.testing.assert_frame_equal(_decode_frame(_encode_frame(no_columns)), no_columns)


def test_a_candidate_frame_travels_as_runs_and_codes():
    trace = synthetic_longmemeval(6, 4, seed=3)
    from test_issue18_dask import settings as shard_settings
    part = _replay_shard(_split(trace, _shards(trace, 2))[0], shard_settings())
    kinds = dict(zip(part["candidates"]["columns"], (c[0] for c in part["candidates"]["data"])))
    assert kinds["qid"] == kinds["decision_id"] == "runs"  # repeated per query
    assert kinds["item_id"] in ("codes", "runs")
    assert kinds["score"] in ("raw", "number_runs")


def test_a_shard_without_queries_merges_with_one_that_has_them():
    trace = synthetic_longmemeval(3, 2, seed=4)
    from test_issue18_dask import settings as shard_settings
    parts = [_replay_shard(p, shard_settings()) for p in _split(trace, _shards(trace, 2))]
    empty = {**parts[1], "decisions": [], "log": [], "unjudged": 0,
             "candidates": None, "metrics": _encode_frame(pd.DataFrame(
                 [], columns=["qid", "measure", "value"])),
             "chunks": np.zeros((0, 3), dtype=np.int64)}
    alone = _merge_shards([parts[0]])
    with_empty = _merge_shards([parts[0], empty])
    pd.testing.assert_frame_equal(with_empty["candidates"], alone["candidates"])
    pd.testing.assert_frame_equal(with_empty["metrics"], alone["metrics"])


@pytest.mark.slow
def test_the_cluster_memlab_starts_is_quiet_in_its_workers():
    pytest.importorskip("distributed")
    import dask
    from distributed import Client

    from memlab.harness.replay import _local_cluster

    with _local_cluster(2) as cluster, Client(cluster) as client:
        got = client.run(lambda: {k: dask.config.get(k) for k in _QUIET_DASK})
        assert len(got) == 2
        for values in got.values():
            assert values == _QUIET_DASK


def test_a_shard_pickles_to_its_own_events_and_positions():
    trace = synthetic_longmemeval(4, 3, seed=5)
    for part in _split(trace, _shards(trace, 2)):
        back = pickle.loads(pickle.dumps(part, protocol=5))
        assert back.events == part.events and back.positions == part.positions
        assert (back.start, back.workspace_id) == (part.start, part.workspace_id)
        assert all(type(e) is type(part.events[0]) for e in back.events)
