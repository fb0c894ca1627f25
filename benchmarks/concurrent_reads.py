"""Eight clients on one store: latency of search, get and context (issue 14, item 9).

Compares source trees (e.g. ``main`` and a branch) in one run. For every round and every tree,
a fresh Python process (``PYTHONPATH`` = that tree) builds a durable store of ``--items`` seeded
items, then ``--clients`` threads send ``--ops`` requests each, either to a
:class:`memlab.Memory` in the process (``threads``) or over loopback HTTP to the service
(``http``: uvicorn in a thread, ``httpx`` clients; what ``memlab serve`` runs). Two mixes:

* ``reads``: per ten requests three searches, three gets, three contexts and one add;
* ``load``: the service load test's mix (``tests/test_service.py -m slow -k load``) with gets in
  place of its cache sets: per four requests one add, one context, one search, one get;
* ``readonly``: searches, gets and contexts in equal parts, no write (nothing drains the
  reinforcement queue but the reads themselves, :mod:`memlab._reinforce`).

Trees alternate within each round (A B, then B A, ...) so that a change in the machine's load
hits both. Each process reports every request's latency; the table gives, per tree, mode, mix and
request kind, the median over rounds of p50 and p99 (ms), and the ratio of the last tree to the
first. Each process also reports its CPU time per request (``time.process_time``), and in
``http`` mode the server's part of it: the process's CPU minus the client threads' own
(``time.thread_time`` at each client's end), i.e. uvicorn's thread and the route workers.

Run::

    python benchmarks/concurrent_reads.py --trees /path/to/main /path/to/branch --rounds 3
    python benchmarks/concurrent_reads.py --trees . .+group-commit --modes threads

A tree written ``PATH+group-commit`` is that tree with ``MemoryStore(fsync_outside_lock=True)``
for the in-process clients (``threads``; the HTTP service keeps its default). A tree written
``PATH+h11`` serves with uvicorn's pure-Python stack (``--loop asyncio --http h11``) even when
uvloop and httptools are installed (``--http-stack h11`` does that for every tree)::

    python benchmarks/concurrent_reads.py --trees /path/to/base+h11 /path/to/base . --modes http

The numbers depend on the machine and its load (this project's machine is 2 shared cores):
compare the trees of one run, never numbers of different runs.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

KINDS = ("search", "get", "context", "add")
MIXES = {"reads": ["search", "get", "context"] * 3 + ["add"],
         "load": ["add", "context", "search", "get"],
         "readonly": ["search", "get", "context"]}
WORDS = [f"w{i}" for i in range(400)]


def _content(rng, i: int) -> str:
    return f"note {i} " + " ".join(rng.choice(WORDS) for _ in range(10))


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(len(values) * q))]


# ---------------------------------------------------------------------------- one process
def worker(mode: str, mix: str, clients: int, ops: int, items: int, seed: int) -> dict:
    """Build a store, run the clients, return latencies per kind (runs in the tree's memlab)."""
    import random

    from memlab import Memory, MemoryStore

    rng = random.Random(seed)
    tmp = Path(tempfile.mkdtemp(prefix="memlab-concurrent-"))
    path = tmp / "m.db"
    store = MemoryStore(path=str(path))
    loader = Memory(store=store, surfacing_mode="router", config="default")
    loader.add_many([{"content": _content(rng, i), "item_id": f"i{i}"} for i in range(items)])
    store.close()
    latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
    errors: list[str] = []
    plan = MIXES[mix]
    start = threading.Barrier(clients)
    client_cpu: list[float] = []  # CPU seconds of each client thread, at its end

    def queries(n: int):
        r = random.Random(seed * 1000 + n)
        return lambda: " ".join(r.choice(WORDS) for _ in range(3)), \
            lambda: f"i{r.randrange(items)}"

    if mode == "threads":
        options = {"fsync_outside_lock": True} if os.environ.get(GROUP_COMMIT) else {}
        store = MemoryStore(path=str(path), compact_after=None, **options)
        mem = Memory(store=store, surfacing_mode="router", config="default")

        def client(n: int) -> None:
            query, item = queries(n)
            start.wait()
            for i in range(ops):
                kind = plan[(i + n) % len(plan)]
                t = time.perf_counter()
                if kind == "search":
                    mem.search(query())
                elif kind == "get":
                    mem.get(item())
                elif kind == "context":
                    mem.get_working_context(f"s{n}", query())
                else:
                    mem.add(f"client {n} note {i} {query()}")
                latencies[kind].append((time.perf_counter() - t) * 1e3)
            client_cpu.append(time.thread_time())

        cpu = time.process_time()
        elapsed = _run(clients, client, errors)
        cpu = time.process_time() - cpu
        store.close()
    else:
        import httpx
        import uvicorn

        from memlab.service import ServiceState, create_app

        state = ServiceState(db_path=str(path), maintenance=False, compact_after=None)
        # "auto": what `memlab serve` runs (uvloop and httptools when installed, the service
        # extra); "h11": the pure-Python event loop and HTTP parser, forced
        stack = os.environ.get(HTTP_STACK, "auto")
        loop, http = ("asyncio", "h11") if stack == "h11" else ("auto", "auto")
        server = uvicorn.Server(uvicorn.Config(create_app(state), host="127.0.0.1", port=0,
                                               log_level="warning", loop=loop, http=http))
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.02)
        port = server.servers[0].sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}"

        def client(n: int) -> None:
            query, item = queries(n)
            with httpx.Client(base_url=url, timeout=120) as http:
                start.wait()
                for i in range(ops):
                    kind = plan[(i + n) % len(plan)]
                    t = time.perf_counter()
                    if kind == "search":
                        r = http.post("/v1/search", json={"query": query()})
                    elif kind == "get":
                        r = http.get(f"/v1/items/{item()}")
                    elif kind == "context":
                        r = http.post("/v1/context", json={"session_id": f"s{n}",
                                                           "query": query()})
                    else:
                        r = http.post("/v1/items", json={"content": f"client {n} note {i} "
                                                                    f"{query()}"})
                    latencies[kind].append((time.perf_counter() - t) * 1e3)
                    if r.status_code != 200:
                        errors.append(f"{kind} {r.status_code} {r.text[:80]}")
            client_cpu.append(time.thread_time())  # this client's own CPU (httpx)

        cpu = time.process_time()
        elapsed = _run(clients, client, errors)
        cpu = time.process_time() - cpu
        server.should_exit = True
        thread.join(30)
        state.store.close()
    requests = sum(len(v) for v in latencies.values())
    # CPU per request: the whole process, and the part outside the client threads (in http
    # mode: the server, uvicorn's thread and its worker threads; in threads mode: ~0)
    cpu_ms = {"process": cpu / requests * 1e3,
              "server": (cpu - sum(client_cpu)) / requests * 1e3}
    return {"seconds": elapsed, "errors": errors[:5], "cpu_ms": cpu_ms,
            "ms": {kind: {"p50": _percentile(v, 0.5), "p99": _percentile(v, 0.99), "n": len(v)}
                   for kind, v in latencies.items() if v}}


