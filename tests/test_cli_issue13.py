"""Issue 13, item 9: the command line's bad-input paths, the fixtures it offers, and the line a
replay error names.

Each ``test_issue13_*`` test failed on the code before its fix. The table of bad input feeds every
subcommand missing files, bad numbers, unknown recipes, bad grid syntax and negative k, and wants
one line, ``memlab <command>: error: …`` naming the argument and the value, and exit code 2.
"""

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from memlab.cli import _load_trace
from memlab import datasets
from memlab.harness import ReplayError, TraceBuilder, replay

from _support import assert_one_line_error, cli  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def run(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run([sys.executable, "-m", "memlab", *args], capture_output=True,
                          text=True, cwd=cwd, env=env)


# ---------------------------------------------------------------------------- 9 (a) replay lines
def _batched_trace():
    return (TraceBuilder("dup", start="2024-01-01T00:00:00+00:00")
            .add("alpha", item_id="a").add("beta", item_id="b").add("gamma", item_id="a")
            .query("q1", "alpha", gold=["a"]).build())


def test_issue13_replay_error_names_the_duplicate_add_not_the_batch_start():
    # the three adds share a timestamp, so replay writes them as one batch; the duplicate is
    # event 2, on line 4 of the trace file (line 1 is the header)
    with pytest.raises(ReplayError, match=r"^event 2 \(line 4, add\): item_id 'a' already"):
        replay(_batched_trace())


def test_issue13_replay_error_names_the_refused_edge_in_a_batch():
    trace = (TraceBuilder("edges", start="2024-01-01T00:00:00+00:00")
             .add("alpha", item_id="a").add("beta", item_id="b")
             .edge("a", "b").edge("b", "a").edge("a", "ghost").query("q1", "alpha").build())
    with pytest.raises(ReplayError, match=r"^event 4 \(line 6, add_edge\):.*'ghost'"):
        replay(trace)


def test_issue13_replay_error_line_is_the_line_of_the_file(tmp_path, capsys):
    path = _batched_trace().write_jsonl(tmp_path / "dup.jsonl")
    lines = path.read_text().splitlines()
    assert json.loads(lines[3])["item_id"] == "a" and json.loads(lines[3])["content"] == "gamma"
    code, err = cli(capsys, "replay", str(path), "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "replay", "line 4", "'a'")


# ---------------------------------------------------------------------------- 9 (b) duplicate names
def test_issue13_duplicate_config_label_rejected(capsys, tmp_path):
    code, err = cli(capsys, "experiment", "fixture:apollo_demo", "--config", "a=default",
                    "--config", "a=bm25", "--out", str(tmp_path))
    assert_one_line_error(code, err, "experiment", "--config 'a=bm25'", "'a'")
    assert not (tmp_path / "experiment.csv").exists()


# ---------------------------------------------------------------------------- 9 (c) config JSON
@pytest.mark.parametrize("text, kind", [("[1, 2]", "array"), ('"default"', "string"),
                                        ("3", "number"), ("null", "null")])
def test_issue13_config_json_that_is_not_an_object_is_one_line(text, kind, tmp_path, capsys):
    path = tmp_path / "config.json"
    path.write_text(text)
    code, err = cli(capsys, "replay", "fixture:apollo_demo", "--config", str(path),
                    "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "replay", f"--config {str(path)!r}", f"JSON {kind}")
    code, err = cli(capsys, "experiment", "fixture:apollo_demo", "--config", f"x={path}",
                    "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "experiment", f"--config {str(path)!r}", f"JSON {kind}")


def test_issue13_config_json_array_gives_no_traceback(tmp_path):
    path = tmp_path / "config.json"
    path.write_text("[1, 2]")
    out = run("replay", "fixture:apollo_demo", "--config", str(path), "--out",
              str(tmp_path / "out"))
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr


# ---------------------------------------------------------------------------- 9 (d) --out first
# each command with an output path, and the library call that does its work
OUTPUT_COMMANDS = [
    (["demo"], "--out", "memlab.demo", "run_demo"),
    (["replay", "fixture:apollo_demo"], "--out", "memlab.harness", "replay"),
    (["experiment", "fixture:apollo_demo", "--config", "a=default"], "--out", "memlab.harness",
     "Experiment"),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,1"], "--out",
     "memlab.harness", "sweep"),
    (["eval"], "--out", "memlab.evaluation", "run_eval"),
]


def _with_data(args, tmp_path):
    """``eval`` checks ``--data`` before ``--out``: give it a root holding every file it names
    (empty: the work is forbidden anyway), so the test does not depend on the shared data."""
    if args[0] != "eval":
        return args
    from memlab.evaluation import DATASET_FILES
    root = tmp_path / "data"
    for files in DATASET_FILES.values():
        for rel in files:
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text("{}")
    return [*args, "--data", str(root)]


def _forbid_work(monkeypatch, module, name):
    import importlib

    def work(*args, **kwargs):
        raise AssertionError(f"{module}.{name} ran before the output path was checked")

    monkeypatch.setattr(importlib.import_module(module), name, work)


@pytest.mark.parametrize("args, option, module, name", OUTPUT_COMMANDS,
                         ids=[c[0][0] for c in OUTPUT_COMMANDS])
def test_issue13_unwritable_out_fails_before_any_work(args, option, module, name, tmp_path,
                                                       capsys, monkeypatch):
    _forbid_work(monkeypatch, module, name)
    args = _with_data(args, tmp_path)
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    for target in (blocker, blocker / "sub"):
        code, err = cli(capsys, *args, option, str(target))
        assert_one_line_error(code, err, args[0], f"{option} {str(target)!r}",
                              "not a writable folder")


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0,
                    reason="root may write into a read-only folder, so the permission case "
                           "cannot be set up (the file-in-the-way case above still runs)")
@pytest.mark.parametrize("args, option, module, name", OUTPUT_COMMANDS,
                         ids=[c[0][0] for c in OUTPUT_COMMANDS])
def test_out_in_a_read_only_folder_fails_before_any_work(args, option, module, name, tmp_path,
                                                         capsys, monkeypatch):
    _forbid_work(monkeypatch, module, name)
    args = _with_data(args, tmp_path)
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o555)
    try:
        code, err = cli(capsys, *args, option, str(locked / "out"))
    finally:
        locked.chmod(0o755)
    assert_one_line_error(code, err, args[0], f"{option} {str(locked / 'out')!r}")


def test_unwritable_bench_json_and_serve_record_fail_first(tmp_path, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.chdir(ROOT)  # bench runs from the repository root
    monkeypatch.setattr(subprocess, "call", lambda *a, **k: pytest.fail("bench ran"))
    code, err = cli(capsys, "bench", "--json", str(blocker / "results.json"))
    assert_one_line_error(code, err, "bench", f"--json {str(blocker / 'results.json')!r}")
    code, err = cli(capsys, "bench", "--json", str(tmp_path))
    assert_one_line_error(code, err, "bench", f"--json {str(tmp_path)!r}", "is a folder")
    code, err = cli(capsys, "serve", "--record", str(blocker / "trace.jsonl"))
    assert_one_line_error(code, err, "serve", f"--record {str(blocker / 'trace.jsonl')!r}")


def test_the_writability_probe_leaves_nothing_behind(tmp_path, capsys):
    out = tmp_path / "new" / "replay"
    assert cli(capsys, "replay", "fixture:apollo_demo", "--measures", "MRR",
               "--out", str(out))[0] == 0
    assert not [p for p in out.iterdir() if p.name.startswith(".memlab-write-check")]


# ---------------------------------------------------------------------------- 9 (e) fixtures
def offered_fixtures() -> list[str]:
    """The names the CLI's own error message offers for ``fixture:<name>``."""
    try:
        _load_trace("fixture:-no-such-fixture-")
    except Exception as exc:  # noqa: BLE001 - whatever it raises, its message lists the names
        message = str(exc)
    else:  # pragma: no cover - the name cannot exist
        raise AssertionError("fixture:-no-such-fixture- loaded")
    assert "available:" in message, message
    return re.findall(r"[A-Za-z0-9_]+", message.split("available:", 1)[1])


OFFERED = offered_fixtures()


def test_the_cli_offers_every_fixture_file_as_a_trace_or_part_of_one():
    assert "apollo_demo" in OFFERED and len(OFFERED) == len(set(OFFERED))
    for path in sorted(datasets.FIXTURES_DIR.glob("*.json")):
        assert path.stem in OFFERED or datasets.FIXTURE_COMPANIONS.get(path.stem) in OFFERED, path.name


@pytest.mark.parametrize("name", OFFERED)
def test_issue13_every_offered_fixture_replays(name, tmp_path, capsys):
    code, err = cli(capsys, "replay", f"fixture:{name}", "-k", "5", "--measures", "R@5",
                    "--out", str(tmp_path))
    assert (code, err) == (0, [])
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["trace"]["queries"] > 0 and manifest["trace"]["events"] > 0
    assert {"decisions", "metrics", "candidates", "log"} <= {p.stem for p in tmp_path.iterdir()}


@pytest.mark.parametrize("name", ["hipporag_sample_corpus", "", "../README", "nope"])
def test_a_name_that_is_not_a_trace_fixture_is_one_line(name, tmp_path, capsys):
    code, err = cli(capsys, "replay", f"fixture:{name}", "--out", str(tmp_path))
    assert_one_line_error(code, err, "replay", f"trace 'fixture:{name}'", "available: ")


# ---------------------------------------------------------------------------- bad input, all commands
BLOCK = "{tmp}/a-file"
BAD_INPUT = [
    # demo
    (["demo", "-k", "-5"], ["-k must be in 1..100", "-5"]),
    (["demo", "-k", "abc"], ["argument -k", "'abc'"]),
    # replay
    (["replay", "{tmp}/missing.jsonl"], ["trace '{tmp}/missing.jsonl' is not a file"]),
    (["replay", "{tmp}"], ["trace '{tmp}' is not a file"]),
    (["replay", "{tmp}/bad.jsonl"], ["trace '{tmp}/bad.jsonl'", "line 1"]),
    (["replay", "fixture:apollo_demo", "-k", "-3"], ["-k must be in 1..100", "-3"]),
    (["replay", "fixture:apollo_demo", "-k", "1.5"], ["argument -k", "'1.5'"]),
    (["replay", "fixture:apollo_demo", "--seed", "x"], ["argument --seed", "'x'"]),
    (["replay", "fixture:apollo_demo", "--measures", "R@0"], ["--measures", "'R@0'"]),
    (["replay", "fixture:apollo_demo", "--measures", "Recall@5"], ["--measures", "'Recall@5'"]),
    (["replay", "fixture:apollo_demo", "--mode", "fast"], ["argument --mode", "'fast'"]),
    (["replay", "fixture:apollo_demo", "--config", "turbo"], ["--config 'turbo'", "recipe"]),
    (["replay", "fixture:apollo_demo", "--config", "{tmp}/missing.json"],
     ["--config '{tmp}/missing.json'"]),
    (["replay", "fixture:apollo_demo", "--config", "{tmp}/bad.json"],
     ["--config '{tmp}/bad.json' is not valid JSON"]),
    (["replay", "fixture:apollo_demo", "--config", "{tmp}/unknown.json"],
     ["--config '{tmp}/unknown.json'", "colour"]),
    (["replay", "synthetic:ten:5"], ["trace 'synthetic:ten:5' must look like"]),
    (["replay", "synthetic:10"], ["trace 'synthetic:10' must look like"]),
    (["replay", "synthetic:10:3:9"], ["trace 'synthetic:10:3:9' must look like"]),
    (["replay", "synthetic:-5:3"], ["trace 'synthetic:-5:3'", "-5"]),
    # experiment
    (["experiment", "{tmp}/missing.jsonl", "--config", "a=default"],
     ["trace '{tmp}/missing.jsonl' is not a file"]),
    (["experiment", "fixture:apollo_demo", "--config", "oops"], ["--config 'oops' must look"]),
    (["experiment", "fixture:apollo_demo", "--config", "=default"],
     ["--config '=default' must look"]),
    (["experiment", "fixture:apollo_demo", "--config", "a="], ["--config 'a=' must look"]),
    (["experiment", "fixture:apollo_demo", "--config", "a=turbo"], ["--config 'turbo'"]),
    (["experiment", "fixture:apollo_demo", "--config", "a=default:fast"],
     ["--config 'a=default:fast'", "'fast'"]),
    (["experiment", "fixture:apollo_demo", "--config", "a=default", "--baseline", "zz"],
     ["--baseline 'zz'", "['a']"]),
    (["experiment", "fixture:apollo_demo", "--config", "a=default", "-k", "-1"],
     ["-k must be in 1..100", "-1"]),
    (["experiment", "fixture:apollo_demo", "--config", "a=default", "--measures", "nDCG"],
     ["--measures", "'nDCG'"]),
    # sweep
    (["sweep", "fixture:apollo_demo", "--grid", "nonsense"], ["--grid entry 'nonsense'"]),
    (["sweep", "fixture:apollo_demo", "--grid", "a="], ["--grid entry 'a='"]),
    (["sweep", "fixture:apollo_demo", "--grid", "=1"], ["--grid entry '=1'"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,,1"],
     ["--grid entry 'centrality_weight=0,,1'", "empty value"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0", "centrality_weight=1"],
     ["--grid entry 'centrality_weight=1'", "repeats"]),
    (["sweep", "fixture:apollo_demo", "--grid", "colour=1"], ["unknown configuration field",
                                                             "colour"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=-5"],
     ["centrality_weight", "-5"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=abc"],
     ["centrality_weight", "'abc'"]),
    (["sweep", "fixture:apollo_demo", "--grid", "ppr.alpha=2"], ["alpha", "2"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0", "--workers", "0"],
     ["--workers", "0"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0", "--address", "tcp://x:1"],
     ["--address 'tcp://x:1'", "dask"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0", "--executor", "gpu"],
     ["argument --executor", "'gpu'"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0", "--config", "turbo"],
     ["--config 'turbo'"]),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0", "-k", "101"],
     ["-k must be in 1..100", "101"]),
    # eval
    (["eval", "--data", "{tmp}/nowhere"], ["--data '{tmp}/nowhere' has no"]),
    (["eval", "-k", "-1"], ["-k must be in 1..100", "-1"]),
    (["eval", "--datasets", "nope"], ["argument --datasets", "'nope'"]),
    (["eval", "--embedder", "nope"], ["--embedder must be one of", "'nope'"]),
    (["tune", "fixture:apollo_demo", "--space", "ppr.alpha=2:1"],
     ["--space entry 'ppr.alpha=2:1': must have low < high"]),
    (["tune", "fixture:apollo_demo", "--space", "weights.foo=0:1"],
     ["--space entry 'weights.foo=0:1'", "only ppr.*, spreading.* and dense.*"]),
    # serve, mcp, bench
    (["serve", "--port", "-1"], ["--port", "-1"]),
    (["serve", "--port", "70000"], ["--port", "70000"]),
    (["serve", "--port", "abc"], ["argument --port", "'abc'"]),
    (["serve", "--db", BLOCK + "/x.db"], [BLOCK + "/x.db"]),
    (["mcp", "--db", BLOCK + "/x.db"], [BLOCK + "/x.db"]),
    (["bench", "--json", "{tmp}"], ["--json '{tmp}' is a folder"]),
    # a database file is named by its argument (issue 14): db for the positional, --db, --out
    (["serve", "--db", "{tmp}/text.db"], ["--db '{tmp}/text.db' is not a memlab database"]),
    (["mcp", "--db", "{tmp}/text.db"], ["--db '{tmp}/text.db' is not a memlab database"]),
    (["check", "{tmp}/missing.db"], ["db '{tmp}/missing.db' is not a file"]),
    (["check", "{tmp}/text.db"], ["db '{tmp}/text.db' is not a memlab database"]),
    (["recover", "{tmp}/missing.db", "--out", "{tmp}/new.db"],
     ["db '{tmp}/missing.db' is not a file"]),
    (["recover", "{tmp}/text.db", "--out", "{tmp}/new.db"],
     ["db '{tmp}/text.db' is not a memlab database"]),
    (["recover", "{tmp}/text.db", "--out", "{tmp}/a-file"],
     ["--out '{tmp}/a-file' already exists"]),
    (["compact", "{tmp}/missing.db"], ["db '{tmp}/missing.db' does not exist"]),
    (["compact", "{tmp}/text.db"], ["db '{tmp}/text.db' is not a memlab database"]),
    # the command itself
    (["replay"], ["the following arguments are required: trace"]),
]


@pytest.mark.parametrize("args, fragments", BAD_INPUT, ids=[" ".join(a) for a, _ in BAD_INPUT])
def test_bad_input_names_the_argument_and_value_in_one_line(args, fragments, tmp_path, capsys,
                                                            monkeypatch):
    monkeypatch.chdir(ROOT)  # bench checks it runs from the repository root
    (tmp_path / "a-file").write_text("not a folder")
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    (tmp_path / "bad.json").write_text('{"a": ')
    (tmp_path / "unknown.json").write_text('{"colour": "blue"}')
    (tmp_path / "text.db").write_text("not a database, " * 20)
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    if args[0] in ("demo", "replay", "experiment", "sweep", "eval") and len(args) > 1:
        args += ["--out", str(tmp_path / "out")]
    code, err = cli(capsys, *args)
    assert_one_line_error(code, err, args[0],
                          *[f.replace("{tmp}", str(tmp_path)) for f in fragments])


# ---------------------------------------------------------------------------- shared data location
def test_shared_data_location_is_overridable(monkeypatch, tmp_path):
    monkeypatch.delenv("MEMLAB_SHARED_DATA", raising=False)
    assert datasets.shared_data_dir() == ROOT.parent / "shared" / "datasets"
    monkeypatch.setenv("MEMLAB_SHARED_DATA", str(tmp_path))
    assert datasets.shared_data_dir() == tmp_path


def test_eval_defaults_to_the_shared_data_location(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("MEMLAB_SHARED_DATA", str(tmp_path / "elsewhere"))
    code, err = cli(capsys, "eval", "--out", str(tmp_path / "out"))
    assert_one_line_error(code, err, "eval", f"--data {str(tmp_path / 'elsewhere')!r}")


def test_every_test_that_reads_the_shared_data_is_in_the_integration_tier():
    """A test that names the shared data (``SHARED`` or ``shared_data_dir``) carries the
    ``integration`` marker (directly or through ``needs_shared``), so the default tier never
    depends on data a user's machine does not have."""
    import ast

    unmarked, found = [], 0
    for path in sorted((ROOT / "tests").glob("test_*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in tree.body:
            if not isinstance(node, ast.FunctionDef) or not node.name.startswith("test_"):
                continue
            names = {n.id for n in ast.walk(node) if isinstance(n, ast.Name)}
            if not names & {"SHARED", "shared_data_dir"}:
                continue
            found += 1
            decorators = " ".join(ast.unparse(d) for d in node.decorator_list)
            if "needs_shared" not in decorators and "integration" not in decorators:
                unmarked.append(f"{path.name}::{node.name}")
    assert found >= 4 and unmarked == []
