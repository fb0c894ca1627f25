"""Issue 14, items 1 and 8: the journal's encoding cannot be forged by user data, and a damaged
file is reported with its location (never silently read, never a raw SQLite error)."""

import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab import ManualClock, Memory, MemoryStore
from _support import legacy_file

START = datetime(2024, 3, 1, tzinfo=timezone.utc)
SECRET = "zebra-quartz-secret"  # item content that no error message may show
REPO = Path(__file__).resolve().parents[1]


def memlab_cli(*args, cwd=None):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "memlab", *args], capture_output=True,
                          text=True, cwd=cwd, env=env, timeout=120)


def reopened_metadata(path, item_id="x"):
    store = MemoryStore(path=path)
    try:
        ws = store.workspace("default")
        return ws.items[ws.index_of[item_id]].metadata
    finally:
        store.close()


# ------------------------------------------------------------------ item 1: forged tags
FORGERIES = [
    {"__dc__": "Evil", "fields": {}},                           # reopen: KeyError 'Evil'
    {"__dt__": "not-a-date"},                                   # reopen: ValueError
    {"v": {"__nd__": [""], "dtype": "U5000000"}},               # reopen allocates (80 MB/elt at U50M)
    {"when": {"__dt__": "2020-01-01T00:00:00"}},                # came back as a datetime
    {"deep": [{"x": [{"__nd__": [1, 2], "dtype": "int64"}]}]},  # came back as an array
    {"__dc__": "NewItem", "fields": {"item_id": None, "content": "c", "memory_type": "semantic",
                                     "metadata": {}, "created_at": None}},
    {"____dt__": 1, "__x": {"__": 2}, "_": 3},                  # the escape's own prefix
]


@pytest.mark.parametrize("metadata", FORGERIES, ids=range(len(FORGERIES)))
def test_issue14_metadata_cannot_forge_journal_tags(tmp_path, metadata):
    mem = Memory(path=str(tmp_path / "m.db"), clock=ManualClock(START))
    mem.add("deploys run on fridays", metadata=metadata, item_id="x")
    mem.store.close()
    got = reopened_metadata(tmp_path / "m.db")
    assert got == metadata and json.dumps(got) == json.dumps(metadata)  # types and key order


def test_issue14_forged_tags_through_http_reopen_as_sent(tmp_path):
    pytest.importorskip("fastapi")
    pytest.importorskip("httpx")
    from _service_client import TestClient

    from memlab.service import ServiceState, create_app

    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False)
    http = TestClient(create_app(state))
    for n, metadata in enumerate(FORGERIES):
        r = http.post("/v1/items", json={"content": f"note {n}", "item_id": f"i{n}",
                                         "metadata": metadata})
        assert r.status_code == 200, r.text
    state.store.close()
    again = TestClient(create_app(ServiceState(db_path=str(tmp_path / "m.db"),
                                               maintenance=False)))
    for n, metadata in enumerate(FORGERIES):
        assert again.get(f"/v1/items/i{n}").json()["metadata"] == metadata


def test_issue14_decoding_never_allocates_from_a_dtype_in_the_file():
    from memlab.persist import decode

    # U50000000 is 200 MB per element: refused by the dtype allow-list before numpy sees it
    for payload in ['{"v": {"__nd__": [""], "dtype": "U50000000"}}',
                    '{"v": {"__nd__": [1], "dtype": "object"}}',
                    '{"v": {"__nd__": [[1, 2], [3]], "dtype": "int64"}}',
                    '{"v": {"__nd__": [1e300], "dtype": "int8"}}',
                    '{"v": {"__dt__": "x", "more": 1}}',
                    '{"v": {"__dc__": "Evil", "fields": {}}}',
                    '{"v": {"__x": 1}}',
                    '[1, 2]']:
        with pytest.raises(ValueError):
            decode(payload, {})


# JSON as a user can send it: nested dicts and lists, keys that look like tags at any depth,
# unicode keys, big ints, floats.
TAGGY = st.sampled_from(["__dt__", "__nd__", "__dc__", "____dt__", "__", "__x", "fields",
                         "dtype", "_", "é☃", "k\u00a0"])
