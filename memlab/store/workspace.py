"""The store's columns: :class:`Workspace` (one workspace's items as columns, its indexes and
edges, and the read interface the layers above use) and :class:`NewItem` (a validated item
waiting to be written)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import numpy as np

from memlab._arrays import Growable
from memlab._columns import ItemColumns, ItemView
from memlab.errors import UnknownItemError
from memlab.graph.csr import EdgeTable, GraphSnapshot, GraphView
from memlab.model import MemoryItem, validate_id
from memlab.signals.activation import ActivationState
from memlab.signals.bm25 import BM25Index
from memlab.signals.time_index import CreatedOrder, RecencyOrder
from memlab.text import ANALYZERS, Gazetteer, normalise_title

__all__ = ["NewItem", "Workspace", "index_text", "node_key_of"]


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


@dataclass(frozen=True, slots=True)
class NewItem:
    """A validated item waiting to be written."""

    item_id: str | None
    content: str
    memory_type: str
    metadata: dict
    created_at: datetime | None


class Workspace:
    """One workspace's items as columns (numbered 0, 1, … in order of addition), index and edges.

    The fields belong to the store (:mod:`memlab.store`), which writes them. Every layer above
    reads a workspace only through its public methods and properties, the read interface
    (columns come as read-only numpy views), so the store may change how it keeps them;
    ``tests/test_issue15_workspace_interface.py`` enforces that.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> _ = mem.add("deploys run on fridays", item_id="a")
    >>> ws = mem.store.workspace("default")
    >>> ws.workspace_id, len(ws), ws.row_of("a"), ws.item(0).content
    ('default', 1, 0, 'deploys run on fridays')
    >>> ws.eligible_mask().tolist(), ws.eligible_mask().flags.writeable
    ([True], False)
    """

    def __init__(self, workspace_id: str, analyzer: str = "porter") -> None:
        self._workspace_id = workspace_id
        self.analyzer = analyzer
        self.analyze = ANALYZERS[analyzer]  # text -> BM25 terms, for items and queries alike
        # the items as columns; a MemoryItem is made on access (ItemColumns.item)
        self.items = ItemColumns(workspace_id)
        self.item_ids: list[str] = self.items.ids  # the same list, for fast lookups
        self.index_of: dict[str, int] = {}
        # the item columns' creation and update times (the same Growable objects)
        self.created_ts, self.updated_ts = self.items.created_ts, self.items.updated_ts
        self.bm25 = BM25Index()  # built with self.analyzer
        self.other_bm25: dict[str, BM25Index] = {}  # other analyzers' indexes (see bm25_for)
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
        # item ids in sort order, as a rank per item number (see id_sort_keys): (item count,
        # ranks) once built, and the items ordered without it since the count last changed
        self._id_rank: tuple[int, np.ndarray] | None = None
        self._id_rank_spent = (0, 0)
        # time orders for O(k) recency and window reads; writes that change an item's recency
        # reference or eligibility call recency_order.touch (adds need nothing)
        self.recency_order = RecencyOrder()
        self.created_order = CreatedOrder()

    def __len__(self) -> int:
        return len(self.items)

    @property
    def workspace_id(self) -> str:
        """The workspace's name (fixed when it is made)."""
        return self._workspace_id

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
            cols = self.items
            index.add_many([analyze(index_text(text, cols.metadata.get(i) or {}))
                            for i, text in enumerate(cols.contents)])
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
        view.setflags(write=False)  # a few times cheaper than flags.writeable = False
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

    def stored_activation(self) -> np.ndarray:
        """Read-only: every item's stored activation (what capacity inhibition scales)."""
        return self._frozen_view(self.activation.stored)

    def item(self, i: int) -> MemoryItem:
        """Item number ``i``, made from the item columns (its metadata and history are the
        stored ones: treat them as read-only; later writes do not change this object)."""
        return self.items.item(i)

    def item_dict(self, i: int) -> dict[str, Any]:
        """Item number ``i`` as :meth:`~memlab.model.MemoryItem.to_dict` gives it, without
        keeping a view (:meth:`item` keeps the last few): safe for a read that runs without
        the store's lock (:meth:`memlab._rwlock.RWLock.optimistic`), which must fill no cache."""
        return ItemView(self.items, i).to_dict()

    def iter_items(self) -> Iterator[MemoryItem]:
        """Every item in item-number order (made on the way, as :meth:`item`)."""
        return iter(self.items)

    def content_of(self, i: int) -> str:
        """Item number ``i``'s content (no ``MemoryItem`` made)."""
        return self.items.contents[i]

    def metadata_of(self, i: int) -> dict:
        """Item number ``i``'s metadata (the stored dict: treat it as read-only)."""
        return self.items.metadata.get(i) or {}

    def id_sort_keys(self, idx: np.ndarray) -> np.ndarray:
        """Integer keys of item numbers ``idx`` that sort as their item ids do (the order of
        ``sorted`` on the ids; equal keys only for the same item), for ordering by id with
        numpy.

        Item ids never change and items are only appended, so one rank per item serves until
        the next add. It is built (a sort of every id) only once the items ordered without
        it since the last add add up to a fifth of the workspace, so a workspace that grows
        between reads pays only for the items it orders, and one read many times pays the
        sort once.

        Examples
        --------
        >>> from memlab import Memory
        >>> mem = Memory()
        >>> _ = mem.add_many([{"item_id": i, "content": i} for i in ["b", "c", "a"]])
        >>> keys = mem.store.workspace("default").id_sort_keys(np.array([0, 1, 2]))
        >>> np.argsort(keys).tolist()  # a, b, c
        [2, 0, 1]
        """
        idx = self.check_rows(idx)
        n = len(self.item_ids)
        built = self._id_rank
        if built is not None and built[0] == n:
            return built[1][idx]
        count, spent = self._id_rank_spent
        spent = (spent if count == n else 0) + len(idx)
        self._id_rank_spent = (n, spent)
        ids = self.item_ids
        if spent * 5 >= n:
            order = sorted(range(n), key=ids.__getitem__)
            rank = np.empty(n, np.int64)
            rank[order] = np.arange(n, dtype=np.int64)
            self._id_rank = (n, rank)  # one assignment: a concurrent reader sees it whole
            return rank[idx]
        rows, back = np.unique(idx, return_inverse=True)
        rows = rows.tolist()
        order = sorted(range(len(rows)), key=lambda j: ids[rows[j]])
        keys = np.empty(len(rows), np.int64)
        keys[order] = np.arange(len(rows), dtype=np.int64)
        return keys[back.reshape(-1)]

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

    def graph_snapshot(self) -> GraphSnapshot:
        """The CSR snapshot of the live edges over every item, as of now."""
        return self.graph.snapshot(len(self.items))

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
        return self.items.archived.view().copy()

    def node_rows(self) -> list[int]:
        """The item numbers of every long-term node, ascending."""
        return sorted(self.node_index.values())

    def is_topic(self, i: int) -> bool:
        """Whether item number ``i`` is a topic (has versioned fields)."""
        return i in self.topic_fields

    def last_decay(self) -> float | None:
        """When the maintenance decay sweep last ran (epoch seconds), None before its first run."""
        return self.last_decay_ts

    def content_changes_since(self, seen: int) -> tuple[list[int], int]:
        """``(items, count)``: the item numbers whose content changed after the first ``seen``
        recorded changes (ascending, each once), and how many changes are recorded now (the
        ``seen`` of the next call). Caches of derived state (dense vectors) use it."""
        changes = self.content_changes
        count = len(changes)
        return sorted(set(changes[seen:count])), count

    def dense_index(self, name: str, build: Callable[[], Any]) -> Any:
        """The dense index of embedder ``name`` (:class:`memlab.signals.dense.DenseIndex`),
        made by ``build()`` on first use and kept with the workspace (derived state: never
        journaled, rebuilt on use after a reopen)."""
        index = self.dense.get(name)
        if index is None:
            # two readers may build it at once: both then use the one stored first
            index = self.dense.setdefault(name, build())
        return index

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
