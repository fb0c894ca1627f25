"""Issue 14, item 8: ``memlab recover`` salvages every intact part of a damaged snapshot.

Before, one damaged part (a flipped byte) made recover drop the whole snapshot: every item,
edge and pin it held was lost, only the journal rows after it were kept. Now the parts are
checked one by one; each test flips one byte of one part, recovers, and checks that the report
names that part, that every other part comes back byte for byte (the salvaged snapshot in the
new file is compared part by part with the original), and that the rows after the snapshot
are there too.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from memlab import ManualClock, Memory
from memlab.journal_repair import check_journal, recover_journal
from memlab.persist import Journal, read_snapshot_info, read_snapshot_parts_salvaged
from memlab.snapshot import _GROUPS
from memlab.store import MemoryStore

ROOT = Path(__file__).resolve().parents[1]
T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)


def _store(path: Path) -> None:
    """Two workspaces with items, metadata, edges, a pin, reads; compacted; then a tail of
    rows (an item, an edge between snapshot items, a read) written after the snapshot."""
    clock = ManualClock(T0)
    mem = Memory(path=str(path), clock=clock)
    for i in range(12):
        mem.add(f"deploy note {i} about the friday release train", item_id=f"a{i}",
                metadata={"n": i, "tags": ["ops"]}, memory_type="procedural" if i % 3 == 0
                else "semantic")
        clock.advance(seconds=60)
    mem.add_edge("a0", "a1", "RELATED")
    mem.add_edge("a2", "a3", "CAUSES")
    mem.pin_item("s1", "a4")
    mem.get_working_context("s1", "friday release")
    other = Memory(store=mem.store, workspace_id="team-b", clock=clock)
    other.add("lunch is at noon", item_id="b0")
    other.add("the standup moved to 10", item_id="b1")
    other.add_edge("b0", "b1")
    mem.store.compact()
    clock.advance(seconds=60)
    mem.add("tail item written after the snapshot", item_id="tail")
    mem.add_edge("a5", "a6")
    mem.store.close()


def _parts(path: Path) -> tuple[dict, dict[str, bytes]]:
    """The snapshot of ``path``: its header and its parts by name (None: damaged)."""
    conn = sqlite3.connect(path)
    try:
        info = read_snapshot_info(conn, path)
        parts, _ = read_snapshot_parts_salvaged(conn, path, info)
    finally:
        conn.close()
    return info.header, {e[0]: p for e, p in zip(info.header["index"], parts)}


def _flip(path: Path, name: str) -> int:
    """Flip one byte in the middle of snapshot part ``name``; its part number."""
    header, _ = _parts(path)
    number = [e[0] for e in header["index"]].index(name) + 1
    with sqlite3.connect(path) as conn:
        data = conn.execute("SELECT data FROM snapshot_parts WHERE part=?", (number,)
                            ).fetchone()[0]
        assert len(data) > 0, name
        flipped = bytearray(data)
        flipped[len(data) // 2] ^= 0x01
        conn.execute("UPDATE snapshot_parts SET data=? WHERE part=?", (bytes(flipped), number))
    return number


def _group_of(name: str) -> tuple[str, ...]:
    field = name.split(".", 1)[1]
    for _, names in _GROUPS:
        if field in names:
            return names
    return (field,)


@pytest.fixture(scope="module")
def original(tmp_path_factory):
    path = tmp_path_factory.mktemp("salvage") / "orig.db"
    _store(path)
    return path


# one part of every group of workspace 0 (the ones with bytes to flip), and of workspace 1
DAMAGED = ["0.metadata", "0.memory_types", "0.dates", "0.history.events", "0.history.codes",
           "0.salience", "0.tokens", "0.act.stored", "0.edge.weight", "0.bm25.docs",
           "0.node_index", "0.topic_fields", "0.gaz.phrases", "1.edge.src", "1.bm25.terms"]


@pytest.mark.parametrize("name", DAMAGED)
def test_one_damaged_part_loses_only_its_group(name, original, tmp_path):
    path = tmp_path / "m.db"
    path.write_bytes(original.read_bytes())
    header, before = _parts(path)
    if not before[name]:  # an empty part has no byte to flip: pick one that has
        pytest.fail(f"part {name} is empty in this store; the test needs bytes there")
    number = _flip(path, name)
    problems = check_journal(path)
    report = recover_journal(path, tmp_path / "new.db")
    # check lists the damage only; recover adds what salvaging it cost
    assert problems == report.problems[:1]
    problems = report.problems
    w = int(name[0])
    label = "workspace 'default'" if w == 0 else "workspace 'team-b'"
    assert problems[0] == (f"snapshot 1 (of rows 1..{header['upto']}) is damaged: part "
                           f"{number} ({name!r}) fails its checksum")
    assert problems[1].startswith(f"snapshot 1 (of rows 1..{header['upto']}): {label}: kept "
                                  f"its {header['workspaces'][w]['items']} items; lost its ")
    assert f"(part {name!r} is damaged)" in problems[1]
    assert report.damaged_parts == 1 and report.lost_snapshot == 0
    assert "salvaged the snapshot but 1 of its" in report.summary("new.db")
    # every part outside the damaged group is in the new file's snapshot, byte for byte
    new_header, after = _parts(tmp_path / "new.db")
    rebuilt = {f"{w}.{x}" for x in _group_of(name)} & set(before)
    assert set(after) == set(before)
    kept = [n for n in before if n not in rebuilt]
    assert [n for n in kept if after[n] != before[n]] == []
    assert len(kept) == len(before) - len(rebuilt)
    # the rows after the snapshot are there too (the edge row needs the snapshot's items)
    store = MemoryStore(path=tmp_path / "new.db")
    try:
        ws = store.workspace("default")
        assert "tail" in ws.index_of and ws.item_ids[:12] == [f"a{i}" for i in range(12)]
        assert store.workspace("team-b").item_ids == ["b0", "b1"]
        edge_rows = ws.graph.table.src.view().tolist()
        if name != "0.edge.weight":
            assert len(edge_rows) == 3  # two from the snapshot, one from the tail
    finally:
        store.close()
    assert report.kept == report.total  # no row after the snapshot was lost


def test_damaged_contents_and_their_checksums_lose_that_workspace_only(original, tmp_path):
    """Contents can be salvaged item by item only while their per-item checksums are intact
    (tests/test_issue14_recover_items.py); with both damaged, the workspace is lost whole."""
    path = tmp_path / "m.db"
    path.write_bytes(original.read_bytes())
    _, before = _parts(path)
    _flip(path, "0.content")
    _flip(path, "0.content.crc")
    report = recover_journal(path, tmp_path / "new.db")
    assert "workspace 'default' is lost whole: its item ids or contents are unreadable " \
           "(part '0.content' is damaged, and so is its checksum per item)" in report.problems[2]
    # the pin was in the lost workspace: reported, not silently dropped
    assert report.problems[3].endswith("1 of the 1 pins are lost (their workspace is lost or "
                                       "they are malformed)")
    _, after = _parts(tmp_path / "new.db")
    # the other workspace is whole (it is workspace 0 of the new snapshot now)
    for name, data in before.items():
        if name.startswith("1."):
            assert after["0." + name[2:]] == data, name
    store = MemoryStore(path=tmp_path / "new.db")
    try:
        assert store.workspace("team-b").item_ids == ["b0", "b1"]
        # the tail's item applies; its edge names snapshot items that are gone: reported
        assert store.workspace("default").item_ids == ["tail"]
    finally:
        store.close()
    assert report.kept == report.total - 1
    assert any("names an item that does not exist" in line for line in report.problems)


def test_two_damaged_parts_and_a_missing_row_are_each_named(original, tmp_path):
    path = tmp_path / "m.db"
    path.write_bytes(original.read_bytes())
    header, before = _parts(path)
    a = _flip(path, "0.history.events")
    b = _flip(path, "1.metadata")
    c = [e[0] for e in header["index"]].index("reviews") + 1
    with sqlite3.connect(path) as conn:
        conn.execute("DELETE FROM snapshot_parts WHERE part=?", (c,))
    where = f"snapshot 1 (of rows 1..{header['upto']})"
    assert check_journal(path) == [
        f"{where} is damaged: part {a} ('0.history.events') fails its checksum",
        f"{where} is damaged: part {b} ('1.metadata') fails its checksum",
        f"{where} is damaged: part {c} ('reviews') is missing"]
    problems = recover_journal(path, tmp_path / "first.db").problems
    assert problems[:3] == [f"{where} is damaged: part {a} ('0.history.events') fails its "
                            f"checksum",
                            f"{where} is damaged: part {b} ('1.metadata') fails its checksum",
                            f"{where} is damaged: part {c} ('reviews') is missing"]
    assert any(line.startswith(f"{where}: workspace 'default': kept its 12 items; lost its "
                               f"history,") for line in problems)
    assert any(line.startswith(f"{where}: workspace 'team-b': kept its 2 items; lost its "
                               f"metadata,") for line in problems)
    assert f"{where}: all review marks are lost (part 'reviews' is damaged)" in problems
    report = recover_journal(path, tmp_path / "new.db")
    assert report.damaged_parts == 3
    _, after = _parts(tmp_path / "new.db")
    rebuilt = {"0.history.events", "0.history.counts", "0.history.codes", "0.history_dropped",
               "1.metadata", "reviews"}
    assert [n for n in before if n not in rebuilt and after[n] != before[n]] == []
    # the rebuilt parts hold what writing the items afresh gives: one creation event each,
    # no metadata
    store = MemoryStore(path=tmp_path / "new.db")
    try:
        assert [len(it.history) for it in store.workspace("default").items[:12]] == [1] * 12
        assert [it.metadata for it in store.workspace("team-b").items] == [{}, {}]
        assert store.workspace("default").items[3].metadata == {"n": 3, "tags": ["ops"]}
    finally:
        store.close()


def test_memlab_recover_prints_each_damaged_part(original, tmp_path):
    path = tmp_path / "m.db"
    path.write_bytes(original.read_bytes())
    number = _flip(path, "0.edge.weight")
    out = subprocess.run([sys.executable, "-m", "memlab", "recover", str(path), "--out",
                          str(tmp_path / "new.db")], capture_output=True, text=True,
                         cwd=ROOT, env={"PYTHONPATH": str(ROOT), "PATH": ""})
    assert out.returncode == 1, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0].endswith(f"is damaged: part {number} ('0.edge.weight') fails its checksum")
    assert "workspace 'default': kept its 12 items; lost its edges (2 edges)" in lines[1]
    assert lines[-1].startswith("kept ") and "salvaged the snapshot but 1 of its" in lines[-1]


def test_an_intact_snapshot_is_recovered_whole(original, tmp_path):
    report = recover_journal(original, tmp_path / "new.db")
    assert report.problems == [] and report.damaged_parts == 0
    _, before = _parts(original)
    _, after = _parts(tmp_path / "new.db")
    assert after == before


def test_the_salvaged_file_holds_the_tail_after_the_snapshot(original, tmp_path):
    """The new file is a snapshot (the salvaged state) and the kept rows after it, renumbered:
    reopening it replays those rows, exactly as the original file's tail."""
    path = tmp_path / "m.db"
    path.write_bytes(original.read_bytes())
    _flip(path, "0.history.events")
    recover_journal(path, tmp_path / "new.db")
    journal = Journal(tmp_path / "new.db")
    try:
        info, _, rows = journal.load()
        assert info.upto == 0
        assert [json.loads(p).get("edges") is not None or "tail" in p for _, _, p in rows] \
            == [True, True]
    finally:
        journal.close()
