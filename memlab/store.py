"""The one store (SPEC §1): every workspace's items, edges, sessions' pins and anchors.

Several :class:`~memlab.memory.Memory` facades may share one :class:`MemoryStore`; each sees only its
own workspace. Writes validate everything first and then apply, so a failed write changes nothing.
All access goes through one re-entrant readers-writer lock, :attr:`MemoryStore.lock`, which
makes a store safe to share between threads: writes hold it exclusively (``with store.lock:``),
reads that change nothing hold it shared (``with store.lock.shared():``) and run together.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import gc
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from datetime import datetime
from typing import Any

import numpy as np

from memlab._arrays import Growable
from memlab._rwlock import RWLock
from memlab.clock import as_utc
from memlab.errors import (
    DuplicateItemError,
    SessionPinWorkspaceConflict,
    UnknownItemError,
)
from memlab.graph.csr import EdgeTable, GraphView
from memlab.persist import (ConcurrentWriterError, Journal, JournalCorruptError,
                            PersistenceError, decode, encode)
from memlab.model import (
    MEMORY_TYPES,
    MemoryItem,
    validate_edge_type,
    validate_id,
    validate_metadata,
    validate_text,
    validate_weight,
)
from memlab.signals.activation import ActivationState
from memlab.signals.bm25 import BM25Index
from memlab.signals.time_index import CreatedOrder, RecencyOrder
from memlab.snapshot import CompactionReport, capture, restore
from memlab.text import ANALYZERS, TITLE_KEYS, Gazetteer, estimate_tokens, normalise_title

__all__ = ["MemoryStore", "NewItem", "Workspace", "node_key_of", "paused_gc"]



def index_text(content: str, metadata: dict) -> str:
    """The text BM25 indexes: the content, after a long-term node's label (found by its name)."""
    label = metadata.get("label") if node_key_of(metadata) is not None else None
    return f"{label}\n{content}" if label else content


def node_key_of(metadata: dict) -> tuple[str, str] | None:
    """``(node_type, normalised label)`` of a long-term graph node's metadata, else None."""
    node_type, label = metadata.get("node_type"), metadata.get("label")
    if isinstance(node_type, str) and isinstance(label, str) and normalise_title(label):
        return node_type, normalise_title(label)
    return None


@contextlib.contextmanager
def paused_gc(size: int, threshold: int = 1000):
    """Pause the cyclic garbage collector while a bulk write of ``size`` objects allocates.

    Bulk ingest creates several container objects per item and none of them form cycles; with
    the collector on, its generation-2 passes re-scan the whole growing store again and again
    (measured: ~40% of ``add_many`` time at 50k items).
    """
    if size < threshold or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


@dataclass(frozen=True, slots=True)
class NewItem:
    """A validated item waiting to be written."""

    item_id: str | None
    content: str
    memory_type: str
    metadata: dict
    created_at: datetime | None


_CLASSES = {"NewItem": NewItem}  # dataclasses that journaled arguments may hold


