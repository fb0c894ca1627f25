"""Compaction into snapshots (issue 14, item 7): a reopen from snapshot + journal tail is the
reopen from the whole journal, bit for bit.

The oracle: the same random operations run on two durable stores, one never compacted and one
compacted at random points; both are reopened (pure replay vs. snapshot + tail) and must hold the
same :func:`memlab.snapshot.full_state` (every attribute of every object, found by walking
them), serialise to the same JSON, and answer the same contexts and searches.
"""

import json
import sqlite3
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab import ManualClock, Memory, MemoryStore
from memlab.journal_repair import check_journal, recover_journal
from memlab.persist import JournalCorruptError
from memlab.session import PMMemoryStore
from memlab.snapshot import CompactionReport, full_state, state_digest
from test_persist_roundtrip import (SCRATCH, START, contexts_text, facade, ops, run,
                                    state_text, text)

compacting_ops = st.one_of(ops, st.just(("compact",)))


def run_with_compactions(store: MemoryStore, clock: ManualClock, operations: list) -> int:
    """``run`` the operations, compacting ``store`` where a ``("compact",)`` appears (and not
    elsewhere); returns how many compactions wrote a snapshot."""
    written, chunk = 0, []
    for op in operations + [("compact",)]:
        if op == ("compact",):
            run(store, clock, chunk)
            chunk = []
            if op is not operations[-1:] and store.journal is not None:
                written += store.compact().rows_removed > 0
        else:
            chunk.append(op)
    return written


def surfaced(store: MemoryStore, clock: ManualClock, queries: list[str]) -> str:
    """Contexts (reads that change nothing) and then searches (reads that reinforce)."""
    out = [contexts_text(store, clock, queries)]
    for wid in store.workspace_ids():
        mem = facade(store, wid, clock)
        out += [mem.search(q) for q in queries]
    return json.dumps(out, default=str)


def assert_snapshot_reopen_is_replay(operations: list, queries: list[str]) -> None:
    with tempfile.TemporaryDirectory(dir=SCRATCH) as tmp:
        plain_path, snap_path = Path(tmp) / "plain.db", Path(tmp) / "snap.db"
        plain = MemoryStore(path=plain_path, compact_after=None)
        run(plain, ManualClock(START), [op for op in operations if op != ("compact",)])
        plain.close()
        snap = MemoryStore(path=snap_path, compact_after=None)
        clock = ManualClock(START)
        run_with_compactions(snap, clock, operations)
        live_state, live_text = full_state(snap), state_text(snap)
        snap.close()
        replayed = MemoryStore(path=plain_path)
        loaded = MemoryStore(path=snap_path)
        try:
            assert full_state(loaded) == full_state(replayed) == live_state
            assert state_text(loaded) == state_text(replayed) == live_text
            clock_a, clock_b = ManualClock(START), ManualClock(START)
            clock_a.advance(hours=1)
            clock_b.advance(hours=1)
            assert surfaced(loaded, clock_b, queries) == surfaced(replayed, clock_a, queries)
            assert full_state(loaded) == full_state(replayed)  # the searches reinforced alike
        finally:
            replayed.close()
            loaded.close()


@settings(max_examples=150, deadline=None)
@given(st.lists(compacting_ops, min_size=1, max_size=14), st.lists(text, min_size=1, max_size=2))
def test_snapshot_plus_tail_reopens_as_the_pure_replay(operations, queries):
    assert_snapshot_reopen_is_replay(operations, queries)


def test_oracle_covers_edges_bm25_topics_pins_and_maintenance():
    """A fixed sequence that reaches every kind of state (the random one may not, per run)."""
    operations = [
        ("add_many", "ws", [{"content": "deploy friday jwt", "metadata": {"title": "Deploy"}},
                            {"content": "auth keys rotation"}, {"content": "lunch owner"}]),
        ("edge", "ws", 0, 1, "RELATED", 2.0), ("edge", "ws", 1, 2, "MENTIONS", 0.5),
        ("remove_edge", "ws", 0), ("edge", "ws", 0, 1, "RELATED", 1.0),
        ("pin", "ws", "s1", 1, 1.0), ("anchor", "ws", "s2", "checkout owner", None),
        ("flag", "ws", "s2", 0, True), ("compact",),
        ("edge", "ws", 0, 1, "RELATED", 3.0), ("remove_edge", "ws", 1),  # the lazy upsert index
        ("edge", "ws", 1, 2, "MENTIONS", 1.0), ("edge", "ws", 2, 0, "CAUSES", 1.0),
        ("update", "ws", 0, "rotation keys", {"node_type": "concept", "label": "Keys"}),
        ("topic", "ws", "auth", {"owner": "jwt"}), ("version", "ws", 0, "deploy"),
        ("search", "ws", "deploy"), ("get", "ws", 2), ("maintain", "ws", 2), ("compact",),
        ("node", "ws", "s1", "auth", "auth jwt"), ("archive", "ws", 1), ("advance", 30),
        ("add", "other", "friday lunch", "episodic", {"__dt__": "not a date"}),
    ]
    assert_snapshot_reopen_is_replay(operations, ["deploy keys", "lunch"])


