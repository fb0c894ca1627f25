"""Personalized PageRank (SPEC §5.2) on the CSR view: exact, local push, the networkx reference.

The graph is directed, over every edge type; parallel edges between a pair are summed and the
walk follows edges in proportion to weight. Personalization ``p`` is uniform over the distinct
seeds present (unknown seeds are dropped and reported). A node without outgoing weight (dangling)
sends its mass back to ``p``, as ``networkx.pagerank`` does by default, so every method here
solves the same equation::

    x = alpha * (W_norm^T x + (sum of x over dangling nodes) * p) + (1 - alpha) * p

Methods (:data:`PPR_METHODS`, each a registered callable):

``exact``
    Solves the equation above as PRPACK does: ``z = alpha * W_norm^T z + p`` with the dangling
    nodes' rows left empty, then ``x = z / sum(z)`` (the dangling mass only rescales the answer,
    so it needs no pass of its own). With numba (the ``fast`` extra, ``backend="auto"``) the
    iterations are Gauss–Seidel sweeps in a topological order of the graph's strongly connected
    components (one sweep carries mass across an acyclic part); the numpy reference
    (``backend="numpy"``) is Jacobi, one sparse mat-vec per iteration. Both read ``W_norm^T``
    from a cache built once per graph version. Stopping rule: with ``c_t = ||z_t - z_{t-1}||_1 /
    ||z_t||_1`` the relative change and ``r = c_t / c_{t-1}`` the contraction seen (``alpha``
    at the first iteration), stop once the answer's estimated L1 error ``2 c_t r / (1 - r)`` is
    below ``tol`` (for Jacobi, whose contraction is at most ``alpha``, this is the classical
    a-posteriori bound with the rate measured instead of assumed); with
    ``tol_scaled_by_n=True``, networkx's rule: ``c_t < tol * n``. Raises
    :class:`PPRConvergenceError` after ``max_iter`` iterations without meeting it.
``push``
    Andersen–Chung–Lang local push: residual starts at ``p``; every node whose residual exceeds
    ``epsilon`` times its out-degree keeps ``1 - alpha`` of it and pushes the rest along its
    out-edges. Work depends on ``epsilon``, not on the graph's size. With numba the pushes run
    from a FIFO queue over scratch vectors kept between queries (only the touched entries are
    reset); the numpy reference pushes in synchronous rounds, each vectorised over all active
    nodes. ``epsilon=None`` (the default) takes :func:`auto_epsilon` of the graph's size.
``networkx``
    Builds an ``nx.DiGraph`` per call and runs ``networkx.pagerank`` (the seed's behaviour, and
    the test oracle), with the same personalization, dangling handling and stopping rule.
``auto``
    ``exact`` while the graph has at most ``auto_exact_max_edges`` edges, ``push`` above, with
    ``epsilon`` (or :func:`auto_epsilon` of the graph's size); the result records the method
    and the epsilon used.

Two budgets bound the iterative methods, each optional and reported as ``budget_exhausted``:
``budget_ms``, a wall-clock budget (what a latency-bound caller wants; results then depend on
machine load), and ``budget_rounds``, a count of iterations (``exact``) or push rounds (``push``;
with numba, epochs of the FIFO queue: the seeds, then the nodes the previous epoch queued), which
cuts at the same point on every machine with the same backend and is what tests and reproducible
experiments use. ``budget_ms=None`` disables the time budget. A result cut by the time budget
is not cached (a later call could get further); one cut by the rounds budget is, under its own
key.

This module holds the algorithms only: deterministic functions over a
:class:`~memlab.graph.csr.GraphSnapshot` that raise :class:`PPRConvergenceError` rather than
return a truncated answer when they fail to converge. Running them over a workspace (seeds,
node cap, the per-workspace result cache, at most two computations at once, the time budget as a
deadline) is :mod:`memlab.surfacing.ppr`'s, which also holds the user-facing
``personalized_pagerank(memory, ...)`` and ``ppr_result``; their names here are deprecated
aliases for one release.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import math
import threading
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import scipy.sparse as sp

from memlab._arrays import group_sum, sorted_unique
from memlab.errors import MemlabDeprecationWarning, PPRConvergenceError, PPRUnavailable
from memlab._registry import register
from memlab.graph._common import (
    LRUCache,
    check_method,
    from_dict,
    is_number,
    method_name,
)
from memlab.graph.csr import GraphSnapshot

__all__ = [
    "PPR_METHODS",
    "PPRCache",
    "PPRConfig",
    "PPRConvergenceError",
    "PPRResult",
    "PPRUnavailable",
    "auto_epsilon",
    "exact_ppr",
    "networkx_ppr",
    "power_iteration",
    "push_ppr",
    "push_rounds",
    "register_ppr_method",
    "warm_kernels",
]

BACKENDS = ("auto", "numba", "numpy")


@functools.lru_cache(maxsize=1)
def _numba_available() -> bool:
    return importlib.util.find_spec("numba") is not None


_WARM = threading.Lock()
_warmed = False


def warm_kernels() -> float:
    """Load (or compile, the first time on a machine) the numba kernels of this module, once per
    process. :func:`run_ppr` calls it before starting its clock, so a time budget measures the
    computation, not numba's one-off start-up. No-op without numba.

    Returns the milliseconds this call spent on it (compiling, loading numba's on-disk cache,
    or waiting for another thread doing so): 0.0 once the kernels are warm. The ``ppr``
    stage notes it as ``compiled_ms``, which its time includes.
    """
    global _warmed
    if _warmed or not _numba_available():
        return 0.0
    started = time.perf_counter()
    with _WARM:
        if _warmed:  # another thread warmed them while this one waited
            return (time.perf_counter() - started) * 1e3
        from memlab.graph import _ppr_numba as k
        indptr = np.array([0, 1, 1], np.int64)
        indices = np.array([1], np.int64)
        k.sweep_order(indptr, indices)
        k.gauss_seidel_sweep(indptr, indices.astype(np.int32), np.ones(1), np.arange(2),
                             0.85, np.ones(2), np.ones(2))
        empty_i, empty_f = np.empty(0, np.int64), np.empty(0)
        k.push_fifo(np.array([0, 1, 1], np.int32), np.array([1], np.int32), np.ones(1),
                    np.ones(2), np.ones(2, np.int64), 2, empty_i, empty_i, empty_f,
                    np.array([0], np.int64), 0.85, 1e-4, 1, 1, np.zeros(2), np.zeros(2),
                    np.zeros(2, np.bool_), np.zeros(2, np.bool_), np.empty(2, np.int64),
                    np.empty(2, np.int64), np.zeros(6, np.int64))
        _warmed = True
        return (time.perf_counter() - started) * 1e3


def _resolve_backend(backend: str) -> str:
    """``"numba"`` or ``"numpy"`` for a backend name (``"auto"``: numba when installed)."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "numba" and not _numba_available():
        raise ValueError("backend='numba' needs numba: pip install 'memlab[fast]'")
    return "numba" if backend == "numba" or (backend == "auto" and _numba_available()) \
        else "numpy"


