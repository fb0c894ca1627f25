"""Spreading activation (SPEC §5.1): undirected, typed, fan-out-bounded breadth-first spreading.

From the seed items, activation flows over edges of the allowed types, in either direction, for
up to ``depth`` hops. Each node passes activation to at most ``max_fan_out`` neighbours: its
strongest ones (summed weight of the allowed edges between the pair), ties broken by the order
items were added. A reached item scores ``damping ** hops`` over its shortest such path; across
seeds the maximum wins, which is the same as one breadth-first search from all seeds at once.
Seeds are never results. At most ``max_fan_out * depth`` results are kept, nearest first, ties
by item id.

The budget is checked before each hop: past ``budget_ms`` the search stops with what it has and
says so in its :class:`SpreadResult` (it never raises for a budget). That budget is wall-clock
time, so a cut depends on machine load; ``budget_ms=None`` disables it, leaving ``depth`` (a
count of hops) as the only, deterministic, bound.

Methods are registered callables (:data:`SPREAD_METHODS`): ``"bfs"`` is the vectorised one on
the CSR view; ``"reference"`` is a plain per-seed BFS over the edge table, kept as the oracle.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlab._arrays import sorted_unique
from memlab._registry import register
from memlab.graph._common import (
    check_method,
    from_dict,
    is_number,
    method_name,
    seed_list,
    type_tuple,
)
from memlab.graph.csr import GraphSnapshot
from memlab.model import (
    DEFAULT_SPREADING_EDGE_TYPES,
    NON_PROPAGATING_EDGE_TYPES,
)

__all__ = [
    "SPREAD_METHODS",
    "SpreadConfig",
    "SpreadResult",
    "register_spread_method",
    "run_spread",
    "run_spreads",
    "spread",
    "spread_result",
]

ALL_EDGE_TYPES = "*"


@dataclass(frozen=True)
class SpreadConfig:
    """How spreading runs: frozen, validated, serialisable.

    Parameters
    ----------
    method : str or callable
        A name in :data:`SPREAD_METHODS` or a callable with the same signature as
        :func:`bfs_spread`.
    depth, max_fan_out, damping, budget_ms
        As in SPEC §5.1; ``budget_ms=None`` runs without a time budget (``depth`` still
        bounds the hops).
    edge_types : tuple of str, ``"*"`` or None
        The allowlist: None is the seed's default list, ``"*"`` every type present.
    excluded_edge_types : tuple of str
        Types that never propagate, whatever the allowlist says (naming one in both is an error).

    Examples
    --------
    >>> SpreadConfig(depth=3).depth
    3
    >>> SpreadConfig(edge_types=("CONTRADICTS",))
    Traceback (most recent call last):
    ...
    ValueError: edge_types contains ['CONTRADICTS'], which excluded_edge_types forbids to propagate
    """

    method: str | Callable = "bfs"
    depth: int = 2
    max_fan_out: int = 20
    damping: float = 0.5
    edge_types: tuple[str, ...] | str | None = None
    excluded_edge_types: tuple[str, ...] = NON_PROPAGATING_EDGE_TYPES
    budget_ms: float | None = 150.0

    def __post_init__(self) -> None:
        check_method(self.method, SPREAD_METHODS, "method")
        for name in ("depth", "max_fan_out"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
        if not is_number(self.damping) or not 0 < self.damping <= 1:
            raise ValueError(f"damping must be in (0, 1], got {self.damping!r}")
        if self.budget_ms is not None and (not is_number(self.budget_ms) or self.budget_ms <= 0):
            raise ValueError(f"budget_ms must be a finite number > 0 or None, "
                             f"got {self.budget_ms!r}")
        excluded = type_tuple(self.excluded_edge_types, "excluded_edge_types")
        object.__setattr__(self, "excluded_edge_types", excluded)
        if self.edge_types is not None and self.edge_types != ALL_EDGE_TYPES:
            allowed = type_tuple(self.edge_types, "edge_types")
            clash = sorted(set(allowed) & set(excluded))
            if clash:
                raise ValueError(f"edge_types contains {clash}, which excluded_edge_types "
                                 f"forbids to propagate")
            object.__setattr__(self, "edge_types", allowed)

    def allowed(self, present: Iterable[str]) -> list[str]:
        """The edge types that propagate, among those ``present`` in a graph."""
        present = list(present)
        if self.edge_types is None:
            allow = set(DEFAULT_SPREADING_EDGE_TYPES)
        elif self.edge_types == ALL_EDGE_TYPES:
            allow = set(present)
        else:
            allow = set(self.edge_types)
        return sorted(t for t in present if t in allow and t not in self.excluded_edge_types)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["method"] = method_name(self.method, SPREAD_METHODS)
        for key in ("edge_types", "excluded_edge_types"):
            if isinstance(out[key], tuple):
                out[key] = list(out[key])
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SpreadConfig:
        return from_dict(cls, data, ("edge_types", "excluded_edge_types"))


@dataclass
class SpreadResult:
    """What one spreading run found and how it went.

    ``scores`` maps item ids to ``damping ** hops`` in result order; ``indices``/``hops`` are the
    same results as item numbers and hop counts.
    """

    scores: dict[str, float]
    indices: np.ndarray
    hops: np.ndarray
    method: str
    elapsed_ms: float
    budget_ms: float | None
    budget_exhausted: bool
    hops_completed: int
    seeds_used: list[str] = field(default_factory=list)
    unknown_seeds: list[str] = field(default_factory=list)
    edge_types: list[str] = field(default_factory=list)
    truncated: int = 0  # reached items dropped by the max_fan_out * depth cap

    @property
    def overrun_ms(self) -> float:
        """Time past the time budget (0.0 without one)."""
        if self.budget_ms is None:
            return 0.0
        return max(0.0, self.elapsed_ms - self.budget_ms)

    def info(self) -> dict[str, Any]:
        """The record's summary (JSON-able)."""
        return {"method": self.method, "elapsed_ms": self.elapsed_ms, "budget_ms": self.budget_ms,
                "budget_exhausted": self.budget_exhausted, "overrun_ms": self.overrun_ms,
                "hops_completed": self.hops_completed, "results": len(self.scores),
                "truncated": self.truncated, "unknown_seeds": list(self.unknown_seeds),
                "edge_types": list(self.edge_types)}


