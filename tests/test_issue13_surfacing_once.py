"""Issue 13, item 1: every item surfaces at most once, whatever is anchored, pinned or archived."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from memlab import BudgetTooSmall, ManualClock, Memory
from memlab.text import estimate_tokens
from tests.conftest import T0

WORDS = ["release", "deploy", "JWT", "why", "latest", "how", "list", "canary", "stripe"]
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=12).map(" ".join)


def _surfaced_rows(record) -> list[str]:
    return [i for i, s in zip(record.candidates["item_id"], record.candidates["surfaced"]) if s]


def test_issue13_anchor_also_pinned_surfaces_once():
    for mode in ("router", "legacy"):
        mem = Memory(surfacing_mode=mode, clock=ManualClock(T0))
        mem.add_anchor("s1", "ship the release", item_id="goal")
        mem.add("release notes draft", item_id="d")
        mem.pin_item("s1", "goal")
        response = mem.get_working_context("s1", "release", k=2)
        record = mem.last_context_record
        assert [it["item_id"] for it in response["items"]] == ["goal", "d"], mode
        assert record.candidates["item_id"] == ["goal", "d"], mode
        assert response["tokens_used"] == estimate_tokens("ship the release") + \
            estimate_tokens("release notes draft"), mode
        # the anchor keeps its pin weight (router mode boosts it as a pin too)
        assert record.candidates["pin_weight"][0] == 1.0
        assert record.candidates["source"][0] == "anchor"


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(items=st.lists(texts, min_size=0, max_size=12), anchors=st.lists(texts, max_size=3),
       picks=st.lists(st.tuples(st.sampled_from(["pin", "archive"]), st.integers(0, 14)),
                      max_size=10),
       edges=st.lists(st.tuples(st.integers(0, 14), st.integers(0, 14)), max_size=10),
       query=st.lists(st.sampled_from(WORDS), max_size=4).map(" ".join),
       k=st.integers(1, 6), budget=st.one_of(st.none(), st.integers(1, 40)),
       mode=st.sampled_from(["legacy", "router"]))
def test_every_item_surfaces_at_most_once_and_tokens_add_up(items, anchors, picks, edges, query,
                                                            k, budget, mode):
    mem = Memory(surfacing_mode=mode, clock=ManualClock(T0))
    ids = mem.add_many(items) + [mem.add_anchor("s", t) for t in anchors]
    if not ids:
        return
    index = mem.store.workspace(mem.workspace_id).index_of
    for src, dst in edges:
        if ids[src % len(ids)] != ids[dst % len(ids)]:
            mem.add_edge(ids[src % len(ids)], ids[dst % len(ids)])
    for action, pos in picks:  # anchors, archived items and archived anchors get pinned too
        item_id = ids[pos % len(ids)]
        if action == "pin":
            mem.pin_item("s", item_id)
        else:
            mem.store.archive(mem.workspace_id, [index[item_id]], T0, "test")
    try:
        response = mem.get_working_context("s", query, k=k, max_tokens=budget)
    except BudgetTooSmall:
        assert budget is not None and anchors and \
            min(estimate_tokens(t) for t in anchors) > budget
        return
    record = mem.last_context_record
    out = [it["item_id"] for it in response["items"]]
    assert len(out) == len(set(out))
    surfaced = _surfaced_rows(record)
    assert len(surfaced) == len(set(surfaced)) and surfaced == out
    assert len(record.candidates["item_id"]) == len(set(record.candidates["item_id"]))
    assert response["tokens_used"] == record.tokens_used == \
        sum(estimate_tokens(it["content"]) for it in response["items"])


def test_issue13_k_and_budget_in_legacy_mode_are_what_the_docstring_says():
    # Memory.get_working_context: in legacy mode k and max_tokens count every item, anchors and
    # retrieved pins included; in router mode mandatory items come on top of both
    surfaced = {}
    for mode in ("legacy", "router"):
        mem = Memory(surfacing_mode=mode, clock=ManualClock(T0))
        mem.add_anchor("s1", "ship the release", item_id="g1")
        mem.add_anchor("s1", "keep the release notes short and precise", item_id="g2")
        mem.add("release notes draft", item_id="d")
        mem.add("unrelated text", item_id="u")
        mem.pin_item("s1", "u")
        surfaced[mode, "k"] = [it["item_id"] for it in
                               mem.get_working_context("s1", "release", k=1)["items"]]
        surfaced[mode, "budget"] = [it["item_id"] for it in mem.get_working_context(
            "s1", "release", k=5, max_tokens=5)["items"]]
    assert surfaced["legacy", "k"] == ["g1"]
    assert surfaced["legacy", "budget"] == ["g1"]
    assert surfaced["router", "k"] == ["g1", "g2", "u", "d"]
    assert surfaced["router", "budget"] == ["g1", "g2", "u"]
