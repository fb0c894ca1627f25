"""Checking and salvaging a damaged journal file: ``memlab check`` and ``memlab recover``.

:func:`check_journal` lists every problem of a journal file (see :mod:`memlab.persist` for its
format and what counts as damage) without changing it; :func:`recover_journal` writes every
intact, applicable row into a new file and reports the rest. Both replay the rows into a scratch
:class:`~memlab.store.MemoryStore`, so this module sits above the store (the journal itself,
:mod:`memlab.persist`, never imports it).

A compacted file (see :mod:`memlab.snapshot`) holds a snapshot of the rows it covers: both tools
check it (header and part checksums, then a full decode into the scratch store), replay the
rows after it on top, and do not report the rows compaction removed as missing (a covered cache
row that was kept and is gone still is). A damaged snapshot is one line naming it and the rows
it covers when its header is damaged; otherwise its parts are checked one by one and ``recover``
salvages every intact one (:func:`memlab.snapshot.salvage`: each workspace whose parts are intact
exactly, and in a damaged one its items with the damaged groups of parts rebuilt), one line
naming each damaged part and one saying what it cost. The snapshot's state, whole or salvaged,
goes into the new file ahead of the rows kept after it.

Items are salvaged one by one where the file has their own checksums (a format-3 snapshot's
id and content parts; the ``item_sums`` of ``add_items`` rows): an item whose own bytes are
damaged keeps its number as a placeholder while the rows are applied (rows name items by
number), then it is dropped with its edges (:func:`memlab.snapshot.drop_items`) and the new
file is one snapshot of the result. A damaged snapshot header is rebuilt from the snapshot's
manifest when that passes its checksum. ``check`` lists damage only; what salvaging costs
(groups rebuilt, items dropped with their edges) is in ``recover``'s report.
"""

from __future__ import annotations

import json
import re
import sqlite3
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from memlab.persist import (SCHEMA_VERSION, Journal, JournalCorruptError, SchemaVersionError,
                            SnapshotInfo, _is_cache_op, _last_seq, _missing, _preflight,
                            _row_problem, _snapshot_tables, _truncation, decode, decode_legacy,
                            _has_item_sums, encode, read_snapshot_info, read_snapshot_manifest,
                            read_snapshot_parts_salvaged, salvage_items_row)
from memlab.snapshot import capture, drop_items, salvage
from memlab.store import _CLASSES, JOURNALED_OPS, MemoryStore, NewItem, Workspace, _PinSession

__all__ = ["check_journal", "recover_journal", "RecoveryReport"]

_MAX_REPORTED = 50  # problem lines listed by check/recover before "... and N more"

_CACHE_ARITY = {"set": 2, "peek": 1, "flush": 0}


def _cache_name_and_verb(op: str) -> tuple[str, str]:
    """``(name, verb)`` of a cache row: ``cache:<name>.<verb>``, or, for a workspace's cache,
    ``cache@<JSON workspace id>:<name>.<verb>`` (see :class:`memlab.session.PMMemoryStore`);
    ``("", "")`` when the op has neither shape."""
    if op.startswith("cache:"):
        rest = op[len("cache:"):]
    else:
        try:
            workspace, end = json.JSONDecoder().raw_decode(op, len("cache@"))
        except ValueError:
            return "", ""
        if not isinstance(workspace, str) or not workspace or op[end:end + 1] != ":":
            return "", ""
        rest = op[end + 1:]
    name, _, verb = rest.rpartition(".")
    return name, verb


def _cache_problem(op: str, payload: str) -> str | None:
    name, verb = _cache_name_and_verb(op)
    if not name or verb not in _CACHE_ARITY:
        return "an unknown cache operation"
    try:
        args = json.loads(payload)
    except (ValueError, RecursionError):
        return "a cache operation whose payload is not valid JSON"
    if not isinstance(args, list) or len(args) != _CACHE_ARITY[verb] or not all(
            isinstance(a, str) and a.strip() for a in args):
        return f"cache operation {verb} has malformed arguments"
    return None


