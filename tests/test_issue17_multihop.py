"""Issue 17 item 3, multi-hop: a year keeps the graph, title-match precision, and the graph as
a re-ranker that can only help (bridges lifted, retrieval's top guarded)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from memlab import DEFAULT, Memory, SurfacingConfig
from memlab.surfacing.stages import (STAGES, CandidateTable, GraphRerank, QueryRun,
                                     graph_rerank, stage_from_dict)
from memlab.surfacing.stages.graph_rerank import linked_counts
from memlab.surfacing.stages.title_precision import supported_homonyms
from memlab.surfacing.strategies import STRATEGIES


# -- title-match precision ---------------------------------------------------------------------

@pytest.fixture
def homonyms(store, clock):
    mem = Memory(store=store, workspace_id="ws-a", surfacing_mode="router", clock=clock)
    mem.add("Scott Howell is a former footballer who played as a striker for Stockport.",
            item_id="footballer", metadata={"title": "Scott Howell (footballer)"})
    mem.add("Scott Howell founded the alpine ski school of Aspen in 1990.",
            item_id="skier", metadata={"title": "Scott Howell (skier)"})
    mem.add("Aspen is a town in Colorado known for skiing.", item_id="aspen",
            metadata={"title": "Aspen"})
    mem.add("Mercury is the smallest planet.", item_id="mercury-planet",
            metadata={"title": "Mercury (planet)"})
    return mem


def _named(mem, query, support):
    ws = mem.store.workspace("ws-a")
    analyze, _ = ws.bm25_for("porter")
    named = np.array(ws.titles().items_named(query))
    keep, dropped = supported_homonyms(ws, query, analyze(query), named, support, analyze)
    return sorted(ws.ids_of(keep)), sorted(ws.ids_of(np.array(dropped, dtype=np.int64)))


def test_a_homonym_counts_only_when_the_query_supports_it(homonyms):
    # "ski" and "school" are in the skier's text only: the footballer is dropped
    assert _named(homonyms, "Which ski school did Scott Howell found?", 1) == \
        (["skier"], ["footballer"])
    # the qualifier in the query is support enough
    assert _named(homonyms, "Which team did Scott Howell the footballer join?", 1) == \
        (["footballer"], ["skier"])
    # nothing supports either reading: both count
    assert _named(homonyms, "When was Scott Howell born?", 1) == (["footballer", "skier"], [])
    # a lone match is never judged, even unsupported (one reading: nothing to choose between)
    assert _named(homonyms, "How big is Mercury?", 3) == (["mercury-planet"], [])
    # support 0 keeps everything; a stricter count needs more of the query in the text
    assert _named(homonyms, "Which ski school did Scott Howell found?", 0)[1] == []
    assert _named(homonyms, "Which ski school did Scott Howell found?", 4) == \
        (["footballer", "skier"], [])


def test_the_title_stage_applies_the_recipe_setting(homonyms):
    query = "Which ski school did Scott Howell found?"
    homonyms.config = DEFAULT.replace(title_homonym_support=1)
    homonyms.get_working_context("s1", query)
    notes = homonyms.last_context_record.notes
    assert notes["title_match"] == ["skier"] and notes["title_homonyms_dropped"] == ["footballer"]
    frame = homonyms.last_context_record.candidates_frame().set_index("item_id")
    assert frame.loc["skier", "title_match"] and not frame.loc["footballer", "title_match"]
    homonyms.config = DEFAULT
    homonyms.get_working_context("s1", query)
    notes = homonyms.last_context_record.notes
    assert notes["title_match"] == ["footballer", "skier"] and "title_homonyms_dropped" not in notes


def test_title_homonym_support_is_validated():
    with pytest.raises(ValueError, match="title_homonym_support must be an integer"):
        DEFAULT.replace(title_homonym_support=0.5)
    with pytest.raises(ValueError, match="title_homonym_support must be an integer >= 0"):
        DEFAULT.replace(title_homonym_support=-1)


# -- a year keeps the graph ------------------------------------------------------------------

def _year_memory(store, clock, config):
    mem = Memory(store=store, workspace_id="ws-a", surfacing_mode="router", clock=clock,
                 config=config)
    mem.add("The 1995 film was directed by Ann Lee.", item_id="film")
    mem.add("Ann Lee was born in Oslo.", item_id="director")
    mem.add_edge("film", "director", "RELATED")
    return mem


def test_a_year_in_a_multi_hop_question_keeps_the_graph(store, clock):
    query = "Where was the director of the film released in 1995 born?"
    plain = _year_memory(store, clock, DEFAULT)
    plain.get_working_context("s1", query)
    record = plain.last_context_record
    assert record.strategy_used == "temporal:windowed" and record.implementation == "temporal"
    assert "spread" not in record.timings_ms and "ppr" not in record.timings_ms
    strategies = {**dict(DEFAULT.strategies), "temporal:windowed": "temporal_multi_hop"}
    config = DEFAULT.replace(strategies=strategies)
    plain.config = config
    mem = plain
    mem.get_working_context("s1", query)
    record = mem.last_context_record
    assert record.strategy_used == "temporal:windowed"
    assert record.implementation == "temporal_multi_hop"
    assert {"window", "spread", "window_boost", "ppr"} <= set(record.timings_ms)
    assert record.notes["multi_hop_seeds"] and record.notes["time_window"][2] == "1995"
    assert repr(STRATEGIES["temporal_multi_hop"]) == (
        "bm25() >> dense() >> title_match() >> fuse() >> window() >> spread() >> mandatory() "
        ">> signals() >> window_boost() >> ppr() >> composite() >> budget()")
    assert SurfacingConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


# -- the graph as a re-ranker ---------------------------------------------------------------

@pytest.fixture
def graph_ws(store, clock):
    """Items a..f; c is linked to a and b (a bridge between them); e is linked to a (a seed)."""
    mem = Memory(store=store, workspace_id="ws-a", surfacing_mode="router", clock=clock)
    for name in "abcdef":
        mem.add(f"item {name}", item_id=name)
    mem.add_edge("c", "a", "RELATED")
    mem.add_edge("b", "c", "RELATED")
    mem.add_edge("e", "a", "MENTIONS")
    return mem


def _table(ws, scores, ranked_docs):
    """Candidates a..f (item numbers 0..5) with these composite scores; ``ranked_docs`` is the
    retrieval's order (item numbers, best first)."""
    n = len(scores)
    return CandidateTable({
        "idx": np.arange(n), "item_id": np.array(ws.ids_of(np.arange(n)), dtype=object),
        "relevance": np.full(n, 0.5), "score": np.array(scores, dtype=float),
        "mandatory": np.zeros(n, bool), "filtered": np.zeros(n, bool)},
        {"ranked_docs": np.array(ranked_docs, dtype=np.int64)})


