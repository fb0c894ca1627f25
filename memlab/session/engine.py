"""The solution engine of seed 000 (SPEC §6.1): resolve, promote, status, and opt-in promotion.

``resolve_context`` trusts the short-term cache first (score 1.0), then the long-term graph's
top direct hit when its absolute score reaches ``min_score``, else reports a miss. Promotion is
explicit (``promote_to_long_term``) and never a side effect of a read, unless the caller opts in
with a :class:`PromotionPolicy` on the cache, which then promotes a key when its access count
reaches the threshold and records every promotion it makes.

The process-wide default memory
-------------------------------
Functions given ``memory=None`` use one process-wide :class:`~memlab.Memory` (router mode,
workspace ``"default"``, system clock), created on first use; :func:`set_default_memory` replaces
it (tests and services pass their own).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlab.model import validate_id, validate_text
from memlab.session.cache import PMMemoryStore
from memlab.session.default import default_memory, resolve_memory, set_default_memory
from memlab.session.longterm import NODE_TYPES, search_graph, upsert_node

__all__ = ["PROMOTION_THRESHOLD", "DEFAULT_MIN_SCORE", "PromotionPolicy", "resolve_context",
           "promote_to_long_term", "get_memory_status", "default_memory", "set_default_memory"]

PROMOTION_THRESHOLD = 3
DEFAULT_MIN_SCORE = 0.5

@dataclass
class PromotionPolicy:
    """Promote a cached key to long-term memory once its access count reaches ``threshold``.

    Applied by :func:`resolve_context` on a short-term hit. A key is promoted once per value (a
    new value can be promoted again). ``promotions`` records each one:
    ``{session_id, key, node_id, access_count, ts}``.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory(); policy = PromotionPolicy(threshold=2, memory=mem)
    >>> store = PMMemoryStore(promotion_policy=policy)
    >>> _ = store.set("auth", "fresh login flow")          # access 1
    >>> resolve_context("s1", "auth", store, memory=mem)["source"]   # access 2: promoted
    'short_term'
    >>> [p["key"] for p in policy.promotions]
    ['auth']
    """

    threshold: int = PROMOTION_THRESHOLD
    node_type: str = "concept"
    memory: Any = None
    promotions: list[dict[str, Any]] = field(default_factory=list)
    _promoted: dict[str, str] = field(default_factory=dict, repr=False)
    _lock: Any = field(default_factory=threading.Lock, repr=False)

    def __post_init__(self) -> None:
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int) \
                or self.threshold < 1:
            raise ValueError(f"threshold must be an integer >= 1, got {self.threshold!r}")
        if self.node_type not in NODE_TYPES:
            raise ValueError(f"node_type must be one of {sorted(NODE_TYPES)}, "
                             f"got {self.node_type!r}")

    def observe(self, session_id: str, key: str, value: str, access_count: int,
                memory=None) -> dict[str, Any] | None:
        """Promote ``key`` if due; returns the promotion record, else None."""
        if access_count < self.threshold:
            return None
        with self._lock:
            if self._promoted.get(key) == value:
                return None
            mem = resolve_memory(self.memory if self.memory is not None else memory)
            result = promote_to_long_term(session_id, key, value, self.node_type, memory=mem)
            record = {"session_id": session_id, "key": key, "node_id": result["node_id"],
                      "access_count": access_count, "ts": mem.clock.now().isoformat()}
            self._promoted[key] = value
            self.promotions.append(record)
            return record


def _check_store(store: Any) -> PMMemoryStore:
    if not isinstance(store, PMMemoryStore):
        raise ValueError(f"store must be a PMMemoryStore, got {store!r:.80}")
    return store


def resolve_context(session_id: str, key: str, store: PMMemoryStore, *,
                    min_score: float = DEFAULT_MIN_SCORE, memory=None,
                    reinforce: bool = True) -> dict[str, Any]:
    """Short-term hit, else the long-term graph's best direct hit, else a miss.

    ``reinforce=False`` resolves without side effects: the short-term peek is not a use (no
    LRU move, no access count, no journal row), the promotion policy is not consulted, and the
    long-term hit is not reinforced (:func:`~memlab.session.longterm.search_graph`).

    Returns ``{"source": "short_term", "value", "score": 1.0}``,
    ``{"source": "long_term", "value", "score", "node_id"}`` (score in [0, 1], at least
    ``min_score``) or ``{"source": "miss", "value": None, "score": 0.0}``.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory(); store = PMMemoryStore()
    >>> _ = store.set("pricing", "cached pricing page")
    >>> resolve_context("demo", "pricing", store, memory=mem)
    {'source': 'short_term', 'value': 'cached pricing page', 'score': 1.0}
    >>> resolve_context("demo", "refund policy", store, memory=mem)
    {'source': 'miss', 'value': None, 'score': 0.0}
    """
    validate_id(session_id, "session_id")
    validate_text(key, "key")
    _check_store(store)
    if isinstance(min_score, bool) or not isinstance(min_score, (int, float)) \
            or not 0 < min_score <= 1:
        raise ValueError(f"min_score must be in (0, 1], got {min_score!r}")
    if not isinstance(reinforce, bool):
        raise ValueError(f"reinforce must be a bool, got {reinforce!r}")
    hit, value, _ = store.peek(key, reinforce=reinforce)
    if hit:
        policy = store.promotion_policy
        if policy is not None and reinforce:
            policy.observe(session_id, key, value, store.access_count(key), memory)
        return {"source": "short_term", "value": value, "score": 1.0}
    hits = search_graph(session_id, key, max_depth=0, top_k=1, min_coverage=min_score,
                        memory=memory, reinforce=reinforce)
    if hits:
        top = hits[0]
        return {"source": "long_term", "value": top["content"], "score": top["coverage"],
                "node_id": top["node_id"]}
    return {"source": "miss", "value": None, "score": 0.0}


def promote_to_long_term(session_id: str, key: str, value: str, node_type: str = "concept", *,
                         memory=None) -> dict[str, Any]:
    """Write ``key`` → ``value`` as a long-term node (label ``key``); returns its id.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> out = promote_to_long_term("s1", "authentication", "fresh login flow", memory=mem)
    >>> out["promoted"], mem.get(out["node_id"])["metadata"]["label"]
    (True, 'authentication')
    """
    node_id = upsert_node(session_id, node_type, key, value, memory=memory)
    return {"promoted": True, "node_id": node_id, "session_id": session_id, "key": key,
            "node_type": node_type}


def get_memory_status(session_id: str, store: PMMemoryStore, *, memory=None) -> dict[str, Any]:
    """Short-term and long-term counts (purely observational: nothing is touched).

    ``long_term`` counts live (not archived) nodes by type and the live edges touching them by
    type; ``promotions`` is the number the store's policy has made (0 without one).
    """
    validate_id(session_id, "session_id")
    _check_store(store)
    mem = resolve_memory(memory)
    with mem.store.lock:
        ws = mem.store.workspace(mem.workspace_id)
        nodes = ws.node_rows()
        node_types: dict[str, int] = {}
        for i in nodes:
            t = ws.item(i).metadata["node_type"]
            node_types[t] = node_types.get(t, 0) + 1
        table = ws.graph_view().table
        is_node = np.zeros(len(ws), dtype=bool)
        is_node[nodes] = True
        src, dst = table.src.view(), table.dst.view()
        touching = table.alive() & (is_node[src] | is_node[dst])
        codes, counts = np.unique(table.code.view()[touching], return_counts=True)
        edge_types = {table.type_names[c]: int(k) for c, k in zip(codes.tolist(), counts.tolist())}
        edges = int(touching.sum())
    policy = store.promotion_policy
    return {
        "session_id": session_id,
        "short_term": {"slots_used": len(store), "silo_size": store.silo_size},
        "long_term": {"nodes": len(nodes), "edges": edges,
                      "node_types": dict(sorted(node_types.items())),
                      "edge_types": dict(sorted(edge_types.items()))},
        "promotion_threshold": policy.threshold if policy is not None else PROMOTION_THRESHOLD,
        "promotion_policy": "on" if policy is not None else "off",
        "promotions": len(policy.promotions) if policy is not None else 0,
    }
