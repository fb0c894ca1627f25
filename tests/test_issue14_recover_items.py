"""Issue 14, item 8: ``memlab recover`` keeps every intact item when item texts are damaged.

Before, one changed byte in a snapshot's part of item ids or contents lost the whole workspace,
one changed byte in an ``add_items`` row lost every item of the row, and a damaged snapshot
header lost the whole snapshot. Now each item id and content has its own checksum (snapshot
format 3; the ``item_sums`` table for rows), so only the item whose own bytes changed is
dropped (with its edges, which the report lists), and a damaged header is rebuilt from the
snapshot's manifest. Each property below changes one byte at an offset hypothesis picks inside
a part or a row, recovers, and checks that every other item is kept exactly, that the dropped
one is named with its location, and that the result passes ``memlab check`` and answers a
context.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab import ManualClock, Memory
from memlab import persist
from memlab.journal_repair import check_journal, recover_journal
from memlab.snapshot import state_digest
from memlab.store import MemoryStore
from test_issue14_recover_salvage import _parts

T0 = datetime(2024, 3, 1, 9, 0, tzinfo=timezone.utc)
# contents with escapes (quotes, backslashes, non-ASCII), so the JSON holds every kind of byte
CONTENTS = ['deploy note about the "friday" release train', "café rollout ☃ on monday",
            'back\\slash, "quoted", and a comma', "jwt auth rotates keys weekly",
            "lunch is at noon in the atrium", "the standup moved to ten",
            'ends with a backslash \\', "postgres failover drill on thursday",
            "incident review: cache stampede", "oncall handover every friday"]
IDS = [f"a{i}" for i in range(len(CONTENTS))]
EDGES = [("a0", "a1"), ("a2", "a3"), ("a4", "a5"), ("a6", "a7")]
SETTINGS = settings(max_examples=30, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])


def _write(path: Path, compact: bool) -> None:
    """Ten items in one ``add_items`` row, edges, a second workspace and a read; ``compact``:
    then a snapshot of it all, and a tail row after it."""
    clock = ManualClock(T0)
    mem = Memory(path=str(path), clock=clock)
    mem.add_many([{"content": c, "item_id": i, "metadata": {"n": n}}
                  for n, (i, c) in enumerate(zip(IDS, CONTENTS))])
    for a, b in EDGES:
        mem.add_edge(a, b)
    other = Memory(store=mem.store, workspace_id="team-b", clock=clock)
    other.add_many(["the team-b roadmap", "team-b hiring plan"])
    mem.get_working_context("s1", "friday release")
    if compact:
        mem.store.compact()
        clock.advance(seconds=60)
        mem.add("tail item written after the snapshot", item_id="tail")
    mem.store.close()


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    folder = tmp_path_factory.mktemp("items")
    _write(folder / "snap.db", compact=True)
    _write(folder / "rows.db", compact=False)
    return folder


def _snapshot_part(path: Path, name: str) -> tuple[int, bytes]:
    """Part ``name`` of the snapshot of ``path``: its number and its bytes."""
    header, parts = _parts(path)
    return [e[0] for e in header["index"]].index(name) + 1, parts[name]


def _spans(data: bytes) -> list[tuple[int, int]]:
    """Each string's span (its quotes included) in a part holding a JSON list of strings."""
    values = json.loads(data)["v"]
    spans, at = [], len('{"v": [')
    for value in values:
        text = json.dumps(value)
        assert data[at:at + len(text)] == text.encode()
        spans.append((at, at + len(text)))
        at += len(text) + 2
    return spans


def _contents(path: Path) -> dict[str, dict[str, str]]:
    store = MemoryStore(path=path)
    try:
        return {w: {it.item_id: it.content for it in store.workspace(w).items}
                for w in ("default", "team-b")}
    finally:
        store.close()


def _answers(path: Path, lost: set[str] = frozenset()) -> None:
    """The recovered file opens, passes check, and answers a context and a search (which
    finds an item it kept by its words, and never one it dropped)."""
    assert check_journal(path) == []
    mem = Memory(path=str(path))
    try:
        context = mem.get_working_context("s9", "friday release train postgres")
        assert context["items"]
        item = "a7" if "a7" not in lost else "a3"
        found = [hit["item_id"] for hit in mem.search(CONTENTS[IDS.index(item)])]
        assert item in found and not lost & set(found)
    finally:
        mem.store.close()