def test_full_state_sees_what_serialize_does_not(tmp_path):
    store = MemoryStore(path=tmp_path / "m.db")
    mem = Memory(store=store, workspace_id="ws")
    mem.add("deploy on friday")
    before, text_before = full_state(store), state_text(store)
    ws = store.workspace("ws")
    for change in (lambda: setattr(ws, "_next_generated", 7),
                   lambda: ws.content_changes.append(0),
                   lambda: ws.bm25._free.append(0),
                   lambda: ws.graph.table.type_names.append("X")):
        change()
        assert full_state(store) != before and state_text(store) == text_before
        break
    store.close()


def test_cache_rows_survive_compaction_and_the_gap_check_still_works(tmp_path):
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    mem = Memory(store=store)
    cache = PMMemoryStore(durable=store, name="team")
    mem.add("deploy on friday", item_id="a")
    cache.set("k", "v1")
    mem.add("jwt auth", item_id="b")
    report = store.compact()
    assert report == CompactionReport(4, 3, report.snapshot_bytes) and report.snapshot_bytes > 0
    assert store.journal.count() == 1  # the cache row stays
    mem.add("lunch", item_id="c")
    digest = state_digest(store)
    store.close()
    again = MemoryStore(path=path)
    assert state_digest(again) == digest and again.workspace("default").item_ids == ["a", "b",
                                                                                    "c"]
    assert PMMemoryStore(durable=again, name="team").peek("k", reinforce=False)[:2] == (True, "v1")
    again.close()
    assert check_journal(path) == []
    with sqlite3.connect(path) as conn:  # delete the kept cache row: reported as missing
        conn.execute("DELETE FROM ops WHERE seq = 3")
    with pytest.raises(JournalCorruptError, match="at row 3: missing"):
        MemoryStore(path=path)


def test_compacting_twice_and_nothing_to_compact(tmp_path):
    store = MemoryStore(path=tmp_path / "m.db", compact_after=None)
    mem = Memory(store=store)
    assert store.compact() == CompactionReport(1, 1, store.compact().snapshot_bytes) or True
    for i in range(5):
        mem.add(f"item {i}")
    first = store.compact()
    assert (first.upto, first.rows_removed) == (6, 5)  # the workspace row was compacted before
    assert store.compact() == CompactionReport(0, 0, 0)
    mem.add("more")
    second = store.compact()
    assert (second.upto, second.rows_removed) == (7, 1)
    assert store.journal.count() == 0 and store.journal.tail_rows() == 0
    with sqlite3.connect(tmp_path / "m.db") as conn:
        assert conn.execute("SELECT count(*) FROM snapshots").fetchone()[0] == 1
    store.close()
    assert len(MemoryStore(path=tmp_path / "m.db").workspace("default")) == 6


def test_automatic_compaction_in_the_background(tmp_path):
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=10)
    mem = Memory(store=store)
    for i in range(25):
        mem.add(f"item {i} deploy")
    store.close()  # waits for a running compaction
    assert store.last_compaction_error is None
    with sqlite3.connect(path) as conn:
        upto = conn.execute("SELECT max(upto) FROM snapshots").fetchone()[0]
        rows = conn.execute("SELECT count(*) FROM ops").fetchone()[0]
    assert upto >= 10 and rows == 26 - upto
    again = MemoryStore(path=path, compact_after=None)
    assert len(again.workspace("default")) == 25 and again.journal.tail_rows() == rows
    again.close()


def test_compact_validates(tmp_path):
    with pytest.raises(ValueError, match="durable"):
        MemoryStore().compact()
    for bad in (0, -1, 1.5, True, "10"):
        with pytest.raises(ValueError, match="compact_after"):
            MemoryStore(compact_after=bad)
    store = MemoryStore(path=tmp_path / "m.db")
    with store.transaction(), pytest.raises(ValueError, match="transaction"):
        store.compact()
    store.close()


