"""The graph stages (SPEC §5): the CSR view, spreading, personalized PageRank.

networkx is the oracle for PPR and a plain per-seed BFS (``method="reference"``) for spreading;
hypothesis draws the graphs, including writes made after the view was built (the delta path).
"""

import importlib.util
import json
import math
import threading

import networkx as nx
import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab import Memory, MemoryStore
from memlab.datasets.synthetic import power_law_edges
from memlab.graph import (PPRCache, PPRConfig, PPRConvergenceError, SpreadConfig,
                          register_ppr_method, spread, spread_result)
from memlab.graph import ppr as ppr_module
from memlab.surfacing import ppr as surfacing_ppr_module
from memlab.surfacing.ppr import personalized_pagerank, ppr_result
from memlab.graph import spreading as spreading_module
from memlab.graph.csr import EdgeTable, GraphView
from memlab.graph.ppr import PPR_METHODS
from memlab.surfacing.config import DEFAULT, SEED_COMPAT, SurfacingConfig

TYPES = ["RELATED", "MENTIONS", "CONTRADICTS", "CAUSES"]
BACKENDS = ["numpy"] + (["numba"] if importlib.util.find_spec("numba") else [])


def make_memory(n: int, **kwargs) -> Memory:
    mem = Memory(surfacing_mode="router", **kwargs)
    mem.add_many([{"content": f"node {i}", "item_id": f"n{i:03d}"} for i in range(n)])
    return mem


def nx_reference(mem: Memory, seeds: list[str], alpha: float = 0.85) -> dict[str, float]:
    """networkx.pagerank on the memory's current edges (parallel typed edges summed)."""
    graph = nx.DiGraph()
    graph.add_nodes_from(item.item_id for item in mem._ws.items)
    for e in mem.get_edges():
        w = graph.get_edge_data(e["src"], e["dst"], {"weight": 0.0})["weight"]
        graph.add_edge(e["src"], e["dst"], weight=w + e["weight"])
    ranks = nx.pagerank(graph, alpha=alpha, personalization=dict.fromkeys(seeds, 1.0),
                        tol=1e-14, max_iter=10_000)
    return ranks


def l1(a: dict, b: dict) -> float:
    return sum(abs(a.get(k, 0.0) - b.get(k, 0.0)) for k in set(a) | set(b))


edge_lists = st.lists(
    st.tuples(st.integers(0, 11), st.integers(0, 11), st.sampled_from(TYPES),
              st.sampled_from([0.5, 1.0, 2.0, 3.5])),
    max_size=40)


