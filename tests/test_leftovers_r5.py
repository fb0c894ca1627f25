"""Leftovers of issues 14 and 15 found by the outside review (round 5).

1. every registry refuses a name already registered unless ``replace=True``;
2. the replay's decisions frame names the budget stage's time ``budget_stage_ms`` (``budget_ms``
   is elsewhere a time budget) and a spreading stage of several runs is over budget only when
   one of its runs was;
3. the PPR notes say how long the call spent loading/compiling numba's kernels (``compiled_ms``);
4. ``memlab check`` leaves the file and its folder as it found them;
5. a recipe's deprecation warnings point at the caller's line.
"""

from __future__ import annotations

import contextlib
import json
import os
import sqlite3
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import memlab.graph.ppr as graph_ppr
from memlab import DEFAULT, Memory, SurfacingConfig, get_recipe
from memlab.datasets import fixture_trace, load_fixture
from memlab.datasets.graphs import GRAPH_BUILDERS, register_graph_builder
from memlab.graph.ppr import PPR_METHODS, PPRConfig, register_ppr_method
from memlab.graph.spreading import SPREAD_METHODS, SpreadConfig, SpreadResult, \
    register_spread_method
from memlab.harness import replay
from memlab.harness.measures import MEASURES, parse_measure, register_measure
from memlab.harness.replay import DEPRECATED_COLUMNS, _flatten_stage, timing_column
from memlab.session.longterm import NODE_TYPES, register_node_type
from memlab.signals.activation import ACTIVATION_MODELS, register_activation_model
from memlab.signals.dense import EMBEDDERS, DenseConfig, HashingEmbedder, get_embedder, \
    register_embedder
from memlab.surfacing.config import load_recipe_file
from memlab.surfacing.ppr import surfacing_ppr
from memlab.surfacing.rerank import RERANKERS, register_reranker
from memlab.surfacing.router import (ENTITY_DETECTORS, ROUTER_RULES, NoEntityDetector,
                                     register_entity_detector, register_router_rule)
from memlab.surfacing.stages import (STAGES, Stage, bm25, budget, composite, mandatory,
                                     register_stage, signals)
from memlab.surfacing.strategies import STRATEGIES, register_strategy

ROOT = Path(__file__).resolve().parent.parent


# ------------------------------------------------------------- 1. duplicate registrations
def _pipeline():
    return bm25() >> mandatory() >> signals() >> composite() >> budget()


# (registry, its name in the message, register(name, replace) with a fresh entry each call)
REGISTRIES = [
    (STRATEGIES, "strategy", lambda n, **kw: register_strategy(n, _pipeline(), **kw)),
    (PPR_METHODS, "PPR method", lambda n, **kw: register_ppr_method(n, lambda *a: None, **kw)),
    (SPREAD_METHODS, "spread method",
     lambda n, **kw: register_spread_method(n, lambda *a: None, **kw)),
    (ROUTER_RULES, "router rule", lambda n, **kw: register_router_rule(n, lambda q: None, **kw)),
    (ENTITY_DETECTORS, "entity detector",
     lambda n, **kw: register_entity_detector(n, NoEntityDetector(), **kw)),
    (ACTIVATION_MODELS, "activation model",
     lambda n, **kw: register_activation_model(n, lambda cfg: None, **kw)),
    (MEASURES, "measure",
     lambda n, **kw: register_measure(n, lambda top, rel, k: 0.0, cutoff="none", **kw)),
    (EMBEDDERS, "embedder", lambda n, **kw: register_embedder(n, lambda: HashingEmbedder(8), **kw)),
    (RERANKERS, "reranker", lambda n, **kw: register_reranker(n, lambda f: np.zeros(len(f)), **kw)),
    (GRAPH_BUILDERS, "graph builder",
     lambda n, **kw: register_graph_builder(n, lambda records: [], **kw)),
    (NODE_TYPES, "node type",
     lambda n, **kw: register_node_type(n, "episodic" if kw.get("replace") else "semantic", **kw)),
]


