"""Issue 18, round 6: a sharded replay whose driver cannot reach the workers sends its shards
through the scheduler (detected by a probe; tested by forcing it), and a worker lost in the
middle of a replay costs a rerun of its shard, not the replay (tested by killing a worker
process of a real two-worker LocalCluster). Real clusters: slow tier."""

from __future__ import annotations

import gc
import importlib
import os
import pickle
import signal
import socket
import sys
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


def closed_port() -> str:
    """A loopback address nobody listens on (a port just bound and released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return f"tcp://127.0.0.1:{sock.getsockname()[1]}"


@pytest.fixture
def probes(monkeypatch):
    """A fresh answer cache, and every plain TCP connect and Dask connect the probe makes."""
    import distributed.comm

    monkeypatch.setattr(replay_module, "_REACHABLE", {})
    seen = {"tcp": [], "dask": []}
    tcp_open, dask_connect = replay_module._tcp_open, distributed.comm.connect

    async def counted_tcp(host, port):
        seen["tcp"].append(port)
        return await tcp_open(host, port)

    async def counted_connect(address, *args, **kwargs):
        seen["dask"].append(address)
        return await dask_connect(address, *args, **kwargs)

    monkeypatch.setattr(replay_module, "_tcp_open", counted_tcp)
    monkeypatch.setattr(distributed.comm, "connect", counted_connect)
    return seen


def test_the_probe_reaches_live_workers_and_refuses_closed_ports_without_dask_retries(
        cluster, probes):
    _, client = cluster
    workers = sorted(client.scheduler_info()["workers"])
    assert replay_module._workers_reachable(client, workers)
    assert len(probes["tcp"]) == len(probes["dask"]) == 2
    closed = [closed_port() for _ in range(3)]
    probes["tcp"].clear(), probes["dask"].clear()
    assert not replay_module._workers_reachable(client, closed, timeout=1.0)
    # all three tried at once (one refusal stops the probe, so a one-by-one probe tries one),
    # refused by the plain TCP connect: Dask's connect, which retries a refused port until its
    # time-out, never ran
    assert sorted(probes["tcp"]) == sorted(int(c.rsplit(":", 1)[1]) for c in closed)
    assert probes["dask"] == []


def test_the_probe_tries_every_worker_at_once(cluster, monkeypatch):
    """Each fake connection waits until all three were opened: a probe that tries one worker
    after another would see one, and time out."""
    import asyncio

    _, client = cluster
    monkeypatch.setattr(replay_module, "_REACHABLE", {})
    opened: list[int] = []

    async def refuse_when_all_opened(host, port):
        opened.append(port)
        while len(opened) < 3:
            await asyncio.sleep(0.001)
        raise ConnectionRefusedError(port)

    monkeypatch.setattr(replay_module, "_tcp_open", refuse_when_all_opened)
    fake = [f"tcp://127.0.0.1:{port}" for port in (1, 2, 3)]
    assert not replay_module._workers_reachable(client, fake, timeout=30.0)
    assert sorted(opened) == [1, 2, 3]
    # the last one opened was refused first; the probe stopped there (a time-out would have
    # marked all three)
    assert {w: ok for (_, w), (ok, _) in replay_module._REACHABLE.items()} == \
        {fake[opened[-1] - 1]: False}


def test_the_probe_stops_at_the_first_refusal(cluster, monkeypatch):
    """One worker refuses, another never answers: the probe does not wait for it (it is
    cancelled and left unknown; a time-out would have marked it unreachable)."""
    import asyncio

    _, client = cluster
    monkeypatch.setattr(replay_module, "_REACHABLE", {})
    cancelled: list[int] = []

    async def refuse_or_hang(host, port):
        if port == 1:
            raise ConnectionRefusedError(port)
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            cancelled.append(port)
            raise

    monkeypatch.setattr(replay_module, "_tcp_open", refuse_or_hang)
    refusing, hanging = "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"
    assert not replay_module._workers_reachable(client, [refusing, hanging], timeout=600.0)
    assert {w: ok for (_, w), (ok, _) in replay_module._REACHABLE.items()} == {refusing: False}
    assert cancelled == [2]


def test_the_probe_answers_are_kept_per_scheduler_and_worker_across_clients(cluster, probes):
    """A replay opens a new client of the scheduler: it does not probe again. An "unreachable"
    answer is forgotten after a while (one slow handshake does not slow every later replay)."""
    from distributed import Client

    address, client = cluster
    workers = sorted(client.scheduler_info()["workers"])
    closed = closed_port()
    assert replay_module._workers_reachable(client, workers)
    assert not replay_module._workers_reachable(client, [closed], timeout=1.0)
    tried = len(probes["tcp"])
    with Client(address, set_as_default=False) as other:
        assert other.id != client.id
        assert replay_module._workers_reachable(other, workers)
        assert not replay_module._workers_reachable(other, [closed, *workers])
        assert len(probes["tcp"]) == tried  # answered from the cache
        key = (other.scheduler.address, closed)
        ok, when = replay_module._REACHABLE[key]
        replay_module._REACHABLE[key] = (ok, when - replay_module._UNREACHABLE_TTL_S - 1)
        assert not replay_module._workers_reachable(other, [closed], timeout=1.0)
        assert len(probes["tcp"]) == tried + 1  # expired: probed again


def test_unreachable_workers_get_their_shards_through_the_scheduler(cluster, small, calls,
                                                                   monkeypatch):
    address, _ = cluster
    trace, serial = small
    monkeypatch.setattr(replay_module, "_workers_reachable", lambda client, workers: False)
    monkeypatch.setattr(replay_module, "_WARNED_UNREACHABLE", set())
    with pytest.warns(RuntimeWarning, match="not reachable from this process"):
        sharded = replay(trace, UNTIMED, progress=False, executor="dask", address=address)
    assert sharded.manifest["executor"] == "dask (2 shards by workspace, through the " \
        "scheduler: workers unreachable from the driver)"
    assert_same_frames(sharded, serial)
    assert [c for c in calls if c[0] == "scatter"] == [("scatter", False)] * 2
    assert [c for c in calls if c[0] == "gather"] == [("gather", False)] * 2
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once per scheduler
        replay(trace, UNTIMED, progress=False, executor="dask", address=address)


def test_a_direct_scatter_that_fails_sends_the_rest_through_the_scheduler(cluster, small,
                                                                          calls, monkeypatch):
    """The probe passed but the connection fails when the shard is sent (a gateway that lets a
    handshake through, a worker moved): that shard, the other shards, the gathers and the next
    replay go through the scheduler, none waits for a direct connection again."""
    from distributed import Client

    address, client = cluster
    trace, serial = small
    spied = Client.scatter
    workers = sorted(client.scheduler_info()["workers"])
    monkeypatch.setattr(replay_module, "_REACHABLE", {})
    monkeypatch.setattr(replay_module, "_WARNED_UNREACHABLE", set())
    replay_module._remember_reachable(client.scheduler.address, dict.fromkeys(workers, True))

    def refuse_direct(self, data, *args, direct=None, **kwargs):
        if direct:
            calls.append(("scatter", direct))  # tried
            raise OSError("Timed out trying to connect to tcp://10.0.0.1:1 after 30 s")
        return spied(self, data, *args, direct=direct, **kwargs)

    monkeypatch.setattr(Client, "scatter", refuse_direct)
    with pytest.warns(RuntimeWarning):
        sharded = replay(trace, UNTIMED, progress=False, executor="dask", address=address)
    assert_same_frames(sharded, serial)
    assert "through the scheduler" in sharded.manifest["executor"]
    assert [c for c in calls if c[0] == "scatter"] == [("scatter", True), ("scatter", False),
                                                       ("scatter", False)]
    assert [c for c in calls if c[0] == "gather"] == [("gather", False)] * 2
    calls.clear()
    assert_same_frames(replay(trace, UNTIMED, progress=False, executor="dask",
                              address=address), serial)
    assert calls == [("scatter", False)] * 2 + [("gather", False)] * 2


def test_a_broken_connection_in_gather_is_raised_not_taken_for_a_lost_worker(cluster, small,
                                                                            monkeypatch):
    from distributed import Client

    monkeypatch.setattr(replay_module, "_REACHABLE", {})

    address, _ = cluster
    trace, _ = small
    waited = []

    def broken(self, *args, **kwargs):
        raise OSError("connection to the scheduler closed")

    monkeypatch.setattr(Client, "gather", broken)
    monkeypatch.setattr(Client, "wait_for_workers",
                        lambda self, *args, **kwargs: waited.append(args))
    with pytest.raises(OSError, match="connection to the scheduler closed"):
        replay(trace, UNTIMED, progress=False, executor="dask", address=address)
    assert waited == []


def _count_shard_runs():
    """In a worker: count the runs of the shard task from now on."""
    module = importlib.import_module("memlab.harness.replay")  # the package's replay is a function

    original = getattr(module, "_uncounted_replay_shard_pickled", module._replay_shard_pickled)
    module._uncounted_replay_shard_pickled = original
    module._shard_runs = 0

    def counted(shard, settings):
        module._shard_runs += 1
        return original(shard, settings)

    module._replay_shard_pickled = counted


def _shard_runs():
    module = importlib.import_module("memlab.harness.replay")  # the package's replay is a function
    return module._shard_runs


def _stop_counting():
    module = importlib.import_module("memlab.harness.replay")  # the package's replay is a function
    module._replay_shard_pickled = module._uncounted_replay_shard_pickled


def two_bad_events():
    """Two refused edges, one per shard; the trace's earlier one is in the lighter
    workspace, whose shard is not the first."""
    b = TraceBuilder("two-bad", start=replay_module.DEFAULT_START)
    b = b.in_workspace("w2").add("gamma delta", item_id="b").edge("b", "nope2")
    b = b.in_workspace("w1")
    for i in range(6):
        b = b.add(f"alpha beta {i}", item_id=f"a{i}")
    b = b.edge("a0", "nope1").query("q", "alpha", gold=["a0"])
    return b.in_workspace("w2").query("q2", "gamma", gold=["b"]).build()


def test_the_earliest_bad_event_of_the_trace_is_raised_as_serially_and_each_shard_runs_once(
        cluster):
    """A refused event is deterministic: each shard's task runs once (counted in the
    workers), the worker returns its error as data, and the driver raises the serial run's
    ReplayError: the trace's first refused event, whichever shard it is in."""
    cloudpickle = pytest.importorskip("cloudpickle")
    address, client = cluster
    trace = two_bad_events()
    shards = replay_module._shards(trace, 2)
    assert [sorted(s) for s in shards] == [["w1"], ["w2"]]  # the earlier error: 2nd shard
    with pytest.raises(replay_module.ReplayError) as serial:
        replay(trace, progress=False)
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        client.run(_count_shard_runs)
        with pytest.raises(replay_module.ReplayError) as sharded:
            replay(trace, progress=False, executor="dask", address=address)
        runs = client.run(_shard_runs)
        client.run(_stop_counting)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert str(sharded.value) == str(serial.value)
    assert sharded.value.position == serial.value.position == 1
    assert sum(runs.values()) == 2, runs  # one run per shard: no retry of a refused event


