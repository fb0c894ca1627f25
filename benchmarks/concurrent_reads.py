"""Eight clients on one store: latency of search, get and context (issue 14, item 9).

Compares source trees (e.g. ``main`` and a branch) in one run. For every round and every tree,
a fresh Python process (``PYTHONPATH`` = that tree) builds a durable store of ``--items`` seeded
items, then ``--clients`` threads send ``--ops`` requests each, either to a
:class:`memlab.Memory` in the process (``threads``) or over loopback HTTP to the service
(``http``: uvicorn in a thread, ``httpx`` clients; what ``memlab serve`` runs), or, in
``http-proc`` (the issue's 8-client load test as an outside check runs it), to a real
``memlab serve --db STORE`` in its own process, from ``--clients`` threads of another process:
the clients' own CPU (``httpx``) no longer competes with the server for its GIL. Mixes:

* ``reads``: per ten requests three searches, three gets, three contexts and one add;
* ``load``: the service load test's mix (``tests/test_service.py -m slow -k load``) with gets in
  place of its cache sets: per four requests one add, one context, one search, one get;
* ``readonly``: searches, gets and contexts in equal parts, no write (nothing drains the
  reinforcement queue but the reads themselves, :mod:`memlab._reinforce`).

Trees alternate within each round (A B, then B A, ...) so that a change in the machine's load
hits both. Each process reports every request's latency; the table gives, per tree, mode, mix and
request kind, the median over rounds of p50 and p99 (ms), and each tree's ratio to the first
tree's. Then the paired view: in each round, each tree's p50 and p99 over the first tree's; the
median of those ratios and the number of rounds the tree was ahead in. Only rounds every tree
ran count. ``--combine A.json B.json`` prints the same over the runs of earlier ``--json`` files
(a round there is a file and its round number, as each file counts from 0; ``--trees`` picks
the trees to show, the first being the one compared with). Each process also reports its
CPU time per request (``time.process_time``), and in ``http`` mode the server's part of it:
the process's CPU minus the client threads' own (``time.thread_time`` at each client's end),
i.e. uvicorn's thread and the route workers.

``http-proc`` in detail: for every run the tree's own memlab builds the store (a fresh file),
then ``python -m memlab serve --db FILE --port P`` plus ``--serve-options`` (the same for
every tree; default ``--no-maintenance --compact-after 0``, as the ``http`` mode's service) is
started with that tree on ``PYTHONPATH`` and the flags of ``--serve-extra`` for trees written
``PATH+serve=FLAGS`` (e.g. ``.+serve=--switch-interval=0.001``). The client process (this
file, ``--http-clients``) waits for ``/health``; each client sends ``--warmup`` requests of its
mix, all clients meet at a barrier, and only then are latencies recorded. The server's CPU per
request is the change of its ``utime + stime`` (``/proc/PID/stat``, the counters
``getrusage`` reports) between that barrier and the last answer, divided by the measured
requests; the load average is read at both ends.

Run::

    python benchmarks/concurrent_reads.py --trees /path/to/main /path/to/branch --rounds 3
    python benchmarks/concurrent_reads.py --trees . .+group-commit --modes threads
    python benchmarks/concurrent_reads.py --trees /path/to/base . --modes http-proc --rounds 3

A tree written ``PATH+group-commit`` is that tree with ``MemoryStore(fsync_outside_lock=True)``
for the in-process clients (``threads``) or ``memlab serve --group-commit`` (``http-proc``).
A tree written ``PATH+reads-during-fsync`` (after any other suffix) is that tree with
``MemoryStore(reads_during_fsync=True)``, in ``threads`` only. A tree flag that a mode cannot
honour is refused (``+group-commit`` in ``http``, ``+reads-during-fsync`` outside ``threads``,
``+serve=`` outside ``http-proc``, ``+h11`` outside ``http``), never dropped. A client that fails breaks
the start barrier for the others, and the benchmark stops with its error; ``--timeout``
(default 600 s) bounds the barrier and every child process. A tree written
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
TIMEOUT = 600.0  # seconds: the clients' start barrier, and each child process (--timeout)
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
def build_store(path: str, items: int, seed: int) -> None:
    """Write a durable store of ``items`` seeded items to ``path`` (runs in the tree's memlab)."""
    import random

    from memlab import Memory, MemoryStore

    rng = random.Random(seed)
    store = MemoryStore(path=path)
    loader = Memory(store=store, surfacing_mode="router", config="default")
    loader.add_many([{"content": _content(rng, i), "item_id": f"i{i}"} for i in range(items)])
    store.close()


def worker(mode: str, mix: str, clients: int, ops: int, items: int, seed: int,
           timeout: float = TIMEOUT) -> dict:
    """Build a store, run the clients, return latencies per kind (runs in the tree's memlab).
    The clients start together; one that fails before the start (or a start not reached in
    ``timeout`` seconds) breaks it for all, and :func:`_run` raises."""
    import random

    from memlab import Memory, MemoryStore

    tmp = Path(tempfile.mkdtemp(prefix="memlab-concurrent-"))
    path = tmp / "m.db"
    build_store(str(path), items, seed)
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
        if os.environ.get(READS_DURING_FSYNC):
            options["reads_during_fsync"] = True
        store = MemoryStore(path=str(path), compact_after=None, **options)
        mem = Memory(store=store, surfacing_mode="router", config="default")

        def client(n: int) -> None:
            query, item = queries(n)
            start.wait(timeout)
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
        try:
            elapsed = _run(clients, client, start)
            cpu = time.process_time() - cpu  # up to the last answer, not the shutdown
        finally:
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
                start.wait(timeout)
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
        try:
            elapsed = _run(clients, client, start)
            cpu = time.process_time() - cpu  # up to the last answer, not the shutdown
        finally:
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


def _proc_cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far (``/proc/PID/stat``: the counters
    that ``getrusage`` reports for it)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except OSError:
        return None


def _running(pid: int) -> bool:
    """Whether process ``pid`` still runs: an exited child its parent has not yet waited for
    is a zombie, whose ``/proc`` entry stays (state ``Z``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def http_clients(url: str, server_pid: int, mix: str, clients: int, ops: int, warmup: int,
                 items: int, seed: int, ready_timeout: float = 120.0,
                 timeout: float = TIMEOUT) -> dict:
    """The client side of ``http-proc``: ``clients`` threads of this process send ``warmup``
    unmeasured requests each, meet at a barrier, then ``ops`` measured ones to the server at
    ``url`` (process ``server_pid``, whose CPU is read at the barrier and at the end).

    A client that raises (in its warm-up or later) breaks the barrier, so the others do not
    wait for it; the barrier also gives up after ``timeout`` seconds. Either way this raises
    RuntimeError naming what failed (:func:`_run`), and nothing is reported as measured."""
    import random

    import httpx

    deadline = time.monotonic() + ready_timeout
    while True:  # the server is up once /health answers
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        if not _running(server_pid):
            raise RuntimeError(f"the server (pid {server_pid}) exited before it answered")
        if time.monotonic() > deadline:
            raise RuntimeError(f"the server at {url} did not answer /health in "
                               f"{ready_timeout:.0f} s")
        time.sleep(0.05)
    latencies: dict[str, list[float]] = {kind: [] for kind in KINDS}
    errors: list[str] = []
    plan = MIXES[mix]
    marks: dict[str, float] = {}

    def measured_start() -> None:  # run by one thread once every client has warmed up
        marks.update(server=_proc_cpu_seconds(server_pid), cpu=time.process_time(),
                     wall=time.perf_counter())

    barrier = threading.Barrier(clients, action=measured_start)

    def client(n: int) -> None:
        r = random.Random(seed * 1000 + n)
        warm = random.Random(seed * 1000 + n + 500_000)

        def send(http, kind: str, i: int, rng) -> int:
            query = " ".join(rng.choice(WORDS) for _ in range(3))
            if kind == "search":
                return http.post("/v1/search", json={"query": query})
            if kind == "get":
                return http.get(f"/v1/items/i{rng.randrange(items)}")
            if kind == "context":
                return http.post("/v1/context", json={"session_id": f"s{n}", "query": query})
            return http.post("/v1/items", json={"content": f"client {n} note {i} {query}"})

        with httpx.Client(base_url=url, timeout=min(120.0, timeout)) as http:
            for i in range(warmup):
                send(http, plan[(i + n) % len(plan)], -1 - i, warm)
            barrier.wait(timeout)
            for i in range(ops):
                kind = plan[(i + n) % len(plan)]
                t = time.perf_counter()
                resp = send(http, kind, i, r)
                latencies[kind].append((time.perf_counter() - t) * 1e3)
                if resp.status_code != 200:
                    errors.append(f"{kind} {resp.status_code} {resp.text[:80]}")

    load_start = _loadavg()
    _run(clients, client, barrier)
    end = time.perf_counter()
    server_cpu = _proc_cpu_seconds(server_pid) - marks.get("server", float("nan"))
    cpu = time.process_time() - marks.get("cpu", float("nan"))
    requests = sum(len(v) for v in latencies.values()) or 1
    return {"seconds": end - marks.get("wall", float("nan")), "errors": errors[:5],
            "cpu_ms": {"server": server_cpu / requests * 1e3, "clients": cpu / requests * 1e3},
            "loadavg": [load_start, _loadavg()],
            "ms": {kind: {"p50": _percentile(v, 0.5), "p99": _percentile(v, 0.99), "n": len(v)}
                   for kind, v in latencies.items() if v}}


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def run_http_proc(tree: str, serve_flags: list[str], mix: str, args) -> dict:
    """One ``http-proc`` run: build the store with ``tree``'s memlab, serve it with ``tree``'s
    ``memlab serve`` in its own process, drive it from a client process; return the clients'
    report (latencies, server CPU per request, load averages)."""
    import shutil
    import signal

    tmp = Path(tempfile.mkdtemp(prefix="memlab-http-proc-"))
    db = tmp / "m.db"
    env = dict(os.environ, PYTHONPATH=str(Path(tree).resolve()))
    _child([sys.executable, __file__, "--build-store", str(db), "--items", str(args.items)],
           env, args.timeout, f"building the store with {tree}")
    port = _free_port()
    log = open(tmp / "server.log", "w+")
    server = subprocess.Popen(
        [sys.executable, "-m", "memlab", "serve", "--db", str(db), "--port", str(port),
         *args.serve_options, *serve_flags],
        env=env, stdout=log, stderr=subprocess.STDOUT, cwd=tempfile.gettempdir())
    try:
        client_env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        try:
            return _child(
                [sys.executable, __file__, "--http-clients", f"http://127.0.0.1:{port}",
                 str(server.pid), mix, "--clients", str(args.clients), "--ops",
                 str(args.ops), "--warmup", str(args.warmup), "--items", str(args.items),
                 "--timeout", str(args.timeout)],
                client_env, args.timeout, "the http-proc clients")
        except RuntimeError as exc:
            log.seek(0)
            raise RuntimeError(f"{exc}\nserver log: {log.read()[-2000:]}") from None
    finally:
        if server.poll() is None:
            server.send_signal(signal.SIGINT)  # uvicorn's graceful shutdown closes the store
            try:
                server.wait(60)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def _child(argv: list[str], env: dict, timeout: float, what: str) -> dict:
    """Run this file's child process ``argv``; return the JSON of its last line of output.
    RuntimeError (with the end of its stderr) if it fails or runs longer than ``timeout``
    seconds (then it is killed)."""
    try:
        out = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout,
                             cwd=tempfile.gettempdir())
    except subprocess.TimeoutExpired as exc:
        stderr = exc.stderr.decode(errors="replace") if isinstance(exc.stderr, bytes) \
            else exc.stderr or ""
        raise RuntimeError(f"{what} did not finish in {timeout:g} s (--timeout), killed: "
                           f"{stderr[-2000:]}") from None
    if out.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {out.returncode}): {out.stderr[-2000:]}")
    lines = out.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


def _run(clients: int, client, barrier: threading.Barrier) -> float:
    """Run ``client(n)`` in ``clients`` threads; return the wall seconds.

    A client that raises aborts ``barrier`` (where the others meet before the measured part),
    so none of them waits for it forever; once all have ended, RuntimeError names every
    client's failure (a broken barrier's too). HTTP error statuses are not failures: the
    clients list them in ``errors``, reported with the results."""
    failures: list[str] = []
    stopped: list[int] = []  # clients whose barrier broke (another failed, or the timeout)

    def guarded(n: int) -> None:
        try:
            client(n)
        except threading.BrokenBarrierError:
            barrier.abort()
            stopped.append(n)
        except BaseException as exc:  # noqa: BLE001 - raised below, once all have ended
            barrier.abort()
            failures.append(f"client {n}: {type(exc).__name__}: {exc}")

    threads = [threading.Thread(target=guarded, args=(n,)) for n in range(clients)]
    started = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise RuntimeError(f"{len(failures)} of {clients} clients failed: "
                           + "; ".join(sorted(failures)[:8])
                           + (f" ({len(stopped)} more stopped at the broken start barrier)"
                              if stopped else ""))
    if stopped:
        raise RuntimeError(f"{len(stopped)} of {clients} clients gave up at the start barrier: "
                           f"the others did not reach it within the timeout (--timeout)")
    return time.perf_counter() - started


# ---------------------------------------------------------------------------- the driver
GROUP_COMMIT = "MEMLAB_BENCH_GROUP_COMMIT"
READS_DURING_FSYNC = "MEMLAB_BENCH_READS_DURING_FSYNC"
HTTP_STACK = "MEMLAB_BENCH_HTTP_STACK"


def _tree_spec(tree: str) -> tuple[str, bool, str, list[str], bool]:
    """``PATH``, ``PATH+group-commit``, ``PATH+h11`` or ``PATH+serve=FLAGS``, each optionally
    followed by ``+reads-during-fsync``: the source tree, whether its in-process store commits
    outside the lock, its server's HTTP stack (``auto`` or ``h11``), extra ``memlab serve``
    flags for ``http-proc`` (comma-separated in FLAGS), and whether its in-process store admits
    readers during a write's fsync (``MemoryStore(reads_during_fsync=True)``)."""
    reads_during_fsync = tree.endswith("+reads-during-fsync")
    if reads_during_fsync:
        tree = tree[: -len("+reads-during-fsync")]
    flags: list[str] = []
    if "+serve=" in tree:
        tree, _, extra = tree.partition("+serve=")
        flags = [f for f in extra.split(",") if f]
        if not flags:
            raise ValueError(f"tree {tree!r}: +serve= needs at least one memlab serve flag")
    group_commit, stack = False, "auto"
    if tree.endswith("+group-commit"):
        tree, group_commit = tree[: -len("+group-commit")], True
    elif tree.endswith("+h11"):
        tree, stack = tree[: -len("+h11")], "h11"
    # PYTHONPATH=PATH falls back to the installed memlab when PATH holds none: a mistyped path
    # or suffix would measure another tree under this one's name
    if not (Path(tree) / "memlab" / "__init__.py").is_file():
        raise ValueError(f"tree {tree!r}: no memlab source tree there (memlab/__init__.py is "
                         f"missing); the suffixes are +group-commit, +h11 and +serve=FLAGS, "
                         f"then +reads-during-fsync")
    return tree, group_commit, stack, flags, reads_during_fsync


