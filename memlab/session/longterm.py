"""The long-term graph API of seed 000 (SPEC §6.1), on the one store that surfacing reads.

A long-term *node* is an ordinary item whose metadata carries ``node_type`` and ``label`` (and
``title`` = label, and the ``session_id`` that wrote it); a relation is an ordinary typed edge. So
a promoted fact is found by ``get_working_context``, spread to by graph strategies, and archived by
maintenance like any other memory. Nodes are matched by ``(node_type, normalised label)``.

Every function takes ``memory=None``: the process-wide default memory
(:func:`memlab.session.engine.default_memory`) unless a :class:`~memlab.Memory` is passed.

Scores are absolute, in [0, 1]: 1.0 for a node whose label equals the query (normalised), else
the idf-weighted share of the query's terms found in the node's text
(:meth:`~memlab.signals.bm25.BM25Index.coverage`); a neighbour at ``h`` hops scores its hit's
score times ``0.5 ** h``.
"""

from __future__ import annotations

import math
import warnings
from typing import Any, ClassVar

import numpy as np

from memlab._deprecation import RenamedKeys
from memlab._registry import register
from memlab.errors import MemlabDeprecationWarning
from memlab.graph.spreading import SpreadConfig, run_spread
from memlab.model import (
    validate_edge_type,
    validate_id,
    validate_metadata,
    validate_text,
    validate_weight,
)
from memlab.session.default import resolve_memory
from memlab.text import normalise_title

__all__ = ["NODE_TYPES", "register_node_type", "upsert_node", "search_graph", "create_relation",
           "retrieve_with_traversal", "prune_stale_links", "add_interlinked_context",
           "resolve_memory", "GraphHit"]

# node type -> the memory type its items get (so procedures surface as procedural, …)
NODE_TYPES: dict[str, str] = {
    "concept": "concept", "entity": "concept", "fact": "semantic", "preference": "semantic",
    "document": "semantic", "event": "episodic", "procedure": "procedural",
}
NEIGHBOUR_DAMPING = 0.5


def register_node_type(node_type: str, memory_type: str = "concept", *,
                       replace: bool = False) -> None:
    """Accept ``node_type`` in :func:`upsert_node`, stored as items of ``memory_type``; a node
    type already registered is refused (ValueError) unless ``replace=True``."""
    validate_id(node_type, "node_type")
    validate_id(memory_type, "memory_type")
    register(NODE_TYPES, node_type, memory_type, what="node type", check_callable=False,
             replace=replace)


def _check_node_type(node_type: Any) -> str:
    if node_type not in NODE_TYPES:
        raise ValueError(f"node_type must be one of {sorted(NODE_TYPES)}, got {node_type!r}")
    return node_type


def _check_int(value: Any, name: str, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"{name} must be an integer in {low}..{high}, got {value!r}")
    return value


def _node_dict(ws, idx: int) -> dict[str, Any]:
    item = ws.item(idx)
    return {"node_id": item.item_id, "label": item.metadata.get("label", item.item_id),
            "node_type": item.metadata.get("node_type"), "content": item.content,
            "memory_type": item.memory_type}


def _prepare_node(store, ws, session_id, node_type, label, content, metadata):
    """Validate one node; returns (existing item number or None, NewItem or merged metadata)."""
    validate_id(session_id, "session_id")
    _check_node_type(node_type)
    validate_text(label, "label")
    if not normalise_title(label):
        raise ValueError(f"label must contain a letter or digit, got {label!r}")
    validate_text(content, "content")
    extra = validate_metadata(metadata)
    fields = {"node_type": node_type, "label": label, "title": label, "session_id": session_id}
    existing = ws.node_of(node_type, normalise_title(label))
    if existing is not None:
        return existing, {**ws.item(existing).metadata, **extra, **fields}
    return None, store.prepare_item(content, NODE_TYPES[node_type], {**extra, **fields})


