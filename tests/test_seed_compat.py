"""``SEED_COMPAT`` is the seed (issue 13, item 6).

The recipe carries the seed's tokenizer (``analyzer="plain"``: no stemming) and the seed's entity
counting (none: ``entity_detector="none"``), and a differential test runs it against
``tests/seed_reference.py``, a naive re-implementation of the seed written from SPEC §2–4, on
random memories, edges, pins, anchors, retrievals, clock steps and queries, in legacy and in
router mode: same strategy and decision, same items in the same order, scores equal to 1e-12.
"""

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab import DEFAULT, SEED_COMPAT, BudgetTooSmall, ManualClock, Memory, MemoryStore
from memlab.surfacing.config import SurfacingConfig
from tests import seed_reference as ref
from tests.conftest import T0


# ------------------------------------------------------------------------- regression tests
def test_issue13_seed_compat_counts_no_entities(seed_router):
    """"Alice and Bob" went to deep:multi-hop with entity_count:2, which the seed never computed."""
    seed_router.add("Alice and Bob planned the trip")
    resp = seed_router.get_working_context("s1", "Alice and Bob")
    d = seed_router.last_surfacing_decision
    assert resp["strategy_used"] == "fast:recency"
    assert (d.confidence, d.reasons) == (0.5, ("fallback",))
    assert d.signals == {"query_length": 13, "word_count": 3, "entity_count": 0}


def test_issue13_default_still_counts_entities(router):
    router.add("Alice and Bob planned the trip")
    router.get_working_context("s1", "Alice and Bob")
    d = router.last_surfacing_decision
    assert (d.strategy.value, d.reasons) == ("deep:multi-hop", ("entity_count:2",))
    assert d.signals["entity_count"] == 2


@pytest.mark.parametrize("mode", ["legacy", "router"])
def test_issue13_seed_compat_plain_analyzer(store, clock, mode):
    """The store's Porter stemming made "paint" find "painting" under SEED_COMPAT."""
    seed = Memory(store=store, workspace_id="w", surfacing_mode=mode, clock=clock,
                  config=SEED_COMPAT)
    default = Memory(store=store, workspace_id="w", surfacing_mode="router", clock=clock)
    seed.add("she took painting classes", item_id="painting")
    ids = lambda resp: [item["item_id"] for item in resp["items"]]  # noqa: E731
    assert ids(seed.get_working_context("s1", "paint")) == []
    assert ids(default.get_working_context("s1", "paint")) == ["painting"]
    # writes after the seed's index was built reach it (and the default one)
    seed.add("wet paint on the door", item_id="door")
    assert ids(seed.get_working_context("s1", "paint")) == ["door"]
    assert ids(default.get_working_context("s1", "paint")) == ["door", "painting"]


def test_issue13_legacy_memory_defaults_to_the_seed_tokenizer(clock):
    mem = Memory(clock=clock)  # legacy mode, SEED_COMPAT
    mem.add("she took painting classes")
    assert mem.get_working_context("s1", "paint")["items"] == []
    assert len(mem.search("paint")) == 1  # explicit search reads the store's (Porter) index


def test_analyzer_is_validated_and_serialised():
    with pytest.raises(ValueError, match="analyzer must be None or one of .*got 'snowball'"):
        DEFAULT.replace(analyzer="snowball")
    assert SEED_COMPAT.analyzer == "plain" and DEFAULT.analyzer is None
    assert SurfacingConfig.from_dict(SEED_COMPAT.to_dict()) == SEED_COMPAT
    with pytest.raises(ValueError, match="entity_detector names 'nobody'"):
        Memory(config=DEFAULT.replace(entity_detector="nobody"))


def test_a_second_analyzer_index_is_built_lazily_and_kept_exact(clock):
    store = MemoryStore()
    mem = Memory(store=store, workspace_id="w", surfacing_mode="router", clock=clock)
    mem.add_many(["painting the fence", "fences and paints", "the painter paints"])
    ws = store.workspace("w")
    assert ws.other_bm25 == {}  # DEFAULT-only use builds nothing
    analyze, lazy = ws.bm25_for("plain")
    assert ws.bm25_for(None)[1] is ws.bm25 and ws.bm25_for("porter")[1] is ws.bm25
    mem.add("paint the painting")
    mem.add_many(["a fence", "paints"])
    store.update_item("w", 1, clock.now(), content="fences and painting")
    fresh = MemoryStore(analyzer="plain")
    Memory(store=fresh, workspace_id="w").add_many([item.content for item in ws.items])
    for query in ("paint", "painting", "paints fence", "fences painting the"):
        got = lazy.scores(analyze(query))
        want = fresh.workspace("w").bm25.scores(analyze(query))
        assert got[0].tolist() == want[0].tolist()
        assert got[1].tolist() == pytest.approx(want[1].tolist(), abs=1e-12)