AUTO_EPSILON_MASS = 5.0
AUTO_EPSILON_MAX = 1e-4
AUTO_EPSILON_MIN = 1e-8


def auto_epsilon(n_nodes: int, n_edges: int) -> float:
    """The push threshold ``auto`` (and ``push`` with ``epsilon=None``) uses on a graph this size.

    ``min(1e-4, 5 / n_edges)``, floored at 1e-8. Push stops once every residual is at most
    ``epsilon`` times its node's out-degree, so the mass left unpushed is at most ``epsilon``
    times the summed degree of the nodes holding it: scaling ``epsilon`` as ``1 / edges`` keeps
    that bound the same share of the graph as it grows. Measured on the seeded power-law graphs
    of ``benchmarks/`` (5 edges per node; medians over 16 seed sets of 5, see the README's PPR
    table): top-10 overlap with the exact PPR 10/10 and top-100 99/100 at 100k and 1M nodes,
    where a fixed 1e-4 gives 8/10 and 82.5/100 at 1M. Pure: depends on the sizes only
    (``n_nodes`` is validated and kept for rules that need it).

    Examples
    --------
    >>> auto_epsilon(10_000, 50_000), auto_epsilon(1_000_000, 5_000_000)
    (0.0001, 1e-06)
    >>> auto_epsilon(10, -1)
    Traceback (most recent call last):
    ...
    ValueError: n_edges must be an integer >= 0, got -1
    """
    for name, value in (("n_nodes", n_nodes), ("n_edges", n_edges)):
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
            raise ValueError(f"{name} must be an integer >= 0, got {value!r}")
    if n_edges == 0:
        return AUTO_EPSILON_MAX
    return float(max(AUTO_EPSILON_MIN, min(AUTO_EPSILON_MAX, AUTO_EPSILON_MASS / n_edges)))


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
        The exact method's stopping rule (see the module notes): ``tol`` bounds the estimated
        L1 error of the answer, or with ``tol_scaled_by_n`` the change (networkx's rule).
    epsilon : float or None
        The push method's residual threshold per unit of out-degree; None (the default): chosen
        by :func:`auto_epsilon` from the graph's size (``push`` and ``auto`` record it).
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
    backend : {"auto", "numba", "numpy"}
        Who runs ``exact`` and ``push``: numba's compiled kernels (the ``fast`` extra; ``"auto"``
        uses them when numba is installed) or numpy (the reference). Converged answers agree
        within the stopping rule's tolerance; budget-cut partial answers are each backend's own.
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
    epsilon: float | None = None
    auto_exact_max_edges: int = 50_000
    budget_ms: float | None = 200.0
    budget_rounds: int | None = None
    max_nodes: int | None = None
    use_cache: bool = True
    backend: str = "auto"

    def __post_init__(self) -> None:
        check_method(self.method, PPR_METHODS, "method")
        if not is_number(self.alpha) or not 0 < self.alpha < 1:
            raise ValueError(f"alpha must be in (0, 1), got {self.alpha!r}")
        for name in ("tol", "epsilon", "budget_ms"):
            value = getattr(self, name)
            if value is None and name in ("budget_ms", "epsilon"):
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
        if self.backend not in BACKENDS:
            raise ValueError(f"backend must be one of {BACKENDS}, got {self.backend!r}")

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
    epsilon: float | None = None
    backend: str | None = None

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
                "results": len(self.scores), "unknown_seeds": list(self.unknown_seeds),
                "epsilon": self.epsilon, "backend": self.backend}


