"""The one surfacing-level wrapper around Personalized PageRank: every policy in one place.

:mod:`memlab.graph.ppr` holds the algorithms: deterministic functions over a graph snapshot that
raise :class:`~memlab.errors.PPRConvergenceError` rather than return a truncated answer.
Surfacing needs more than an algorithm, and :func:`surfacing_ppr` is where each of those
decisions is made, in this order, and recorded in the notes it returns (the record's
``notes["ppr"]``):

1. **seeds**: none of them is an item → ``skipped="no_seeds"``, nothing computed;
2. **node cap**: the workspace has more than ``config.max_nodes`` items → ``skipped="node_cap"``;
3. **cache**: the workspace's result cache (keyed by graph version, sorted seeds and the
   configuration's :meth:`~memlab.graph.ppr.PPRConfig.cache_key`) answers → ``cache="hit"``;
4. **saturation**: at most :data:`~memlab.graph.ppr.MAX_IN_FLIGHT` computations run at once in
   the process (the slots :func:`memlab.graph.ppr.ppr_result` also takes); a caller finding
   them taken returns at once with ``saturated=True`` and no scores;
5. **time budget**: ``config.budget_ms`` becomes the method's deadline; an answer it cut
   (``budget_exhausted``, not by ``budget_rounds``) is used but never cached
   (``cache="not_stored:time_budget"``), since a later call could get further;
6. **convergence**: a method that fails to converge (``max_iter``) is noted as ``error`` and the
   caller gets no result.

The store's shared lock is taken only after a slot, so a saturated caller never waits for it.
"""

from __future__ import annotations

import math
import time
from typing import Any

import numpy as np

from memlab._arrays import sorted_unique
from memlab.errors import PPRConvergenceError
from memlab.graph import ppr as _ppr
from memlab.graph.ppr import PPR_METHODS, PPRConfig, PPRResult

__all__ = ["surfacing_ppr"]

# the process-wide computation slots, shared with memlab.graph.ppr's user-facing ppr_result
# until that delegates here (graph/ppr.py is being changed elsewhere; see the README)
_SLOTS = _ppr._IN_FLIGHT


def _requested(config: PPRConfig) -> str:
    method = config.method
    if isinstance(method, str):
        return method
    return next((name for name, fn in PPR_METHODS.items() if fn is method),
                f"{getattr(method, '__module__', '?')}."
                f"{getattr(method, '__qualname__', repr(method))}")


