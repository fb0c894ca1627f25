"""Time indexes of one workspace, so that ``fast:recency`` and ``temporal:windowed`` cost
O(k + matches) per query instead of a pass over every item (issue 18).

:class:`RecencyOrder` answers "the ``n`` eligible items with the latest recency reference time"
(SPEC §2.2: last reinforcement, else ``updated_at``) from an order sorted once and kept on write:
the store marks the items a write changes (:meth:`RecencyOrder.touch`); items added since the
last sort are read directly. A query merges the first ``n`` untouched entries of the order with
the touched and new items, so it costs O(n + touched + new); once those exceed a share of the
workspace (:data:`RESORT_SHARE`) the order is sorted again (a stable sort that is O(n) on items
added in time order, the usual case).

:class:`CreatedOrder` keeps every item sorted by creation time (never changed after the add) so
a time window is two binary searches, and :meth:`CreatedOrder.newest` walks a window from its end.

Both orders break ties by item number, ascending, which is what the full sorts they replace did
(``np.lexsort((idx, -ts))``); the tests hold them equal to those full sorts on random stores.
Neither holds a reference to the workspace's columns: every call passes them, so a column the
store replaces (a snapshot restore, growth) is never read stale.
"""

from __future__ import annotations

import threading
from typing import Callable

import numpy as np

from memlab._arrays import Growable

__all__ = ["RecencyOrder", "CreatedOrder", "top_by_time", "top_by_score_then_time", "RESORT_SHARE",
           "RESORT_MIN"]

#: the order is sorted again when the touched and new items exceed this share of the items …
RESORT_SHARE = 1 / 32
#: … and this many (so a small workspace does not re-sort on every write)
RESORT_MIN = 1024

_EMPTY = np.empty(0, np.int64)


def top_by_time(idx: np.ndarray, ts: np.ndarray, n: int) -> np.ndarray:
    """Positions into ``idx`` of its ``n`` largest ``ts``, latest first, ties by ``idx``
    ascending: the first ``n`` of ``np.lexsort((idx, -ts))``, in O(len + n log n).

    Examples
    --------
    >>> top_by_time(np.array([4, 1, 7, 2]), np.array([5.0, 9.0, 5.0, 5.0]), 3).tolist()
    [1, 3, 0]
    """
    if n <= 0 or not len(idx):
        return _EMPTY
    if len(idx) > n:
        # every entry at least as late as the n-th latest (ties at the cut included), so the
        # exact sort below sees the whole tie group and picks the lowest item numbers in it
        cut = -np.partition(-ts, n - 1)[n - 1]
        keep = np.flatnonzero(ts >= cut)
        return keep[np.lexsort((idx[keep], -ts[keep]))[:n]]
    return np.lexsort((idx, -ts))[:n]


def top_by_score_then_time(idx: np.ndarray, score: np.ndarray, ts: np.ndarray,
                           n: int) -> np.ndarray:
    """Positions into ``idx`` of its ``n`` best by ``score`` descending, then ``ts`` latest,
    then ``idx`` ascending: the first ``n`` of ``np.lexsort((idx, -ts, -score))``, in
    O(len + n log n) (a window's BM25 matches, best first).

    Examples
    --------
    >>> top_by_score_then_time(np.array([3, 1, 2]), np.array([1.0, 2.0, 1.0]),
    ...                        np.array([5.0, 0.0, 5.0]), 2).tolist()
    [1, 2]
    """
    if n <= 0 or not len(idx):
        return _EMPTY
    if len(idx) > n:
        cut = -np.partition(-score, n - 1)[n - 1]
        keep = np.flatnonzero(score >= cut)  # the whole tie group at the cut
        return keep[np.lexsort((idx[keep], -ts[keep], -score[keep]))[:n]]
    return np.lexsort((idx, -ts, -score))[:n]