PPRCache = LRUCache


# ---------------------------------------------------------------------------- methods
def _personalization(n: int, seeds: np.ndarray) -> np.ndarray:
    p = np.zeros(n)
    p[seeds] = 1.0 / len(seeds)
    return p


def power_iteration(snapshot: GraphSnapshot, seeds: np.ndarray, *, alpha: float = 0.85,
                    tol: float = 1e-6, max_iter: int = 1000, tol_scaled_by_n: bool = False,
                    max_rounds: int | None = None,
                    should_stop: Callable[[], bool] | None = None, backend: str = "auto"
                    ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Personalized PageRank by iteration on a graph snapshot; deterministic.

    Iterates ``z = alpha * W_norm^T z + p`` from ``z = p`` (dangling rows empty) and answers
    ``z / sum(z)`` (see the module notes): Gauss–Seidel sweeps with numba (``backend="auto"``
    or ``"numba"``), Jacobi mat-vecs with numpy (``backend="numpy"``, the reference). Stops
    once the answer's estimated L1 error is below ``tol`` (the module notes; with
    ``tol_scaled_by_n``, once the relative change is below ``tol * n``) and returns ``(item
    numbers with mass, mass, info)``; ``info["residual"]`` is the last relative change. Raises
    :class:`~memlab.errors.PPRConvergenceError` after ``max_iter`` iterations without meeting
    it, and also when stopped early, by ``max_rounds`` iterations or by ``should_stop()`` (asked
    before each iteration), with the iterate reached (normalised) as the error's ``partial``: it
    never returns a truncated answer. Without ``should_stop`` nothing reads a clock.

    Examples
    --------
    >>> from memlab.graph.csr import EdgeTable, GraphView
    >>> view = GraphView(EdgeTable())
    >>> view.write(np.array([0, 1]), np.array([1, 2]), "RELATED", np.ones(2), 0.0)
    >>> nodes, mass, info = power_iteration(view.snapshot(3), np.array([0]), tol=1e-12)
    >>> nodes.tolist(), np.round(mass, 4).tolist(), info["converged"]
    ([0, 1, 2], [0.3887, 0.3304, 0.2809], True)
    >>> power_iteration(view.snapshot(3), np.array([0]), max_rounds=1, backend="numpy")
    Traceback (most recent call last):
    ...
    memlab.errors.PPRConvergenceError: personalized PageRank was stopped by its rounds budget after 1 iterations (last change 0.459, needed < 1e-06)
    """
    n = snapshot.n
    seeds = sorted_unique(seeds)
    backend = _resolve_backend(backend)
    indptr, indices, data = snapshot.transition_transpose()
    threshold = tol * n if tol_scaled_by_n else tol
    p = _personalization(n, seeds)
    z = p.copy()
    total = 1.0
    change = np.inf
    iterations = 0
    if backend == "numba":
        from memlab.graph._ppr_numba import gauss_seidel_sweep
        order = snapshot.sweep_order()
    else:
        matrix = sp.csr_array((data, indices, indptr), shape=(n, n))
    while iterations < max_iter:
        stopped = "rounds budget" if max_rounds is not None and iterations >= max_rounds else \
            "time budget" if should_stop is not None and should_stop() else None
        if stopped is not None:
            nodes = np.flatnonzero(z > 0)
            raise PPRConvergenceError(iterations, change, threshold, reason=stopped, partial=(
                nodes, z[nodes] / total, {"iterations": iterations, "converged": False,
                                          "residual": change, "budget_exhausted": True,
                                          "backend": backend}))
        if backend == "numba":
            delta, total = gauss_seidel_sweep(indptr, indices, data, order, alpha, p, z)
        else:
            y = matrix @ z
            y *= alpha
            y[seeds] += p[seeds]  # p is zero elsewhere: a sparse update, not a dense pass
            diff = y - z
            np.abs(diff, out=diff)
            delta, total = float(diff.sum()), float(y.sum())
            z = y
        previous, change = change, float(delta) / float(total)
        iterations += 1
        if tol_scaled_by_n:  # networkx's rule: the change itself against n * tol
            settled = change < threshold
        else:  # the answer's L1 error left, estimated from the contraction seen (alpha before
            # it is seen): z's error is about change * rate / (1 - rate) (a bound when the rate
            # is the iteration's contraction factor), and normalising at most doubles it
            rate = alpha if not math.isfinite(previous) else \
                (change / previous if previous > 0 else 0.0)
            settled = rate < 1.0 and 2.0 * change * rate / (1.0 - rate) < threshold
        if settled:
            nodes = np.flatnonzero(z > 0)
            return nodes, z[nodes] / total, {"iterations": iterations, "converged": True,
                                             "residual": change, "budget_exhausted": False,
                                             "backend": backend}
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
                     max_rounds=config.budget_rounds, should_stop=_deadline_check(deadline),
                     backend=config.backend)


def push_rounds(snapshot: GraphSnapshot, seeds: np.ndarray, *, alpha: float = 0.85,
                epsilon: float | None = None, max_rounds: int | None = None,
                should_stop: Callable[[], bool] | None = None, backend: str = "auto"
                ) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """Andersen–Chung–Lang local push; deterministic.

    Runs until no node's residual exceeds ``epsilon`` times its out-degree (``epsilon=None``:
    :func:`auto_epsilon` of the snapshot's size). With numba (``backend="auto"`` or
    ``"numba"``) pushes run from a FIFO queue and a "round" is an epoch of it (the seeds, then
    the nodes the previous epoch queued); with numpy (the reference) rounds are synchronous,
    each vectorised over all active nodes. Stopped early by ``max_rounds`` rounds or
    ``should_stop()`` (asked before each round with numpy, every 16,384 pushes with numba), it
    raises :class:`~memlab.errors.PPRConvergenceError` with the estimate reached as
    ``partial``. The estimate never exceeds the exact PPR; ``info["residual"]`` is the mass
    left unpushed, which bounds their L1 distance.

    Examples
    --------
    >>> from memlab.graph.csr import EdgeTable, GraphView
    >>> view = GraphView(EdgeTable())
    >>> view.write(np.array([0, 1]), np.array([1, 2]), "RELATED", np.ones(2), 0.0)
    >>> nodes, mass, info = push_rounds(view.snapshot(3), np.array([0]), epsilon=1e-3,
    ...                                 backend="numpy")
    >>> nodes.tolist(), np.round(mass, 4).tolist(), round(info["residual"], 4)
    ([0, 1, 2], [0.3885, 0.3301, 0.2806], 0.0009)
    """
    seeds = sorted_unique(seeds)
    if epsilon is None:
        epsilon = auto_epsilon(snapshot.n, snapshot.num_edges)
    if _resolve_backend(backend) == "numba":
        nodes, values, info, stopped = _push_numba(snapshot, seeds, alpha, epsilon, max_rounds,
                                                   should_stop)
    else:
        nodes, values, info, stopped = _push_numpy(snapshot, seeds, alpha, epsilon, max_rounds,
                                                   should_stop)
    info["epsilon"] = epsilon
    answer = (nodes, values, info)
    if stopped is not None:
        raise PPRConvergenceError(info["iterations"], info["residual"], epsilon, reason=stopped,
                                  partial=answer)
    return answer


def _push_numpy(snapshot: GraphSnapshot, seeds: np.ndarray, alpha: float, eps: float,
                max_rounds: int | None, should_stop: Callable[[], bool] | None):
    n = snapshot.n
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
    return nodes[keep], values[keep], {"iterations": rounds, "converged": stopped is None,
                                       "residual": left, "budget_exhausted": stopped is not None,
                                       "backend": "numpy"}, stopped


_PUSH_CHUNK = 16_384  # pushes between two should_stop() checks of the compiled push
_SCRATCH_LOCK = threading.Lock()
_SCRATCH: list[tuple[np.ndarray, ...]] = []  # idle scratch sets of the compiled push
# idle sets kept: as many as computations may run at once (memlab.surfacing.ppr.MAX_IN_FLIGHT)
_SCRATCH_KEPT = 2


def _take_scratch(n: int) -> tuple[np.ndarray, ...]:
    """A zeroed scratch set of at least ``n`` entries: kept between queries (a query resets only
    what it touched), at most ``_SCRATCH_KEPT`` of them, the smallest ones dropped."""
    with _SCRATCH_LOCK:
        for i, scratch in enumerate(_SCRATCH):
            if len(scratch[0]) >= n:
                return _SCRATCH.pop(i)
    # np.zeros / np.empty of this size are fresh zero pages: only the entries used are faulted in
    return (np.zeros(n), np.zeros(n), np.zeros(n, np.bool_), np.zeros(n, np.bool_),
            np.empty(n, np.int64), np.empty(n, np.int64))


def _give_scratch(scratch: tuple[np.ndarray, ...]) -> None:
    with _SCRATCH_LOCK:
        _SCRATCH.append(scratch)
        _SCRATCH.sort(key=lambda s: -len(s[0]))
        del _SCRATCH[_SCRATCH_KEPT:]


def _push_numba(snapshot: GraphSnapshot, seeds: np.ndarray, alpha: float, eps: float,
                max_rounds: int | None, should_stop: Callable[[], bool] | None):
    from memlab.graph._ppr_numba import push_fifo

    base = snapshot.base
    out = base.out
    if snapshot.delta_size:
        d_src, d_dst, d_w = snapshot.delta_by_source()
    else:
        d_src, d_dst, d_w = np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    scratch = _take_scratch(snapshot.n)
    residual, estimate, seen, queued, touched, _ = scratch
    state = np.zeros(6, np.int64)
    max_epochs = max_rounds if max_rounds is not None else np.iinfo(np.int64).max
    stopped = None
    try:
        while True:
            if should_stop is not None and should_stop():
                stopped = "time budget"
                break
            empty = push_fifo(out.indptr, out.indices, out.data, base.out_weight,
                              base.out_degree, base.n, d_src, d_dst, d_w, seeds, alpha, eps,
                              max_epochs, _PUSH_CHUNK if should_stop is not None else
                              np.iinfo(np.int64).max, *scratch, state)
            if empty:
                break
            if state[3] >= max_epochs:
                stopped = "rounds budget"
                break
        nodes = np.sort(touched[:state[2]])
        values = estimate[nodes]
        left = float(residual[nodes].sum())
    finally:
        hit = touched[:state[2]]
        residual[hit] = 0.0
        estimate[hit] = 0.0
        seen[hit] = False
        queued[hit] = False
        _give_scratch(scratch)
    keep = values > 0
    if not state[1]:  # stopped before the first call: nothing pushed, no round run
        rounds = 0
    else:
        rounds = int(min(state[3] + 1, max_epochs))
    return nodes[keep], values[keep], {"iterations": rounds, "converged": stopped is None,
                                       "residual": left, "budget_exhausted": stopped is not None,
                                       "backend": "numba"}, stopped


def push_ppr(snapshot: GraphSnapshot, seeds: np.ndarray, config: PPRConfig,
             deadline: float) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """The ``push`` method: :func:`push_rounds` under the configuration's budgets (its
    ``epsilon``, or :func:`auto_epsilon` of the graph's size when None; recorded in the info)."""
    return _budgeted(push_rounds, snapshot, seeds, alpha=config.alpha, epsilon=config.epsilon,
                     max_rounds=config.budget_rounds, should_stop=_deadline_check(deadline),
                     backend=config.backend)


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
    """``exact`` on graphs up to ``auto_exact_max_edges`` edges, ``push`` above (with the
    configured ``epsilon``, or :func:`auto_epsilon` of the graph's size; the info records it)."""
    chosen = "exact" if snapshot.num_edges <= config.auto_exact_max_edges else "push"
    nodes, mass, info = PPR_METHODS[chosen](snapshot, seeds, config, deadline)
    return nodes, mass, {**info, "method": chosen}