def _run(clients: int, client, errors: list[str]) -> float:
    def guarded(n: int) -> None:
        try:
            client(n)
        except BaseException as exc:  # noqa: BLE001 - reported with the results
            errors.append(f"{type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - started


# ---------------------------------------------------------------------------- the driver
GROUP_COMMIT = "MEMLAB_BENCH_GROUP_COMMIT"
HTTP_STACK = "MEMLAB_BENCH_HTTP_STACK"


def _tree_spec(tree: str) -> tuple[str, bool, str]:
    """``PATH``, ``PATH+group-commit`` or ``PATH+h11``: the source tree, whether its in-process
    store commits outside the lock, and its server's HTTP stack (``auto`` or ``h11``)."""
    if tree.endswith("+group-commit"):
        return tree[: -len("+group-commit")], True, "auto"
    if tree.endswith("+h11"):
        return tree[: -len("+h11")], False, "h11"
    return tree, False, "auto"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=[str(Path(__file__).parents[1])],
                        help="source trees to compare (each becomes PYTHONPATH)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--ops", type=int, default=300, help="requests per client")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--modes", nargs="+", default=["threads", "http"],
                        choices=["threads", "http"])
    parser.add_argument("--mixes", nargs="+", default=["reads", "load"], choices=sorted(MIXES))
    parser.add_argument("--http-stack", choices=["auto", "h11"], default="auto",
                        help="the server's event loop and HTTP parser in http mode: uvicorn's "
                             "choice (uvloop and httptools when installed, as `memlab serve`) "
                             "or asyncio and h11 forced (per tree: PATH+h11)")
    parser.add_argument("--json", help="also write every process's result here")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "MIX"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(*args.worker, args.clients, args.ops, args.items, seed=7)))
        return
    if os.path.exists("/proc/loadavg"):
        print("load average:", Path("/proc/loadavg").read_text().split()[:3], flush=True)
    runs = []
    for rnd in range(args.rounds):
        for mode in args.modes:
            for mix in args.mixes:
                trees = args.trees if rnd % 2 == 0 else list(reversed(args.trees))
                for tree in trees:
                    path, group_commit, stack = _tree_spec(tree)
                    env = dict(os.environ, PYTHONPATH=str(Path(path).resolve()))
                    env.pop(GROUP_COMMIT, None)
                    if group_commit:
                        env[GROUP_COMMIT] = "1"
                    env[HTTP_STACK] = args.http_stack if stack == "auto" else stack
                    out = subprocess.run(
                        [sys.executable, __file__, "--worker", mode, mix, "--clients",
                         str(args.clients), "--ops", str(args.ops), "--items", str(args.items)],
                        env=env, capture_output=True, text=True, check=True,
                        cwd=tempfile.gettempdir())
                    result = json.loads(out.stdout.strip().splitlines()[-1])
                    result.update(tree=tree, mode=mode, mix=mix, round=rnd)
                    runs.append(result)
                    cpu = result["cpu_ms"]
                    print(f"round {rnd} {mode:7s} {mix:5s} {Path(tree).name:18s} "
                          f"{result['seconds']:6.1f} s  cpu/request {cpu['process']:.2f} ms"
                          + (f" (server {cpu['server']:.2f})" if mode == "http" else "")
                          + "  " + "  ".join(
                              f"{k} {v['p50']:.2f}/{v['p99']:.2f}"
                              for k, v in result["ms"].items())
                          + (f"  ERRORS {result['errors']}" if result["errors"] else ""),
                          flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    print("\nmedian over rounds, ms (p50 / p99); ratio = last tree / first tree")
    first, last = args.trees[0], args.trees[-1]
    for mode in args.modes:
        for mix in args.mixes:
            for kind in KINDS:
                cells, med = [], {}
                for tree in args.trees:
                    rs = [r["ms"][kind] for r in runs if r["tree"] == tree and r["mode"] == mode
                          and r["mix"] == mix and kind in r["ms"]]
                    if not rs:
                        continue
                    med[tree] = (statistics.median(r["p50"] for r in rs),
                                 statistics.median(r["p99"] for r in rs))
                    cells.append(f"{Path(tree).name}: {med[tree][0]:7.2f} / {med[tree][1]:7.2f}")
                if not cells:
                    continue
                ratio = ""
                if first in med and last in med and first != last:
                    ratio = (f"  ratio p50 {med[last][0] / med[first][0]:.2f}, "
                             f"p99 {med[last][1] / med[first][1]:.2f}")
                print(f"{mode:7s} {mix:5s} {kind:7s} " + "   ".join(cells) + ratio)
    seconds = {tree: statistics.median(r["seconds"] for r in runs if r["tree"] == tree)
               for tree in args.trees}
    print("median seconds per process run:", {Path(t).name: round(s, 1)
                                              for t, s in seconds.items()})
    for mode in args.modes:
        for part in (("process", "server") if mode == "http" else ("process",)):
            cpu = {Path(t).name: round(statistics.median(
                r["cpu_ms"][part] for r in runs if r["tree"] == t and r["mode"] == mode), 2)
                for t in args.trees}
            print(f"median CPU ms per request, {mode}, {part}:", cpu)


if __name__ == "__main__":
    main()
