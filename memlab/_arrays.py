"""Growable numpy columns shared by the index and the store."""

from __future__ import annotations

import numpy as np

__all__ = ["Growable", "find_sorted", "group_sum", "sorted_unique"]


class Growable:
    """A numpy array with amortised O(1) append along its first axis (capacity doubling); 1-D,
    or rows of ``row_shape``.

    Examples
    --------
    >>> g = Growable(np.int32); g.append(3); g.extend(np.array([4, 5])); g.view().tolist()
    [3, 4, 5]
    >>> rows = Growable(np.float32, row_shape=(2,)); rows.extend(np.ones((3, 2))); rows.view().shape
    (3, 2)
    """

    __slots__ = ("data", "size")

    def __init__(self, dtype, capacity: int = 4, row_shape: tuple[int, ...] = ()) -> None:
        self.data = np.empty((capacity, *row_shape), dtype=dtype)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need > self.data.shape[0]:
            grown = np.empty((max(need, 2 * self.data.shape[0]), *self.data.shape[1:]),
                             dtype=self.data.dtype)
            grown[:self.size] = self.data[:self.size]
            self.data = grown

    def append(self, value) -> None:
        self._reserve(1)
        self.data[self.size] = value
        self.size += 1

    def extend(self, values) -> None:
        if not isinstance(values, np.ndarray):
            values = np.asarray(values, dtype=self.data.dtype)
        self._reserve(len(values))
        self.data[self.size:self.size + len(values)] = values
        self.size += len(values)

    def insert(self, pos: int, value) -> None:
        """Insert ``value`` before position ``pos`` (O(size - pos): a memmove)."""
        self._reserve(1)
        self.data[pos + 1:self.size + 1] = self.data[pos:self.size].copy()
        self.data[pos] = value
        self.size += 1

    def delete(self, pos: int) -> None:
        """Remove the entry at ``pos`` (O(size - pos))."""
        self.data[pos:self.size - 1] = self.data[pos + 1:self.size].copy()
        self.size -= 1

    def view(self) -> np.ndarray:
        """The live part (a view: writes through, invalidated by the next growth)."""
        return self.data[:self.size]


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """``np.unique`` for the small integer arrays of per-query graph work.

    numpy >= 2.3 answers ``np.unique`` with a hash table that costs ~30 us even for a few hundred
    values; sorting and masking repeats costs a few microseconds.

    Examples
    --------
    >>> sorted_unique(np.array([3, 1, 3, 2])).tolist()
    [1, 2, 3]
    """
    out = np.sort(values)
    if len(out) > 1:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out


def find_sorted(haystack: np.ndarray, needles: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each of ``needles`` sits in the ascending ``haystack``, and whether it is there
    (positions are clipped to the last entry; O(needles × log haystack)).

    Examples
    --------
    >>> pos, found = find_sorted(np.array([2, 5, 9]), np.array([5, 3, 9]))
    >>> pos.tolist(), found.tolist()
    ([1, 1, 2], [True, False, True])
    """
    needles = np.asarray(needles)
    if not len(haystack):
        return np.zeros(len(needles), np.int64), np.zeros(len(needles), dtype=bool)
    pos = np.minimum(np.searchsorted(haystack, needles), len(haystack) - 1)
    return pos, haystack[pos] == needles


def group_sum(keys: np.ndarray, values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct ``keys`` (ascending) and the sum of ``values`` for each (sort based, as
    :func:`sorted_unique`).

    Examples
    --------
    >>> keys, sums = group_sum(np.array([5, 2, 5]), np.array([1.0, 2.0, 3.0]))
    >>> keys.tolist(), sums.tolist()
    ([2, 5], [2.0, 4.0])
    """
    if not len(keys):
        return keys, np.asarray(values)
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    starts = np.flatnonzero(np.concatenate(([True], ordered[1:] != ordered[:-1])))
    return ordered[starts], np.add.reduceat(np.asarray(values)[order], starts)

