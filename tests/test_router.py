"""Every rule, confidence and reason string of SPEC §4.1, under both recipes.

The rule functions are tested directly with memlab's entity detector (``decide``); the routers
users get are tested through the recipes themselves: ``DEFAULT.router_rules`` (each rule and their
order) and ``SEED_COMPAT.router_rules`` (the seed's, with no entity counting), end to end through
``Memory.get_working_context``.
"""

import pytest

from memlab import DEFAULT, SEED_COMPAT, Memory, SurfacingStrategy
from memlab.surfacing.router import ENTITY_DETECTORS, ROUTER_RULES, route
from memlab.text import CapitalisedSpanDetector, Gazetteer
from tests.conftest import T0

SEED_RULES = SEED_COMPAT.router_rules


def decide(query, rules=SEED_RULES, gazetteer=None):
    d = route(query, rules, now=T0, detector=CapitalisedSpanDetector(), gazetteer=gazetteer)
    return d.strategy.value, d.confidence, list(d.reasons)


@pytest.mark.parametrize("query, expected", [
    ("why is the build red", ("deep:multi-hop", 0.75, ["keyword:why"])),
    ("how does auth work", ("deep:multi-hop", 0.75, ["keyword:how"])),
    ("what caused the outage", ("deep:multi-hop", 0.75, ["keyword:what caused"])),
    ("please explain the cache", ("deep:multi-hop", 0.75, ["keyword:explain"])),
    ("WHY and how", ("deep:multi-hop", 0.75, ["keyword:why", "keyword:how"])),
    ("did Alice meet Bob", ("deep:multi-hop", 0.75, ["entity_count:2"])),
    ("x" * 81, ("deep:multi-hop", 0.75, ["length:81"])),
    ("recent deploys", ("fast:recency", 0.8, ["recency_signal:recent"])),
    ("what changed recently", ("fast:recency", 0.8, ["recency_signal:recent"])),
    ("latest and newest notes today", ("fast:recency", 0.8, ["recency_signal:latest",
                                                           "recency_signal:newest",
                                                           "recency_signal:today"])),
    ("notes from yesterday", ("fast:recency", 0.8, ["recency_signal:yesterday"])),
    ("show open tickets", ("factual:point-query", 0.7, ["lookup_prefix:show"])),
    ("list users", ("factual:point-query", 0.7, ["lookup_prefix:list"])),
    ("find the runbook", ("factual:point-query", 0.7, ["lookup_prefix:find"])),
    ("all incidents", ("factual:point-query", 0.7, ["lookup_prefix:all"])),
    ("get tokens", ("factual:point-query", 0.7, ["lookup_prefix:get"])),
    ("invoices", ("factual:point-query", 0.65, ["bare_noun"])),
    ("the invoices", ("factual:point-query", 0.65, ["bare_noun"])),
    ("Stripe", ("factual:point-query", 0.65, ["bare_noun"])),
    ("status of Stripe payments", ("factual:point-query", 0.7, ["single_entity"])),
    ("status of payments", ("fast:recency", 0.5, ["fallback"])),
    ("what is the status of payments", ("fast:recency", 0.5, ["fallback"])),
    ("where is Stripe configured", ("fast:recency", 0.5, ["fallback"])),
    ("one two three four five six seven", ("fast:recency", 0.5, ["fallback"])),
    ("", ("fast:recency", 0.5, ["fallback"])),
])
def test_seed_rule_functions_with_memlab_entity_counting(query, expected):
    assert decide(query) == expected


def test_show_does_not_trigger_how_and_recently_triggers_recency():
    assert decide("show me the payments")[2] == ["lookup_prefix:show"]
    assert decide("what did we ship recently")[0] == "fast:recency"


def test_first_match_wins_multi_hop_before_recency():
    assert decide("why was the latest deploy slow") == ("deep:multi-hop", 0.75, ["keyword:why"])


def test_length_boundary_is_strictly_more_than_80():
    assert decide("a" * 80)[0] != "deep:multi-hop"
    assert decide("a" * 81)[2] == ["length:81"]


def test_signals_are_counted():
    d = route("Did Alice move the \"Q3 plan\"?", SEED_RULES, now=T0, detector=CapitalisedSpanDetector())
    assert d.signals == {"query_length": 29, "word_count": 6, "entity_count": 2}


def test_gazetteer_titles_count_as_entities():
    g = Gazetteer()
    g.add("edge cache")
    assert decide("edge cache sizing", gazetteer=g) == ("factual:point-query", 0.7, ["single_entity"])
    assert decide("edge cache sizing") == ("fast:recency", 0.5, ["fallback"])


