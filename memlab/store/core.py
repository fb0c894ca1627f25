"""The composition: :class:`MemoryStore`, its state, its workspaces and the item, edge, session
and journal mixins."""

from __future__ import annotations

import atexit
import sys
import threading
import weakref
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from memlab._reinforce import Reinforcements
from memlab._rwlock import RWLock
from memlab.model import MEMORY_TYPES, validate_id
from memlab.persist import Journal
from memlab.snapshot import restore
from memlab.store.edges import EdgesMixin
from memlab.store.items import ItemsMixin
from memlab.store.journal import (_CLASSES, COMPACT_AFTER, JOURNALED_OPS, REINFORCE_BATCH,
                                  JournalMixin, journaled)
from memlab.store.sessions import SessionsMixin, _PinSession
from memlab.store.workspace import Workspace
from memlab.text import ANALYZERS

__all__ = ["MemoryStore"]


def validate_fsync_outside_lock(value: Any) -> bool:
    """``value`` if it is a bool, else a ValueError naming ``fsync_outside_lock``.

    The one check of the option, for :class:`MemoryStore` and the service's
    :class:`~memlab.service.ServiceState`, which passes it on.

    Examples
    --------
    >>> validate_fsync_outside_lock(True)
    True
    >>> validate_fsync_outside_lock("yes")
    Traceback (most recent call last):
    ...
    ValueError: fsync_outside_lock must be a bool, got 'yes'
    """
    if not isinstance(value, bool):
        raise ValueError(f"fsync_outside_lock must be a bool, got {value!r}")
    return value


def validate_reads_during_fsync(value: Any) -> bool:
    """``value`` if it is a bool, else a ValueError naming ``reads_during_fsync``.

    Examples
    --------
    >>> validate_reads_during_fsync(False)
    False
    >>> validate_reads_during_fsync(1)
    Traceback (most recent call last):
    ...
    ValueError: reads_during_fsync must be a bool, got 1
    """
    if not isinstance(value, bool):
        raise ValueError(f"reads_during_fsync must be a bool, got {value!r}")
    return value


