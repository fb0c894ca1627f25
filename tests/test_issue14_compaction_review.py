"""Compaction against an outside review (issue 14 item 7, second round): another process writing
the same file, a consistent read on open, hostile snapshot headers and numbers, the CLI's
errors, and the service's compaction threshold."""

import json
import os
import sqlite3
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import numpy as np
import pytest

from memlab import Memory, MemoryStore, cli, persist
from memlab.journal_repair import check_journal, recover_journal
from memlab.persist import ConcurrentWriterError, JournalCorruptError, _header_crc, _part_crc
from _support import run_memlab

ROOT = Path(__file__).resolve().parents[1]
NOW = datetime(2024, 1, 1)

# another process: adds the items named on the command line to workspace "w" of the file
WRITER = """
import sys
from memlab import MemoryStore
store = MemoryStore(path=sys.argv[1], compact_after=None)
for content in sys.argv[2:]:
    store.add_items("w", [store.prepare_item(content)], __import__("datetime").datetime(2024, 1, 1))
store.close()
"""


def start_writer(path: Path, *contents: str) -> subprocess.Popen:
    """The writer process (:data:`WRITER`), started: it adds ``contents`` to ``path``."""
    return subprocess.Popen([sys.executable, "-c", WRITER, str(path), *contents],
                            env=dict(os.environ, PYTHONPATH=str(ROOT)))


def other_process_adds(path: Path, *contents: str) -> None:
    assert start_writer(path, *contents).wait() == 0


def add(store: MemoryStore, content: str) -> None:
    store.add_items("w", [store.prepare_item(content)], NOW)


def contents(path: Path) -> list[str]:
    store = MemoryStore(path=path, compact_after=None)
    try:
        ws = store.workspace("w")
        return sorted(ws.item(i).content for i in range(len(ws)))
    finally:
        store.close()


# ------------------------------------------------------------------ 1. another process writing
def test_compaction_keeps_rows_another_process_wrote_after_ours(tmp_path):
    """The data loss the review found: rows written by another process after this store's last
    row were deleted by its compaction, and not in its snapshot."""
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    add(store, "ours one")
    add(store, "ours two")
    other_process_adds(path, "theirs one", "theirs two")
    report = store.compact()
    store.close()
    assert (report.upto, report.rows_removed) == (2, 2)  # our two adds only
    assert contents(path) == ["ours one", "ours two", "theirs one", "theirs two"]
    assert check_journal(path) == []


def test_compaction_refuses_rows_interleaved_with_ours(tmp_path):
    """Another process's row numbered below our last one: compaction would delete it without
    having it in the snapshot, so it refuses (a named error) and writes nothing."""
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    add(store, "ours one")
    other_process_adds(path, "theirs")
    add(store, "ours two")  # numbered after theirs
    before = sqlite3.connect(path).execute("SELECT count(*) FROM ops").fetchone()[0]
    with pytest.raises(ConcurrentWriterError, match=r"another process is writing .* \(row 2 was "
                       r"written by it .*reopen the store and retry"):
        store.compact()
    store.close()
    assert sqlite3.connect(path).execute("SELECT count(*) FROM ops").fetchone()[0] == before
    assert contents(path) == ["ours one", "ours two", "theirs"]
    # reopened, the store has applied every row: now it compacts
    again = MemoryStore(path=path, compact_after=None)
    assert again.compact().upto == 3
    again.close()
    assert contents(path) == ["ours one", "ours two", "theirs"]


def test_compaction_refuses_after_another_process_compacted_rows_it_never_saw(tmp_path):
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    add(store, "ours one")
    other_process_adds(path, "theirs")
    compact = run_memlab("compact", str(path))
    assert compact.stdout.startswith(f"{path}: compacted rows 1..2 (2 journal rows removed")
    add(store, "ours two")
    with pytest.raises(ConcurrentWriterError, match=r"\(row 2 was written by it"):
        store.compact()  # a snapshot of ours would lose "theirs", which only its snapshot holds
    store.close()
    assert contents(path) == ["ours one", "ours two", "theirs"]


