"""Issue 15 item 6: one meaning per name. The strategy implementations that were called like
signals ("relevance", "recency") and search_graph's coverage "score" have new names; the old
ones still work for one release, with a DeprecationWarning. Also: the select walk's fast path
against the walk itself, and the stage base class that reads the recipe's settings."""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import ClassVar

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab import Memory
from memlab.session import create_relation, search_graph, upsert_node
from memlab.surfacing.composite import select
from memlab.surfacing.config import BM25_ONLY, DEFAULT, SEED_COMPAT, SurfacingConfig
from memlab.surfacing.stages import Pipeline, RecipeStage, bm25, budget, composite, signals
from memlab.surfacing.stages import mandatory as mandatory_stage
from memlab.surfacing.strategies import STRATEGIES, STRATEGY_ALIASES


def test_built_in_recipes_use_the_new_implementation_names():
    assert STRATEGY_ALIASES == {"relevance": "plain", "recency": "recent_items"}
    names = {impl for cfg in (DEFAULT, SEED_COMPAT, BM25_ONLY) for _, impl in cfg.strategies}
    assert "plain" in names and "recent_items" in names
    assert not names & set(STRATEGY_ALIASES)
    assert {"relevance", "recency"}.isdisjoint(STRATEGIES)  # not registered twice


@pytest.mark.parametrize("old, new", [("relevance", "plain"), ("recency", "recent_items")])
def test_old_implementation_names_warn_and_resolve(old, new):
    with pytest.warns(DeprecationWarning, match=f"{old!r} is now called {new!r}"):
        assert STRATEGIES[old] is STRATEGIES[new]
    with pytest.warns(DeprecationWarning, match=f"{old!r} is now called {new!r}"):
        cfg = DEFAULT.replace(strategies={"fast:recency": old})
    assert cfg.strategy_impl("fast:recency") == new
    assert SurfacingConfig.from_dict(cfg.to_dict()) == cfg  # it serialises the new name
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the new names do not warn
        DEFAULT.replace(strategies={"fast:recency": new})
    with pytest.raises(KeyError):
        STRATEGIES["not-a-strategy"]


def test_a_record_names_the_new_implementation():
    mem = Memory(surfacing_mode="router")
    mem.add("alpha beta")
    mem.get_working_context("s1", "alpha", strategy="fast:recency")
    assert mem.last_context_record.implementation == "recent_items"
    legacy = Memory(surfacing_mode="legacy")
    legacy.add("alpha beta")
    legacy.get_working_context("s1", "alpha")
    assert legacy.last_context_record.implementation == "plain"


def _graph():
    mem = Memory()
    a = upsert_node("s1", "concept", "authentication", "fresh login flow", memory=mem)
    b = upsert_node("s1", "fact", "tokens", "JWT tokens expire after 15 minutes", memory=mem)
    create_relation("s1", a, b, memory=mem)
    return mem


def test_search_graph_reports_coverage_and_the_old_score_warns():
    mem = _graph()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        hits = search_graph("s1", "authentication", memory=mem)
        assert [(h["label"], h["coverage"], h["depth"]) for h in hits] == [
            ("authentication", 1.0, 0), ("tokens", 0.5, 1)]
    with pytest.warns(DeprecationWarning, match="'score' is now called 'coverage'"):
        assert hits[0]["score"] == 1.0
    with pytest.warns(DeprecationWarning, match="'score' is now called 'coverage'"):
        assert hits[1].get("score") == 0.5
    assert dict(hits[1])["score"] == 0.5  # still in the plain dict (JSON keeps it)


def test_search_graph_min_score_is_the_deprecated_min_coverage():
    mem = _graph()
    new = search_graph("s1", "authentication", min_coverage=0.9, memory=mem, max_depth=0)
    with pytest.warns(DeprecationWarning, match="min_score is now called min_coverage"):
        old = search_graph("s1", "authentication", min_score=0.9, memory=mem, max_depth=0)
    assert old == new and len(new) == 1
    with pytest.raises(ValueError, match="min_coverage"):
        search_graph("s1", "authentication", min_coverage=2.0, memory=mem)
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="not both"):
        search_graph("s1", "authentication", min_coverage=0.5, min_score=0.5, memory=mem)