class _NeedsArguments(ValueError):
    def __init__(self, limit, allowed):
        super().__init__(f"{limit} above {allowed}")


def test_a_shard_returns_its_error_as_plain_data_not_an_exception_object(monkeypatch):
    """An exception whose pickle does not unpickle (it needs constructor arguments, as
    ``LimitExceeded`` does) still reaches the driver: as position, type name and message."""
    import pickle

    def refuse(shard, settings):
        raise _NeedsArguments("max_content_chars", 10)

    monkeypatch.setattr(replay_module, "_replay_shard", refuse)
    out = pickle.loads(replay_module._replay_shard_pickled(pickle.dumps(None), ()))
    assert out == {"error": {"position": None, "type": "_NeedsArguments",
                             "message": "max_content_chars above 10"}}


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
        # the worker the nanny started in its place was prepared as the first ones were
        client.wait_for_workers(2, timeout=300)
        frozen, deadline = {}, time.monotonic() + 300
        while time.monotonic() < deadline:
            frozen = client.run(gc.get_freeze_count)
            if len(frozen) == 2 and all(count > 10_000 for count in frozen.values()):
                break
            time.sleep(0.2)
        assert len(frozen) == 2 and all(count > 10_000 for count in frozen.values()), frozen
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


def test_a_shard_that_always_kills_its_worker_raises_a_runtime_error_naming_it():
    """Each attempt loses its worker: after the reruns, a RuntimeError naming the shard's
    workspaces (chained from Dask's cancellation), not a bare FutureCancelledError."""
    pytest.importorskip("distributed")
    cloudpickle = pytest.importorskip("cloudpickle")
    from distributed import Client
    from distributed.diagnostics.plugin import WorkerPlugin

    class KillOnShard(WorkerPlugin):
        """In every worker, restarted ones included: the shard task kills its own worker
        process, as an out-of-memory kill would."""

        name = "test-kill-on-shard"

        def setup(self, worker):
            module = importlib.import_module("memlab.harness.replay")

            original = module._replay_shard_pickled

            def die(shard, settings):
                events = pickle.loads(shard).events
                if any(e.get("workspace_id") == victim for e in events if e.type != "clock"):
                    os.kill(os.getpid(), signal.SIGKILL)
                return original(shard, settings)

            module._replay_shard_pickled = die

    trace = synthetic_longmemeval(4, 4, seed=1)
    victim = sorted(replay_module._shards(trace, 2)[0])[0]  # its shard kills its worker
    module = sys.modules[__name__]
    cloudpickle.register_pickle_by_value(module)
    try:
        with replay_module.dask_address("dask", None, 2) as address, \
                Client(address) as client:
            client.register_plugin(KillOnShard())
            lost = rf"workspaces .*'{victim}'.*: its worker was lost 3 times; memory limit\?"
            with pytest.raises(RuntimeError, match=lost) as error:
                replay(trace, UNTIMED, progress=False, executor="dask", address=address)
    finally:
        cloudpickle.unregister_pickle_by_value(module)
    assert error.value.__cause__ is not None