def _order(table):
    return [table.item_id[i] for i in np.argsort(-table.score, kind="stable")]


def _run(mem, config):
    ws = mem.store.workspace("ws-a")
    return ws, QueryRun(ws, config, "q", ["q"], 3, mem.clock.now())


def test_linked_counts_is_undirected_and_follows_the_link_types(graph_ws):
    ws = graph_ws.store.workspace("ws-a")
    nodes = np.arange(6)
    assert linked_counts(ws, np.array([0, 1]), nodes, None).tolist() == [0, 0, 2, 0, 1, 0]
    assert linked_counts(ws, np.array([0]), nodes, None, ("MENTIONS",)).tolist() == \
        [0, 0, 0, 0, 1, 0]
    assert linked_counts(ws, np.array([0]), nodes, None, ("NO_SUCH_TYPE",)).tolist() == [0] * 6


def test_a_bridge_linked_to_two_top_hits_is_lifted(graph_ws):
    ws, run = _run(graph_ws, DEFAULT.replace(graph_bridge_boost=0.5, graph_bridge_hits=2,
                                             graph_bridge_links=2))
    table = _table(ws, [1.0, 0.9, 0.5, 0.6, 0.55, 0.1], [0, 1, 2, 3, 4, 5])
    out = GraphRerank()(run, table)
    # c (0.5 * 1.5 = 0.75) passes d (0.6) and e (0.55); e is linked to one hit only
    assert _order(out) == ["a", "b", "c", "d", "e", "f"]
    assert run.notes["graph_rerank"] == {"bridges": 1, "restored": 0, "restored_items": []}
    assert sorted(out.score.round(9)) == sorted(np.array([1.0, 0.9, 0.75, 0.6, 0.55, 0.1]))
    # one link is not enough at links=2; at links=1, e (linked to a) is a bridge too
    out = GraphRerank(links=1)(run, table)
    assert run.notes["graph_rerank"]["bridges"] == 2 and _order(out)[2:4] == ["e", "c"]


def test_the_guard_keeps_retrieval_hits_unless_the_replacement_is_linked(graph_ws):
    # the retrieval found a, d, f first; the graph's ranking puts b and e above d and f
    ws, run = _run(graph_ws, DEFAULT.replace(graph_guard_k=3, multi_hop_seeds=1))
    table = _table(ws, [1.0, 0.9, 0.2, 0.3, 0.8, 0.25], [0, 3, 5, 1, 2, 4])
    out = GraphRerank()(run, table)
    # the graph's order is a, b, e, d, f, c. e is linked to the seed a and stays; b is not
    # and gives d its place back: d and b swap places exactly, the rest keep theirs
    assert _order(out) == ["a", "d", "e", "b", "f", "c"]
    assert run.notes["graph_rerank"] == {"bridges": 0, "restored": 1, "restored_items": ["d"]}
    # e's link to a is a MENTIONS edge: counting only those links decides the same way
    ws, run = _run(graph_ws, DEFAULT.replace(graph_guard_k=3, multi_hop_seeds=1,
                                             graph_link_types=("MENTIONS",)))
    assert _order(GraphRerank()(run, table)) == ["a", "d", "e", "b", "f", "c"]
    ws, run = _run(graph_ws, DEFAULT.replace(graph_guard_k=2, multi_hop_seeds=1))
    # top 2 of the graph is a, b; retrieval's top 2 is a, d: b (not linked to a) gives way,
    # taking d's place (4th) while e keeps the 3rd
    assert _order(GraphRerank()(run, table)) == ["a", "d", "e", "b", "f", "c"]