# ---------------------------------------------------------------------------- methods
def bfs_spread(snapshot: GraphSnapshot, seeds: np.ndarray, config: SpreadConfig,
               codes: np.ndarray, deadline: float) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """Multi-source BFS on the CSR view. Returns (nodes, hops, hops completed, budget exhausted).

    Each hop is a handful of numpy calls over the frontier (no per-edge Python), which is what
    keeps a depth-2 spread under a millisecond at a million nodes.
    """
    visited = sorted_unique(seeds)
    frontier = visited
    found, found_hops = [], []
    completed = 0
    for hop in range(1, config.depth + 1):
        if time.perf_counter() > deadline:
            return _concat(found), _concat(found_hops), completed, True
        if not len(frontier) or not len(codes):
            break
        reached = sorted_unique(snapshot.strongest_neighbours(frontier, codes, config.max_fan_out))
        new = reached[~np.isin(reached, visited, assume_unique=True, kind="sort")]
        found.append(new)
        found_hops.append(np.full(len(new), hop, dtype=np.int64))
        visited = sorted_unique(np.concatenate([visited, new]))
        frontier = new
        completed = hop
    return _concat(found), _concat(found_hops), completed, False


def reference_spread(snapshot: GraphSnapshot, seeds: np.ndarray, config: SpreadConfig,
                     codes: np.ndarray, deadline: float) -> tuple[np.ndarray, np.ndarray, int, bool]:
    """The oracle: one plain BFS per seed over the edge table, then the minimum hop count."""
    table = snapshot.view.table
    allowed = set(codes.tolist())
    strength: dict[int, dict[int, float]] = {}
    for s, d, c, w in zip(table.src.view().tolist(), table.dst.view().tolist(),
                          table.code.view().tolist(), table.weight.view().tolist()):
        if c in allowed and w > 0:
            strength.setdefault(s, {})[d] = strength.get(s, {}).get(d, 0.0) + w
            strength.setdefault(d, {})[s] = strength.get(d, {}).get(s, 0.0) + w
    ranked = {v: [u for u, _ in sorted(nbrs.items(), key=lambda kv: (-kv[1], kv[0]))]
              for v, nbrs in strength.items()}
    best: dict[int, int] = {}
    for seed in sorted(set(seeds.tolist())):
        seen, frontier = {seed}, [seed]
        for hop in range(1, config.depth + 1):
            nxt = []
            for v in frontier:
                for u in ranked.get(v, [])[:config.max_fan_out]:
                    if u not in seen:
                        seen.add(u)
                        nxt.append(u)
                        best[u] = min(best.get(u, hop), hop)
            frontier = nxt
    for seed in seeds.tolist():
        best.pop(seed, None)
    nodes = np.array(sorted(best), dtype=np.int64)
    return nodes, np.array([best[v] for v in nodes.tolist()], dtype=np.int64), config.depth, False