@pytest.mark.parametrize("registry, what, add", REGISTRIES, ids=[r[1] for r in REGISTRIES])
def test_a_second_registration_of_a_name_is_refused_unless_replace(registry, what, add):
    name = "leftovers_r5_x"
    assert name not in registry
    add(name)
    try:
        first = registry[name]
        with pytest.raises(ValueError, match=f"the {what} registry already holds '{name}'; "
                                             f"pass replace=True"):
            add(name)
        assert registry[name] is first  # the refused call changed nothing
        add(name, replace=True)
        assert registry[name] is not first
    finally:
        registry.pop(name, None)


@pytest.mark.parametrize("registry, name, add", [
    (STRATEGIES, "plain", REGISTRIES[0][2]),
    (PPR_METHODS, "exact", REGISTRIES[1][2]),
    (ROUTER_RULES, "question", REGISTRIES[3][2]),
    (MEASURES, "MRR", REGISTRIES[6][2]),
    (EMBEDDERS, "hashing", REGISTRIES[7][2]),
    (NODE_TYPES, "fact", REGISTRIES[10][2]),
])
def test_a_built_in_is_never_replaced_by_accident(registry, name, add):
    before = dict.__getitem__(registry, name) if name in dict.keys(registry) else None
    with pytest.raises(ValueError, match=f"already holds '{name}'"):
        add(name)
    if before is not None:
        assert dict.__getitem__(registry, name) is before
    else:  # the alias still resolves to the renamed built-in, not a new entry
        assert name not in dict.keys(registry)


def test_replace_must_be_a_bool():
    with pytest.raises(ValueError, match="replace must be True or False, got 'yes'"):
        register_ppr_method("leftovers_r5_y", lambda *a: None, replace="yes")
    assert "leftovers_r5_y" not in PPR_METHODS


def test_a_stage_class_is_registered_once_or_replaced_with_the_decorator_argument():
    from dataclasses import dataclass
    from typing import ClassVar

    def make():
        @dataclass(frozen=True)
        class Halve(Stage):
            name: ClassVar[str] = "leftovers_r5_halve"
            phase: ClassVar[str] = "adjust"

            def __call__(self, run, table):
                return table

        return Halve

    first = register_stage(make())
    try:
        with pytest.raises(ValueError, match="the stage registry already holds "
                                             "'leftovers_r5_halve'"):
            register_stage(make())
        assert STAGES["leftovers_r5_halve"] is first
        second = register_stage(replace=True)(make())  # a notebook cell run again
        assert STAGES["leftovers_r5_halve"] is second is not first
        with pytest.raises(ValueError, match="replace must be True or False"):
            register_stage(replace=1)
    finally:
        STAGES.pop("leftovers_r5_halve", None)


def test_a_failed_measure_registration_keeps_the_registered_one():
    register_measure("LeftR5", lambda top, rel, k: 1.0, cutoff="none")
    try:
        with pytest.raises(ValueError, match="fn must be callable"):
            register_measure("LeftR5", 3, cutoff="none", replace=True)
        assert parse_measure("LeftR5").compute(["a"], {"a": 1}) == 1.0
    finally:
        MEASURES.pop("LeftR5", None)


def test_replacing_an_embedder_drops_the_old_factorys_instances(tmp_path):
    register_embedder("leftovers-r5-e", lambda: HashingEmbedder(8))
    try:
        config = DenseConfig(embedder="leftovers-r5-e", cache_dir=str(tmp_path))
        assert get_embedder(config).encode(["a"]).shape == (1, 8)
        register_embedder("leftovers-r5-e", lambda: HashingEmbedder(16), replace=True)
        assert get_embedder(config).encode(["b"]).shape == (1, 16)
    finally:
        EMBEDDERS.pop("leftovers-r5-e", None)


def test_importing_memlab_registers_every_built_in_once():
    # a fresh interpreter importing every module that registers built-ins raises nothing
    code = ("import memlab, memlab.surfacing.stages, memlab.harness.measures, "
            "memlab.signals.dense, memlab.surfacing.rerank, memlab.session, "
            "memlab.datasets.graphs, memlab.cli; "
            "from memlab.surfacing.stages import STAGES; print(len(STAGES))")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert int(out.stdout) == len(STAGES) - sum(name.startswith("leftovers") for name in STAGES)


