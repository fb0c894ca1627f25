"""Round 5's merge and outside-check fixes."""

import subprocess
import sys


def test_eval_embedder_help_names_every_built_in_embedder():
    code = ("import memlab.signals.dense as d, memlab.cli as c, io, contextlib\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try: c.main(['eval', '--help'])\n"
            "    except SystemExit: pass\n"
            "text = ' '.join(buf.getvalue().split())\n"
            "print([n for n in sorted(d.EMBEDDERS) if n not in text])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"


# ------------------------------------ outside check A: check/recover on read-only and linked files
import contextlib  # noqa: E402
import os  # noqa: E402
import shutil  # noqa: E402
from pathlib import Path  # noqa: E402

import pytest  # noqa: E402

from memlab import Memory  # noqa: E402


def _store(folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "m.db"
    mem = Memory(path=str(path))
    mem.add_many([{"item_id": f"i{n}", "content": f"note {n} about the deploy"}
                  for n in range(5)])
    mem.store.close()
    return path


def _run(*argv: str) -> int:
    from memlab.cli import main
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        return main(list(argv))


def _listing(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@contextlib.contextmanager
def _read_only(path: Path):
    """Make ``path`` read-only even for root (chattr +i), or skip saying why."""
    import subprocess
    if shutil.which("chattr") is None or subprocess.run(
            ["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        if os.geteuid() == 0:
            pytest.skip("chattr +i is not available here and root ignores file modes")
        mode = path.stat().st_mode
        path.chmod(0o555 if path.is_dir() else 0o444)
        try:
            yield
        finally:
            path.chmod(mode)
        return
    try:
        yield
    finally:
        subprocess.run(["chattr", "-i", str(path)], check=True)


def test_a_sound_store_in_a_read_only_folder_checks_ok_and_recovers_whole(tmp_path):
    path = _store(tmp_path / "ro")
    before = _listing(path.parent)
    with _read_only(path.parent):
        assert _run("check", str(path)) == 0
        assert _run("recover", str(path), "--out", str(tmp_path / "saved.db")) == 0
        assert _listing(path.parent) == before
    saved = Memory(path=str(tmp_path / "saved.db"))
    try:
        assert saved.search("note 3", top_k=1)[0]["item_id"] == "i3"
    finally:
        saved.store.close()


def test_a_read_only_file_in_a_writable_folder_leaves_no_wal_or_shm(tmp_path):
    path = _store(tmp_path / "f")
    before = _listing(path.parent)
    with _read_only(path):
        assert _run("check", str(path)) == 0
        assert _run("recover", str(path), "--out", str(tmp_path / "saved.db")) == 0
    assert _listing(path.parent) == before


def test_checking_through_a_symbolic_link_leaves_the_target_folder_as_it_was(tmp_path):
    path = _store(tmp_path / "target")
    elsewhere = tmp_path / "links"
    elsewhere.mkdir()
    (elsewhere / "link.db").symlink_to(path)
    (path.parent / "near.db").symlink_to(path)
    before, before_links = _listing(path.parent), _listing(elsewhere)
    for link in (elsewhere / "link.db", path.parent / "near.db"):
        assert _run("check", str(link)) == 0
        assert _run("recover", str(link), "--out", str(tmp_path / f"{link.stem}.db")) == 0
    assert _listing(path.parent) == before and _listing(elsewhere) == before_links


# ------------------------------- outside check A, defect 4: replacing a deprecated name is refused
def test_replacing_a_deprecated_name_is_refused_and_changes_nothing():
    from memlab.surfacing.router import ROUTER_RULES, register_router_rule
    from memlab.surfacing.strategies import STRATEGIES, register_strategy
    before_rule = dict.__getitem__(ROUTER_RULES, "recency_words")
    before_strategy = dict.__getitem__(STRATEGIES, "recent_items")
    with pytest.raises(ValueError, match="'recency' is the deprecated name of the strategy "
                                         "'recent_items'"):
        register_strategy("recency", before_strategy, replace=True)
    with pytest.raises(ValueError, match="'recency' is the deprecated name of the router rule "
                                         "'recency_words'"):
        register_router_rule("recency", lambda query, config: None, replace=True)
    assert not dict.__contains__(STRATEGIES, "recency")
    assert not dict.__contains__(ROUTER_RULES, "recency")
    assert dict.__getitem__(ROUTER_RULES, "recency_words") is before_rule
    assert dict.__getitem__(STRATEGIES, "recent_items") is before_strategy


# ---------------- outside check A, defect 5: a result saved before the rename gets the new column
def test_a_result_saved_before_the_rename_loads_with_budget_stage_ms(tmp_path):
    pytest.importorskip("pyarrow")
    import pandas as pd

    from memlab.datasets import load_fixture_trace
    from memlab.harness.replay import ReplayResult, replay
    result = replay(load_fixture_trace("apollo_demo"), progress=False)
    saved = result.save(tmp_path / "now")
    frame = pd.read_parquet(saved / "decisions.parquet")
    assert frame["budget_ms"].equals(frame["budget_stage_ms"])
    frame.drop(columns=["budget_stage_ms"]).to_parquet(saved / "decisions.parquet", index=False)
    loaded = ReplayResult.load(saved).decisions  # as last release wrote it: budget_ms only
    assert set(loaded.columns) == set(result.decisions.columns)
    assert loaded["budget_stage_ms"].equals(frame["budget_stage_ms"])


# ------------------------- outside check A, defects 6 and 8: keys files that would open the server
@pytest.mark.parametrize("data, message", [
    ({"keys": []}, "'keys' is empty: give at least one key"),
    ({"keys": 5}, "'keys' must be a list of key tables, got 5"),
    ({"key": []}, "exactly one field, 'keys'"),
])
def test_a_keys_file_without_keys_is_refused(data, message):
    from memlab.service.auth import KeyRing
    with pytest.raises(ValueError, match=message):
        KeyRing.from_mapping(data)


def test_serve_refuses_an_empty_keys_file(tmp_path):
    path = tmp_path / "keys.toml"
    path.write_text("keys = []\n")
    from memlab.cli import main
    with contextlib.redirect_stderr(open(os.devnull, "w")):
        assert main(["serve", "--keys-file", str(path), "--port", "0"]) != 0


def test_register_embedder_blames_the_factory_when_it_is_not_callable():
    from memlab.signals.dense import EMBEDDERS, register_embedder
    with pytest.raises(ValueError, match="the embedder registered as 'mine' must be callable, "
                                         "got 42"):
        register_embedder("mine", 42)
    assert "mine" not in EMBEDDERS


# --------------------------------- outside check A, defect 7: the schema documents 403 (scoped keys)
def test_openapi_documents_403_on_every_keyed_route_and_not_on_health():
    from memlab.service import ServiceState, create_app
    paths = create_app(ServiceState()).openapi()["paths"]
    assert "403" in paths["/v1/items"]["post"]["responses"]
    assert "403" in paths["/health/graph"]["get"]["responses"]
    assert "403" not in paths["/health"]["get"]["responses"]


# ------------------------- outside check A: an id repeated inside one batch is named as such
def test_an_id_given_twice_in_one_batch_says_so_and_adds_nothing():
    from memlab.errors import DuplicateItemError
    mem = Memory()
    mem.add("already here", item_id="old")
    rows = [{"item_id": "zz", "content": "one"}, {"item_id": "zz", "content": "two"}]
    with pytest.raises(DuplicateItemError, match=r"'zz' is given twice in this batch "
                                                 r"\(items 0 and 1\)"):
        mem.add_many(rows)
    with pytest.raises(DuplicateItemError, match="'old' already exists in workspace"):
        mem.add_many([{"item_id": "new", "content": "x"}, {"item_id": "old", "content": "y"}])
    assert [h["item_id"] for h in mem.search("already one two", top_k=5)] == ["old"]
    assert mem.store.workspace("default").ids_of(range(len(mem.store.workspace("default")))) == ["old"]


# ------------------------ outside check B, defect 1: a numpy weight gets the real reason it is refused
@pytest.mark.parametrize("weight", [-1, 0, -3])
def test_a_zero_or_negative_integer_weight_in_a_frame_says_it_must_be_positive(weight):
    import numpy as np
    import pandas as pd
    mem = Memory()
    mem.add_many([{"item_id": "a", "content": "one"}, {"item_id": "b", "content": "two"}])
    frame = pd.DataFrame({"src": ["a"], "dst": ["b"], "edge_type": ["RELATED"],
                          "weight": [weight]})
    with pytest.raises(ValueError, match=r"weight must be finite and > 0, got -?\d+\.0"):
        mem.add_edges(frame)
    with pytest.raises(ValueError, match=r"weight must be finite and > 0"):
        mem.add_edges([("a", "b", "RELATED", np.int64(weight))])
    assert mem.add_edges(pd.DataFrame({"src": ["a"], "dst": ["b"], "edge_type": ["RELATED"],
                                       "weight": [np.int64(2)]})) == 1


# ------------------ outside check B, defect 2: tuning composite weights under a ranker is refused first
def test_tune_refuses_composite_weights_of_a_base_with_a_reranker_before_any_replay(capsys):
    pytest.importorskip("optuna")
    pytest.importorskip("sklearn")
    from memlab.cli import main
    code = main(["tune", "fixture:apollo_demo", "--config", "conversational", "--measure", "R@5",
                 "--folds", "2", "--trials", "2", "--group-by", "question", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2
    assert "ranks with a learned reranker" in err and "search fields that replay" in err


# ---------------------- outside check B, defect 3: an embedder refuses one string and non-strings
@pytest.mark.parametrize("name", ["hashing", "minilm-onnx", "minilm-openvino-int8",
                                  "minilm-static"])
@pytest.mark.parametrize("texts, message", [
    ("hello", "texts must be a list of strings, got one string 'hello'"),
    (["ok", 5], r"texts\[1\] must be a string, got 5"),
    ([None], r"texts\[0\] must be a string, got None"),
    ((t for t in ["a"]), "texts must be a list of strings, got generator"),
])
def test_every_embedder_refuses_what_is_not_a_list_of_strings(name, texts, message):
    from memlab.signals.dense import EMBEDDERS, DenseConfig, get_embedder
    try:
        embedder = EMBEDDERS[name]()
    except ImportError as exc:
        pytest.skip(f"{name}: its extra is not installed ({exc})")
    with pytest.raises(ValueError, match=message):
        embedder.encode(texts)
    if name == "hashing":  # and through the cache every caller uses
        with pytest.raises(ValueError, match=message):
            get_embedder(DenseConfig(embedder=name, cache_dir="")).encode(texts)


# ------------------------------------- outside check B, defect 4: an empty trace's replay says so
def test_replaying_a_trace_without_queries_says_there_is_nothing_to_measure(tmp_path, capsys):
    from memlab.cli import main
    from memlab.harness.trace import TraceBuilder
    path = TraceBuilder("empty", start="2024-01-01T00:00:00+00:00").build().write_jsonl(
        tmp_path / "empty.jsonl")
    assert main(["replay", str(path), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert "no judged queries: no measures to report" in out and "Series" not in out


def test_the_config_help_names_every_shipped_recipe():
    from memlab.cli import _CONFIG_HELP
    from memlab.surfacing.config import shipped_recipes
    assert shipped_recipes() and all(name in _CONFIG_HELP for name in shipped_recipes())


# ------------------------------ outside check A (left in round 4): counts are integers, not booleans
@pytest.mark.parametrize("value", [True, "5", 5.0])
def test_http_counts_refuse_booleans_strings_and_floats(value):
    from fastapi.testclient import TestClient

    from memlab.service import ServiceState, create_app
    http = TestClient(create_app(ServiceState(maintenance=False)), base_url="http://localhost")
    assert http.post("/v1/items", json={"content": "deploys run on fridays"}).status_code in \
        (200, 201)
    assert http.post("/v1/search", json={"query": "deploys", "top_k": 5}).status_code == 200
    bad = http.post("/v1/search", json={"query": "deploys", "top_k": value})
    assert bad.status_code == 422 and "top_k" in bad.text
    bad = http.post("/v1/context", json={"session_id": "s", "query": "deploys", "k": value})
    assert bad.status_code == 422 and "k" in bad.text


# ---------------- code review: a deadline marks only the groups it cut (those with a frontier left)
def test_a_shared_deadline_marks_only_the_groups_it_cut(monkeypatch):
    import numpy as np

    import memlab.graph.spreading as spreading
    from memlab.graph.spreading import SpreadConfig, run_spreads
    mem = Memory()
    mem.add_many([{"item_id": i, "content": i} for i in ["z", "a", "b", "c", "d", "e"]])
    mem.add_edges([("a", "b"), ("b", "c"), ("c", "d"), ("d", "e")])
    ticks = iter(range(0, 10_000))  # a fake clock: 1 ms a reading

    class Clock:
        @staticmethod
        def perf_counter():
            return next(ticks) / 1e3

    monkeypatch.setattr(spreading, "time", Clock)
    ws = mem.store.workspace("default")
    z, a = ws.row_of("z"), ws.row_of("a")
    config = SpreadConfig(depth=4, budget_ms=1.5)
    alone, = run_spreads(ws, [np.array([z])], config)
    both = run_spreads(ws, [np.array([z]), np.array([a])], config)
    assert alone.budget_exhausted is False and both[0].budget_exhausted is False
    assert both[1].budget_exhausted is True and both[1].hops_completed < 4


def test_a_writer_opening_the_file_during_an_immutable_read_makes_check_read_it_again(
        tmp_path, monkeypatch):
    import memlab.journal_repair as repair
    path = _store(tmp_path / "w")
    calls = []
    real_scan = repair._scan_file

    def scan(p, what, immutable):
        calls.append(immutable)
        out = real_scan(p, what, immutable)
        if immutable:  # a writer arrives while the immutable read runs
            Path(f"{path}-wal").write_bytes(b"")
        return out

    monkeypatch.setattr(repair, "_scan_file", scan)
    assert repair.check_journal(path) == [] and calls == [True, False]
    calls.clear()
    assert repair.check_journal(path) == [] and calls == [False]  # a log beside it: never immutable


def test_a_stray_argument_is_reported_by_its_command(capsys):
    from memlab.cli import main
    with pytest.raises(SystemExit) as exc:
        main(["check", "a.db", "b.db"])
    assert exc.value.code == 2
    assert "memlab check: error: unrecognized arguments: b.db" in capsys.readouterr().err
