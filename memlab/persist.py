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

**Group commit of reads.** A read (search, get, a topic query) reinforces the activation of what
it returns; that write is not journaled on its own. The store buffers these reinforcements and
writes them as one ``store.record_retrievals`` row (one transaction, one fsync) when
``MemoryStore(reinforce_batch=...)`` of them (default 64) are buffered, ahead of the next other
write in that write's transaction (so the journal keeps their order), and on
``MemoryStore.flush``, ``close`` and the service's shutdown. The loss window is bounded: a crash
loses at most the last ``reinforce_batch - 1`` reinforcements and never a write that returned;
``reinforce_batch=1`` journals each one as it happens. A failed write that rebuilds the store
from disk re-applies the buffered reinforcements, so it still changes nothing.

**Compaction into snapshots.** The journal would otherwise only grow, and a reopen replays every
row. :meth:`MemoryStore.compact <memlab.store.MemoryStore.compact>` (``Memory.compact``,
``memlab compact DB``) writes a snapshot of the whole store state after rows ``1..upto`` into
the tables ``snapshots`` (one row: the covered range, a JSON header with the snapshot format
and schema version, a CRC-32) and ``snapshot_parts`` (the data, one CRC-32 per part; see
:mod:`memlab.snapshot`), and deletes the ``store.*`` rows it covers, all in one SQLite
transaction, so a crash (kill -9) at any moment leaves the old file or the compacted one. A
reopen loads the latest snapshot and replays only the rows after it. Cache rows stay (caches
replay their own rows); the snapshot lists their numbers, so the gap check still finds a
deleted row anywhere. A durable store compacts by itself in a background thread once
``compact_after`` rows (default 100,000) follow its latest snapshot. A snapshot covers exactly
the rows its process applied (read on open, or written since; :meth:`Journal.applied_upto`),
so rows another process wrote after them stay; if another process wrote a row among them or
compacted rows this one never applied, :class:`ConcurrentWriterError` refuses the compaction inside its
transaction. Opening reads the snapshot, the rows and the row counter in one read transaction
(:meth:`Journal.load`), so another process's commits in between are not mistaken for damage. A damaged snapshot is
reported like a damaged row, naming the snapshot and the rows it covers; ``memlab recover``
then keeps the rows that remain.

What a reopen does not restore, because it is not store state or was never written:

- reinforcements still buffered when the process died (see above);

- a workspace only *named* by a read on the store (:meth:`MemoryStore.workspace`) and never
  created through ``Memory(...)`` or a write: reads do not journal;
