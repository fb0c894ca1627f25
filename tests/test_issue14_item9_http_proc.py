"""Issue 14, item 9: `memlab serve --switch-interval` and the `http-proc` load test.

No timing asserts: the options are validated, the switch interval is set only in the serving
process (never by importing the library) and restored after, and the benchmark mode parses its
trees and runs end to end on a tiny store (a real ``memlab serve`` process, a client process).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location(
        "concurrent_reads_under_test", ROOT / "benchmarks" / "concurrent_reads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value, shown", [("0", "0.0"), ("-0.001", "-0.001"), ("nan", "nan"), ("1e-7", "1e-07"),
                                          ("2", "2.0"), ("inf", "inf")])
def test_serve_refuses_a_switch_interval_out_of_range(value, shown, capsys):
    pytest.importorskip("uvicorn")
    from memlab.cli import main
    before = sys.getswitchinterval()
    assert main(["serve", "--port", "0", "--switch-interval", value]) == 2
    assert capsys.readouterr().err.strip().endswith(
        f"memlab serve: error: --switch-interval must be in [1e-06, 1] seconds, got {shown}")
    assert sys.getswitchinterval() == before


def test_serve_refuses_a_switch_interval_that_is_not_a_number(capsys):
    pytest.importorskip("uvicorn")
    from memlab.cli import main
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--port", "0", "--switch-interval", "fast"])
    assert exit_.value.code == 2
    assert "--switch-interval" in capsys.readouterr().err


@pytest.mark.parametrize("given", [None, 0.0005])
def test_serve_sets_the_switch_interval_while_it_serves_and_restores_it(given, monkeypatch):
    uvicorn = pytest.importorskip("uvicorn")
    from memlab.cli import main
    before = sys.getswitchinterval()
    seen = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: seen.append(sys.getswitchinterval()))
    argv = ["serve", "--port", "0"] + ([] if given is None else ["--switch-interval", str(given)])
    assert main(argv) == 0
    assert seen == [pytest.approx(before if given is None else given)]
    assert sys.getswitchinterval() == before


def test_serve_group_commit_opens_the_store_with_fsync_outside_the_lock(tmp_path, monkeypatch):
    uvicorn = pytest.importorskip("uvicorn")
    import memlab.service as service
    from memlab.cli import main
    created = []
    original = service.ServiceState

    class Recording(original):
        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            created.append(self)

    monkeypatch.setattr(service, "ServiceState", Recording)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    for flags, expected in (([], False), (["--group-commit"], True)):
        db = tmp_path / f"m{len(created)}.db"
        assert main(["serve", "--port", "0", "--db", str(db), *flags]) == 0
        assert created[-1].store.fsync_outside_lock is expected
        created[-1].store.close()


def test_service_state_validates_fsync_outside_lock(tmp_path):
    from memlab import Memory, MemoryStore
    from memlab.service import ServiceState
    with pytest.raises(ValueError, match="fsync_outside_lock must be a bool, got 'yes'"):
        ServiceState(db_path=str(tmp_path / "a.db"), fsync_outside_lock="yes")
    with pytest.raises(ValueError, match="fsync_outside_lock is for the store opened"):
        ServiceState(MemoryStore(), fsync_outside_lock=True)
    state = ServiceState(db_path=str(tmp_path / "b.db"), fsync_outside_lock=True)
    try:
        assert state.store.fsync_outside_lock is True
        state.memory().add("deploy checklist", item_id="a")
    finally:
        state.store.close()
    reopened = MemoryStore(path=str(tmp_path / "b.db"))
    # the write returned once it was on disk
    assert Memory(store=reopened).get("a", reinforce=False)["content"] == "deploy checklist"
    reopened.close()


def test_importing_the_library_leaves_the_switch_interval_alone():
    code = ("import sys; sys.setswitchinterval(0.0123); import memlab, memlab.cli, "
            "memlab.service, memlab.store, memlab._rwlock; print(sys.getswitchinterval())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert float(out.stdout) == pytest.approx(0.0123)


def test_tree_specs_of_the_benchmark():
    bench = _bench()
    a = str(Path(__file__).parents[1])  # a tree must hold memlab (tests/test_review7.py)
    assert bench._tree_spec(a) == (a, False, "auto", [], False)
    assert bench._tree_spec(a + "+h11") == (a, False, "h11", [], False)
    assert bench._tree_spec(a + "+group-commit") == (a, True, "auto", [], False)
    assert bench._tree_spec(a + "+serve=--switch-interval=0.001,--no-maintenance") == (
        a, False, "auto", ["--switch-interval=0.001", "--no-maintenance"], False)
    assert bench._tree_spec(a + "+reads-during-fsync") == (a, False, "auto", [], True)
    assert bench._tree_spec(a + "+group-commit+reads-during-fsync") == (
        a, True, "auto", [], True)
    with pytest.raises(ValueError, match=r"\+serve= needs at least one"):
        bench._tree_spec(a + "+serve=")
    assert bench._label(".") == "." and bench._label("/x/base") == "base"
    assert bench._unhonoured("threads", False, "auto", [], reads_during_fsync=True) is None


@pytest.mark.parametrize("argv, message", [
    (["--modes", "http-proc", "--trees", ".+h11"], "h11 cannot be forced"),
    (["--modes", "http-proc", "--http-stack", "h11"], "h11 cannot be forced"),
    (["--warmup", "-1"], "--warmup must be >= 0, got -1"),
    (["--ops", "0"], "--ops must be >= 1, got 0"),
    (["--trees", ".+serve="], "+serve= needs at least one"),
    (["--modes", "http", "--trees", ".+reads-during-fsync"],
     "--modes http: +reads-during-fsync is a MemoryStore option"),
    (["--modes", "http-proc", "--trees", ".", ".+group-commit+reads-during-fsync"],
     "--modes http-proc: +reads-during-fsync is a MemoryStore option"),
])
def test_the_benchmark_refuses_bad_arguments(argv, message, capsys):
    with pytest.raises(SystemExit) as exit_:
        _bench().main(argv)
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_http_proc_runs_a_real_server_and_a_client_process(tmp_path):
    pytest.importorskip("uvicorn")
    pytest.importorskip("httpx")
    out = tmp_path / "runs.json"
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "concurrent_reads.py"), "--trees",
         str(ROOT), f"{ROOT}+serve=--switch-interval=0.001", "--modes", "http-proc",
         "--mixes", "load", "--rounds", "1", "--clients", "2", "--ops", "8", "--warmup", "2",
         "--items", "20", "--json", str(out)],
        capture_output=True, text=True, timeout=600, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert done.returncode == 0, done.stderr[-3000:]
    runs = json.loads(out.read_text())
    assert [r["tree"] for r in runs] == [str(ROOT), f"{ROOT}+serve=--switch-interval=0.001"]
    for run in runs:
        assert run["errors"] == [] and run["mode"] == "http-proc"
        # 2 clients x 8 measured requests, the load mix: 4 kinds, 4 each; warm-up not counted
        assert {kind: v["n"] for kind, v in run["ms"].items()} == {
            "search": 4, "get": 4, "context": 4, "add": 4}
        assert set(run["cpu_ms"]) == {"server", "clients"}
        assert run["cpu_ms"]["server"] >= 0 and len(run["loadavg"]) == 2
    assert "median CPU ms per request, http-proc, server" in done.stdout


def test_combine_pools_saved_runs_into_one_table(tmp_path, capsys):
    def run(tree, rnd, p99):
        return {"tree": tree, "mode": "http-proc", "mix": "load", "round": rnd, "seconds": 2.0,
                "errors": [], "loadavg": [1.0, 2.0],
                "cpu_ms": {"server": 1.0, "clients": 0.5},
                "ms": {"get": {"p50": p99 / 4, "p99": p99, "n": 10}}}
    (tmp_path / "a.json").write_text(json.dumps([run("/t/base", 0, 40.0), run("/t/new", 0, 20.0)]))
    (tmp_path / "b.json").write_text(json.dumps([run("/t/base", 1, 60.0), run("/t/new", 1, 30.0),
                                                 run("/t/base", 2, 50.0), run("/t/new", 2, 10.0)]))
    _bench().main(["--combine", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    out = capsys.readouterr().out
    assert "6 runs from 2 file(s)" in out
    # medians over the three rounds: base p99 50, new p99 20 (0.40x); p50 12.5 and 5
    assert "base:   12.50 /   50.00   new:    5.00 /   20.00 (0.40x / 0.40x)" in out