@dataclass
class _Scan:
    version: int
    total: int  # rows found (readable or not)
    rows: list[tuple[int, str, str]] = field(default_factory=list)  # intact, v3 payloads
    problems: list[tuple[int | None, str]] = field(default_factory=list)
    # its header and parts (None: a damaged part) when its header is intact
    snapshot: tuple[SnapshotInfo, list[bytes | None]] | None = None
    snapshot_upto: int = 0  # the rows the file's snapshot covers (intact or not)
    snapshot_header: dict | None = None  # its header, when that much of it is intact
    damaged_parts: int = 0  # parts of the snapshot that failed their checksum
    salvage_lines: list[str] | None = None  # what salvaging the snapshot lost (once done)
    whole: bool | None = None  # whether the snapshot loaded whole (None: not tried yet)
    salvage_lost_items: int = 0  # items of the snapshot's workspaces lost whole
    # the bytes damaged parts still have, by position (item by item salvage reads them)
    snapshot_raw: dict[int, bytes] = field(default_factory=dict)
    # items salvage could not keep: (workspace id, placeholder id, the item, its damage)
    tombstones: list[tuple[str, str, str, str]] | None = None
    # add_items rows salvaged item by item: seq -> [(item number in the row, label, where)]
    row_tombstones: dict[int, list[tuple[int, str, str]]] = field(default_factory=dict)


def _scan(path: Path, what: str) -> _Scan:
    """Read every row of ``path`` without changing the file; sort intact rows from damaged.

    The folder is left as it was found. A file with no ``-wal``, ``-shm`` or ``-journal``
    beside it (through a symbolic link: beside its target) has no open WAL connection and
    nothing in a log, so it is read as immutable: SQLite then takes no lock and makes no files,
    which also lets a sound file in a read-only folder be read. Should one of those files
    appear while it is read (a writer opened the store), it is read again through SQLite's
    locks. Otherwise the files are there already (a store open elsewhere, or a log left by a
    crash) and SQLite reads through them, changing nothing."""
    if not path.is_file():
        raise ValueError(f"{what} {str(path)!r} is not a file")
    real = path.resolve()
    sidecars = [real.with_name(real.name + suffix) for suffix in ("-wal", "-shm", "-journal")]
    if any(p.exists() for p in sidecars):
        return _scan_file(path, what, immutable=False)
    scan = _scan_file(path, what, immutable=True)
    if any(p.exists() for p in sidecars):  # a writer opened the file meanwhile: read it again,
        return _scan_file(path, what, immutable=False)  # through SQLite's locks this time
    return scan


def _scan_file(path: Path, what: str, immutable: bool) -> _Scan:
    problems: list[tuple[int | None, str]] = []
    try:
        _preflight(path)
    except JournalCorruptError as exc:
        problems.append((None, exc.problem))
        if path.stat().st_size < 100:
            return _Scan(0, 0, [], problems)
    with tempfile.TemporaryDirectory(prefix="memlab-scan-") as folder:
        source, whole = _readable_copy(path, Path(folder))
        if whole == 0:
            problems.append((None, "SQLite cannot read its schema (not one whole page is left)"))
            return _Scan(0, 0, [], problems)
        return _read(path, source, what, problems, whole, immutable or whole is not None)