- per-facade state (a :class:`~memlab.memory.Memory`'s decision-id generator, its last record)
  and lazily built dense indexes, which are rebuilt on use;
- in a journal written before metadata kept its key order (memlab before issue 13), metadata keys
  were stored sorted and come back sorted, and an empty workspace of such a journal was never
  written.

The schema is versioned (``meta.schema_version``); a file written by a newer memlab is refused
with a message saying so, and an older file is migrated when opened, in one transaction (a
failed migration leaves the file as it was):

- version 1 → 2: version 2 adds the ``store.create_workspace`` operation (an empty workspace is
  journaled) and writes payload keys in insertion order instead of sorted. Every version-1 row
  reads unchanged, so this step only records the new version.
- version 2 → 3: every row gets a checksum (``ops.crc``: CRC-32 of its sequence number,
  operation and payload), and ``store.*`` payloads are rewritten in the version-3 encoding,
  whose type tags cannot be forged by user data (below). Versions 1 and 2 journaled user
  metadata verbatim, so a user dict such as ``{"__dt__": "..."}`` read back as a tag; the
  migration honours tags only where memlab wrote them (an operation's own arguments, the items
  of a ``new_items`` list and a ``NewItem``'s fields other than ``metadata``), so such a row
  comes back as the dict the user sent, and a file that such a row made unopenable opens again.

**Encoding** (version 3). Datetimes, numpy arrays and dataclasses are written as tagged objects
(``{"__dt__": iso}``, ``{"__nd__": [...], "dtype": name}``, ``{"__dc__": name, "fields": {...}}``,
the tag first and no other keys). A key of a plain dict that begins with ``__`` is escaped by
doubling that prefix (``"__dt__"`` is written ``"____dt__"``), so no user data, at any depth,
can be read as a tag; decoding undoes the escape. Decoding accepts only the exact tag shapes,
the dataclasses the caller names, and arrays of an allow-listed numeric dtype given as a flat
list (its size is the payload's own), so it never allocates from a size the file claims.

**Damage** is detected and reported with its location: :class:`JournalCorruptError` (a
``ValueError``) names the file, the row's sequence number and what is wrong (never the row's
content). Rows are numbered 1, 2, … without gaps (SQLite's ``AUTOINCREMENT``; a rolled-back write
takes no number), so a deleted row, or rows missing at the end (``sqlite_sequence`` remembers the
last number given), is found on open; so is a row whose checksum does not match, a payload that
does not decode, and an operation that cannot be applied. A row adding several items also has
one CRC-32 per item in the side table ``item_sums`` (see :func:`item_sums`), and a format-3
snapshot a copy of its header in its last part row (the manifest): ``memlab recover`` then keeps
every item whose own checksum holds, and rebuilds a damaged header from its manifest. A file that SQLite cannot read, or
that is shorter than its header says (truncated), is damaged; an existing file of 0 bytes is
refused too (memlab never leaves one: a new store is built beside its path and linked into
place once its schema is written, so an empty file is a damaged or foreign one, and treating it
as a new store would write over what it once held). :func:`memlab.journal_repair.check_journal` (``memlab check``)
lists every problem of a file without changing it; :func:`~memlab.journal_repair.recover_journal`
(``memlab recover``) copies every intact row into a new file and lists the rest.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import sqlite3
import tempfile
import threading
import zlib
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np

__all__ = ["SCHEMA_VERSION", "SNAPSHOT_FORMAT", "SnapshotInfo", "Journal", "SchemaVersionError",
           "PersistenceError", "ConcurrentWriterError", "StoreClosedError",
           "JournalCorruptError", "encode", "decode"]

SCHEMA_VERSION = 3

_TAGS = ("__dt__", "__nd__", "__dc__")
_TAG_SHAPES = {"__dt__": ["__dt__"], "__nd__": ["__nd__", "dtype"], "__dc__": ["__dc__", "fields"]}
# Numeric dtypes an array in the journal may have (memlab journals int64, float64 and bool).
_ARRAY_DTYPES = frozenset(["bool", "int8", "int16", "int32", "int64", "uint8", "uint16",
                           "uint32", "uint64", "float16", "float32", "float64"])
_SQLITE_MAGIC = b"SQLite format 3\x00"


class SchemaVersionError(ValueError):
    """The database was written by a newer memlab (or is not a memlab database)."""


class PersistenceError(RuntimeError):
    """A write could not be made durable; the in-memory store was restored from disk."""


class StoreClosedError(PersistenceError):
    """A write (or a reinforcing read) on a durable store after :meth:`MemoryStore.close`.

    Nothing changes: the in-memory state stays as it was at close, and reads with
    ``reinforce=False`` go on working. Reopen the file to write again.
    """


class ConcurrentWriterError(PersistenceError):
    """Compaction was refused because another process wrote rows this one never applied.

    A snapshot holds the state of *this* process; deleting rows it never applied would lose
    them. Nothing was written. Reopen the store (which replays every row) and compact again.
    ``memlab compact`` prints this as one line.

    Examples
    --------
    >>> err = ConcurrentWriterError("m.db", 7, 9)
    >>> str(err).split(";")[0]
    "another process is writing 'm.db' (rows 7..9 were written by it after this store read the file)"
    >>> isinstance(err, PersistenceError), (err.first, err.last)
    (True, (7, 9))
    """

    def __init__(self, path: str | Path, first: int, last: int) -> None:
        self.path, self.first, self.last = str(path), first, last
        rows = f"row {first} was" if first == last else f"rows {first}..{last} were"
        super().__init__(f"another process is writing {self.path!r} ({rows} written by it "
                         f"after this store read the file); compaction refused, nothing "
                         f"written: reopen the store and retry")


class JournalCorruptError(ValueError):
    """A memlab database is damaged: names the file, the row (when one is at fault) and what is
    wrong, never the row's content. ``memlab check`` lists every problem; ``memlab recover``
    salvages the intact rows into a new file.

    Attributes
    ----------
    path : str
        The database file.
    seq : int or None
        The journal row at fault (its sequence number), if one is.
    problem : str
        What is wrong.

    Examples
    --------
    >>> err = JournalCorruptError("m.db", 7, "checksum mismatch")
    >>> str(err)
    "journal 'm.db' is damaged at row 7: checksum mismatch (see memlab check / memlab recover)"
    >>> isinstance(err, ValueError), err.seq
    (True, 7)
    """

    def __init__(self, path: str | Path, seq: int | None, problem: str) -> None:
        self.path, self.seq, self.problem = str(path), seq, problem
        where = "" if seq is None else f" at row {seq}"
        super().__init__(f"journal {self.path!r} is damaged{where}: {problem} "
                         f"(see memlab check / memlab recover)")


# ------------------------------------------------------------------ encoding
def _escape(key: Any) -> Any:
    return "__" + key if isinstance(key, str) and key.startswith("__") else key


def _plain(value: Any) -> Any:
    """``value`` as JSON-ready data: tags for datetimes, arrays and dataclasses; plain dict keys
    that begin with ``__`` escaped (see the module docstring)."""
    if isinstance(value, dict):
        return {_escape(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, (str, int, float)) or value is None:
        return value
    if isinstance(value, datetime):
        return {"__dt__": value.isoformat()}
    if isinstance(value, np.ndarray):
        if str(value.dtype) not in _ARRAY_DTYPES or value.ndim != 1:
            raise TypeError(f"cannot journal an array of dtype {value.dtype} and {value.ndim} "
                            f"dimensions")
        return {"__nd__": value.tolist(), "dtype": str(value.dtype)}
    if isinstance(value, np.bool_):
        return bool(value)
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    if isinstance(value, (set, frozenset)):
        return [_plain(v) for v in sorted(value)]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {"__dc__": type(value).__name__,
                "fields": {f.name: _plain(getattr(value, f.name))
                           for f in dataclasses.fields(value)}}
    raise TypeError(f"cannot journal a {type(value).__name__}")


def encode(payload: dict[str, Any]) -> str:
    """JSON for an operation's arguments (datetimes, arrays and dataclasses tagged).

    Keys keep their insertion order (no ``sort_keys``): a user's metadata, a history event's
    detail and a topic's fields come back from the journal in the order they were written. A
    dict key that begins with ``__`` is escaped, so user data can never read back as a tag.

    Examples
    --------
    >>> from datetime import datetime, timezone
    >>> text = encode({"now": datetime(2024, 1, 1, tzinfo=timezone.utc),
    ...                "metadata": {"__dt__": "not a date"}})
    >>> text
    '{"now": {"__dt__": "2024-01-01T00:00:00+00:00"}, "metadata": {"____dt__": "not a date"}}'
    >>> decode(text)["metadata"]
    {'__dt__': 'not a date'}
    """
    return json.dumps(_plain(payload), allow_nan=True)


def _array(values: Any, dtype: Any) -> np.ndarray:
    if not isinstance(dtype, str) or dtype not in _ARRAY_DTYPES:
        raise ValueError("an array tag names a dtype that is not allowed")
    if not isinstance(values, list) or not all(
            type(v) in (int, float, bool) for v in values):
        raise ValueError("an array tag does not hold a flat list of numbers")
    try:
        return np.asarray(values, dtype=dtype)  # as many elements as the payload holds
    except (OverflowError, ValueError, TypeError):
        raise ValueError(f"an array tag's numbers do not fit dtype {dtype}") from None


def _date(text: Any) -> datetime:
    if not isinstance(text, str) or len(text) > 64:
        raise ValueError("a date tag does not hold an ISO date")
    try:
        return datetime.fromisoformat(text)
    except ValueError:
        raise ValueError("a date tag does not hold an ISO date") from None


def _dataclass(name: Any, fields: Any, classes: dict[str, type]) -> Any:
    cls = classes.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError("a dataclass tag names a class that may not appear here")
    names = [f.name for f in dataclasses.fields(cls)]
    if not isinstance(fields, dict) or sorted(fields) != sorted(names):
        raise ValueError(f"a {cls.__name__} tag does not hold exactly its fields")
    return cls(**fields)


def decode(text: str, classes: dict[str, type] | None = None) -> dict[str, Any]:
    """The inverse of :func:`encode`; ``classes`` names the dataclasses that may appear.

    Raises ValueError (naming what is wrong, not quoting the data) for anything :func:`encode`
    cannot have written: a tag of the wrong shape, an unknown class, an array dtype off the
    allow-list, an unescaped ``__`` key, a payload that is not a JSON object.

    Examples
    --------
    >>> decode('{"a": {"____nd__": 1}, "v": {"__nd__": [1, 2], "dtype": "int64"}}')
    {'a': {'__nd__': 1}, 'v': array([1, 2])}
    >>> decode('{"v": {"__nd__": [], "dtype": "U50000000"}}')
    Traceback (most recent call last):
    ...
    ValueError: an array tag names a dtype that is not allowed
    """
    classes = classes or {}

    def hook(obj: dict) -> Any:
        if not any(k.startswith("__") for k in obj):
            return obj
        keys = list(obj)
        if keys[0] in _TAGS:
            if keys != _TAG_SHAPES[keys[0]]:
                raise ValueError(f"a {keys[0]} tag has other keys")
            if keys[0] == "__dt__":
                return _date(obj["__dt__"])
            if keys[0] == "__nd__":
                return _array(obj["__nd__"], obj["dtype"])
            return _dataclass(obj["__dc__"], obj["fields"], classes)
        out = {}
        for k, v in obj.items():
            if k.startswith("__"):
                if not k.startswith("____"):
                    raise ValueError("an object holds an unescaped '__' key")
                k = k[2:]
            out[k] = v
        return out

    return _json_object(text, object_hook=hook)


def _json_object(text: str, object_hook: Callable[[dict], Any] | None = None) -> dict[str, Any]:
    """``text`` parsed as one JSON object, else ValueError saying what is wrong with it."""
    try:
        payload = json.loads(text, object_hook=object_hook)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at char {exc.pos})") from None
    except RecursionError:
        raise ValueError("nested too deeply") from None
    if not isinstance(payload, dict):
        raise ValueError("not a JSON object")
    return payload


# Top-level arguments that hold user data: never read as tags in a version-1/2 payload.
_LEGACY_DATA_ARGS = frozenset(["metadata", "detail", "fields"])


def decode_legacy(text: str, classes: dict[str, type] | None = None) -> dict[str, Any]:
    """Decode a payload written by schema version 1 or 2 (no escaping, see the module docstring).

    A tag is honoured only where memlab wrote one (an argument's value, an item of a list
    argument, a ``NewItem``'s field other than ``metadata``) and only in its exact shape;
    anywhere else a tag-like dict is user data and is returned as it is.

    Examples
    --------
    >>> decode_legacy('{"now": {"__dt__": "2024-01-01T00:00:00"}, '
    ...               '"metadata": {"__dc__": "Evil", "fields": {}}}')
    {'now': datetime.datetime(2024, 1, 1, 0, 0), 'metadata': {'__dc__': 'Evil', 'fields': {}}}
    """
    classes = classes or {}
    payload = _json_object(text)

    def tag(value: Any) -> Any:
        if not isinstance(value, dict) or not value:
            return value
        keys = list(value)
        if keys[0] not in _TAGS or sorted(keys) != sorted(_TAG_SHAPES[keys[0]]):
            return value
        if keys[0] == "__dt__":
            return _date(value["__dt__"])
        if keys[0] == "__nd__":
            return _array(value["__nd__"], value["dtype"])
        fields = value["fields"]
        if isinstance(fields, dict):
            fields = {k: (v if k == "metadata" else tag(v)) for k, v in fields.items()}
        return _dataclass(value["__dc__"], fields, classes)

    out = {}
    for key, value in payload.items():
        if key not in _LEGACY_DATA_ARGS:
            value = [tag(v) for v in value] if isinstance(value, list) else tag(value)
        out[key] = value
    return out


# ------------------------------------------------------------------ the file
def _crc(seq: int, op: bytes, payload: bytes) -> int:
    return zlib.crc32(payload, zlib.crc32(b"%d\x00%s\x00" % (seq, op)))


def _preflight(path: Path) -> None:
    """Refuse an existing file that is empty, not SQLite, or shorter than its header says."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(100)
    except OSError as exc:
        raise ValueError(f"path {str(path)!r} cannot be read: {exc.strerror}") from None
    if size == 0:
        raise JournalCorruptError(path, None, "the file is empty (0 bytes); memlab never leaves "
                                  "an empty file, so this one was truncated or made by something "
                                  "else: restore it, or delete it to start a new store")
    if not head.startswith(_SQLITE_MAGIC):
        raise SchemaVersionError(f"path {str(path)!r} is not a memlab database (not an SQLite "
                                 f"file)")
    if len(head) < 100:
        raise JournalCorruptError(path, None, f"the file is truncated ({size} bytes, shorter "
                                  f"than an SQLite header)")
    short = _truncation(path, head, size)
    if short:
        pages, page_size = short
        raise JournalCorruptError(path, None, f"the file is truncated ({size} bytes; its header "
                                  f"says {pages} pages of {page_size} bytes)")


def _truncation(path: Path, head: bytes, size: int) -> tuple[int, int] | None:
    """``(pages, page_size)`` from the SQLite header ``head`` of the ``size``-byte file at
    ``path`` when the file is shorter than that header says; ``None`` when it is not."""
    page_size = int.from_bytes(head[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    pages = int.from_bytes(head[28:32], "big")
    wal = Path(f"{path}-wal")
    try:  # one stat: another process's close may delete the WAL between two calls
        wal_empty = wal.stat().st_size == 0
    except FileNotFoundError:
        wal_empty = True
    # the header's page count is valid when "version-valid-for" equals the change counter; with
    # a non-empty WAL, pages may legitimately live there still
    if wal_empty and pages and page_size and head[92:96] == head[24:28] \
            and size < pages * page_size:
        return pages, page_size
    return None


def _create(path: Path) -> None:
    """Build a new, empty journal at ``path`` atomically (beside it, then linked into place)."""
    try:
        handle, tmp = tempfile.mkstemp(dir=path.parent or ".", prefix=f".{path.name}.",
                                       suffix=".new")
    except OSError as exc:
        raise ValueError(f"path {str(path)!r} cannot be created: {exc.strerror}") from None
    os.close(handle)
    try:
        conn = sqlite3.connect(tmp, isolation_level=None)
        try:
            conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
            conn.execute("CREATE TABLE ops (seq INTEGER PRIMARY KEY AUTOINCREMENT, "
                         "op TEXT NOT NULL, payload TEXT NOT NULL, crc INTEGER NOT NULL)")
            conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
            conn.execute("PRAGMA journal_mode=WAL")
        finally:
            conn.close()
        with open(tmp, "rb+") as done:
            os.fsync(done.fileno())
        try:
            os.link(tmp, path)  # never replaces a file made meanwhile by someone else
        except FileExistsError:
            pass
        except OSError:
            if not path.exists():  # no hard links on this file system
                os.replace(tmp, path)
        try:
            dirfd = os.open(path.parent or ".", os.O_RDONLY)
            try:
                os.fsync(dirfd)
            finally:
                os.close(dirfd)
        except OSError:
            pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _read_rows(conn: sqlite3.Connection, after: int = 0, limit: int = -1
               ) -> list[tuple[int, bytes, bytes, Any]]:
    return conn.execute("SELECT seq, CAST(op AS BLOB), CAST(payload AS BLOB), crc FROM ops "
                        "WHERE seq > ? ORDER BY seq LIMIT ?", (after, limit)).fetchall()


def _last_seq(conn: sqlite3.Connection) -> int:
    row = conn.execute("SELECT seq FROM sqlite_sequence WHERE name='ops'").fetchone()
    return int(row[0]) if row and isinstance(row[0], int) else 0


class Journal:
    """The ``ops`` table of one SQLite file (thread-safe; one connection, serialised).

    Opening an existing file checks it (see the module docstring): a damaged one raises
    :class:`JournalCorruptError`, one that is not memlab's :class:`SchemaVersionError`. A path
    that does not exist gets a new, empty journal.

    Examples
    --------
    >>> import tempfile, pathlib
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "m.db"
    >>> journal = Journal(path)
    >>> journal.append("store.set_last_decay", encode({"workspace_id": "w", "ts": 1.0}))
    >>> list(journal.ops()), journal.count()
    ([('store.set_last_decay', '{"workspace_id": "w", "ts": 1.0}')], 1)
    >>> journal.close()
    """

    def __init__(self, path: str | Path, *, classes: dict[str, type] | None = None,
                 known_ops: frozenset[str] | set[str] = frozenset()) -> None:
        # what a migration may meet in old rows: the dataclasses journaled arguments hold, and
        # the store operations a row may name (the store passes both; persist never imports it)
        self._classes, self._known_ops = classes or {}, known_ops
        self.path = Path(path)
        if self.path.exists() and self.path.is_dir():
            raise ValueError(f"path {str(self.path)!r} is a directory, not a database file")
        if not self.path.exists():
            _create(self.path)
        else:
            _preflight(self.path)
        # re-entrant: load() holds it across its reads, which take it again
        self._lock = threading.RLock()
        # the rows this object applied (read by load(), written by append_many), as ascending
        # [first, last] runs: compaction deletes only these (see write_snapshot)
        self._known: list[list[int]] = []
        self._snap_id = 0  # the file's snapshot when this object last read or wrote it
        #: Called (no arguments) by :meth:`append_many` for a context manager wrapped around
        #: its ``COMMIT`` alone (the fsync), not around the row inserts; the store sets it to
        #: admit readers during a write's fsync (``MemoryStore(reads_during_fsync=True)``).
        self.around_commit: Callable[[], Any] = contextlib.nullcontext
        try:
            self._conn = sqlite3.connect(str(self.path), check_same_thread=False,
                                         isolation_level=None)
        except sqlite3.Error as exc:
            raise ValueError(f"path {str(self.path)!r} cannot be opened: {exc}") from None
        try:
            self._conn.execute("PRAGMA journal_mode=WAL")
            self._conn.execute("PRAGMA synchronous=FULL")
            tables = {r[0] for r in self._conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if "meta" not in tables or "ops" not in tables:
                raise SchemaVersionError(f"path {str(self.path)!r} holds tables "
                                         f"{sorted(tables)} but no memlab schema")
            row = self._conn.execute(
                "SELECT value FROM meta WHERE key='schema_version'").fetchone()
            try:
                version = int(row[0])
            except (TypeError, ValueError):
                raise JournalCorruptError(self.path, None, "its schema version is unreadable"
                                          ) from None
            if version > SCHEMA_VERSION:
                raise SchemaVersionError(f"path {str(self.path)!r} has schema version "
                                         f"{version}, newer than this memlab reads "
                                         f"({SCHEMA_VERSION}); upgrade memlab to open it")
            if version < SCHEMA_VERSION:
                self._migrate(version)
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise _sqlite_failure(self.path, exc) from None
        except ValueError:
            self._conn.close()
            raise

    def _migrate(self, version: int) -> None:
        """Bring a file of an older schema ``version`` to :data:`SCHEMA_VERSION`, in one
        transaction (see the module docstring for what each step changes)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                # 1 -> 2: rows are unchanged (new operation, key order kept).
                # 2 -> 3: a checksum per row; store payloads re-encoded with escaped keys.
                columns = [r[1] for r in self._conn.execute("PRAGMA table_info(ops)")]
                if "crc" not in columns:
                    self._conn.execute("ALTER TABLE ops ADD COLUMN crc INTEGER NOT NULL "
                                       "DEFAULT -1")
                for seq, op_b, payload_b, _ in _read_rows(self._conn):
                    try:
                        op, payload = op_b.decode("utf-8"), payload_b.decode("utf-8")
                    except UnicodeDecodeError:
                        raise JournalCorruptError(self.path, seq, "not valid UTF-8; cannot "
                                                  "be migrated") from None
                    if op.startswith("store."):
                        try:
                            payload = encode(decode_legacy(payload, self._classes))
                        except (ValueError, TypeError) as exc:
                            raise JournalCorruptError(self.path, seq, f"{_op_name(op, self._known_ops)} cannot "
                                                      f"be migrated: {exc}") from None
                        payload_b = payload.encode("utf-8")
                    self._conn.execute("UPDATE ops SET payload=?, crc=? WHERE seq=?",
                                       (payload, _crc(seq, op_b, payload_b), seq))
                self._conn.execute("UPDATE meta SET value=? WHERE key='schema_version'",
                                   (str(SCHEMA_VERSION),))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    def append(self, op: str, payload: str) -> None:
        self.append_many([(op, payload)])

    def append_many(self, ops: list[tuple[str, str]]) -> int:
        """Write ``(op, payload)`` rows in one transaction, committed (fsync) before returning;
        each row gets the next sequence number and its checksum. Returns the last one (that
        of the file's last row when ``ops`` is empty)."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                seq = max(_last_seq(self._conn), self._conn.execute(
                    "SELECT coalesce(max(seq), 0) FROM ops").fetchone()[0])
                first = seq + 1
                rows = []
                for op, payload in ops:
                    seq += 1
                    rows.append((seq, op, payload,
                                 _crc(seq, op.encode("utf-8"), payload.encode("utf-8"))))
                self._conn.executemany("INSERT INTO ops (seq, op, payload, crc) "
                                       "VALUES (?, ?, ?, ?)", rows)
                sums = [(row[0], blob) for row in rows if row[1] == "store.add_items"
                        for blob in [item_sums(row[2])] if blob is not None]
                if sums:
                    self._conn.execute(_ITEM_SUMS_TABLE)
                    self._conn.executemany("INSERT OR REPLACE INTO item_sums (seq, data) "
                                           "VALUES (?, ?)", sums)
                with self.around_commit():
                    self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            if rows:
                if self._known and self._known[-1][1] == first - 1:
                    self._known[-1][1] = seq
                else:
                    self._known.append([first, seq])
            return seq

    def applied_upto(self) -> int:
        """The last row this object read (:meth:`load`) or wrote (0: none): what a snapshot
        of its store covers."""
        with self._lock:
            return self._known[-1][1] if self._known else 0

    def load(self, prefix: str = "store."
             ) -> tuple[SnapshotInfo | None, list[bytes], list[tuple[int, str, str]]]:
        """The latest snapshot (its info and parts, each checked) and the checked
        ``(seq, op, payload)`` rows after it whose op starts with ``prefix``, read in one read
        transaction: a snapshot of the file as it was at one moment, whatever other processes
        write or compact meanwhile. The rows read become this object's known rows (the ones
        compaction may delete, see :meth:`write_snapshot`); call it from the store that
        applies them.

        Raises
        ------
        JournalCorruptError
            The snapshot or a row is damaged (see :meth:`entries`).
        """
        with self._lock:
            info, parts, rows, last = self._read_consistent(with_parts=True)
            checked = self._check_rows(rows, last, info, prefix)
            high = max(last, rows[-1][0] if rows else 0, info.upto if info else 0)
            self._known = [[1, high]] if high else []
            self._snap_id = info.snap_id if info is not None else 0
            return info, parts, checked

    def _read_consistent(self, with_parts: bool):
        """``(info, parts, rows, last)`` read in one SQLite read transaction (under WAL, one
        moment of the file: a writer's commit in between is not seen, nor half of a
        compaction)."""
        try:
            self._conn.execute("BEGIN")
            try:
                info = read_snapshot_info(self._conn, self.path)
                parts = read_snapshot_parts(self._conn, self.path, info) \
                    if with_parts and info is not None else []
                rows = _read_rows(self._conn)
                last = _last_seq(self._conn)
            finally:
                self._conn.execute("COMMIT")
        except sqlite3.DatabaseError as exc:
            raise _sqlite_failure(self.path, exc) from None
        return info, parts, rows, last

    def entries(self, prefix: str = "") -> Iterator[tuple[int, str, str]]:
        """``(seq, op, payload)`` of every row whose op starts with ``prefix``, in order, after
        checking every row of the file (checksum, numbering, nothing missing at the end).

        Raises
        ------
        JournalCorruptError
            At the first damaged row (before yielding anything).
        """
        with self._lock:
            info, _, rows, last = self._read_consistent(with_parts=False)
        yield from self._check_rows(rows, last, info, prefix)

    def _check_rows(self, rows: list, last: int, info: SnapshotInfo | None, prefix: str
                    ) -> list[tuple[int, str, str]]:
        """Check ``rows`` (all of the file's, ``last`` its row counter) against snapshot
        ``info``; the ``(seq, op, payload)`` of those whose op starts with ``prefix``."""
        upto, kept = (0, np.empty(0, np.int64)) if info is None else (info.upto, info.kept)
        checked = []
        expected = 1
        for seq, op_b, payload_b, crc in rows:
            if seq <= upto:  # a row a snapshot covers: only the kept (non-store) rows remain
                expected = self._check_covered(seq, expected, kept, upto)
            elif expected <= upto:
                expected = self._check_covered(upto + 1, expected, kept, upto)
            if seq > expected:
                raise JournalCorruptError(self.path, expected, _missing(expected, seq - 1))
            problem = _row_problem(seq, expected, op_b, payload_b, crc)
            if problem:
                raise JournalCorruptError(self.path, seq, problem)
            expected = seq + 1
            op = op_b.decode("utf-8")
            if op.startswith(prefix):
                checked.append((seq, op, payload_b.decode("utf-8")))
        if expected <= upto:
            expected = self._check_covered(upto + 1, expected, kept, upto)
        if last >= expected:
            raise JournalCorruptError(self.path, expected, _missing(expected, last, at_end=True))
        return checked

    # -------------------------------------------------------------- snapshots
    def _check_covered(self, seq: int, expected: int, kept: np.ndarray, upto: int) -> int:
        """Check that the rows before ``seq`` in the covered range, from ``expected`` on, are
        exactly the kept ones; returns the next sequence number expected."""
        lo = int(np.searchsorted(kept, expected))
        hi = int(np.searchsorted(kept, min(seq, upto + 1)))
        if hi > lo:
            raise JournalCorruptError(self.path, int(kept[lo]),
                                      _missing(int(kept[lo]), int(kept[lo])))
        if seq <= upto:
            pos = int(np.searchsorted(kept, seq))
            if pos >= len(kept) or kept[pos] != seq:
                raise JournalCorruptError(self.path, seq, "a row that the snapshot covers "
                                          "(and compaction removed) is present")
        return seq

    def _snapshot_tables(self) -> bool:
        return _snapshot_tables(self._conn)

    def snapshot_info(self) -> SnapshotInfo | None:
        """The latest snapshot's header (checked: checksum, shape), or None when there is none.

        Raises
        ------
        JournalCorruptError
            The snapshot's header or its list of kept rows is damaged.
        """
        with self._lock:
            try:
                return read_snapshot_info(self._conn, self.path)
            except sqlite3.DatabaseError as exc:
                raise _sqlite_failure(self.path, exc) from None

    def snapshot_parts(self, info: SnapshotInfo) -> list[bytes]:
        """The data parts (1, 2, …) of snapshot ``info``, each checked against its checksum."""
        with self._lock:
            try:
                return read_snapshot_parts(self._conn, self.path, info)
            except sqlite3.DatabaseError as exc:
                raise _sqlite_failure(self.path, exc) from None

    def vacuum(self) -> None:
        """Rewrite the file without its free pages (SQLite ``VACUUM``: atomic, needs free disk
        space about the file's size). Compaction frees the pages of the rows it deletes, which
        later writes and snapshots reuse; the file itself only shrinks by a vacuum."""
        with self._lock:
            try:
                self._conn.execute("VACUUM")
            except sqlite3.DatabaseError as exc:
                raise _sqlite_failure(self.path, exc) from None

    def last_seq(self) -> int:
        """The sequence number of the last row written (0: none)."""
        with self._lock:
            return max(_last_seq(self._conn), self._conn.execute(
                "SELECT coalesce(max(seq), 0) FROM ops").fetchone()[0])

    def tail_rows(self) -> int:
        """Store rows after the latest snapshot (all of them without one): what a reopen
        replays."""
        upto = 0
        with self._lock:
            if self._snapshot_tables():
                row = self._conn.execute("SELECT max(upto) FROM snapshots").fetchone()
                upto = int(row[0] or 0) if isinstance(row[0], (int, type(None))) else 0
            return int(self._conn.execute(
                "SELECT count(*) FROM ops WHERE seq > ? AND op LIKE 'store.%'",
                (upto,)).fetchone()[0])

    def write_snapshot(self, upto: int, header: dict[str, Any], parts: list[bytes]
                       ) -> int | None:
        """Store a snapshot of the state after rows ``1..upto`` and remove the store rows it
        covers, in one transaction (a crash leaves either the old file or the new one).

        Only rows this object applied are deleted: if another process wrote a store row
        ``<= upto`` (or wrote a snapshot of rows) that this object never read nor wrote,
        :class:`ConcurrentWriterError` is raised and nothing is written. ``upto`` is normally
        :meth:`applied_upto`; rows after it (another process's later writes) stay.

        ``header`` is JSON-able; the journal adds the snapshot format, schema version, the
        parts' sizes and the sequence numbers of the covered rows that stay (cache rows). An
        older snapshot is replaced. Returns the number of journal rows removed (None, and nothing
        written, when a snapshot already covers ``upto`` rows or more).
        """
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                self._conn.execute("CREATE TABLE IF NOT EXISTS snapshots (id INTEGER PRIMARY "
                                   "KEY, upto INTEGER NOT NULL, header TEXT NOT NULL, "
                                   "crc INTEGER NOT NULL)")
                self._conn.execute("CREATE TABLE IF NOT EXISTS snapshot_parts (snap INTEGER "
                                   "NOT NULL, part INTEGER NOT NULL, data BLOB NOT NULL, "
                                   "crc INTEGER NOT NULL, PRIMARY KEY (snap, part))")
                old = self._conn.execute("SELECT coalesce(max(upto), -1), coalesce(max(id), 0) "
                                         "FROM snapshots").fetchone()
                if upto <= old[0]:
                    self._conn.execute("ROLLBACK")
                    return None
                self._refuse_foreign_rows(upto, old[1], old[0])
                snap_id = old[1] + 1
                kept = np.asarray([r[0] for r in self._conn.execute(
                    "SELECT seq FROM ops WHERE seq <= ? AND op NOT LIKE 'store.%' ORDER BY seq",
                    (upto,))], dtype="<i8")
                # (an older snapshot's kept rows are still in ops, so ``kept`` includes them)
                # a part larger than SNAPSHOT_CHUNK is stored as several rows (SQLite refuses
                # a value over 1 GB); memoryview slices: no copy
                pieces: list[Any] = []
                chunks = []
                for data in parts:
                    view = memoryview(data)
                    cut = [view[i:i + SNAPSHOT_CHUNK]
                           for i in range(0, len(view), SNAPSHOT_CHUNK)] or [view]
                    chunks.append(len(cut))
                    pieces += cut
                full = dict(header, format=SNAPSHOT_FORMAT, schema_version=SCHEMA_VERSION,
                            upto=upto, parts=[len(p) for p in parts], chunks=chunks,
                            kept=len(kept))
                text = json.dumps(full, allow_nan=True)
                kept_b = kept.tobytes()
                self._conn.execute("INSERT INTO snapshots (id, upto, header, crc) VALUES "
                                   "(?, ?, ?, ?)", (snap_id, upto, text,
                                                    _header_crc(snap_id, upto, text.encode())))
                # the header again, as the row after the data parts (format 3): its own
                # checksum lets recover rebuild a damaged header (read_snapshot_manifest)
                self._conn.executemany(
                    "INSERT INTO snapshot_parts (snap, part, data, crc) VALUES (?, ?, ?, ?)",
                    [(snap_id, i, data, _part_crc(snap_id, i, data))
                     for i, data in enumerate([kept_b] + pieces + (
                         [text.encode()] if SNAPSHOT_FORMAT >= 3 else []))])
                self._conn.execute("DELETE FROM snapshot_parts WHERE snap < ?", (snap_id,))
                self._conn.execute("DELETE FROM snapshots WHERE id < ?", (snap_id,))
                removed = self._conn.execute("DELETE FROM ops WHERE seq <= ? AND op LIKE "
                                             "'store.%'", (upto,)).rowcount
                if _has_item_sums(self._conn):
                    self._conn.execute("DELETE FROM item_sums WHERE seq <= ?", (upto,))
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._snap_id = snap_id
        return int(removed)

    def _refuse_foreign_rows(self, upto: int, snap_id: int, snapshot_upto: int) -> None:
        """Raise :class:`ConcurrentWriterError` (inside write_snapshot's transaction) unless
        every store row ``<= upto`` in the file is one this object applied, and the file's
        snapshot (covering rows ``1..snapshot_upto``) only holds rows it applied too: another
        process may have written rows, even with numbers below ``upto`` (interleaved with
        ours), or compacted its own, and deleting those would lose them."""
        runs = self._known
        applied = runs[0][1] if runs and runs[0][0] == 1 else 0  # rows 1..applied: all ours
        if snap_id != self._snap_id and snapshot_upto > applied:
            # another process's snapshot of rows this object never applied (one of rows it
            # applied only, e.g. ``memlab compact`` run meanwhile, holds a state ours includes)
            raise ConcurrentWriterError(self.path, applied + 1, snapshot_upto)
        gaps, start = [], 1
        for first, last in runs:
            if first > start:
                gaps.append((start, min(first - 1, upto)))
            start = last + 1
            if start > upto:
                break
        if start <= upto:
            gaps.append((start, upto))
        for first, last in gaps:
            if first > last:
                continue
            row = self._conn.execute("SELECT min(seq), max(seq) FROM ops WHERE seq BETWEEN ? "
                                     "AND ? AND op LIKE 'store.%'", (first, last)).fetchone()
            if row[0] is not None:
                raise ConcurrentWriterError(self.path, int(row[0]), int(row[1]))

    def ops(self, prefix: str = "") -> Iterator[tuple[str, str]]:
        """``(op, payload)`` of the rows whose op starts with ``prefix`` (see :meth:`entries`)."""
        for _, op, payload in self.entries(prefix):
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


SNAPSHOT_FORMAT = 3  # the layout of a snapshot's header and parts (see memlab.snapshot; 2:
# item histories as a table of distinct events; 3: a checksum per item id and content, and the
# header copied into a last part row, the manifest; formats 1 and 2 are still read)
SNAPSHOT_CHUNK = 256 * 2 ** 20  # largest row of a snapshot part (SQLite's limit is 1 GB)


@dataclasses.dataclass(frozen=True)
class SnapshotInfo:
    """A snapshot's checked header: its id, the rows it covers (``1..upto``), the covered rows
    that remain in ``ops`` (``kept``, ascending), its number of data parts, and the header."""

    snap_id: int
    upto: int
    kept: np.ndarray
    parts: int
    header: dict[str, Any]


def _snapshot_tables(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND name "
                             "IN ('snapshots', 'snapshot_parts')").fetchone()[0] == 2)


def read_snapshot_info(conn: sqlite3.Connection, path: Path) -> SnapshotInfo | None:
    """The latest snapshot's checked header in the database of ``conn`` (None: there is none);
    raises :class:`JournalCorruptError` naming the snapshot when it is damaged."""
    if not _snapshot_tables(conn):
        return None
    row = conn.execute("SELECT id, upto, CAST(header AS BLOB), crc FROM snapshots "
                       "ORDER BY id DESC LIMIT 1").fetchone()
    if row is None:
        return None
    kept = conn.execute("SELECT data, crc FROM snapshot_parts WHERE snap=? AND part=0",
                        (row[0],)).fetchone()
    return _snapshot_header(path, row, kept)


def read_snapshot_parts(conn: sqlite3.Connection, path: Path, info: SnapshotInfo
                        ) -> list[bytes]:
    """The data parts (1, 2, …) of snapshot ``info``, each checked against its checksum."""
    where = f"snapshot {info.snap_id} (of rows 1..{info.upto})"
    sizes, chunks = info.header["parts"], info.header["chunks"]
    # the header's counts are checked against the rows there (counted in SQL) before anything
    # is built from them: a forged count must not size an allocation
    present = conn.execute("SELECT count(*) FROM snapshot_parts WHERE snap=? AND part>0",
                           (info.snap_id,)).fetchone()[0] - _manifest_rows(info)
    if sum(chunks) != present:
        raise JournalCorruptError(path, None, f"{where} is damaged: its header gives "
                                  f"{sum(chunks)} part rows, the file holds {present}")
    rows = conn.execute("SELECT part, data, crc FROM snapshot_parts WHERE snap=? AND part>0 "
                        "AND part<=? ORDER BY part", (info.snap_id, present)).fetchall()
    if [r[0] for r in rows] != list(range(1, present + 1)):
        raise JournalCorruptError(path, None, f"{where} is damaged: it misses parts (has "
                                  f"{len(rows)} of {sum(chunks)} rows)")
    out, at = [], 0
    for number, (size, count) in enumerate(zip(sizes, chunks), start=1):
        pieces = []
        for row, data, crc in rows[at:at + count]:
            if not isinstance(data, bytes) or crc != _part_crc(info.snap_id, row, data):
                raise JournalCorruptError(path, None, f"{where} is damaged: "
                                          f"{_part_label(info, number)} fails its checksum")
            pieces.append(data)
        at += count
        data = pieces[0] if count == 1 else b"".join(pieces)
        if len(data) != size:
            raise JournalCorruptError(path, None, f"{where} is damaged: "
                                      f"{_part_label(info, number)} does not have the length "
                                      f"its header gives")
        out.append(data)
    return out


def read_snapshot_parts_salvaged(conn: sqlite3.Connection, path: Path, info: SnapshotInfo,
                                 damaged: dict[int, bytes] | None = None
                                 ) -> tuple[list[bytes | None], list[str]]:
    """The data parts of snapshot ``info``, each checked on its own: ``(parts, problems)``,
    where a damaged part (a row missing, its checksum or its length wrong) is None and has one
    line in ``problems`` naming it by number and, when the header's list of parts gives it, by
    name (``memlab recover`` salvages every other part; :func:`read_snapshot_parts` raises at
    the first). Only rows that are present are read: nothing is sized from the header.
    ``damaged``, when given, receives the bytes a damaged part still has (its rows present,
    joined), by its position in ``parts``: item by item salvage reads them
    (:func:`memlab.snapshot.salvage`)."""
    where = f"snapshot {info.snap_id} (of rows 1..{info.upto})"
    sizes, chunks = info.header["parts"], info.header["chunks"]
    present = conn.execute("SELECT count(*) FROM snapshot_parts WHERE snap=? AND part>0",
                           (info.snap_id,)).fetchone()[0] - _manifest_rows(info)
    if any(c != max(1, -(-n // SNAPSHOT_CHUNK)) for n, c in zip(sizes, chunks)):
        # rows per part follow from its size: a header that says otherwise was forged, and
        # its parts cannot be located (a row deleted from the file is one damaged part)
        raise JournalCorruptError(path, None, f"{where} is damaged: its header gives "
                                  f"{sum(chunks)} part rows, the file holds {present}")
    rows: dict[int, tuple[Any, Any]] = {}
    for part, data, crc in conn.execute("SELECT part, data, crc FROM snapshot_parts WHERE "
                                        "snap=? AND part>0 ORDER BY part", (info.snap_id,)):
        rows[part] = (data, crc)
    out: list[bytes | None] = []
    problems: list[str] = []
    at = 1
    for number, (size, count) in enumerate(zip(sizes, chunks), start=1):
        pieces, problem, present_bytes = [], None, []
        for row in range(at, at + count):
            data, crc = rows.get(row, (None, None))
            if isinstance(data, bytes):
                present_bytes.append(data)
            if problem is not None:
                continue
            if data is None:
                problem = "is missing" if count == 1 else f"misses its row {row - at + 1} of {count}"
            elif not isinstance(data, bytes) or crc != _part_crc(info.snap_id, row, data):
                problem = "fails its checksum"
            else:
                pieces.append(data)
        at += count
        if problem is None:
            data = pieces[0] if count == 1 else b"".join(pieces)
            if len(data) != size:
                problem = "does not have the length its header gives"
        if problem is not None:
            problems.append(f"{where} is damaged: {_part_label(info, number)} {problem}")
            if damaged is not None and present_bytes:
                damaged[len(out)] = b"".join(present_bytes)
            out.append(None)
        else:
            out.append(data)
    extra = [row for row in rows if row >= at + _manifest_rows(info)]
    if extra:
        problems.append(f"{where} holds {len(extra)} part rows its header does not list "
                        f"(ignored)")
    return out, problems


# ------------------------------------------------------------------ item checksums of rows
# A row adding several items (``store.add_items``) also gets one CRC-32 per item, in the side
# table ``item_sums`` (same transaction; a file without it reads as before, and memlab before
# it ignores it): when the row's own checksum fails, ``memlab recover`` keeps every item whose
# own checksum holds. The payload is ASCII JSON (``ensure_ascii``) in which every item starts
# with the same tag, which user data cannot forge (dict keys beginning with ``__`` are
# escaped, and quotes inside strings are escaped): the payload is cut there into its head,
# one segment per item and its tail, and the blob holds, as little-endian int64, the item
# count n, the n + 1 cut offsets, the n + 2 segments' CRC-32s and a CRC-32 of all that.
_ITEM_SUMS_TABLE = ("CREATE TABLE IF NOT EXISTS item_sums (seq INTEGER PRIMARY KEY, "
                    "data BLOB NOT NULL)")
_ITEM_TAG = '{"__dc__": "NewItem", "fields": '


def _has_item_sums(conn: sqlite3.Connection) -> bool:
    return bool(conn.execute("SELECT count(*) FROM sqlite_master WHERE type='table' AND "
                             "name='item_sums'").fetchone()[0])


def item_sums(payload: str) -> bytes | None:
    """The per-item checksums of an ``add_items`` payload (None: fewer than two items, or a
    payload not shaped as :func:`encode` writes it).

    Examples
    --------
    >>> text = ('{"workspace_id": "w", "new_items": [' + _ITEM_TAG + '{"content": "a"}}, '
    ...         + _ITEM_TAG + '{"content": "b"}}], "now": 1}')
    >>> np.frombuffer(item_sums(text), "<i8")[:4].tolist()
    [2, 36, 87, 136]
    """
    cuts, at = [], payload.find(_ITEM_TAG)
    while at >= 0:
        cuts.append(at)
        at = payload.find(_ITEM_TAG, at + len(_ITEM_TAG))
    if len(cuts) < 2:
        return None
    try:
        _, end = json.JSONDecoder().raw_decode(payload, cuts[-1])  # the last item's end
    except ValueError:
        return None
    data = payload.encode("utf-8")
    if len(data) != len(payload):  # not ASCII: offsets would not be byte offsets
        return None
    view = memoryview(data)
    bounds = [0] + cuts + [end, len(data)]
    sums = [zlib.crc32(view[a:b]) for a, b in zip(bounds[:-1], bounds[1:])]
    body = np.asarray([len(cuts)] + cuts + [end] + sums, dtype="<i8").tobytes()
    return body + np.asarray([zlib.crc32(body)], dtype="<i8").tobytes()


def salvage_items_row(payload: bytes, blob: Any) -> tuple[str, list[tuple[int, str]]] | None:
    """An ``add_items`` row whose own checksum failed, item by item: ``(payload, lost)``, the
    payload with each item whose checksum fails replaced by a placeholder (an empty item; it
    keeps the item's number, so later rows still name the right items, and ``memlab recover``
    drops it at the end), and ``lost`` as ``(item number in the row, what the damaged bytes
    still say of its id: a string, True for a generated id, None when unreadable)``. None
    when the row cannot be salvaged so: no or damaged checksums, a damaged head or tail (the
    workspace, the time, ``added_at``), or a changed length.

    Examples
    --------
    >>> text = ('{"workspace_id": "w", "new_items": [' + _ITEM_TAG + '{"item_id": "a"}}, '
    ...         + _ITEM_TAG + '{"item_id": "b"}}], "now": 1}')
    >>> damaged = text.replace('"b"', '"c"').encode()
    >>> payload, lost = salvage_items_row(damaged, item_sums(text))
    >>> lost, json.loads(payload)["new_items"][1]["fields"]["item_id"]
    ([(1, 'c')], 'damaged-item-87')
    """
    if not isinstance(blob, bytes) or len(blob) < 8 * 6 or len(blob) % 8:
        return None
    arr = np.frombuffer(blob, "<i8")
    if int(arr[-1]) != zlib.crc32(blob[:-8]):
        return None
    n = int(arr[0])
    if n < 2 or len(arr) != 1 + (n + 1) + (n + 2) + 1:
        return None
    bounds = [0] + arr[1:n + 2].tolist() + [len(payload)]
    sums = arr[n + 2:-1].tolist()
    if any(b <= a for a, b in zip(bounds[:-1], bounds[1:])) or bounds[-2] > len(payload):
        return None
    view = memoryview(payload)
    good = [zlib.crc32(view[a:b]) == c for a, b, c in zip(bounds[:-1], bounds[1:], sums)]
    if not (good[0] and good[-1]) or all(good):
        return None
    ascii_ok = all(x < 128 for x in payload[bounds[0]:bounds[1]])
    if not ascii_ok:
        return None
    text = payload.decode("latin-1")
    # a generated id takes the next number: a placeholder must be generated too when the item
    # was (its id field still reads null, or, damaged there, most intact items have none)
    intact_null = [text[bounds[i]:bounds[i + 1]].startswith(_ITEM_TAG + '{"item_id": null')
                   for i in range(1, n + 1) if good[i]]
    pieces, lost = [text[:bounds[1]]], []
    for i in range(n):
        a, b = bounds[i + 1], bounds[i + 2]
        if good[i + 1]:
            pieces.append(text[a:b])
            continue
        seg = text[a:b]
        head = _ITEM_TAG + '{"item_id": '
        if seg.startswith(head + "null"):
            generated = True
        elif seg.startswith(head + '"'):
            generated = False
        else:
            generated = sum(intact_null) * 2 > len(intact_null)
        said = None
        if seg.startswith(head + '"'):
            try:
                said, _ = json.JSONDecoder().raw_decode(seg, len(head))
            except ValueError:
                said = None
        ident = "null" if generated else json.dumps(f"damaged-item-{a}")
        pieces.append(_ITEM_TAG + '{"item_id": ' + ident + ', "content": "", "memory_type": '
                      '"semantic", "metadata": {}, "created_at": null}}'
                      + (", " if i < n - 1 else ""))
        if isinstance(said, str) and len(said) > 64:  # a damaged id may run on: cut it
            said = said[:64] + "…"
        lost.append((i, said if isinstance(said, str) else True if seg.startswith(head + "null")
                     else None))
    pieces.append(text[bounds[-2]:])
    return "".join(pieces), lost


def _manifest_rows(info: SnapshotInfo) -> int:
    """Part rows after the data parts: 1 for the manifest of a format-3 snapshot, else 0."""
    fmt = info.header.get("format")
    return 1 if isinstance(fmt, int) and fmt >= 3 else 0


def read_snapshot_manifest(conn: sqlite3.Connection, path: Path) -> tuple[SnapshotInfo, str]:
    """The latest snapshot's header rebuilt from its manifest (the copy of the header that a
    format-3 snapshot stores as its last part row, under that row's own checksum), for a
    snapshot whose header row is damaged: ``(info, how)``, ``how`` saying where it came from.

    The snapshot is the one its part rows name (the highest ``snap``), the manifest the last
    of its rows; it is used only when its checksum holds (computed with that snapshot's id and
    the row's number), it decodes to a header of format 3 or later whose part rows end just
    before it, and the kept-rows part (part 0) passes its checksum. Nothing is sized from the
    header before those checks (the rows present are counted in SQL).

    Raises
    ------
    JournalCorruptError
        No manifest, or one that fails any of these checks (the message says which).
    """
    row = conn.execute("SELECT max(snap) FROM snapshot_parts").fetchone()
    snap_id = row[0] if row else None
    if not isinstance(snap_id, int):
        raise JournalCorruptError(path, None, "the snapshot has no parts to rebuild its header "
                                  "from")
    where = f"snapshot {snap_id}"
    last = conn.execute("SELECT part, data, crc FROM snapshot_parts WHERE snap=? "
                        "ORDER BY part DESC LIMIT 1", (snap_id,)).fetchone()
    part, data, crc = last
    if not isinstance(part, int) or not isinstance(data, bytes) \
            or crc != _part_crc(snap_id, part, data):
        raise JournalCorruptError(path, None, f"{where} is damaged: its manifest (its last "
                                  f"part row) fails its checksum too, so its header cannot be "
                                  f"rebuilt")
    try:
        header = _json_object(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise JournalCorruptError(path, None, f"{where} has no manifest to rebuild its header "
                                  f"from (written before snapshot format 3)") from None
    fmt, upto, chunks = header.get("format"), header.get("upto"), header.get("chunks")
    if not isinstance(fmt, int) or fmt < 3 or not isinstance(upto, int) or upto < 0 \
            or not isinstance(chunks, list) or not all(type(c) is int for c in chunks) \
            or sum(chunks) + 1 != part:
        raise JournalCorruptError(path, None, f"{where} has no manifest to rebuild its header "
                                  f"from (its last part row is not one)")
    text = data
    kept = conn.execute("SELECT data, crc FROM snapshot_parts WHERE snap=? AND part=0",
                        (snap_id,)).fetchone()
    info = _snapshot_header(path, (snap_id, upto, text, _header_crc(snap_id, upto, text)), kept)
    return info, (f"snapshot {snap_id} (of rows 1..{upto}): its manifest (the copy of its "
                  f"header in its last part row) passes its checksum")


def _part_label(info: SnapshotInfo, number: int) -> str:
    """``part 3 (0.metadata)``: data part ``number`` of ``info``, by its name when the
    header's list of parts gives it (see :mod:`memlab.snapshot`)."""
    index = info.header.get("index")
    entry = index[number - 1] if isinstance(index, list) and 0 < number <= len(index) else None
    name = entry[0] if isinstance(entry, list) and entry and isinstance(entry[0], str) else None
    return f"part {number}" + (f" ({name!r})" if name else "")


def _header_crc(snap_id: int, upto: int, text: bytes) -> int:
    return zlib.crc32(text, zlib.crc32(b"snapshot\x00%d\x00%d\x00" % (snap_id, upto)))


def _part_crc(snap_id: int, part: int, data: bytes) -> int:
    return zlib.crc32(data, zlib.crc32(b"part\x00%d\x00%d\x00" % (snap_id, part)))


def _snapshot_header(path: Path, row: Any, kept_row: Any) -> SnapshotInfo:
    """Check a ``snapshots`` row and its kept-rows part (part 0); raise what is wrong."""
    snap_id, upto, text, crc = row
    where = f"snapshot {snap_id!r}"
    if not isinstance(snap_id, int) or not isinstance(upto, int) or upto < 0 \
            or not isinstance(text, bytes) or crc != _header_crc(snap_id, upto, text):
        raise JournalCorruptError(path, None, f"{where} is damaged: its header fails its "
                                  f"checksum")
    where = f"snapshot {snap_id} (of rows 1..{upto})"
    try:
        header = _json_object(text.decode("utf-8"))
    except (UnicodeDecodeError, ValueError):
        raise JournalCorruptError(path, None, f"{where} is damaged: its header is not JSON"
                                  ) from None
    fmt, version = header.get("format"), header.get("schema_version")
    if not isinstance(fmt, int) or not isinstance(version, int):
        raise JournalCorruptError(path, None, f"{where} is damaged: no format in its header")
    if fmt > SNAPSHOT_FORMAT or version > SCHEMA_VERSION:
        raise SchemaVersionError(f"path {str(path)!r} holds a snapshot of format {fmt}, schema "
                                 f"version {version}, newer than this memlab reads "
                                 f"({SNAPSHOT_FORMAT}, {SCHEMA_VERSION}); upgrade memlab")
    sizes, kept_n, chunks = header.get("parts"), header.get("kept"), header.get("chunks")
    if header.get("upto") != upto or not isinstance(sizes, list) or not all(
            isinstance(n, int) and n >= 0 for n in sizes) or not isinstance(kept_n, int) \
            or not isinstance(chunks, list) or len(chunks) != len(sizes) or not all(
            isinstance(n, int) and n >= 1 for n in chunks):
        raise JournalCorruptError(path, None, f"{where} is damaged: its header is malformed")
    if kept_row is None or not isinstance(kept_row[0], bytes) \
            or kept_row[1] != _part_crc(snap_id, 0, kept_row[0]) \
            or len(kept_row[0]) != 8 * kept_n:
        raise JournalCorruptError(path, None, f"{where} is damaged: its list of kept rows "
                                  f"fails its checksum")
    kept = np.frombuffer(kept_row[0], dtype="<i8").astype(np.int64)
    if len(kept) and (kept[0] < 1 or kept[-1] > upto or np.any(np.diff(kept) <= 0)):
        raise JournalCorruptError(path, None, f"{where} is damaged: its list of kept rows is "
                                  f"not ascending within 1..{upto}")
    return SnapshotInfo(snap_id, upto, kept, len(sizes), header)


def _sqlite_failure(path: Path, exc: sqlite3.DatabaseError) -> ValueError:
    """SQLite's error as memlab's: damage (corrupt, not a database) or the file is unusable
    for another reason (locked, I/O error, permissions)."""
    name = getattr(exc, "sqlite_errorname", "") or ""
    if name.startswith(("SQLITE_CORRUPT", "SQLITE_NOTADB")) or type(exc) is sqlite3.DatabaseError:
        return JournalCorruptError(path, None, f"SQLite cannot read it ({exc})")
    return ValueError(f"path {str(path)!r} cannot be used: {exc}")


def _missing(first: int, last: int, at_end: bool = False) -> str:
    """The problem of row ``first`` when rows ``first..last`` are missing."""
    more = "" if first == last else f", and so are rows {first + 1}..{last}"
    where = " at the end of the journal (rows written later are gone)" if at_end else \
        " (deleted, or its write lost)"
    return f"missing{where}{more}"


def _row_problem(seq: Any, expected: int, op_b: Any, payload_b: Any, crc: Any) -> str | None:
    """What is wrong with one row of a version-3 journal (None: sound)."""
    if seq != expected:
        return "out of order" if seq < expected else None
    if not isinstance(op_b, bytes) or not isinstance(payload_b, bytes):
        return "a column is empty"
    if not isinstance(crc, int) or crc != _crc(seq, op_b, payload_b):
        return "checksum mismatch (the row was changed after it was written)"
    try:
        op_b.decode("utf-8")
        payload_b.decode("utf-8")
    except UnicodeDecodeError:
        return "not valid UTF-8"
    return None


def _op_name(op: str, known_ops: frozenset[str] | set[str]) -> str:
    """The op for a message: a known store operation by name, else only its kind."""
    if op.startswith("store.") and op[6:] in known_ops:
        return op
    return "a cache operation" if _is_cache_op(op) else "an unknown operation"


def _is_cache_op(op: str) -> bool:
    return op.startswith(("cache:", "cache@"))
