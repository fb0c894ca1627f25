"""Issue 13 item 4 (non-ASCII titles and labels) and item 9 (the point-query exact match).

Every normaliser (titles, labels, the gazetteer, shingles, the point-query match, BM25 tokens)
goes through :func:`memlab.text.words`: NFKC, casefold, runs of letters, digits and combining
marks of any script.
"""

import sys
import unicodedata

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab import ManualClock, Memory
from memlab.maintenance import MaintenanceConfig, Reasoner, shingles
from memlab.session import upsert_node
from memlab.text import STOPWORDS, Gazetteer, normalise_title, tokenize
from tests.conftest import T0


def _has_letter_or_digit(text: str) -> bool:
    return any(unicodedata.category(c)[0] in "LN" for c in text)


# ---------------------------------------------------------------- regression: item 4
def test_issue13_non_ascii_title_keeps_its_letters():
    assert normalise_title("Zürich") == "zürich"
    assert normalise_title("  ZÜRICH! ") == "zürich"
    mem = Memory()
    a = upsert_node("s1", "concept", "Zürich", "the city on the lake", memory=mem)
    b = upsert_node("s1", "concept", "Z rich", "a rich Z", memory=mem)
    assert a != b
    assert mem.get(a)["content"] == "the city on the lake"


def test_issue13_non_ascii_labels_do_not_collide():
    mem = Memory()
    tree = upsert_node("s1", "concept", "Ёлка 2", "the second fir tree", memory=mem)
    kite = upsert_node("s1", "concept", "Змей 2", "the second kite", memory=mem)
    assert tree != kite
    assert mem.get(tree)["content"] == "the second fir tree"
    assert mem.get(kite)["content"] == "the second kite"
    # the same label in another case and Unicode form is the same node
    assert upsert_node("s1", "concept", "ЁЛКА 2", "updated", memory=mem) == tree
    assert upsert_node("s1", "concept", "Е\u0308лка 2", "updated again", memory=mem) == tree


def test_issue13_cyrillic_label_is_accepted():
    mem = Memory()
    node = upsert_node("s1", "fact", "Москва", "столица России", memory=mem)
    assert mem.get(node)["metadata"]["label"] == "Москва"
    for label in ("मुंबई", "東京", "١٢٣", "Ⅻ"):
        upsert_node("s1", "fact", label, "a place or a number", memory=mem)
    with pytest.raises(ValueError, match="label"):
        upsert_node("s1", "fact", "?!", "no letter or digit", memory=mem)


def test_issue13_reasoner_does_not_merge_unrelated_non_ascii_items():
    mem = Memory(clock=ManualClock(T0))
    mem.add("Ёлка стоит в гостиной 2024", memory_type="concept", item_id="tree",
            metadata={"title": "Ёлка 2"})
    mem.add("Змей летит над полем 2024", memory_type="concept", item_id="kite",
            metadata={"title": "Змей 2"})
    report = Reasoner(mem, MaintenanceConfig(passes=("revise_duplicates",))).run(dry_run=True)
    assert report.actions == []
    assert shingles("Ёлка стоит в гостиной 2024") != shingles("Змей летит над полем 2024")
    # real duplicates in Cyrillic still merge: by normalised title and by shingles
    mem.clock.advance(hours=1)
    mem.add("другой текст", memory_type="concept", item_id="tree2", metadata={"title": "ЁЛКА 2!"})
    mem.add("Змей летит над полем 2024", memory_type="concept", item_id="kite2")
    report = Reasoner(mem, MaintenanceConfig(passes=("revise_duplicates",))).run(dry_run=True)
    assert sorted((a["keep"], a["merge"], a["reason"]) for a in report.actions) == [
        ("kite", "kite2", "near_duplicate"), ("tree", "tree2", "title")]


def test_issue13_gazetteer_and_bm25_keep_combining_marks():
    assert tokenize("हिन्दी भाषा") == ["हिन्दी", "भाषा"]
    assert normalise_title("हिन्दी") != normalise_title("हन्द")
    g = Gazetteer()
    g.add("Zu\u0308rich", 0)            # decomposed ü
    g.add("हिन्दी", 1)
    assert g.items_named("a trip to ZÜRICH") == [0]
    assert g.find("मैं हिन्दी बोलता हूँ") == [(4, 10, "हिन्दी")]
    assert g.items_named("हन्द") == []


def test_issue13_bm25_matches_across_unicode_forms(router):
    router.add("Notes from Zu\u0308rich and Москва", item_id="trip")
    router.add("Notes from Paris", item_id="other")
    for query in ("zürich notes", "МОСКВА notes"):
        ctx = router.get_working_context("s1", query, strategy="fast:recency", k=1)
        assert [it["item_id"] for it in ctx["items"]] == ["trip"], query