def _walk(order, tokens, mandatory, filtered, drop, *, k, legacy):
    """The budget's walk without a token budget, written out: the oracle of select's fast path."""
    surfaced, drop = [False] * len(tokens), list(drop)
    optional = total = used = 0
    for pos in order:
        if filtered[pos]:
            continue
        if mandatory[pos] and not legacy:
            surfaced[pos], used = True, used + int(tokens[pos])
            continue
        if (total if legacy else optional) >= k:
            drop[pos] = "k_cut"
            continue
        surfaced[pos], used = True, used + int(tokens[pos])
        total += 1
        optional += not mandatory[pos]
    return surfaced, drop, used


@settings(max_examples=200, deadline=None)
@given(st.integers(0, 120), st.integers(1, 30), st.booleans(), st.integers(0, 2**32 - 1))
def test_select_without_a_token_budget_is_the_walk(n, k, legacy, seed):
    rng = np.random.default_rng(seed)
    order = rng.permutation(n)
    tokens = rng.integers(1, 50, n)
    mandatory, filtered = rng.random(n) < 0.2, rng.random(n) < 0.2
    drop = np.array([("outside_window" if f else None) for f in filtered], dtype=object)
    surfaced, got_drop, used = select(order, tokens, mandatory, filtered, drop, k=k,
                                      max_tokens=None, legacy=legacy)
    want = _walk(order.tolist(), tokens, mandatory, filtered, drop, k=k, legacy=legacy)
    assert surfaced.tolist() == want[0] and got_drop == want[1] and used == want[2]
    assert isinstance(used, int)


@dataclass(frozen=True, repr=False)
class Lift(RecipeStage):
    name: ClassVar[str] = "lift_test"
    phase: ClassVar[str] = "adjust"
    recipe: ClassVar[dict] = {"factor": "exact_match_boost"}
    factor: float | None = None

    def __call__(self, run, table):
        factor = self.setting(run, "factor")
        return table.with_columns(multiplier=table.multiplier * (1 + factor))


def test_a_recipe_stage_reads_what_it_leaves_at_none_from_the_recipe():
    mem = Memory(surfacing_mode="router")
    mem.add("alpha beta", item_id="a")
    base = bm25() >> mandatory_stage() >> signals()
    for stage, factor in ((Lift(), DEFAULT.exact_match_boost), (Lift(2.0), 2.0)):
        pipe = Pipeline((base >> stage >> composite() >> budget()).stages, "lift")
        mem.config = DEFAULT.replace(strategies={"fast:recency": pipe})
        mem.get_working_context("s1", "alpha", strategy="fast:recency")
        assert mem.last_context_record.candidates["multiplier"] == [1 + factor]


def test_a_table_keeps_copies_of_what_add_was_handed():
    from memlab.surfacing.table import CandidateTable

    idx, rel = np.array([4, 2, 7]), np.array([0.1, 0.2, 0.3])
    table = CandidateTable.empty().add(idx, "spread", relevance=rel)
    idx[:] = 0
    rel[:] = 9.0
    assert table.idx.tolist() == [4, 2, 7] and table.relevance_override.tolist() == [0.1, 0.2, 0.3]
    assert table.source.tolist() == ["spread"] * 3 and idx.flags.writeable
    more = table.add(np.array([2, 5, 5, 8]), "recent", allowed=np.arange(10) != 8)
    assert more.idx.tolist() == [4, 2, 7, 5] and more.source.tolist()[-1] == "recent"
    assert np.isnan(more.relevance_override[-1])


def _order_oracle(ids, relevance, score, mandatory, filtered):
    """The ordering rule with numpy alone (what order_candidates did before its fast path)."""
    id_rank = np.argsort(np.argsort(np.array(ids, dtype=object), kind="stable"), kind="stable")
    return np.lexsort((id_rank, -relevance, -score, ~mandatory, filtered))


@settings(max_examples=300, deadline=None)
@given(st.integers(1, 90), st.integers(0, 2**32 - 1), st.booleans())
def test_order_candidates_is_the_ordering_rule(n, seed, with_nan):
    from memlab.surfacing.composite import order_candidates

    rng = np.random.default_rng(seed)
    ids = [f"i{v:03d}" for v in rng.permutation(1000)[:n]]
    # few distinct values, so that ties reach the later keys and the item id
    relevance = rng.choice([0.0, -0.0, 0.5, 1.0], n)
    score = rng.choice([0.0, 0.25, 0.5, np.inf], n)
    if with_nan:
        score[rng.integers(0, n)] = np.nan
    mandatory, filtered = rng.random(n) < 0.3, rng.random(n) < 0.3
    got = order_candidates(ids, relevance, score, mandatory, filtered)
    want = _order_oracle(ids, relevance, score, mandatory, filtered)
    assert got.dtype == np.int64 and got.tolist() == want.tolist()
