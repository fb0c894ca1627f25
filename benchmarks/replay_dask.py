"""Serial vs sharded replay of the shared LoCoMo trace (issue 18, "beyond one machine").

    PYTHONPATH=. python benchmarks/replay_dask.py [DATA_ROOT] [WORKERS] [ROUNDS] [--cold]
        [--own-sessions]
    PYTHONPATH=. python benchmarks/replay_dask.py --summarise FILE [FILE ...]

``replay(trace, UNTIMED)`` (DEFAULT without wall-clock budgets) against ``replay(trace, UNTIMED,
executor="dask", address=...)`` on a LocalCluster of WORKERS (at least 2) single-threaded
processes started (and warmed up) beforehand, its start printed apart; ROUNDS rounds (default 5:
one first round, four later ones), the frames checked equal. A round has four runs (serial,
sharded, the control together, the control one after the other); their order follows a Williams
square over every 4 consecutive rounds (``ORDERS``): each run comes first, second, third and last
once, and right after each other run once. The later rounds are balanced when their number is a
multiple of 4 (the script says so when it is not); the first round is one order.

**The ceiling control** (no Dask): plain OS processes (``multiprocessing`` with ``spawn``), one
per shard a sharded replay of WORKERS sends (``_split`` of ``_shards(trace, WORKERS)``, pickled),
started before the rounds and each warmed up and its heap frozen exactly like a worker of a
LocalCluster memlab starts (``_prepare_worker``), hold nothing but a pipe to this process. Each
round they replay those shards (``_replay_shard_pickled``, as a worker runs it) side by side, one
shard each ("together"), and one process replays all of them, one after the other ("apart"; the
process alternates round by round). CPU ``apart / busiest together`` and wall ``apart /
together`` are the most any WORKERS-worker executor can get on this machine at that moment: no
scheduler, no driver work, no serialization beyond the pipe. The processes also time every
query's CPU (``time.process_time`` around ``_Runner.query``), so each query's CPU together is
compared with the same query's CPU in the process that replayed all the shards: the same query
and the same kind of process (warmed, frozen), but not the same process state (in ``apart`` the
other processes' shards run in that one process, after or before its own), so the ratio is the
cost of running the processes side by side (hardware and neighbours) plus whatever the state of a
process that replays every shard changes. The cores used (CPU s per wall s) of one process
against all of them say what share of the machine the run got: under Linux's autogroup
scheduling (on here, ``/proc/sys/kernel/sched_autogroup_enabled``) all the processes of one
terminal session share one session's fair share of the CPU, whatever their number.
``--own-sessions`` (a diagnostic, not a fair comparison) starts each control process in a session
of its own (``os.setsid``): then the processes together get a share each, one process apart
still one.

Each round also times a **frozen serial** control: the serial replay with the driver's heap
frozen (``gc.collect(); gc.freeze()`` before it, ``gc.unfreeze()`` after), right after the plain
serial one, as the workers of a LocalCluster memlab starts are frozen after their warm-up;
without it the sharded side has an advantage the serial side could have had too (fewer full
garbage collections).

Speedups, against the plain and the frozen serial run:

- wall clock (what a user waits for; on a shared machine it mostly measures the others' load);
- the critical path in CPU seconds: serially the process's CPU time of the replay; sharded, the
  largest CPU time any worker process spent during the call (``time.process_time`` read on
  every worker before and after, Dask's own work in the worker included) plus the driver's.
  That is the wall time the call would take on an idle machine with a core per process.

**Every speedup and every ratio printed is the median over the phase's rounds of the per-round
ratio** (its range beside it), followed by the pooled value: the median of the numerators over
the median of the denominators, which the printed medians of the seconds reproduce (the
per-round median does not, in general). Per phase it also prints the control's speedups (the
ceiling: CPU and wall, its own ratio and its CPU against the frozen serial replay), the cores
used, the per-query CPU together / one process, and **Dask / control**: per round the control's
busiest process over Dask's critical path (CPU) and the control's wall together over Dask's wall
(1.0: Dask at the ceiling).

The load average (1 min) is printed beside each round, and each round's numbers as a JSON line:
``--summarise`` prints the same summary from saved output (one file or several, then pooled over
all their rounds). Both sides are warmed the same way before the first round (the workers when
the cluster starts, the driver here: one tiny replay each, ``_warm_worker``). Phases: the **first
round (warmed cluster)** is each side's first LoCoMo replay (the workers' first shard, the driver
process's first serial replay); the **later rounds (reused cluster)** are what a researcher
sweeping parameters on one cluster gets from the second replay on. Neither includes a cluster's
start. ``--cold`` is a different measure: one ``replay(executor="dask")`` that starts (and warms)
its own cluster, timed whole, its start included.
"""