def upsert_node(session_id: str, node_type: str, label: str, content: str,
                metadata: dict | None = None, *, memory=None) -> str:
    """Create a long-term node, or update the one with the same type and label; returns its id.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> a = upsert_node("s1", "concept", "Auth flow", "fresh login flow", memory=mem)
    >>> upsert_node("s1", "concept", "auth  FLOW", "login flow v2", memory=mem) == a
    True
    >>> mem.get(a)["content"]
    'login flow v2'
    """
    mem = resolve_memory(memory)
    store = mem.store
    with store.lock:
        ws = store.workspace(mem.workspace_id)
        existing, payload = _prepare_node(store, ws, session_id, node_type, label, content,
                                          metadata)
        now = mem.clock.now()
        if existing is not None:
            store.update_item(mem.workspace_id, existing, now, content=content, metadata=payload,
                              kind="upserted", detail={"session_id": session_id})
            return ws.item_id_of(existing)
        (node_id,) = store.add_items(mem.workspace_id, [payload], now,
                                     mem.config.activation_initial)
        return node_id


def _direct_hits(ws, query: str) -> tuple[np.ndarray, np.ndarray]:
    """Long-term nodes matching ``query`` with their absolute scores (unsorted)."""
    analyze, index = ws.bm25_for(None)
    docs, cover = index.coverage(analyze(query))
    if len(docs):
        keep = ws.longterm_mask()[docs] & ws.eligible_mask()[docs]
        docs, cover = docs[keep], cover[keep]
    label = normalise_title(query)
    exact = [ws.node_of(t, label) for t in sorted(NODE_TYPES) if ws.node_of(t, label) is not None]
    if exact:
        docs = np.concatenate([docs, np.array(exact, np.int64)])
        cover = np.concatenate([cover, np.ones(len(exact))])
        order = np.lexsort((-cover, docs))
        docs, cover = docs[order], cover[order]
        first = np.concatenate(([True], docs[1:] != docs[:-1]))
        docs, cover = docs[first], cover[first]
    return docs, cover


class GraphHit(RenamedKeys):
    """One :func:`search_graph` hit: a plain dict, whose ``"score"`` key is the deprecated
    name of ``"coverage"`` (reading it warns; it goes in the next release: "score" means the
    composite in a context record)."""

    what = "search_graph: the hit"
    renamed: ClassVar[dict] = {"score": ("coverage", ("the idf-weighted share of the query's "
                                                      "terms a node contains, damped per hop"))}


