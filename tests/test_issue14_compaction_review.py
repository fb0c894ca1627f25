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


def other_process_adds(path: Path, *contents: str) -> None:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-c", WRITER, str(path), *contents], check=True, env=env)


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


def test_compaction_refuses_after_another_process_compacted(tmp_path):
    path = tmp_path / "m.db"
    store = MemoryStore(path=path, compact_after=None)
    add(store, "ours one")
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "memlab", "compact", str(path)], check=True, env=env,
                   capture_output=True)
    add(store, "ours two")
    with pytest.raises(ConcurrentWriterError):
        store.compact()
    store.close()
    assert contents(path) == ["ours one", "ours two"]


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
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    writer = subprocess.Popen([sys.executable, "-c", WRITER, str(path)]
                              + [f"row {i}" for i in range(150)], env=env)
    opened = 0
    try:
        while writer.poll() is None or opened == 0:
            MemoryStore(path=path, compact_after=None).close()
            opened += 1
            assert check_journal(path) == []
    finally:
        writer.wait()
    assert writer.returncode == 0 and len(contents(path)) == 150


# ------------------------------------------------------------------ 5. a file that cannot be written
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