KEYS = st.one_of(TAGGY, st.text(st.characters(blacklist_categories=("Cs",)), max_size=8))
SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-(10 ** 30), 10 ** 30),
                    st.floats(allow_nan=False, allow_infinity=False),
                    st.text(st.characters(blacklist_categories=("Cs",)), max_size=10),
                    st.sampled_from(["2020-01-01T00:00:00", "Evil", "NewItem", "int64"]))
JSONISH = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(KEYS, inner, max_size=4)), max_leaves=20)
METADATA = st.dictionaries(KEYS, JSONISH, max_size=5)


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(METADATA)
def test_issue14_any_json_metadata_survives_reopen_exactly(tmp_path_factory, metadata):
    path = tmp_path_factory.mktemp("prop") / "m.db"
    mem = Memory(path=str(path), clock=ManualClock(START))
    mem.add("a note", metadata=metadata, item_id="x")
    mem.store.update_item("default", 0, START, metadata=metadata, detail=metadata)
    mem.store.close()
    store = MemoryStore(path=path)
    item = store.workspace("default").items[0]
    assert json.dumps(item.metadata) == json.dumps(metadata)
    assert item.metadata == metadata
    assert item.history[-1]["detail"] == metadata
    store.close()


def v2_add(item_id, metadata):
    """A store.add_items row as memlab 2 wrote it: metadata verbatim, tags unescaped."""
    return ("store.add_items", json.dumps({
        "workspace_id": "default",
        "new_items": [{"__dc__": "NewItem", "fields": {
            "item_id": item_id, "content": f"note {item_id}", "memory_type": "semantic",
            "metadata": metadata, "created_at": None}}],
        "now": {"__dt__": START.isoformat()}, "initial_activation": 0.5}))


def test_issue14_a_version_2_file_with_forged_metadata_opens_after_migration(tmp_path):
    from memlab.persist import SCHEMA_VERSION

    rows = [("store.create_workspace", '{"workspace_id": "default"}')]
    rows += [v2_add(f"i{n}", m) for n, m in enumerate(FORGERIES)]
    legacy_file(tmp_path / "m.db", rows, 2)
    store = MemoryStore(path=tmp_path / "m.db")
    ws = store.workspace("default")
    assert [ws.items[ws.index_of[f"i{n}"]].metadata for n in range(len(FORGERIES))] == FORGERIES
    assert ws.items[0].created_at == START  # memlab's own tags still read as tags
    state = json.dumps(store.serialize())
    store.close()
    conn = sqlite3.connect(tmp_path / "m.db")
    assert conn.execute("SELECT value FROM meta").fetchone()[0] == str(SCHEMA_VERSION)
    assert conn.execute("SELECT count(*) FROM ops WHERE crc >= 0").fetchone()[0] == len(rows)
    conn.close()
    assert json.dumps(MemoryStore(path=tmp_path / "m.db").serialize()) == state


def test_a_failed_migration_leaves_the_file_as_it_was(tmp_path):
    from memlab.persist import JournalCorruptError

    legacy_file(tmp_path / "m.db", [v2_add("a", {}), ("store.add_items", "{not json")], 2)
    conn = sqlite3.connect(tmp_path / "m.db")
    before = conn.execute("SELECT * FROM ops").fetchall()
    conn.close()
    with pytest.raises(JournalCorruptError, match=r"at row 2: store.add_items cannot be migr"):
        MemoryStore(path=tmp_path / "m.db")
    conn = sqlite3.connect(tmp_path / "m.db")
    assert conn.execute("SELECT value FROM meta").fetchone()[0] == "2"
    assert [r[1] for r in conn.execute("PRAGMA table_info(ops)")] == ["seq", "op", "payload"]
    assert conn.execute("SELECT * FROM ops").fetchall() == before
    conn.close()


# ------------------------------------------------------------------ item 8: damaged files
def written(tmp_path, name="m.db"):
    """A store of 4 rows: create_workspace, two adds (one holding SECRET), an edge."""
    path = tmp_path / name
    mem = Memory(path=str(path), clock=ManualClock(START))
    mem.add(f"the {SECRET} deploy note", item_id="a")
    mem.add("second note", item_id="b")
    mem.add_edge("a", "b")
    mem.store.close()
    return path


