"""The one in-process store behind every service surface (SPEC §1.3, §9).

:class:`ServiceState` owns one :class:`~memlab.MemoryStore` (durable when given a path), a
router-mode :class:`~memlab.Memory` facade per workspace, each workspace's named short-term
caches, one maintenance reasoner per workspace, and the optional request recorder. The HTTP
app and the MCP server both take a ``ServiceState``: a write through one is visible to the next
read through the other, and through the library in the same process.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

from memlab.clock import Clock, SystemClock
from memlab.harness.trace import TRACE_FORMAT, TRACE_VERSION
from memlab.maintenance import MaintenanceConfig, Reasoner
from memlab.memory import Memory
from memlab.model import validate_id
from memlab.session import PMMemoryStore
from memlab.store import MemoryStore

__all__ = ["ServiceState", "Recorder"]


class Recorder:
    """Appends every served request as a trace event (JSON Lines, replayable by the harness).

    The first line is a trace header; each event carries ``ts`` and ``workspace_id``. Queries
    get qids ``r<n>``; reads that return nothing to replay (status, health) are not recorded.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._count = 0
        if not self.path.exists() or self.path.stat().st_size == 0:
            self.path.write_text(json.dumps({"type": "header", "format": TRACE_FORMAT,
                                             "version": TRACE_VERSION, "name": "recorded",
                                             "start": None, "workspace_id": "default",
                                             "metadata": {"source": "memlab service"}},
                                            sort_keys=True) + "\n")
        else:
            self._count = sum(1 for _ in self.path.open()) - 1

    def record(self, kind: str, ts: datetime, workspace_id: str, **fields: Any) -> None:
        event = {"type": kind, "ts": ts.isoformat(), "workspace_id": workspace_id,
                 **{k: v for k, v in fields.items() if v is not None}}
        with self._lock:
            if kind == "query" and "qid" not in event:
                event["qid"] = f"r{self._count}"
            with self.path.open("a") as out:
                out.write(json.dumps(event, sort_keys=True, default=str) + "\n")
            self._count += 1


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
    """

    def __init__(self, store: MemoryStore | None = None, *, db_path: str | None = None,
                 clock: Clock | None = None, config: str = "default",
                 maintenance: bool = True, record: str | None = None) -> None:
        if store is not None and db_path is not None:
            raise ValueError("give either store or db_path, not both")
        self.db_path = db_path
        self.store = store if store is not None else MemoryStore(path=db_path)
        self.clock = clock or SystemClock()
        self.config = config
        self.maintenance = maintenance
        self.recorder = Recorder(record) if record else None
        self._lock = threading.RLock()  # reasoner() builds its memory() under the lock
        self._memories: dict[str, Memory] = {}
        self._caches: dict[tuple[str, str], PMMemoryStore] = {}
        self._reasoners: dict[str, Reasoner] = {}

    def memory(self, workspace_id: str = "default") -> Memory:
        validate_id(workspace_id, "workspace_id")
        with self._lock:
            mem = self._memories.get(workspace_id)
            if mem is None:
                mem = self._memories[workspace_id] = Memory(
                    store=self.store, workspace_id=workspace_id, surfacing_mode="router",
                    clock=self.clock, config=self.config)
            return mem

    def cache(self, name: str = "default", workspace_id: str = "default") -> PMMemoryStore:
        """The short-term cache ``name`` of ``workspace_id`` (created on first use).

        Each workspace has its own caches: a value set in one is never seen from another. The
        caches of workspace ``"default"`` keep the journal names of earlier versions, so they
        are the library's ``PMMemoryStore(durable=store, name=name)``.
        """
        validate_id(name, "cache")
        validate_id(workspace_id, "workspace_id")
        with self._lock:
            cache = self._caches.get((workspace_id, name))
            if cache is None:
                cache = self._caches[(workspace_id, name)] = PMMemoryStore(
                    durable=self.store, name=name,
                    workspace_id=None if workspace_id == "default" else workspace_id)
            return cache

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
        if self.maintenance:
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
                snapshot = ws.graph.snapshot(len(ws))
                report["workspaces"][wid] = {"items": len(ws), "edges": snapshot.num_edges,
                                             "graph_version": ws.graph_version}
            journal = self.store.journal
            if journal is not None:
                check = journal.integrity_check()
                if check != "ok":
                    raise RuntimeError(f"integrity_check: {check}")
                report["journal"] = {"path": str(journal.path), "ops": journal.count()}
            return report