def _unhonoured(mode: str, group_commit: bool, stack: str, serve_flags: list[str],
                http_stack: str = "auto", reads_during_fsync: bool = False) -> str | None:
    """Why ``mode`` cannot run a tree as its spec asks (:func:`_tree_spec`), or None.

    ``threads`` runs no server: no ``+serve=``, no ``h11``. ``http`` serves in the worker
    process with its ``ServiceState`` defaults: no ``+serve=``, no ``+group-commit``.
    ``http-proc`` runs ``memlab serve`` (``+group-commit`` becomes its ``--group-commit``):
    no ``h11``. Only ``threads`` builds the store its clients use: ``+reads-during-fsync``
    there alone."""
    if reads_during_fsync and mode != "threads":
        return "+reads-during-fsync is a MemoryStore option of the clients' own store, which " \
               "only threads builds (no service or memlab serve flag sets it)"
    if serve_flags and mode != "http-proc":
        return "+serve= flags are `memlab serve` flags, which only http-proc runs"
    if group_commit and mode == "http":
        return "+group-commit is not applied to the in-process server (http-proc maps it to " \
               "`memlab serve --group-commit`, threads to the clients' store)"
    if stack == "h11" and mode == "threads":
        return "+h11 is an HTTP stack and threads runs no server"
    if (stack == "h11" or http_stack == "h11") and mode == "http-proc":
        return "http-proc runs `memlab serve` as a user does (uvicorn's choice of stack): " \
               "h11 cannot be forced there"
    return None