def test_the_guard_never_touches_mandatory_or_filtered_rows(graph_ws):
    ws, run = _run(graph_ws, DEFAULT.replace(graph_guard_k=3, multi_hop_seeds=1))
    table = _table(ws, [1.0, 0.9, 0.2, 0.3, 0.8, 0.25], [0, 3, 5, 1, 2, 4])
    table = table.with_columns(mandatory=np.array([0, 0, 1, 0, 0, 0], bool))
    out = GraphRerank()(run, table)
    assert out.score[2] == 0.2  # the mandatory row keeps its score


def test_graph_rerank_runs_in_router_mode_only_when_turned_on(router):
    for i, text in enumerate(["alpha beta", "alpha gamma", "gamma delta", "beta delta"]):
        router.add(text, item_id=f"i{i}")
    router.add_edge("i0", "i2", "RELATED")
    router.add_edge("i1", "i2", "RELATED")
    router.get_working_context("s1", "why alpha", strategy="deep:multi-hop")
    assert "graph_rerank" not in router.last_context_record.timings_ms
    router.config = DEFAULT.replace(graph_bridge_boost=0.25)
    router.get_working_context("s1", "why alpha", strategy="deep:multi-hop")
    record = router.last_context_record
    assert "graph_rerank" in record.timings_ms and "graph_rerank" in record.notes
    # strategies without graph stages are left alone
    router.get_working_context("s1", "alpha", strategy="fast:recency")
    assert "graph_rerank" not in router.last_context_record.timings_ms


def test_graph_rerank_stage_validates_and_round_trips():
    stage = graph_rerank(boost=0.5, hits=2, links=1, guard_k=4)
    assert stage_from_dict(json.loads(json.dumps(stage.to_dict()))) == stage
    assert STAGES["graph_rerank"] is GraphRerank
    for bad in (dict(boost=-1), dict(boost=float("inf")), dict(hits=0), dict(links=0),
                dict(guard_k=-1), dict(hits=True)):
        with pytest.raises(ValueError, match="graph_rerank: "):
            graph_rerank(**bad)


def test_graph_rerank_config_fields_are_validated():
    assert DEFAULT.graph_bridge_boost == 0 and DEFAULT.graph_guard_k == 0  # off by default
    with pytest.raises(ValueError, match="graph_bridge_hits must be an integer > 0"):
        DEFAULT.replace(graph_bridge_hits=0)
    with pytest.raises(ValueError, match="graph_link_types must be None or a non-empty list"):
        DEFAULT.replace(graph_link_types="MENTIONS")
    with pytest.raises(ValueError, match="graph_link_types must be None or a non-empty list"):
        DEFAULT.replace(graph_link_types=())
    config = DEFAULT.replace(graph_link_types=["MENTIONS"], graph_guard_k=5)
    assert config.graph_link_types == ("MENTIONS",)
    assert SurfacingConfig.from_dict(json.loads(json.dumps(config.to_dict()))) == config


# -- the ablation's in-fold parameter choice never sees the held-out fold ---------------------

def test_multihop_cv_chooses_parameters_on_the_training_folds_only():
    import pandas as pd

    from benchmarks import multihop_cv as mcv

    folds = [[f"q{f}{i}" for i in range(4)] for f in range(5)]
    every = [q for f in folds for q in f]
    planted = mcv.label({"graph_guard_k": 10, "graph_link_types": None})

    class Planted:
        """Every configuration scores 0.5 on every question, except one grid point of the
        guard, which scores 1 on fold 0's questions and 0.45 elsewhere. Honest: fold 0 (its
        training folds say 0.45) keeps the first grid point, 0.5; every other fold's training
        includes fold 0 (mean 0.5875) and picks the planted point, 0.45 held out: a CV mean of
        0.46. Choosing on every question would give 0.56, on the held-out fold 0.6."""

        measures = ["R@5", "R@10", "MRR"]
        seen: list[str] = []

        def of(self, changes):
            key = mcv.label(changes)
            self.seen.append(key)
            values = [1.0 if q in folds[0] else 0.45 for q in every] if key == planted \
                else [0.5] * len(every)
            return pd.DataFrame({m: values for m in self.measures}, index=every)

    rows, final = mcv.musique_cv(Planted(), folds)
    table = pd.DataFrame(rows)
    pick = table[(table.configuration == "graph guard") & (table.measure == "R@5")]
    guard = pick[pick.kind == "CV"].iloc[0]
    assert guard.cv_mean == pytest.approx(46.0)
    assert guard.chosen.split("; ")[0] == mcv.label(mcv.OPTIONS["graph guard"][0])
    assert guard.chosen.split("; ")[1:] == [planted] * 4
    assert guard.delta == pytest.approx(-4.0) and (guard.folds_better, guard.folds_worse) == (0, 4)
    # the in-sample row chooses on every question (0.56 > 0.5) and says so
    assert pick[pick.kind == "in-sample"].iloc[0].cv_mean == pytest.approx(56.0)
    assert mcv.label(final["graph guard"]) == planted