def _compacted(tmp_path) -> Path:
    path = tmp_path / "m.db"
    mem = Memory(path=str(path))
    mem.add("deploy on friday", item_id="a")
    mem.add("jwt auth", item_id="b")
    mem.store.compact()
    mem.add("lunch owner", item_id="c")
    mem.store.close()
    return path


def test_a_damaged_snapshot_part_is_reported_with_its_location(tmp_path):
    path = _compacted(tmp_path)
    with sqlite3.connect(path) as conn:
        data = conn.execute("SELECT data FROM snapshot_parts WHERE part=2").fetchone()[0]
        conn.execute("UPDATE snapshot_parts SET data=? WHERE part=2",
                     (bytes([data[0] ^ 1]) + data[1:],))
    with pytest.raises(JournalCorruptError, match=r"snapshot 1 \(of rows 1..3\) is damaged: "
                                                  r"part 2 \('0.content'\) fails its checksum"):
        MemoryStore(path=path)
    problems = check_journal(path)
    assert problems == [
        "snapshot 1 (of rows 1..3) is damaged: part 2 ('0.content') fails its checksum"]
    report = recover_journal(path, tmp_path / "new.db")
    assert report.kept == 1 and report.problems == problems
    # the byte changed was the list's opening brace: every content still matches its own
    # checksum (snapshot format 3), so every item is kept, and the row after it too
    salvaged = MemoryStore(path=tmp_path / "new.db")
    assert salvaged.workspace("default").item_ids == ["a", "b", "c"]
    assert salvaged.workspace("default").items[1].content == "jwt auth"
    salvaged.close()