PPR_METHODS: dict[str, Callable] = {"exact": exact_ppr, "push": push_ppr,
                                    "networkx": networkx_ppr, "auto": auto_ppr}


def register_ppr_method(name: str, fn: Callable, *, replace: bool = False) -> None:
    """Make ``fn`` usable as ``PPRConfig(method=name)``; a name already registered is refused
    (ValueError) unless ``replace=True``.

    ``fn(snapshot, seeds, config, deadline)`` gets a :class:`~memlab.graph.csr.GraphSnapshot`,
    the seed item numbers, the :class:`PPRConfig` and a ``time.perf_counter()`` deadline
    (``math.inf`` without a time budget), and returns ``(item_numbers, mass, info_dict)``.
    """
    register(PPR_METHODS, name, fn, what="PPR method", replace=replace)


# ------------------------------------------------- moved entry points (deprecated aliases)
# The entry points that run PPR over a Memory (node cap, cache, saturation, time budget, the
# user-facing result) moved to memlab.surfacing.ppr, the one home of that policy. Their old names
# here stay for one release. This module imports nothing above the graph layer: the new module
# installs its functions with install_moved() when it is imported, which ``import memlab``
# always does before any code can reach these names.
_MOVED: dict[str, Any] = {}


def install_moved(**entries: Any) -> None:
    """Called by :mod:`memlab.surfacing.ppr`: what the deprecated names here resolve to."""
    _MOVED.update(entries)