#: what each mode's runs measure CPU of (their ``cpu_ms`` keys)
CPU_PARTS = {"threads": ("process",), "http": ("process", "server"),
             "http-proc": ("server", "clients")}


def _saved_runs(name: str) -> list[dict]:
    """The runs a ``--json`` file holds, checked: a list of runs, each naming its tree, mode,
    mix and round, with numeric ``seconds``, ``cpu_ms`` and per-kind ``ms`` (p50, p99, n);
    ValueError saying what is wrong (the file, its JSON, or the first bad run)."""
    try:
        runs = json.loads(Path(name).read_text())
    except OSError as exc:
        raise ValueError(f"cannot read it ({exc.strerror or exc})") from None
    except ValueError as exc:
        raise ValueError(f"not JSON ({exc})") from None
    if not isinstance(runs, list) or not runs:
        raise ValueError("not a --json file of this benchmark (a non-empty list of runs)")

    def number(value) -> bool:
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    for i, r in enumerate(runs):
        ok = (isinstance(r, dict) and all(isinstance(r.get(k), str) for k in ("tree", "mode",
                                                                              "mix"))
              and r["mode"] in CPU_PARTS
              and isinstance(r.get("round"), int) and number(r.get("seconds"))
              and isinstance(r.get("cpu_ms"), dict)
              and all(number(r["cpu_ms"].get(part)) for part in CPU_PARTS[r["mode"]])
              and isinstance(r.get("ms"), dict)
              and all(isinstance(v, dict) and all(number(v.get(k)) for k in ("p50", "p99", "n"))
                      for v in r["ms"].values()))
        if not ok:
            raise ValueError(f"run {i} is not one this benchmark writes (tree, mode of "
                             f"{sorted(CPU_PARTS)}, mix and round; numeric seconds, the mode's "
                             f"cpu_ms and ms p50/p99/n): {str(r)[:200]}")
    return runs