from __future__ import annotations

import gc
import json
import multiprocessing
import os
import pickle
import statistics
import time
from dataclasses import replace
from pathlib import Path

import pandas as pd

from memlab.datasets.loaders import load_locomo
from memlab.harness.measures import DEFAULT_MEASURES
from memlab.harness.replay import (_merge_shards, _shards, _split, _warm_worker, dask_address,
                                   replay)
from memlab.surfacing.config import DEFAULT

# no wall-clock budgets (PPR 200 ms, spreading 150 ms by default): on a loaded machine a budget
# cuts a search in one run and not in another, serial or sharded alike
UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


# the settings a sharded replay of UNTIMED ships to its workers (measures by name)
SHIPPED = (UNTIMED, "router", 20, 0, [str(m) for m in DEFAULT_MEASURES], True, None, "porter",
           "retrieved")

FIRST, LATER = "first round (warmed cluster)", "later rounds (reused cluster)"
serial = sharded = control_results = None  # the last round's results, checked equal


def _cpu() -> float:
    return time.process_time()


def timed(client, call):
    """(result, wall s, driver CPU s, {worker: CPU s}) of ``call()``."""
    before = client.run(_cpu)
    wall, cpu = time.perf_counter(), time.process_time()
    out = call()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    after = client.run(_cpu)
    return out, wall, cpu, {w: after[w] - before[w] for w in before}


def _control_process(conn, own_session: bool = False) -> None:
    """One process of the ceiling control (no Dask): warmed up and its heap frozen exactly as a
    worker of a LocalCluster memlab starts (``_prepare_worker``), then, for every message (a
    list of pickled shards), each shard's replay as a worker runs it (``_replay_shard_pickled``)
    in this process's main thread, one after the other; back go the result pickles, each
    shard's CPU and wall seconds and its queries' CPU seconds (``time.process_time`` around
    ``_Runner.query``, in trace order). ``own_session``: first a session of its own
    (``os.setsid``), hence its own autogroup (the ``--own-sessions`` diagnostic)."""
    import importlib

    if own_session:
        os.setsid()

    replay_module = importlib.import_module("memlab.harness.replay")  # the module, not the
    # function memlab.harness exports under the same name

    replay_module._prepare_worker()
    per_query: list[float] = []
    plain_query = replay_module._Runner.query

    def query(self, event):
        started = time.process_time()
        plain_query(self, event)
        per_query.append(time.process_time() - started)

    replay_module._Runner.query = query
    conn.send("ready")
    while (message := conn.recv()) is not None:
        out = []
        for data in message:
            per_query.clear()
            cpu, wall = time.process_time(), time.perf_counter()
            result = replay_module._replay_shard_pickled(data, SHIPPED)
            out.append((result, time.process_time() - cpu, time.perf_counter() - wall,
                        list(per_query)))
        conn.send(out)


class Control:
    """One plain OS process (``spawn``) per shard, started and warmed before the rounds (their
    start not counted, as the cluster's is not). ``together()``: shard i to process i, sent at
    once; ``apart(p)``: every shard to process p, one after the other, in shard order. Each
    returns (wall s as the driver saw it, from sending the shards to holding every result's
    bytes; per shard: CPU s, per-query CPU s; the results' pickles)."""

    def __init__(self, shards: list[bytes], own_sessions: bool = False) -> None:
        context = multiprocessing.get_context("spawn")
        self.shards, self.conns, self.procs = shards, [], []
        for _ in shards:
            ours, theirs = context.Pipe()
            proc = context.Process(target=_control_process, args=(theirs, own_sessions),
                                   daemon=True)
            proc.start()
            self.conns.append(ours)
            self.procs.append(proc)
        for conn in self.conns:
            assert conn.recv() == "ready"

    def together(self):
        wall = time.perf_counter()
        for conn, data in zip(self.conns, self.shards):
            conn.send([data])
        outs = [conn.recv()[0] for conn in self.conns]
        return time.perf_counter() - wall, [(o[1], o[3]) for o in outs], [o[0] for o in outs]

    def apart(self, p: int):
        wall = time.perf_counter()
        self.conns[p].send(self.shards)
        outs = self.conns[p].recv()
        return time.perf_counter() - wall, [(o[1], o[3]) for o in outs], [o[0] for o in outs]

    def close(self) -> None:
        for conn, proc in zip(self.conns, self.procs):
            conn.send(None)
            proc.join(30)