def sql(path, statement):
    conn = sqlite3.connect(path)
    conn.execute(statement)
    conn.commit()
    conn.close()


def flip(path, needle: bytes, offset: int, value: int | None = None):
    data = bytearray(path.read_bytes())
    at = data.find(needle)
    assert at >= 0
    data[at + offset] = value if value is not None else data[at + offset] ^ 0x01
    path.write_bytes(bytes(data))


def assert_damaged(path, pattern):
    with pytest.raises(ValueError, match=pattern) as info:
        MemoryStore(path=path)
    assert SECRET not in str(info.value)
    assert type(info.value).__name__ == "JournalCorruptError"
    return info.value


def test_issue14_a_zero_byte_file_is_not_an_empty_store(tmp_path):
    (tmp_path / "m.db").write_bytes(b"")
    assert_damaged(tmp_path / "m.db", r"'.*m.db' is damaged: the file is empty \(0 bytes\)")
    assert (tmp_path / "m.db").read_bytes() == b""  # nothing written into it


def test_a_new_path_still_creates_a_store_and_leaves_no_temporary_file(tmp_path):
    store = MemoryStore(path=tmp_path / "new.db")
    assert store.journal.count() == 0 and store.workspace_ids() == []
    store.close()
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith("new.db")) == []
    assert MemoryStore(path=tmp_path / "new.db").journal.integrity_check() == "ok"


def test_issue14_a_deleted_row_is_reported_not_lost_silently(tmp_path):
    path = written(tmp_path)
    sql(path, "DELETE FROM ops WHERE seq = 2")
    err = assert_damaged(path, r"damaged at row 2: missing \(deleted, or its write lost\)")
    assert err.seq == 2 and err.path == str(path)


def test_a_deleted_last_row_is_reported_too(tmp_path):
    path = written(tmp_path)
    sql(path, "DELETE FROM ops WHERE seq = 4")
    assert_damaged(path, r"damaged at row 4: missing at the end of the journal")


@pytest.mark.parametrize("value", [None, 0xFF], ids=["case-flip", "invalid-utf8"])
def test_issue14_a_flipped_byte_in_a_payload_is_reported_with_its_row(tmp_path, value):
    path = written(tmp_path)
    flip(path, SECRET.encode(), 3, value)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"  # SQLite sees nothing
    conn.close()
    err = assert_damaged(path, r"damaged at row 2: checksum mismatch")
    assert err.seq == 2


def test_issue14_a_truncated_file_is_reported_as_truncated(tmp_path):
    path = written(tmp_path)
    data = path.read_bytes()
    assert len(data) > 8192
    path.write_bytes(data[:8192])
    assert_damaged(path, r"damaged: the file is truncated \(8192 bytes; its header says")


def test_a_row_that_cannot_be_applied_names_its_row_and_not_its_content(tmp_path):
    from memlab.persist import Journal, encode

    path = written(tmp_path)
    journal = Journal(path)  # well-formed rows with valid checksums that replay cannot apply
    journal.append("store.add_edges", encode({"workspace_id": "default",
                                              "edges": [[0, 99, SECRET, 1.0]]}))
    journal.close()
    assert_damaged(path, r"at row 5: store.add_edges names an item that does not exist")
    sql(path, "DELETE FROM ops WHERE seq = 5")
    sql(path, "UPDATE sqlite_sequence SET seq = 4 WHERE name = 'ops'")
    journal = Journal(path)
    journal.append("store.close", "{}")
    journal.close()
    assert_damaged(path, r"at row 5: an unknown operation")
    sql(path, "DELETE FROM ops WHERE seq = 5")
    sql(path, "UPDATE sqlite_sequence SET seq = 4 WHERE name = 'ops'")
    journal = Journal(path)
    journal.append("store.pin", encode({"workspace_id": "default", "session_id": "s",
                                        "item_id": SECRET, "weight": 1.0, "now": START,
                                        "ttl_h": 1.0}))
    journal.close()
    assert_damaged(path, r"at row 5: store.pin cannot be applied \(UnknownItemError\)")


