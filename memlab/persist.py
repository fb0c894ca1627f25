"""Durability on SQLite (SPEC §9): a write-ahead journal of store operations.

A store opened with a path (``MemoryStore(path=...)``) appends every write operation (its name
and arguments, as JSON) to an ``ops`` table and commits before the call returns (WAL mode,
``synchronous=FULL``): a call that returned has its write on disk. Opening the file again replays
the operations in order; every operation is deterministic given its arguments (they include the
clock's ``now``), so the reopened store is the one that was written: :meth:`MemoryStore.serialize`
gives the same JSON text, key order included, and contexts assemble the same. That covers
workspaces (an empty one made by ``Memory(...)`` or :meth:`MemoryStore.create_workspace` too),
items with their metadata (keys in the order written, nested values as given), edges, topic
fields and histories, activation, pins with their expiry, anchors and their review marks, and
short-term caches (which journal into the same file). Indexes (BM25, the CSR view) are rebuilt by
the replay. The round trip is tested by property in ``tests/test_persist_roundtrip.py``.

What a reopen does not restore, because it is not store state or was never written:

- a workspace only *named* by a read on the store (:meth:`MemoryStore.workspace`) and never
  created through ``Memory(...)`` or a write: reads do not journal;
- per-facade state (a :class:`~memlab.memory.Memory`'s decision-id generator, its last record)
  and lazily built dense indexes, which are rebuilt on use;
- in a journal written before metadata kept its key order (memlab before issue 13), metadata keys
  were stored sorted and come back sorted, and an empty workspace of such a journal was never
  written.

The schema is versioned (``meta.schema_version``); a file written by a newer memlab is refused
with a message saying so, and an older file is migrated when opened:

- version 1 → 2: version 2 adds the ``store.create_workspace`` operation (an empty workspace is
  journaled) and writes payload keys in insertion order instead of sorted. Every version-1 row
  reads unchanged, so the migration only records the new version (a memlab that reads only
  version 1 then refuses the file instead of failing on the unknown operation).
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, Iterator

import numpy as np

__all__ = ["SCHEMA_VERSION", "Journal", "SchemaVersionError", "PersistenceError", "encode",
           "decode"]

SCHEMA_VERSION = 2


class SchemaVersionError(ValueError):
    """The database was written by a newer memlab (or is not a memlab database)."""


class PersistenceError(RuntimeError):
    """A write could not be made durable; the in-memory store was restored from disk."""


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        return {"__dt__": value.isoformat()}
    if isinstance(value, np.ndarray):
        return {"__nd__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    if isinstance(value, (set, frozenset)):
        return sorted(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__dc__": type(value).__name__,
                "fields": {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}}
    raise TypeError(f"cannot journal a {type(value).__name__}")


def encode(payload: dict[str, Any]) -> str:
    """JSON for an operation's arguments (datetimes, arrays and dataclasses tagged).

    Keys keep their insertion order (no ``sort_keys``): a user's metadata, a history event's
    detail and a topic's fields come back from the journal in the order they were written.
    """
    return json.dumps(payload, default=_default, allow_nan=True)


def decode(text: str, classes: dict[str, type] | None = None) -> dict[str, Any]:
    """The inverse of :func:`encode`; ``classes`` names the dataclasses that may appear."""
    classes = classes or {}

    def hook(obj: dict) -> Any:
        if "__dt__" in obj:
            return datetime.fromisoformat(obj["__dt__"])
        if "__nd__" in obj:
            return np.asarray(obj["__nd__"], dtype=obj["dtype"])
        if "__dc__" in obj:
            return classes[obj["__dc__"]](**obj["fields"])
        return obj

    return json.loads(text, object_hook=hook)


class Journal:
    """The ``ops`` table of one SQLite file (thread-safe; one connection, serialised)."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise ValueError(f"path {str(self.path)!r} is a directory, not a database file")
        self._lock = threading.Lock()
        try:
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False,
                                         isolation_level=None)
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            tables = {r[0] for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
        except sqlite3.DatabaseError as exc:
            raise SchemaVersionError(f"path {str(self.path)!r} is not a memlab database "
                                     f"({exc})") from None
        if "meta" not in tables:
            if tables:
                raise SchemaVersionError(f"path {str(self.path)!r} holds tables {sorted(tables)} "
                                         f"but no memlab schema")
            with self._conn:
                self._conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
                self._conn.execute("CREATE TABLE ops (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                                   "op TEXT NOT NULL, payload TEXT NOT NULL)")
                self._conn.execute("INSERT INTO meta VALUES ('schema_version', ?)",
                                   (str(SCHEMA_VERSION),))
        version = int(self._conn.execute(
            "SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
        if version > SCHEMA_VERSION:
            self._conn.close()
            raise SchemaVersionError(f"path {str(self.path)!r} has schema version {version}, "
                                     f"newer than this memlab reads ({SCHEMA_VERSION}); "
                                     f"upgrade memlab to open it")
        if version < SCHEMA_VERSION:
            self._migrate(version)

    def _migrate(self, version: int) -> None:
        """Bring a file of an older schema ``version`` to :data:`SCHEMA_VERSION`, in one
        transaction (see the module docstring for what each step changes)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # 1 -> 2: rows are unchanged (new operation, key order kept); record the version.
                self._conn.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                                   (str(SCHEMA_VERSION),))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def append(self, op: str, payload: str) -> None:
        self.append_many([(op, payload)])

    def append_many(self, ops: list[tuple[str, str]]) -> None:
        """Write ``(op, payload)`` rows in one transaction, committed (fsync) before returning."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.executemany("INSERT INTO ops (op, payload) VALUES (?, ?)", ops)
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def ops(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        with self._lock:
            rows = self._conn.execute("SELECT op, payload FROM ops ORDER BY seq").fetchall()
        for op, payload in rows:
            if op.startswith(prefix):
                yield op, payload

    def count(self) -> int:
        with self._lock:
            return int(self._conn.execute("SELECT COUNT(*) FROM ops").fetchone()[0])

    def integrity_check(self) -> str:
        with self._lock:
            return self._conn.execute("PRAGMA integrity_check").fetchone()[0]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