def search_graph(session_id: str, query: str, max_depth: int = 1, top_k: int = 5, *,
                 min_coverage: float = 0.0, memory=None, reinforce: bool = True,
                 min_score: float | None = None) -> list[dict[str, Any]]:
    """Long-term nodes matching ``query`` and their neighbours within ``max_depth`` hops.

    Returns up to ``top_k`` direct hits (``depth`` 0) and up to ``top_k`` neighbours per hit,
    each ``{node_id, label, node_type, content, memory_type, coverage, depth, via}`` (a
    :class:`GraphHit`), by coverage, then depth, then id. ``coverage`` is in [0, 1]: the
    idf-weighted share of the query's terms a direct hit contains (1.0 for an exact label),
    times ``NEIGHBOUR_DAMPING`` per hop for a neighbour. Hits below ``min_coverage`` are left
    out. Direct hits are explicit retrievals: their activation is reinforced.

    ``min_score`` and the hits' ``score`` key are the deprecated names of ``min_coverage`` and
    ``coverage`` (a DeprecationWarning; they go in the next release).

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> a = upsert_node("s1", "concept", "authentication", "fresh login flow", memory=mem)
    >>> b = upsert_node("s1", "fact", "tokens", "JWT tokens expire after 15 minutes", memory=mem)
    >>> create_relation("s1", a, b, memory=mem)["relation_type"]
    'RELATED'
    >>> [(h["label"], h["coverage"], h["depth"]) for h in search_graph("s1", "authentication", memory=mem)]
    [('authentication', 1.0, 0), ('tokens', 0.5, 1)]
    """
    if min_score is not None:
        warnings.warn("search_graph: min_score is now called min_coverage; min_score goes in "
                      "the next release", MemlabDeprecationWarning, stacklevel=2)
        if min_coverage != 0.0:
            raise ValueError(f"pass min_coverage or its deprecated name min_score, not both "
                             f"(got {min_coverage!r} and {min_score!r})")
        min_coverage = min_score
    validate_id(session_id, "session_id")
    validate_text(query, "query")
    _check_int(max_depth, "max_depth", 0, 5)
    _check_int(top_k, "top_k", 1, 100)
    if isinstance(min_coverage, bool) or not isinstance(min_coverage, (int, float)) \
            or not 0 <= min_coverage <= 1:
        raise ValueError(f"min_coverage must be in [0, 1], got {min_coverage!r}")
    if not isinstance(reinforce, bool):
        raise ValueError(f"reinforce must be a bool, got {reinforce!r}")
    mem = resolve_memory(memory)
    store = mem.store
    with store.lock:
        ws = store.workspace(mem.workspace_id)
        docs, score = _direct_hits(ws, query)
        keep = score >= max(min_coverage, 1e-12)
        docs, score = docs[keep], score[keep]
        ids = ws.ids_of(docs)
        order = sorted(range(len(ids)), key=lambda p: (-score[p], ids[p]))[:top_k]
        results: dict[int, dict[str, Any]] = {}
        for p in order:
            i = int(docs[p])
            results[i] = {**_node_dict(ws, i), "coverage": float(score[p]), "depth": 0,
                          "via": None}
        if max_depth:
            config = SpreadConfig(depth=max_depth, max_fan_out=top_k, edge_types="*")
            for p in order:
                hit = int(docs[p])
                spread = run_spread(ws, np.array([hit]), config)
                for i, hops in zip(spread.indices.tolist(), spread.hops.tolist()):
                    value = float(score[p]) * NEIGHBOUR_DAMPING ** hops
                    if i not in results or results[i]["coverage"] < value:
                        results[i] = {**_node_dict(ws, i), "coverage": value, "depth": hops,
                                      "via": ws.item_id_of(hit)}
        if order and reinforce:
            store.record_retrieval(mem.workspace_id, [int(docs[p]) for p in order],
                                   mem.clock.now(), increment=mem.config.activation_increment,
                                   half_life_h=mem.config.activation_half_life_h,
                                   kind="search_graph")
        ranked = sorted(results.values(),
                        key=lambda r: (-r["coverage"], r["depth"], r["node_id"]))
        return [GraphHit(r, score=r["coverage"]) for r in ranked]


def create_relation(session_id: str, src_id: str, dst_id: str, relation_type: str = "RELATED",
                    weight: float = 1.0, *, memory=None) -> dict[str, Any]:
    """A typed, weighted edge between two items (re-writing it refreshes it and its weight)."""
    validate_id(session_id, "session_id")
    mem = resolve_memory(memory)
    mem.add_edge(src_id, dst_id, relation_type, weight)
    return {"src": src_id, "dst": dst_id, "relation_type": relation_type,
            "weight": float(weight)}


def retrieve_with_traversal(session_id: str, node_id: str, max_depth: int = 2, *,
                            max_fan_out: int = 20, memory=None) -> dict[str, Any]:
    """A node and what lies within ``max_depth`` hops of it (any propagating edge type)."""
    validate_id(session_id, "session_id")
    _check_int(max_depth, "max_depth", 1, 5)
    _check_int(max_fan_out, "max_fan_out", 1, 1000)
    mem = resolve_memory(memory)
    with mem.store.lock:
        ws = mem.store.workspace(mem.workspace_id)
        idx = ws.require(node_id, "node_id")
        spread = run_spread(ws, np.array([idx]),
                            SpreadConfig(depth=max_depth, max_fan_out=max_fan_out, edge_types="*"))
        related = [{**_node_dict(ws, i), "depth": h, "score": NEIGHBOUR_DAMPING ** h}
                   for i, h in zip(spread.indices.tolist(), spread.hops.tolist())]
        return {"node": _node_dict(ws, idx), "related": related,
                "truncated": spread.truncated}