def _flip(path: Path, table: str, key: int, offset: int, xor: int) -> None:
    column, where = ("data", "part") if table == "snapshot_parts" else ("payload", "seq")
    with sqlite3.connect(path) as conn:
        data = bytearray(conn.execute(f"SELECT CAST({column} AS BLOB) FROM {table} "
                                      f"WHERE {where}=?", (key,)).fetchone()[0])
        data[offset] ^= xor
        conn.execute(f"UPDATE {table} SET {column}=? WHERE {where}=?", (bytes(data), key))


@SETTINGS
@given(part=st.sampled_from(["0.content", "0.item_id", "1.content"]),
       where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255))
def test_a_changed_byte_in_a_snapshot_part_of_items_loses_at_most_that_item(
        files, tmp_path_factory, part, where, xor):
    folder = tmp_path_factory.mktemp("snap")
    path = folder / "m.db"
    shutil.copy(files / "snap.db", path)
    before = _contents(path)
    number, data = _snapshot_part(path, part)
    spans = _spans(data)
    offset = int(where * len(data))
    _flip(path, "snapshot_parts", number, offset, xor)
    hit = [k for k, (a, b) in enumerate(spans) if a < offset < b - 1]  # inside its quotes

    assert check_journal(path)[0].endswith(f"part {number} ({part!r}) fails its checksum")
    report = recover_journal(path, folder / "new.db")
    after = _contents(folder / "new.db")
    wid = "default" if part[0] == "0" else "team-b"
    ids = list(before[wid])
    lost = set(before[wid]) - set(after[wid])
    assert lost <= {ids[k] for k in hit}
    for w in before:  # every other item is kept exactly, in order
        assert after[w] == {i: c for i, c in before[w].items() if not (w == wid and i in lost)}
    assert report.kept == report.total and report.dropped_items == len(lost)
    for item in lost:
        k = ids.index(item)
        label = f"item {item!r} (number {k})" if part.endswith("content") else \
            f"item number {k} (its id is unreadable)"
        assert any(label in line and f"{part!r}" in line for line in report.problems)
        assert any(line.startswith(f"workspace {wid!r}: dropped {label}")
                   for line in report.problems)
    _answers(folder / "new.db", lost)


def _row_bounds(path: Path, seq: int) -> list[int]:
    with sqlite3.connect(path) as conn:
        blob = conn.execute("SELECT data FROM item_sums WHERE seq=?", (seq,)).fetchone()[0]
    arr = np.frombuffer(blob, "<i8")
    n = int(arr[0])
    return arr[1:n + 2].tolist()