def _readable_copy(path: Path, folder: Path) -> tuple[Path, int | None]:
    """The file to read for ``path``, and how many whole pages it has when ``path`` is truncated.

    SQLite refuses a file shorter than its header's page count ("in-header database size",
    bytes 28-31), even when every page it needs is there. For such a file this writes a copy in
    ``folder``, cut to its whole pages and with that count set to them, so SQLite reads every
    row that survived; ``path`` itself is never changed. Otherwise ``(path, None)``.
    """
    size = path.stat().st_size
    with path.open("rb") as handle:
        head = handle.read(100)
    short = _truncation(path, head, size)
    if not short:
        return path, None
    page_size = short[1]
    whole = size // page_size
    copy = folder / "truncated.db"
    with path.open("rb") as src, copy.open("wb") as dst:
        left = whole * page_size
        while left:
            block = src.read(min(left, 1 << 20))
            if not block:
                break
            dst.write(block)
            left -= len(block)
        if whole:
            dst.seek(28)
            dst.write(whole.to_bytes(4, "big"))
    return copy, whole


def _past_end(line: str, whole: int) -> bool:
    """Whether an integrity-check line only says that a page past the first ``whole`` pages is
    gone (which the truncation line already reports)."""
    match = re.search(r"invalid page number (\d+)$", line)
    return bool(match) and int(match.group(1)) > whole