def prune_stale_links(session_id: str, *, older_than_days: float = 30.0, min_weight: float = 0.5,
                      dry_run: bool = False, memory=None) -> dict[str, Any]:
    """Remove stale edges of the long-term graph; returns ``{pruned, edges, dry_run}``.

    Stale: an edge touching an archived item, or an edge touching a long-term node that nobody
    re-wrote for ``older_than_days`` and whose weight is below ``min_weight``. Edges of unknown
    age (written before timestamps were kept) are never stale by age.
    """
    validate_id(session_id, "session_id")
    for name, value in (("older_than_days", older_than_days), ("min_weight", min_weight)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {value!r}")
    if not isinstance(dry_run, bool):
        raise ValueError(f"dry_run must be a bool, got {dry_run!r}")
    mem = resolve_memory(memory)
    store = mem.store
    with store.lock:
        ws = store.workspace(mem.workspace_id)
        table = ws.graph_view().table
        src, dst = table.src.view(), table.dst.view()
        archived = ws.archived_mask()
        node = ws.longterm_mask()
        cutoff = mem.clock.now().timestamp() - older_than_days * 86400.0
        ts = table.updated_ts.view()
        stale_age = (node[src] | node[dst]) & (ts < cutoff) & (table.weight.view() < min_weight)
        stale = table.alive() & (archived[src] | archived[dst] | stale_age)
        rows = np.flatnonzero(stale)
        edges = [{"src": ws.item_id_of(s), "dst": ws.item_id_of(d),
                  "relation_type": table.type_names[c], "weight": w}
                 for s, d, c, w in zip(src[rows].tolist(), dst[rows].tolist(),
                                       table.code.view()[rows].tolist(),
                                       table.weight.view()[rows].tolist())]
        if not dry_run:
            store.remove_edges(mem.workspace_id, rows)
        return {"pruned": len(rows), "edges": edges, "dry_run": dry_run}


def add_interlinked_context(session_id: str, items: list[dict[str, Any]],
                            relation_type: str = "RELATED", weight: float = 1.0, *,
                            memory=None) -> dict[str, Any]:
    """Upsert several nodes and link every pair both ways, all or nothing.

    Each entry is ``{"label", "content"[, "node_type" (concept)][, "metadata"]}``. Returns
    ``{node_ids, relations}``.
    """
    validate_id(session_id, "session_id")
    if not isinstance(items, (list, tuple)) or not items:
        raise ValueError(f"items must be a non-empty list of node dicts, got {items!r:.80}")
    mem = resolve_memory(memory)
    store = mem.store
    with store.lock:
        ws = store.workspace(mem.workspace_id)
        plans = []
        seen: set[tuple[str, str]] = set()
        for pos, entry in enumerate(items):
            if not isinstance(entry, dict):
                raise ValueError(f"items[{pos}] must be a dict, got {entry!r:.80}")
            unknown = set(entry) - {"label", "content", "node_type", "metadata"}
            if unknown:
                raise ValueError(f"items[{pos}] has unknown keys {sorted(unknown)}")
            node_type = entry.get("node_type", "concept")
            try:
                plans.append(_prepare_node(store, ws, session_id, node_type, entry.get("label"),
                                           entry.get("content"), entry.get("metadata")))
            except ValueError as exc:
                raise type(exc)(f"items[{pos}]: {exc}") from None
            key = (node_type, normalise_title(entry["label"]))
            if key in seen:
                raise ValueError(f"items[{pos}]: label {entry['label']!r} appears twice")
            seen.add(key)
        validate_edge_type(relation_type)
        validate_weight(weight, "weight", allow_zero=False)
        # validated: write (one transaction on a durable store)
        with store.transaction():
            node_ids = [upsert_node(session_id, entry.get("node_type", "concept"),
                                    entry["label"], entry["content"], entry.get("metadata"),
                                    memory=mem)
                        for entry in items]
            pairs = [(a, b) for a in node_ids for b in node_ids if a != b]
            if pairs:
                mem.add_edges([(a, b, relation_type, weight) for a, b in pairs])
        return {"node_ids": node_ids, "relations": len(pairs)}
