"""Review of issue 14, item 9 (the ``http-proc`` benchmark and the serve options), fixed.

No timing asserts. The benchmark honours or refuses every tree flag in every mode, a client
that fails (or a stuck child) ends the run with its error instead of hanging it, ``--combine``
pairs rounds by file and round and prints the per-round ratios the README's verdict quotes,
group commit without a database is refused, and the switch interval is restored when the
server fails.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "benchmarks" / "concurrent_reads.py"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"{name}_under_review",
                                                  ROOT / "benchmarks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ----------------------------------------------------------------- tree flags per mode (2)
def _fake_result() -> dict:
    return {"seconds": 1.0, "errors": [], "loadavg": [1.0, 1.0],
            "cpu_ms": {"server": 1.0, "clients": 0.5},
            "ms": {"get": {"p50": 1.0, "p99": 2.0, "n": 4}}}


@pytest.mark.parametrize("tree, expected", [
    (".+group-commit", ["--group-commit"]),
    (".+group-commit+serve=--switch-interval=0.001", ["--switch-interval=0.001",
                                                       "--group-commit"]),
    (".+serve=--group-commit", ["--group-commit"]),  # not doubled
    (".", []),
])
def test_http_proc_serves_a_group_commit_tree_with_memlab_serve_group_commit(
        tree, expected, monkeypatch, capsys):
    bench = _load("concurrent_reads")
    seen = []
    monkeypatch.setattr(bench, "run_http_proc",
                        lambda path, flags, mix, args: seen.append((path, flags)) or
                        _fake_result())
    bench.main(["--trees", tree, "--modes", "http-proc", "--mixes", "load", "--rounds", "1"])
    assert seen == [(".", expected)]
    capsys.readouterr()


@pytest.mark.parametrize("argv, message", [
    (["--trees", ".+serve=--group-commit", "--modes", "threads"],
     "--modes threads: +serve= flags are `memlab serve` flags"),
    (["--trees", ".+serve=--switch-interval=0.001", "--modes", "http"],
     "--modes http: +serve= flags are `memlab serve` flags"),
    (["--trees", ".", ".+group-commit", "--modes", "http"],
     "--modes http: +group-commit is not applied to the in-process server"),
    (["--trees", ".+h11", "--modes", "threads"], "--modes threads: +h11 is an HTTP stack"),
    (["--trees", ".+h11", "--modes", "http-proc"], "h11 cannot be forced there"),
    (["--timeout", "0"], "--timeout must be > 0 seconds, got 0.0"),
])
def test_a_tree_flag_a_mode_cannot_honour_is_refused(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        _load("concurrent_reads").main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_the_flags_each_mode_honours_are_accepted():
    bench = _load("concurrent_reads")
    assert bench._unhonoured("threads", True, "auto", []) is None
    assert bench._unhonoured("http", False, "h11", []) is None
    assert bench._unhonoured("http-proc", True, "auto", ["--switch-interval=0.001"]) is None
    assert bench._unhonoured("threads", False, "auto", [], http_stack="h11") is None


# ----------------------------------------------------------------- no hang (3)
class _Stub(BaseHTTPRequestHandler):
    """Answers /health and every request 200, except that an add (POST /v1/items) gets its
    connection closed without an answer, so the client that sends it raises."""

    def log_message(self, *a):  # quiet
        pass

    def _ok(self):
        body = b"{}"
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._ok()

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.path == "/v1/items":
            self.close_connection = True
            return
        self._ok()


@pytest.fixture()
def stub_url():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Stub)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_a_client_failing_in_its_warm_up_stops_the_others_and_the_run(stub_url):
    pytest.importorskip("httpx")
    # the load mix: client 0's first request is an add (fails), clients 1-3 send a context, a
    # search and a get (answered), then wait at the barrier for client 0
    try:
        done = subprocess.run(
            [sys.executable, str(BENCH), "--http-clients", stub_url, str(os.getpid()), "load",
             "--clients", "4", "--warmup", "1", "--ops", "4", "--items", "10"],
            capture_output=True, text=True, timeout=120,
            env=dict(os.environ, PYTHONPATH=str(ROOT)))
    except subprocess.TimeoutExpired:
        pytest.fail("the client process hung at its barrier after a client failed")
    assert done.returncode != 0
    assert "1 of 4 clients failed: client 0: RemoteProtocolError" in done.stderr, \
        done.stderr[-2000:]
    assert "(3 more stopped at the broken start barrier)" in done.stderr
    assert done.stdout.strip() == ""  # nothing reported as measured


def test_the_clients_barrier_gives_up_after_the_timeout(stub_url):
    pytest.importorskip("httpx")
    bench = _load("concurrent_reads")
    started = threading.Barrier(2)

    def client(n: int) -> None:
        if n == 0:
            return  # never reaches the barrier, does not raise either
        started.wait(0.5)

    with pytest.raises(RuntimeError, match=r"1 of 2 clients gave up at the start barrier: "
                                           r"the others did not reach it within the timeout"):
        bench._run(2, client, started)


def test_a_child_process_that_runs_too_long_is_killed_and_named():
    bench = _load("concurrent_reads")
    with pytest.raises(RuntimeError, match=r"the sleeper did not finish in 1 s \(--timeout\)"):
        bench._child([sys.executable, "-c", "import time; time.sleep(60)"], dict(os.environ),
                     1.0, "the sleeper")
    with pytest.raises(RuntimeError, match=r"the failer failed \(exit 3\): boom"):
        bench._child([sys.executable, "-c", "import sys; sys.exit('boom') if 0 else "
                      "(sys.stderr.write('boom'), sys.exit(3))"], dict(os.environ), 30.0,
                     "the failer")


def test_run_http_proc_passes_the_timeout_to_its_children(tmp_path, monkeypatch):
    bench = _load("concurrent_reads")
    calls = []

    def fake_child(argv, env, timeout, what):
        calls.append((argv, timeout))
        if "--http-clients" in argv:
            raise RuntimeError(f"{what} did not finish in {timeout:g} s (--timeout), killed")
        return {}

    class Args:
        items, clients, ops, warmup, timeout = 10, 2, 4, 1, 7.5
        serve_options = ["--no-maintenance"]

    monkeypatch.setattr(bench, "_child", fake_child)
    with pytest.raises(RuntimeError, match=r"did not finish in 7.5 s.*\nserver log:"):
        bench.run_http_proc(str(ROOT), [], "load", Args())
    assert [timeout for _, timeout in calls] == [7.5, 7.5]
    assert calls[1][0][-2:] == ["--timeout", "7.5"]


# ----------------------------------------------------------------- paired rounds (5)
def _run(tree, rnd, p50, p99, kind="get"):
    return {"tree": tree, "mode": "http-proc", "mix": "load", "round": rnd, "seconds": 2.0,
            "errors": [], "loadavg": [1.0, 2.0], "cpu_ms": {"server": 1.0, "clients": 0.5},
            "ms": {kind: {"p50": p50, "p99": p99, "n": 10}}}


def test_combine_pairs_rounds_by_file_and_round(tmp_path, capsys):
    # both files count rounds from 0; pairing by round number alone would mix them
    (tmp_path / "a.json").write_text(json.dumps([
        _run("/t/base", 0, 10.0, 100.0), _run("/t/new", 0, 5.0, 50.0),     # new 0.5x, ahead
        _run("/t/base", 1, 10.0, 100.0), _run("/t/new", 1, 20.0, 300.0)]))  # 2x, 3x: behind
    (tmp_path / "b.json").write_text(json.dumps([
        _run("/t/new", 0, 1.0, 10.0), _run("/t/base", 0, 4.0, 20.0),      # 0.25x, 0.5x: ahead
        _run("/t/new", 1, 1.0, 1.0)]))  # base did not run b's round 1: left out
    _load("concurrent_reads").main(["--combine", str(tmp_path / "a.json"),
                                    str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    assert "7 runs from 2 file(s), of 2 tree(s)" in out
    assert "1 run(s) left out: their rounds lack a tree of ['base', 'new']" in out
    # per-round ratios: p50 0.5, 2, 0.25 (median 0.5); p99 0.5, 3, 0.5 (median 0.5)
    assert "http-proc load  get     new: p50 0.50x (ahead in 2 of 3)  p99 0.50x " \
           "(ahead in 2 of 3)" in out
    # the pooled medians cover the same three rounds for both trees (new's 1.0 left out)
    assert "base:   10.00 /  100.00   new:    5.00 /   50.00 (0.50x / 0.50x)" in out


def test_combine_trees_picks_and_orders_the_trees(tmp_path, capsys):
    (tmp_path / "a.json").write_text(json.dumps([
        _run("/t/base", 0, 10.0, 100.0), _run("/t/new", 0, 5.0, 50.0),
        _run("/t/new+x", 0, 4.0, 60.0)]))
    bench = _load("concurrent_reads")
    bench.main(["--combine", str(tmp_path / "a.json"), "--trees", "/t/new", "/t/new+x"])
    out = capsys.readouterr().out
    assert "2 runs from 1 file(s), of 2 tree(s)" in out
    assert "each tree / new:" in out
    assert "new+x: p50 0.80x (ahead in 1 of 1)  p99 1.20x (ahead in 0 of 1)" in out
    assert "base" not in out
    with pytest.raises(SystemExit):
        bench.main(["--combine", str(tmp_path / "a.json"), "--trees", "/t/none"])
    assert "--trees '/t/none' has no runs in the --combine files" in capsys.readouterr().err


def test_paired_skips_rounds_only_one_tree_ran():
    bench = _load("concurrent_reads")
    runs = [dict(_run("a", 0, 1.0, 2.0), file=0), dict(_run("b", 0, 2.0, 2.0), file=0),
            dict(_run("b", 0, 1.0, 1.0), file=1)]
    assert bench.paired(runs, "b", "a", lambda r: r["ms"]["get"]["p50"]) == (2.0, 0, 1)
    assert bench.paired(runs, "b", "a", lambda r: r["ms"].get("add", {}).get("p50")) is None


# ----------------------------------------------------------------- group commit needs a db (10, 11)
def test_service_state_refuses_fsync_outside_lock_without_a_db_path():
    from memlab.service import ServiceState
    with pytest.raises(ValueError, match=r"fsync_outside_lock needs db_path .*got "
                                         r"fsync_outside_lock=True with db_path=None"):
        ServiceState(fsync_outside_lock=True)
    ServiceState(fsync_outside_lock=False).store.close()


def test_serve_refuses_group_commit_without_a_db(monkeypatch, capsys):
    uvicorn = pytest.importorskip("uvicorn")
    monkeypatch.delenv("MEMLAB_DB", raising=False)
    ran = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.append(app))
    from memlab.cli import main
    assert main(["serve", "--port", "0", "--group-commit"]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "memlab serve: error: --group-commit needs --db (or MEMLAB_DB): without one the store "
        "is in memory and has no journal to commit")
    assert ran == []


def test_fsync_outside_lock_is_checked_in_one_place():
    from memlab import MemoryStore
    from memlab.service import ServiceState
    from memlab.store.core import validate_fsync_outside_lock
    for call in (lambda: MemoryStore(fsync_outside_lock=1),
                 lambda: ServiceState(db_path="unused.db", fsync_outside_lock=1),
                 lambda: validate_fsync_outside_lock(1)):
        with pytest.raises(ValueError, match=r"^fsync_outside_lock must be a bool, got 1$"):
            call()
    sources = [p for p in (ROOT / "memlab").rglob("*.py")
               if "fsync_outside_lock must be a bool" in p.read_text()]
    assert [p.relative_to(ROOT).as_posix() for p in sources] == ["memlab/store/core.py"]


# ----------------------------------------------------------------- tests the review asked for (12)
def test_serve_restores_the_switch_interval_when_uvicorn_raises(monkeypatch):
    uvicorn = pytest.importorskip("uvicorn")
    from memlab.cli import main
    before = sys.getswitchinterval()
    seen = []

    def failing(app, **kw):
        seen.append(sys.getswitchinterval())
        raise OSError("address already in use")

    monkeypatch.setattr(uvicorn, "run", failing)
    with pytest.raises(OSError, match="address already in use"):
        main(["serve", "--port", "0", "--switch-interval", "0.0007"])
    assert seen == [pytest.approx(0.0007)]
    assert sys.getswitchinterval() == before


@pytest.mark.parametrize("tree, message", [
    (".+switch=abc", "the switch interval must be a number of seconds in [1e-06, 1], got 'abc'"),
    (".+switch=0", "the switch interval must be a number of seconds in [1e-06, 1], got '0'"),
    (".+switch=nan", "got 'nan'"),
    (".+turn=x", "+turn= needs an int, got 'x'"),
])
def test_read_waits_refuses_a_tree_it_cannot_read(tree, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        _load("read_waits").main(["--trees", ".", tree])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err


def test_read_waits_reads_its_tree_spellings():
    bench = _load("read_waits")
    assert bench._tree_spec("/a") == ("/a", {})
    assert bench._tree_spec("/a+group-commit") == ("/a", {"fsync_outside_lock": True})
    assert bench._tree_spec("/a+turn=2") == ("/a", {"reader_turn": 2})
    assert bench._tree_spec("/a+switch=0.001") == ("/a", {"switch_interval": 0.001})