def test_compaction_after_another_process_compacted_only_our_rows(tmp_path):
    """``memlab compact`` run while a store (the service, say) is idle covers only rows the
    store applied: the store may compact again afterwards."""
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    add(store, "ours one")
    add(store, "ours two")
    compact = run_memlab("compact", str(path))
    assert compact.stdout.startswith(f"{path}: compacted rows 1..2 (2 journal rows removed")
    add(store, "ours three")
    report = store.compact()
    store.close()
    assert (report.upto, report.rows_removed) == (3, 1)
    assert contents(path) == ["ours one", "ours three", "ours two"]
    assert check_journal(path) == []


def test_a_refused_background_compaction_stops_retrying(tmp_path):
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=2)
    add(store, "ours one")
    other_process_adds(path, "theirs")
    add(store, "ours two")  # our second row: the background compaction starts, and is refused
    store._compactor.join()
    assert isinstance(store.last_compaction_error, ConcurrentWriterError)
    store.last_compaction_error = None
    add(store, "ours three")
    assert store._compactor.is_alive() is False and store.last_compaction_error is None
    store.close()
    assert contents(path) == ["ours one", "ours three", "ours two", "theirs"]


def test_cli_compact_says_another_process_is_writing_in_one_line(tmp_path, capsys, monkeypatch):
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    add(store, "ours")
    store.close()

    def refuse(self, upto, header, parts):
        raise ConcurrentWriterError(self.path, 2, 4)
    monkeypatch.setattr(persist.Journal, "write_snapshot", refuse)
    assert cli.main(["compact", str(path)]) == 2
    err = capsys.readouterr().err
    assert err == (f"memlab compact: error: another process is writing {str(path)!r} (rows 2..4 "
                   f"were written by it after this store read the file); compaction refused, "
                   f"nothing written: reopen the store and retry\n")


# ------------------------------------------------------------------ 2. one read on open
def test_open_reads_snapshot_rows_and_counter_at_one_moment(tmp_path, monkeypatch):
    """Another writer commits (and compacts) between the reads of opening: the open sees the
    file as it was before, not a mix (the review saw false damage: 'missing at the end')."""
    path = tmp_path / "m.db"
    first = MemoryStore(path=path, compact_after=None)
    add(first, "one")
    other = MemoryStore(path=path, compact_after=None)
    read_rows = persist._read_rows
    done = []

    def meanwhile(conn, *args, **kwargs):
        if not done:
            done.append(1)
            add(other, "two")  # another connection: commits a row, then compacts
            other.compact()
        return read_rows(conn, *args, **kwargs)
    monkeypatch.setattr(persist, "_read_rows", meanwhile)
    reader = MemoryStore(path=path, compact_after=None)  # before the fix: JournalCorruptError
    assert len(reader.workspace("w")) == 1 and done == [1]
    reader.close()
    monkeypatch.setattr(persist, "_read_rows", read_rows)
    other.close()
    first.close()
    assert contents(path) == ["one", "two"]


def test_open_while_another_process_writes_never_reports_damage(tmp_path):
    """A writer process appends while this one opens the file repeatedly (no timing: every
    open must succeed, however the two interleave)."""
    path = tmp_path / "m.db"
    MemoryStore(path=path, compact_after=None).close()
    writer = start_writer(path, *[f"row {i}" for i in range(150)])
    opened = 0
    try:
        while writer.poll() is None or opened == 0:
            MemoryStore(path=path, compact_after=None).close()
            opened += 1
            assert check_journal(path) == []
    finally:
        writer.wait()
    assert writer.returncode == 0 and len(contents(path)) == 150


