"""The short-term session cache (SPEC §6.1, seed 000): :class:`PMMemoryStore`."""

from __future__ import annotations

import heapq
import json
import threading
from collections import OrderedDict
from typing import Any

from memlab.model import validate_text

__all__ = ["PMMemoryStore"]

_OPS = frozenset({"set", "peek", "flush"})  # the journaled operations (no dot in any)


def _check_text(value: Any, name: str) -> str:
    return validate_text(value, name)


class PMMemoryStore:
    """A fixed number of key → value slots with least-recently-used eviction. Thread-safe.

    ``set`` returns the key's slot index (an update keeps it); ``peek`` returns
    ``(hit, value, index)`` (``(False, None, -1)`` on a miss). A ``peek`` hit and every ``set``
    count as a use, for the LRU order and for the per-key access counts (which a
    :class:`~memlab.session.engine.PromotionPolicy` reads). A key's count goes with it when it is
    evicted or flushed.

    Parameters
    ----------
    silo_size : int
        The number of slots (256).
    promotion_policy : PromotionPolicy, optional
        Opt-in automatic promotion, applied by :func:`~memlab.session.engine.resolve_context`.
    durable : MemoryStore, optional
        A store opened with a path: the cache journals its writes into the same file and is
        restored from it (under ``name``, and ``workspace_id`` when given) when created again.
        Only rows of exactly this name (and workspace) are replayed: ``"team"`` never replays
        ``"team.alice"``.
    name : str
        The cache's name in the journal (``"default"``).
    workspace_id : str, optional
        The workspace the cache belongs to (the service keeps one set of caches per
        workspace); None, the library default, is the journal namespace of earlier versions,
        which the service uses for workspace ``"default"``.
    restore : bool
        Replay the cache's rows from ``durable``'s journal (True, the default). Replaying reads
        and checks the whole journal; a caller that knows the journal holds no row of this
        cache (the service indexes them once) passes False to skip that scan.

    Examples
    --------
    >>> store = PMMemoryStore(silo_size=2)
    >>> store.set("a", "alpha"), store.set("b", "beta"), store.set("a", "alpha 2")
    (0, 1, 0)
    >>> store.set("c", "gamma")   # full: evicts "b", the least recently used, and takes its slot
    1
    >>> store.peek("b"), store.peek("a")
    ((False, None, -1), (True, 'alpha 2', 0))
    >>> store.access_count("a"), len(store), store.flush(), len(store)
    (3, 2, 2, 0)
    """

    def __init__(self, silo_size: int = 256, *, promotion_policy: Any = None,
                 durable: Any = None, name: str = "default",
                 workspace_id: str | None = None, restore: bool = True) -> None:
        if isinstance(silo_size, bool) or not isinstance(silo_size, int) or silo_size < 1:
            raise ValueError(f"silo_size must be an integer >= 1, got {silo_size!r}")
        if not isinstance(restore, bool):
            raise ValueError(f"restore must be a bool, got {restore!r}")
        _check_text(name, "name")
        if workspace_id is not None:
            _check_text(workspace_id, "workspace_id")
        self._silo_size = silo_size
        self.promotion_policy = promotion_policy
        self.name = name
        self.workspace_id = workspace_id
        # journal op names: "cache:<name>.<op>", or "cache@<JSON workspace id>:<name>.<op>" (a
        # JSON string ends at its first unescaped quote, so the encoding is injective)
        self._op_prefix = f"cache:{name}." if workspace_id is None else \
            f"cache@{json.dumps(workspace_id)}:{name}."  # as in journal_ops
        self._lock = threading.RLock()
        self._slots: OrderedDict[str, int] = OrderedDict()  # LRU order, oldest first
        self._values: list[str | None] = [None] * silo_size
        self._free: list[int] = list(range(silo_size))  # a heap: the lowest free slot first
        self._counts: dict[str, int] = {}
        # a durable MemoryStore's journal also keeps this cache (set, peek hits, flush)
        if durable is not None and not hasattr(durable, "journal"):
            raise ValueError(f"durable must be a MemoryStore, got {durable!r:.80}")
        self._journal = getattr(durable, "journal", None)
        if self._journal is not None and restore:
            journal, self._journal = self._journal, None  # replay without re-journaling
            for op, payload in journal.ops(prefix=self._op_prefix):
                # exactly this cache: the rest of the name must be one operation, so the rows of
                # "team.alice" ("cache:team.alice.set") are not replayed into "team"
                action = op[len(self._op_prefix):]
                if action in _OPS:
                    getattr(self, action)(*json.loads(payload))
            self._journal = journal

    @staticmethod
    def journal_ops(name: str = "default", workspace_id: str | None = None) -> frozenset[str]:
        """The journal op names a cache ``name`` (of ``workspace_id``) writes: a journal holds
        rows of that cache exactly when it holds one of these ops.

        Examples
        --------
        >>> sorted(PMMemoryStore.journal_ops("team"))
        ['cache:team.flush', 'cache:team.peek', 'cache:team.set']
        """
        prefix = f"cache:{name}." if workspace_id is None else \
            f"cache@{json.dumps(workspace_id)}:{name}."
        return frozenset(prefix + op for op in _OPS)

    def _log(self, op: str, *args: Any) -> None:
        if self._journal is not None:
            self._journal.append(self._op_prefix + op, json.dumps(args))

    @property
    def silo_size(self) -> int:
        return self._silo_size

    def set(self, key: str, value: str) -> int:
        """Store ``value`` under ``key``; returns its slot index."""
        _check_text(key, "key")
        _check_text(value, "value")
        with self._lock:
            index = self._slots.get(key)
            if index is None:
                if self._free:
                    index = heapq.heappop(self._free)
                else:
                    evicted, index = self._slots.popitem(last=False)
                    self._counts.pop(evicted, None)
                self._slots[key] = index
            else:
                self._slots.move_to_end(key)
            self._values[index] = value
            self._counts[key] = self._counts.get(key, 0) + 1
            self._log("set", key, value)
            return index

    def peek(self, key: str, *, reinforce: bool = True) -> tuple[bool, str | None, int]:
        """``(True, value, index)`` for a cached key (a use), else ``(False, None, -1)``.

        ``reinforce=False`` looks without using: no LRU move, no access count, no journal row.
        """
        _check_text(key, "key")
        if not isinstance(reinforce, bool):
            raise ValueError(f"reinforce must be a bool, got {reinforce!r}")
        with self._lock:
            index = self._slots.get(key)
            if index is None:
                return False, None, -1
            if not reinforce:
                return True, self._values[index], index
            self._slots.move_to_end(key)
            self._counts[key] += 1
            self._log("peek", key)
            return True, self._values[index], index

    def flush(self) -> int:
        """Empty every slot; returns how many keys were held."""
        with self._lock:
            count = len(self._slots)
            self._slots.clear()
            self._values = [None] * self._silo_size
            self._free = list(range(self._silo_size))
            self._counts.clear()
            self._log("flush")
            return count

    def access_count(self, key: str) -> int:
        """How often ``key`` was set or peeked with a hit since it entered the cache."""
        with self._lock:
            return self._counts.get(key, 0)

    def snapshot(self) -> list[dict[str, Any]]:
        """Every held key, least recently used first: ``{key, value, index, access_count}``."""
        with self._lock:
            return [{"key": k, "value": self._values[i], "index": i,
                     "access_count": self._counts[k]} for k, i in self._slots.items()]

    def __len__(self) -> int:
        return len(self._slots)

    def __contains__(self, key: object) -> bool:
        """Membership without counting a use."""
        with self._lock:
            return key in self._slots