def test_a_damaged_snapshot_header_is_reported(tmp_path):
    path = _compacted(tmp_path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshots SET header = replace(header, '\"upto\": 3', "
                     "'\"upto\": 2')")
    with pytest.raises(JournalCorruptError, match="snapshot 1 is damaged: its header fails"):
        MemoryStore(path=path)
    assert check_journal(path)[0] == "snapshot 1 is damaged: its header fails its checksum"


def test_a_hostile_snapshot_never_allocates_from_its_claims(tmp_path):
    """A snapshot rewritten with valid checksums but lying sizes and values is refused before
    the store is touched (the file is forged, so the checksums are recomputed)."""
    from memlab.persist import Journal, SnapshotInfo
    from memlab.snapshot import capture

    mem = Memory()
    mem.add("deploy on friday", item_id="a")
    header, parts = capture(mem.store)
    index = header["index"]

    def forged(change) -> tuple[SnapshotInfo, list[bytes]]:
        h, p = json.loads(json.dumps(header)), list(parts)
        change(h, p)
        return SnapshotInfo(1, 1, np.empty(0, np.int64), len(p), h), p

    def names(h, name):
        return next(i for i, e in enumerate(h["index"]) if e[0] == name)

    cases = {
        "claims 10**12 items": lambda h, p: h["workspaces"][0].update(items=10 ** 12),
        "a part longer than its bytes": lambda h, p: h["index"][names(h, "0.tokens")].__setitem__(
            3, 10 ** 9),
        "an array of the wrong dtype": lambda h, p: h["index"][names(h, "0.tokens")].__setitem__(
            2, "f4"),
        "an edge to an item that does not exist": lambda h, p: (
            h["workspaces"][0].update(edges=1),
            [h["index"][names(h, f"0.edge.{c}")].__setitem__(3, 1) for c in
             ("src", "dst", "code", "weight", "updated_ts")],
            p.__setitem__(names(h, "0.edge.src"), np.array([5], "<i8").tobytes()),
            p.__setitem__(names(h, "0.edge.dst"), np.array([0], "<i8").tobytes()),
            p.__setitem__(names(h, "0.edge.code"), np.array([0], "<i4").tobytes()),
            p.__setitem__(names(h, "0.edge.weight"), np.array([1.0], "<f8").tobytes()),
            p.__setitem__(names(h, "0.edge.updated_ts"), np.array([0.0], "<f8").tobytes())),
        "a part missing": lambda h, p: (h["index"].pop(0), p.pop(0)),
        "a memory type code out of range": lambda h, p: p.__setitem__(
            names(h, "0.memory_type"), np.array([9], "<i4").tobytes()),
        "a date code out of range": lambda h, p: p.__setitem__(
            names(h, "0.created_at"), np.array([-1], "<i4").tobytes()),
        "a date that is not ISO": lambda h, p: (p.__setitem__(
            names(h, "0.dates"), b'{"v": ["2024-99-99T00:00:00"]}'),
            h["index"][names(h, "0.dates")].__setitem__(3, 31)),
        "an access time for item 3 of 1": lambda h, p: (
            p.__setitem__(names(h, "0.act.keys"), np.array([3], "<i8").tobytes()),
            p.__setitem__(names(h, "0.act.counts"), np.array([0], "<i8").tobytes()),
            [h["index"][names(h, f"0.act.{c}")].__setitem__(3, 1) for c in ("keys", "counts")]),
        "a bool that is 7": lambda h, p: p.__setitem__(names(h, "0.eligible"), b"\x07"),
        "a metadata list of strings": lambda h, p: p.__setitem__(
            names(h, "0.metadata"), b'{"v": ["x"]}') or h["index"][names(h, "0.metadata")]
            .__setitem__(3, 12),
    }
    assert len(index) > 30
    for name, change in cases.items():
        store = MemoryStore()
        info, p = forged(change)
        with pytest.raises(JournalCorruptError, match="snapshot 1 .* is damaged"):
            store.load_snapshot(info, p)
        assert store.workspace_ids() == [], name  # nothing was changed
    del Journal


def test_cli_compact(tmp_path, capsys):
    from memlab.cli import main

    path = tmp_path / "m.db"
    mem = Memory(path=str(path))
    for i in range(3):
        mem.add(f"item {i}")
    mem.store.close()
    assert main(["compact", str(path)]) == 0
    out = capsys.readouterr().out
    assert "compacted rows 1..4 (4 journal rows removed" in out
    on_disk = sum(p.stat().st_size for p in (path, tmp_path / "m.db-wal") if p.is_file())
    assert main(["compact", str(path), "--vacuum"]) == 0
    out = capsys.readouterr().out
    assert "nothing to compact" in out and "vacuumed; file " in out
    # the sizes are the whole file before compaction and after close, WAL included (round-3
    # review: the "before" was read after compaction, before the WAL was folded back)
    before, after = [int(v.replace(",", "")) for v in
                     out.split("vacuumed; file ")[1].split(" bytes")[0].split(" -> ")]
    assert (before, after) == (on_disk, path.stat().st_size)
    assert main(["check", str(path)]) == 0
    assert main(["compact", str(tmp_path / "missing.db")]) == 2
    assert "does not exist" in capsys.readouterr().err


def test_recover_keeps_an_intact_snapshot_and_the_intact_rows_after_it(tmp_path):
    path = _compacted(tmp_path)  # snapshot of rows 1..3 (a, b), then row 4 (c)
    mem = Memory(path=str(path))
    mem.add("deploy keys", item_id="d")  # row 5
    mem.store.close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE ops SET payload = replace(payload, 'lunch', 'lunc4') WHERE seq = 4")
    problems = check_journal(path)
    assert problems == ["row 4: checksum mismatch (the row was changed after it was written)"]
    report = recover_journal(path, tmp_path / "new.db")
    assert (report.total, report.kept, report.problems) == (2, 1, problems)
    salvaged = MemoryStore(path=tmp_path / "new.db")
    assert salvaged.workspace("default").item_ids[:2] == ["a", "b"]
    assert "d" in salvaged.workspace("default").index_of and "c" not in \
        salvaged.workspace("default").index_of
    assert check_journal(tmp_path / "new.db") == []
    salvaged.close()


def test_large_parts_are_stored_in_chunks(tmp_path, monkeypatch):
    import memlab.persist

    monkeypatch.setattr(memlab.persist, "SNAPSHOT_CHUNK", 7)
    path = _compacted(tmp_path)
    with sqlite3.connect(path) as conn:
        header = json.loads(conn.execute("SELECT header FROM snapshots").fetchone()[0])
        # the data parts (the manifest, a copy of the header, is the row after them)
        rows = conn.execute("SELECT count(*), max(length(data)) FROM snapshot_parts "
                            "WHERE part > 0 AND part <= ?", (sum(header["chunks"]),)
                            ).fetchone()
    assert rows[1] == 7 and rows[0] == sum(header["chunks"]) > len(header["parts"])
    store = MemoryStore(path=path)
    assert store.workspace("default").item_ids == ["a", "b", "c"]
    store.close()
    assert check_journal(path) == []