# ------------------------------------------------------------------ 5. a read-only file
def test_cli_compact_on_a_read_only_file_is_one_line(tmp_path, capsys, monkeypatch):
    """An immutable (chattr +i) or read-only file: SQLite refuses the write. Root ignores file
    modes, so the refusal is SQLite's own error, injected."""
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    add(store, "ours")
    store.close()

    def readonly(self, upto, header, parts):
        raise sqlite3.OperationalError("attempt to write a readonly database")
    monkeypatch.setattr(persist.Journal, "write_snapshot", readonly)
    assert cli.main(["compact", str(path)]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == (
        f"memlab compact: error: db {str(path)!r} cannot be compacted: attempt to write a "
        f"readonly database\n")


# ------------------------------------------------------------------ 3, 6. forged snapshots
def compacted(tmp_path: Path) -> Path:
    path = tmp_path / "m.db"
    mem = Memory(path=str(path), workspace_id="w")
    a = mem.add("deploy on friday", item_id="a")
    b = mem.add("jwt auth", item_id="b")
    mem.add_edge(a, b, "RELATED")
    mem.search("deploy")  # a reinforcement: access times and a last boost
    mem.store.compact()
    mem.store.close()
    return path


def forge_header(path: Path, change) -> None:
    """Rewrite the snapshot's header with ``change`` and a recomputed checksum (a forgery)."""
    with sqlite3.connect(path) as conn:
        sid, upto, text = conn.execute("SELECT id, upto, header FROM snapshots").fetchone()
        header = json.loads(text)
        change(header)
        text = json.dumps(header)
        conn.execute("UPDATE snapshots SET header=?, crc=?",
                     (text, _header_crc(sid, upto, text.encode())))


def forge_part(path: Path, name: str, change) -> None:
    """Rewrite the snapshot's part ``name`` with ``change`` and a recomputed checksum."""
    with sqlite3.connect(path) as conn:
        sid, text = conn.execute("SELECT id, header FROM snapshots").fetchone()
        number = [e[0] for e in json.loads(text)["index"]].index(name) + 1
        data = conn.execute("SELECT data FROM snapshot_parts WHERE snap=? AND part=?",
                            (sid, number)).fetchone()[0]
        data = change(data)
        conn.execute("UPDATE snapshot_parts SET data=?, crc=? WHERE snap=? AND part=?",
                     (data, _part_crc(sid, number, data), sid, number))


def test_forged_chunk_counts_are_checked_against_the_rows_before_allocating(tmp_path):
    path = compacted(tmp_path)
    with sqlite3.connect(path) as conn:
        # the data part rows (the last row is the manifest, a copy of the header)
        present = conn.execute("SELECT count(*) FROM snapshot_parts WHERE part>0").fetchone()[0] - 1
    forge_header(path, lambda h: h.update(chunks=[10 ** 9] * len(h["chunks"])))
    claimed = 10 ** 9 * present  # one chunk per part before the forgery
    problem = (f"snapshot 1 (of rows 1..5) is damaged: its header gives {claimed} part rows, "
               f"the file holds {present}")
    with pytest.raises(JournalCorruptError) as caught:  # before the fix: MemoryError
        MemoryStore(path=path)
    assert caught.value.problem == problem
    assert check_journal(path)[0] == problem


@pytest.mark.parametrize("part", ["0.salience", "0.created_ts", "0.act.stored",
                                  "0.act.anchor_ts", "0.act.times", "0.edge.updated_ts",
                                  "0.bm25.doc_len"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_snapshot_with_a_non_finite_number_is_damaged(tmp_path, part, value):
    """Writes refuse non-finite numbers, so a snapshot holding one (checksums valid) was
    forged or damaged: refused on open and listed by memlab check, naming the part."""
    path = compacted(tmp_path)
    spoiled = []

    def spoil(data: bytes) -> bytes:
        values = np.frombuffer(data, "<f8").copy()
        values[-1] = value
        spoiled.append(len(values) - 1)
        return values.tobytes()
    forge_part(path, part, spoil)
    problem = (f"snapshot 1 (of rows 1..5) is damaged: part {part!r} holds a number that is not "
               f"finite (at position {spoiled[0]})")
    with pytest.raises(JournalCorruptError) as caught:  # before the fix: the store opened
        MemoryStore(path=path)
    assert caught.value.problem == problem
    assert check_journal(path)[0] == problem


def test_last_boost_may_be_nan_but_not_infinite(tmp_path):
    """NaN is last_boost_ts's "never reinforced" (item b was never returned by a search)."""
    path = compacted(tmp_path)
    store = MemoryStore(path=path)
    assert np.isnan(store.workspace("w").activation.last_boost_ts.view()).tolist() == [False,
                                                                                       True]
    store.close()
    forge_part(path, "0.act.last_boost_ts",
               lambda d: np.array([np.inf, np.nan], "<f8").tobytes())
    with pytest.raises(JournalCorruptError, match="part '0.act.last_boost_ts' holds a number "
                                                  r"that is not finite \(at position 0\)"):
        MemoryStore(path=path)


def test_forged_non_finite_header_and_pin_numbers_are_damaged(tmp_path):
    path = compacted(tmp_path)
    forge_header(path, lambda h: h["workspaces"][0].update(last_decay_ts=float("nan")))
    with pytest.raises(JournalCorruptError, match="workspace 0's header is malformed"):
        MemoryStore(path=path)


# ------------------------------------------------------------------ 7. the service's threshold
def test_serve_compact_after(tmp_path, monkeypatch, capsys):
    import uvicorn

    import memlab.service
    from memlab.store import COMPACT_AFTER

    made = []
    real = memlab.service.ServiceState

    def state(*args, **kwargs):
        made.append(real(*args, **kwargs))
        return made[-1]
    monkeypatch.setattr(memlab.service, "ServiceState", state)
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    monkeypatch.delenv("MEMLAB_API_KEY", raising=False)
    db = str(tmp_path / "m.db")
    assert cli.main(["serve", "--db", db]) == 0
    assert made[-1].store.compact_after == COMPACT_AFTER == 100_000
    made[-1].store.close()
    assert cli.main(["serve", "--db", db, "--compact-after", "500"]) == 0
    assert made[-1].store.compact_after == 500
    made[-1].store.close()
    assert cli.main(["serve", "--db", db, "--compact-after", "0"]) == 0
    assert made[-1].store.compact_after is None
    made[-1].store.close()
    capsys.readouterr()
    assert cli.main(["serve", "--db", db, "--compact-after", "-1"]) == 2
    assert capsys.readouterr().err == ("memlab serve: error: --compact-after must be >= 0 (0: "
                                       "never by itself), got -1\n")
    help_text = " ".join(cli.build_parser()._subparsers._group_actions[0]
                         .choices["serve"].format_help().split())
    assert "once --compact-after rows (default 100,000) follow its latest snapshot" in help_text


# ------------------------------------------------------------------ 4. what a lost snapshot held
def test_recover_says_what_a_damaged_snapshot_covered(tmp_path, capsys):
    path = compacted(tmp_path)
    mem = Memory(path=str(path), workspace_id="w")
    mem.add("after the snapshot", item_id="c")
    mem.store.close()
    with sqlite3.connect(path) as conn:  # a bit flips in part 2: its checksum fails
        data = conn.execute("SELECT data FROM snapshot_parts WHERE part=2").fetchone()[0]
        conn.execute("UPDATE snapshot_parts SET data=? WHERE part=2",
                     (bytes([data[0] ^ 1]) + data[1:],))
    # part 2 holds the item contents of workspace 0, and the byte changed is the list's
    # opening brace: every content still matches its own checksum (snapshot format 3), so
    # every item is kept (issue 14: the whole snapshot was left out, then the workspace)
    report = recover_journal(path, tmp_path / "new.db")
    assert (report.total, report.kept, report.lost_snapshot, report.lost_items,
            report.damaged_parts, report.dropped_items) == (1, 1, 0, None, 1, 0)
    assert cli.main(["recover", str(path), "--out", str(tmp_path / "new2.db")]) == 1
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"kept 1 of the 1 rows found; salvaged the snapshot but 1 of its "
        f"{report.snapshot_parts} parts (see above); wrote {tmp_path / 'new2.db'}")
    # a damaged header: rebuilt from the snapshot's manifest (its copy, under its own checksum)
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshots SET crc = crc + 1")
    report = recover_journal(path, tmp_path / "new3.db")
    assert (report.kept, report.lost_snapshot, report.lost_items) == (1, 0, None)
    assert report.problems[:2] == [
        "snapshot 1 is damaged: its header fails its checksum",
        "snapshot 1 (of rows 1..5): its manifest (the copy of its header in its last part row) "
        "passes its checksum"]
    # header and manifest damaged: the rows it covered are known (its row), not what it held
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE snapshot_parts SET crc = crc + 1 WHERE part = (SELECT max(part) "
                     "FROM snapshot_parts)")
    report = recover_journal(path, tmp_path / "new3b.db")
    assert (report.kept, report.lost_snapshot, report.lost_items) == (1, 5, None)
    assert report.summary("x") == ("kept 1 of the 1 rows found; left out a damaged snapshot of "
                                   "rows 1..5; wrote x")
    # an intact snapshot is kept, and nothing is said about it
    intact = compacted(tmp_path / "intact" if (tmp_path / "intact").mkdir() is None else None)
    report = recover_journal(intact, tmp_path / "new4.db")
    assert (report.lost_snapshot, report.lost_items, report.summary("x")) == (
        0, None, "kept 0 of the 0 rows found; wrote x")