class RecencyOrder:
    """Eligible items by recency reference time, latest first (ties: item number ascending).

    The owner calls :meth:`touch` with every item whose reference time or eligibility a write
    changes; added items need no call (items numbered past the last sort are read directly).
    Reads (:meth:`top`) may run concurrently: the re-sort they may trigger holds a lock.

    Examples
    --------
    >>> ref = np.array([3.0, 1.0, 3.0, 2.0]); eligible = np.array([True, True, True, False])
    >>> order = RecencyOrder()
    >>> order.top(2, lambda idx: ref[idx], eligible).tolist()
    [0, 2]
    >>> ref[1] = 9.0; order.touch([1]); order.top(2, lambda idx: ref[idx], eligible).tolist()
    [1, 0]
    """

    def __init__(self) -> None:
        self._order = _EMPTY  # eligible items at the last sort, latest reference first
        self._synced = 0  # items that existed at the last sort
        self._dirty = np.zeros(0, dtype=bool)  # touched since the last sort (items < _synced)
        self._touched: list[int] = []  # the same, as a list (with repeats)
        self._lock = threading.Lock()

    def oracle_state(self) -> tuple:
        """Nothing: the order is derived from the reference times and eligibility (compared
        as the workspace's columns), re-sorted lazily by reads, so a store and its reopened
        copy hold it at different stages (:func:`memlab.snapshot.state_digest`)."""
        return ()

    def touch(self, rows) -> None:
        """Mark items whose reference time or eligibility changed (called under the store's
        write lock)."""
        synced, dirty = self._synced, self._dirty
        for i in (rows.tolist() if isinstance(rows, np.ndarray) else rows):
            if i < synced and not dirty[i]:
                dirty[i] = True
                self._touched.append(i)

    def _resort(self, ref_of: Callable[[np.ndarray], np.ndarray], eligible: np.ndarray) -> None:
        rows = np.flatnonzero(eligible)
        # stable on item number; O(n) when the references descend (items added in time order)
        self._order = rows[np.argsort(-ref_of(rows), kind="stable")]
        self._synced = len(eligible)
        self._dirty = np.zeros(len(eligible), dtype=bool)
        self._touched = []

    def top(self, n: int, ref_of: Callable[[np.ndarray], np.ndarray],
            eligible: np.ndarray) -> np.ndarray:
        """The ``n`` eligible items with the latest reference time (``ref_of(idx)``), latest
        first, ties by item number ascending; ``eligible`` is the whole eligibility column."""
        size = len(eligible)
        if n <= 0 or not size:
            return _EMPTY
        with self._lock:
            if len(self._touched) + size - self._synced > max(RESORT_MIN, size * RESORT_SHARE) \
                    or self._synced > size:
                self._resort(ref_of, eligible)
            order, dirty, synced = self._order, self._dirty, self._synced
            touched = np.array(self._touched, dtype=np.int64)
        # untouched entries keep their place: the first n of them are the best of the old items
        head = order[:n + len(touched)]
        if len(touched):
            head = head[~dirty[head]]
        head = head[:n]
        fresh = np.concatenate((touched, np.arange(synced, size, dtype=np.int64)))
        fresh = fresh[eligible[fresh]]
        rows = np.concatenate((head, fresh))
        return rows[top_by_time(rows, ref_of(rows), n)]


class CreatedOrder:
    """Every item by creation time, ascending, ties by item number (creation times never change
    after the add). Items added in time order are appended; others are merged in (O(items)).

    Examples
    --------
    >>> created = np.array([5.0, 1.0, 5.0, 3.0]); order = CreatedOrder()
    >>> order.window(created, 2.0, 6.0).tolist()   # created in [2, 6), ascending
    [3, 0, 2]
    >>> order.newest(created, 0.0, 6.0, 2, lambda idx: idx != 2).tolist()
    [0, 3]
    """

    def __init__(self) -> None:
        self._rows = Growable(np.int64, 64)
        self._ts = Growable(np.float64, 64)
        self._lock = threading.Lock()

    def oracle_state(self) -> tuple:
        """Nothing: derived from the creation times, synced lazily by reads (as
        :meth:`RecencyOrder.oracle_state`)."""
        return ()

    def _sync(self, created: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        with self._lock:
            synced = self._rows.size
            if synced > len(created):  # not this workspace's column any more: start again
                self._rows, self._ts, synced = Growable(np.int64, 64), Growable(np.float64, 64), 0
            if synced < len(created):
                new = np.arange(synced, len(created), dtype=np.int64)
                ts = created[synced:]
                if len(ts) > 1 and np.any(ts[1:] < ts[:-1]):
                    order = np.argsort(ts, kind="stable")
                    new, ts = new[order], ts[order]
                old_ts = self._ts.view()
                if not synced or ts[0] >= old_ts[-1]:
                    self._rows.extend(new)
                    self._ts.extend(ts)
                else:  # after every equal time: the new items have the larger numbers
                    at = np.searchsorted(old_ts, ts, side="right")
                    rows = np.insert(self._rows.view(), at, new)
                    merged = np.insert(old_ts, at, ts)
                    self._rows, self._ts = Growable(np.int64, 64), Growable(np.float64, 64)
                    self._rows.extend(rows)
                    self._ts.extend(merged)
            return self._rows.view(), self._ts.view()

    def window(self, created: np.ndarray, start_ts: float, end_ts: float) -> np.ndarray:
        """The items created in ``[start_ts, end_ts)``, by creation time then item number."""
        rows, ts = self._sync(created)
        lo, hi = np.searchsorted(ts, [start_ts, end_ts], side="left").tolist()
        return rows[lo:hi]

    def newest(self, created: np.ndarray, start_ts: float, end_ts: float, n: int,
               keep: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
        """The ``n`` latest-created items in ``[start_ts, end_ts)`` for which ``keep(idx)`` is
        True, latest first, ties by item number ascending (the first ``n`` of
        ``np.lexsort((idx, -created[idx]))`` over the kept items); O(n + the items skipped)."""
        if n <= 0:
            return _EMPTY
        rows, ts = self._sync(created)
        lo, hi = np.searchsorted(ts, [start_ts, end_ts], side="left").tolist()
        span = 2 * n + 16
        while True:
            start = max(lo, hi - span)
            if start > lo:  # the whole group of items created at the cut's time
                start = max(lo, int(np.searchsorted(ts, ts[start], side="left")))
            cand = rows[start:hi]
            cand = cand[keep(cand)]
            if len(cand) >= n or start == lo:
                return cand[top_by_time(cand, created[cand], n)]
            span *= 4