def comparable(result):
    keep = [c for c in result.decisions.columns if not c.endswith("_ms")]
    return result.decisions[keep], result.candidates, result.metrics, result.log


def _inflation(alone: list[list[float]], together: list[list[float]]) -> tuple[float, float]:
    """Per-query CPU together (each shard in its own process) against apart (every shard in one
    process, so not the same process state for all but one shard), over all the shards'
    queries: (ratio of the sums, median of the per-query ratios)."""
    a = [x for shard in alone for x in shard]
    t = [x for shard in together for x in shard]
    assert len(a) == len(t)
    return sum(t) / sum(a), statistics.median(y / x for x, y in zip(a, t) if x > 0)


# A Williams square: over any 4 consecutive rounds each run comes first, second, third and last
# once, and each comes right after each other one once (serial, sharded, together, apart).
ORDERS = ((0, 1, 3, 2), (1, 2, 0, 3), (2, 3, 1, 0), (3, 0, 2, 1))


def _busiest(row) -> float:
    """Dask's busiest worker's CPU s (older saved rows have only the critical path)."""
    if "dask_worker_cpu_s" in row:
        return max(row["dask_worker_cpu_s"])
    return row["dask_critical_path_s"] - row["dask_driver_cpu_s"]


def _control_plus_driver(row) -> float:
    """The control's busiest process plus Dask's driver CPU s (a driver added to the ceiling)."""
    return row["control_critical_path_s"] + row["dask_driver_cpu_s"]


def _ratio(of, num, den) -> str:
    """A speedup over rounds: the median of the per-round ratios num / den (each a row's key or
    a function of the row), their range, and the pooled value (the median of num over the
    median of den)."""
    def value(row, what):
        return what(row) if callable(what) else row[what]

    per_round = [value(r, num) / value(r, den) for r in of]
    pooled = (statistics.median(value(r, num) for r in of)
              / statistics.median(value(r, den) for r in of))
    return (f"{statistics.median(per_round):.2f}x (range {min(per_round):.2f}-"
            f"{max(per_round):.2f}; pooled {pooled:.2f}x)")