# ------------------------------------------------------------------------- differential test
VOCAB = ("paint painting paints deploy deploys friday fridays auth jwt token tokens cache caches "
         "plan plans trip outage server logs notes invoice invoices Alice Bob Stripe JWT Apollo "
         "the a is and of to it's don't why how what caused explain recent recently latest today "
         "yesterday newest list show get find all who where when which whose"
         ).split()
EDGE_TYPES = ("RELATED", "MENTIONS", "PART_OF", "CONTRADICTS", "SUPERSEDES")
NAMES = tuple(f"{c}{n}" for c in "kbxa" for n in range(4))

text = st.lists(st.sampled_from(VOCAB), min_size=1, max_size=10).map(" ".join)
query_text = st.one_of(
    st.lists(st.sampled_from(VOCAB), min_size=0, max_size=8).map(" ".join),
    st.tuples(st.sampled_from(["why", "how", "what caused", "explain", "Why"]), text)
    .map(" ".join),
    st.text(alphabet="ab _'?.Zü ", max_size=12),
    text.map(lambda t: (t + " ") * 9),  # over 80 characters
)


@st.composite
def scenarios(draw):
    n = draw(st.integers(1, 9))
    ids = draw(st.permutations(NAMES))[:n]
    items = [(ids[i], draw(text), draw(st.sampled_from(["semantic", "episodic", "procedural"])),
              -draw(st.integers(0, 96)) - draw(st.sampled_from([0.0, 0.25, 0.5])))
             for i in range(n)]
    edges = draw(st.lists(st.tuples(st.sampled_from(ids), st.sampled_from(ids),
                                    st.sampled_from(EDGE_TYPES), st.sampled_from([0.5, 1.0, 2.0])),
                          max_size=12))
    ops = draw(st.lists(st.one_of(
        st.tuples(st.just("advance"), st.sampled_from([1.0, 6.5, 20.0, 23.5, 24.0, 30.0])),
        st.tuples(st.just("get"), st.sampled_from(ids)),
        st.tuples(st.just("pin"), st.sampled_from(ids), st.sampled_from([0.5, 1.0, 2.0])),
        st.tuples(st.just("unpin"), st.sampled_from(ids)),
        st.tuples(st.just("anchor"), text),
        st.tuples(st.just("query"), query_text, st.integers(1, 6),
                  st.one_of(st.none(), st.integers(1, 30)),
                  st.one_of(st.none(), st.sampled_from(["fast:recency", "deep:multi-hop",
                                                        "factual:point-query",
                                                        "procedural:lookup",
                                                        "temporal:windowed"]))),
    ), min_size=1, max_size=8))
    ops.append(("query", draw(query_text), draw(st.integers(1, 6)), None, None))
    return items, [e for e in edges if e[0] != e[1]], ops


# SEED_COMPAT with only the spreading stage's wall-clock budget lifted, so that a loaded machine
# cannot cut a hop short (no assertion may depend on wall-clock time); networkx PPR has no budget.
SEED_UNBUDGETED = SEED_COMPAT.replace(spreading=replace(SEED_COMPAT.spreading, budget_ms=1e9))


def test_the_unbudgeted_recipe_is_seed_compat_but_for_the_spreading_budget():
    a, b = SEED_UNBUDGETED.to_dict(), SEED_COMPAT.to_dict()
    assert a["spreading"].pop("budget_ms") == 1e9
    b["spreading"].pop("budget_ms")
    assert a == b