def test_default_router_rules_are_the_documented_six_in_order():
    # the README's Router section and the router module docstring list exactly these
    assert DEFAULT.router_rules == ("procedural", "temporal", "multi_hop", "recency_words",
                                    "point_query", "question")
    assert DEFAULT.entity_detector == "capitalised"
    assert all(name in ROUTER_RULES for name in DEFAULT.router_rules)


def test_seed_compat_router_rules_are_the_seeds_three_without_entities():
    assert SEED_COMPAT.router_rules == ("multi_hop", "recency_words", "point_query")
    assert SEED_COMPAT.entity_detector == "none"
    assert ENTITY_DETECTORS["none"].detect('Did Alice move the "Q3 plan"?') == []


# Each rule of DEFAULT fires, and each pair of rules that both match is decided by the order.
DEFAULT_CASES = [
    # procedural (first: before multi_hop, whose "how" it contains, and before temporal)
    ("how to rotate keys", ("procedural:lookup", 0.7, ["procedural_cue:how to"])),
    ("how do i deploy", ("procedural:lookup", 0.7, ["procedural_cue:how do i"])),
    ("how to fix it in May 2023", ("procedural:lookup", 0.7, ["procedural_cue:how to"])),
    # temporal (before multi_hop and recency)
    ("what did we decide on 8 May 2023", ("temporal:windowed", 0.7, ["time_window:8 may 2023"])),
    ("why did it fail yesterday", ("temporal:windowed", 0.7, ["time_window:yesterday"])),
    ("notes from yesterday", ("temporal:windowed", 0.7, ["time_window:yesterday"])),
    # multi_hop (before recency, point_query and question), with memlab's entity counting
    ("why was the latest deploy slow", ("deep:multi-hop", 0.75, ["keyword:why"])),
    ("why is the build red?", ("deep:multi-hop", 0.75, ["keyword:why"])),
    ("did Alice meet Bob", ("deep:multi-hop", 0.75, ["entity_count:2"])),
    ("x" * 81, ("deep:multi-hop", 0.75, ["length:81"])),
    # recency (before point_query and question)
    ("show latest tickets", ("fast:recency", 0.8, ["recency_signal:latest"])),
    ("what changed recently", ("fast:recency", 0.8, ["recency_signal:recent"])),
    # point_query (before question)
    ("show me what changed?", ("factual:point-query", 0.7, ["lookup_prefix:show"])),
    ("invoices", ("factual:point-query", 0.65, ["bare_noun"])),
    ("status of Stripe payments", ("factual:point-query", 0.7, ["single_entity"])),
    # question (last: only questions no other rule took)
    ("where is Stripe configured", ("deep:multi-hop", 0.6, ["question:where"])),
    ("is the build red?", ("deep:multi-hop", 0.6, ["question:?"])),
    # no rule
    ("status of payments", ("fast:recency", 0.5, ["fallback"])),
]


@pytest.mark.parametrize("query, expected", DEFAULT_CASES)
def test_default_recipe_routes(router, query, expected):
    """DEFAULT's router as users get it: ``Memory(surfacing_mode="router")``."""
    assert router.config is DEFAULT
    router.get_working_context("s1", query)
    d = router.last_surfacing_decision
    assert (d.strategy.value, d.confidence, list(d.reasons)) == expected


def test_default_cases_exercise_every_rule_of_default():
    prefixes = {"procedural": "procedural_cue:", "temporal": "time_window:",
                "multi_hop": ("keyword:", "entity_count:", "length:"),
                "recency_words": "recency_signal:", "point_query": ("lookup_prefix:", "bare_noun",
                                                              "single_entity"),
                "question": "question:"}
    assert set(prefixes) == set(DEFAULT.router_rules)
    for rule, prefix in prefixes.items():
        assert any(reasons[0].startswith(prefix) for _, (_, _, reasons) in DEFAULT_CASES), rule


# The seed's rules through SEED_COMPAT: entity_count is always 0, so the entity clauses never fire.
SEED_CASES = [
    ("why is the build red", ("deep:multi-hop", 0.75, ["keyword:why"])),
    ("how does auth work", ("deep:multi-hop", 0.75, ["keyword:how"])),
    ("how to rotate keys", ("deep:multi-hop", 0.75, ["keyword:how"])),
    ("why did it fail yesterday", ("deep:multi-hop", 0.75, ["keyword:why"])),
    ("x" * 81, ("deep:multi-hop", 0.75, ["length:81"])),
    ("did Alice meet Bob", ("fast:recency", 0.5, ["fallback"])),
    ("notes from yesterday", ("fast:recency", 0.8, ["recency_signal:yesterday"])),
    ("show latest tickets", ("fast:recency", 0.8, ["recency_signal:latest"])),
    ("show open tickets", ("factual:point-query", 0.7, ["lookup_prefix:show"])),
    ("Stripe", ("factual:point-query", 0.65, ["bare_noun"])),
    ("status of Stripe payments", ("fast:recency", 0.5, ["fallback"])),
    ("where is Stripe configured", ("fast:recency", 0.5, ["fallback"])),
    ("what did we decide on 8 May 2023", ("fast:recency", 0.5, ["fallback"])),
]


