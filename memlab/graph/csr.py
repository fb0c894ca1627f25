"""A workspace's edges as columns, and the sparse (CSR) view the graph algorithms read.

:class:`EdgeTable` is the source of truth: one row per ``(src, dst, edge_type)`` with its weight,
rows numbered in order of addition. :class:`GraphView` keeps the graph ready for queries as a
*base* (CSR matrices built from the table at one moment) plus a *delta* (a signed log of the
changes written since). A write appends to the delta in O(changes); a query reads base + delta;
once the delta outgrows ``merge_fraction`` of the base, the next query folds it into a new base
(O(edges), vectorised), so the rebuild cost is amortised over many writes, as in an LSM tree.

The delta is linear: a new edge is ``+weight``, a re-weighted edge is ``new - old``, a removed edge
is ``-weight``. Every algorithm reads it the same way: the effective weight of a pair is its base
weight plus its delta entries.

Nodes are the workspace's item numbers. Items added after the base was built simply have no base
edges; adding items never touches the graph.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from memlab._arrays import Growable, group_sum
from memlab.graph._common import LRUCache

__all__ = ["EdgeChanges", "EdgeTable", "GraphView", "PairIndex", "Undirected", "ragged_take"]

_KEY_SHIFT = 32  # (src << 32) | dst identifies a pair; item numbers stay below 2**31


@dataclass(frozen=True)
class EdgeChanges:
    """What one write did to the graph, as signed weight changes (the view's delta entries)."""

    src: np.ndarray
    dst: np.ndarray
    code: np.ndarray
    dweight: np.ndarray
    added: int
    reweighted: int

    def __len__(self) -> int:
        return len(self.src)


class PairIndex:
    """The upsert index of an :class:`EdgeTable`: ``(edge type code, pair key) -> row``, kept as
    columns rather than Python objects.

    Per edge type, a sorted ``int64`` array of pair keys ``(src << 32) | dst`` and the ``int32``
    rows beside them (12 bytes per edge; a dict per type cost ~106), plus a small dict of keys
    added since the last merge (single writes stay O(log n) without moving the arrays). A removed
    edge leaves its key with row ``-1`` (a tombstone) until the next merge; a write of that pair
    reuses the slot. A bulk write (more than :attr:`BULK` edges) is looked up with one
    ``searchsorted`` per type and merged into the arrays at once.

    The index may be handed a ``build`` callable instead of entries (a snapshot load): it is then
    built from the table's columns on first use (a sort per type), not at load.

    Examples
    --------
    >>> index = PairIndex()
    >>> index.add_type()  # edge type code 0
    >>> index.find(0, 7) is None
    True
    >>> index.insert(0, 7, 3); index.find(0, 7)
    3
    """

    __slots__ = ("_build", "_keys", "_lock", "_pending", "_rows")

    BULK = 256  # writes of more edges take the vectorised path
    MIN_MERGE = 4096  # pending entries merged once beyond max(MIN_MERGE, 1/32 of the arrays)

    def __init__(self, build=None) -> None:
        self._keys: list[np.ndarray] = []
        self._rows: list[np.ndarray] = []
        self._pending: list[dict[int, int]] = []
        self._build = build
        self._lock = threading.Lock()

    # -- building
    def _ready(self) -> None:
        if self._build is not None:
            with self._lock:
                if self._build is not None:
                    src, dst, code, weight, n_types = self._build()
                    self._load(src, dst, code, weight, n_types)
                    self._build = None

    def _load(self, src, dst, code, weight, n_types: int) -> None:
        """Index the live rows (weight > 0) of the columns ``src, dst, code, weight``."""
        alive = np.flatnonzero(np.asarray(weight) > 0)
        keys = (np.asarray(src)[alive] << _KEY_SHIFT) | np.asarray(dst)[alive]
        codes = np.asarray(code)[alive]
        self._keys, self._rows, self._pending = [], [], []
        order = np.lexsort((keys, codes))  # by type, then key
        keys, codes, rows = keys[order], codes[order], alive[order].astype(np.int32)
        bounds = np.searchsorted(codes, np.arange(n_types + 1))
        for c in range(n_types):
            a, b = bounds[c], bounds[c + 1]
            self._keys.append(keys[a:b].copy())
            self._rows.append(rows[a:b].copy())
            self._pending.append({})

    def add_type(self) -> None:
        """Make room for the next edge type code."""
        self._ready()
        self._keys.append(np.empty(0, np.int64))
        self._rows.append(np.empty(0, np.int32))
        self._pending.append({})

    def __len__(self) -> int:
        """Live entries (tombstones not counted)."""
        self._ready()
        return sum(int(np.count_nonzero(r >= 0)) + len(p)
                   for r, p in zip(self._rows, self._pending))

    @property
    def nbytes(self) -> int:
        """Bytes of the sorted arrays (the pending dicts not counted)."""
        self._ready()
        return sum(k.nbytes + r.nbytes for k, r in zip(self._keys, self._rows))

    # -- single entries
    def find(self, code: int, key: int) -> int | None:
        """The row of ``key`` under type ``code``, None when absent."""
        self._ready()
        row = self._pending[code].get(key)
        if row is not None:
            return row
        keys = self._keys[code]
        pos = int(keys.searchsorted(key))
        if pos < len(keys) and keys[pos] == key:
            row = int(self._rows[code][pos])
            return row if row >= 0 else None
        return None

    def find_few(self, codes: np.ndarray, keys: np.ndarray) -> tuple[list, list]:
        """For each ``(codes[i], keys[i])``: its row (None when absent) and the position of its
        tombstone in the sorted arrays (-1 when none), with one ``searchsorted`` per type."""
        self._ready()
        rows: list = [None] * len(keys)
        slots = [-1] * len(keys)
        code_list = codes.tolist()
        for code in set(code_list):
            sorted_keys = self._keys[code]
            sel = np.flatnonzero(codes == code) if len(set(code_list)) > 1 else \
                np.arange(len(keys))
            pending = self._pending[code]
            if len(sorted_keys):
                want = keys[sel]
                pos = np.minimum(sorted_keys.searchsorted(want), len(sorted_keys) - 1)
                hit = (sorted_keys[pos] == want).tolist()
                found = self._rows[code][pos].tolist()
                pos = pos.tolist()
            else:
                hit = [False] * len(sel)
            for j, i in enumerate(sel.tolist()):
                row = pending.get(int(keys[i])) if pending else None
                if row is None and hit[j]:
                    if found[j] >= 0:
                        row = found[j]
                    else:
                        slots[i] = pos[j]
                rows[i] = row
        return rows, slots

    def insert(self, code: int, key: int, row: int, slot: int | None = None,
               merge: bool = True) -> None:
        """Index a new ``key`` (absent now) at ``row`` (``slot``: the position of its
        tombstone if :meth:`find_few` found one, -1 if none, None: look it up). ``merge=False``
        leaves the arrays as they are (positions from :meth:`find_few` stay valid) until
        :meth:`settle`."""
        self._ready()
        keys = self._keys[code]
        if slot is None:
            pos = int(keys.searchsorted(key))
            slot = pos if pos < len(keys) and keys[pos] == key else -1
        if slot >= 0:  # a tombstone: reuse its slot
            self._rows[code][slot] = row
            return
        pending = self._pending[code]
        pending[key] = row
        if merge:
            self.settle(code)

    def settle(self, code: int) -> None:
        """Merge type ``code``'s pending entries into its arrays once there are too many."""
        if len(self._pending[code]) > max(self.MIN_MERGE, len(self._keys[code]) >> 5):
            self._merge(code)

    def discard(self, code: int, key: int) -> None:
        """Forget ``key`` (present) under type ``code``."""
        self._ready()
        if self._pending[code].pop(key, None) is not None:
            return
        keys = self._keys[code]
        pos = int(keys.searchsorted(key))
        if pos < len(keys) and keys[pos] == key:
            self._rows[code][pos] = -1

    # -- columns
    def _merge(self, code: int, keys=None, rows=None) -> None:
        """Fold the pending entries (and ``keys``/``rows``, absent from the index) into the
        sorted arrays, dropping tombstones."""
        pending = self._pending[code]
        parts_k, parts_r = [self._keys[code]], [self._rows[code]]
        if pending:
            parts_k.append(np.fromiter(pending.keys(), np.int64, len(pending)))
            parts_r.append(np.fromiter(pending.values(), np.int32, len(pending)))
        if keys is not None:
            parts_k.append(np.asarray(keys, np.int64))
            parts_r.append(np.asarray(rows, np.int32))
        all_k, all_r = np.concatenate(parts_k), np.concatenate(parts_r)
        live = all_r >= 0
        all_k, all_r = all_k[live], all_r[live]
        order = np.argsort(all_k, kind="stable")
        self._keys[code], self._rows[code] = all_k[order], all_r[order]
        self._pending[code] = {}

    def find_many(self, code: int, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(rows, slot)`` for ``keys`` under type ``code``: the row (-1 when absent) and
        whether a tombstone slot holds the key (reused by :meth:`insert_many`)."""
        self._ready()
        if self._pending[code]:
            self._merge(code)
        sorted_keys, sorted_rows = self._keys[code], self._rows[code]
        rows = np.full(len(keys), -1, np.int64)
        slot = np.zeros(len(keys), bool)
        if len(sorted_keys):
            pos = np.minimum(sorted_keys.searchsorted(keys), len(sorted_keys) - 1)
            hit = sorted_keys[pos] == keys
            rows[hit] = sorted_rows[pos[hit]]
            slot = hit & (rows < 0)
        return rows, slot

    def insert_many(self, code: int, keys: np.ndarray, rows: np.ndarray) -> None:
        """Index new distinct ``keys`` (absent now, perhaps tombstoned) at ``rows``."""
        self._ready()
        if not len(keys):
            return
        if self._pending[code]:
            self._merge(code)
        sorted_keys = self._keys[code]
        if len(sorted_keys):
            pos = np.minimum(sorted_keys.searchsorted(keys), len(sorted_keys) - 1)
            hit = sorted_keys[pos] == keys
            self._rows[code][pos[hit]] = rows[hit]
            keys, rows = keys[~hit], rows[~hit]
        if len(keys):
            self._merge(code, keys, rows)

    def discard_many(self, codes: np.ndarray, keys: np.ndarray) -> None:
        """Forget every ``(codes[i], keys[i])`` (each present)."""
        self._ready()
        for code in np.unique(codes).tolist():
            sel = keys[codes == code]
            pending = self._pending[code]
            if pending:
                left = []
                for key in sel.tolist():
                    if pending.pop(key, None) is None:
                        left.append(key)
                sel = np.asarray(left, np.int64)
            sorted_keys = self._keys[code]
            if len(sel) and len(sorted_keys):
                pos = np.minimum(sorted_keys.searchsorted(sel), len(sorted_keys) - 1)
                hit = sorted_keys[pos] == sel
                self._rows[code][pos[hit]] = -1

    def oracle_state(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """What :func:`memlab.snapshot.full_state` compares: :meth:`canonical`."""
        return self.canonical()

    def canonical(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Every live entry as ``(codes, keys, rows)`` sorted by type then key: equal for equal
        contents however the entries are split between arrays, pending dicts and tombstones."""
        self._ready()
        codes, keys, rows = [], [], []
        for c, (k, r, p) in enumerate(zip(self._keys, self._rows, self._pending)):
            live = r >= 0
            kk = np.concatenate([k[live], np.fromiter(p.keys(), np.int64, len(p))])
            rr = np.concatenate([r[live].astype(np.int64),
                                 np.fromiter(p.values(), np.int64, len(p))])
            order = np.argsort(kk, kind="stable")
            keys.append(kk[order])
            rows.append(rr[order])
            codes.append(np.full(len(kk), c, np.int64))
        if not keys:
            return (np.empty(0, np.int64),) * 3
        return np.concatenate(codes), np.concatenate(keys), np.concatenate(rows)


class EdgeTable:
    """Every edge of a workspace: columns ``src``, ``dst``, ``code`` (edge type), ``weight``.

    Edge types are stored as small integer codes (:attr:`type_names` maps them back). Rows are
    never reordered; a row's weight may change. A ``(src, dst, type)`` written twice keeps its
    row and takes the new weight.

    Examples
    --------
    >>> table = EdgeTable()
    >>> changes = table.upsert([0, 1], [1, 2], ["RELATED", "MENTIONS"], [1.0, 0.5])
    >>> changes.added, len(table), table.type_names
    (2, 2, ['MENTIONS', 'RELATED'])
    >>> table.upsert([0], [1], ["RELATED"], [3.0]).dweight.tolist()
    [2.0]
    """

    def __init__(self) -> None:
        self.src = Growable(np.int64, 64)
        self.dst = Growable(np.int64, 64)
        self.code = Growable(np.int32, 64)
        self.weight = Growable(np.float64, 64)
        self.updated_ts = Growable(np.float64, 64)  # last write of each row (NaN: unknown)
        self.type_names: list[str] = []
        self._code_of: dict[str, int] = {}
        # (type, pair) -> row, as sorted key columns per type (PairIndex: 12 bytes per edge)
        self._index = PairIndex()

    def __len__(self) -> int:
        return len(self.src)

    def code_of(self, edge_type: str) -> int | None:
        return self._code_of.get(edge_type)

    def codes_for(self, edge_types: Iterable[str]) -> np.ndarray:
        """The codes of those ``edge_types`` that occur in the table (unknown ones are absent)."""
        return np.array(sorted(self._code_of[t] for t in edge_types if t in self._code_of),
                        dtype=np.int32)

    def row_of(self, src: int, dst: int, edge_type: str) -> int | None:
        code = self._code_of.get(edge_type)
        if code is None:
            return None
        return self._index.find(code, (src << _KEY_SHIFT) | dst)

    def _intern(self, edge_type: str) -> int:
        code = self._code_of.get(edge_type)
        if code is None:
            code = self._code_of[edge_type] = len(self.type_names)
            self.type_names.append(edge_type)
            self._index.add_type()
        return code

    def upsert(self, src, dst, edge_types, weights, ts: float = float("nan")) -> EdgeChanges:
        """Write edges (already validated) at time ``ts``; returns the signed changes for the view.

        Within one call a repeated ``(src, dst, type)`` keeps its first row and its last weight.
        Every written row, re-weighted or not, gets ``updated_ts = ts``.
        """
        src = np.asarray(src, dtype=np.int64)
        dst = np.asarray(dst, dtype=np.int64)
        weights = np.asarray(weights, dtype=np.float64)
        if isinstance(edge_types, str):
            codes = np.full(len(src), self._intern(edge_types), dtype=np.int32)
        else:
            names = list(edge_types)
            uniq = sorted(set(names))
            interned = {t: self._intern(t) for t in uniq}
            codes = np.fromiter((interned[t] for t in names), dtype=np.int32, count=len(names))
        keys = (src << _KEY_SHIFT) | dst
        first = len(self.src)
        if len(keys) > PairIndex.BULK:
            new, new_weights, upd_rows, upd_pos = self._plan_bulk(keys, codes, weights, first)
        else:
            new, new_weights, upd_rows, upd_pos = self._plan_small(keys, codes, weights, first)
        next_row = first + len(new)
        weight_col = self.weight
        self.src.extend(src[new])
        self.dst.extend(dst[new])
        self.code.extend(codes[new])
        self.weight.extend(new_weights)
        self.updated_ts.extend(np.full(len(new), ts))
        self.updated_ts.view()[upd_rows] = ts
        live = weight_col.view()
        old = live[upd_rows].copy()
        live[upd_rows] = weights[upd_pos]
        changed = live[upd_rows] != old
        upd_rows, old = upd_rows[changed], old[changed]
        rows = np.concatenate([np.arange(first, next_row, dtype=np.int64), upd_rows])
        dweight = np.concatenate([new_weights, live[upd_rows] - old])
        return EdgeChanges(self.src.view()[rows].copy(), self.dst.view()[rows].copy(),
                           self.code.view()[rows].copy(), dweight, len(new), len(upd_rows))

    def _plan_small(self, keys, codes, weights, first):
        """A few edges, one by one: ``(new positions, their weights, updated rows, positions
        whose weight each takes)``; the new keys are indexed."""
        index = self._index
        found, slots = index.find_few(codes, keys)  # one searchsorted per type, not per edge
        new_rows: list[int] = []           # positions in this call that create a row
        pending: dict[int, int] = {}       # new table row -> position whose weight it takes
        updates: dict[int, int] = {}       # existing row -> position whose weight it takes
        seen: dict[tuple[int, int], int] = {}  # (code, key) created in this call -> row
        next_row = first
        for pos, (key, code, row, slot) in enumerate(zip(keys.tolist(), codes.tolist(),
                                                         found, slots)):
            if row is None:
                row = seen.get((code, key))
            if row is None:
                index.insert(code, key, next_row, slot, merge=False)
                seen[(code, key)] = next_row
                pending[next_row] = pos
                new_rows.append(pos)
                next_row += 1
            elif row >= first:
                pending[row] = pos
            else:
                updates[row] = pos
        for code in {c for c, _ in seen}:
            index.settle(code)
        new_weights = weights[np.fromiter(pending.values(), np.int64, len(pending))] \
            if pending else np.empty(0)
        return (np.asarray(new_rows, dtype=np.int64), new_weights,
                np.fromiter(updates.keys(), np.int64, len(updates)),
                np.fromiter(updates.values(), np.int64, len(updates)))

    def _plan_bulk(self, keys, codes, weights, first):
        """:meth:`_plan_small` for many edges, vectorised (same result, same order)."""
        m = len(keys)
        # group repeats of one (type, pair) in the call: first and last position of each
        order = np.lexsort((np.arange(m), keys, codes))
        k_sorted, c_sorted = keys[order], codes[order]
        starts = np.flatnonzero(np.r_[True, (k_sorted[1:] != k_sorted[:-1])
                                      | (c_sorted[1:] != c_sorted[:-1])])
        ends = np.r_[starts[1:], m] - 1
        first_pos, last_pos = order[starts], order[ends]
        g_keys, g_codes = k_sorted[starts], c_sorted[starts]
        existing = np.full(len(starts), -1, np.int64)
        for code in np.unique(g_codes).tolist():
            sel = np.flatnonzero(g_codes == code)
            existing[sel] = self._index.find_many(code, g_keys[sel])[0]
        found = existing >= 0
        # new rows in order of their first position in the call
        new_groups = np.flatnonzero(~found)
        new_groups = new_groups[np.argsort(first_pos[new_groups], kind="stable")]
        new_rows = first + np.arange(len(new_groups), dtype=np.int64)
        for code in np.unique(g_codes[new_groups]).tolist():
            sel = g_codes[new_groups] == code
            self._index.insert_many(code, g_keys[new_groups][sel], new_rows[sel])
        upd_groups = np.flatnonzero(found)
        upd_groups = upd_groups[np.argsort(first_pos[upd_groups], kind="stable")]
        return (first_pos[new_groups], weights[last_pos[new_groups]],
                existing[upd_groups], last_pos[upd_groups])

    def remove(self, rows) -> EdgeChanges:
        """Remove live rows (their weight becomes 0; the row number is never reused)."""
        rows = np.asarray(rows, dtype=np.int64)
        rows = rows[self.weight.view()[rows] > 0]
        rows = rows[np.sort(np.unique(rows, return_index=True)[1])]  # each once, in order
        src, dst = self.src.view()[rows], self.dst.view()[rows]
        code, old = self.code.view()[rows], self.weight.view()[rows].copy()
        self._index.discard_many(code, (src << _KEY_SHIFT) | dst)
        self.weight.view()[rows] = 0.0
        return EdgeChanges(src.copy(), dst.copy(), code.copy(), -old, 0, 0)

    def rows_touching(self, nodes) -> np.ndarray:
        """Live rows with either end in ``nodes``."""
        nodes = np.asarray(nodes, dtype=np.int64)
        hit = np.isin(self.src.view(), nodes) | np.isin(self.dst.view(), nodes)
        return np.flatnonzero(hit & self.alive())

    def alive(self) -> np.ndarray:
        """Rows whose weight is positive (a removed edge keeps its row with weight 0)."""
        return self.weight.view() > 0


class Undirected:
    """Undirected adjacency over a set of edge types, rows sorted strongest neighbour first.

    ``strength`` of a pair is the summed weight of its edges of those types, in either
    direction; each row lists every neighbour once, by strength descending then node ascending,
    so "the ``f`` strongest neighbours" is the first ``f`` entries of a row.
    """

    __slots__ = ("indptr", "nbr", "strength")

    def __init__(self, indptr: np.ndarray, nbr: np.ndarray, strength: np.ndarray) -> None:
        self.indptr, self.nbr, self.strength = indptr, nbr, strength

    @property
    def nbytes(self) -> int:
        return self.indptr.nbytes + self.nbr.nbytes + self.strength.nbytes


def ragged_take(starts: np.ndarray, counts: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Concatenated ranges ``starts[i] : starts[i] + counts[i]`` and each entry's range number."""
    counts = np.asarray(counts, dtype=np.int64)
    total = int(counts.sum())
    owner = np.repeat(np.arange(len(counts)), counts)
    if total == 0:
        return np.empty(0, np.int64), owner
    offsets = np.cumsum(counts) - counts
    return np.repeat(np.asarray(starts, np.int64) - offsets, counts) + np.arange(total), owner


def _build_undirected(n: int, src: np.ndarray, dst: np.ndarray, w: np.ndarray) -> Undirected:
    rows = np.concatenate([src, dst])
    cols = np.concatenate([dst, src])
    # scipy's COO -> CSR is a C++ counting sort that also sums parallel entries: exactly the
    # "strength = summed weight in either direction" we want, at ~0.4 s for 10M entries.
    mat = sp.csr_array((np.concatenate([w, w]), (rows, cols)), shape=(n, n))
    mat.sum_duplicates()
    indptr = mat.indptr.astype(np.int64)
    nbr = mat.indices.astype(np.int32)
    strength = mat.data
    if len(strength) and strength.min() != strength.max():
        # rows are sorted by neighbour; make them strongest-first (stable keeps neighbour order)
        row_of = np.repeat(np.arange(n), np.diff(indptr))
        order = np.lexsort((-strength, row_of))
        nbr, strength = nbr[order], strength[order]
    return Undirected(indptr, nbr, np.ascontiguousarray(strength))


class _Base:
    """An immutable CSR snapshot of the table as of ``edges`` rows and ``version``."""

    __slots__ = ("derived", "edges", "inverse", "n", "out", "out_degree", "out_weight",
                 "undirected")

    def __init__(self, n: int, table: EdgeTable) -> None:
        alive = table.alive()
        src, dst = table.src.view()[alive], table.dst.view()[alive]
        w = table.weight.view()[alive]
        self.n = n
        self.edges = len(table)
        # parallel typed edges between one pair are summed, as networkx does for multigraphs
        self.out = sp.csr_array((w, (src, dst)), shape=(n, n))
        self.out.sum_duplicates()
        self.out_weight = np.bincount(src, weights=w, minlength=n)
        self.out_degree = np.diff(self.out.indptr).astype(np.int64)
        self.undirected: dict[tuple[int, ...], Undirected] = {}
        self.inverse: tuple[np.ndarray, np.ndarray] | None = None  # built on first use
        # arrays derived for the PPR kernels (the transition matrix's transpose, the sweep order,
        # the delta by source): name -> (key, value), the latest key only (see GraphSnapshot)
        self.derived: dict[str, tuple[tuple, object]] = {}


class GraphView:
    """The CSR view of one workspace's graph, maintained incrementally (see the module notes).

    Parameters
    ----------
    table : EdgeTable
        The edges this view follows; writes must go through :meth:`write`.
    merge_fraction : float
        Fold the delta into a new base once it holds more than ``merge_fraction * base edges``
        entries (and at least ``min_merge``).
    min_merge : int
        Deltas up to this many entries never force a rebuild.

    Examples
    --------
    >>> view = GraphView(EdgeTable())
    >>> view.write([0, 1], [1, 2], "RELATED", [1.0, 1.0])
    >>> view.snapshot(3).out_neighbours(1)
    (array([2]), array([1.]))
    """

    def __init__(self, table: EdgeTable, merge_fraction: float = 0.25,
                 min_merge: int = 50_000) -> None:
        self.table = table
        self.merge_fraction = merge_fraction
        self.min_merge = min_merge
        self.version = 0
        self.rebuilds = 0
        self._base: _Base | None = None
        self._reset_delta()
        self._delta_out: dict[int, list[int]] = {}  # node -> delta rows leaving it
        self._delta_touch: dict[int, list[int]] = {}  # node -> delta rows touching it
        self._stale = False  # delta too large: rebuild on next read, skip per-node bookkeeping
        self._lock = threading.RLock()
        self.cache = LRUCache(256)  # results keyed on version (e.g. PPR); cleared on writes

    def _reset_delta(self) -> None:
        # fresh columns rather than size = 0: a bulk load must not leave its capacity behind
        self._delta_src = Growable(np.int64, 64)
        self._delta_dst = Growable(np.int64, 64)
        self._delta_code = Growable(np.int32, 64)
        self._delta_w = Growable(np.float64, 64)

    # ------------------------------------------------------------------ writes
    def write(self, src, dst, edge_types, weights, ts: float = float("nan")) -> None:
        """Upsert edges into the table and record the change (validated input only)."""
        with self._lock:
            self.apply(self.table.upsert(src, dst, edge_types, weights, ts))

    def remove(self, rows) -> None:
        """Remove table rows and record the change."""
        with self._lock:
            self.apply(self.table.remove(rows))

    def apply(self, changes: EdgeChanges) -> None:
        """Record changes already written to the table."""
        with self._lock:
            if not len(changes):
                return
            self.version += 1
            self.cache.clear()
            if self._base is None:
                self._stale = True
            if self._stale:
                # the next read rebuilds from the table and drops the delta: do not keep it
                # (a bulk load would otherwise hold a second copy of every edge until then)
                self._delta_out.clear()
                self._delta_touch.clear()
                return
            first = len(self._delta_src)
            self._delta_src.extend(changes.src)
            self._delta_dst.extend(changes.dst)
            self._delta_code.extend(changes.code)
            self._delta_w.extend(changes.dweight)
            if not self._stale and len(self._delta_src) > self._merge_threshold():
                self._stale = True
                self._reset_delta()  # new columns: snapshots taken before keep theirs
            if self._stale:
                self._delta_out.clear()
                self._delta_touch.clear()
                return
            for row, (s, d) in enumerate(zip(changes.src.tolist(), changes.dst.tolist()),
                                         start=first):
                self._delta_out.setdefault(s, []).append(row)
                self._delta_touch.setdefault(s, []).append(row)
                self._delta_touch.setdefault(d, []).append(row)

    def _merge_threshold(self) -> int:
        base_edges = self._base.edges if self._base is not None else 0
        return max(self.min_merge, int(self.merge_fraction * base_edges))

    # ------------------------------------------------------------------ reads
    def snapshot(self, n: int, undirected: Iterable[np.ndarray] = ()) -> GraphSnapshot:
        """The graph over ``n`` nodes as of now.

        The base is rebuilt first when the delta has outgrown it. ``undirected`` lists the
        edge-type code sets whose undirected adjacency the caller will read (built once per
        base; building one with a pending delta folds the delta in first, so that the
        adjacency and the delta never count a change twice).
        """
        with self._lock:
            wanted = [tuple(int(c) for c in codes) for codes in undirected]
            base = self._base
            missing = base is None or any(key not in base.undirected for key in wanted)
            if self._stale or base is None or (missing and len(self._delta_src)):
                base = self._rebuild(n)
            for key in wanted:
                if key not in base.undirected:
                    base.undirected[key] = self._build_undirected(base, np.array(key, np.int32))
            return GraphSnapshot(self, base, max(n, base.n), len(self._delta_src))

    def _rebuild(self, n: int) -> _Base:
        self._base = _Base(n, self.table)
        self._reset_delta()
        self._delta_out, self._delta_touch = {}, {}  # new objects: snapshots keep the old ones
        self._stale = False
        self.rebuilds += 1
        return self._base

    def _build_undirected(self, base: _Base, codes: np.ndarray) -> Undirected:
        table = self.table
        rows = np.flatnonzero(table.alive() & np.isin(table.code.view(), codes))
        return _build_undirected(base.n, table.src.view()[rows], table.dst.view()[rows],
                                 table.weight.view()[rows])

    def nbytes(self) -> dict[str, int]:
        """Bytes held by the view's arrays: the CSR matrices and the delta (for reports)."""
        with self._lock:
            out = {"csr": 0, "undirected": 0, "ppr": 0, "delta": 0}
            if self._base is not None:
                b = self._base
                out["csr"] = (b.out.data.nbytes + b.out.indices.nbytes + b.out.indptr.nbytes
                              + b.out_weight.nbytes + b.out_degree.nbytes)
                out["undirected"] = sum(u.nbytes for u in b.undirected.values())
                out["ppr"] = sum(a.nbytes for _, value in list(b.derived.values())
                                 for a in (value if isinstance(value, tuple) else (value,))
                                 if isinstance(a, np.ndarray))
            out["delta"] = sum(c.data.nbytes for c in (self._delta_src, self._delta_dst,
                                                       self._delta_code, self._delta_w))
            return out


class GraphSnapshot:
    """Base + delta at one moment: what an algorithm reads. Take it and use it under the lock
    that guards writes (the store's, shared or exclusive), so the delta does not move underneath.

    The delta's columns and per-node row lists are captured when the snapshot is taken: another
    reader's :meth:`GraphView.snapshot` may fold the delta into a new base meanwhile, which
    replaces the view's columns and lists (never changes them in place), so this snapshot
    keeps reading the base and delta it was given."""

    __slots__ = ("_delta", "_delta_out", "_delta_touch", "base", "delta_size", "n", "view")

    def __init__(self, view: GraphView, base: _Base, n: int, delta_size: int) -> None:
        self.view, self.base, self.n, self.delta_size = view, base, n, delta_size
        k = delta_size
        self._delta = (view._delta_src.data[:k], view._delta_dst.data[:k],
                       view._delta_code.data[:k], view._delta_w.data[:k])
        self._delta_out, self._delta_touch = view._delta_out, view._delta_touch

    @property
    def version(self) -> int:
        return self.view.version

    @property
    def num_edges(self) -> int:
        """Stored directed pairs in the base plus delta entries (an upper bound on live pairs)."""
        return int(self.base.out.nnz) + self.delta_size

    @property
    def delta(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        return self._delta

    # ------------------------------------------------------------------ directed (PPR)
    def out_weight(self) -> np.ndarray:
        """Total outgoing weight of every node (a fresh array of length ``n``)."""
        w = np.zeros(self.n)
        w[:self.base.n] = self.base.out_weight
        if self.delta_size:
            src, _, _, dw = self.delta
            np.add.at(w, src, dw)
            w[np.abs(w) < 1e-12] = 0.0
        return w

    def inverse_out_weight(self) -> tuple[np.ndarray, np.ndarray]:
        """``(1 / out_weight, 0 where none)`` and the dangling nodes (no outgoing weight)."""
        base = self.base
        if not self.delta_size and self.n == base.n and base.inverse is not None:
            return base.inverse
        weight = self.out_weight()
        live = weight > 0
        inverse = np.zeros(self.n)
        inverse[live] = 1.0 / weight[live]
        result = (inverse, np.flatnonzero(~live))
        if not self.delta_size and self.n == base.n:
            base.inverse = result  # immutable base: computed once per rebuild
        return result

    def transpose_matvec(self, z: np.ndarray) -> np.ndarray:
        """``y[j] = sum_i W[i, j] * z[i]``: mass flowing along every edge, for ``z`` of length n."""
        nb = self.base.n
        if not self.delta_size and self.n == nb:
            return self.base.out.T @ z
        y = np.zeros(self.n)
        y[:nb] = self.base.out.T @ z[:nb]
        if self.delta_size:
            src, dst, _, dw = self.delta
            np.add.at(y, dst, dw * z[src])
        return y

    def _derived(self, name: str, key: tuple, build):
        """``build()``, cached on the base under ``name`` for ``key`` (the latest key only).

        The base never changes and its delta only grows until the next rebuild (which makes a
        new base), so ``(delta_size, n)`` identifies what a snapshot of this base reads. Two
        readers may build the same value at once; either result is correct."""
        hit = self.base.derived.get(name)
        if hit is not None and hit[0] == key:
            return hit[1]
        value = build()
        self.base.derived[name] = (key, value)
        return value

    def transition_transpose(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``P^T`` as CSR arrays ``(indptr, indices, data)``: row ``j`` lists the nodes ``i``
        with an edge to ``j`` and ``P[i, j] = W[i, j] / out_weight(i)`` (parallel edges summed,
        the delta folded in; a dangling node's row of ``P`` is empty). What the exact PPR
        methods multiply by; built once per graph version (O(edges)) and cached on the base.

        Examples
        --------
        >>> view = GraphView(EdgeTable())
        >>> view.write([0, 0], [1, 2], "RELATED", [1.0, 3.0])
        >>> indptr, indices, data = view.snapshot(3).transition_transpose()
        >>> indptr.tolist(), indices.tolist(), data.tolist()
        ([0, 0, 1, 2], [0, 0], [0.25, 0.75])
        """
        if self.delta_size:
            return self._derived("transpose", (self.delta_size, self.n), self._build_transpose)
        indptr, indices, data = self._derived("transpose_base", (), self._build_transpose)
        if self.n > len(indptr) - 1:  # items added since the base: nodes without edges
            indptr = self._derived("transpose_indptr", (self.n,), lambda: np.concatenate(
                [indptr, np.full(self.n + 1 - len(indptr), indptr[-1])]))
        return indptr, indices, data

    def _build_transpose(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m = self.base.out if not self.delta_size else self.matrix()
        n = m.shape[0]
        rows = np.repeat(np.arange(n), np.diff(m.indptr))
        weight = np.bincount(rows, weights=m.data, minlength=n)
        inverse = np.zeros(n)
        live = weight > 0
        inverse[live] = 1.0 / weight[live]
        prob = sp.csr_array((m.data * inverse[rows], m.indices, m.indptr), shape=(n, n))
        # scipy's CSR -> CSC is a C++ counting sort: in-neighbours come out sorted by source,
        # which keeps the gathers of a mat-vec or sweep close to sequential
        t = prob.tocsc()
        return t.indptr.astype(np.int64), t.indices.astype(np.int32), t.data

    def sweep_order(self) -> np.ndarray:
        """Every node once, in a topological order of the base's strongly connected components
        (edges lead from earlier to later components); nodes added since the base come first.
        The Gauss–Seidel sweep order of the compiled exact PPR (it converges for any order;
        this one carries mass across acyclic parts in one sweep). Needs numba; cached per base.
        """
        def build_base() -> np.ndarray:
            from memlab.graph._ppr_numba import sweep_order
            out = self.base.out
            return sweep_order(out.indptr.astype(np.int64), out.indices.astype(np.int64))
        base_order = self._derived("order_base", (), build_base)
        if self.n == self.base.n:
            return base_order
        return self._derived("order", (self.n,), lambda: np.concatenate(
            [np.arange(self.n - 1, self.base.n - 1, -1, dtype=np.int64), base_order]))

    def delta_by_source(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The delta's entries ``(src, dst, weight change)`` sorted by source (stable), cached."""
        def build():
            src, dst, _, dw = self.delta
            order = np.argsort(src, kind="stable")
            return src[order].astype(np.int64), dst[order].astype(np.int64), dw[order]
        return self._derived("delta_by_source", (self.delta_size,), build)

    def matrix(self) -> sp.csr_array:
        """The current weighted adjacency as one CSR matrix (n x n; parallel edges summed)."""
        m = sp.csr_array(self.base.out, copy=True)
        m.resize((self.n, self.n))
        if self.delta_size:
            src, dst, _, dw = self.delta
            m = m + sp.csr_array((dw, (src, dst)), shape=(self.n, self.n))
            m.data[np.abs(m.data) < 1e-12] = 0.0
            m.eliminate_zeros()
        return m

    def out_edges(self, nodes: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Outgoing edges of ``nodes`` (base and delta entries): (owner position, target, weight).

        A pair with a delta entry appears more than once; summing by target gives its weight.
        """
        nodes = np.asarray(nodes, dtype=np.int64)
        base = self.base
        in_base = nodes < base.n
        starts = np.zeros(len(nodes), np.int64)
        counts = np.zeros(len(nodes), np.int64)
        starts[in_base] = base.out.indptr[nodes[in_base]]
        counts[in_base] = base.out_degree[nodes[in_base]]
        slots, owner = ragged_take(starts, counts)
        target = base.out.indices[slots].astype(np.int64)
        weight = base.out.data[slots]
        if self.delta_size and self._delta_out:
            extra = [(pos, row) for pos, node in enumerate(nodes.tolist())
                     for row in self._delta_out.get(node, ()) if row < self.delta_size]
            if extra:
                pos, rows = np.array(extra, dtype=np.int64).T
                _, dst, _, dw = self.delta
                owner = np.concatenate([owner, pos])
                target = np.concatenate([target, dst[rows]])
                weight = np.concatenate([weight, dw[rows]])
        return owner, target, weight

    def out_neighbours(self, node: int) -> tuple[np.ndarray, np.ndarray]:
        """Targets of ``node``'s outgoing edges and their summed weights, by target."""
        _, target, weight = self.out_edges(np.array([node]))
        uniq, summed = group_sum(target, weight)
        live = summed > 1e-12
        return uniq[live], summed[live]

    # ------------------------------------------------------------------ undirected (spreading)
    def strongest_neighbours(self, nodes: np.ndarray, codes: np.ndarray,
                             fan_out: int, *, owners: bool = False
                             ) -> np.ndarray | tuple[np.ndarray, np.ndarray]:
        """For each of ``nodes``, its ``fan_out`` strongest neighbours over edge-type ``codes``
        (undirected; ties by node number), concatenated. With ``owners``: ``(positions,
        neighbours)``, each neighbour's position in ``nodes`` beside it (the same neighbours,
        in the same order)."""
        nodes = np.asarray(nodes, dtype=np.int64)
        und = self.base.undirected[tuple(int(c) for c in codes)]
        touched = self._delta_touch if self.delta_size else {}
        plain = np.array([v not in touched for v in nodes.tolist()], dtype=bool) \
            if touched else np.ones(len(nodes), bool)
        at = plain & (nodes < self.base.n)
        fast = nodes[at]
        starts = und.indptr[fast]
        counts = np.minimum(und.indptr[fast + 1] - starts, fan_out)
        slots, owner = ragged_take(starts, counts)
        parts = [und.nbr[slots].astype(np.int64)]
        where = [np.flatnonzero(at)[owner]] if owners else []
        for pos in np.flatnonzero(~plain).tolist():
            row = self._merged_row(und, int(nodes[pos]), codes)[:fan_out]
            parts.append(row)
            if owners:
                where.append(np.full(len(row), pos, np.int64))
        found = np.concatenate(parts) if len(parts) > 1 else parts[0]
        if not owners:
            return found
        return (np.concatenate(where) if len(where) > 1 else where[0]), found

    def _merged_row(self, und: Undirected, v: int, codes: np.ndarray) -> np.ndarray:
        """Row ``v`` of the undirected adjacency with its delta entries applied, sorted."""
        if v < self.base.n:
            a, b = und.indptr[v], und.indptr[v + 1]
            nbr, strength = und.nbr[a:b].astype(np.int64), und.strength[a:b]
        else:
            nbr, strength = np.empty(0, np.int64), np.empty(0)
        rows = np.array([r for r in self._delta_touch.get(v, ()) if r < self.delta_size],
                        dtype=np.int64)
        src, dst, code, dw = self.delta
        rows = rows[np.isin(code[rows], codes)]
        other = np.where(src[rows] == v, dst[rows], src[rows])
        nbr = np.concatenate([nbr, other])
        strength = np.concatenate([strength, dw[rows]])
        uniq, summed = group_sum(nbr, strength)
        live = summed > 1e-12
        uniq, summed = uniq[live], summed[live]
        return uniq[np.lexsort((uniq, -summed))]