def _check(mem: Memory, clock: ManualClock, world: ref.RefWorld, op, now_h: float, mode: str):
    _, query, k, max_tokens, strategy = op
    if mode == "legacy" and strategy not in (None, "fast:recency"):
        strategy = None
    try:
        want = ref.working_context(world, query, now_h=now_h, mode=mode, k=k,
                                   max_tokens=max_tokens, strategy=strategy)
    except ref.BudgetTooSmallError:
        with pytest.raises(BudgetTooSmall):
            mem.get_working_context("s", query, k=k, max_tokens=max_tokens, strategy=strategy)
        return
    got = mem.get_working_context("s", query, k=k, max_tokens=max_tokens, strategy=strategy)
    d = mem.last_surfacing_decision
    assert (got["strategy_used"], d.confidence, list(d.reasons), d.signals) == \
        (want["strategy"], want["confidence"], want["reasons"], want["signals"]), query
    assert [it["item_id"] for it in got["items"]] == [r["item_id"] for r in want["items"]], query
    assert got["tokens_used"] == want["tokens_used"]
    record = mem.last_context_record.candidates
    scores = [s for s, shown in zip(record["score"], record["surfaced"]) if shown]
    for item, expected, score in zip(got["items"], want["items"], scores):
        assert score == pytest.approx(expected["score"], abs=1e-12, rel=0)
        breakdown = item["score_breakdown"]
        for name in ("activation", "relevance", "recency", "centrality", "session_pin_boost",
                     "freshness_boost"):
            assert breakdown[name] == pytest.approx(expected[name], abs=1e-12, rel=0), name
        assert breakdown["anchor_forced"] == expected["anchor_forced"]


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenario=scenarios())
def test_seed_compat_matches_the_naive_seed_reference(scenario):
    items, edges, ops = scenario
    for mode in ("legacy", "router"):
        clock = ManualClock(T0)
        mem = Memory(store=MemoryStore(), workspace_id="w", surfacing_mode=mode, clock=clock,
                     config=SEED_UNBUDGETED)
        world = ref.RefWorld()
        now_h = 0.0
        for item_id, content, memory_type, created_h in items:
            mem.add(content, memory_type=memory_type, item_id=item_id,
                    created_at=T0 + timedelta(hours=created_h))
            world.add(item_id, content, memory_type, created_h)
        for src, dst, edge_type, weight in edges:
            mem.add_edge(src, dst, edge_type, weight)
            world.add_edge(src, dst, edge_type, weight)
        anchors = 0
        for op in ops:
            if op[0] == "advance":
                clock.advance(hours=op[1])
                now_h += op[1]
            elif op[0] == "get":
                mem.get(op[1])
                world.get(op[1], now_h)
            elif op[0] == "pin":
                mem.pin_item("s", op[1], op[2])
                world.pin(op[1], op[2], now_h)
            elif op[0] == "unpin":
                mem.unpin_item("s", op[1])
                world.unpin(op[1], now_h)
            elif op[0] == "anchor":
                anchor_id = f"anchor{anchors}"
                anchors += 1
                mem.add_anchor("s", op[1], item_id=anchor_id)
                world.add(anchor_id, op[1], "anchor", now_h)
                world.anchors.append(anchor_id)
            else:
                _check(mem, clock, world, op, now_h, mode)


def test_the_reference_tokenizer_agrees_with_memlab_on_stopwords():
    """The reference derives its stopwords from NLTK's list independently; the sets agree."""
    from memlab.text import STOPWORDS
    assert ref.STOPWORDS == STOPWORDS


def test_issue13_seed_compat_ppr_cache_sees_new_items(clock):
    """Found by the differential test: networkx stops at ``tol * n``, so adding an item changes
    PPR, but the cache key (graph version, seeds) did not change and served the old result."""
    def build(extra: bool) -> Memory:
        mem = Memory(surfacing_mode="router", clock=clock, config=SEED_COMPAT)
        mem.add_many([{"content": "paint", "item_id": "k0"}, {"content": "paint", "item_id": "k1"}])
        mem.add_edge("k0", "k1", "RELATED", 0.5)
        if extra:
            mem.add("unrelated", item_id="z")
        return mem

    warm = build(extra=False)
    warm.get_working_context("s", "why paint", k=2)  # fills the PPR cache
    warm.add("unrelated", item_id="z")
    got = warm.get_working_context("s", "why paint", k=2)
    want = build(extra=True).get_working_context("s", "why paint", k=2)
    assert [i["item_id"] for i in got["items"]] == [i["item_id"] for i in want["items"]]
    for a, b in zip(got["items"], want["items"]):
        assert a["score_breakdown"] == b["score_breakdown"]