def test_memlab_check_reports_one_line_per_problem(tmp_path):
    path = written(tmp_path)
    ok = memlab_cli("check", str(path))
    assert ok.returncode == 0 and ok.stdout == f"{path}: ok\n"
    sql(path, "DELETE FROM ops WHERE seq = 2")
    flip(path, b"second note", 2)
    bad = memlab_cli("check", str(path))
    assert bad.returncode == 1
    assert bad.stdout.splitlines() == [  # row 4, the edge, needs the items of rows 2 and 3
        f"{path}: row 2: missing (deleted, or its write lost)",
        f"{path}: row 3: checksum mismatch (the row was changed after it was written)",
        f"{path}: row 4: store.add_edges names an item that does not exist",
        f"{path}: damaged (3 problems); nothing was changed. `memlab recover {path} --out NEW` "
        f"copies what is intact into a new file"]
    assert SECRET not in bad.stdout + bad.stderr
    missing = memlab_cli("check", str(tmp_path / "nothere.db"))
    assert missing.returncode == 2 and missing.stderr.startswith("memlab check: error: db ")
    assert not (tmp_path / "nothere.db").exists()


def test_memlab_check_reads_without_changing_the_file(tmp_path):
    path = tmp_path / "v2.db"
    legacy_file(path, [("store.create_workspace", '{"workspace_id": "default"}'),
                       v2_add("a", {"__dc__": "Evil", "fields": {}})], 2)
    before = path.read_bytes()
    assert memlab_cli("check", str(path)).returncode == 0  # sound; migrated on the next open
    assert path.read_bytes() == before


def test_memlab_recover_salvages_every_intact_row(tmp_path):
    path = written(tmp_path)
    flip(path, b"second note", 2)  # row 3: the second add; row 4 (its edge) then cannot apply
    out = tmp_path / "new.db"
    run = memlab_cli("recover", str(path), "--out", str(out))
    assert run.returncode == 1, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == f"{path}: row 3: checksum mismatch (the row was changed after it was " \
                       f"written)"
    assert lines[1] == f"{path}: row 4: store.add_edges names an item that does not exist"
    assert lines[2] == f"kept 2 of the 4 rows found; wrote {out}"
    store = MemoryStore(path=out)
    assert store.workspace("default").item_ids == ["a"]
    assert store.journal.count() == 2
    store.close()
    assert memlab_cli("check", str(out)).returncode == 0
    again = memlab_cli("recover", str(path), "--out", str(out))
    assert again.returncode == 2 and again.stdout == ""
    assert again.stderr == f"memlab recover: error: --out {str(out)!r} already exists; " \
                           f"recover never overwrites a file\n"


def test_recover_reads_a_truncated_file_as_far_as_it_can(tmp_path):
    from memlab.journal_repair import recover_journal

    path = written(tmp_path)
    path.write_bytes(path.read_bytes()[:8192])
    report = recover_journal(path, tmp_path / "new.db")
    assert report.problems and report.problems[0].startswith("the file is truncated")
    MemoryStore(path=tmp_path / "new.db").close()  # whatever was kept, the new file opens


