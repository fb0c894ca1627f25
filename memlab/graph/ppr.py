"""Personalized PageRank (SPEC §5.2) on the CSR view: exact, local push, the networkx reference.

The graph is directed, over every edge type; parallel edges between a pair are summed and the
walk follows edges in proportion to weight. Personalization ``p`` is uniform over the distinct
seeds present (unknown seeds are dropped and reported). A node without outgoing weight (dangling)
sends its mass back to ``p``, as ``networkx.pagerank`` does by default, so every method here
solves the same equation::

    x = alpha * (W_norm^T x + (sum of x over dangling nodes) * p) + (1 - alpha) * p

Methods (:data:`PPR_METHODS`, each a registered callable):

``exact``
    Power iteration from ``p``, one CSR mat-vec per iteration. Stopping rule: stop after the
    first iteration whose L1 change ``||x_t - x_{t-1}||_1`` is below ``tol`` (or ``tol * n`` with
    ``tol_scaled_by_n=True``, networkx's rule); the remaining error is then at most
    ``alpha / (1 - alpha)`` times that change. Raises :class:`PPRConvergenceError` after
    ``max_iter`` iterations without meeting it.
``push``
    Andersen–Chung–Lang local push: residual starts at ``p``; every node whose residual exceeds
    ``epsilon`` times its out-degree keeps ``1 - alpha`` of it and pushes the rest along its
    out-edges. Work depends on ``epsilon``, not on the graph's size. Pushes run in synchronous
    rounds, each vectorised over all active nodes.
``networkx``
    Builds an ``nx.DiGraph`` per call and runs ``networkx.pagerank`` (the seed's behaviour, and
    the test oracle), with the same personalization, dangling handling and stopping rule.
``auto``
    ``exact`` while the graph has at most ``auto_exact_max_edges`` edges, ``push`` above.

Two budgets bound the iterative methods, each optional and reported as ``budget_exhausted``:
``budget_ms``, a wall-clock budget (what a latency-bound caller wants; results then depend on
machine load), and ``budget_rounds``, a count of iterations (``exact``) or push rounds (``push``),
which cuts at the same point on every machine and is what tests and reproducible experiments
use. ``budget_ms=None`` disables the time budget. A result cut by the time budget is not cached
(a later call could get further); one cut by the rounds budget is, under its own key.

At most two computations run at once per process; a third caller gets ``{}`` at once, and its
:class:`PPRResult` says ``saturated``. Results are cached per workspace, keyed by graph version,
sorted seeds and configuration; any write to the graph clears the workspace's cache.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlab._arrays import group_sum, sorted_unique
from memlab.graph._common import (
    LRUCache,
    check_method,
    from_dict,
    is_number,
    method_name,
    register,
    seed_list,
)
from memlab.errors import PPRConvergenceError, PPRUnavailable
from memlab.graph.csr import GraphSnapshot

__all__ = [
    "MAX_IN_FLIGHT",
    "PPR_METHODS",
    "PPRCache",
    "PPRConfig",
    "PPRConvergenceError",
    "PPRResult",
    "PPRUnavailable",
    "exact_ppr",
    "power_iteration",
    "push_rounds",
    "networkx_ppr",
    "personalized_pagerank",
    "ppr_result",
    "push_ppr",
    "register_ppr_method",
    "run_ppr",
]

MAX_IN_FLIGHT = 2
_IN_FLIGHT = threading.BoundedSemaphore(MAX_IN_FLIGHT)


@dataclass(frozen=True)
class PPRConfig:
    """How personalized PageRank runs: frozen, validated, serialisable.

    Parameters
    ----------
    method : str or callable
        ``"auto"``, ``"exact"``, ``"push"``, ``"networkx"``, another name registered with
        :func:`register_ppr_method`, or a callable with :func:`exact_ppr`'s signature.
    alpha : float
        Probability of following an edge (1 - alpha teleports back to the seeds).
    top_k : int or None
        Keep the ``top_k`` highest-scoring items (None: every item with mass).
    tol, tol_scaled_by_n, max_iter
        The exact method's stopping rule (see the module notes).
    epsilon : float
        The push method's residual threshold per unit of out-degree.
    auto_exact_max_edges : int
        ``auto`` uses ``exact`` up to this many edges, ``push`` above.
    budget_ms : float or None
        Wall-clock budget: iterative methods stop when past it and report
        ``budget_exhausted``. None: no time budget (the result then depends only on the inputs).
    budget_rounds : int or None
        Deterministic budget: ``exact`` stops after this many iterations and ``push`` after this
        many rounds, reporting ``budget_exhausted`` (unlike ``max_iter``, reaching it is not an
        error). None: no rounds budget. Methods registered by users may ignore it.
    max_nodes : int or None
        Skip (return ``{}``, reported) workspaces with more items; the seed used 10,000.
    use_cache : bool
        Read and fill the result cache.

    Examples
    --------
    >>> PPRConfig(method="push", alpha=0.85, epsilon=1e-4).method
    'push'
    >>> PPRConfig(alpha=1.0)
    Traceback (most recent call last):
    ...
    ValueError: alpha must be in (0, 1), got 1.0
    """

    method: str | Callable = "auto"
    alpha: float = 0.85
    top_k: int | None = 100
    tol: float = 1e-6
    tol_scaled_by_n: bool = False
    max_iter: int = 1000
    epsilon: float = 1e-4
    auto_exact_max_edges: int = 50_000
    budget_ms: float | None = 200.0
    budget_rounds: int | None = None
    max_nodes: int | None = None
    use_cache: bool = True

    def __post_init__(self) -> None:
        check_method(self.method, PPR_METHODS, "method")
        if not is_number(self.alpha) or not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        for name in ("tol", "epsilon", "budget_ms"):
            value = getattr(self, name)
            if value is None and name == "budget_ms":
                continue
            if not is_number(value) or value <= 0:
                raise ValueError(f"{name} must be a finite number > 0, got {value!r}")
        for name, optional in (("top_k", True), ("max_iter", False),
                               ("auto_exact_max_edges", False), ("max_nodes", True),
                               ("budget_rounds", True)):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1"
                                 f"{' or None' if optional else ''}, got {value!r}")
        for name in ("tol_scaled_by_n", "use_cache"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"{name} must be a bool, got {getattr(self, name)!r}")

    def cache_key(self) -> tuple:
        """The fields that change results (all but the time budget and the cache switch).

        The rounds budget is part of the key: it changes results, the same way everywhere.
        """
        key = self.__dict__.get("_cache_key")
        if key is None:  # computed once: dataclasses.fields() is slow on a per-query path
            key = tuple((f.name, method_name(self.method, PPR_METHODS) if f.name == "method"
                         else getattr(self, f.name))
                        for f in dataclasses.fields(self)
                        if f.name not in ("budget_ms", "use_cache"))
            object.__setattr__(self, "_cache_key", key)
        return key

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["method"] = method_name(self.method, PPR_METHODS)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PPRConfig:
        return from_dict(cls, data)


@dataclass
class PPRResult:
    """Scores and how they were obtained. ``scores`` is ordered by score, then item id."""

    scores: dict[str, float]
    indices: np.ndarray
    mass: np.ndarray
    requested: str
    method: str | None = None
    iterations: int = 0
    converged: bool | None = None
    residual: float | None = None
    cache_hit: bool = False
    saturated: bool = False
    skipped: str | None = None
    budget_exhausted: bool = False
    elapsed_ms: float = 0.0
    budget_ms: float | None = 0.0
    unknown_seeds: list[str] = field(default_factory=list)

    @property
    def overrun_ms(self) -> float:
        """Time past the time budget (0.0 without one)."""
        if self.budget_ms is None:
            return 0.0
        return max(0.0, self.elapsed_ms - self.budget_ms)

    def info(self) -> dict[str, Any]:
        """The record's summary (JSON-able)."""
        return {"requested": self.requested, "method": self.method,
                "iterations": self.iterations, "converged": self.converged,
                "residual": self.residual, "cache_hit": self.cache_hit,
                "saturated": self.saturated, "skipped": self.skipped,
                "budget_exhausted": self.budget_exhausted, "elapsed_ms": self.elapsed_ms,
                "budget_ms": self.budget_ms, "overrun_ms": self.overrun_ms,
                "results": len(self.scores), "unknown_seeds": list(self.unknown_seeds)}


