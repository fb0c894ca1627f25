"""Shared helpers of the graph algorithms' configurations and registries."""

from __future__ import annotations

import dataclasses
import math
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from memlab.model import validate_edge_type


def is_number(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, (int, float)) and math.isfinite(value)


def type_tuple(value: Any, name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Iterable):
        raise ValueError(f"{name} must be a list of edge types, got {value!r}")
    out = []
    for t in value:
        try:
            out.append(validate_edge_type(t))
        except ValueError:
            raise ValueError(f"{name} contains an invalid edge type {t!r}") from None
    return tuple(dict.fromkeys(out))


def seed_list(seed_item_ids: Any) -> list[str]:
    if isinstance(seed_item_ids, str) or not isinstance(seed_item_ids, Iterable):
        raise ValueError(f"seed_item_ids must be a list of item ids, got {seed_item_ids!r}")
    seeds = list(seed_item_ids)
    for s in seeds:
        if not isinstance(s, str) or not s:
            raise ValueError(f"seed_item_ids must hold non-empty strings, got {s!r}")
    return seeds


def check_method(method: Any, registry: Mapping[str, Callable], name: str) -> None:
    if callable(method):
        return
    if not isinstance(method, str) or method not in registry:
        raise ValueError(f"{name} must be a callable or one of {sorted(registry)}, "
                         f"got {method!r}")


def method_name(method: str | Callable, registry: Mapping[str, Callable]) -> str:
    if isinstance(method, str):
        return method
    for name, fn in registry.items():
        if fn is method:
            return name
    return f"{getattr(method, '__module__', '?')}.{getattr(method, '__qualname__', repr(method))}"


def from_dict(cls, data: Mapping[str, Any], tuple_fields: tuple[str, ...] = ()):
    if not isinstance(data, Mapping):
        raise ValueError(f"{cls.__name__} data must be a mapping, got {data!r}")
    known = {f.name for f in dataclasses.fields(cls)}
    bad = sorted(set(data) - known)
    if bad:
        raise ValueError(f"unknown {cls.__name__} field(s) {bad}")
    data = dict(data)
    for key in tuple_fields:
        if isinstance(data.get(key), list):
            data[key] = tuple(data[key])
    return cls(**data)


class LRUCache:
    """A thread-safe LRU mapping (``PPRCache`` is this class).

    Each workspace's graph view owns one for PPR results, cleared on every graph write; pass your
    own to :func:`~memlab.graph.ppr.personalized_pagerank` to share results explicitly (its keys
    then include the workspace).

    Examples
    --------
    >>> cache = LRUCache(maxsize=1); cache.put("a", 1); cache.put("b", 2)
    >>> cache.get("a"), cache.get("b"), len(cache)
    (None, 2, 1)
    """

    def __init__(self, maxsize: int = 256) -> None:
        if isinstance(maxsize, bool) or not isinstance(maxsize, int) or maxsize < 1:
            raise ValueError(f"maxsize must be an integer >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self._data: OrderedDict = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key):
        with self._lock:
            value = self._data.get(key)
            if value is None:
                self.misses += 1
                return None
            self._data.move_to_end(key)
            self.hits += 1
            return value

    def put(self, key, value) -> None:
        with self._lock:
            self._data[key] = value
            self._data.move_to_end(key)
            while len(self._data) > self.maxsize:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def __len__(self) -> int:
        return len(self._data)
