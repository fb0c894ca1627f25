"""BM25 after mutations (issue 13, item 8): an index changed by add, add_many, replace and remove
scores exactly as a fresh index built from the surviving documents, for both idf variants, and the
Okapi variant as rank-bm25's ``BM25Okapi`` on the surviving corpus."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab.signals.bm25 import IDF_VARIANTS, BM25Index

rank_bm25 = pytest.importorskip("rank_bm25")

K1, B = 1.2, 0.75
words = st.sampled_from([f"w{i}" for i in range(10)])
docs = st.lists(words, min_size=0, max_size=8)
queries = st.lists(st.lists(st.sampled_from([f"w{i}" for i in range(12)]), min_size=1,
                            max_size=4), min_size=1, max_size=3)   # w10, w11: never indexed
mutations = st.lists(st.one_of(
    st.tuples(st.just("add"), docs),
    st.tuples(st.just("add_many"), st.lists(docs, min_size=0, max_size=4)),
    st.tuples(st.just("replace"), st.integers(0, 1_000), docs),
    st.tuples(st.just("remove"), st.integers(0, 1_000)),
), min_size=1, max_size=12)


def apply(index: BM25Index, corpus: dict[int, list[str]], op: tuple) -> None:
    """One mutation on the index and on the model ``corpus`` (live document -> its tokens)."""
    kind = op[0]
    if kind == "add":
        corpus[index.add(op[1])] = op[1]
    elif kind == "add_many":
        for doc, tokens in zip(index.add_many(op[1]), op[1]):
            corpus[doc] = tokens
    elif corpus:  # replace / remove pick a live document
        doc = sorted(corpus)[op[1] % len(corpus)]
        if kind == "replace":
            index.replace(doc, corpus[doc], op[2])
            corpus[doc] = op[2]
        else:
            index.remove(doc, corpus[doc])
            del corpus[doc]


def dense_scores(index: BM25Index, query: list[str], wanted: list[int]) -> np.ndarray:
    """Scores of documents ``wanted`` (0 where no query term occurs)."""
    return index.score_docs(query, np.asarray(wanted, dtype=np.int64), k1=K1, b=B)


def check_against_fresh(index: BM25Index, corpus: dict[int, list[str]],
                        query_list: list[list[str]]) -> None:
    live = sorted(corpus)
    survivors = [corpus[d] for d in live]
    fresh = BM25Index(idf=index.idf_variant, epsilon=index.epsilon)
    fresh.add_many(survivors)
    assert index.live_documents == len(live)
    assert index.vocabulary_size == fresh.vocabulary_size
    mutated_matrix, mutated_terms = index.doc_term_matrix()
    fresh_matrix, fresh_terms = fresh.doc_term_matrix()
    assert sorted(mutated_terms) == sorted(fresh_terms)
    if live:
        perm = [mutated_terms.index(t) for t in fresh_terms]
        np.testing.assert_array_equal(mutated_matrix.toarray()[live][:, perm],
                                      fresh_matrix.toarray())
    reference = None
    if index.idf_variant == "okapi" and survivors and sum(map(len, survivors)):
        reference = rank_bm25.BM25Okapi(survivors, k1=K1, b=B)
    for query in query_list:
        got = dense_scores(index, query, live)
        np.testing.assert_allclose(got, dense_scores(fresh, query, list(range(len(live)))),
                                   rtol=1e-12, atol=1e-12)
        if reference is not None:
            np.testing.assert_allclose(got, reference.get_scores(query), rtol=1e-9, atol=1e-9)
        docs, _ = index.scores(query, k1=K1, b=B)
        assert set(docs.tolist()) <= set(live)  # a removed document never scores


@settings(max_examples=200, deadline=None)
@given(st.sampled_from(IDF_VARIANTS), st.lists(docs, min_size=0, max_size=6), mutations, queries)
def test_every_mutation_scores_as_a_fresh_index(variant, initial, ops, query_list):
    index = BM25Index(idf=variant)
    corpus: dict[int, list[str]] = {}
    apply(index, corpus, ("add_many", initial))
    check_against_fresh(index, corpus, query_list)
    for op in ops:
        apply(index, corpus, op)
        check_against_fresh(index, corpus, query_list)


def test_issue13_okapi_idf_floor_after_replace():
    # "w" in every document has a negative Okapi idf, so it scores epsilon * mean idf. The replace
    # leaves "stale" with no document: it must leave the vocabulary and the mean.
    corpus = [["w", "stale"], ["w", "x"], ["w", "x"], ["w", "y"]]
    index = BM25Index(idf="okapi")
    for tokens in corpus:
        index.add(tokens)
    index.replace(0, corpus[0], ["w", "y"])
    corpus[0] = ["w", "y"]
    expected = rank_bm25.BM25Okapi(corpus, k1=K1, b=B).get_scores(["w"])
    np.testing.assert_allclose(dense_scores(index, ["w"], [0, 1, 2, 3]), expected, atol=1e-12)
    assert index.vocabulary_size == 3 and index.doc_term_matrix()[1] == ["w", "x", "y"]


def test_emptied_term_slots_are_reused_and_bulk_ids_stay_consistent():
    index = BM25Index()
    index.add(["a", "b"])
    index.replace(0, ["a", "b"], ["a"])       # "b" leaves: its slot is free
    index.add(["c"])                          # reuses the slot
    index.replace(0, ["a"], ["d"])            # "a" leaves
    index.add_many([["e", "c"], ["a"]])       # bulk ids after compaction
    fresh = BM25Index()
    fresh.add_many([["d"], ["c"], ["e", "c"], ["a"]])
    for term in "abcde":
        np.testing.assert_allclose(dense_scores(index, [term], [0, 1, 2, 3]),
                                   dense_scores(fresh, [term], [0, 1, 2, 3]), atol=1e-12)
    assert index.vocabulary_size == 4


def test_remove_and_replace_refuse_a_document_that_is_not_live():
    index = BM25Index()
    index.add(["a"])
    index.remove(0, ["a"])
    with pytest.raises(ValueError, match="not a live document"):
        index.replace(0, ["a"], ["b"])
    with pytest.raises(ValueError, match="not a live document"):
        index.remove(0, ["a"])
    with pytest.raises(ValueError, match="not a live document"):
        index.remove(5, ["a"])
    assert index.live_documents == 0 and len(index) == 1 and index.vocabulary_size == 0