def _read(path: Path, source: Path, what: str, problems: list[tuple[int | None, str]],
          whole: int | None, immutable: bool) -> _Scan:
    """Read every row of ``source`` (``path``, or its readable copy of ``whole`` pages);
    ``immutable``: no write-ahead log to read (see :func:`_scan`)."""
    flags = "mode=ro&immutable=1" if immutable else "mode=ro"
    try:
        conn = sqlite3.connect(f"{source.resolve().as_uri()}?{flags}", uri=True)
    except sqlite3.Error as exc:
        raise ValueError(f"{what} {str(path)!r} cannot be opened: {exc}") from None
    try:
        # one read transaction: every read below sees the file at one moment, whatever another
        # process writes or compacts meanwhile (else a row committed between two reads looks
        # like damage)
        conn.execute("BEGIN")
        try:
            tables = {r[0] for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type='table'")}
            if "meta" not in tables or "ops" not in tables:
                raise SchemaVersionError(f"{what} {str(path)!r} holds tables {sorted(tables)} "
                                         f"but no memlab schema")
            version = int(conn.execute(
                "SELECT value FROM meta WHERE key='schema_version'").fetchone()[0])
        except sqlite3.DatabaseError as exc:
            left = "" if whole is None else \
                f" from the {whole} whole page{'s' if whole > 1 else ''} left"
            problems.append((None, f"SQLite cannot read its schema{left} ({exc})"))
            return _Scan(0, 0, [], problems)
        except (TypeError, ValueError) as exc:
            if isinstance(exc, SchemaVersionError):
                raise
            problems.append((None, "its schema version is unreadable"))
            version = SCHEMA_VERSION
        if version > SCHEMA_VERSION:
            raise SchemaVersionError(f"{what} {str(path)!r} has schema version {version}, newer "
                                     f"than this memlab reads ({SCHEMA_VERSION})")
        try:
            for (text,) in conn.execute("PRAGMA integrity_check(20)"):
                for line in str(text).splitlines():
                    if line not in ("ok", "*** in database main ***") and not (
                            whole is not None and _past_end(line, whole)):
                        problems.append((None, f"SQLite integrity check: {line}"))
        except sqlite3.DatabaseError as exc:
            problems.append((None, f"SQLite integrity check failed ({exc})"))
        crc_col = "crc" if version >= 3 else "NULL"
        select = (f"SELECT seq, CAST(op AS BLOB), CAST(payload AS BLOB), {crc_col} FROM ops ")
        try:
            last = _last_seq(conn)
        except sqlite3.DatabaseError:
            last = 0
        try:
            last = max(last, conn.execute("SELECT coalesce(max(seq), 0) FROM ops").fetchone()[0])
        except sqlite3.DatabaseError:
            pass
        raw: list[tuple] = []
        unreadable: set[int] = set()
        after = 0
        while True:
            try:
                chunk = conn.execute(select + "WHERE seq > ? ORDER BY seq LIMIT 1000",
                                     (after,)).fetchall()
            except sqlite3.DatabaseError:
                # read this stretch row by row, keeping what is readable; in a truncated file,
                # a row that cannot be read was on a page that is gone: it is missing
                stop = after + 1000 if last <= after else min(after + 1000, last)
                for s in range(after + 1, stop + 1):
                    try:
                        row = conn.execute(select + "WHERE seq = ?", (s,)).fetchone()
                    except sqlite3.DatabaseError:
                        if whole is None:
                            unreadable.add(s)
                        continue
                    if row is not None:
                        raw.append(row)
                after = stop
                if after >= last:
                    break
                continue
            if not chunk:
                break
            raw.extend(chunk)
            after = chunk[-1][0]
        sums: dict[int, bytes] = {}
        try:
            if _has_item_sums(conn):
                sums = dict(conn.execute("SELECT seq, data FROM item_sums"))
        except sqlite3.DatabaseError as exc:
            problems.append((None, f"SQLite cannot read the per-item checksums ({exc})"))
        header: list[dict] = []
        raw_parts: dict[int, bytes] = {}
        snapshot, upto, kept_seqs = _read_snapshot(conn, path, problems, header, raw_parts)
    finally:
        conn.close()
    scan = _Scan(version, len(raw) + len(unreadable), [], problems, snapshot, upto,
                 header[0] if header else None)
    scan.snapshot_raw = raw_parts
    if snapshot is not None:
        scan.damaged_parts = sum(part is None for part in snapshot[1])
    for s in sorted(unreadable):
        problems.append((s, "unreadable (SQLite reports its page as damaged)"))
    expected = 1
    for seq, op_b, payload_b, crc in raw:
        if not isinstance(seq, int) or seq < expected:
            problems.append((seq if isinstance(seq, int) else None, "out of order"))
            continue
        if seq <= upto and seq not in kept_seqs:
            problems.append((seq, "a row that the snapshot covers (and compaction removed) is "
                                  "present"))
            expected = seq + 1
            continue
        gap = [s for s in range(expected, seq) if s not in unreadable
               and (s > upto or s in kept_seqs)]
        if gap:
            problems.append((gap[0], _missing(gap[0], gap[-1])))
        expected = seq + 1
        if version >= 3:
            problem = _row_problem(seq, seq, op_b, payload_b, crc)
        elif not isinstance(op_b, bytes) or not isinstance(payload_b, bytes):
            problem = "a column is empty"
        else:
            try:
                op_b.decode("utf-8"), payload_b.decode("utf-8")
                problem = None
            except UnicodeDecodeError:
                problem = "not valid UTF-8"
        if problem and problem.startswith("checksum mismatch") and op_b == b"store.add_items" \
                and isinstance(payload_b, bytes) and seq in sums:
            got = salvage_items_row(payload_b, sums[seq])
            if got is not None:  # every item whose own checksum holds is kept
                text, lost = got
                n_items = int.from_bytes(sums[seq][:8], "little")
                problems.append((seq, f"{problem}; {n_items - len(lost)} of its {n_items} "
                                      f"items pass their own checksum"))
                scan.row_tombstones[seq] = []
                for i, said in lost:
                    label = f"item {i + 1} of row {seq}" + (
                        " (its id was generated)" if said is True else
                        f" (its id reads {said!r} there, unverified)" if said is not None
                        else " (its id is unreadable)")
                    where = "it fails its own checksum"
                    problems.append((seq, f"store.add_items: {label}: {where}"))
                    scan.row_tombstones[seq].append((i, label, where))
                payload_b, problem = text.encode("utf-8"), None
        if problem:
            problems.append((seq, problem))
            continue
        op, payload = op_b.decode("utf-8"), payload_b.decode("utf-8")
        if op.startswith("store."):
            if op[6:] not in JOURNALED_OPS:
                problems.append((seq, "an unknown operation"))
                continue
            try:
                decoded = (decode if version >= 3 else decode_legacy)(payload, _CLASSES)
                if version < 3:
                    payload = encode(decoded)
            except (ValueError, TypeError) as exc:
                problems.append((seq, f"{op} has a malformed payload: {exc}"))
                continue
        elif _is_cache_op(op):
            problem = _cache_problem(op, payload)
            if problem:
                problems.append((seq, problem))
                continue
        else:
            problems.append((seq, "an unknown operation"))
            continue
        scan.rows.append((seq, op, payload))
    ends = max([s for s, *_ in raw] + list(unreadable) + [0]) + 1
    lost_kept = sorted(s for s in kept_seqs if s >= ends)
    if lost_kept:
        problems.append((lost_kept[0], _missing(lost_kept[0], lost_kept[0])))
    ends = max(ends, upto + 1)
    if last >= ends:
        problems.append((ends, _missing(ends, last, at_end=True)))
    return scan


def _read_snapshot(conn: sqlite3.Connection, path: Path, problems: list[tuple[int | None, str]],
                   header: list[dict], raw_parts: dict[int, bytes]
                   ) -> tuple[tuple[SnapshotInfo, list[bytes | None]] | None, int, set[int]]:
    """``(snapshot, upto, kept)``: the latest snapshot when its header is intact (else its
    problem is added), its parts checked one by one (a damaged part is None, with a problem
    naming it), the rows it covers (``1..upto``; read from its row even when it is damaged,
    so the rows compaction removed are not reported missing) and the covered rows that
    remain. Its header, when intact, is appended to ``header``; a damaged header is rebuilt
    from the snapshot's manifest when that passes its own checksum (format 3,
    :func:`memlab.persist.read_snapshot_manifest`). The bytes damaged parts still have go into
    ``raw_parts``."""
    try:
        if not _snapshot_tables(conn):
            return None, 0, set()
    except sqlite3.DatabaseError as exc:
        problems.append((None, f"SQLite cannot read the snapshot tables ({exc})"))
        return None, 0, set()
    try:
        try:
            info = read_snapshot_info(conn, path)
        except JournalCorruptError as exc:
            problems.append((None, exc.problem))
            try:
                info, how = read_snapshot_manifest(conn, path)
            except JournalCorruptError as again:
                raise JournalCorruptError(path, None, again.problem) from None
            problems.append((None, how))
        if info is None:
            return None, 0, set()
        header.append(info.header)
        parts, damaged = read_snapshot_parts_salvaged(conn, path, info, raw_parts)
        problems.extend((None, line) for line in damaged)
        return (info, parts), info.upto, set(info.kept.tolist())
    except (JournalCorruptError, SchemaVersionError) as exc:
        problems.append((None, getattr(exc, "problem", str(exc))))
    except sqlite3.DatabaseError as exc:
        problems.append((None, f"SQLite cannot read the snapshot ({exc})"))
    try:
        upto = conn.execute("SELECT max(upto) FROM snapshots").fetchone()[0]
    except sqlite3.DatabaseError:
        upto = None
    return None, upto if isinstance(upto, int) and upto > 0 else 0, set()


def _base_store(scan: _Scan) -> MemoryStore:
    """A scratch store holding the scan's snapshot: all of it when it loads, else every part
    of it that can be salvaged (:func:`memlab.snapshot.salvage`; what was lost is added to the
    problems, once). Empty without a snapshot, or when not even its header is intact."""
    store = MemoryStore()
    if scan.snapshot is None:
        return store
    info, parts = scan.snapshot
    if not scan.damaged_parts and scan.whole is not False:
        try:
            store.load_snapshot(info, parts)
            scan.whole = True
            return store
        except JournalCorruptError as exc:  # intact checksums, but it does not load
            scan.problems.append((None, exc.problem))
            scan.whole = False
            store = MemoryStore()
    tombstones: list[tuple[str, str, str, str]] = []
    try:
        lines = salvage(store, info, parts, workspace_cls=Workspace,
                        pin_session_cls=_PinSession, rebuild=_rebuild,
                        damaged=scan.snapshot_raw, tombstones=tombstones)
    except JournalCorruptError as exc:  # not even its list of workspaces
        if scan.salvage_lines is None:
            scan.problems.append((None, exc.problem))
            scan.salvage_lines = []
        scan.snapshot = None
        return MemoryStore()
    if scan.salvage_lines is None:
        heads = info.header.get("workspaces") or []
        held = sum(h.get("items", 0) for h in heads if isinstance(h, dict)
                   and type(h.get("items")) is int)
        scan.salvage_lost_items = max(0, held - sum(len(ws) for ws in
                                                    store._workspaces.values()))
        where = f"snapshot {info.snap_id} (of rows 1..{info.upto})"
        # what salvaging cost is recover's to say (check lists damage only)
        scan.salvage_lines = [f"{where}: {line}" for line in lines]
        scan.tombstones = tombstones
        scan.problems.extend((None, f"{where}: workspace {wid!r}: {label}: {damage}")
                             for wid, _, label, damage in tombstones)
    return store


def _rebuild(workspace_id: str, analyzer: str, ids: list[str], contents: list[str],
             types: list[str], metadata: list[dict], created: list
             ) -> tuple[dict, list[bytes]]:
    """The capture of a store holding only these items, written by the store's write path
    (what :func:`memlab.snapshot.salvage` puts in place of a workspace's damaged parts)."""
    store = MemoryStore(memory_types=set(types), analyzer=analyzer)
    items = [NewItem(i, c, t, m, d) for i, c, t, m, d in zip(ids, contents, types, metadata,
                                                            created)]
    if items:
        store.add_items(workspace_id, items, max(created))
    else:
        store._register(store._target(workspace_id))
    return capture(store)


def _applicable(scan: _Scan) -> list[tuple[int, str, str]]:
    """The rows of the scan that apply, in order, to a store built from its snapshot and the
    rows kept before them; each row that does not becomes a problem."""
    rows, problems = scan.rows, scan.problems
    store, kept = _base_store(scan), []
    for seq, op, payload in rows:
        if op.startswith("store."):
            try:
                store._apply(seq, op, payload, path="")
            except JournalCorruptError as exc:
                problems.append((seq, exc.problem))
                store = _base_store(scan)  # the failed call may have changed part of the store
                for seq2, op2, payload2 in kept:
                    if op2.startswith("store."):
                        store._apply(seq2, op2, payload2, path="")
                continue
        kept.append((seq, op, payload))
    return kept


def _write_without_damaged_items(scan: _Scan, kept: list[tuple[int, str, str]],
                                 journal: Journal, done: list[str]) -> int:
    """Write the recovered state without the items that could not be salvaged; returns how
    many were dropped (each is one line in ``done``, with the edges it took along).

    Those items kept their numbers, as placeholders, while the rows were applied (rows name
    items by number); now they go, every other item is renumbered, and the whole state is
    written as one snapshot after the kept rows (which the snapshot covers: cache rows stay,
    store rows are removed, as compaction does)."""
    store = _base_store(scan)
    tombstones = list(scan.tombstones or [])
    for seq, op, payload in kept:
        if not op.startswith("store."):
            continue
        lost = scan.row_tombstones.get(seq)
        wid = decode(payload, _CLASSES).get("workspace_id") if lost else None
        first = len(store._workspaces[wid]) if wid in store._workspaces else 0
        store._apply(seq, op, payload, path="")
        for i, label, where in lost or []:
            tombstones.append((wid, store._workspaces[wid].item_ids[first + i], label, where))
    drops: dict[str, set[str]] = {}
    for wid, holder, _, _ in tombstones:
        drops.setdefault(wid, set()).add(holder)
    header, parts, edges = drop_items(*capture(store), drops)
    name = {(wid, h): f"[{label}]" for wid, h, label, _ in tombstones}
    for wid, holder, label, _ in tombstones:
        mine = [f"{name.get((wid, a), repr(a))} -{t}-> {name.get((wid, b), repr(b))}"
                for a, t, b in edges.get(wid, []) if holder in (a, b)]
        listed = (f", and its {len(mine)} edge{'s' if len(mine) != 1 else ''}: "
                  f"{', '.join(mine)}") if mine else " (it had no edges)"
        done.append(f"workspace {wid!r}: dropped {label}{listed}")
    if kept:
        journal.append_many([(op, payload) for _, op, payload in kept])
    journal.write_snapshot(len(kept), header, parts)
    return len(tombstones)


def _lines(problems: list[tuple[int | None, str]], after: list[str] = ()) -> list[str]:
    ordered = sorted(problems, key=lambda p: (p[0] is not None, p[0] or 0))
    lines = [msg if seq is None else f"row {seq}: {msg}" for seq, msg in ordered] + list(after)
    if len(lines) > _MAX_REPORTED:
        lines = lines[:_MAX_REPORTED] + [f"... and {len(lines) - _MAX_REPORTED} more problems"]
    return lines


def check_journal(path: str | Path) -> list[str]:
    """Every problem of the memlab database at ``path``, one line each (empty: it is sound).

    Reads the file without changing it (no migration): SQLite's integrity check, each row's
    checksum, the numbering of rows (a deleted row, rows missing at the end), each payload, and
    a replay of the store's operations into memory. A line names the row and what is wrong,
    never its content.

    Raises
    ------
    ValueError
        ``path`` is not a file; :class:`SchemaVersionError` when it is not a memlab database
        (or a newer one).

    Examples
    --------
    >>> import tempfile, pathlib
    >>> from memlab import Memory
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "m.db"
    >>> mem = Memory(path=str(path)); _ = mem.add("the deploy runs on fridays"); mem.store.close()
    >>> check_journal(path)
    []
    """
    path = Path(path)
    scan = _scan(path, "path")
    _applicable(scan)
    return _lines(scan.problems)


@dataclass
class RecoveryReport:
    """What :func:`recover_journal` did: rows found and kept, and one line per row left out.

    ``lost_snapshot`` is 0, or the rows ``1..lost_snapshot`` that a damaged snapshot covered
    and that were therefore left out (compaction had removed their store rows: what they held
    is lost, beyond the rows counted in ``total``); ``lost_items`` is how many items that
    snapshot held by its header (None when its header is damaged too). A snapshot whose
    header is intact is salvaged part by part instead: ``damaged_parts`` of its
    ``snapshot_parts`` parts failed their checksum, ``problems`` says what each cost
    (everything in the other parts is kept), and ``lost_items`` counts the items of the
    workspaces lost whole (their ids or contents were damaged). ``dropped_items`` items whose
    own checksum failed (in a snapshot's id or content part, or in an ``add_items`` row) were
    dropped, each with its edges; ``problems`` names each and lists the edges.
    """

    total: int
    kept: int
    problems: list[str]
    lost_snapshot: int = 0
    lost_items: int | None = None
    damaged_parts: int = 0
    snapshot_parts: int = 0
    dropped_items: int = 0

    def summary(self, out: str | Path) -> str:
        """The one-line summary ``memlab recover`` prints.

        Examples
        --------
        >>> RecoveryReport(5, 3, ["..."], 12, 9).summary("new.db")
        'kept 3 of the 5 rows found; left out a damaged snapshot of rows 1..12 (9 items); wrote new.db'

        >>> RecoveryReport(5, 5, ["..."], damaged_parts=1, snapshot_parts=40).summary("new.db")
        'kept 5 of the 5 rows found; salvaged the snapshot but 1 of its 40 parts (see above); wrote new.db'
        """
        lost = ""
        if self.lost_snapshot:
            items = "" if self.lost_items is None else f" ({self.lost_items} items)"
            lost = f"; left out a damaged snapshot of rows 1..{self.lost_snapshot}{items}"
        elif self.damaged_parts:
            items = f"{self.lost_items} items lost; " if self.lost_items else ""
            lost = (f"; salvaged the snapshot but {self.damaged_parts} of its "
                    f"{self.snapshot_parts} parts ({items}see above)")
        if self.dropped_items:
            lost += (f"; dropped {self.dropped_items} damaged item"
                     f"{'s' if self.dropped_items != 1 else ''} (see above)")
        return f"kept {self.kept} of the {self.total} rows found{lost}; wrote {out}"


def recover_journal(path: str | Path, out: str | Path) -> RecoveryReport:
    """Copy every intact row of the memlab database at ``path`` into a new database ``out``.

    A row is kept when its checksum matches, its payload decodes and its operation applies to
    the store made of the rows kept before it (so ``out`` always opens); every other row is
    reported. ``path`` is only read; ``out`` must not exist. Rows are renumbered 1, 2, … and
    written in the current schema, in one transaction; an intact snapshot is written first
    (the state before the first row kept). A truncated file is read from a temporary
    copy whose header counts only the whole pages present, so every row on a surviving page is
    kept and the rows on the lost pages are reported missing.

    Raises
    ------
    ValueError
        ``out`` exists or cannot be created, or ``path`` is not a file;
        :class:`SchemaVersionError` when ``path`` is not a memlab database.

    Examples
    --------
    >>> import sqlite3, tempfile, pathlib
    >>> from memlab import Memory
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> mem = Memory(path=str(folder / "m.db"))
    >>> _ = mem.add("first", item_id="a"); _ = mem.add("second", item_id="b"); mem.store.close()
    >>> with sqlite3.connect(folder / "m.db") as conn:
    ...     _ = conn.execute("UPDATE ops SET payload = replace(payload, 'second', 'sec0nd') "
    ...                      "WHERE seq = 3")
    >>> report = recover_journal(folder / "m.db", folder / "new.db")
    >>> report.total, report.kept, report.problems
    (3, 2, ['row 3: checksum mismatch (the row was changed after it was written)'])
    """
    path, out = Path(path), Path(out)
    if out.exists():
        raise ValueError(f"out {str(out)!r} already exists; recover never overwrites a file")
    scan = _scan(path, "path")
    kept = _applicable(scan)
    done: list[str] = []  # the items dropped, listed last
    dropped = 0
    journal = Journal(out)
    try:
        if scan.tombstones or any(seq in scan.row_tombstones for seq, _, _ in kept):
            dropped = _write_without_damaged_items(scan, kept, journal, done)
        else:
            if scan.snapshot is not None:  # the state before the first row kept
                journal.write_snapshot(0, *capture(_base_store(scan)))
            if kept:
                journal.append_many([(op, payload) for _, op, payload in kept])
    finally:
        journal.close()

    MemoryStore(path=out).close()  # the salvaged file opens
    lost, items = 0, None
    if scan.snapshot is None and scan.snapshot_upto:  # damaged: what it covered is not kept
        lost = scan.snapshot_upto
        heads = (scan.snapshot_header or {}).get("workspaces")
        if isinstance(heads, list) and all(isinstance(h, dict) and type(h.get("items")) is int
                                           for h in heads):
            items = sum(h["items"] for h in heads)
    parts = 0 if scan.snapshot is None else len(scan.snapshot[1])
    if scan.snapshot is not None and scan.salvage_lines:
        items = scan.salvage_lost_items
    salvaged = [(None, line) for line in scan.salvage_lines or []]
    return RecoveryReport(scan.total, len(kept), _lines(scan.problems + salvaged, done), lost,
                          items, scan.damaged_parts if parts else 0, parts, dropped)
