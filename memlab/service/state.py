"""The one in-process store behind every service surface (SPEC §1.3, §9).

:class:`ServiceState` owns one :class:`~memlab.MemoryStore` (durable when given a path), a
router-mode :class:`~memlab.Memory` facade per workspace, each workspace's named short-term
caches, one maintenance reasoner per workspace, and the optional request recorder. The HTTP
app and the MCP server both take a ``ServiceState``: a write through one is visible to the next
read through the other, and through the library in the same process.
"""

from __future__ import annotations

import hashlib
import json
import os
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from memlab.clock import Clock, SystemClock
from memlab.harness.trace import TRACE_FORMAT, TRACE_VERSION
from memlab.maintenance import MaintenanceConfig, Reasoner
from memlab.memory import Memory
from memlab.model import validate_id
from memlab.service.limits import Limits, check_id_text
from memlab.session import PMMemoryStore
from memlab.store import COMPACT_AFTER, MemoryStore
from memlab.store.core import validate_fsync_outside_lock

__all__ = ["ServiceState", "Recorder"]


class Recorder:
    """Appends every served request as a trace event (JSON Lines, replayable by the harness).

    The first line of each file is a trace header; each event carries ``ts`` and
    ``workspace_id`` (and ``cache`` for cache events). Queries get qids ``r<n>``; reads that
    return nothing to replay (status, health, search) are not recorded. The file is created
    with mode 0600 (an existing one is narrowed to it): it holds what clients stored.

    Parameters
    ----------
    path : str or Path
        The trace file.
    max_bytes : int, optional
        Rotate when the file would grow past this size: ``path`` becomes ``path.1`` (``.1``
        becomes ``.2``, … up to ``backups``; the oldest is deleted) and a new file with its own
        header starts. Every file is a trace on its own. None: never rotate.
    backups : int
        Rotated files kept.
    redact : bool
        Replace free text (``content``, ``query``, ``value``, ``title``, ``why_changed``) by
        ``"<redacted sha256:…>"`` and ``metadata``/``fields`` by ``{"redacted": "sha256:…"}``:
        the trace keeps the session's shape (ids, sessions, times, kinds) but not what was
        said, so it replays but does not reproduce the contexts.
    """

    REDACTED_TEXT = ("content", "query", "value", "title", "why_changed")
    REDACTED_JSON = ("metadata", "fields")

    def __init__(self, path: str | Path, *, max_bytes: int | None = None, backups: int = 5,
                 redact: bool = False) -> None:
        if max_bytes is not None and (isinstance(max_bytes, bool) or
                                      not isinstance(max_bytes, int) or max_bytes < 1024):
            raise ValueError(f"max_bytes must be an int >= 1024 or None, got {max_bytes!r}")
        if isinstance(backups, bool) or not isinstance(backups, int) or backups < 1:
            raise ValueError(f"backups must be a positive int, got {backups!r}")
        if not isinstance(redact, bool):
            raise ValueError(f"redact must be a bool, got {redact!r}")
        self.path = Path(path)
        self.max_bytes, self.backups, self.redact = max_bytes, backups, redact
        self._lock = threading.Lock()
        self._count = 0
        if self.path.exists() and self.path.stat().st_size > 0:
            os.chmod(self.path, 0o600)
            with self.path.open(encoding="utf-8") as lines:
                self._count = sum(1 for _ in lines) - 1
        else:
            self._start_file()

    def _start_file(self) -> None:
        header = json.dumps({"type": "header", "format": TRACE_FORMAT, "version": TRACE_VERSION,
                             "name": "recorded", "start": None, "workspace_id": "default",
                             "metadata": {"source": "memlab service", "redacted": self.redact}},
                            sort_keys=True) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(header)
        os.chmod(self.path, 0o600)  # also when the file existed (empty) with a wider mode

    def _rotate(self) -> None:
        oldest = self.path.with_name(f"{self.path.name}.{self.backups}")
        oldest.unlink(missing_ok=True)
        for n in range(self.backups - 1, 0, -1):
            older = self.path.with_name(f"{self.path.name}.{n}")
            if older.exists():
                older.replace(self.path.with_name(f"{self.path.name}.{n + 1}"))
        self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        self._start_file()

    def _redacted(self, event: dict[str, Any]) -> dict[str, Any]:
        for name in self.REDACTED_TEXT:
            if isinstance(event.get(name), str):
                event[name] = f"<redacted sha256:{_digest(event[name])}>"
        for name in self.REDACTED_JSON:
            if event.get(name) is not None:
                text = json.dumps(event[name], sort_keys=True, default=str)
                event[name] = {"redacted": f"sha256:{_digest(text)}"}
        return event

    def record(self, kind: str, ts: datetime, workspace_id: str, **fields: Any) -> None:
        """Append one event of type ``kind`` (fields that are None are left out)."""
        event = {"type": kind, "ts": ts.isoformat(), "workspace_id": workspace_id,
                 **{k: v for k, v in fields.items() if v is not None}}
        if self.redact:
            event = self._redacted(event)
        with self._lock:
            if kind == "query" and "qid" not in event:
                event["qid"] = f"r{self._count}"
            line = (json.dumps(event, sort_keys=True, default=str) + "\n").encode("utf-8")
            if (self.max_bytes is not None and self.path.exists()
                    and self.path.stat().st_size + len(line) > self.max_bytes):
                self._rotate()
            fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
            with os.fdopen(fd, "ab") as out:
                out.write(line)
            self._count += 1


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:16]