def _moved(name: str) -> Any:
    warnings.warn(f"memlab.graph.ppr.{name} moved to memlab.surfacing.ppr.{name} (the PPR policy's "
                  f"home: node cap, cache, saturation, time budget); the old name goes in the next "
                  f"release", MemlabDeprecationWarning, stacklevel=3)
    if name not in _MOVED:  # only while memlab itself is half imported
        raise ImportError("memlab.surfacing.ppr is not imported yet: import memlab first")
    return _MOVED[name]


def run_ppr(*args: Any, **kwargs: Any) -> PPRResult:
    """Deprecated: :func:`memlab.surfacing.ppr.run_ppr` (goes in the next release)."""
    return _moved("run_ppr")(*args, **kwargs)


def ppr_result(*args: Any, **kwargs: Any) -> PPRResult:
    """Deprecated: :func:`memlab.surfacing.ppr.ppr_result` (goes in the next release)."""
    return _moved("ppr_result")(*args, **kwargs)


def personalized_pagerank(*args: Any, **kwargs: Any) -> dict[str, float]:
    """Deprecated: :func:`memlab.surfacing.ppr.personalized_pagerank` (goes in the next
    release)."""
    return _moved("personalized_pagerank")(*args, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "MAX_IN_FLIGHT":  # a policy constant, now memlab.surfacing.ppr.MAX_IN_FLIGHT
        return _moved(name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