class MemoryStore(JournalMixin, ItemsMixin, EdgesMixin, SessionsMixin):
    """Holds every workspace. Create one and share it between facades.

    Parameters
    ----------
    memory_types : iterable of str, optional
        Extra memory types accepted besides the built-in ones (``semantic``, ``episodic``,
        ``procedural``, ``working``, ``topic``, ``anchor``, ``concept``).
    analyzer : {"porter", "plain"}
        How item text and queries become BM25 terms: lowercase words without stopwords, Porter-
        stemmed (``"porter"``, the default: "painting" finds "paint") or not (``"plain"``).
        Search, topic queries, the long-term graph and every recipe whose ``analyzer`` is None
        (``DEFAULT``, ``BM25_ONLY``) read this index; a recipe naming another analyzer
        (``SEED_COMPAT``: ``"plain"``) gets a second index per workspace, built on first use.
    fsync_outside_lock : bool
        Durable stores only. False (default): a write's journal rows are written and fsynced
        under the exclusive lock. True: after the lock is released (group commit, see
        :meth:`~memlab.store.journal.JournalMixin._write_journal`), so reads never wait for a
        write's disk I/O; the write still returns only once durable. Measured with 8 threads on
        2 cores (README, "Concurrency"), True cuts search/get p99 2-7x on a mixed load but makes
        adds 8-12x slower at p50 and contexts' p99 higher (readers and the commit compete for
        the GIL), which is why it is not the default.
    reads_during_fsync : bool
        Durable stores only (without ``path`` it changes nothing, as ``fsync_outside_lock``).
        False (default): while a write fsyncs its journal rows under the exclusive lock, gets
        read beside it (:meth:`~memlab._rwlock.RWLock.optimistic`) but searches and contexts
        (the shared side) wait for the fsync. True: an outermost write whose state is complete
        admits them during the ``COMMIT`` of its rows (:meth:`~memlab._rwlock.RWLock.admitting`;
        not during the row inserts, not inside a caller's ``with store.lock:`` around several
        writes, nor in a transaction's middle); it keeps the lock against other writers and,
        before it returns (or undoes a failed commit), waits for the readers it admitted. So
        a write may return later by the length of a search that went in during its fsync;
        that cost on writes is why it is off by default. A reader admitted during a commit
        that then fails saw the write that is undone: its reinforcement is dropped, as for a
        get during a failed commit. With ``fsync_outside_lock=True`` the commit of a write
        already runs after the lock is released (readers never wait for it), so this option
        then changes nothing.

    Examples
    --------
    >>> from memlab import Memory
    >>> store = MemoryStore()
    >>> a = Memory(store=store, workspace_id="ws-a"); b = Memory(store=store, workspace_id="ws-b")
    >>> _ = a.add("the deploy runs on fridays")
    >>> store.workspace_ids(), len(b.search("deploy"))
    (['ws-a', 'ws-b'], 0)

    A durable store whose writes admit searches and contexts during their fsync:

    >>> import tempfile, pathlib
    >>> durable = MemoryStore(path=pathlib.Path(tempfile.mkdtemp()) / "m.db",
    ...                       reads_during_fsync=True)
    >>> c = Memory(store=durable, workspace_id="ws")
    >>> _ = c.add("the deploy runs on fridays"); len(c.search("deploy"))
    1
    >>> durable.close()
    >>> MemoryStore(reads_during_fsync="yes")
    Traceback (most recent call last):
    ...
    ValueError: reads_during_fsync must be a bool, got 'yes'
    """

    def __init__(self, memory_types: Iterable[str] = (), *, analyzer: str = "porter",
                 path: str | Path | None = None,
                 reinforce_batch: int = REINFORCE_BATCH,
                 compact_after: int | None = COMPACT_AFTER,
                 fsync_outside_lock: bool = False,
                 reads_during_fsync: bool = False) -> None:
        if analyzer not in ANALYZERS:
            raise ValueError(f"analyzer must be one of {sorted(ANALYZERS)}, got {analyzer!r}")
        if isinstance(reinforce_batch, bool) or not isinstance(reinforce_batch, int) \
                or not 1 <= reinforce_batch <= 100_000:
            raise ValueError(f"reinforce_batch must be an int in 1..100000, got "
                             f"{reinforce_batch!r}")
        if compact_after is not None and (isinstance(compact_after, bool) or not isinstance(
                compact_after, int) or compact_after < 1):
            raise ValueError(f"compact_after must be a positive int or None, got "
                             f"{compact_after!r}")
        self.fsync_outside_lock = validate_fsync_outside_lock(fsync_outside_lock)
        self.reads_during_fsync = validate_reads_during_fsync(reads_during_fsync)
        self.reinforce_batch = reinforce_batch
        self.compact_after = compact_after  # journal rows after the snapshot that trigger one
        self._tail_rows = 0  # store rows after the latest snapshot (what a reopen replays)
        self._compact_lock = threading.Lock()  # one compaction at a time
        self._compactor: threading.Thread | None = None  # the background compaction, if any
        self._closing = False
        self._closed = False  # a durable store after close(): writes raise StoreClosedError
        self._foreign_writer = False  # a compaction met another process's rows (see compact)
        self.last_compaction_error: BaseException | None = None  # of a background compaction
        self._pending: list[str] = []  # encoded record_retrieval calls not yet on disk
        self.analyzer = analyzer
        self.lock = RWLock()  # exclusive for writes, .shared() for reads
        # reads' reinforcements that found the lock taken, applied by the next write
        self.reinforcements = Reinforcements(self)
        self.memory_types = frozenset(MEMORY_TYPES | set(memory_types))
        self._reset_state()
        self._depth = 0  # nesting of journaled calls (only the outermost is written)
        self._applying = False  # the outermost journaled write has begun to change state
        self._batch: list[tuple[str, str]] | None = None  # ops of an open transaction()
        self._replaying = False
        self.path = None if path is None else Path(path)
        self._init_commits()
        self._journal = None if path is None else Journal(
            path, classes=_CLASSES, known_ops=JOURNALED_OPS)
        if self._journal is not None:
            self._journal.around_commit = self._around_commit  # (reads_during_fsync)
            self._replay()
            # a clean exit must not lose what group commit buffered (reinforcements): close
            # the store at interpreter exit unless the caller closed it (weakly held)
            atexit.register(_close_at_exit, weakref.ref(self))

    def _mutating(self) -> None:
        """Called by every write when it has computed everything and begins to change state."""
        self._applying = True

    def _target(self, workspace_id: str) -> Workspace:
        """The workspace a write goes to: an existing one, or a new one not yet registered
        (:meth:`_register` adds it once the write applies, so a failed write leaves none)."""
        ws = self._workspaces.get(workspace_id)
        if ws is None:
            validate_id(workspace_id, "workspace_id")
            ws = Workspace(workspace_id, self.analyzer)
        return ws

    def _register(self, ws: Workspace) -> None:
        self._workspaces.setdefault(ws.workspace_id, ws)

    def _reset_state(self) -> None:
        self._workspaces: dict[str, Workspace] = {}
        self._pins: dict[str, _PinSession] = {}
        self._anchors: dict[tuple[str, str], list[int]] = {}
        self._anchor_reviews: dict[tuple[str, str], dict[str, str]] = {}

    def load_snapshot(self, info, parts: list[bytes]) -> None:
        """Replace this store's state with a snapshot's (:func:`memlab.snapshot.restore`, with
        this module's workspace and pin-session classes): checked in full first, so a damaged
        snapshot raises :class:`~memlab.persist.JournalCorruptError` and changes nothing."""
        restore(self, info, parts, workspace_cls=Workspace, pin_session_cls=_PinSession)

    # ------------------------------------------------------------ workspaces
    def workspace(self, workspace_id: str) -> Workspace:
        """The workspace named ``workspace_id`` (created empty on first use, in memory only: a
        workspace that no write touches is not journaled; see :meth:`ensure_workspace`).

        An existing workspace is returned without waiting for the lock; a new one is made under
        the shared lock (an empty workspace changes nothing a reader sees), so a reader may ask.
        """
        ws = self._workspaces.get(workspace_id)
        if ws is not None:
            return ws
        with self.lock.shared():
            ws = self._workspaces.get(workspace_id)
            if ws is None:
                validate_id(workspace_id, "workspace_id")
                ws = self._workspaces.setdefault(workspace_id,
                                                 Workspace(workspace_id, self.analyzer))
            return ws

    @journaled
    def create_workspace(self, workspace_id: str) -> Workspace:
        """Create the (empty) workspace ``workspace_id`` if it does not exist; return it.

        Unlike :meth:`workspace`, this is a write: on a durable store the call is journaled, so
        an empty workspace survives a reopen. Each call writes a row, even for an existing
        workspace; :meth:`ensure_workspace` writes one only when the workspace is new.

        Examples
        --------
        >>> store = MemoryStore()
        >>> store.create_workspace("ws").workspace_id, store.workspace_ids()
        ('ws', ['ws'])
        """
        with self.lock:
            return self.workspace(workspace_id)

    def ensure_workspace(self, workspace_id: str) -> Workspace:
        """:meth:`create_workspace` when ``workspace_id`` is new (journaled once), else the
        existing workspace (nothing written)."""
        with self.lock:
            ws = self._workspaces.get(workspace_id)
            return ws if ws is not None else self.create_workspace(workspace_id)

    def workspace_ids(self) -> list[str]:
        with self.lock.shared():
            return sorted(self._workspaces)

    def has_workspace(self, workspace_id: str) -> bool:
        """Whether ``workspace_id`` exists (a read that creates nothing)."""
        with self.lock.shared():
            return workspace_id in self._workspaces

    def serialize(self) -> dict[str, Any]:
        """Everything the store holds as JSON-able data, in a deterministic order.

        Used to prove that a failed write changed nothing: compare ``json.dumps`` of two calls.
        """
        with self.lock.shared():
            out: dict[str, Any] = {"workspaces": {}, "pins": {}, "anchors": {}, "reviews": {}}
            for wid in sorted(self._workspaces):
                ws = self._workspaces[wid]
                act = ws.activation
                out["workspaces"][wid] = {
                    "items": [item.to_dict() for item in ws.items],
                    "edges": self._edge_rows(ws),
                    "edge_ts": [None if t != t else t for t in  # noqa: PLR0124 (NaN test)
                                ws.graph.table.updated_ts.view().tolist()],
                    "columns": {name: getattr(ws, name).view().tolist() for name in
                                ("created_ts", "updated_ts", "eligible", "tokens", "procedural",
                                 "longterm")},
                    "node_index": sorted([list(k) + [v] for k, v in ws.node_index.items()]),
                    "topic_fields": {str(k): v for k, v in sorted(ws.topic_fields.items())},
                    "last_decay_ts": ws.last_decay_ts,
                    "activation": {"stored": act.stored.view().tolist(),
                                   "anchor_ts": act.anchor_ts.view().tolist(),
                                   "last_boost_ts": [None if t != t else t
                                                     for t in act.last_boost_ts.view().tolist()],
                                   "access_times": {str(k): v for k, v in
                                                    sorted(act.access_times.items())}},
                    "bm25": {"docs": len(ws.bm25), "vocabulary": ws.bm25.vocabulary_size},
                    "gazetteer": len(ws.gazetteer),
                    "version": ws.version, "graph_version": ws.graph_version,
                }
            for sid in sorted(self._pins):
                state = self._pins[sid]
                out["pins"][sid] = [state.workspace_id, sorted(state.pins.items()), state.expires_ts]
            for (wid, sid) in sorted(self._anchors):
                out["anchors"][f"{wid}/{sid}"] = list(self._anchors[(wid, sid)])
            for (wid, sid) in sorted(self._anchor_reviews):
                out["reviews"][f"{wid}/{sid}"] = sorted(self._anchor_reviews[(wid, sid)].items())
            return out


def _close_at_exit(ref: "weakref.ref[MemoryStore]") -> None:
    """Close a durable store still open at interpreter exit (buffered reinforcements written)."""
    store = ref()
    if store is None or store._closing:
        return
    try:
        store.close()
    except Exception as exc:  # noqa: BLE001 - at exit: say what was lost, do not mask the exit
        print(f"memlab: closing {store.path} at exit failed, buffered reinforcements lost: "
              f"{exc}", file=sys.stderr)