def _label(tree: str) -> str:
    """A short name of a ``--trees`` entry for the tables (its last path component)."""
    name = Path(tree).name
    return name if name not in ("", ".", "..") else tree


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trees", nargs="+", default=None,
                        help="source trees to compare (each becomes PYTHONPATH; default: this "
                             "file's tree); with --combine: the trees to show, the first the "
                             "one the others are compared with (default: all, in file order)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--ops", type=int, default=300, help="requests per client")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--modes", nargs="+", default=["threads", "http"],
                        choices=["threads", "http", "http-proc"])
    parser.add_argument("--mixes", nargs="+", default=["reads", "load"], choices=sorted(MIXES))
    parser.add_argument("--http-stack", choices=["auto", "h11"], default="auto",
                        help="the server's event loop and HTTP parser in http mode: uvicorn's "
                             "choice (uvloop and httptools when installed, as `memlab serve`) "
                             "or asyncio and h11 forced (per tree: PATH+h11)")
    parser.add_argument("--warmup", type=int, default=30, help="http-proc: unmeasured requests "
                        "per client before the measured ones (default: 30)")
    parser.add_argument("--serve-options", default="--no-maintenance --compact-after 0",
                        help="http-proc: options of `memlab serve` for every tree (default: "
                             "'--no-maintenance --compact-after 0'); per tree: PATH+serve=FLAGS")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds before a "
                        "child process is killed and the clients' start barrier gives up; "
                        f"either fails the benchmark (default: {TIMEOUT:g})")
    parser.add_argument("--json", help="also write every process's result here")
    parser.add_argument("--combine", nargs="+", metavar="JSON", help="run nothing: print the "
                        "table over the runs of these --json files together")
    parser.add_argument("--worker", nargs=2, metavar=("MODE", "MIX"), help=argparse.SUPPRESS)
    parser.add_argument("--build-store", metavar="FILE", help=argparse.SUPPRESS)
    parser.add_argument("--http-clients", nargs=3, metavar=("URL", "PID", "MIX"),
                        help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("rounds", "clients", "ops", "items"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.warmup < 0:
        parser.error(f"--warmup must be >= 0, got {args.warmup}")
    if not args.timeout > 0:
        parser.error(f"--timeout must be > 0 seconds, got {args.timeout}")
    args.serve_options = args.serve_options.split()
    if args.combine:  # the table over runs saved by earlier --json runs (rounds paired)
        if len({Path(name).resolve() for name in args.combine}) < len(args.combine):
            parser.error(f"--combine: a file is named twice ({args.combine}): its rounds "
                         f"would count twice")
        runs = []
        for n, name in enumerate(args.combine):  # rounds restart at 0 in each file:
            try:
                saved = _saved_runs(name)
            except ValueError as exc:
                parser.error(f"--combine {name!r}: {exc}")
            runs.extend(dict(r, file=n) for r in saved)  # a round is (file, round)
        trees = args.trees or list(dict.fromkeys(r["tree"] for r in runs))
        missing = [t for t in trees if not any(r["tree"] == t for r in runs)]
        if missing:
            parser.error(f"--trees {missing[0]!r} has no runs in the --combine files (they "
                         f"hold {sorted(set(r['tree'] for r in runs))})")
        runs = [r for r in runs if r["tree"] in trees]
        modes = list(dict.fromkeys(r["mode"] for r in runs))
        mixes = list(dict.fromkeys(r["mix"] for r in runs))
        print(f"{len(runs)} runs from {len(args.combine)} file(s), of {len(trees)} tree(s)")
        summarise(runs, trees, modes, mixes)
        return
    args.trees = args.trees or [str(Path(__file__).parents[1])]
    labels = [_label(tree) for tree in args.trees]
    if len(set(labels)) < len(labels):  # the tables and the JSON summaries key on the label
        parser.error(f"--trees: two trees share a name in the tables ({labels}): give each a "
                     f"folder of its own name (a symlink will do) or a distinct suffix")
    for tree in args.trees:
        try:
            _, group_commit, stack, flags, reads_during_fsync = _tree_spec(tree)
        except ValueError as exc:
            parser.error(str(exc))
        for mode in args.modes:  # a flag the mode cannot honour is refused, never dropped
            problem = _unhonoured(mode, group_commit, stack, flags, args.http_stack,
                                  reads_during_fsync)
            if problem:
                parser.error(f"--modes {mode}: {problem} (tree {tree!r}, --http-stack "
                             f"{args.http_stack}); run that mode without it")
    if args.build_store:
        build_store(args.build_store, args.items, seed=7)
        return
    if args.http_clients:
        url, pid, mix = args.http_clients
        if mix not in MIXES:
            parser.error(f"--http-clients: unknown mix {mix!r}")
        print(json.dumps(http_clients(url, int(pid), mix, args.clients, args.ops, args.warmup,
                                      args.items, seed=7, timeout=args.timeout)))
        return
    if args.worker:
        print(json.dumps(worker(*args.worker, args.clients, args.ops, args.items, seed=7,
                                timeout=args.timeout)))
        return
    if os.path.exists("/proc/loadavg"):
        print("load average:", Path("/proc/loadavg").read_text().split()[:3], flush=True)
    runs = []
    for rnd in range(args.rounds):
        for mode in args.modes:
            for mix in args.mixes:
                trees = args.trees if rnd % 2 == 0 else list(reversed(args.trees))
                for tree in trees:
                    path, group_commit, stack, serve_flags, reads_during_fsync = \
                        _tree_spec(tree)
                    if mode == "http-proc":
                        if group_commit and "--group-commit" not in serve_flags:
                            serve_flags = [*serve_flags, "--group-commit"]
                        result = run_http_proc(path, serve_flags, mix, args)
                    else:
                        env = dict(os.environ, PYTHONPATH=str(Path(path).resolve()))
                        env.pop(GROUP_COMMIT, None)
                        env.pop(READS_DURING_FSYNC, None)
                        if group_commit:
                            env[GROUP_COMMIT] = "1"
                        if reads_during_fsync:
                            env[READS_DURING_FSYNC] = "1"
                        env[HTTP_STACK] = args.http_stack if stack == "auto" else stack
                        result = _child(
                            [sys.executable, __file__, "--worker", mode, mix, "--clients",
                             str(args.clients), "--ops", str(args.ops), "--items",
                             str(args.items), "--timeout", str(args.timeout)],
                            env, args.timeout, f"the {mode} worker of {tree}")
                    result.update(tree=tree, mode=mode, mix=mix, round=rnd)
                    runs.append(result)
                    cpu = result["cpu_ms"]
                    if mode == "http-proc":
                        cost = (f"server cpu/request {cpu['server']:.2f} ms (clients "
                                f"{cpu['clients']:.2f}) load {result['loadavg'][0]}->"
                                f"{result['loadavg'][1]}")
                    else:
                        cost = (f"cpu/request {cpu['process']:.2f} ms"
                                + (f" (server {cpu['server']:.2f})" if mode == "http" else ""))
                    print(f"round {rnd} {mode:9s} {mix:5s} {_label(tree):18s} "
                          f"{result['seconds']:6.1f} s  {cost}"
                          + "  " + "  ".join(
                              f"{k} {v['p50']:.2f}/{v['p99']:.2f}"
                              for k, v in result["ms"].items())
                          + (f"  ERRORS {result['errors']}" if result["errors"] else ""),
                          flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(runs, indent=1))
    summarise(runs, args.trees, args.modes, args.mixes)


def _round_key(run: dict) -> tuple:
    """The round a run belongs to: ``(file, round)``, ``file`` being the index of its
    ``--combine`` file (None in a run's own table), since every file counts rounds from 0."""
    f = run.get("file")
    return (-1 if f is None else f, run["round"])


def complete_rounds(runs: list[dict], trees: list[str]) -> list[dict]:
    """The runs of the rounds (per mode and mix) in which every tree of ``trees`` ran: a
    tree's median then covers the same rounds as the others', and every round pairs."""
    ran: dict[tuple, set] = {}
    for r in runs:
        ran.setdefault((r["mode"], r["mix"], _round_key(r)), set()).add(r["tree"])
    return [r for r in runs if r["tree"] in trees
            and ran[(r["mode"], r["mix"], _round_key(r))] >= set(trees)]


def paired(runs: list[dict], tree: str, first: str, value) -> tuple[float, int, int] | None:
    """``tree`` against ``first`` round by round: the median over the rounds both ran
    (:func:`_round_key`) of ``value(tree's run) / value(first's run)``, the number of those
    rounds in which ``tree``'s value was lower, and the number of rounds; None if none pair.
    ``value`` returns None where a run lacks the number (that round is skipped)."""
    of = {t: {_round_key(r): value(r) for r in runs if r["tree"] == t} for t in (tree, first)}
    ratios = [of[tree][k] / of[first][k] for k in sorted(of[tree])
              if k in of[first] and of[tree][k] is not None and of[first][k]]
    if not ratios:
        return None
    return statistics.median(ratios), sum(x < 1 for x in ratios), len(ratios)


def summarise(runs: list[dict], trees: list[str], modes: list[str], mixes: list[str]) -> None:
    """Print, per tree, mode, mix and kind, the medians over rounds of ``runs`` (what
    ``--json`` writes) and each tree's ratio of medians to the first tree's; then the paired
    view: per round, each tree's p50 and p99 over the first tree's, their median over rounds
    and the rounds it was ahead in; seconds and CPU per request.

    Only the rounds every tree ran count (:func:`complete_rounds`); a round is a ``(file,
    round)`` pair, so the rounds of ``--combine`` files never mix."""
    kept = complete_rounds(runs, trees)
    if len(kept) < len(runs):
        print(f"\n{len(runs) - len(kept)} run(s) left out: their rounds lack a tree of "
              f"{[_label(t) for t in trees]}")
    runs = kept
    print("\nmedian over rounds, ms (p50 / p99), and (x) each tree's to the first tree's")
    first = trees[0]
    for mode in modes:
        for mix in mixes:
            for kind in KINDS:
                cells, med = [], {}
                for tree in trees:
                    rs = [r["ms"][kind] for r in runs if r["tree"] == tree and r["mode"] == mode
                          and r["mix"] == mix and kind in r["ms"]]
                    if not rs:
                        continue
                    med[tree] = (statistics.median(r["p50"] for r in rs),
                                 statistics.median(r["p99"] for r in rs))
                    cell = f"{_label(tree)}: {med[tree][0]:7.2f} / {med[tree][1]:7.2f}"
                    if tree != first and first in med:  # against the first tree
                        cell += (f" ({med[tree][0] / med[first][0]:.2f}x / "
                                 f"{med[tree][1] / med[first][1]:.2f}x)")
                    cells.append(cell)
                if not cells:
                    continue
                print(f"{mode:9s} {mix:5s} {kind:7s} " + "   ".join(cells))
    if len(trees) > 1:
        print(f"\npaired by round, each tree / {_label(first)}: the median over rounds of the "
              f"per-round ratio, and the rounds in which the tree was ahead (lower)")
        for mode in modes:
            for mix in mixes:
                of = [r for r in runs if r["mode"] == mode and r["mix"] == mix]
                for kind in KINDS:
                    for tree in trees[1:]:
                        cells = []
                        for q in ("p50", "p99"):
                            got = paired(of, tree, first, lambda r, q=q: r["ms"].get(
                                kind, {}).get(q))
                            if got:
                                cells.append(f"{q} {got[0]:.2f}x (ahead in {got[1]} of "
                                             f"{got[2]})")
                        if cells:
                            print(f"{mode:9s} {mix:5s} {kind:7s} {_label(tree)}: "
                                  + "  ".join(cells))
    for mode in modes:
        of = {t: [r for r in runs if r["tree"] == t and r["mode"] == mode] for t in trees}
        of = {t: rs for t, rs in of.items() if rs}
        seconds = {_label(t): round(statistics.median(r["seconds"] for r in rs), 2)
                   for t, rs in of.items()}
        print(f"median seconds per run, {mode}:", seconds)
        for part in CPU_PARTS[mode]:
            cpu = {_label(t): round(statistics.median(r["cpu_ms"][part] for r in rs), 2)
                   for t, rs in of.items()}
            print(f"median CPU ms per request, {mode}, {part}:", cpu)
    loads = [x for r in runs for x in r.get("loadavg", []) if x is not None]
    if os.path.exists("/proc/loadavg"):
        print("load average at the end:", Path("/proc/loadavg").read_text().split()[:3],
              f"(per http-proc run: {min(loads):.2f}..{max(loads):.2f})" if loads else "")


if __name__ == "__main__":
    main()