SPREAD_METHODS: dict[str, Callable] = {"bfs": bfs_spread, "reference": reference_spread}


def register_spread_method(name: str, fn: Callable, *, replace: bool = False) -> None:
    """Make ``fn`` usable as ``SpreadConfig(method=name)``; same signature as :func:`bfs_spread`.
    A name already registered is refused (ValueError) unless ``replace=True``."""
    register(SPREAD_METHODS, name, fn, what="spread method", replace=replace)


# ---------------------------------------------------------------------------- entry points
def run_spread(ws, seeds: np.ndarray, config: SpreadConfig) -> SpreadResult:
    """Spread from item numbers ``seeds`` of workspace ``ws`` (the store's lock held)."""
    return run_spreads(ws, [seeds], config)[0]


def run_spreads(ws, groups: list[np.ndarray], config: SpreadConfig) -> list[SpreadResult]:
    """One spread per seed group of ``groups`` (item numbers of workspace ``ws``; the store's
    lock held).

    With the ``"bfs"`` method the groups search together: one multi-source BFS over (group,
    item) pairs, a handful of numpy calls per hop for all of them, and one ordering of every
    group's results by hop and item id (:meth:`Workspace.id_sort_keys`). Each group keeps its
    own hop count. Without a time budget each result equals :func:`run_spread`'s for that group
    alone. With one, the groups share it: one deadline for the whole call (a query's per-seed
    spreads cost at most one budget together), checked before each hop; a group is marked
    ``budget_exhausted`` only when the deadline cut it with a frontier left, and each result's
    ``elapsed_ms`` is its share of the time. Another method runs once per group, under the
    same deadline.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> _ = mem.add_many([{"item_id": i, "content": i} for i in "abcd"])
    >>> mem.add_edges([("a", "b"), ("b", "c"), ("d", "c")])
    3
    >>> ws = mem.store.workspace("default")
    >>> [r.scores for r in run_spreads(ws, [np.array([0]), np.array([3])], SpreadConfig())]
    [{'b': 0.5, 'c': 0.25}, {'c': 0.5, 'b': 0.25}]
    >>> run_spreads(ws, [np.array([7])], SpreadConfig())
    Traceback (most recent call last):
    ...
    ValueError: item numbers must be in 0..3, got [7]
    """
    if not isinstance(groups, (list, tuple)):
        raise ValueError(f"groups must be a list of item-number arrays, got "
                         f"{type(groups).__name__}")
    started = time.perf_counter()
    deadline = math.inf if config.budget_ms is None else started + config.budget_ms / 1e3
    table = ws.graph_view().table
    types = config.allowed(table.type_names)
    codes = table.codes_for(types)
    fn = config.method if callable(config.method) else SPREAD_METHODS[config.method]
    groups = [np.asarray(g, dtype=np.int64).reshape(-1) for g in groups]
    n_groups = len(groups)
    sizes = np.array([len(g) for g in groups], dtype=np.int64)
    owner = np.repeat(np.arange(n_groups, dtype=np.int64), sizes)
    seeds = ws.check_rows(np.concatenate(groups)) if n_groups else np.empty(0, np.int64)
    completed = np.zeros(n_groups, np.int64)
    exhausted = np.zeros(n_groups, bool)
    if len(seeds) and len(codes):
        snapshot = ws.graph_view().snapshot(len(ws), undirected=[codes])
        if fn is bfs_spread:
            f_owner, nodes, hops, completed, cut = _bfs_groups(snapshot, owner, seeds, n_groups,
                                                               config, codes, deadline)
            exhausted = cut
        else:
            parts = []
            for g, group in enumerate(groups):
                if not len(group):
                    continue
                g_nodes, g_hops, completed[g], exhausted[g] = fn(snapshot, group, config, codes,
                                                                 deadline)
                g_nodes = np.asarray(g_nodes, dtype=np.int64)
                g_hops = np.asarray(g_hops, dtype=np.int64)
                if len(g_nodes):  # (np.isin costs ~10 us even on empty input)
                    keep = ~np.isin(g_nodes, group)
                    g_nodes, g_hops = g_nodes[keep], g_hops[keep]
                parts.append((np.full(len(g_nodes), g, np.int64), g_nodes, g_hops))
            f_owner, nodes, hops = (np.concatenate(c) for c in zip(*parts)) if parts else \
                (np.empty(0, np.int64),) * 3
    else:
        f_owner = nodes = hops = np.empty(0, np.int64)
    # nearest first, then by item id; at most max_fan_out * depth per group
    cap = config.max_fan_out * config.depth
    reached = np.bincount(f_owner, minlength=n_groups)
    if len(nodes):
        order = np.lexsort((ws.id_sort_keys(nodes), hops, f_owner))
        f_owner, nodes, hops = f_owner[order], nodes[order], hops[order]
        first = np.searchsorted(f_owner, np.arange(n_groups))
        keep = np.arange(len(nodes)) - first[f_owner] < cap
        f_owner, nodes, hops = f_owner[keep], nodes[keep], hops[keep]
    bounds = np.searchsorted(f_owner, np.arange(n_groups + 1))
    elapsed = (time.perf_counter() - started) * 1e3
    name = method_name(config.method, SPREAD_METHODS)
    damping = config.damping
    powers: dict[int, float] = {}
    out = []
    for g in range(n_groups):
        a, b = bounds[g], bounds[g + 1]
        g_nodes, g_hops = nodes[a:b], hops[a:b]
        hop_list = g_hops.tolist()
        for h in hop_list:
            if h not in powers:
                powers[h] = damping ** h
        scores = dict(zip(ws.ids_of(g_nodes), [powers[h] for h in hop_list]))
        out.append(SpreadResult(scores, g_nodes, g_hops, name,
                                elapsed * (sizes[g] / len(seeds)) if len(seeds) else elapsed,
                                config.budget_ms, bool(exhausted[g]), int(completed[g]),
                                ws.ids_of(groups[g]), [], types, int(reached[g]) - (b - a)))
    return out