def summarise(rows: list[dict], title: str = "") -> None:
    """Print, per phase, the medians and the speedups of ``rows`` (the per-round JSON lines)."""
    def median(key):
        return statistics.median(row[key] for row in of)

    for phase in (FIRST, LATER):
        of = [row for row in rows if row["phase"] == phase]
        if not of:
            continue
        n = len(of)
        loads = [row["load_1min"] for row in of] + [row["load_1min_end"] for row in of]
        d_wall, d_path = median("dask_wall_s"), median("dask_critical_path_s")
        busiest = statistics.median(_busiest(row) for row in of)
        leads = sorted({row.get("order", ["?"])[0] for row in of})
        print(f"{title}{phase} ({n} round{'s' * (n > 1)}, medians, load {min(loads):.2f}-"
              f"{max(loads):.2f}; first runs: {', '.join(leads)}): dask wall {d_wall:.2f} s, "
              f"critical path (CPU) {d_path:.2f} s (busiest worker {busiest:.2f} s + driver "
              f"{median('dask_driver_cpu_s'):.2f} s)")
        print("  every speedup below: median of the per-round ratios (range; pooled = ratio of "
              "the medians)")
        for side, prefix in (("serial", "serial"), ("frozen serial", "frozen_serial")):
            wall, cpu = f"{prefix}_wall_s", f"{prefix}_cpu_s"
            print(f"  dask against {side}: wall {median(wall):.2f} s, speedup "
                  f"{_ratio(of, wall, 'dask_wall_s')}; CPU "
                  f"{median(cpu):.2f} s, speedup "
                  f"{_ratio(of, cpu, 'dask_critical_path_s')}")
        # the ceiling: the same shards, one after the other in one process against side by
        # side in one process each (no Dask, no driver work at all)
        print(f"  control (no Dask): one process, shards one after the other: CPU "
              f"{median('apart_cpu_s'):.2f} s, wall {median('apart_wall_s'):.2f} s; one process "
              f"per shard together: busiest {median('control_critical_path_s'):.2f} s CPU, wall "
              f"{median('control_wall_s'):.2f} s")
        print(f"  ceiling (control speedup): CPU "
              f"{_ratio(of, 'apart_cpu_s', 'control_critical_path_s')}"
              f", wall {_ratio(of, 'apart_wall_s', 'control_wall_s')}")
        print(f"  control CPU speedup against the frozen serial replay "
              f"{_ratio(of, 'frozen_serial_cpu_s', 'control_critical_path_s')}"
              f"; control's busiest + Dask's driver against it "
              f"{_ratio(of, 'frozen_serial_cpu_s', _control_plus_driver)}"
              f"; one process replaying all shards / frozen serial CPU "
              f"{_ratio(of, 'apart_cpu_s', 'frozen_serial_cpu_s')}")
        # cores the run's processes got, CPU seconds per wall second: one process against all
        rate_apart = [row["apart_cpu_s"] / row["apart_wall_s"] for row in of]
        rate_together = [sum(row["control_worker_cpu_s"]) / row["control_wall_s"] for row in of]
        print(f"  cores used (CPU s / wall s, medians): one process "
              f"{statistics.median(rate_apart):.2f}, all together "
              f"{statistics.median(rate_together):.2f}")
        print(f"  per-query CPU together / one process replaying all shards: sums "
              f"{median('query_cpu_together_over_alone'):.3f} (range "
              f"{min(r['query_cpu_together_over_alone'] for r in of):.3f}-"
              f"{max(r['query_cpu_together_over_alone'] for r in of):.3f}), median per query "
              f"{median('query_cpu_median_ratio'):.3f}")
        # how close Dask gets to the control: control busiest / Dask critical path, control
        # wall together / Dask wall (1.0 = Dask at the ceiling)
        print(f"  dask / control: CPU "
              f"{_ratio(of, 'control_critical_path_s', 'dask_critical_path_s')}"
              f", wall {_ratio(of, 'control_wall_s', 'dask_wall_s')}; "
              f"dask's busiest worker / control's busiest "
              f"{_ratio(of, _busiest, 'control_critical_path_s')}; driver share of "
              f"dask's critical path "
              f"{_ratio(of, 'dask_driver_cpu_s', 'dask_critical_path_s')}")