class TickingClock:
    """Stands in for the ``time`` module of a graph stage: every ``perf_counter()`` call advances
    one second, so a time budget cuts after a known number of checks, whatever the machine."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        self.now += 1.0
        return self.now


def write_edges(mem: Memory, edges) -> None:
    rows = [(f"n{s:03d}", f"n{d:03d}", t, w) for s, d, t, w in edges if s != d]
    if rows:
        mem.add_edges(rows)


# ---------------------------------------------------------------------------- PPR
@settings(max_examples=60, deadline=None)
@given(before=edge_lists, after=edge_lists, seeds=st.sets(st.integers(0, 11), min_size=1,
                                                          max_size=4),
       alpha=st.sampled_from([0.5, 0.85, 0.95]))
def test_exact_ppr_equals_networkx(before, after, seeds, alpha):
    mem = make_memory(12)
    write_edges(mem, before)
    seed_ids = [f"n{s:03d}" for s in sorted(seeds)]
    personalized_pagerank(mem, seed_ids, method="exact", top_k=None)  # builds the base
    write_edges(mem, after)  # these live in the delta (and re-weight some base edges)
    # no time budget: the result must not depend on machine load (push at epsilon=1e-10 needs
    # hundreds of rounds, which a 200 ms budget cut short on a busy machine)
    ref = nx_reference(mem, seed_ids, alpha)
    via_nx = personalized_pagerank(mem, seed_ids, method="networkx", alpha=alpha, top_k=None,
                                   tol=1e-13, cache=False, budget_ms=None)
    assert l1(via_nx, ref) < 1e-6
    for backend in BACKENDS:  # the numpy reference and numba's kernels, base + delta both
        ours = personalized_pagerank(mem, seed_ids, method="exact", alpha=alpha, top_k=None,
                                     tol=1e-13, cache=False, budget_ms=None, backend=backend)
        assert l1(ours, ref) < 1e-6
        pushed = ppr_result(mem, seed_ids, method="push", alpha=alpha, top_k=None,
                            epsilon=1e-10, cache=False, budget_ms=None, backend=backend)
        assert not pushed.budget_exhausted and pushed.converged and pushed.backend == backend
        assert l1(pushed.scores, ref) < 1e-6


def test_exact_ppr_after_a_rebuild_matches_networkx():
    mem = make_memory(200)
    src, dst = power_law_edges(200, 4, seed=3)
    write_edges(mem, [(int(s), int(d), "RELATED", 1.0) for s, d in zip(src, dst)])
    view = mem._ws.graph
    view.min_merge, view.merge_fraction = 10, 0.0  # fold the delta in on the next read
    personalized_pagerank(mem, ["n010"], method="exact")
    rebuilds = view.rebuilds
    write_edges(mem, [(i, i + 1, "MENTIONS", 2.0) for i in range(0, 150, 3)])
    ours = personalized_pagerank(mem, ["n010", "n020"], method="exact", tol=1e-13, top_k=None)
    assert view.rebuilds == rebuilds + 1
    assert l1(ours, nx_reference(mem, ["n010", "n020"])) < 1e-6


def test_small_writes_do_not_rebuild_the_view():
    mem = make_memory(300)
    src, dst = power_law_edges(300, 5, seed=1)
    write_edges(mem, [(int(s), int(d), "RELATED", 1.0) for s, d in zip(src, dst)])
    personalized_pagerank(mem, ["n001"], method="exact")
    spread(mem, ["n001"])
    view = mem._ws.graph
    rebuilds = view.rebuilds
    for i in range(20):
        mem.add_edge(f"n{i:03d}", f"n{i + 100:03d}", "RELATED", 1.5)
        personalized_pagerank(mem, ["n001"], method="exact")
        spread(mem, ["n001"])
    assert view.rebuilds == rebuilds
    ours = personalized_pagerank(mem, ["n001"], method="exact", tol=1e-13, top_k=None)
    assert l1(ours, nx_reference(mem, ["n001"])) < 1e-6


def test_push_shares_nine_of_exact_top_ten_on_a_100k_power_law_graph():
    n = 100_000
    table = EdgeTable()
    view = GraphView(table)
    src, dst = power_law_edges(n, 5, seed=7)
    view.write(src, dst, "RELATED", np.ones(len(src)))
    snap = view.snapshot(n)
    rng = np.random.default_rng(0)
    exact_cfg = PPRConfig(method="exact", tol=1e-9)
    push_cfg = PPRConfig(method="push", epsilon=1e-4)
    for _ in range(5):
        seeds = rng.choice(n, 5, replace=False)
        nodes, mass, _ = PPR_METHODS["exact"](snap, seeds, exact_cfg, math.inf)
        top_exact = set(nodes[np.argsort(-mass)[:10]].tolist())
        nodes, mass, info = PPR_METHODS["push"](snap, seeds, push_cfg, math.inf)
        top_push = set(nodes[np.argsort(-mass)[:10]].tolist())
        assert len(top_exact & top_push) >= 9, (seeds, top_exact, top_push)
        assert info["converged"] and 0 < info["residual"] < 1  # mass left unpushed


def test_ppr_drops_unknown_seeds_and_reports_them():
    mem = make_memory(3)
    mem.add_edge("n000", "n001")
    result = ppr_result(mem, ["n000", "ghost"], method="exact")
    assert result.unknown_seeds == ["ghost"] and set(result.scores) == {"n000", "n001"}
    assert ppr_result(mem, ["ghost"]).scores == {}
    assert ppr_result(mem, ["ghost"]).skipped == "no_seeds"
    assert personalized_pagerank(mem, []) == {}


def test_ppr_top_k_orders_by_score_then_id():
    mem = make_memory(5)
    for d in ("n001", "n002", "n003", "n004"):
        mem.add_edge("n000", d)
    scores = personalized_pagerank(mem, ["n000"], method="exact", top_k=3)
    assert list(scores) == ["n000", "n001", "n002"]


def test_exact_ppr_raises_a_named_error_when_it_cannot_converge():
    mem = make_memory(4)
    mem.add_edges([("n000", "n001"), ("n001", "n002"), ("n002", "n000")])
    with pytest.raises(PPRConvergenceError, match="did not converge in 3 iterations"):
        personalized_pagerank(mem, ["n000"], method="exact", max_iter=3, tol=1e-15)


def test_ppr_time_budget_stops_iterating_and_says_so(monkeypatch):
    mem = make_memory(4)
    mem.add_edges([("n000", "n001"), ("n001", "n002")])
    clock = TickingClock()  # one clock: the policy's reads and the algorithm's deadline checks
    monkeypatch.setattr(ppr_module, "time", clock)
    monkeypatch.setattr(surfacing_ppr_module, "time", clock)
    # started at t=1 s, deadline 3.5 s: iterations run at the checks t=2 and t=3, stop at t=4
    result = ppr_result(mem, ["n000"], method="exact", budget_ms=2500.0, tol=1e-15,
                        backend="numpy")
    assert result.budget_exhausted and result.iterations == 2 and not result.converged
    assert result.elapsed_ms == 4000.0 and result.overrun_ms == 1500.0  # done() reads t=5
    # the second Jacobi iterate z = e0 + 0.85 e1 + 0.85^2 e2 has reached the chain's end, but
    # only the third would show it settled (normalised: the answer)
    assert result.scores == pytest.approx({"n000": 1 / 2.5725, "n001": 0.85 / 2.5725,
                                           "n002": 0.7225 / 2.5725})
    # a result the clock cut is not cached: the next call, with no time budget, computes anew
    again = ppr_result(mem, ["n000"], method="exact", budget_ms=None, tol=1e-15)
    assert not again.cache_hit and not again.budget_exhausted and again.converged
    assert again.overrun_ms == 0.0 and again.budget_ms is None
    assert l1(again.scores, nx_reference(mem, ["n000"])) < 1e-9
    zero = ppr_result(mem, ["n000"], method="push", budget_ms=500.0, cache=False)
    assert zero.budget_exhausted and zero.iterations == 0 and zero.scores == {}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("method", ["exact", "push"])
def test_ppr_rounds_budget_cuts_at_the_same_round_everywhere(method, backend):
    mem = make_memory(4)
    mem.add_edges([("n000", "n001"), ("n001", "n002")])
    one = ppr_result(mem, ["n000"], method=method, budget_rounds=1, budget_ms=None,
                     backend=backend)
    assert one.budget_exhausted and one.iterations == 1 and not one.converged
    # exact (Jacobi) holds the first iterate z = e0 + 0.85 e1, normalised; Gauss-Seidel swept
    # the chain in order, so its first sweep is the answer; push has settled only the seed's
    # own share (its first round, or its queue's first epoch: the seeds)
    expected = {("exact", "numpy"): {"n000": 1 / 1.85, "n001": 0.85 / 1.85},
                ("exact", "numba"): {"n000": 1 / 2.5725, "n001": 0.85 / 2.5725,
                                     "n002": 0.7225 / 2.5725},
                ("push", "numpy"): {"n000": 0.15}, ("push", "numba"): {"n000": 0.15}}
    assert one.scores == pytest.approx(expected[method, backend])
    # cut by rounds, the result is the same on every machine, so it is cached under its own key
    assert ppr_result(mem, ["n000"], method=method, budget_rounds=1, budget_ms=None,
                      backend=backend).cache_hit
    full = ppr_result(mem, ["n000"], method=method, budget_ms=None, epsilon=1e-12, tol=1e-15,
                      backend=backend)
    assert not full.cache_hit and full.converged and not full.budget_exhausted
    enough = ppr_result(mem, ["n000"], method=method, budget_ms=None, epsilon=1e-12, tol=1e-15,
                        budget_rounds=full.iterations, backend=backend)
    assert not enough.budget_exhausted and enough.scores == full.scores
    with pytest.raises(ValueError, match="budget_rounds"):
        PPRConfig(budget_rounds=0)
    with pytest.raises(ValueError, match="budget_ms"):
        PPRConfig(budget_ms=0)
    assert PPRConfig.from_dict(PPRConfig(budget_ms=None, budget_rounds=7).to_dict()) == \
        PPRConfig(budget_ms=None, budget_rounds=7)


def test_auto_picks_exact_on_small_graphs_and_push_on_large_ones():
    mem = make_memory(50)
    mem.add_edges([(f"n{i:03d}", f"n{i + 1:03d}") for i in range(49)])
    assert ppr_result(mem, ["n000"]).method == "exact"
    assert ppr_result(mem, ["n000"], auto_exact_max_edges=10).method == "push"


# ---------------------------------------------------------------------------- cache
def test_ppr_cache_is_keyed_by_sorted_seeds_and_cleared_by_graph_writes():
    mem = make_memory(4)
    mem.add_edges([("n000", "n001"), ("n001", "n002")])
    first = ppr_result(mem, ["n000", "n001"], method="exact")
    again = ppr_result(mem, ["n001", "n000"], method="exact")
    assert not first.cache_hit and again.cache_hit and again.scores == first.scores
    mem.add("an item without edges leaves the graph as it was")
    assert ppr_result(mem, ["n000", "n001"], method="exact").cache_hit
    mem.add_edge("n002", "n003")
    after = ppr_result(mem, ["n000", "n001"], method="exact")
    assert not after.cache_hit and "n003" in after.scores
    assert not ppr_result(mem, ["n000", "n001"], method="exact", alpha=0.5).cache_hit
    assert not ppr_result(mem, ["n000", "n001"], method="exact", cache=False).cache_hit


def test_a_shared_cache_keeps_workspaces_apart():
    store = MemoryStore()
    cache = PPRCache()
    a = Memory(store=store, workspace_id="a")
    b = Memory(store=store, workspace_id="b")
    for mem in (a, b):
        mem.add_many([{"content": "x", "item_id": "x"}, {"content": "y", "item_id": "y"}])
    a.add_edge("x", "y")
    ra = ppr_result(a, ["x"], cache=cache, workspace_id="a")
    rb = ppr_result(b, ["x"], cache=cache, workspace_id="b")
    assert not rb.cache_hit and rb.scores == {"x": 1.0} and ra.scores != rb.scores
    with pytest.raises(ValueError, match="workspace_id must be the memory's workspace"):
        ppr_result(a, ["x"], cache=cache, workspace_id="b")


# ---------------------------------------------------------------------------- concurrency
def test_a_third_concurrent_ppr_call_returns_empty_at_once_and_the_record_says_so():
    release = threading.Event()
    entered = threading.Semaphore(0)

    def slow(snapshot, seeds, config, deadline):
        entered.release()
        release.wait()  # until the test releases it (the finally clause always does)
        return np.asarray(seeds), np.ones(len(seeds)), {}

    register_ppr_method("test-slow", slow)
    try:
        mems = [make_memory(3) for _ in range(3)]
        for mem in mems:
            mem.add_edge("n000", "n001")
        results = {}
        threads = [threading.Thread(target=lambda i=i: results.__setitem__(
            i, ppr_result(mems[i], ["n000"], method="test-slow"))) for i in range(2)]
        for t in threads:
            t.start()
        # both slots are taken (the timeouts only guard against a hang)
        assert entered.acquire(timeout=60) and entered.acquire(timeout=60)
        thirds = []
        caller = threading.Thread(target=lambda: thirds.append(
            ppr_result(mems[2], ["n000"], method="test-slow")))
        caller.start()
        caller.join(60)  # a hang guard: a third caller that waited would wait until release
        # it returned while both computations were still blocked, so it did not wait for them
        assert not caller.is_alive() and not results and all(t.is_alive() for t in threads)
        third = thirds[0]
        assert third.scores == {} and third.saturated
        cfg = DEFAULT.replace(ppr=PPRConfig(method="test-slow"))
        surfacing = Memory(store=mems[2].store, surfacing_mode="router", config=cfg)
        surfacing.get_working_context("s1", "why node 0", strategy="deep:multi-hop")
        notes = surfacing.last_context_record.notes["ppr"]
        assert notes["saturated"] is True and notes["results"] == 0
        release.set()
        for t in threads:
            t.join(60)
        assert all(r.scores == {"n000": 1.0} and not r.saturated for r in results.values())
    finally:
        release.set()
        PPR_METHODS.pop("test-slow")


# ---------------------------------------------------------------------------- spreading
@settings(max_examples=80, deadline=None)
@given(before=edge_lists, after=edge_lists,
       seeds=st.lists(st.integers(0, 11), min_size=1, max_size=3),
       depth=st.integers(1, 3), fan_out=st.integers(1, 4),
       types=st.sampled_from([None, "*", ("MENTIONS",), ("RELATED", "CAUSES")]))
def test_spreading_equals_brute_force_bfs(before, after, seeds, depth, fan_out, types):
    mem = make_memory(12)
    write_edges(mem, before)
    seed_ids = [f"n{s:03d}" for s in seeds]
    spread(mem, seed_ids, edge_types=types)  # builds the base; `after` goes to the delta
    write_edges(mem, after)
    kwargs = dict(depth=depth, max_fan_out=fan_out, edge_types=types)
    fast = spread_result(mem, seed_ids, **kwargs)
    ref = spread_result(mem, seed_ids, method="reference", **kwargs)
    assert list(fast.scores.items()) == list(ref.scores.items())
    assert not set(fast.scores) & set(seed_ids)
    assert len(fast.scores) <= fan_out * depth


def test_spread_scores_follow_the_shortest_path_and_the_result_order():
    mem = make_memory(6)
    mem.add_edges([("n000", "n001"), ("n001", "n002"), ("n002", "n003"), ("n005", "n000"),
                   ("n004", "n003", "MENTIONS")])
    assert spread(mem, ["n000"], depth=3) == {"n001": 0.5, "n005": 0.5, "n002": 0.25,
                                              "n003": 0.125}
    assert spread(mem, ["n000", "n003"], depth=1) == {"n001": 0.5, "n002": 0.5, "n004": 0.5,
                                                      "n005": 0.5}
    assert spread(mem, ["n000"], depth=3, damping=1.0)["n003"] == 1.0


def test_fan_out_takes_the_strongest_neighbours_first():
    mem = make_memory(5)
    mem.add_edges([("n000", "n001", "RELATED", 1.0), ("n000", "n002", "RELATED", 3.0),
                   ("n003", "n000", "RELATED", 2.0), ("n000", "n004", "RELATED", 2.0)])
    assert spread(mem, ["n000"], depth=1, max_fan_out=3) == {"n002": 0.5, "n003": 0.5,
                                                             "n004": 0.5}
    mem.add_edge("n000", "n001", "MENTIONS", 5.0)  # strengths of a pair add up across types
    assert set(spread(mem, ["n000"], depth=1, max_fan_out=1)) == {"n001"}


def test_excluded_edge_types_never_propagate():
    mem = make_memory(4)
    mem.add_edges([("n000", "n001", "CONTRADICTS"), ("n001", "n002", "SUPERSEDES"),
                   ("n000", "n003", "GROUNDED_IN")])
    assert spread(mem, ["n000"]) == {}
    assert spread(mem, ["n000"], edge_types="*") == {}
    with pytest.raises(ValueError, match="CONTRADICTS"):
        spread(mem, ["n000"], edge_types=["CONTRADICTS"])
    mem.add_edge("n000", "n002", "RELATED")
    assert spread(mem, ["n000"], edge_types="*") == {"n002": 0.5}


def test_types_outside_the_default_allowlist_need_an_explicit_allowlist():
    mem = make_memory(3)
    mem.add_edge("n000", "n001", "CAUSES")
    assert spread(mem, ["n000"]) == {}
    assert spread(mem, ["n000"], edge_types=["CAUSES"]) == {"n001": 0.5}


def test_spread_cap_and_budget_are_reported():
    mem = make_memory(30)
    mem.add_edges([("n000", f"n{i:03d}") for i in range(1, 30)])
    result = spread_result(mem, ["n000"], depth=1, max_fan_out=25)
    assert len(result.scores) == 25 and result.truncated == 0
    capped = spread_result(mem, ["n000"], depth=1, max_fan_out=5)
    assert list(capped.scores) == ["n001", "n002", "n003", "n004", "n005"]
    unbounded = spread_result(mem, ["n000"], depth=1, budget_ms=None)
    assert len(unbounded.scores) == 20 and not unbounded.budget_exhausted
    assert unbounded.budget_ms is None and unbounded.info()["overrun_ms"] == 0.0


def test_spread_time_budget_is_checked_before_each_hop(monkeypatch):
    mem = make_memory(30)
    mem.add_edges([("n000", "n001"), ("n001", "n002"), ("n002", "n003")])
    monkeypatch.setattr(spreading_module, "time", TickingClock())
    # started at t=1 s, deadline 2.5 s: hop 1 runs at the check t=2, hop 2 is refused at t=3
    late = spread_result(mem, ["n000"], depth=3, budget_ms=1500.0)
    assert late.scores == {"n001": 0.5} and late.budget_exhausted and late.hops_completed == 1
    assert late.elapsed_ms == 3000.0 and late.info()["overrun_ms"] == 1500.0


def test_spread_rejects_bad_arguments():
    mem = make_memory(2)
    for kwargs, name in [({"depth": 0}, "depth"), ({"max_fan_out": 1.5}, "max_fan_out"),
                         ({"damping": 0}, "damping"), ({"budget_ms": -1}, "budget_ms"),
                         ({"edge_types": "RELATED"}, "edge_types"),
                         ({"edge_types": ["bad type"]}, "edge_types")]:
        with pytest.raises(ValueError, match=name):
            spread(mem, ["n000"], **kwargs)
    with pytest.raises(ValueError, match="seed_item_ids"):
        spread(mem, "n000")
    with pytest.raises(ValueError, match="seed_item_ids"):
        spread(mem, [None])
    assert spread(mem, ["ghost"]) == {}
    assert spread_result(mem, ["ghost"]).unknown_seeds == ["ghost"]


def test_ppr_rejects_bad_arguments():
    mem = make_memory(2)
    for kwargs, name in [({"alpha": 1.0}, "alpha"), ({"top_k": 0}, "top_k"),
                         ({"method": "magic"}, "method"), ({"epsilon": 0}, "epsilon"),
                         ({"cache": {}}, "cache"), ({"tol_scaled_by_n": 1}, "tol_scaled_by_n"),
                         ({"max_nodes": -5}, "max_nodes")]:
        with pytest.raises(ValueError, match=name):
            personalized_pagerank(mem, ["n000"], **kwargs)
    with pytest.raises(ValueError, match="seed_item_ids"):
        personalized_pagerank(mem, "n000")


# ---------------------------------------------------------------------------- edge table
def test_edge_table_upserts_and_records_signed_changes():
    table = EdgeTable()
    changes = table.upsert([0, 0, 1], [1, 1, 2], ["RELATED", "RELATED", "MENTIONS"],
                           [1.0, 4.0, 2.0])
    assert changes.added == 2 and len(table) == 2 and table.weight.view().tolist() == [4.0, 2.0]
    again = table.upsert([0, 1, 0], [1, 2, 1], ["RELATED", "MENTIONS", "MENTIONS"],
                         [4.0, 1.0, 1.0])
    assert (again.added, again.reweighted) == (1, 1)
    assert sorted(again.dweight.tolist()) == [-1.0, 1.0]
    assert table.row_of(0, 1, "MENTIONS") == 2 and table.row_of(5, 6, "RELATED") is None


def test_bulk_edges_from_a_frame_match_the_tuple_path():
    a, b = make_memory(20), make_memory(20)
    src, dst = power_law_edges(20, 3, seed=2)
    frame = pd.DataFrame({"src": [f"n{s:03d}" for s in src], "dst": [f"n{d:03d}" for d in dst],
                          "edge_type": ["RELATED", "MENTIONS"] * (len(src) // 2) + ["RELATED"]
                          * (len(src) % 2), "weight": np.linspace(0.5, 2.0, len(src))})
    a.add_edges(frame)
    b.add_edges(list(frame.itertuples(index=False, name=None)))
    assert a.get_edges() == b.get_edges()
    assert personalized_pagerank(a, ["n005"]) == personalized_pagerank(b, ["n005"])


def test_a_rejected_bulk_write_changes_nothing():
    mem = make_memory(5)
    mem.add_edge("n000", "n001")
    before = json.dumps(mem.store.serialize())
    frame = pd.DataFrame({"src": ["n001", "n002"], "dst": ["n002", "n002"]})
    with pytest.raises(ValueError, match="edges row 1: dst must differ from src"):
        mem.add_edges(frame)
    with pytest.raises(ValueError, match="edges row 0: weight must be finite and > 0"):
        mem.add_edges(pd.DataFrame({"src": ["n001"], "dst": ["n002"], "weight": [np.inf]}))
    assert json.dumps(mem.store.serialize()) == before


def test_graph_view_memory_is_reported():
    view = GraphView(EdgeTable())
    src, dst = power_law_edges(1000, 5, seed=0)
    view.write(src, dst, "RELATED", np.ones(len(src)))
    view.snapshot(1000, undirected=[np.array([0], np.int32)])
    sizes = view.nbytes()
    assert sizes["csr"] > 0 and sizes["undirected"] > 0


# ---------------------------------------------------------------------------- surfacing
def test_multi_hop_brings_spread_items_and_normalised_centrality():
    mem = make_memory(6, config=DEFAULT.replace(spread_relevance="seed",
                                                 spreading=SpreadConfig()))
    mem.add("the auth service picked JWT tokens", item_id="auth")
    mem.add_edges([("auth", "n001"), ("n001", "n002"), ("n003", "auth")])
    ctx = mem.get_working_context("s1", "why JWT tokens", k=10)
    assert ctx["strategy_used"] == "deep:multi-hop"
    record = mem.last_context_record
    source = dict(zip(record.candidates["item_id"], record.candidates["source"]))
    assert source["n001"] == source["n003"] == source["n002"] == "spread"
    relevance = dict(zip(record.candidates["item_id"], record.candidates["relevance"]))
    assert relevance["n001"] == 0.5 and relevance["n002"] == 0.25
    centrality = record.candidates["centrality"]
    assert max(centrality) == 1.0 and min(centrality) >= 0.0
    notes = record.notes
    assert notes["ppr"]["method"] == "exact" and notes["ppr"]["cache_hit"] is False
    assert notes["spreading"]["results"] == 3 and {"spread", "ppr"} <= set(record.timings_ms)
    mem.get_working_context("s1", "why JWT tokens", k=10)
    assert mem.last_context_record.notes["ppr"]["cache_hit"] is True


def test_propagated_spreading_scales_by_the_seed_relevance_and_lifts_retrieved_items():
    config = DEFAULT.replace(spread_relevance="propagated", spreading=SpreadConfig(damping=0.5))
    mem = make_memory(4, config=config)
    mem.add("JWT tokens picked for the auth service", item_id="strong")
    mem.add("tokens rotate monthly with every other secret kept in the shared vault of the team",
            item_id="weak")                                          # a weaker BM25 hit
    mem.add_edges([("strong", "n001"), ("n001", "n002"), ("strong", "weak")])
    mem.get_working_context("s1", "why JWT tokens", k=10)
    c = mem.last_context_record.candidates
    relevance = dict(zip(c["item_id"], c["relevance"]))
    source = dict(zip(c["item_id"], c["source"]))
    assert relevance["strong"] == 1.0
    assert relevance["n001"] == pytest.approx(0.5) and relevance["n002"] == pytest.approx(0.25)
    # "weak" was retrieved on its own (below 0.5) and is lifted to what spreading brings it
    bm25 = dict(zip(c["item_id"], c["bm25"]))
    assert bm25["weak"] / bm25["strong"] < 0.5
    assert source["weak"] == "relevance" and relevance["weak"] == pytest.approx(0.5)


def test_seed_compat_skips_ppr_above_ten_thousand_items_and_records_it():
    mem = Memory(surfacing_mode="router", config=SEED_COMPAT)
    mem.add_many([f"filler item {i}" for i in range(10_000)] + ["why the alpha service"])
    mem.get_working_context("s1", "why alpha service", k=5)
    assert mem.last_context_record.notes["ppr"]["skipped"] == "node_cap"
    default = Memory(store=mem.store, surfacing_mode="router", config=DEFAULT)
    default.get_working_context("s1", "why alpha service", k=5)
    assert default.last_context_record.notes["ppr"]["skipped"] is None


def test_graph_configuration_round_trips():
    cfg = DEFAULT.replace(spreading=SpreadConfig(depth=3, edge_types=("RELATED",)),
                          ppr=PPRConfig(method="push", epsilon=1e-5))
    data = json.loads(json.dumps(cfg.to_dict()))
    assert SurfacingConfig.from_dict(data) == cfg
    assert SurfacingConfig.from_dict(SEED_COMPAT.to_dict()) == SEED_COMPAT
    with pytest.raises(ValueError, match="ppr must be a PPRConfig"):
        DEFAULT.replace(ppr="push")
    with pytest.raises(ValueError, match="unknown PPRConfig field"):
        SurfacingConfig.from_dict({**data, "ppr": {"method": "push", "speed": 11}})