def _bfs_groups(snapshot: GraphSnapshot, owner: np.ndarray, seeds: np.ndarray, n_groups: int,
                config: SpreadConfig, codes: np.ndarray, deadline: float
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """:func:`bfs_spread` for every group at once, over keys ``group * n + item``: (each
    result's group, item and hops, hops completed per group, whether the budget cut each
    group: True only for a group with a frontier left when the deadline passed)."""
    n = max(int(snapshot.n), int(seeds.max()) + 1)
    visited = sorted_unique(owner * n + seeds)
    frontier = visited
    found, found_hops = [], []
    completed = np.zeros(n_groups, np.int64)
    exhausted = np.zeros(n_groups, bool)
    for hop in range(1, config.depth + 1):
        if not len(frontier):
            break
        if time.perf_counter() > deadline:  # cut: only the groups with a frontier left
            exhausted[np.unique(frontier // n)] = True
            break
        f_owner, f_node = np.divmod(frontier, n)
        completed[f_owner] = hop
        pos, nbr = snapshot.strongest_neighbours(f_node, codes, config.max_fan_out, owners=True)
        reached = sorted_unique(f_owner[pos] * n + nbr)
        new = reached[~np.isin(reached, visited, assume_unique=True, kind="sort")]
        found.append(new)
        found_hops.append(np.full(len(new), hop, dtype=np.int64))
        visited = sorted_unique(np.concatenate([visited, new]))
        frontier = new
    keys = _concat(found)
    g, nodes = np.divmod(keys, n)
    return g, nodes, _concat(found_hops), completed, exhausted


def spread_result(memory, seed_item_ids, *, depth: int = 2, max_fan_out: int = 20,
                  damping: float = 0.5, edge_types=None, budget_ms: float | None = 150.0,
                  method: str | Callable = "bfs") -> SpreadResult:
    """:func:`spread` with the full :class:`SpreadResult` (timings, budget, unknown seeds)."""
    config = SpreadConfig(method=method, depth=depth, max_fan_out=max_fan_out, damping=damping,
                          edge_types=edge_types, budget_ms=budget_ms)
    seed_ids = seed_list(seed_item_ids)
    with memory.store.lock.shared():
        ws = memory.store.workspace(memory.workspace_id)
        known = [s for s in dict.fromkeys(seed_ids) if ws.row_of(s) is not None]
        unknown = [s for s in dict.fromkeys(seed_ids) if ws.row_of(s) is None]
        result = run_spread(ws, np.array([ws.row_of(s) for s in known], dtype=np.int64), config)
    result.unknown_seeds = unknown
    return result


def spread(memory, seed_item_ids, *, depth: int = 2, max_fan_out: int = 20, damping: float = 0.5,
           edge_types=None, budget_ms: float | None = 150.0) -> dict[str, float]:
    """Spreading activation from ``seed_item_ids`` over ``memory``'s workspace (SPEC §5.1).

    Parameters
    ----------
    memory : Memory
        The facade whose workspace is searched.
    seed_item_ids : list of str
        Where activation starts; ids not in the workspace are ignored (and listed in
        :func:`spread_result`'s ``unknown_seeds``).
    depth, max_fan_out, damping, edge_types, budget_ms
        See :class:`SpreadConfig`.

    Returns
    -------
    dict
        ``{item_id: damping ** hops}``, nearest first then by item id; ``{}`` when nothing is
        reached.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> a, b, c = (mem.add(t, item_id=i) for t, i in [("x", "a"), ("y", "b"), ("z", "c")])
    >>> mem.add_edge("a", "b", "RELATED"); mem.add_edge("c", "b", "MENTIONS")
    >>> spread(mem, ["a"])
    {'b': 0.5, 'c': 0.25}
    >>> mem.add_edge("a", "c", "CONTRADICTS"); spread(mem, ["a"])
    {'b': 0.5, 'c': 0.25}
    """
    return spread_result(memory, seed_item_ids, depth=depth, max_fan_out=max_fan_out,
                         damping=damping, edge_types=edge_types, budget_ms=budget_ms).scores


# ---------------------------------------------------------------------------- helpers
def _concat(parts: list[np.ndarray]) -> np.ndarray:
    return np.concatenate(parts) if parts else np.empty(0, np.int64)