# ---------------------------------------------------------------- regression: item 9
def test_issue13_point_query_exact_match_is_not_a_character_prefix(router):
    router.add("Catalog: every cat product we sell, with prices", item_id="catalog")
    router.add("The cat sleeps on the catalog", item_id="cat")
    router.get_working_context("s1", "cat", strategy="factual:point-query")
    c = router.last_context_record.candidates
    assert dict(zip(c["item_id"], c["exact_match"])) == {"catalog": False, "cat": False}
    router.get_working_context("s1", "catalog", strategy="factual:point-query")
    c = router.last_context_record.candidates
    assert dict(zip(c["item_id"], c["exact_match"])) == {"catalog": True, "cat": False}


def test_issue13_point_query_matches_title_and_first_segment_exactly(router):
    router.add("Edge cache\nA read-through cache in front of the API", item_id="line")
    router.add("A read-through edge cache", item_id="titled", metadata={"label": "EDGE-cache"})
    router.add("Edge caches: sizing notes", item_id="plural")
    router.add("Edge cache sizing notes", item_id="longer")
    router.get_working_context("s1", "edge cache", strategy="factual:point-query", k=10)
    c = router.last_context_record.candidates
    assert {i for i, m in zip(c["item_id"], c["exact_match"]) if m} == {"line", "titled"}


# ---------------------------------------------------------------- properties
# any code point but surrogates, mixed with characters whose normal forms coincide or that need
# marks (so that equal normal forms of different strings are drawn often, not by luck)
_TEXT = st.text(st.one_of(st.characters(blacklist_categories=("Cs",)),
                          st.sampled_from(list("aAеЕёЁ\u0308\u0301éÉßsSſKKﬁ2²₂ हिनदी्\ufe0f-!"))),
                max_size=12)


@settings(max_examples=200, deadline=None)
@given(a=_TEXT, b=_TEXT)
def test_labels_collide_only_when_their_normal_forms_are_equal(a, b):
    mem = Memory()
    ids = []
    for label in (a, b):
        if normalise_title(label):
            ids.append(upsert_node("s1", "concept", label, f"about {label!r}", memory=mem))
        else:
            assert not _has_letter_or_digit(label)
            with pytest.raises(ValueError, match="label"):
                upsert_node("s1", "concept", label, "nothing to name it by", memory=mem)
    if len(ids) == 2:
        assert (ids[0] == ids[1]) == (normalise_title(a) == normalise_title(b))
        assert mem.get(ids[1])["content"] == f"about {b!r}"
        if ids[0] != ids[1]:
            assert mem.get(ids[0])["content"] == f"about {a!r}"


@settings(max_examples=200, deadline=None)
@given(text=_TEXT)
def test_normal_form_is_stable_and_keeps_every_letter_and_digit(text):
    key = normalise_title(text)
    assert normalise_title(key) == key
    assert normalise_title(unicodedata.normalize("NFD", text)) == key
    assert normalise_title(unicodedata.normalize("NFKC", text)) == key
    assert key == key.strip() and "  " not in key
    if _has_letter_or_digit(text):
        assert key
    assert tokenize(text) == [w for w in key.split() if w not in STOPWORDS]
    assert shingles(text, 1) == frozenset((w,) for w in key.split())


@settings(max_examples=200, deadline=None)
@given(title=_TEXT, before=_TEXT, after=_TEXT)
def test_gazetteer_finds_a_title_in_any_unicode_text(title, before, after):
    g = Gazetteer()
    g.add(title, 7)
    key = normalise_title(title)
    text = f"{before} {title} {after}"
    if key and key.count(" ") < 8:
        assert g.items_named(text) == [7]
    last = 0
    for start, end, phrase in g.find(text):
        assert last <= start < end <= len(text)
        assert f" {phrase} " in f" {normalise_title(text[start:end])} "
        last = end


def test_every_letter_and_digit_of_every_script_has_a_normal_form():
    refused = [hex(c) for c in range(sys.maxunicode + 1)
               if unicodedata.category(chr(c))[0] in "LN" and not normalise_title(chr(c))]
    assert refused == []


def test_issue13_title_mentions_do_not_cut_non_ascii_titles():
    from memlab.datasets.graphs import title_mentions
    records = [{"item_id": "oland", "content": "An island in the Baltic.",
                "metadata": {"title": "Öland"}},
               {"item_id": "farm", "content": "The land was flat and dry.",
                "metadata": {"title": "Farming"}},
               {"item_id": "trip", "content": "We sailed to Öland, then Zu\u0308rich.",
                "metadata": {"title": "Trip"}},
               {"item_id": "zurich", "content": "A city.", "metadata": {"title": "Zürich"}}]
    assert sorted((a, b) for a, b, kind, _ in title_mentions(records) if kind == "MENTIONS") == [
        ("trip", "oland"), ("trip", "zurich")]
