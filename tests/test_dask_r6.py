"""Issue 18, round 6: a sharded replay whose driver cannot reach the workers sends its shards
through the scheduler (detected by a probe; tested by forcing it), and a worker lost in the
middle of a replay costs a rerun of its shard, not the replay (tested by killing a worker
process of a real two-worker LocalCluster). Real clusters: slow tier."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from dataclasses import replace

import pandas as pd
import pytest

from memlab.datasets.synthetic import synthetic_longmemeval
from memlab.harness import replay
from memlab.harness.trace import TraceBuilder
from memlab.surfacing.config import DEFAULT

pytestmark = pytest.mark.slow

replay_module = __import__("memlab.harness.replay", fromlist=["replay"])

UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


def assert_same_frames(got, want):
    keep = [c for c in want.decisions.columns if not c.endswith("_ms")]
    pd.testing.assert_frame_equal(got.decisions[keep], want.decisions[keep])
    pd.testing.assert_frame_equal(got.candidates, want.candidates)
    pd.testing.assert_frame_equal(got.log, want.log)
    not_latency = [m.measure != "latency_ms" for m in (got.metrics, want.metrics)]
    pd.testing.assert_frame_equal(got.metrics[not_latency[0]].reset_index(drop=True),
                                  want.metrics[not_latency[1]].reset_index(drop=True))


@pytest.fixture(scope="module")
def cluster():
    """A warm two-worker LocalCluster (processes) and this process's client of it."""
    pytest.importorskip("distributed")
    from distributed import Client

    with replay_module.dask_address("dask", None, 2) as address, Client(address) as client:
        yield address, client


@pytest.fixture(scope="module")
def small():
    trace = synthetic_longmemeval(8, 4, seed=3)
    return trace, replay(trace, UNTIMED, progress=False)


@pytest.fixture
def calls(monkeypatch):
    """Every ``scatter`` and ``gather`` a client makes, with its ``direct`` argument."""
    from distributed import Client

    seen: list[tuple[str, object]] = []
    for name in ("scatter", "gather"):
        original = getattr(Client, name)

        def spy(self, *args, _name=name, _original=original, **kwargs):
            seen.append((_name, kwargs.get("direct")))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(Client, name, spy)
    return seen


def test_the_probe_reaches_live_workers_and_not_a_closed_port(cluster):
    _, client = cluster
    workers = sorted(client.scheduler_info()["workers"])
    assert replay_module._workers_reachable(client, workers)
    with socket.socket() as sock:  # a loopback port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    closed = f"tcp://127.0.0.1:{port}"
    started = time.perf_counter()
    assert not replay_module._workers_reachable(client, [closed], timeout=2.0)
    assert not replay_module._workers_reachable(client, [*workers, closed])
    assert time.perf_counter() - started < 60  # refused at once, not a connect time-out each


def test_unreachable_workers_get_their_shards_through_the_scheduler(cluster, small, calls,
                                                                   monkeypatch):
    address, _ = cluster
    trace, serial = small
    monkeypatch.setattr(replay_module, "_workers_reachable", lambda client, workers: False)
    sharded = replay(trace, UNTIMED, progress=False, executor="dask", address=address)
    assert sharded.manifest["executor"] == "dask (2 shards by workspace)"
    assert_same_frames(sharded, serial)
    assert [c for c in calls if c[0] == "scatter"] == [("scatter", False)] * 2
    assert [c for c in calls if c[0] == "gather"] == [("gather", False)] * 2