def _summarise_files(paths: list[str]) -> None:
    """``--summarise FILE...``: the summary of saved runs (each file: the script's output, or
    only its JSON lines), per file, then pooled over all the files' rounds."""
    pooled = []
    for path in paths:
        rows = [json.loads(line) for line in Path(path).read_text().splitlines()
                if line.startswith("{")]
        if not rows:
            raise ValueError(f"--summarise: no per-round JSON lines in {path!r}")
        summarise(rows, f"{path}: ")
        pooled += rows
    if len(paths) > 1:
        summarise(pooled, f"all {len(paths)} files pooled: ")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("data_root", nargs="?", default="../shared/datasets")
    parser.add_argument("workers", nargs="?", type=int, default=2)
    parser.add_argument("rounds", nargs="?", type=int, default=5)
    parser.add_argument("--cold", action="store_true")
    parser.add_argument("--own-sessions", action="store_true")
    parser.add_argument("--summarise", nargs="+", metavar="FILE",
                        help="summarise saved runs (their per-round JSON lines) instead")
    args = parser.parse_args()
    if args.summarise:
        _summarise_files(args.summarise)
        return
    if args.workers < 2:
        parser.error(f"WORKERS must be at least 2, got {args.workers}")
    if args.rounds < 1:
        parser.error(f"ROUNDS must be at least 1, got {args.rounds}")
    if (args.rounds - 1) % len(ORDERS):
        print(f"note: {args.rounds - 1} later rounds, not a multiple of {len(ORDERS)}: the "
              f"order is balanced over every {len(ORDERS)} rounds only", flush=True)
    workers, rounds = args.workers, args.rounds
    trace = load_locomo(Path(args.data_root) / "locomo" / "locomo_dev.json")
    from distributed import Client

    # the control's shards are the ones a sharded replay of WORKERS workers sends (same split)
    shard_bytes = [pickle.dumps(s, protocol=pickle.HIGHEST_PROTOCOL)
                   for s in _split(trace, _shards(trace, workers))]
    started = time.perf_counter()
    own = args.own_sessions
    control = Control(shard_bytes, own_sessions=own)
    print(f"control: {len(shard_bytes)} plain processes (spawn, warmed up, heap frozen"
          f"{', each in a session of its own' if own else ''}): "
          f"{time.perf_counter() - started:.1f} s to start", flush=True)
    started = time.perf_counter()
    with dask_address("dask", None, workers) as address, Client(address) as client:
        print(f"LocalCluster of {workers} (warmed up): {time.perf_counter() - started:.1f} s "
              f"to start, load {os.getloadavg()[0]:.1f}", flush=True)
        _warm_worker()  # the driver as the workers were: a tiny replay, untimed
        rows = []
        for r in range(rounds):
            load = os.getloadavg()[0]
            row = {"round": r, "phase": FIRST if r == 0 else LATER, "load_1min": round(load, 2)}

            def run_serial():
                global serial
                serial, s_wall, s_cpu, _ = timed(
                    client, lambda: replay(trace, UNTIMED, progress=False))
                row.update(serial_wall_s=round(s_wall, 2), serial_cpu_s=round(s_cpu, 2))
                gc.collect()
                gc.freeze()  # the control: the driver's heap frozen, as the workers' is
                try:
                    _, f_wall, f_cpu, _ = timed(
                        client, lambda: replay(trace, UNTIMED, progress=False))
                finally:
                    gc.unfreeze()
                row.update(frozen_serial_wall_s=round(f_wall, 2),
                           frozen_serial_cpu_s=round(f_cpu, 2))

            def run_sharded():
                global sharded
                sharded, d_wall, d_cpu, d_workers = timed(
                    client, lambda: replay(trace, UNTIMED, progress=False, executor="dask",
                                           address=address, n_workers=workers))
                row.update(dask_wall_s=round(d_wall, 2), dask_driver_cpu_s=round(d_cpu, 2),
                           dask_worker_cpu_s=sorted(round(v, 3) for v in d_workers.values()),
                           dask_critical_path_s=round(max(d_workers.values()) + d_cpu, 3))

            def run_together():
                global control_results
                wall, shards, control_results = control.together()
                row.update(control_wall_s=round(wall, 2),
                           control_worker_cpu_s=[round(c, 3) for c, _ in shards],
                           control_critical_path_s=round(max(c for c, _ in shards), 3))
                row["_together"] = [q for _, q in shards]

            def run_apart():
                wall, shards, _ = control.apart(r % len(shard_bytes))
                row.update(apart_wall_s=round(wall, 2),
                           apart_cpu_s=round(sum(c for c, _ in shards), 3),
                           apart_shard_cpu_s=[round(c, 3) for c, _ in shards])
                row["_apart"] = [q for _, q in shards]

            kinds = [run_serial, run_sharded, run_together, run_apart]
            runs = [kinds[i] for i in ORDERS[r % len(ORDERS)]]
            row["order"] = [f.__name__[4:] for f in runs]
            for run in runs:
                run()
            sums, median_q = _inflation(row.pop("_apart"), row.pop("_together"))
            row.update(query_cpu_together_over_alone=round(sums, 3),
                       query_cpu_median_ratio=round(median_q, 3),
                       load_1min_end=round(os.getloadavg()[0], 2))
            rows.append(row)
            print(json.dumps(row), flush=True)
        for got, want in zip(comparable(sharded), comparable(serial)):
            pd.testing.assert_frame_equal(got, want)
        merged = _merge_shards([pickle.loads(b) for b in control_results])
        pd.testing.assert_frame_equal(merged["candidates"], serial.candidates)
        pd.testing.assert_frame_equal(merged["metrics"], serial.metrics)
    control.close()
    cold = None
    if args.cold:
        t = time.perf_counter()
        replay(trace, UNTIMED, progress=False, executor="dask", n_workers=workers)
        cold = round(time.perf_counter() - t, 2)

    print(f"{len(trace.queries)} queries, {sharded.manifest['executor']}, frames equal "
          f"(the control's candidates and metrics too)")
    summarise(rows)
    if cold is not None:
        print(f"--cold (not a phase above): replay(executor='dask') starting its own cluster, "
              f"its start included: {cold:.2f} s wall")
    print(f"load average at the end: {os.getloadavg()}")


if __name__ == "__main__":
    main()