def _items_row(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT min(seq) FROM ops WHERE op='store.add_items'").fetchone()[0]


@SETTINGS
@given(where=st.floats(0, 1, exclude_max=True), xor=st.integers(1, 255))
def test_a_changed_byte_in_an_add_items_row_loses_at_most_that_item(
        files, tmp_path_factory, where, xor):
    folder = tmp_path_factory.mktemp("rows")
    path = folder / "m.db"
    shutil.copy(files / "rows.db", path)
    before = _contents(path)
    seq = _items_row(path)
    bounds = _row_bounds(path, seq)  # item k is payload[bounds[k]:bounds[k + 1]]
    with sqlite3.connect(path) as conn:
        size = conn.execute("SELECT length(CAST(payload AS BLOB)) FROM ops WHERE seq=?",
                            (seq,)).fetchone()[0]
    offset = int(where * size)
    _flip(path, "ops", seq, offset, xor)
    hit = [k for k in range(len(IDS)) if bounds[k] <= offset < bounds[k + 1]]

    report = recover_journal(path, folder / "new.db")
    after = _contents(folder / "new.db")
    lost = set(before["default"]) - set(after["default"])
    assert any(line.startswith(f"row {seq}: checksum mismatch") for line in report.problems)
    if not hit:  # the row's head or tail (its workspace, its time): the row is left out,
        # and so are the rows adding edges between its items
        assert lost == set(IDS) and report.kept == report.total - 1 - len(EDGES)
        assert after["team-b"] == before["team-b"]
        return
    assert lost <= {IDS[k] for k in hit}
    assert after["default"] == {i: c for i, c in before["default"].items() if i not in lost}
    assert after["team-b"] == before["team-b"]
    assert report.kept == report.total
    for item in lost:
        k = IDS.index(item)
        assert f"row {seq}: store.add_items: item {k + 1} of row {seq}" in "\n".join(
            report.problems)
        assert any(line.startswith(f"workspace 'default': dropped item {k + 1} of row {seq}")
                   for line in report.problems)
    _answers(folder / "new.db", lost)


def test_a_dropped_item_takes_its_edges_and_the_report_lists_them(files, tmp_path):
    path = tmp_path / "m.db"
    shutil.copy(files / "snap.db", path)
    number, data = _snapshot_part(path, "0.content")
    start, _ = _spans(data)[2]
    _flip(path, "snapshot_parts", number, start + 5, 0x20)  # a letter of a2's content
    report = recover_journal(path, tmp_path / "new.db")
    assert report.problems[-1] == ("workspace 'default': dropped item 'a2' (number 2), and its "
                                   "1 edge: [item 'a2' (number 2)] -RELATED-> 'a3'")
    assert "kept 1 of the 1 rows found" in report.summary("new.db")
    assert "dropped 1 damaged item (see above)" in report.summary("new.db")
    store = MemoryStore(path=tmp_path / "new.db")
    try:
        ws = store.workspace("default")
        assert "a2" not in ws.index_of and len(ws) == len(IDS)  # 9 kept and the tail item
        live = {(ws.item_ids[s], ws.item_ids[d]) for s, d, w in zip(
            ws.graph.table.src.view(), ws.graph.table.dst.view(), ws.graph.table.weight.view())
            if w > 0}
        assert live == {e for e in EDGES if "a2" not in e}
    finally:
        store.close()


def test_a_damaged_header_is_rebuilt_from_the_manifest_exactly(files, tmp_path):
    path = tmp_path / "m.db"
    shutil.copy(files / "snap.db", path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshots SET header = replace(header, '\"edges\": 4', "
                     "'\"edges\": 5')")
    problems = check_journal(path)
    assert problems[:2] == ["snapshot 1 is damaged: its header fails its checksum",
                            f"snapshot 1 (of rows 1..{_upto(files / 'snap.db')}): its manifest "
                            f"(the copy of its header in its last part row) passes its checksum"]
    report = recover_journal(path, tmp_path / "new.db")
    assert report.lost_snapshot == 0 and report.kept == report.total
    original, recovered = MemoryStore(path=files / "snap.db"), MemoryStore(path=tmp_path / "new.db")
    try:
        assert state_digest(recovered) == state_digest(original)
    finally:
        original.close()
        recovered.close()
    _answers(tmp_path / "new.db")


def _upto(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("SELECT upto FROM snapshots").fetchone()[0]


def test_header_and_manifest_damaged_replays_the_tail_alone(files, tmp_path):
    path = tmp_path / "m.db"
    shutil.copy(files / "snap.db", path)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshots SET crc = crc + 1")
        conn.execute("UPDATE snapshot_parts SET crc = crc + 1 WHERE part = (SELECT max(part) "
                     "FROM snapshot_parts)")
    report = recover_journal(path, tmp_path / "new.db")
    assert report.lost_snapshot == _upto(path) and report.kept == report.total
    assert report.problems == [
        "snapshot 1 is damaged: its header fails its checksum",
        "snapshot 1 is damaged: its manifest (its last part row) fails its checksum too, so its "
        "header cannot be rebuilt"]
    assert _contents(tmp_path / "new.db")["default"] == {"tail": "tail item written after the "
                                                         "snapshot"}


def test_a_format_2_snapshot_still_loses_the_workspace_whole(tmp_path, monkeypatch):
    """Without per-item checksums (snapshots written before format 3) a damaged content part
    cannot be salvaged item by item: its workspace is lost, and the report says why."""
    monkeypatch.setattr(persist, "SNAPSHOT_FORMAT", 2)
    path = tmp_path / "m.db"
    _write(path, compact=True)
    monkeypatch.undo()
    number, data = _snapshot_part(path, "0.content")
    _flip(path, "snapshot_parts", number, _spans(data)[2][0] + 5, 0x20)
    report = recover_journal(path, tmp_path / "new.db")
    assert any("workspace 'default' is lost whole: its item ids or contents are unreadable "
               "(part '0.content' is damaged (and this snapshot, written before format 3, has "
               "no checksum per item to salvage it item by item))" in line
               for line in report.problems)
    assert _contents(tmp_path / "new.db")["team-b"] and check_journal(tmp_path / "new.db") == []


def test_compaction_removes_the_item_checksums_of_the_rows_it_removes(tmp_path):
    path = tmp_path / "m.db"
    _write(path, compact=False)
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM item_sums").fetchone()[0] == 2
    store = MemoryStore(path=path)
    store.compact()
    store.close()
    with sqlite3.connect(path) as conn:
        assert conn.execute("SELECT count(*) FROM item_sums").fetchone()[0] == 0
    assert check_journal(path) == []
