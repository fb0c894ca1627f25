"""Personalized PageRank over a memory's workspace: every policy around the algorithm, once.

:mod:`memlab.graph.ppr` holds the algorithms: deterministic functions over a graph snapshot that
raise :class:`~memlab.errors.PPRConvergenceError` rather than return a truncated answer. Running
one over a workspace needs more than an algorithm, and this module is where each of those
decisions is made, in this order (:func:`_run`, the one implementation):

1. **seeds**: none of them is an item → ``skipped="no_seeds"``, nothing computed;
2. **node cap**: the workspace has more than ``config.max_nodes`` items → ``skipped="node_cap"``;
3. **cache**: the workspace's result cache (keyed by graph version, sorted seeds and the
   configuration's :meth:`~memlab.graph.ppr.PPRConfig.cache_key`) answers → ``cache="hit"``;
4. **saturation**: at most :data:`MAX_IN_FLIGHT` computations run at once in the process; a
   caller finding the slots taken returns at once with ``saturated=True`` and no scores;
5. **time budget**: ``config.budget_ms`` becomes the method's deadline; an answer it cut
   (``budget_exhausted``, not by ``budget_rounds``) is used but never cached
   (``cache="not_stored:time_budget"``), since a later call could get further;
6. **convergence**: a method that fails to converge (``max_iter``) raises
   :class:`~memlab.errors.PPRConvergenceError`.

Three entry points share it. :func:`surfacing_ppr` is the ``ppr`` stage's: every decision is
recorded in the notes it returns (the record's ``notes["ppr"]``), and a failure to converge is
noted as ``error`` with no result. :func:`ppr_result` (a :class:`~memlab.graph.ppr.PPRResult`
that says what happened) and :func:`personalized_pagerank` (``{item_id: mass}``, raising
:class:`~memlab.errors.PPRUnavailable` or ``PPRConvergenceError`` rather than returning a
partial answer) are the user-facing ones, over a ``Memory``. They lived in
:mod:`memlab.graph.ppr` until this release, which keeps deprecated aliases of them (and of
``run_ppr``) for one release without importing this module: this module installs them there.

The store's shared lock is taken only after a slot, so a saturated caller never waits for it.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from memlab._arrays import sorted_unique
from memlab.errors import PPRConvergenceError, PPRUnavailable
from memlab.graph import ppr as _ppr
from memlab.graph._common import method_name, seed_list
from memlab.graph.ppr import PPR_METHODS, PPRCache, PPRConfig, PPRResult

__all__ = ["MAX_IN_FLIGHT", "personalized_pagerank", "ppr_result", "run_ppr", "surfacing_ppr"]

#: PPR computations that may run at once in the process (4. saturation)
MAX_IN_FLIGHT = 2
_SLOTS = threading.BoundedSemaphore(MAX_IN_FLIGHT)


def _run(ws: Any, seeds: np.ndarray, config: PPRConfig, *, lock: Any, cache: Any,
         cache_scope: tuple, started: float, result: PPRResult, notes: dict[str, Any]
         ) -> PPRResult:
    """Policies 1-5 of the module docstring, in order: ``result`` (empty, or what it says was
    skipped) or a new filled one; ``notes["cache"]`` says what the cache did. Raises
    PPRConvergenceError (6.) from the method."""
    seeds = sorted_unique(np.asarray(seeds, dtype=np.int64))
    if not len(seeds):  # 1. seeds
        result.skipped = "no_seeds"
        return result
    n_items = len(ws)
    if config.max_nodes is not None and n_items > config.max_nodes:  # 2. node cap
        result.skipped = "node_cap"
        return result
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
            notes["cache"] = "hit"
            return _finish(ws, result, *hit, cache_hit=True, top_k=config.top_k)
    else:
        notes["cache"] = "off"
    if not _SLOTS.acquire(blocking=False):  # 4. saturation
        result.saturated = True
        return result
    try:
        with lock:
            n_items = len(ws)
            sized = (n_items,) if config.tol_scaled_by_n else ()
            key = cache_scope + (view.version, seed_key, config.cache_key()) + sized
            snapshot = view.snapshot(n_items)
            fn = config.method if callable(config.method) else PPR_METHODS[config.method]
            # 5. the time budget, as the method's deadline
            deadline = math.inf if config.budget_ms is None else started + config.budget_ms / 1e3
            out = fn(snapshot, seeds, config, deadline)  # 6. may raise
            try:
                nodes, mass, info = out
                info = {"method": result.requested, **info}
                nodes, mass = np.asarray(nodes, np.int64), np.asarray(mass, np.float64)
                if nodes.shape != mass.shape or nodes.ndim != 1:
                    raise ValueError
            except (TypeError, ValueError):
                raise ValueError(f"method {result.requested!r} must return (item_numbers, mass, "
                                 f"info_dict) with 1-d arrays of one length, got "
                                 f"{type(out).__name__} {str(out)[:80]}") from None
            # an answer the time budget cut depends on machine load: never serve it again
            cut_by_time = bool(info.get("budget_exhausted")) and (
                config.budget_rounds is None
                or (info.get("iterations") or 0) < config.budget_rounds)
            if use_cache:
                if cut_by_time:
                    notes["cache"] = "not_stored:time_budget"
                else:
                    cache.put(key, (nodes, mass, info))
                    notes["cache"] = "stored"
            return _finish(ws, result, nodes, mass, info, cache_hit=False, top_k=config.top_k)
    finally:
        _SLOTS.release()


def _start(config: PPRConfig) -> tuple[float, PPRResult, float]:
    """The clock's start, the empty result of one computation and the milliseconds spent
    warming numba's kernels first (0.0 but for the process's first PPR on the numba backend)."""
    compiled_ms = 0.0
    if not callable(config.method) and config.method in ("auto", "exact", "push") \
            and config.backend != "numpy":
        # compiled once per process, before the time budget's clock starts
        compiled_ms = float(_ppr.warm_kernels() or 0.0)
    started = time.perf_counter()
    return started, PPRResult({}, np.empty(0, np.int64), np.empty(0),
                              method_name(config.method, PPR_METHODS),
                              budget_ms=config.budget_ms), compiled_ms


def surfacing_ppr(ws: Any, seeds: np.ndarray, config: PPRConfig, *, lock: Any, cache: Any = None,
                  cache_scope: tuple = ()) -> tuple[PPRResult | None, dict[str, Any]]:
    """PPR from item numbers ``seeds`` of workspace ``ws`` under every policy (the ``ppr``
    stage's entry point).

    Returns ``(result, notes)``: ``result`` is None only when the method did not converge
    (``notes["error"]`` says why); ``notes`` is :meth:`PPRResult.info` plus ``cache`` (``"off"``,
    ``"hit"``, ``"stored"`` or ``"not_stored:time_budget"``; absent when nothing was looked up)
    and ``compiled_ms``: the time this call spent loading or compiling numba's kernels before
    its time budget started (non-zero only for the process's first PPR on the numba backend;
    the ``ppr`` stage's time includes it, ``elapsed_ms`` does not), which is why a process's
    first multi-hop query can be slow.
    ``cache`` is a :class:`~memlab.graph.ppr.PPRCache`, None for the workspace's own, or False
    for none; ``lock`` is the store's shared lock.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> _ = mem.add_many([{"item_id": i, "content": f"item {i}"} for i in "abc"])
    >>> mem.add_edges([("a", "b"), ("b", "c")])
    2
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
    started, result, compiled_ms = _start(config)
    notes: dict[str, Any] = {"compiled_ms": compiled_ms}
    try:
        out = _run(ws, seeds, config, lock=lock, cache=cache, cache_scope=cache_scope,
                   started=started, result=result, notes=notes)
    except PPRConvergenceError as exc:  # 6. convergence: noted, no result
        result.elapsed_ms = (time.perf_counter() - started) * 1e3
        return None, {**result.info(), **notes, "error": str(exc)}
    out.elapsed_ms = (time.perf_counter() - started) * 1e3
    return out, {**out.info(), **notes}


def _finish(ws: Any, result: PPRResult, nodes: np.ndarray, mass: np.ndarray, info: dict, *,
            cache_hit: bool, top_k: int | None) -> PPRResult:
    """``result`` filled with the ``top_k`` best items: mass descending, then item id."""
    if top_k is not None and len(nodes) > top_k:
        kth = np.partition(mass, len(mass) - top_k)[len(mass) - top_k]
        keep = np.flatnonzero(mass >= kth)  # ties at the cut compete on item id below
        nodes, mass = nodes[keep], mass[keep]
    # by mass descending (numpy's stable sort), then runs of equal mass by item id: the
    # workspace's id order as integer keys, asked for the tied items only (a workspace written
    # since its last full id rank orders just those), and ids only for the kept items
    order = np.argsort(-mass, kind="stable")
    ranked = mass[order]
    equal = ranked[1:] == ranked[:-1]
    if equal.any():
        tied = np.zeros(len(ranked), bool)
        tied[1:] |= equal
        tied[:-1] |= equal
        at = order[tied]
        keys = np.zeros(len(nodes), np.int64)  # untied items: alone at their mass, any key
        keys[at] = ws.id_sort_keys(nodes[at])
        order = np.lexsort((keys, -mass))
    order = order[:top_k]
    ids = ws.ids_of(nodes[order])
    result.indices, result.mass = nodes[order], mass[order]
    result.scores = dict(zip(ids, result.mass.tolist()))
    result.method = info.get("method")
    result.iterations = info.get("iterations") or 0
    result.converged = info.get("converged")
    result.residual = info.get("residual")
    result.budget_exhausted = bool(info.get("budget_exhausted", False))
    result.epsilon = info.get("epsilon")
    result.backend = info.get("backend")
    result.cache_hit = cache_hit
    return result


# ------------------------------------------------------------------ over a Memory (user-facing)
def run_ppr(ws: Any, seeds: np.ndarray, config: PPRConfig, *, lock: Any, cache: Any = None,
            cache_scope: tuple = ()) -> PPRResult:
    """PPR from item numbers ``seeds`` of workspace ``ws``: :func:`surfacing_ppr`'s policies,
    returning the :class:`~memlab.graph.ppr.PPRResult` and raising
    :class:`~memlab.errors.PPRConvergenceError` when the method does not converge.

    ``lock`` (the store's lock, shared side) keeps writes out while the computation reads the
    graph; ``cache`` is a :class:`~memlab.graph.ppr.PPRCache`, None for the workspace's own, or
    False for none.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> _ = mem.add("item a", item_id="a"), mem.add("item b", item_id="b")
    >>> mem.add_edge("a", "b")
    >>> ws = mem.store.workspace("default")
    >>> run_ppr(ws, np.array([0]), PPRConfig(method="exact"), lock=mem.store.lock.shared()).method
    'exact'
    """
    started, result, _ = _start(config)
    out = _run(ws, seeds, config, lock=lock, cache=cache, cache_scope=cache_scope,
               started=started, result=result, notes={})
    out.elapsed_ms = (time.perf_counter() - started) * 1e3
    return out


def ppr_result(memory, seed_item_ids, *, alpha: float = 0.85, top_k: int | None = 100,
               budget_ms: float | None = 200.0, cache=None, workspace_id: str | None = None,
               method: str | Callable = "auto", **options: Any) -> PPRResult:
    """:func:`personalized_pagerank` with the full :class:`~memlab.graph.ppr.PPRResult`: a
    skipped, saturated or budget-cut computation is returned, flagged, not raised.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> for i in "ab": _ = mem.add(f"item {i}", item_id=i)
    >>> mem.add_edge("a", "b")
    >>> result = ppr_result(mem, ["a", "ghost"], method="exact")
    >>> sorted(result.scores), result.unknown_seeds, result.skipped
    (['a', 'b'], ['ghost'], None)
    """
    config = PPRConfig(method=method, alpha=alpha, top_k=top_k, budget_ms=budget_ms, **options)
    if not (hasattr(memory, "store") and hasattr(memory, "workspace_id")):
        raise ValueError(f"memory must be a Memory, got {type(memory).__name__} "
                         f"{str(memory)[:60]!r}")
    if workspace_id is not None and workspace_id != memory.workspace_id:
        raise ValueError(f"workspace_id must be the memory's workspace "
                         f"{memory.workspace_id!r} (or None), got {workspace_id!r}")
    if cache is not None and cache is not False and not isinstance(cache, PPRCache):
        raise ValueError(f"cache must be a PPRCache, None or False, got {cache!r}")
    seed_ids = list(dict.fromkeys(seed_list(seed_item_ids)))
    ws = memory.store.workspace(memory.workspace_id)
    known = [ws.row_of(s) for s in seed_ids if ws.row_of(s) is not None]
    scope = () if cache is None or cache is False else ("workspace", memory.workspace_id)
    result = run_ppr(ws, np.array(known, dtype=np.int64), config, lock=memory.store.lock.shared(),
                     cache=cache, cache_scope=scope)
    result.unknown_seeds = [s for s in seed_ids if ws.row_of(s) is None]
    return result


def personalized_pagerank(memory, seed_item_ids, *, alpha: float = 0.85, top_k: int | None = 100,
                          budget_ms: float | None = 200.0, cache=None, workspace_id: str | None = None,
                          method: str | Callable = "auto", **options: Any) -> dict[str, float]:
    """Personalized PageRank over ``memory``'s workspace from ``seed_item_ids`` (SPEC §5.2).

    Parameters
    ----------
    memory : Memory
        The facade whose workspace graph is ranked.
    seed_item_ids : list of str
        Personalization, uniform over the distinct ids present (others are dropped).
    alpha, top_k, budget_ms, method, **options
        See :class:`~memlab.graph.ppr.PPRConfig` (``options`` are its other fields, e.g.
        ``epsilon`` or ``budget_rounds``; ``budget_ms=None`` runs without a time budget).
    cache : PPRCache, None or False
        None uses the workspace's own cache, False none.
    workspace_id : str, optional
        Accepted for the seed's signature; must equal the memory's workspace when given.

    Returns
    -------
    dict
        ``{item_id: mass}``, highest first (ties by item id); ``{}`` when no seed is an item.

    Raises
    ------
    PPRConvergenceError
        ``max_iter`` passed without convergence, or a budget (``budget_ms``,
        ``budget_rounds``) stopped the computation: this function never returns a truncated
        answer (:func:`ppr_result` returns it, flagged ``budget_exhausted``).
    PPRUnavailable
        Not computed: two computations are already running (``reason="saturated"``), or the
        workspace has more than ``max_nodes`` items (``"node_cap"``).

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> for i in "abc": _ = mem.add(f"item {i}", item_id=i)
    >>> mem.add_edge("a", "b"); mem.add_edge("b", "c")
    >>> scores = personalized_pagerank(mem, ["a"], method="exact", tol=1e-12)
    >>> [(k, round(v, 4)) for k, v in scores.items()]
    [('a', 0.3887), ('b', 0.3304), ('c', 0.2809)]
    """
    result = ppr_result(memory, seed_item_ids, alpha=alpha, top_k=top_k, budget_ms=budget_ms,
                        cache=cache, workspace_id=workspace_id, method=method, **options)
    if result.saturated:
        raise PPRUnavailable("saturated")
    if result.skipped == "node_cap":
        raise PPRUnavailable("node_cap")
    if result.budget_exhausted:
        reason = "rounds budget" if options.get("budget_rounds") is not None and \
            result.iterations >= options["budget_rounds"] else "time budget"
        raise PPRConvergenceError(result.iterations, result.residual or math.nan, options.get(
            "tol", 1e-6), reason=reason, partial=(result.indices, result.mass, result.info()))
    return result.scores


# the deprecated aliases memlab.graph.ppr keeps for one release call these (no upward import)
_ppr.install_moved(ppr_result=ppr_result, personalized_pagerank=personalized_pagerank,
                   run_ppr=run_ppr, MAX_IN_FLIGHT=MAX_IN_FLIGHT)