def surfacing_ppr(ws: Any, seeds: np.ndarray, config: PPRConfig, *, lock: Any, cache: Any = None,
                  cache_scope: tuple = ()) -> tuple[PPRResult | None, dict[str, Any]]:
    """PPR from item numbers ``seeds`` of workspace ``ws`` under every surfacing policy.

    Returns ``(result, notes)``: ``result`` is None only when the method did not converge
    (``notes["error"]`` says why); ``notes`` is :meth:`PPRResult.info` plus ``cache`` (``"off"``,
    ``"hit"``, ``"stored"`` or ``"not_stored:time_budget"``; absent when nothing was looked up).
    ``cache`` is a :class:`~memlab.graph.ppr.PPRCache`, None for the workspace's own, or False
    for none; ``lock`` is the store's shared lock.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> for i in "abc": _ = mem.add(f"item {i}", item_id=i)
    >>> mem.add_edge("a", "b"); mem.add_edge("b", "c")
    >>> ws = mem.store.workspace("default")
    >>> config = PPRConfig(method="exact", tol=1e-12, budget_ms=None)
    >>> result, notes = surfacing_ppr(ws, np.array([0]), config, lock=mem.store.lock.shared())
    >>> [(k, round(v, 4)) for k, v in result.scores.items()], notes["cache"]
    ([('a', 0.3887), ('b', 0.3304), ('c', 0.2809)], 'stored')
    >>> surfacing_ppr(ws, np.array([0]), config, lock=mem.store.lock.shared())[1]["cache"]
    'hit'
    >>> surfacing_ppr(ws, np.array([], dtype=np.int64), config, lock=None)[1]["skipped"]
    'no_seeds'
    """
    if not callable(config.method) and config.method in ("auto", "exact", "push") \
            and config.backend != "numpy":
        _ppr.warm_kernels()  # compiled once per process, before the time budget's clock starts
    started = time.perf_counter()
    requested = _requested(config)
    result = PPRResult({}, np.empty(0, np.int64), np.empty(0), requested,
                       budget_ms=config.budget_ms)
    extra: dict[str, Any] = {}

    def done(res: PPRResult | None, **more: Any) -> tuple[PPRResult | None, dict[str, Any]]:
        out = result if res is None else res
        out.elapsed_ms = (time.perf_counter() - started) * 1e3
        notes = {**out.info(), **extra, **more}
        return res, notes

    seeds = sorted_unique(np.asarray(seeds, dtype=np.int64))
    if not len(seeds):  # 1. seeds
        result.skipped = "no_seeds"
        return done(result)
    n_items = len(ws)
    if config.max_nodes is not None and n_items > config.max_nodes:  # 2. node cap
        result.skipped = "node_cap"
        return done(result)
    view = ws.graph_view()
    if cache is None:
        cache = view.cache
    use_cache = config.use_cache and cache is not False
    # networkx's stopping rule (tol * n) depends on the number of items, which adding an item
    # changes without changing the graph's version: then the item count is part of the key
    sized = (n_items,) if config.tol_scaled_by_n else ()
    seed_key = tuple(seeds.tolist())
    if use_cache:  # 3. cache (read without the lock: a key a write has passed is never reused)
        hit = cache.get(cache_scope + (view.version, seed_key, config.cache_key()) + sized)
        if hit is not None:
            extra["cache"] = "hit"
            return done(_finish(ws, result, *hit, cache_hit=True, top_k=config.top_k))
    else:
        extra["cache"] = "off"
    if not _SLOTS.acquire(blocking=False):  # 4. saturation
        result.saturated = True
        return done(result)
    try:
        with lock:
            n_items = len(ws)
            sized = (n_items,) if config.tol_scaled_by_n else ()
            key = cache_scope + (view.version, seed_key, config.cache_key()) + sized
            snapshot = view.snapshot(n_items)
            fn = config.method if callable(config.method) else PPR_METHODS[config.method]
            # 5. the time budget, as the method's deadline
            deadline = math.inf if config.budget_ms is None else started + config.budget_ms / 1e3
            try:
                nodes, mass, info = fn(snapshot, seeds, config, deadline)
            except PPRConvergenceError as exc:  # 6. convergence
                return done(None, error=str(exc))
            info = {"method": requested, **info}
            nodes, mass = np.asarray(nodes, np.int64), np.asarray(mass, np.float64)
            # an answer the time budget cut depends on machine load: never serve it again
            cut_by_time = bool(info.get("budget_exhausted")) and (
                config.budget_rounds is None
                or (info.get("iterations") or 0) < config.budget_rounds)
            if use_cache:
                if cut_by_time:
                    extra["cache"] = "not_stored:time_budget"
                else:
                    cache.put(key, (nodes, mass, info))
                    extra["cache"] = "stored"
            return done(_finish(ws, result, nodes, mass, info, cache_hit=False,
                                top_k=config.top_k))
    finally:
        _SLOTS.release()


def _finish(ws: Any, result: PPRResult, nodes: np.ndarray, mass: np.ndarray, info: dict, *,
            cache_hit: bool, top_k: int | None) -> PPRResult:
    """``result`` filled with the ``top_k`` best items (mass descending, then item id)."""
    if top_k is not None and len(nodes) > top_k:
        kth = np.partition(mass, len(mass) - top_k)[len(mass) - top_k]
        keep = np.flatnonzero(mass >= kth)  # ties at the cut compete on item id below
        nodes, mass = nodes[keep], mass[keep]
    ids = ws.ids_of(nodes)
    order = sorted(range(len(ids)), key=lambda p: (-mass[p], ids[p]))[:top_k]
    result.indices, result.mass = nodes[order], mass[order]
    result.scores = {ids[p]: float(mass[p]) for p in order}
    result.method = info.get("method")
    result.iterations = info.get("iterations") or 0
    result.converged = info.get("converged")
    result.residual = info.get("residual")
    result.budget_exhausted = bool(info.get("budget_exhausted", False))
    result.cache_hit = cache_hit
    return result