def test_a_direct_scatter_that_fails_falls_back_to_the_scheduler(cluster, small, calls,
                                                                 monkeypatch):
    """The probe passed but the connection fails when the shard is sent (a gateway that lets a
    handshake through, a worker moved): the shard goes through the scheduler."""
    from distributed import Client

    address, _ = cluster
    trace, serial = small
    spied = Client.scatter

    def refuse_direct(self, data, *args, direct=None, **kwargs):
        if direct:
            calls.append(("scatter", direct))  # tried
            raise OSError("Timed out trying to connect to tcp://10.0.0.1:1 after 5 s")
        return spied(self, data, *args, direct=direct, **kwargs)

    monkeypatch.setattr(replay_module, "_workers_reachable", lambda client, workers: True)
    monkeypatch.setattr(Client, "scatter", refuse_direct)
    sharded = replay(trace, UNTIMED, progress=False, executor="dask", address=address)
    assert_same_frames(sharded, serial)
    assert [c for c in calls if c[0] == "scatter"] == [("scatter", True),
                                                       ("scatter", False)] * 2


def test_a_bad_event_in_a_shard_raises_its_replay_error_once(cluster, calls):
    """A refused event is deterministic: the worker returns the error (no Dask retry), the
    driver raises it as the serial replay does."""
    address, _ = cluster
    trace = (TraceBuilder("ok", start=replay_module.DEFAULT_START)
             .in_workspace("w1").add("alpha beta", item_id="a")
             .in_workspace("w2").add("gamma delta", item_id="b")
             .in_workspace("w1").edge("a", "missing")
             .in_workspace("w2").query("q", "gamma", gold=["b"]).build())
    with pytest.raises(replay_module.ReplayError) as serial:
        replay(trace, progress=False)
    with pytest.raises(replay_module.ReplayError) as sharded:
        replay(trace, progress=False, executor="dask", address=address)
    assert str(sharded.value) == str(serial.value)
    assert len([c for c in calls if c[0] == "scatter"]) == 2  # no shard sent again


def test_a_worker_killed_mid_replay_is_replaced_and_the_frames_equal_the_serial_ones():
    """SIGKILL one worker process of a two-worker LocalCluster while its shard's task runs:
    its events were lost with it, the driver sends them to a live worker again, and the
    replay's frames still equal the serial run's."""
    pytest.importorskip("distributed")
    from distributed import Client

    trace = synthetic_longmemeval(24, 30, seed=5)
    serial = replay(trace, UNTIMED, progress=False)
    with replay_module.dask_address("dask", None, 2) as address, Client(address) as client:
        pids = client.run(os.getpid)
        out: dict[str, object] = {}

        def run():
            try:
                out["result"] = replay(trace, UNTIMED, progress=False, executor="dask",
                                       address=address)
            except BaseException as exc:  # reported below
                out["error"] = exc

        thread = threading.Thread(target=run)
        thread.start()
        victim, deadline = None, time.monotonic() + 300
        while victim is None and time.monotonic() < deadline and thread.is_alive():
            busy = [w for w, keys in client.processing().items()
                    if any("_replay_shard_pickled" in str(k) for k in keys)]
            victim = min(busy) if busy else None
            time.sleep(0.01)
        assert victim is not None, "no shard was seen running"
        os.kill(pids[victim], signal.SIGKILL)
        thread.join(600)
        assert not thread.is_alive()
        if "error" in out:
            raise out["error"]
        assert pids[victim] not in client.run(os.getpid).values()  # it was killed
    sharded = out["result"]
    assert sharded.manifest["executor"] == \
        "dask (2 shards by workspace, 1 run again after a lost worker)"
    assert_same_frames(sharded, serial)


def test_the_workers_memlab_starts_freeze_their_startup_heap_and_the_driver_does_not(cluster,
                                                                                    small):
    """The workers' startup objects are out of the collector's sight after the warm-up; a
    sharded replay leaves the driver's collector as it was."""
    import gc

    address, client = cluster
    trace, serial = small
    frozen = client.run(gc.get_freeze_count)
    assert len(frozen) == 2 and all(count > 10_000 for count in frozen.values()), frozen
    before = gc.get_freeze_count()
    assert_same_frames(replay(trace, UNTIMED, progress=False, executor="dask",
                              address=address), serial)
    assert gc.get_freeze_count() == before