@pytest.mark.parametrize("query, expected", SEED_CASES)
def test_seed_compat_routes(seed_router, query, expected):
    seed_router.get_working_context("s1", query)
    d = seed_router.last_surfacing_decision
    assert (d.strategy.value, d.confidence, list(d.reasons)) == expected
    assert d.signals["entity_count"] == 0


def test_memory_records_router_decision(seed_router):
    seed_router.get_working_context("s1", "Why did we pick JWT?")
    d = seed_router.last_surfacing_decision
    assert (d.strategy, d.confidence, d.reasons) == (SurfacingStrategy.DEEP_MULTI_HOP, 0.75,
                                                      ("keyword:why",))
    # the seed never counted entities (its documented example shows entity_count 0)
    assert d.signals == {"query_length": 20, "word_count": 5, "entity_count": 0}


def test_explicit_strategy_wins_in_router_mode(seed_router):
    resp = seed_router.get_working_context("s1", "why", strategy="factual:point-query")
    d = seed_router.last_surfacing_decision
    assert resp["strategy_used"] == "factual:point-query"
    assert (d.confidence, d.reasons) == (1.0, ("caller_explicit",))


def test_legacy_decision(legacy):
    resp = legacy.get_working_context("s1", "why did it break")
    d = legacy.last_surfacing_decision
    assert resp["strategy_used"] == "fast:recency"
    assert (d.strategy.value, d.confidence, d.reasons) == ("fast:recency", 1.0, ("legacy_mode",))
    legacy.get_working_context("s1", "x", strategy="fast:recency")


@pytest.mark.parametrize("strategy", ["deep:multi-hop", "factual:point-query", "procedural:lookup",
                                      "temporal:windowed"])
def test_legacy_rejects_other_strategies(legacy, strategy):
    with pytest.raises(ValueError, match="legacy"):
        legacy.get_working_context("s1", "x", strategy=strategy)


@pytest.mark.parametrize("strategy", ["procedural:lookup", "temporal:windowed"])
def test_reserved_strategies_soft_degrade_under_seed_compat(seed_router, strategy):
    resp = seed_router.get_working_context("s1", "deploy", strategy=strategy)
    d = seed_router.last_surfacing_decision
    assert resp["strategy_used"] == "fast:recency"
    assert d.reasons == ("caller_explicit", "unimplemented_strategy_soft_degrade")
    assert seed_router.last_context_record.requested_strategy == strategy


@pytest.mark.parametrize("strategy", ["procedural:lookup", "temporal:windowed"])
def test_reserved_strategies_are_implemented_in_default(router, strategy):
    resp = router.get_working_context("s1", "deploy", strategy=strategy)
    assert resp["strategy_used"] == strategy
    assert "unimplemented_strategy_soft_degrade" not in router.last_surfacing_decision.reasons


def test_unknown_strategy_lists_valid_values(router):
    with pytest.raises(ValueError, match="strategy must be one of .*'fast:recency'.*got 'nope'"):
        router.get_working_context("s1", "x", strategy="nope")


def test_unknown_mode_raises():
    with pytest.raises(ValueError, match="surfacing_mode must be one of .* got 'turbo'"):
        Memory(surfacing_mode="turbo")


def test_decision_round_trips(seed_router):
    seed_router.get_working_context("s1", "show tickets")
    d = seed_router.last_surfacing_decision
    from memlab import SurfacingDecision
    assert SurfacingDecision.from_dict(d.to_dict()) == d


def test_gazetteer_maps_titles_to_the_items_they_name():
    g = Gazetteer()
    g.add("David Jones (rugby)", 0)
    g.add("David Jones", 1)
    g.add("Lancashire", 2)
    # the parenthetical suffix is optional; longest match first; items ascending
    assert g.items_named("Did David Jones play in Lancashire?") == [0, 1, 2]
    assert g.items_named("david jones rugby stats") == [0]
    g.remove("David Jones (rugby)", 0)
    assert g.items_named("Did David Jones play?") == [1]
    assert g.items_named("david jones rugby") == [1]  # the longer title is gone, the shorter stays
    g.remove("David Jones", 1)
    assert g.items_named("Did David Jones play?") == [] and len(g) == 1


def test_readme_router_section_lists_default_rules_in_order():
    from pathlib import Path
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    section = readme[readme.index("### Router (SPEC §4.1)"):readme.index("### Strategies and recipes")]
    listed = [line for line in section.splitlines() if line.startswith("`procedural")]
    assert listed == ["`" + ", ".join(DEFAULT.router_rules) + "`"]