class Workspace:
    """One workspace's items as columns (numbered 0, 1, … in order of addition), index and edges."""

    def __init__(self, workspace_id: str, analyzer: str = "porter") -> None:
        self.workspace_id = workspace_id
        self.analyzer = analyzer
        self.analyze = ANALYZERS[analyzer]  # text -> BM25 terms, for items and queries alike
        self.items: list[MemoryItem] = []
        self.item_ids: list[str] = []  # item_ids[i] == items[i].item_id, for fast lookups
        self.index_of: dict[str, int] = {}
        self.bm25 = BM25Index()  # built with self.analyzer
        self.other_bm25: dict[str, BM25Index] = {}  # other analyzers' indexes (see bm25_for)
        self.created_ts = Growable(np.float64, 64)
        self.updated_ts = Growable(np.float64, 64)
        self.eligible = Growable(np.bool_, 64)  # may surface as an ordinary candidate
        self.tokens = Growable(np.int64, 64)
        self.procedural = Growable(np.bool_, 64)
        self.longterm = Growable(np.bool_, 64)  # a long-term graph node (node_type + label)
        self.activation = ActivationState()
        self.gazetteer = Gazetteer()
        self.graph = GraphView(EdgeTable())  # edges and their CSR view
        self.node_index: dict[tuple[str, str], int] = {}  # (node_type, normalised label) -> item
        self.topic_fields: dict[int, dict[str, dict]] = {}  # topic item -> its versioned fields
        self.last_decay_ts: float | None = None  # the maintenance decay sweep's last run
        self.dense: dict = {}  # embedder name -> memlab.signals.dense.DenseIndex (built lazily)
        self.content_changes: list[int] = []  # items whose content changed, in order (for caches)
        self.version = 0  # bumped by every write
        self._next_generated = 0
        # time orders for O(k) recency and window reads; writes that change an item's recency
        # reference or eligibility call recency_order.touch (adds need nothing)
        self.recency_order = RecencyOrder()
        self.created_order = CreatedOrder()

    def __len__(self) -> int:
        return len(self.items)

    @property
    def graph_version(self) -> int:
        """Bumped by every write that changes an edge (adding items leaves the graph as is)."""
        return self.graph.version

    def bm25_for(self, analyzer: str | None) -> tuple[Callable[[str], list[str]], BM25Index]:
        """``(analyze, index)`` for BM25 with ``analyzer`` (None: the workspace's own).

        An analyzer other than the workspace's gets its own index, built from every item on
        first use (the caller holds the store's lock, shared or exclusive); from then on every
        write that indexes text (:meth:`MemoryStore.add_items`, :meth:`MemoryStore.update_item`)
        maintains it too. Nothing is built, and no write pays, for an analyzer never asked for.
        """
        if analyzer is None or analyzer == self.analyzer:
            return self.analyze, self.bm25
        if analyzer not in ANALYZERS:
            raise ValueError(f"analyzer must be one of {sorted(ANALYZERS)}, got {analyzer!r}")
        analyze = ANALYZERS[analyzer]
        index = self.other_bm25.get(analyzer)
        if index is None:
            index = BM25Index()
            index.add_many([analyze(index_text(item.content, item.metadata))
                            for item in self.items])
            # two readers may build it at once: both then use the one stored first
            index = self.other_bm25.setdefault(analyzer, index)
        return analyze, index

    def recency_reference_ts(self, idx: np.ndarray) -> np.ndarray:
        """SPEC §2.2: the last activation boost, else ``updated_at``, else ``created_at``."""
        boost = self.activation.last_boost_ts.view()[idx]
        return np.where(np.isnan(boost), self.updated_ts.view()[idx], boost)

    def most_recent(self, n: int) -> np.ndarray:
        """The ``n`` eligible items with the latest recency reference time, latest first, ties
        by item number (O(n) on the kept order; :class:`~memlab.signals.time_index.RecencyOrder`)."""
        return self.recency_order.top(n, self.recency_reference_ts, self.eligible.view())

    def created_between(self, start_ts: float, end_ts: float) -> np.ndarray:
        """The items created in ``[start_ts, end_ts)``, by creation time then item number."""
        return self.created_order.window(self.created_ts.view(), start_ts, end_ts)

    def newest_created(self, start_ts: float, end_ts: float, n: int,
                       keep: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The ``n`` latest-created items in ``[start_ts, end_ts)`` that ``keep(idx)`` accepts,
        latest first, ties by item number (:meth:`~memlab.signals.time_index.CreatedOrder.newest`)."""
        return self.created_order.newest(self.created_ts.view(), start_ts, end_ts, n, keep)

    def ids_of(self, idx: Sequence[int] | np.ndarray) -> list[str]:
        """The item ids of item numbers ``idx``, in order."""
        ids = self.item_ids
        return [ids[i] for i in (idx.tolist() if isinstance(idx, np.ndarray) else idx)]

    def check_rows(self, idx: Sequence[int] | np.ndarray) -> np.ndarray:
        """``idx`` as an int64 array after checking that each is an item number, else raise."""
        rows = np.asarray(idx, dtype=np.int64).reshape(-1)
        if len(rows) and (rows.min() < 0 or rows.max() >= len(self.items)):
            raise ValueError(f"item numbers must be in 0..{len(self.items) - 1}, got "
                             f"{rows.tolist()!r:.80}")
        return rows

    def require(self, item_id: Any, name: str = "item_id") -> int:
        validate_id(item_id, name)
        idx = self.index_of.get(item_id)
        if idx is None:
            raise UnknownItemError(f"{name} {item_id!r} does not exist in workspace "
                                   f"{self.workspace_id!r}")
        return idx

    # -- the read interface of the layers above the store (surfacing, graph, topics,
    # session): methods and read-only views, so that they never touch a field directly
    @staticmethod
    def _frozen_view(column: Growable) -> np.ndarray:
        view = column.view()[:]
        view.flags.writeable = False
        return view

    def eligible_mask(self) -> np.ndarray:
        """Read-only: True where an item may surface as an ordinary candidate (not archived,
        not an anchor)."""
        return self._frozen_view(self.eligible)

    def created_column(self) -> np.ndarray:
        """Read-only: every item's creation time (epoch seconds)."""
        return self._frozen_view(self.created_ts)

    def procedural_mask(self) -> np.ndarray:
        """Read-only: True where an item's memory type is ``procedural``."""
        return self._frozen_view(self.procedural)

    def longterm_mask(self) -> np.ndarray:
        """Read-only: True where an item is a long-term graph node."""
        return self._frozen_view(self.longterm)

    def token_estimates(self) -> np.ndarray:
        """Read-only: every item's LLM token estimate (what budgets count; not BM25 terms)."""
        return self._frozen_view(self.tokens)

    def item(self, i: int) -> MemoryItem:
        """Item number ``i`` (the stored object: treat it as read-only)."""
        return self.items[i]

    def item_id_of(self, i: int) -> str:
        """The item id of item number ``i``."""
        return self.item_ids[i]

    def row_of(self, item_id: str) -> int | None:
        """The item number of ``item_id``, None when it is not an item here."""
        return self.index_of.get(item_id)

    def activation_state(self):
        """The activation columns (:class:`~memlab.signals.activation.ActivationState`) the
        activation models read."""
        return self.activation

    def graph_view(self) -> GraphView:
        """The workspace's edges and their CSR view (snapshots, caches)."""
        return self.graph

    def titles(self) -> Gazetteer:
        """The gazetteer: which items a text names by title."""
        return self.gazetteer

    def node_of(self, node_type: str, key: str) -> int | None:
        """The long-term node item with this type and normalised label, if any."""
        return self.node_index.get((node_type, key))

    def topic_fields_of(self, i: int) -> dict[str, dict] | None:
        """A topic item's versioned fields (None for other items)."""
        return self.topic_fields.get(i)

    def archived_mask(self) -> np.ndarray:
        """True where an item is archived (a new array)."""
        return np.fromiter((item.archived for item in self.items), bool, len(self.items))

    def node_rows(self) -> list[int]:
        """The item numbers of every long-term node, ascending."""
        return sorted(self.node_index.values())

    def is_topic(self, i: int) -> bool:
        """Whether item number ``i`` is a topic (has versioned fields)."""
        return i in self.topic_fields

    def analyzer_name(self) -> str:
        """The workspace's own text analyzer (a name in :data:`memlab.text.ANALYZERS`)."""
        return self.analyzer

    def generate_id(self, taken: set[str]) -> str:
        """The next free generated id (``item-000000``, …); advances the counter."""
        (item_id,), self._next_generated = self.generate_ids([None], taken)
        return item_id

    def generate_ids(self, new_items: Sequence[Any], taken: set[str]) -> tuple[list[str], int]:
        """Ids for ``new_items`` (theirs, else the next free generated ones) and the counter
        after them, without changing the workspace (the write stores the counter)."""
        counter, ids = self._next_generated, []
        for new in new_items:
            given = getattr(new, "item_id", None)
            if given is not None:
                ids.append(given)
                continue
            while True:
                candidate = f"item-{counter:06d}"
                counter += 1
                if candidate not in self.index_of and candidate not in taken:
                    ids.append(candidate)
                    break
        return ids, counter


@dataclass
class _PinSession:
    workspace_id: str
    pins: dict[str, float] = field(default_factory=dict)
    expires_ts: float = 0.0


def _numbers_below(values: Any, bound: int) -> bool:
    """Whether ``values`` (an int, or a sequence or array of them) are all in ``0..bound-1``."""
    if isinstance(values, (bool, np.bool_)):
        return False
    if isinstance(values, (int, np.integer)):
        return 0 <= values < bound
    if not isinstance(values, (list, tuple, np.ndarray)):
        return False
    if isinstance(values, (list, tuple)) and not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return False
    array = np.asarray(values)
    if array.size == 0:
        return True
    return array.dtype.kind in "iu" and int(array.min()) >= 0 and int(array.max()) < bound


JOURNALED_OPS: set[str] = set()  # the store methods a journal row may name (``store.<name>``)
# Writes made by reads (activation reinforcement): group-committed, see MemoryStore.flush.
_GROUP_COMMITTED = frozenset(["record_retrieval"])
REINFORCE_BATCH = 64  # default number of reinforcements per journal row (``reinforce_batch``)
COMPACT_AFTER = 100_000  # default journal rows after the latest snapshot that trigger one


def journaled(method):
    """Make a store write durable: after it applies, its name and arguments go to the journal
    (outermost call only). If the journal cannot be written, the store is rebuilt from disk, so
    a failed write changes nothing, and :class:`~memlab.persist.PersistenceError` is raised.

    Every write computes (and validates) everything that can fail before it changes anything,
    then calls :meth:`MemoryStore._mutating` and applies. The arguments are encoded for the
    journal before the write runs. Should anything still raise once a write has begun to apply
    (an out-of-memory error, a bug), a durable store is rebuilt from disk, which holds exactly
    the acknowledged writes; inside :meth:`MemoryStore.transaction` the transaction does that.
    """
    signature = inspect.signature(method)
    JOURNALED_OPS.add(method.__name__)
    deferred = method.__name__ in _GROUP_COMMITTED

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        if self._journal is None or self._replaying:
            return method(self, *args, **kwargs)
        with self.lock:
            outer = self._depth == 0
            if outer:
                bound = signature.bind(self, *args, **kwargs)
                payload = {k: v for k, v in bound.arguments.items() if k != "self"}
                op = (f"store.{method.__name__}", encode(payload))
                self._applying = False
            self._depth += 1
            try:
                result = method(self, *args, **kwargs)
            except BaseException:
                if outer and self._applying and self._batch is None:
                    self._replay()  # began to apply: back to what is on disk
                raise
            finally:
                self._depth -= 1
                if outer:
                    self._applying = False
            if outer:
                if self._batch is not None:
                    self._batch.append(op)  # written with the rest of the transaction
                elif deferred:
                    self._defer(op[1])  # group commit (see MemoryStore.flush)
                else:
                    self._write_journal([op], method.__name__)
            return result

    return wrapper


class MemoryStore:
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

    Examples
    --------
    >>> from memlab import Memory
    >>> store = MemoryStore()
    >>> a = Memory(store=store, workspace_id="ws-a"); b = Memory(store=store, workspace_id="ws-b")
    >>> _ = a.add("the deploy runs on fridays")
    >>> store.workspace_ids(), len(b.search("deploy"))
    (['ws-a', 'ws-b'], 0)
    """

    def __init__(self, memory_types: Iterable[str] = (), *, analyzer: str = "porter",
                 path: str | Path | None = None,
                 reinforce_batch: int = REINFORCE_BATCH,
                 compact_after: int | None = COMPACT_AFTER) -> None:
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
        self.reinforce_batch = reinforce_batch
        self.compact_after = compact_after  # journal rows after the snapshot that trigger one
        self._tail_rows = 0  # store rows after the latest snapshot (what a reopen replays)
        self._compact_lock = threading.Lock()  # one compaction at a time
        self._compactor: threading.Thread | None = None  # the background compaction, if any
        self._closing = False
        self._foreign_writer = False  # a compaction met another process's rows (see compact)
        self.last_compaction_error: BaseException | None = None  # of a background compaction
        self._pending: list[str] = []  # encoded record_retrieval calls not yet on disk
        self.analyzer = analyzer
        self.lock = RWLock()  # exclusive for writes, .shared() for reads
        self.memory_types = frozenset(MEMORY_TYPES | set(memory_types))
        self._reset_state()
        self._depth = 0  # nesting of journaled calls (only the outermost is written)
        self._applying = False  # the outermost journaled write has begun to change state
        self._batch: list[tuple[str, str]] | None = None  # ops of an open transaction()
        self._replaying = False
        self.path = None if path is None else Path(path)
        self._journal = None if path is None else Journal(
            path, classes=_CLASSES, known_ops=JOURNALED_OPS)
        if self._journal is not None:
            self._replay()

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

    # ------------------------------------------------------------ durability
    def _replay(self) -> None:
        """Rebuild the in-memory state from the journal (see :mod:`memlab.persist`), then
        re-apply the buffered reinforcements (see :meth:`flush`): they were acknowledged reads,
        so a failed write that rebuilds the store keeps them (still buffered)."""
        with self.lock:
            self._reset_state()
            pending, self._pending = self._pending, []
            self._replaying = True
            try:
                # snapshot and rows read at one moment of the file (another process may be
                # writing or compacting it)
                info, parts, rows = self._journal.load(prefix="store.")
                if info is not None:  # the state of rows 1..upto, then only the rows after it
                    self.load_snapshot(info, parts)
                del parts
                tail = 0
                for seq, op, payload in rows:
                    self._apply(seq, op, payload)
                    tail += 1
                self._tail_rows = tail
                self._foreign_writer = False  # every row of the file is applied now
                for payload in pending:
                    try:  # deterministic and applied once already, so this does not fail
                        self._apply(0, "store.record_retrieval", payload)
                    except JournalCorruptError:
                        break
                    self._pending.append(payload)
            finally:
                self._replaying = False

    def _apply(self, seq: int, op: str, payload: str, path: Any = None) -> None:
        """Apply journal row ``seq`` (the message of a failure names the row, not its data).

        Item and edge numbers are checked first: the journaled methods trust them (they were
        validated when first written), so a damaged row must not reach them."""
        path = self._journal.path if path is None else path
        name = op.removeprefix("store.")
        if name not in JOURNALED_OPS:
            raise JournalCorruptError(path, seq, "an unknown operation")
        try:
            args = decode(payload, _CLASSES)
        except ValueError as exc:
            raise JournalCorruptError(path, seq, f"{op} has a malformed payload: {exc}") from None
        problem = self._row_problem(name, args)
        if problem:
            raise JournalCorruptError(path, seq, f"{op} {problem}")
        try:
            getattr(self, name)(**args)
        except Exception as exc:  # noqa: BLE001 - whatever it is, the row cannot be applied
            raise JournalCorruptError(path, seq, f"{op} cannot be applied "
                                      f"({type(exc).__name__})") from None

    def _row_problem(self, name: str, args: dict) -> str | None:
        """Why a journal row's item or edge numbers cannot be applied to this store, or None."""
        if name == "record_retrievals":
            calls = args.get("calls")
            if not isinstance(calls, list) or not calls or not all(
                    isinstance(c, dict) for c in calls):
                return "holds no calls"
            for call in calls:
                problem = self._row_problem("record_retrieval", call)
                if problem:
                    return problem
            return None
        workspace_id = args.get("workspace_id")
        if not isinstance(workspace_id, str):
            return "names no workspace"
        ws = self._workspaces.get(workspace_id)
        items = len(ws) if ws is not None else 0
        for key in ("idx", "src", "dst"):
            if key in args and not _numbers_below(args[key], items):
                return "names an item that does not exist"
        if name == "add_edges":
            edges = args.get("edges")
            if not isinstance(edges, list) or not all(
                    isinstance(e, list) and len(e) == 4 and _numbers_below(e[:2], items)
                    for e in edges):
                return "names an item that does not exist"
        if name == "remove_edges":
            rows = len(ws.graph.table.weight.view()) if ws is not None else 0
            if not _numbers_below(args.get("rows"), rows):
                return "names an edge that does not exist"
        return None

    def _write_journal(self, ops: list[tuple[str, str]], what: str,
                       reinforcement: str | None = None) -> None:
        """Append ``ops`` in one transaction, after the buffered reinforcements (and
        ``reinforcement``, the one being made) as one ``store.record_retrievals`` row."""
        calls = self._pending + ([] if reinforcement is None else [reinforcement])
        if calls:
            ops = [("store.record_retrievals", '{"calls": [' + ", ".join(calls) + "]}")] + ops
        try:
            self._journal.append_many(ops)
            self._pending = []
        except Exception as exc:
            self._replay()  # back to what is on disk: a failed write changes nothing
            raise PersistenceError(f"{what} could not be written to {self._journal.path}: "
                                   f"{exc}") from exc
        self._tail_rows += len(ops)
        if self.compact_after is not None and self._tail_rows >= self.compact_after \
                and not self._foreign_writer:
            self._start_compaction()

    def _start_compaction(self) -> None:
        """Compact in a background thread (one at a time; not once :meth:`close` began)."""
        if self._closing or (self._compactor is not None and self._compactor.is_alive()):
            return

        def run() -> None:
            try:
                self.compact()
            except Exception as exc:  # noqa: BLE001 - kept for the caller; the journal is intact
                self.last_compaction_error = exc

        self._compactor = threading.Thread(target=run, name="memlab-compact", daemon=True)
        self._compactor.start()

    def load_snapshot(self, info, parts: list[bytes]) -> None:
        """Replace this store's state with a snapshot's (:func:`memlab.snapshot.restore`, with
        this module's workspace and pin-session classes): checked in full first, so a damaged
        snapshot raises :class:`~memlab.persist.JournalCorruptError` and changes nothing."""
        restore(self, info, parts, workspace_cls=Workspace, pin_session_cls=_PinSession)

    def compact(self):
        """Write a snapshot of the whole store into its file and drop the journal rows it
        covers, so that a reopen loads the snapshot and replays only the rows after it.

        Buffered reinforcements are written first (see :meth:`flush`). The state is captured
        under the store's lock (writes wait meanwhile; a 1M-item store takes seconds), then
        written in one SQLite transaction together with deleting the covered rows: a crash at
        any moment leaves either the old file or the compacted one, never a partial snapshot.
        A durable store also compacts by itself, in a background thread, once
        ``compact_after`` rows (default :data:`COMPACT_AFTER`) follow its latest snapshot;
        ``compact_after=None`` turns that off. See :mod:`memlab.snapshot` for what a snapshot
        holds.

        Returns
        -------
        memlab.snapshot.CompactionReport
            The rows covered and removed, and the snapshot's size.

        Raises
        ------
        ValueError
            The store is not durable (no ``path``), or the call is inside :meth:`transaction`.
        PersistenceError
            The snapshot could not be written (the file is unchanged).
        memlab.persist.ConcurrentWriterError
            (a PersistenceError) Another process wrote rows into the file that this store never
            applied, among the rows the snapshot would cover, or compacted rows this store never
            applied: nothing is written (a snapshot of this store would lose those rows). Reopen the
            store and compact again. Rows another process wrote *after* this store's last one
            are no obstacle: the snapshot covers only the rows this store applied, and those
            rows stay. After this error the store no longer compacts by itself.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "m.db"
        >>> store = MemoryStore(path=path)
        >>> _ = store.add_items("ws", [store.prepare_item("deploy on fridays")],
        ...                     datetime(2024, 1, 1))
        >>> report = store.compact(); (report.upto, report.rows_removed)
        (1, 1)
        >>> store.close(); len(MemoryStore(path=path).workspace("ws"))
        1
        """

        if self._journal is None:
            raise ValueError("compact needs a durable store (MemoryStore(path=...)); this one "
                             "is in memory")
        with self.lock:
            if self._batch is not None:
                raise ValueError("compact cannot run inside MemoryStore.transaction()")
            self.flush()
            # the rows this store applied, not the file's last row: another process may have
            # written rows since (they stay; see Journal.write_snapshot)
            upto, tail = self._journal.applied_upto(), self._tail_rows
            if tail == 0:
                return CompactionReport(0, 0, 0)
            header, parts = capture(self)
        # written outside the store's lock (reads and writes go on); the store's lock is never
        # taken while _compact_lock is held, so the two cannot deadlock. Of two compactions the
        # one covering fewer rows writes nothing (Journal.write_snapshot).
        with self._compact_lock:
            try:
                removed = self._journal.write_snapshot(upto, header, parts)
            except ConcurrentWriterError:
                self._foreign_writer = True  # no more automatic attempts: reopen to compact
                raise
            except Exception as exc:
                raise PersistenceError(f"compaction could not be written to "
                                       f"{self._journal.path}: {exc}") from exc
        if removed is None:
            return CompactionReport(0, 0, 0)
        with self.lock:
            self._tail_rows = max(0, self._tail_rows - tail)
        return CompactionReport(upto, removed, sum(len(p) for p in parts))

    @contextlib.contextmanager
    def transaction(self):
        """Group several writes so that they reach the disk together or not at all.

        In memory they apply one by one as usual; the journal receives them in one SQLite
        transaction when the block ends (nothing if it raises, and the store is rebuilt from
        disk, so a failed group changes nothing)."""
        with self.lock:
            if self._journal is None or self._batch is not None or self._replaying:
                yield
                return
            self._batch = []
            try:
                yield
            except BaseException:
                self._batch = None
                self._replay()
                raise
            ops, self._batch = self._batch, None
            if ops:
                self._write_journal(ops, "transaction")

    def _defer(self, payload: str) -> None:
        """Buffer one reinforcement (an encoded :meth:`record_retrieval` call); write the
        buffer when it holds :attr:`reinforce_batch` of them."""
        if len(self._pending) + 1 >= self.reinforce_batch:
            self._write_journal([], "record_retrieval", payload)  # on failure, not buffered
        else:
            self._pending.append(payload)

    def flush(self) -> None:
        """Write the buffered activation reinforcements to disk now (one row, one fsync).

        Reads (:meth:`~memlab.memory.Memory.search`, :meth:`~memlab.memory.Memory.get`, topic
        queries) reinforce activation through :meth:`record_retrieval`; on a durable store these
        writes are group-committed: buffered in memory and written as one journal row when
        :attr:`reinforce_batch` of them are buffered, before the next other write (in its
        transaction, ahead of it), and on :meth:`flush`, :meth:`compact` and :meth:`close`.
        A crash therefore loses at most the last ``reinforce_batch - 1`` reinforcements, never a
        write that returned. ``reinforce_batch=1`` journals each one as it happens.
        """
        with self.lock:
            if self._journal is not None and self._pending and self._batch is None:
                self._write_journal([], "record_retrieval")

    def close(self) -> None:
        """Write buffered reinforcements (see :meth:`flush`) and close the database file (an
        in-memory store has nothing to close)."""
        if self._journal is not None:
            try:
                self.flush()
            finally:
                self._closing = True  # no new background compaction; wait for a running one
                if self._compactor is not None:
                    self._compactor.join()
                self._journal.close()

    @property
    def journal(self) -> Journal | None:
        """The SQLite journal when the store is durable, else None."""
        return self._journal

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

    # ------------------------------------------------------------ items
    def prepare_item(self, content: Any, memory_type: Any = "semantic", metadata: Any = None,
                     item_id: Any = None, created_at: Any = None) -> NewItem:
        """Validate one item's arguments (raises ValueError naming the argument)."""
        validate_text(content, "content")
        if memory_type not in self.memory_types:
            raise ValueError(f"memory_type must be one of {sorted(self.memory_types)}, "
                             f"got {memory_type!r}")
        if item_id is not None:
            validate_id(item_id, "item_id")
        if created_at is not None:
            created_at = as_utc(created_at, name="created_at")
        return NewItem(item_id, content, memory_type, validate_metadata(metadata), created_at)

    @journaled
    def add_items(self, workspace_id: str, new_items: Sequence[NewItem], now: datetime,
                  initial_activation: float = 0.5,
                  added_at: Sequence[datetime] | None = None) -> list[str]:
        """Write validated items all-or-nothing; returns their ids in order.

        ``added_at`` (one UTC datetime per item, default ``now`` for all) is when each item was
        added: its ``created_at`` unless given and its history's ``created`` event, so a replay
        writes adds made at different times in one call, as the separate calls would have.

        Everything that can fail (duplicate ids, text analysis for every index, titles, node
        keys, timestamps) is computed first; only then does the store change.
        """
        with self.lock, paused_gc(len(new_items)):
            ws = self._target(workspace_id)
            taken: set[str] = set()
            for pos, new in enumerate(new_items):
                if new.item_id is not None:
                    if new.item_id in ws.index_of or new.item_id in taken:
                        raise DuplicateItemError(f"item_id {new.item_id!r} already exists in "
                                                 f"workspace {workspace_id!r} (item {pos})")
                    taken.add(new.item_id)
            ids, next_generated = ws.generate_ids(new_items, taken)
            stamps = [now] * len(new_items) if added_at is None else list(added_at)
            if len(stamps) != len(new_items):
                raise ValueError(f"added_at must hold one time per item ({len(new_items)}), "
                                 f"got {len(stamps)}")
            iso = {t: t.isoformat() for t in set(stamps)}
            first = len(ws.items)
            new_objects: list[MemoryItem] = []
            created, token_lists, tokens, eligible, procedural, longterm = [], [], [], [], [], []
            titles: list[tuple[list[str], int]] = []  # (gazetteer phrases, item number)
            node_keys: list[tuple[tuple[str, str], int]] = []
            texts = [index_text(new.content, new.metadata) for new in new_items]  # every index
            for offset, (item_id, new, stamp) in enumerate(zip(ids, new_items, stamps)):
                created_at = new.created_at or stamp
                new_objects.append(MemoryItem(
                    item_id, new.content, new.memory_type, new.metadata, workspace_id,
                    created_at, created_at,
                    history=[{"ts": iso[stamp], "kind": "created",
                              "detail": {"memory_type": new.memory_type}}]))
                node_key = None
                if new.metadata:
                    for key in TITLE_KEYS:
                        title = new.metadata.get(key)
                        if isinstance(title, str):
                            titles.append((ws.gazetteer.phrases(title), first + offset))
                    node_key = node_key_of(new.metadata)
                    if node_key is not None:
                        node_keys.append((node_key, first + offset))
                longterm.append(node_key is not None)
                created.append(created_at.timestamp())
                token_lists.append(ws.analyze(texts[offset]))
                tokens.append(estimate_tokens(new.content))
                eligible.append(new.memory_type != "anchor")
                procedural.append(new.memory_type == "procedural")
            other_lists = {name: [ANALYZERS[name](text) for text in texts]
                           for name in ws.other_bm25}
            created_arr = np.asarray(created, dtype=np.float64)
            # ---- computed: from here on the store changes
            self._mutating()
            self._register(ws)
            ws._next_generated = next_generated
            ws.item_ids.extend(ids)
            ws.items.extend(new_objects)
            ws.index_of.update(zip(ids, range(first, first + len(ids))))
            for phrases, i in titles:
                ws.gazetteer.add_phrases(phrases, i)
            for node_key, i in node_keys:
                ws.node_index.setdefault(node_key, i)
            if len(new_items) == 1:
                ws.bm25.add(token_lists[0])
            else:
                ws.bm25.add_many(token_lists)
            for name, index in ws.other_bm25.items():
                index.add_many(other_lists[name])
            ws.created_ts.extend(created)
            ws.updated_ts.extend(created)
            ws.tokens.extend(tokens)
            ws.eligible.extend(eligible)
            ws.procedural.extend(procedural)
            ws.longterm.extend(longterm)
            ws.activation.add(created_arr, initial_activation)
            ws.version += 1
            return ids

    @journaled
    def record_retrieval(self, workspace_id: str, idx: Sequence[int], now: datetime, *,
                         increment: float, half_life_h: float, kind: str) -> None:
        """Reinforce activation of explicitly retrieved items and append a history event."""
        with self.lock:
            ws = self.workspace(workspace_id)
            if not len(idx):
                return
            rows = ws.check_rows(idx)
            now_ts, event_ts = now.timestamp(), now.isoformat()
            self._mutating()
            ws.activation.reinforce(rows, now_ts, increment=increment, half_life_h=half_life_h)
            ws.recency_order.touch(rows)
            for i in rows.tolist():
                ws.items[i].record({"ts": event_ts, "kind": "reinforced", "detail": {"via": kind}})
            ws.version += 1

    @journaled
    def record_retrievals(self, calls: Sequence[dict[str, Any]]) -> None:
        """Apply several :meth:`record_retrieval` calls (keyword-argument dicts) in order; the
        journal row a group commit writes (see :meth:`flush`)."""
        with self.lock:
            for call in calls:
                self.record_retrieval(**call)

    @journaled
    def update_item(self, workspace_id: str, idx: int, now: datetime, *,
                    content: str | None = None, metadata: dict | None = None,
                    kind: str = "updated", detail: dict | None = None) -> None:
        """Change an item's content and/or metadata in place (validated input only).

        The BM25 index re-indexes only the item's old and new terms; the item keeps its number.
        Every index's terms, titles and node keys are computed before anything changes.
        """
        with self.lock:
            ws = self.workspace(workspace_id)
            (idx,) = ws.check_rows([idx]).tolist()
            item = ws.items[idx]
            new_content = item.content if content is None else content
            new_metadata = item.metadata if metadata is None else metadata
            if item.memory_type == "topic" and metadata is not None:
                # a topic is named by its metadata title (memlab.topics): keep one, or every
                # later read of the topic would fail
                validate_text(metadata.get("title"), "metadata['title'] of a topic")
            old_text = index_text(item.content, item.metadata)
            new_text = index_text(new_content, new_metadata)
            content_changed = new_content != item.content
            new_tokens = estimate_tokens(new_content) if content_changed else None
            old_key, new_key = node_key_of(item.metadata), node_key_of(new_metadata)
            titles_out = [ws.gazetteer.phrases(item.metadata[key]) for key in TITLE_KEYS
                          if isinstance(item.metadata.get(key), str)] if metadata is not None else []
            titles_in = [ws.gazetteer.phrases(new_metadata[key]) for key in TITLE_KEYS
                         if isinstance(new_metadata.get(key), str)] if metadata is not None else []
            reindex = []
            if new_text != old_text:
                reindex.append((ws.bm25, ws.analyze(old_text), ws.analyze(new_text)))
                for name, index in ws.other_bm25.items():
                    analyze = ANALYZERS[name]
                    reindex.append((index, analyze(old_text), analyze(new_text)))
            now_ts = now.timestamp()
            event = {"ts": now.isoformat(), "kind": kind, "detail": detail or {}}
            # ---- computed: from here on the store changes
            self._mutating()
            if content_changed:
                ws.tokens.data[idx] = new_tokens
                item.content = new_content
                ws.content_changes.append(idx)
            if metadata is not None:
                if old_key != new_key:
                    if old_key is not None and ws.node_index.get(old_key) == idx:
                        del ws.node_index[old_key]
                    if new_key is not None:
                        ws.node_index.setdefault(new_key, idx)
                    ws.longterm.data[idx] = new_key is not None
                for phrases in titles_out:
                    ws.gazetteer.remove_phrases(phrases, idx)
                for phrases in titles_in:
                    ws.gazetteer.add_phrases(phrases, idx)
                item.metadata = metadata
            for index, old_terms, new_terms in reindex:
                index.replace(idx, old_terms, new_terms)
            item.updated_at = now
            ws.updated_ts.data[idx] = now_ts
            ws.recency_order.touch((idx,))
            item.record(event)
            ws.version += 1

    @journaled
    def record_event(self, workspace_id: str, idx: int, now: datetime, kind: str,
                     detail: dict | None = None) -> None:
        """Append a history event to one item."""
        with self.lock:
            ws = self.workspace(workspace_id)
            (idx,) = ws.check_rows([idx]).tolist()
            event = {"ts": now.isoformat(), "kind": kind, "detail": detail or {}}
            self._mutating()
            ws.items[idx].record(event)
            ws.version += 1

    @journaled
    def set_salience(self, workspace_id: str, idx: Sequence[int], values: Sequence[float]) -> None:
        """Set items' salience (clamped to [0, 10])."""
        with self.lock:
            ws = self.workspace(workspace_id)
            rows = ws.check_rows(idx).tolist()
            # rounded so that repeated +0.1 bumps read as 1.1, 1.2, … not 1.2000000000000002
            clamped = [round(min(10.0, max(0.0, float(value))), 12) for value in values]
            self._mutating()
            for i, value in zip(rows, clamped):
                ws.items[i].salience = value
            ws.version += 1

    @journaled
    def archive(self, workspace_id: str, idx: Sequence[int], now: datetime, reason: str,
                detail: dict | None = None) -> None:
        """Archive items: kept with their history, never surfaced again (nothing is deleted)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            rows = [i for i in ws.check_rows(idx).tolist() if not ws.items[i].archived]
            keys = [node_key_of(ws.items[i].metadata) for i in rows]
            event_ts, full_detail = now.isoformat(), {"reason": reason, **(detail or {})}
            self._mutating()
            for i, key in zip(rows, keys):
                item = ws.items[i]
                if item.archived:  # listed twice
                    continue
                item.archived = True
                ws.eligible.data[i] = False
                ws.recency_order.touch((i,))
                if key is not None and ws.node_index.get(key) == i:
                    del ws.node_index[key]
                item.record({"ts": event_ts, "kind": "archived", "detail": dict(full_detail)})
            ws.version += 1

    @journaled
    def set_topic_fields(self, workspace_id: str, idx: int, fields: dict[str, dict]) -> None:
        """Replace a topic's versioned fields (a JSON-able copy is stored)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            (idx,) = ws.check_rows([idx]).tolist()
            copied = json.loads(json.dumps(fields))
            self._mutating()
            ws.topic_fields[idx] = copied
            ws.version += 1

    @journaled
    def set_stored_activation(self, workspace_id: str, idx: Sequence[int],
                              values: Sequence[float]) -> None:
        """Overwrite items' stored activation (capacity inhibition)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            rows = ws.check_rows(idx).tolist()
            floats = [float(v) for v in values]
            self._mutating()
            for i, v in zip(rows, floats):
                ws.activation.stored.data[i] = v
            ws.version += 1

    @journaled
    def set_last_decay(self, workspace_id: str, ts: float) -> None:
        """Record when the maintenance decay sweep last ran."""
        with self.lock:
            ws = self.workspace(workspace_id)
            ts = float(ts)
            self._mutating()
            ws.last_decay_ts = ts

    # ------------------------------------------------------------ edges
    def prepare_edge(self, workspace_id: str, src: Any, dst: Any, edge_type: Any = "RELATED",
                     weight: Any = 1.0) -> tuple[int, int, str, float]:
        ws = self.workspace(workspace_id)
        s = ws.require(src, "src")
        d = ws.require(dst, "dst")
        if s == d:
            raise ValueError(f"dst must differ from src (self-loops are not stored), got {dst!r}")
        return s, d, validate_edge_type(edge_type), validate_weight(weight, "weight",
                                                                    allow_zero=False)

    def prepare_edge_columns(self, workspace_id: str, src: Sequence[Any], dst: Sequence[Any],
                             edge_types: Sequence[Any] | str = "RELATED",
                             weights: np.ndarray | None = None
                             ) -> tuple[np.ndarray, np.ndarray, Sequence[str] | str, np.ndarray]:
        """:meth:`prepare_edge` for columns of edges (the bulk path), checked column by column.

        Returns ``(src rows, dst rows, edge types, weights)`` for :meth:`add_edge_arrays`. The
        first row that fails is re-checked by :meth:`prepare_edge`, whose error is raised with
        ``edges row <n>: `` in front, so both paths say the same thing.
        """
        ws = self.workspace(workspace_id)
        n = len(src)
        bad = np.zeros(n, dtype=bool)
        ends = []
        for values in (list(src), list(dst)):
            idx = [ws.index_of.get(v) if v.__class__ is str else None for v in values]
            missing = np.fromiter((i is None for i in idx), bool, n)
            bad |= missing
            ends.append(np.array([-1 if i is None else i for i in idx], dtype=np.int64))
        bad |= ends[0] == ends[1]  # self-loops
        if not isinstance(edge_types, str):
            edge_types = list(edge_types)
            valid: set[str] = set()
            for row, t in enumerate(edge_types):
                if t.__class__ is not str or t not in valid:
                    try:
                        validate_edge_type(t)
                        valid.add(t)
                    except ValueError:
                        bad[row] = True
        raw = None if weights is None else np.asarray(weights)
        if raw is None:
            weights = np.ones(n)
        else:
            numeric = raw.dtype.kind in "iuf"
            weights = raw.astype(np.float64) if numeric else np.full(n, np.nan)
            for row in np.flatnonzero(~np.isfinite(weights) | (weights <= 0)).tolist():
                try:  # object columns: entry by entry
                    weights[row] = validate_weight(raw[row], "weight", allow_zero=False)
                except ValueError:
                    bad[row] = True
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            edge_type = edge_types if isinstance(edge_types, str) else edge_types[row]
            try:
                self.prepare_edge(workspace_id, list(src)[row], list(dst)[row], edge_type,
                                  1.0 if raw is None else raw[row])
            except ValueError as exc:
                raise type(exc)(f"edges row {row}: {exc}") from None
            raise AssertionError(f"edges row {row} failed a column check only")  # pragma: no cover
        return ends[0], ends[1], edge_types, weights

    @journaled
    def add_edges(self, workspace_id: str, edges: Sequence[tuple[int, int, str, float]],
                  now: datetime | None = None) -> None:
        """Write prepared edges (an existing ``(src, dst, type)`` edge gets the new weight)."""
        if not edges:
            return
        src, dst, types, weights = zip(*edges)
        self.add_edge_arrays(workspace_id, np.array(src, np.int64), np.array(dst, np.int64),
                             list(types), np.array(weights, np.float64), now)

    @journaled
    def add_edge_arrays(self, workspace_id: str, src: np.ndarray, dst: np.ndarray,
                        edge_types: Sequence[str] | str, weights: np.ndarray,
                        now: datetime | None = None) -> None:
        """Write validated edges given as item numbers (the bulk path)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            if not len(src):
                return
            src, dst = ws.check_rows(src), ws.check_rows(dst)
            weights = np.asarray(weights, dtype=np.float64)
            if not (len(src) == len(dst) == len(weights)) or (
                    not isinstance(edge_types, str) and len(edge_types) != len(src)):
                raise ValueError("src, dst, edge_types and weights must have one entry per edge")
            if not np.all(np.isfinite(weights) & (weights > 0)):
                raise ValueError("weights must be finite and > 0")
            for edge_type in ({edge_types} if isinstance(edge_types, str) else set(edge_types)):
                validate_edge_type(edge_type)
            ts = float("nan") if now is None else now.timestamp()
            self._mutating()
            ws.graph.write(src, dst, edge_types, weights, ts)
            ws.version += 1

    @journaled
    def remove_edges(self, workspace_id: str, rows: Sequence[int]) -> int:
        """Remove edge rows (see :meth:`EdgeTable.remove`); returns how many were live."""
        with self.lock:
            ws = self.workspace(workspace_id)
            rows = np.asarray(rows, dtype=np.int64)
            weight = ws.graph.table.weight.view()
            if len(rows) and (rows.min() < 0 or rows.max() >= len(weight)):
                raise ValueError(f"rows must be edge rows in 0..{len(weight) - 1}")
            live = rows[weight[rows] > 0] if len(rows) else rows
            if len(live):
                self._mutating()
                ws.graph.remove(live)
                ws.version += 1
            return len(live)

    def _edge_rows(self, ws: Workspace, only: int | None = None) -> list[list]:
        table = ws.graph.table
        rows = np.flatnonzero(table.alive())
        src, dst = table.src.view(), table.dst.view()
        if only is not None:
            rows = rows[(src[rows] == only) | (dst[rows] == only)]
        ids, names = ws.item_ids, table.type_names
        return [[ids[s], ids[d], names[c], w] for s, d, c, w in
                zip(src[rows].tolist(), dst[rows].tolist(), table.code.view()[rows].tolist(),
                    table.weight.view()[rows].tolist())]

    def edge_list(self, workspace_id: str, item_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock.shared():
            ws = self.workspace(workspace_id)
            only = None if item_id is None else ws.require(item_id)
            return [{"src": s, "dst": d, "edge_type": t, "weight": w}
                    for s, d, t, w in self._edge_rows(ws, only)]

    # ------------------------------------------------------------ pins
    def _live_pin_session(self, session_id: str, now_ts: float, *, write: bool = False
                          ) -> _PinSession | None:
        """The session's pin state unless expired (the TTL also releases the workspace binding).

        Only a (journaled) pin write drops an expired session; a read leaves the state alone,
        so reads never change what :meth:`serialize` shows or what a reopen restores.
        """
        state = self._pins.get(session_id)
        if state is not None and now_ts >= state.expires_ts:
            if write:
                del self._pins[session_id]
            return None
        return state

    @journaled
    def pin(self, workspace_id: str, session_id: Any, item_id: Any, weight: Any, now: datetime,
            ttl_h: float) -> None:
        with self.lock:
            validate_id(session_id, "session_id")
            self.workspace(workspace_id).require(item_id)
            weight = validate_weight(weight, "weight")
            now_ts = now.timestamp()
            expires_ts = now_ts + float(ttl_h) * 3600.0
            state = self._live_pin_session(session_id, now_ts)
            if state is not None and state.workspace_id != workspace_id:
                raise SessionPinWorkspaceConflict(
                    f"session_id {session_id!r} is bound to workspace {state.workspace_id!r}; "
                    f"cannot pin from workspace {workspace_id!r}")
            self._mutating()
            state = self._live_pin_session(session_id, now_ts, write=True)  # drops an expired one
            if state is None:
                state = self._pins[session_id] = _PinSession(workspace_id)
            state.pins[item_id] = weight
            state.expires_ts = expires_ts

    @journaled
    def unpin(self, workspace_id: str, session_id: Any, item_id: Any, now: datetime,
              ttl_h: float) -> None:
        with self.lock:
            validate_id(session_id, "session_id")
            validate_id(item_id, "item_id")
            now_ts = now.timestamp()
            expires_ts = now_ts + float(ttl_h) * 3600.0
            self._mutating()
            state = self._live_pin_session(session_id, now_ts, write=True)
            if state is None or state.workspace_id != workspace_id or item_id not in state.pins:
                return
            del state.pins[item_id]
            state.expires_ts = expires_ts

    def pins(self, workspace_id: str, session_id: Any, now: datetime) -> dict[str, float]:
        """The live pins of ``session_id`` as seen from ``workspace_id`` ({} across workspaces)."""
        with self.lock.shared():
            validate_id(session_id, "session_id")
            state = self._live_pin_session(session_id, now.timestamp())
            if state is None or state.workspace_id != workspace_id:
                return {}
            return dict(state.pins)

    # ------------------------------------------------------------ anchors
    @journaled
    def add_anchor(self, workspace_id: str, session_id: Any, new_item: NewItem,
                   now: datetime, initial_activation: float = 0.5) -> str:
        with self.lock:
            validate_id(session_id, "session_id")
            # add_items is all-or-nothing and the append after it cannot fail
            (item_id,) = self.add_items(workspace_id, [new_item], now, initial_activation)
            ws = self.workspace(workspace_id)
            self._anchors.setdefault((workspace_id, session_id), []).append(ws.index_of[item_id])
            return item_id

    def anchors(self, workspace_id: str, session_id: str) -> list[int]:
        with self.lock.shared():
            return list(self._anchors.get((workspace_id, session_id), ()))

    @journaled
    def flag_anchor(self, workspace_id: str, session_id: Any, anchor_id: Any, reason: Any) -> None:
        with self.lock:
            validate_id(session_id, "session_id")
            idx = self.workspace(workspace_id).require(anchor_id, "anchor_id")
            if idx not in self._anchors.get((workspace_id, session_id), ()):
                raise UnknownItemError(f"anchor_id {anchor_id!r} is not an anchor of session "
                                       f"{session_id!r}")
            validate_text(reason, "reason")
            self._mutating()
            self._anchor_reviews.setdefault((workspace_id, session_id), {})[anchor_id] = reason

    @journaled
    def clear_anchor_flag(self, workspace_id: str, session_id: str, anchor_id: str) -> None:
        with self.lock:
            self._mutating()
            self._anchor_reviews.get((workspace_id, session_id), {}).pop(anchor_id, None)

    def drift_warnings(self, workspace_id: str, session_id: str) -> list[dict[str, Any]]:
        """The session's anchors marked for review: ``[{anchor_id, anchor_type, reason}]``."""
        with self.lock.shared():
            ws = self.workspace(workspace_id)
            reviews = self._anchor_reviews.get((workspace_id, session_id), {})
            return [{"anchor_id": a,
                     "anchor_type": ws.items[ws.index_of[a]].metadata.get("anchor_type"),
                     "reason": reason} for a, reason in sorted(reviews.items())]
