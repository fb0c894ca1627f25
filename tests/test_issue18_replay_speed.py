"""Issue 18, replay throughput: the faster deep:multi-hop replay gives the frames it gave before.

What changed, and what each test pins against an independent reference:

- spreading runs a query's per-seed searches as one multi-source BFS (``run_spreads``) and
  orders results by a cached item-id rank (``Workspace.id_sort_keys``): its results equal the
  plain per-seed BFS oracle (``method="reference"``) with the selection written out in Python,
  and a whole replay equals the replay whose spreading uses that oracle;
- the replay records candidate columns as arrays and joins them once: its frames equal those
  built from the record's lists, as before;
- PPR's equal-mass runs are ordered by the id rank: equal to a Python sort on (-mass, id);
- a run of add_edge events goes through the column-checked bulk path: the graph equals the one
  the per-edge path builds.

No timing is asserted here (the throughput is in the README, measured by
``benchmarks/replay_throughput.py``).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from memlab import Memory
from memlab.datasets.synthetic import power_law_edges
from memlab.graph.spreading import SpreadConfig, reference_spread, run_spread, run_spreads
from memlab.harness import TraceBuilder, replay
from memlab.surfacing import context as context_module
from memlab.surfacing.config import DEFAULT as TIMED_DEFAULT
from memlab.surfacing.ppr import surfacing_ppr
from memlab.graph.ppr import PPRConfig

# no wall-clock budget may cut a graph search in a comparison
DEFAULT = TIMED_DEFAULT.replace(
    ppr=dataclasses.replace(TIMED_DEFAULT.ppr, budget_ms=None),
    spreading=dataclasses.replace(TIMED_DEFAULT.spreading, budget_ms=None))
WORDS = ["deploy", "auth", "token", "cache", "billing", "search", "index", "queue", "retry",
         "schema", "migration", "latency", "alert", "session", "budget", "graph"]


def _item_id(i: int, rng: np.random.Generator) -> str:
    # ids whose sort order is not their number order (and not their insertion order)
    return f"{WORDS[int(rng.integers(len(WORDS)))]}-{int(rng.integers(10_000)):04d}-{i}"


def deep_trace(n_items: int = 400, n_queries: int = 40, seed: int = 5, *, edge_types=("RELATED",)):
    """A small benchmark-like trace: items, power-law edges (some repeated, typed, weighted),
    then deep:multi-hop questions with gold."""
    rng = np.random.default_rng(seed)
    builder = TraceBuilder("issue18-deep", start="2024-01-01T00:00:00+00:00")
    ids = [_item_id(i, rng) for i in range(n_items)]
    for i, item_id in enumerate(ids):
        text = " ".join(WORDS[int(j)] for j in rng.integers(len(WORDS), size=6))
        builder.add(f"{text} note {i}", item_id=item_id)
    src, dst = power_law_edges(n_items, 4, seed=seed)
    for s, d in zip(src.tolist(), dst.tolist()):
        kind = edge_types[int(rng.integers(len(edge_types)))]
        builder.edge(ids[s], ids[d], kind, weight=float(rng.choice([0.5, 1.0, 1.0, 2.0])))
    for q in range(n_queries):
        text = " ".join(WORDS[int(j)] for j in rng.integers(len(WORDS), size=3))
        builder.query(f"q{q}", f"how does {text} relate", strategy="deep:multi-hop",
                      gold=[ids[int(rng.integers(n_items))]])
    return builder.build()


def frames(result) -> tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    decisions = result.decisions  # latency aside, and the spreading method's name
    decisions = decisions.drop(columns=[c for c in decisions.columns if c.endswith("_ms")
                                        or c.endswith("_over_budget") or c == "spread_method"])
    return decisions, result.candidates, result.metrics


def assert_same_frames(a, b) -> None:
    for left, right in zip(frames(a), frames(b)):
        pd.testing.assert_frame_equal(left, right, check_exact=True)


def oracle_spread(ws, seeds: np.ndarray, config: SpreadConfig) -> tuple[list[int], list[int]]:
    """run_spread as it was: the plain BFS, seeds dropped, then by hop and item id, capped."""
    nodes, hops, _, _ = reference_spread(ws.graph_snapshot(), seeds, config,
                                         np.asarray(ws.graph_view().table.codes_for(
                                             config.allowed(ws.graph_view().table.type_names))),
                                         float("inf"))
    keep = ~np.isin(nodes, seeds)
    rows = sorted(zip(hops[keep].tolist(), ws.ids_of(nodes[keep]), nodes[keep].tolist()))
    rows = rows[:config.max_fan_out * config.depth]
    return [r[2] for r in rows], [r[0] for r in rows]


@pytest.fixture(scope="module")
def memory():
    trace = deep_trace(edge_types=("RELATED", "MENTIONS", "CONTRADICTS"))
    mem = Memory(config=DEFAULT)
    for event in trace.events:
        if event.type == "add":
            mem.add(event.get("content"), item_id=event.get("item_id"))
        elif event.type == "add_edge":
            mem.add_edge(event.get("src"), event.get("dst"), event.get("edge_type"),
                         event.get("weight"))
    return mem


# ---------------------------------------------------------------------------- spreading
@pytest.mark.parametrize("fan_out, depth", [(20, 2), (3, 2), (2, 3), (1, 1)])
def test_batched_spreads_equal_the_per_seed_oracle(memory, fan_out, depth):
    ws = memory.store.workspace(memory.workspace_id)
    config = SpreadConfig(max_fan_out=fan_out, depth=depth, budget_ms=None)
    rng = np.random.default_rng(fan_out * 10 + depth)
    groups = [rng.integers(len(ws), size=int(rng.integers(0, 4))) for _ in range(12)]
    with memory.store.lock.shared():
        results = run_spreads(ws, groups, config)
        assert len(results) == len(groups)
        for group, result in zip(groups, results):
            nodes, hops = oracle_spread(ws, group, config)
            assert result.indices.tolist() == nodes and result.hops.tolist() == hops
            assert list(result.scores) == ws.ids_of(nodes)
            assert list(result.scores.values()) == [config.damping ** h for h in hops]
            alone = run_spread(ws, group, config)  # one group: the same answer
            assert alone.indices.tolist() == nodes and alone.truncated == result.truncated
            assert result.seeds_used == ws.ids_of(group)
            # the reference method runs group by group through the same selection
            ref = run_spread(ws, group, dataclasses.replace(config, method="reference"))
            assert ref.indices.tolist() == nodes and ref.hops.tolist() == hops
            assert ref.truncated == result.truncated


def test_hops_completed_and_truncation_per_group(memory):
    ws = memory.store.workspace(memory.workspace_id)
    config = SpreadConfig(max_fan_out=2, depth=3, budget_ms=None)
    with memory.store.lock.shared():
        isolated = next(i for i in range(len(ws)) if not len(
            run_spread(ws, np.array([i]), config).indices))
        hub = int(np.argmax([len(run_spread(ws, np.array([i]), config).indices)
                             for i in range(50)]))
        results = run_spreads(ws, [np.array([isolated]), np.array([hub]), np.array([], int)],
                              config)
    assert results[0].hops_completed == 1 and not len(results[0].indices)
    assert results[1].hops_completed == 3 and len(results[1].indices) <= 6
    assert results[2].hops_completed == 0 and results[2].seeds_used == []
    single = [run_spread(ws, np.array([s]), config) for s in (isolated, hub)]
    assert [r.hops_completed for r in single] == [1, 3]
    assert [r.truncated for r in single] == [r.truncated for r in results[:2]]


def test_id_sort_keys_order_as_the_ids_with_and_without_the_cached_rank():
    rng = np.random.default_rng(2)
    mem = Memory()
    ids = [_item_id(i, rng) for i in range(300)] + ["Zeta", "alpha", "é-accent", "a"]
    mem.add_many([{"item_id": i, "content": f"text {n}"} for n, i in enumerate(ids)])
    ws = mem.store.workspace(mem.workspace_id)
    for size in (1, 5, 40, 40, 40, 300):  # the small requests sort locally, then the rank
        idx = rng.integers(len(ids), size=size)  # duplicates included
        keys = ws.id_sort_keys(idx)
        order = np.lexsort((np.arange(size), keys))
        assert [ids[i] for i in idx[order]] == sorted(ids[i] for i in idx)
        same = idx[:, None] == idx[None, :]
        assert ((keys[:, None] == keys[None, :]) == same).all()
    assert ws._id_rank is not None  # built once enough was ordered
    mem.add("later", item_id="0-first")  # an add invalidates it
    keys = ws.id_sort_keys(np.array([len(ids), 0]))
    assert keys[0] < keys[1]
    with pytest.raises(ValueError, match="item numbers"):
        ws.id_sort_keys(np.array([len(ids) + 5]))


# ---------------------------------------------------------------------------- PPR ties
def test_ppr_equal_masses_are_ordered_by_item_id():
    mem = Memory()
    leaves = ["m", "b", "z", "a", "k", "c"]
    mem.add_many([{"item_id": i, "content": i} for i in ["hub", *leaves]])
    mem.add_edges([("hub", leaf) for leaf in leaves] + [(leaf, "hub") for leaf in leaves])
    ws = mem.store.workspace(mem.workspace_id)
    config = PPRConfig(method="exact", tol=1e-12, budget_ms=None, top_k=4, use_cache=False)
    result, _ = surfacing_ppr(ws, np.array([0]), config, lock=mem.store.lock.shared())
    masses = result.mass.tolist()
    assert list(result.scores) == ["hub", "a", "b", "c"]
    full, _ = surfacing_ppr(ws, np.array([0]), dataclasses.replace(config, top_k=None),
                            lock=mem.store.lock.shared())
    expected = sorted(zip((-m for m in full.mass.tolist()), full.scores))
    assert list(full.scores) == [i for _, i in expected]
    assert masses == full.mass.tolist()[:4]


# ---------------------------------------------------------------------------- whole replays
@pytest.fixture(scope="module")
def trace():
    return deep_trace()


@pytest.fixture(scope="module")
def fast(trace):
    return replay(trace, DEFAULT, k=10)


@pytest.mark.parametrize("relevance", ["propagated", "seed"])
def test_replay_equals_the_replay_with_the_reference_spreading(trace, fast, relevance):
    spreading = dataclasses.replace(DEFAULT.spreading, method="reference")
    reference = replay(trace, DEFAULT.replace(spreading=spreading, spread_relevance=relevance),
                       k=10)
    if relevance == "propagated":
        assert_same_frames(fast, reference)
    else:
        fast_seed = replay(trace, DEFAULT.replace(spread_relevance=relevance), k=10)
        assert_same_frames(fast_seed, reference)
    assert (fast.decisions["spread_results"] > 0).any()  # spreading did add items


def test_recorded_arrays_give_the_frames_the_lists_give(trace, fast, monkeypatch):
    # the record's lists, joined as lists (what the replay did before it recorded arrays)
    monkeypatch.setattr(context_module.ContextRecord, "candidate_arrays",
                        lambda self: dict(self.candidates))
    assert_same_frames(fast, replay(trace, DEFAULT, k=10))


def test_bulk_edge_events_build_the_graph_the_per_edge_path_builds(trace):
    from memlab.harness.replay import _run_events
    settings = (DEFAULT, "router", 10, 0, [], False, None, "porter", "retrieved")
    runner = _run_events(trace, settings)
    ws = runner.memories["default"].store.workspace("default")
    edges = [(e.get("src"), e.get("dst"), e.get("edge_type"), e.get("weight"))
             for e in trace.events if e.type == "add_edge"]
    one_by_one = Memory()
    for e in trace.events:
        if e.type == "add":
            one_by_one.add(e.get("content"), item_id=e.get("item_id"))
    one_by_one.add_edges(edges)
    got = runner.memories["default"].get_edges()
    want = one_by_one.get_edges()
    strip = [{k: v for k, v in edge.items() if "time" not in k and not k.endswith("_at")}
             for edge in got]
    assert strip == [{k: v for k, v in edge.items() if "time" not in k and not k.endswith("_at")}
                     for edge in want]
    assert len(got) == len(want) and len(ws.graph_view().table) == len(
        one_by_one.store.workspace("default").graph_view().table)


def test_joined_columns_infer_as_one_list_would():
    from memlab.harness.replay import _joined
    cases = [
        [np.array([1.0, 2.0]), np.array([3.0])],
        [np.array([1, 2], np.int32), np.array([3], np.int32)],
        [np.array([True, False]), np.array([True])],
        [np.array([1, 2]), np.array([0.5])],  # mixed dtypes: as a list
        [np.array([True]), np.array([1.5])],
        [np.array(["a", None], dtype=object), ["b"]],
        [[1, 2.5], np.array([3.0])],
        [np.array([], np.float64), np.array([1.0], np.float32)],
    ]
    for chunks in cases:
        as_list = [v for c in chunks for v in (c.tolist() if isinstance(c, np.ndarray) else c)]
        pd.testing.assert_frame_equal(pd.DataFrame({"x": _joined(chunks)}),
                                      pd.DataFrame({"x": as_list}), check_exact=True)