class ServiceState:
    """Store, facades, caches, reasoners and recorder shared by the service surfaces.

    Parameters
    ----------
    store : MemoryStore, optional
        The store to serve; else one opened at ``db_path`` (durable) or a fresh in-memory one.
    db_path : str, optional
        SQLite file for a durable store.
    clock : Clock, optional
        The clock of every facade (the system clock by default).
    config : str
        Recipe of the facades (``"default"``).
    maintenance : bool
        Run maintenance after ingest and query requests (in the background, after the response).
    record : str, optional
        Path of a JSON Lines trace to append every request to.
    limits : Limits, optional
        Bounds on one request's work (:class:`~memlab.service.limits.Limits`; its defaults
        when omitted).
    record_max_bytes : int, optional
        Rotate the trace at this size (see :class:`Recorder`).
    record_redact : bool
        Record without the requests' text (see :class:`Recorder`).
    compact_after : int or None
        The durable store opened at ``db_path`` compacts its journal into a snapshot, in a
        background thread, once this many journal rows follow its latest snapshot (default
        :data:`memlab.store.COMPACT_AFTER`, 100,000; None: never by itself, ``memlab compact``
        still does). Ignored for a ``store`` given (it has its own).
    fsync_outside_lock : bool
        The store opened from ``db_path`` writes its journal after its lock is released (group
        commit, ``MemoryStore(fsync_outside_lock=True)``; ``memlab serve --group-commit``).
        Off by default; True needs ``db_path`` (an in-memory store has no journal), and a
        ``store`` given has its own setting (True with one is an error).

    Notes
    -----
    Reads never create a workspace: :meth:`reader` serves a workspace that does not exist from
    an empty, throw-away store, so a read of an unknown workspace answers what an empty
    workspace would (no items, no pins, a miss) and leaves no trace in memory or on disk.
    """

    def __init__(self, store: MemoryStore | None = None, *, db_path: str | None = None,
                 clock: Clock | None = None, config: str = "default",
                 maintenance: bool = True, record: str | None = None,
                 limits: Limits | None = None, record_max_bytes: int | None = None,
                 record_redact: bool = False,
                 compact_after: int | None = COMPACT_AFTER,
                 fsync_outside_lock: bool = False) -> None:
        if store is not None and db_path is not None:
            raise ValueError("give either store or db_path, not both")
        if validate_fsync_outside_lock(fsync_outside_lock) and store is not None:
            raise ValueError("fsync_outside_lock is for the store opened from db_path; give "
                             "MemoryStore(fsync_outside_lock=True) as store instead")
        if fsync_outside_lock and db_path is None:  # an in-memory store has no journal
            raise ValueError("fsync_outside_lock needs db_path (a durable store to write the "
                             "journal of), got fsync_outside_lock=True with db_path=None")
        if limits is not None and not isinstance(limits, Limits):
            raise ValueError(f"limits must be a Limits, got {limits!r}")
        self.limits = limits or Limits()
        self.db_path = db_path
        self.store = store if store is not None else MemoryStore(
            path=db_path, compact_after=compact_after, fsync_outside_lock=fsync_outside_lock)
        self.clock = clock or SystemClock()
        self.config = config
        self.maintenance = maintenance
        self.recorder = Recorder(record, max_bytes=record_max_bytes,
                                 redact=record_redact) if record else None
        self._lock = threading.RLock()  # reasoner() builds its memory() under the lock
        self._memories: dict[str, Memory] = {}
        self._caches: dict[tuple[str, str], PMMemoryStore] = {}
        self._cache_ops: set[str] | None = None  # distinct cache ops in the journal, read once
        self._reasoners: dict[str, Reasoner] = {}

    def memory(self, workspace_id: str = "default") -> Memory:
        """The facade of ``workspace_id`` for a write (the workspace is created when new)."""
        validate_id(workspace_id, "workspace_id")
        check_id_text(workspace_id, "workspace_id")
        with self._lock:
            mem = self._memories.get(workspace_id)
            if mem is None:
                mem = self._memories[workspace_id] = Memory(
                    store=self.store, workspace_id=workspace_id, surfacing_mode="router",
                    clock=self.clock, config=self.config)
            return mem

    def exists(self, workspace_id: str) -> bool:
        """Whether the store holds ``workspace_id`` (nothing is created)."""
        return self.store.has_workspace(workspace_id)

    def reader(self, workspace_id: str = "default") -> Memory:
        """The facade of ``workspace_id`` for a read: never creates the workspace.

        An unknown workspace is served by a facade over a fresh, empty in-memory store that is
        dropped after the request, so the answer is an empty workspace's.
        """
        validate_id(workspace_id, "workspace_id")
        check_id_text(workspace_id, "workspace_id")
        with self._lock:
            if workspace_id in self._memories or self.store.has_workspace(workspace_id):
                return self.memory(workspace_id)
        scratch = MemoryStore(self.store.memory_types, analyzer=self.store.analyzer)
        return Memory(store=scratch, workspace_id=workspace_id, surfacing_mode="router",
                      clock=self.clock, config=self.config)

    def add_many(self, workspace_id: str, items: list) -> list[str]:
        """A bulk write within the limits, chunk-atomic in ``limits.bulk_chunk_items``."""
        self.limits.check_bulk(items)
        return self.memory(workspace_id).add_many(items,
                                                  chunk_size=self.limits.bulk_chunk_items)

    def cache(self, name: str = "default", workspace_id: str = "default") -> PMMemoryStore:
        """The short-term cache ``name`` of ``workspace_id`` for a write (created on first use).

        Each workspace has its own caches: a value set in one is never seen from another. The
        caches of workspace ``"default"`` keep the journal names of earlier versions, so they
        are the library's ``PMMemoryStore(durable=store, name=name)``.

        The first cache access of the service reads and checks the journal once, noting which
        caches have rows in it; after that, creating a cache that has no rows costs no journal
        scan, and one that has rows (it was written before a restart) replays them with one
        scan, once per process.
        """
        validate_id(name, "cache")
        validate_id(workspace_id, "workspace_id")
        with self._lock:
            cache = self._caches.get((workspace_id, name))
            if cache is None:
                journal_ws = None if workspace_id == "default" else workspace_id
                cache = self._caches[(workspace_id, name)] = PMMemoryStore(
                    durable=self.store, name=name, workspace_id=journal_ws,
                    restore=self._journaled(name, journal_ws))
            return cache

    def cache_reader(self, name: str = "default",
                     workspace_id: str = "default") -> PMMemoryStore:
        """The short-term cache ``name`` of ``workspace_id`` for a read: never creates it.

        A cache that neither this process nor the journal holds is answered by a fresh, empty
        cache that is dropped after the request (every peek a miss, no slot used), so reading
        any number of unknown names or workspaces keeps nothing and scans nothing.
        """
        validate_id(name, "cache")
        validate_id(workspace_id, "workspace_id")
        with self._lock:
            cache = self._caches.get((workspace_id, name))
            if cache is not None:
                return cache
            if self._journaled(name, None if workspace_id == "default" else workspace_id):
                return self.cache(name, workspace_id)  # written before a restart: restore it
        return PMMemoryStore(name=name, workspace_id=None if workspace_id == "default"
                             else workspace_id)

    def _journaled(self, name: str, journal_ws: str | None) -> bool:
        """Whether the journal holds a row of cache ``name`` (under ``self._lock``)."""
        if self._cache_ops is None:
            journal = self.store.journal
            self._cache_ops = set() if journal is None else \
                {op for op, _ in journal.ops(prefix="cache")}
        return not self._cache_ops.isdisjoint(PMMemoryStore.journal_ops(name, journal_ws))

    @staticmethod
    def session_key(workspace_id: str, session_id: str) -> str:
        """The store's session id for ``session_id`` of ``workspace_id``.

        The service namespaces session ids per workspace, so a session id bound (by a pin) in
        one workspace never blocks the same id in another: the store sees
        ``["<workspace_id>", "<session_id>"]`` (JSON, hence one key per pair). Library code
        sharing the store reaches a service session's pins through this key.
        """
        validate_id(workspace_id, "workspace_id")
        validate_id(session_id, "session_id")
        return json.dumps([workspace_id, session_id])

    def reasoner(self, workspace_id: str) -> Reasoner:
        with self._lock:
            reasoner = self._reasoners.get(workspace_id)
            if reasoner is None:
                reasoner = self._reasoners[workspace_id] = Reasoner(
                    self.memory(workspace_id), MaintenanceConfig(enabled=True))
            return reasoner

    def after(self, workspace_id: str, event: str) -> None:
        """Maintenance after an ingest or query (failures stay in ``reasoner.failures``)."""
        if self.maintenance and self.exists(workspace_id):
            self.reasoner(workspace_id).after_event(event)

    def record(self, kind: str, workspace_id: str, **fields: Any) -> None:
        if self.recorder is not None:
            self.recorder.record(kind, self.clock.now(), workspace_id, **fields)

    def graph_health(self) -> dict[str, Any]:
        """What /health/graph reports (every workspace, the journal's path: admin only).

        Raises when the store cannot be read.
        """
        with self.store.lock:
            report: dict[str, Any] = {"workspaces": {}}
            for wid in self.store.workspace_ids():
                ws = self.store.workspace(wid)
                snapshot = ws.graph_snapshot()
                report["workspaces"][wid] = {"items": len(ws), "edges": snapshot.num_edges,
                                             "graph_version": ws.graph_version}
            journal = self.store.journal
            if journal is not None:
                check = journal.integrity_check()
                if check != "ok":
                    raise RuntimeError(f"integrity_check: {check}")
                report["journal"] = {"path": str(journal.path), "ops": journal.count()}
            return report