PPRCache = LRUCache


# ---------------------------------------------------------------------------- methods
def _personalization(n: int, seeds: np.ndarray) -> np.ndarray:
    p = np.zeros(n)
    p[seeds] = 1.0 / len(seeds)
    return p


def power_iteration(snapshot: GraphSnapshot, seeds: np.ndarray, *, alpha: float = 0.85,
                    tol: float = 1e-6, max_iter: int = 1000, tol_scaled_by_n: bool = False,
                    max_rounds: int | None = None,
                    should_stop: Callable[[], bool] | None = None
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Personalized PageRank by power iteration on a graph snapshot; deterministic.

    Stops after the first iteration whose L1 change is below ``tol`` (``tol * n`` with
    ``tol_scaled_by_n``) and returns ``(item numbers with mass, mass, info)``. Raises
    :class:`~memlab.errors.PPRConvergenceError` after ``max_iter`` iterations without meeting
    it, and also when stopped early, by ``max_rounds`` iterations or by ``should_stop()``
    (asked before each iteration), with the iterate reached as the error's ``partial``: it never
    returns a truncated answer. Without ``should_stop`` nothing reads a clock.

    Examples
    --------
    >>> from memlab.graph.csr import EdgeTable, GraphView
    >>> view = GraphView(EdgeTable())
    >>> view.write(np.array([0, 1]), np.array([1, 2]), "RELATED", np.ones(2), 0.0)
    >>> nodes, mass, info = power_iteration(view.snapshot(3), np.array([0]), tol=1e-12)
    >>> nodes.tolist(), np.round(mass, 4).tolist(), info["converged"]
    ([0, 1, 2], [0.3887, 0.3304, 0.2809], True)
    >>> power_iteration(view.snapshot(3), np.array([0]), max_rounds=1)
    Traceback (most recent call last):
    ...
    memlab.errors.PPRConvergenceError: personalized PageRank was stopped by its rounds budget after 1 iterations (last change 1.7, needed < 1e-06)
    """
    n = snapshot.n
    seeds = sorted_unique(seeds)
    share = 1.0 / len(seeds)
    inverse, dangling = snapshot.inverse_out_weight()
    threshold = tol * n if tol_scaled_by_n else tol
    x = _personalization(n, seeds)
    change = np.inf
    iterations = 0
    while iterations < max_iter:
        stopped = "rounds budget" if max_rounds is not None and iterations >= max_rounds else \
            "time budget" if should_stop is not None and should_stop() else None
        if stopped is not None:
            nodes = np.flatnonzero(x > 0)
            raise PPRConvergenceError(iterations, change, threshold, reason=stopped, partial=(
                nodes, x[nodes], {"iterations": iterations, "converged": False,
                                  "residual": change, "budget_exhausted": True}))
        y = snapshot.transpose_matvec(x * inverse)
        y *= alpha
        # teleport and dangling mass both return to the seeds: a sparse update, not a dense one
        y[seeds] += (alpha * x[dangling].sum() + 1.0 - alpha) * share
        change = float(np.abs(y - x).sum())
        x = y
        iterations += 1
        if change < threshold:
            nodes = np.flatnonzero(x > 0)
            return nodes, x[nodes], {"iterations": iterations, "converged": True,
                                     "residual": change, "budget_exhausted": False}
    raise PPRConvergenceError(iterations, change, threshold)


def _deadline_check(deadline: float) -> Callable[[], bool]:
    return lambda: time.perf_counter() > deadline


def _budgeted(algorithm: Callable, *args: Any, **kwargs: Any):
    """A registered method's answer: a budget's stop is an answer flagged ``budget_exhausted``
    (run_ppr and the surfacing stage report it); a failure to converge stays an error."""
    try:
        return algorithm(*args, **kwargs)
    except PPRConvergenceError as exc:
        if exc.partial is None:
            raise
        return exc.partial


def exact_ppr(snapshot: GraphSnapshot, seeds: np.ndarray, config: PPRConfig,
              deadline: float) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The ``exact`` method: :func:`power_iteration` under the configuration's budgets."""
    return _budgeted(power_iteration, snapshot, seeds, alpha=config.alpha, tol=config.tol,
                     max_iter=config.max_iter, tol_scaled_by_n=config.tol_scaled_by_n,
                     max_rounds=config.budget_rounds, should_stop=_deadline_check(deadline))


def push_rounds(snapshot: GraphSnapshot, seeds: np.ndarray, *, alpha: float = 0.85,
                epsilon: float = 1e-4, max_rounds: int | None = None,
                should_stop: Callable[[], bool] | None = None
                ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Andersen–Chung–Lang local push in vectorised synchronous rounds; deterministic.

    Runs until no node's residual exceeds ``epsilon`` times its out-degree. Stopped early by
    ``max_rounds`` rounds or ``should_stop()`` (asked before each round), it raises
    :class:`~memlab.errors.PPRConvergenceError` with the estimate reached as ``partial``.
    """
    n = snapshot.n
    seeds = sorted_unique(seeds)
    eps = epsilon
    residual = np.zeros(n)  # calloc'd: only the pages pushes touch are ever written
    estimate = np.zeros(n)
    residual[seeds] = 1.0 / len(seeds)
    base_n, base_degree = snapshot.base.n, snapshot.base.out_degree
    active = seeds
    touched = [seeds]
    rounds = 0
    stopped = None
    while len(active):
        stopped = "rounds budget" if max_rounds is not None and rounds >= max_rounds else \
            "time budget" if should_stop is not None and should_stop() else None
        if stopped is not None:
            break
        rounds += 1
        mass = residual[active]
        residual[active] = 0.0
        estimate[active] += (1.0 - alpha) * mass
        owner, target, weight = snapshot.out_edges(active)
        out_weight = np.bincount(owner, weights=weight, minlength=len(active))
        dangling = out_weight <= 1e-12
        if dangling.any():
            residual[seeds] += alpha * mass[dangling].sum() / len(seeds)
        live = ~dangling[owner]
        owner, target, weight = owner[live], target[live], weight[live]
        candidates, received = group_sum(target, alpha * mass[owner] / out_weight[owner] * weight)
        residual[candidates] += received
        if dangling.any():
            candidates = sorted_unique(np.concatenate([candidates, seeds]))
        touched.append(candidates)
        degree = np.ones(len(candidates))
        inside = candidates < base_n
        degree[inside] = np.maximum(base_degree[candidates[inside]], 1)
        active = candidates[residual[candidates] > eps * degree]
    nodes = sorted_unique(np.concatenate(touched))
    values = estimate[nodes]
    keep = values > 0
    left = float(residual[nodes].sum())
    answer = (nodes[keep], values[keep], {"iterations": rounds, "converged": stopped is None,
                                          "residual": left,
                                          "budget_exhausted": stopped is not None})
    if stopped is not None:
        raise PPRConvergenceError(rounds, left, eps, reason=stopped, partial=answer)
    return answer


def push_ppr(snapshot: GraphSnapshot, seeds: np.ndarray, config: PPRConfig,
             deadline: float) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The ``push`` method: :func:`push_rounds` under the configuration's budgets."""
    return _budgeted(push_rounds, snapshot, seeds, alpha=config.alpha, epsilon=config.epsilon,
                     max_rounds=config.budget_rounds, should_stop=_deadline_check(deadline))


def networkx_ppr(snapshot: GraphSnapshot, seeds: np.ndarray, config: PPRConfig,
                 deadline: float) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``networkx.pagerank`` on a DiGraph built for this call (the reference)."""
    import networkx as nx

    n = snapshot.n
    coo = snapshot.matrix().tocoo()
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    graph.add_weighted_edges_from(zip(coo.row.tolist(), coo.col.tolist(), coo.data.tolist()))
    personalization = dict.fromkeys(seeds.tolist(), 1.0)
    # networkx stops when the L1 change < n * tol: translate our rule into its terms
    tol = config.tol if config.tol_scaled_by_n else config.tol / max(n, 1)
    try:
        ranks = nx.pagerank(graph, alpha=config.alpha, personalization=personalization,
                            max_iter=config.max_iter, tol=tol, weight="weight")
    except nx.PowerIterationFailedConvergence:
        raise PPRConvergenceError(config.max_iter, float("nan"),
                                  config.tol * (n if config.tol_scaled_by_n else 1)) from None
    nodes = np.fromiter(ranks.keys(), np.int64, len(ranks))
    mass = np.fromiter(ranks.values(), np.float64, len(ranks))
    keep = mass > 0
    return nodes[keep], mass[keep], {"iterations": None, "converged": True, "residual": None,
                                     "budget_exhausted": False}


def auto_ppr(snapshot: GraphSnapshot, seeds: np.ndarray, config: PPRConfig,
             deadline: float) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """``exact`` on graphs up to ``auto_exact_max_edges`` edges, ``push`` above."""
    chosen = "exact" if snapshot.num_edges <= config.auto_exact_max_edges else "push"
    nodes, mass, info = PPR_METHODS[chosen](snapshot, seeds, config, deadline)
    return nodes, mass, {**info, "method": chosen}


PPR_METHODS: dict[str, Callable] = {"exact": exact_ppr, "push": push_ppr,
                                    "networkx": networkx_ppr, "auto": auto_ppr}


def register_ppr_method(name: str, fn: Callable) -> None:
    """Make ``fn`` usable as ``PPRConfig(method=name)``.

    ``fn(snapshot, seeds, config, deadline)`` gets a :class:`~memlab.graph.csr.GraphSnapshot`,
    the seed item numbers, the :class:`PPRConfig` and a ``time.perf_counter()`` deadline
    (``math.inf`` without a time budget), and returns ``(item_numbers, mass, info_dict)``.
    """
    register(PPR_METHODS, name, fn)


# ---------------------------------------------------------------------------- entry points
def run_ppr(ws, seeds: np.ndarray, config: PPRConfig, *, lock, cache=None,
            cache_scope: tuple = ()) -> PPRResult:
    """PPR from item numbers ``seeds`` of workspace ``ws``.

    ``lock`` (the store's lock, shared side, for a store's workspace) keeps writes out while the
    computation reads the graph; it is taken only after a concurrency slot was obtained, so a
    saturated caller returns at once even while others compute or a writer holds the lock.
    Nothing before the slot waits for the lock (the cache and the graph's version are read
    without it: a result keyed on a version a write has just passed is never looked up again).
    ``cache`` is a :class:`PPRCache`, None for the workspace's own, or False for none.
    """
    started = time.perf_counter()
    requested = method_name(config.method, PPR_METHODS)
    result = PPRResult({}, np.empty(0, np.int64), np.empty(0), requested,
                       budget_ms=config.budget_ms)
    seeds = sorted_unique(np.asarray(seeds, dtype=np.int64))

    def done(res: PPRResult) -> PPRResult:
        res.elapsed_ms = (time.perf_counter() - started) * 1e3
        return res

    if not len(seeds):
        result.skipped = "no_seeds"
        return done(result)
    if config.max_nodes is not None and len(ws) > config.max_nodes:
        result.skipped = "node_cap"
        return done(result)
    if cache is None:
        cache = ws.graph_view().cache
    use_cache = config.use_cache and cache is not False
    # networkx's stopping rule (tol * n) depends on the number of items, which adding an item
    # changes without changing the graph's version: then the item count is part of the key
    sized = (len(ws),) if config.tol_scaled_by_n else ()
    key = cache_scope + (ws.graph_view().version, tuple(seeds.tolist()), config.cache_key()) + sized
    if use_cache:
        hit = cache.get(key)
        if hit is not None:
            return done(_finish(ws, result, *hit, cache_hit=True, top_k=config.top_k))
    if not _IN_FLIGHT.acquire(blocking=False):
        result.saturated = True
        return done(result)
    try:
        with lock:
            sized = (len(ws),) if config.tol_scaled_by_n else ()
            key = cache_scope + (ws.graph_view().version, tuple(seeds.tolist()),
                                 config.cache_key()) + sized
            snapshot = ws.graph_view().snapshot(len(ws))
            fn = config.method if callable(config.method) else PPR_METHODS[config.method]
            deadline = math.inf if config.budget_ms is None else started + config.budget_ms / 1e3
            nodes, mass, info = fn(snapshot, seeds, config, deadline)
            info = {"method": requested, **info}
            nodes, mass = np.asarray(nodes, np.int64), np.asarray(mass, np.float64)
            # a result the time budget cut depends on machine load: never serve it again
            cut_by_time = bool(info.get("budget_exhausted")) and (
                config.budget_rounds is None
                or (info.get("iterations") or 0) < config.budget_rounds)
            if use_cache and not cut_by_time:
                cache.put(key, (nodes, mass, info))
            return done(_finish(ws, result, nodes, mass, info, cache_hit=False,
                                top_k=config.top_k))
    finally:
        _IN_FLIGHT.release()


def _finish(ws, result: PPRResult, nodes: np.ndarray, mass: np.ndarray, info: dict, *,
            cache_hit: bool, top_k: int | None) -> PPRResult:
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


def ppr_result(memory, seed_item_ids, *, alpha: float = 0.85, top_k: int | None = 100,
               budget_ms: float | None = 200.0, cache=None, workspace_id: str | None = None,
               method: str | Callable = "auto", **options: Any) -> PPRResult:
    """:func:`personalized_pagerank` with the full :class:`PPRResult`."""
    config = PPRConfig(method=method, alpha=alpha, top_k=top_k, budget_ms=budget_ms, **options)
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
        See :class:`PPRConfig` (``options`` are its other fields, e.g. ``epsilon`` or
        ``budget_rounds``; ``budget_ms=None`` runs without a time budget).
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