def test_the_shipped_example_strategy_file_still_loads_after_the_change():
    # docs/examples/decisions_first.py registers a stage and a strategy at import
    import importlib.util
    path = ROOT / "docs" / "examples" / "decisions_first.py"
    spec = importlib.util.spec_from_file_location("decisions_first_r5", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["decisions_first_r5"] = module
    try:
        spec.loader.exec_module(module)
        assert STRATEGIES["decisions_first"].name == "decisions_first"
        with pytest.raises(ValueError, match="already holds 'metadata_boost'"):
            spec.loader.exec_module(importlib.util.module_from_spec(spec))
    finally:
        STRATEGIES.pop("decisions_first", None)
        STAGES.pop("metadata_boost", None)
        sys.modules.pop("decisions_first_r5", None)


# ------------------------------------------------------------- 2. budget_ms in the frame
@pytest.fixture(scope="module")
def apollo():
    return replay(fixture_trace(load_fixture("apollo_demo")), "default", k=5)


def test_the_budget_stage_time_has_its_own_column(apollo):
    d = apollo.decisions
    assert timing_column("budget") == "budget_stage_ms" and timing_column("ppr") == "ppr_ms"
    assert d["budget_stage_ms"].notna().all() and (d["budget_stage_ms"] >= 0).all()
    # the deprecated alias repeats it, value for value
    assert DEPRECATED_COLUMNS == {"budget_ms": "budget_stage_ms"}
    assert d["budget_ms"].equals(d["budget_stage_ms"])
    # a graph stage's *_budget_ms is its configured time budget, not a time taken
    multi = d[d["ppr_ms"].notna()]
    assert len(multi) and (multi["ppr_budget_ms"] == DEFAULT.ppr.budget_ms).all()
    assert (multi["spread_budget_ms"] == DEFAULT.spreading.budget_ms).all()


def test_the_stage_latency_plot_draws_the_budget_stage_once(apollo):
    from memlab.harness.plots import _stage_columns, plot_stage_latency
    columns = _stage_columns(apollo.decisions)
    assert columns["budget"] == "budget_stage_ms" and "budget_stage" not in columns
    ticks = [t.get_text() for t in plot_stage_latency(apollo).axes[0].get_yticklabels()]
    assert sum(t.startswith("budget ") for t in ticks) == 1
    # a frame saved before the rename (budget_ms only) still draws it
    old = apollo.decisions.drop(columns="budget_stage_ms")
    assert _stage_columns(old)["budget"] == "budget_ms"


def test_over_budget_reads_the_overrun_when_a_stage_notes_it():
    assert _flatten_stage("spread", {"budget_ms": 10.0, "elapsed_ms": 25.0,
                                     "overrun_ms": 0.0})["spread_over_budget"] is False
    assert _flatten_stage("spread", {"budget_ms": 10.0, "elapsed_ms": 25.0,
                                     "overrun_ms": 3.0})["spread_over_budget"] is True
    assert _flatten_stage("ppr", {"budget_ms": 10.0, "elapsed_ms": 12.0})["ppr_over_budget"]
    assert not _flatten_stage("ppr", {"budget_ms": None, "elapsed_ms": 12.0,
                                      "overrun_ms": 0.0})["ppr_over_budget"]


@pytest.mark.parametrize("total_ms, overran", [(8.0, False), (12.0, True)])
def test_spreading_per_seed_is_over_budget_when_the_one_search_overran(monkeypatch, total_ms,
                                                                         overran):
    # the per-seed spreads run as one search under one deadline (run_spreads): over budget is
    # their total time over that budget, whatever the number of seeds
    import memlab.surfacing.stages.graph as graph_stages

    def fake_run_spreads(ws, groups, config):
        share = total_ms / len(groups)
        return [SpreadResult({}, np.empty(0, np.int64), np.empty(0, np.int64), "bfs", share,
                             config.budget_ms, total_ms > config.budget_ms, 2)
                for _ in groups]

    monkeypatch.setattr(graph_stages, "run_spreads", fake_run_spreads)
    config = DEFAULT.replace(spreading=SpreadConfig(damping=0.7, budget_ms=10.0))
    assert config.spread_relevance == "propagated"
    mem = Memory(surfacing_mode="router", config=config)
    mem.add_many([{"item_id": f"i{n}", "content": f"alpha beta note {n}"} for n in range(4)])
    mem.add_edges([("i0", "i1"), ("i2", "i3")])
    mem.get_working_context("s1", "alpha beta", strategy="deep:multi-hop")
    notes = mem.last_context_record.notes["spreading"]
    assert notes["per_seed"] >= 2 and notes["elapsed_ms"] == pytest.approx(total_ms)
    assert notes["overrun_ms"] == pytest.approx(max(0.0, total_ms - 10.0))
    assert _flatten_stage("spread", notes)["spread_over_budget"] is overran


# ------------------------------------------------------------- 3. compiled_ms in the PPR notes
def _chain():
    mem = Memory()
    for i in "abcd":
        mem.add(f"item {i}", item_id=i)
    mem.add_edges([("a", "b"), ("b", "c"), ("c", "d")])
    return mem, mem.store.workspace("default")


@pytest.mark.parametrize("backend, method, noted", [("auto", "exact", 42.5),
                                                    ("auto", "push", 42.5),
                                                    ("numpy", "exact", 0.0)])
def test_the_ppr_notes_say_what_the_kernels_warm_up_cost(monkeypatch, backend, method, noted):
    monkeypatch.setattr(graph_ppr, "warm_kernels", lambda: 42.5)
    _, ws = _chain()
    result, notes = surfacing_ppr(ws, np.array([0]), PPRConfig(method=method, backend=backend),
                                  lock=contextlib.nullcontext())
    assert notes["compiled_ms"] == noted and result is not None


def test_the_first_ppr_of_a_process_notes_its_compile_time_then_zero(monkeypatch):
    if not graph_ppr._numba_available():
        pytest.skip("numba is not installed: nothing is compiled")
    monkeypatch.setattr(graph_ppr, "_warmed", False)  # as in a fresh process
    mem, _ = _chain()
    config = DEFAULT.replace(ppr=PPRConfig(method="exact", backend="numba", budget_ms=None,
                                           use_cache=False))
    mem = Memory(store=mem.store, surfacing_mode="router", config=config)
    mem.get_working_context("s1", "item a", strategy="deep:multi-hop")
    first = mem.last_context_record
    mem.get_working_context("s1", "item b", strategy="deep:multi-hop")
    second = mem.last_context_record
    assert first.notes["ppr"]["compiled_ms"] > 0.0
    assert second.notes["ppr"]["compiled_ms"] == 0.0
    # the stage's time includes it; the computation's elapsed_ms does not
    assert first.timings_ms["ppr"] >= first.notes["ppr"]["compiled_ms"]
    assert graph_ppr.warm_kernels() == 0.0


def test_the_replay_frame_carries_compiled_ms(apollo):
    d = apollo.decisions[apollo.decisions["ppr_ms"].notna()]
    assert d["ppr_compiled_ms"].notna().all() and (d["ppr_compiled_ms"] >= 0).all()


# ------------------------------------------------------------- 4. memlab check leaves no trace
def _listing(folder: Path) -> dict[str, tuple[int, int, bytes]]:
    return {p.name: (p.stat().st_size, p.stat().st_mtime_ns, p.read_bytes())
            for p in sorted(folder.iterdir())}


def _durable(folder: Path) -> Path:
    path = folder / "m.db"
    mem = Memory(path=str(path))
    mem.add_many([{"item_id": f"i{n}", "content": f"note {n} about the deploy"}
                  for n in range(5)])
    mem.add_edge("i0", "i1")
    mem.store.close()
    return path


def _check(path: Path) -> int:
    from memlab.cli import main
    with contextlib.redirect_stdout(open(os.devnull, "w")):
        return main(["check", str(path)])


def test_check_leaves_the_file_and_its_folder_as_it_found_them(tmp_path):
    path = _durable(tmp_path)
    before = _listing(tmp_path)
    assert list(before) == ["m.db"]  # a closed store leaves no -wal/-shm
    assert _check(path) == 0
    assert _listing(tmp_path) == before
    # twice, and from the library too
    from memlab.journal_repair import check_journal
    assert check_journal(path) == [] and _check(path) == 0
    assert _listing(tmp_path) == before


def test_check_of_a_damaged_file_changes_nothing_either(tmp_path):
    path = _durable(tmp_path)
    with sqlite3.connect(path) as conn:  # damage one row's payload behind memlab's back
        conn.execute("UPDATE ops SET payload = CAST('{}' AS BLOB) WHERE seq = "
                     "(SELECT max(seq) FROM ops)")
    conn.close()
    for extra in ("-wal", "-shm"):
        assert not Path(f"{path}{extra}").exists()
    before = _listing(tmp_path)
    assert _check(path) == 1
    assert _listing(tmp_path) == before


def test_check_beside_an_open_store_leaves_its_files_in_place(tmp_path):
    path = _durable(tmp_path)
    mem = Memory(path=str(path))  # another user of the file: its -wal/-shm stay
    try:
        had = {p.name for p in tmp_path.iterdir()}
        assert _check(path) == 0
        assert {p.name for p in tmp_path.iterdir()} == had
        mem.add("written after the check", item_id="late")
    finally:
        mem.store.close()
    again = Memory(path=str(path))
    try:
        assert again.search("written after", top_k=1)[0]["item_id"] == "late"
    finally:
        again.store.close()


def test_check_help_says_it_leaves_the_folder_as_it_was(capsys):
    from memlab.cli import main
    with pytest.raises(SystemExit):
        main(["check", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "without changing it" in text and "-wal/-shm" in text


# ------------------------------------------------------------- 5. where deprecations point
def _old_recipe(folder: Path) -> tuple[dict, Path]:
    data = DEFAULT.to_dict()
    data["strategies"] = {**data["strategies"], "fast:recency": "recency"}  # renamed
    data["router_rules"] = ["recency" if r == "recency_words" else r for r in data["router_rules"]]
    path = folder / "old_names.json"
    path.write_text(json.dumps({"format": "memlab-recipe/1", "config": data}))
    return data, path


def _deprecations(call) -> list[warnings.WarningMessage]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return [w for w in caught if issubclass(w.category, DeprecationWarning)]


@pytest.mark.parametrize("entry", ["get_recipe(path)", "get_recipe(name)", "load_recipe_file",
                                   "from_dict", "SurfacingConfig", "replace"])
def test_a_recipe_deprecation_points_at_the_callers_line(tmp_path, monkeypatch, entry):
    data, path = _old_recipe(tmp_path)
    monkeypatch.setenv("MEMLAB_RECIPE_PATH", str(tmp_path))
    calls = {
        "get_recipe(path)": lambda: get_recipe(str(path)),
        "get_recipe(name)": lambda: get_recipe("old_names"),
        "load_recipe_file": lambda: load_recipe_file(path),
        "from_dict": lambda: SurfacingConfig.from_dict(data),
        "SurfacingConfig": lambda: SurfacingConfig(
            router_rules=("recency",), strategies=(("fast:recency", "recency"),)),
        "replace": lambda: DEFAULT.replace(router_rules=("recency",)),
    }
    caught = _deprecations(calls[entry])
    assert caught, f"{entry} warned nothing"
    assert {Path(w.filename).resolve() for w in caught} == {Path(__file__).resolve()}
    assert {str(w.message).split(" is now called ")[0] for w in caught} >= {
        "the router rule 'recency'"}


def test_a_registry_lookup_by_an_old_name_points_at_the_caller():
    caught = _deprecations(lambda: STRATEGIES["recency"])
    assert [Path(w.filename).resolve() for w in caught] == [Path(__file__).resolve()]


def test_pythons_default_filters_show_the_warning_in_a_script(tmp_path):
    _, path = _old_recipe(tmp_path)
    script = tmp_path / "user_script.py"
    script.write_text(f"from memlab import get_recipe\nget_recipe({str(path)!r})\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    out = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True,
                         text=True, env={**env, "PYTHONPATH": str(ROOT)}, timeout=300)
    assert out.returncode == 0, out.stderr
    assert f"{script}:2: MemlabDeprecationWarning: the strategy implementation 'recency'" \
        in out.stderr
    assert "the router rule 'recency'" in out.stderr
