"""Growable numpy columns shared by the index and the store."""

from __future__ import annotations

import numpy as np

__all__ = ["Growable"]


class Growable:
    """A 1-D numpy array with amortised O(1) append (capacity doubling).

    Examples
    --------
    >>> g = Growable(np.int32); g.append(3); g.extend(np.array([4, 5])); g.view().tolist()
    [3, 4, 5]
    """

    __slots__ = ("data", "size")

    def __init__(self, dtype, capacity: int = 4) -> None:
        self.data = np.empty(capacity, dtype=dtype)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _reserve(self, extra: int) -> None:
        need = self.size + extra
        if need > self.data.shape[0]:
            grown = np.empty(max(need, 2 * self.data.shape[0]), dtype=self.data.dtype)
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

    def view(self) -> np.ndarray:
        """The live part (a view: writes through, invalidated by the next growth)."""
        return self.data[:self.size]
