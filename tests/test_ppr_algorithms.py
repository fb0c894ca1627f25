"""The PPR algorithms as functions over a graph snapshot: deterministic, no wall clock, and they
raise rather than return a truncated answer. Oracle: networkx.pagerank. Every algorithm runs on
both backends: the numpy reference and numba's kernels (the ``fast`` extra, installed with the
test extras; without it the numba cases skip)."""

import importlib.util

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from memlab import Memory
from memlab.errors import PPRConvergenceError, PPRUnavailable
from memlab.graph.csr import EdgeTable, GraphView
from memlab.graph.ppr import power_iteration, push_rounds
from memlab.surfacing.ppr import personalized_pagerank

HAS_NUMBA = importlib.util.find_spec("numba") is not None
BACKENDS = ["numpy", pytest.param("numba", marks=pytest.mark.skipif(
    not HAS_NUMBA, reason="numba (the fast extra) is not installed"))]


def snapshot(n, edges):
    view = GraphView(EdgeTable())
    if edges:
        src, dst, w = (np.array(c) for c in zip(*edges))
        view.write(src.astype(np.int64), dst.astype(np.int64), "RELATED", w.astype(float), 0.0)
    return view.snapshot(n)


def networkx_oracle(n, edges, seeds, alpha):
    graph = nx.DiGraph()
    graph.add_nodes_from(range(n))
    for s, d, w in edges:  # one type: writing an edge again re-weights it
        graph.add_edge(s, d, weight=w)
    ranks = nx.pagerank(graph, alpha=alpha, personalization=dict.fromkeys(seeds, 1.0),
                        tol=1e-15, max_iter=100_000)
    return np.array([ranks[i] for i in range(n)])


graphs = st.integers(2, 12).flatmap(lambda n: st.tuples(
    st.just(n),
    st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1),
                       st.sampled_from([0.5, 1.0, 2.0])).filter(lambda e: e[0] != e[1]),
             max_size=30),
    st.lists(st.integers(0, n - 1), min_size=1, max_size=3, unique=True),
    st.sampled_from([0.5, 0.85])))


@pytest.mark.parametrize("backend", BACKENDS)
@given(case=graphs)
def test_power_iteration_is_networkx_pagerank(backend, case):
    n, edges, seeds, alpha = case
    nodes, mass, info = power_iteration(snapshot(n, edges), np.array(seeds), alpha=alpha,
                                        tol=1e-13, max_iter=100_000, backend=backend)
    ours = np.zeros(n)
    ours[nodes] = mass
    assert info["converged"] and not info["budget_exhausted"]
    assert np.abs(ours - networkx_oracle(n, edges, seeds, alpha)).sum() < 1e-9
    # deterministic: the same call gives the same bits
    again = power_iteration(snapshot(n, edges), np.array(seeds), alpha=alpha, tol=1e-13,
                            max_iter=100_000, backend=backend)
    assert again[0].tolist() == nodes.tolist() and again[1].tolist() == mass.tolist()


@pytest.mark.parametrize("backend", BACKENDS)
@given(case=graphs)
def test_push_rounds_approaches_power_iteration(backend, case):
    n, edges, seeds, alpha = case
    snap = snapshot(n, edges)
    nodes, mass, info = push_rounds(snap, np.array(seeds), alpha=alpha, epsilon=1e-12,
                                    backend=backend)
    ours = np.zeros(n)
    ours[nodes] = mass
    assert info["converged"]
    assert np.abs(ours - networkx_oracle(n, edges, seeds, alpha)).sum() < 1e-8


# the first iterate from z = p on the cycle 0 -> 1 -> 2 -> 0, seed 0: Jacobi has moved the walk
# one step (z = e0 + 0.85 e1); Gauss-Seidel, sweeping 0, 1, 2, has carried it round the cycle
FIRST_ITERATE = {"numpy": ([0, 1], [1 / 1.85, 0.85 / 1.85], 0.85 / 1.85),
                 "numba": ([0, 1, 2], [1 / 2.5725, 0.85 / 2.5725, 0.7225 / 2.5725],
                           1.5725 / 2.5725)}


@pytest.mark.parametrize("backend", BACKENDS)
def test_power_iteration_raises_instead_of_truncating(backend):
    snap = snapshot(3, [(0, 1, 1.0), (1, 2, 1.0), (2, 0, 1.0)])
    with pytest.raises(PPRConvergenceError, match="did not converge in 3 iterations") as err:
        power_iteration(snap, np.array([0]), max_iter=3, tol=1e-15, backend=backend)
    assert err.value.partial is None and err.value.reason == "max_iter"
    # stopped by a budget, the iterate reached travels with the error, never as an answer
    with pytest.raises(PPRConvergenceError, match="stopped by its rounds budget after 1") as err:
        power_iteration(snap, np.array([0]), max_rounds=1, backend=backend)
    nodes, mass, info = err.value.partial
    want_nodes, want_mass, want_change = FIRST_ITERATE[backend]
    assert nodes.tolist() == want_nodes and mass.tolist() == pytest.approx(want_mass)
    assert info == {"iterations": 1, "converged": False, "residual": pytest.approx(want_change),
                    "budget_exhausted": True, "backend": backend}
    # an injected stop (what a time budget is) is asked once before each iteration
    asked = []

    def stop_after_two():
        asked.append(len(asked))
        return len(asked) > 2

    with pytest.raises(PPRConvergenceError, match="stopped by its time budget after 2") as err:
        power_iteration(snap, np.array([0]), tol=1e-15, should_stop=stop_after_two,
                        backend=backend)
    assert asked == [0, 1, 2] and err.value.iterations == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_push_rounds_raises_when_its_rounds_run_out(backend):
    snap = snapshot(3, [(0, 1, 1.0), (1, 2, 1.0)])
    with pytest.raises(PPRConvergenceError, match="rounds budget after 1") as err:
        push_rounds(snap, np.array([0]), max_rounds=1, backend=backend)
    nodes, mass, info = err.value.partial
    assert nodes.tolist() == [0] and mass.tolist() == pytest.approx([0.15])
    assert info["backend"] == backend and info["epsilon"] == 1e-4  # auto_epsilon of 2 edges
    # the time budget: asked before any work, it stops with nothing pushed
    with pytest.raises(PPRConvergenceError, match="time budget after 0") as err:
        push_rounds(snap, np.array([0]), should_stop=lambda: True, backend=backend)
    assert err.value.partial[0].tolist() == []


def test_personalized_pagerank_answers_fully_or_says_why_not():
    mem = Memory()
    for i in range(4):
        mem.add(f"node {i}", item_id=f"n{i}")
    mem.add_edges([("n0", "n1"), ("n1", "n2")])
    assert personalized_pagerank(mem, ["ghost"]) == {}  # no seed is an item: nothing to rank
    with pytest.raises(PPRUnavailable, match="node_cap") as err:
        personalized_pagerank(mem, ["n0"], max_nodes=3)
    assert err.value.reason == "node_cap"
    with pytest.raises(PPRConvergenceError, match="rounds budget") as err:
        personalized_pagerank(mem, ["n0"], method="exact", budget_rounds=1, budget_ms=None,
                              backend="numpy")
    assert sorted(err.value.partial[0].tolist()) == [0, 1]
    full = personalized_pagerank(mem, ["n0"], method="exact", budget_ms=None, tol=1e-12)
    assert list(full) == ["n0", "n1", "n2"] and sum(full.values()) == pytest.approx(1.0)