def test_review14_recover_salvages_a_file_missing_its_last_page(tmp_path):
    """SQLite refuses a file shorter than its header's page count; recover reads a copy whose
    count is set to the pages present, so everything but the lost page is kept."""
    path = tmp_path / "m.db"
    mem = Memory(path=str(path), clock=ManualClock(START))
    ids = [f"n{i:04d}" for i in range(300)]
    for i, item_id in enumerate(ids):
        mem.add(f"note-{i:04d} payroll content " + "pad " * 30, item_id=item_id)
    mem.store.close()
    full = path.read_bytes()
    page = int.from_bytes(full[16:18], "big")
    pages = int.from_bytes(full[28:32], "big")
    assert len(full) == pages * page and pages > 10  # several pages of rows
    lost = full[-page:]
    on_lost = [i for i in range(300) if f"note-{i:04d}".encode() in lost]
    assert on_lost, "the last page holds rows"
    path.write_bytes(full[:-page])
    cut = path.read_bytes()
    before = sorted(p.name for p in tmp_path.iterdir())

    checked = memlab_cli("check", str(path))  # check reads only, and still says truncated
    assert checked.returncode == 1
    assert checked.stdout.splitlines()[0] == (f"{path}: the file is truncated ({len(cut)} bytes; "
                                              f"its header says {pages} pages of {page} bytes)")

    out = tmp_path / "new.db"
    run = memlab_cli("recover", str(path), "--out", str(out))
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == checked.stdout.splitlines()[0]
    assert any("missing at the end of the journal" in line for line in lines)
    assert path.read_bytes() == cut  # the input is unchanged, and nothing was made beside it
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "new.db") == before

    store = MemoryStore(path=out)
    kept = store.workspace("default").item_ids
    count = store.journal.count()
    store.close()
    assert lines[-1] == f"kept {count} of the {count} rows found; wrote {out}"
    # every item not on the lost page survives; what is kept is a prefix of what was written,
    # at least every item written before the first one on the lost page
    assert set(ids) - {ids[i] for i in on_lost} <= set(kept)
    assert kept == ids[:len(kept)] and len(kept) >= min(on_lost) >= 300 - 3 * len(on_lost)
    assert memlab_cli("check", str(out)).returncode == 0

    # a cut inside the first pages, which hold the schema: one clear line says so
    for whole in (1, 2):
        path.write_bytes(full[:whole * page + 10])
        out = tmp_path / f"first{whole}.db"
        run = memlab_cli("recover", str(path), "--out", str(out))
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert run.stdout.splitlines()[1].startswith(
            f"{path}: SQLite cannot read its schema from the {whole} whole "
            f"page{'s' if whole > 1 else ''} left (")
        assert run.stdout.splitlines()[-1] == f"kept 0 of the 0 rows found; wrote {out}"
        assert path.read_bytes() == full[:whole * page + 10]
    path.write_bytes(full[:page - 1])
    run = memlab_cli("recover", str(path), "--out", str(tmp_path / "none.db"))
    assert run.stdout.splitlines()[1] == f"{path}: SQLite cannot read its schema (not one whole " \
                                         f"page is left)"


@pytest.mark.parametrize("command", ["serve", "mcp"])
def test_issue14_serve_on_a_damaged_file_exits_with_one_line(tmp_path, command):
    pytest.importorskip("uvicorn")
    path = written(tmp_path)
    flip(path, SECRET.encode(), 3, 0xFF)
    args = [command, "--db", str(path)] + (["--port", "0"] if command == "serve" else [])
    run = memlab_cli(*args)
    assert run.returncode == 2 and run.stdout == ""
    assert run.stderr.count("\n") == 1 and "Traceback" not in run.stderr
    assert run.stderr.startswith(f"memlab {command}: error: journal {str(path)!r} is damaged "
                                 f"at row 2: checksum mismatch")
    assert SECRET not in run.stderr and SECRET[3:] not in run.stderr


def test_check_and_recover_know_the_caches_of_a_workspace(tmp_path):
    """A workspace's cache journals as ``cache@"<workspace>":<name>.<op>``; check and recover
    read those rows as cache rows, not as unknown operations."""
    from memlab.service import ServiceState

    path = tmp_path / "caches.db"
    state = ServiceState(db_path=path)
    state.cache("team", "ws:one").set("k", "v")  # a colon inside the workspace id too
    state.cache("team").set("k2", "v2")
    state.memory("ws:one").add("hello")
    state.store.close()
    ok = memlab_cli("check", str(path))
    assert ok.returncode == 0 and ok.stdout == f"{path}: ok\n", ok.stdout
    out = tmp_path / "recovered.db"
    recovered = memlab_cli("recover", str(path), "--out", str(out))
    assert recovered.returncode == 0, recovered.stdout + recovered.stderr
    again = ServiceState(db_path=out)
    assert again.cache("team", "ws:one").peek("k") == (True, "v", 0)
    assert again.cache("team").peek("k2") == (True, "v2", 0)
    assert again.cache("team").peek("k") == (False, None, -1)  # the workspace's stays its own
