"""BM25 read paths (issue 18): the frozen snapshot, single-query ``top_k``, ``batch_scores``,
``batch_top_k`` and ``Memory.search_many``, against the Lucene reference, rank-bm25 (okapi), a
full sort of :meth:`BM25Index.scores`, and each other: the numpy path is the reference, the numba
kernels (the ``fast`` extra) and the snapshot must give the same documents and scores."""

import pickle
from datetime import datetime, timezone

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab import ManualClock, Memory
from memlab.signals.bm25 import IDF_VARIANTS, BM25Index, numba_available
from tests.test_bm25_mutations import apply, mutations
from tests.test_signals import lucene_reference

rank_bm25 = pytest.importorskip("rank_bm25")

BACKENDS = ["numpy"] + (["numba"] if numba_available() else [])
words = st.sampled_from([f"w{i}" for i in range(10)])
docs = st.lists(words, min_size=0, max_size=8)
query_lists = st.lists(st.lists(st.sampled_from([f"w{i}" for i in range(12)]), min_size=0,
                                max_size=4), min_size=0, max_size=5)   # w10, w11: never indexed


def sorted_reference(index, query, k, k1=1.2, b=0.75, mask=None):
    """Every matching document from ``scores``, ordered (score desc, doc asc), cut at ``k``."""
    docs, scores = index.scores(query, k1=k1, b=b)
    if mask is not None:
        keep = mask[docs]
        docs, scores = docs[keep], scores[keep]
    order = np.lexsort((docs, -scores))[:k]
    return docs[order], scores[order]


def dense_rows(matrix):
    return matrix.toarray()


@pytest.mark.skipif(not numba_available(), reason="numba (the fast extra) is not installed")
def test_numba_backend_is_used_and_numpy_can_be_forced():
    assert BM25Index()._use_numba and BM25Index(backend="numba")._use_numba
    assert not BM25Index(backend="numpy")._use_numba


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(IDF_VARIANTS), st.lists(docs, min_size=0, max_size=6), mutations,
       query_lists, st.integers(1, 6), st.floats(0.1, 3.0), st.floats(0.0, 1.0),
       st.sampled_from(["lazy", "always", "never"]), st.booleans(), st.randoms())
def test_all_read_paths_agree_after_any_mutations(variant, initial, ops, query_list, k, k1, b,
                                                  policy, use_mask, rnd):
    """Every backend × snapshot policy, frozen or not, answers as the numpy unfrozen reference:
    top_k and batch_top_k as the full sort of scores() cut at k, batch_scores as scores() row
    by row: the same documents and the same bits (one formula, one summation order)."""
    indexes = {(backend, pol): BM25Index(idf=variant, backend=backend, snapshot=pol)
               for backend in BACKENDS for pol in (policy, "never")}
    reference = BM25Index(idf=variant, backend="numpy", snapshot="never")
    corpora = [{} for _ in range(len(indexes) + 1)]
    for op in [("add_many", initial), *ops]:
        for index, corpus in zip([reference, *indexes.values()], corpora):
            apply(index, corpus, op)
    n = len(reference)
    mask = np.array([rnd.random() < 0.7 for _ in range(n)], dtype=bool) if use_mask else None
    expected = [sorted_reference(reference, q, k, k1, b, mask) for q in query_list]
    expected_matrix = np.zeros((len(query_list), n))
    for i, q in enumerate(query_list):
        d, s = reference.scores(q, k1=k1, b=b)
        expected_matrix[i, d] = s
    for (backend, pol), index in indexes.items():
        for freeze in (False, True):
            if freeze:
                index.freeze(k1=k1, b=b)
                assert index.is_frozen(k1=k1, b=b)
            for q, (want_d, want_s) in zip(query_list, expected):
                got_d, got_s = index.top_k(q, k, k1=k1, b=b, mask=mask)
                np.testing.assert_array_equal(got_d, want_d)
                np.testing.assert_array_equal(got_s, want_s)  # the same bits
            got_d, got_s = index.batch_top_k(query_list, k, k1=k1, b=b, mask=mask)
            assert got_d.shape == got_s.shape == (len(query_list), k)
            for row, (want_d, want_s) in enumerate(expected):
                np.testing.assert_array_equal(got_d[row, :len(want_d)], want_d)
                assert (got_d[row, len(want_d):] == -1).all()
                np.testing.assert_array_equal(got_s[row, :len(want_d)], want_s)
                assert np.isnan(got_s[row, len(want_d):]).all()
            matrix = index.batch_scores(query_list, k1=k1, b=b)
            assert matrix.shape == (len(query_list), n)
            np.testing.assert_array_equal(dense_rows(matrix), expected_matrix)


corpora = st.lists(st.lists(st.sampled_from([f"w{i}" for i in range(12)]), min_size=1,
                            max_size=15), min_size=1, max_size=40)


@settings(max_examples=100, deadline=None)
@given(corpora, query_lists, st.floats(0.1, 3.0), st.floats(0.0, 1.0),
       st.sampled_from(BACKENDS))
def test_batch_scores_equal_the_lucene_reference(corpus, query_list, k1, b, backend):
    index = BM25Index(backend=backend, snapshot="always")
    index.add_many(corpus)
    matrix = dense_rows(index.batch_scores(query_list, k1=k1, b=b))
    for row, query in enumerate(query_list):
        np.testing.assert_allclose(matrix[row], lucene_reference(corpus, query, k1, b),
                                   atol=1e-9, rtol=0)


@settings(max_examples=100, deadline=None)
@given(corpora, query_lists, st.sampled_from(BACKENDS), st.integers(1, 50))
def test_batch_apis_equal_rank_bm25_okapi(corpus, query_list, backend, k):
    index = BM25Index(idf="okapi", backend=backend, snapshot="always")
    index.add_many(corpus)
    ref = rank_bm25.BM25Okapi(corpus, k1=1.2, b=0.75)
    sparse = index.batch_scores(query_list)
    matrix = dense_rows(sparse)
    docs, scores = index.batch_top_k(query_list, k)
    for row, query in enumerate(query_list):
        want = ref.get_scores(query) if query else np.zeros(len(corpus))
        np.testing.assert_allclose(matrix[row], want, atol=1e-9, rtol=0)
        found = docs[row] >= 0
        np.testing.assert_allclose(scores[row][found], want[docs[row][found]], atol=1e-9, rtol=0)
        # the k best of rank-bm25's scores over the matching documents (stored entries)
        matched = index.scores(query)[0]
        best = np.sort(want[matched])[::-1][:k]
        np.testing.assert_allclose(np.sort(scores[row][found])[::-1], best[:found.sum()],
                                   atol=1e-9)


def test_lazy_snapshot_is_built_once_queries_paid_for_it_and_dropped_by_writes():
    rng = np.random.default_rng(0)
    corpus = [[f"w{j}" for j in rng.integers(0, 300, 12)] for _ in range(3000)]
    index = BM25Index()
    index.add_many(corpus)
    postings = index._n_postings
    assert postings == sum(len(set(d)) for d in corpus)
    query = ["w1", "w2"]
    work = index._query_work(index._query_terms(query))
    queries_to_pay = -(-postings // work)  # the snapshot is built by the query that pays
    assert queries_to_pay > 20
    before = index.scores(query)
    for _ in range(queries_to_pay - 2):
        index.top_k(query)
        assert not index.is_frozen()
    after = index.scores(query)
    assert index.is_frozen() and not index.is_frozen(k1=2.0)
    np.testing.assert_array_equal(after[0], before[0])
    np.testing.assert_allclose(after[1], before[1], rtol=1e-15, atol=0)
    index.add(["w1"])
    assert not index.is_frozen()
    never = BM25Index(snapshot="never")
    never.add_many(corpus)
    for _ in range(queries_to_pay + 5):
        never.top_k(query)
    assert not never.is_frozen()


def test_weights_cache_keeps_four_k1_b_pairs():
    index = BM25Index(snapshot="always")
    index.add_many([["a", "b"], ["b", "c", "c"]])
    for k1 in (0.5, 1.0, 1.5, 2.0, 2.5):
        index.top_k(["c"], k1=k1)
    assert [index.is_frozen(k1=k1) for k1 in (0.5, 1.0, 1.5, 2.0, 2.5)] == \
        [False, True, True, True, True]


def test_pickled_index_answers_the_same_and_rebuilds_its_snapshot():
    index = BM25Index(snapshot="always")
    index.add_many([["jwt", "auth"], ["jwt"], ["deploy", "friday"]])
    index.freeze()
    copy = pickle.loads(pickle.dumps(index))
    assert not copy.is_frozen()
    for tokens in (["jwt"], ["friday", "auth"]):
        np.testing.assert_array_equal(copy.top_k(tokens)[0], index.top_k(tokens)[0])
    assert copy.is_frozen()


def test_pinned_numbers():
    index = BM25Index(snapshot="always")
    index.add_many([["jwt", "auth"], ["jwt"], ["deploy"], ["jwt", "jwt", "deploy"]])
    docs, scores = index.batch_top_k([["jwt"], ["deploy", "auth"]], 3)
    assert docs.tolist() == [[1, 3, 0], [0, 2, 3]]  # the one-word doc beats tf 2 in 3 words
    np.testing.assert_allclose(scores, [[0.4325035, 0.4083862, 0.3369812],
                                        [1.1374958, 0.8405092, 0.5364054]], rtol=1e-6)


@pytest.mark.parametrize("call, message", [
    (lambda i: i.top_k(["a"], 0), "k must be a positive int, got 0"),
    (lambda i: i.top_k(["a"], True), "k must be a positive int, got True"),
    (lambda i: i.batch_top_k("a b"), "token_lists must be a list of token lists"),
    (lambda i: i.batch_scores([["a"], "b"]), "each query must be a sequence of tokens, got 'b'"),
    (lambda i: i.top_k(["a"], mask=np.ones(1, bool)), "mask must be a 1-D bool array over the 2"),
    (lambda i: i.top_k(["a"], mask=np.ones(2)), "mask must be a 1-D bool array"),
    (lambda i: i.top_k(["a"], k1=-1), "k1 must be a finite number >= 0, got -1.0"),
    (lambda i: i.batch_top_k([["a"]], b=1.5), "b must be in [0, 1], got 1.5"),
    (lambda i: i.freeze(k1=float("nan")), "k1 must be a finite number >= 0, got nan"),
    (lambda i: BM25Index(backend="gpu"), "backend must be one of"),
    (lambda i: BM25Index(snapshot="sometimes"), "snapshot must be one of"),
])
def test_validation(call, message):
    index = BM25Index()
    index.add_many([["a"], ["b"]])
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")
                       .replace("(", r"\(").replace(")", r"\)")):
        call(index)


def _memory(texts):
    mem = Memory(clock=ManualClock(datetime(2024, 4, 1, tzinfo=timezone.utc)))
    ids = mem.add_many(texts)
    mem.add_anchor("s1", "friday deploy goal")  # anchors are never searched
    return mem, ids


TEXTS = ["deploys run on fridays", "friday lunch is pizza", "the deploy broke on friday",
         "pizza with the team", "jwt auth tokens expire", "deploy the auth service"]


@pytest.mark.parametrize("reinforce", [True, False])
def test_search_many_equals_search_one_by_one(reinforce):
    queries = ["friday deploy", "pizza", "unicorn", "auth deploy friday", "friday deploy"]
    batch_mem, ids = _memory(TEXTS)
    loop_mem, loop_ids = _memory(TEXTS)
    assert ids == loop_ids
    got = batch_mem.search_many(queries, top_k=3, reinforce=reinforce)
    want = [loop_mem.search(q, top_k=3, reinforce=reinforce) for q in queries]
    assert got == want
    assert [len(hits) for hits in got] == [3, 2, 0, 3, 3]
    # the same reinforcement: every item's history (retrieval events included) is the same
    states = [batch_mem.get(i, reinforce=False) for i in ids]
    assert states == [loop_mem.get(i, reinforce=False) for i in ids]
    searched = sum(event["kind"] == "reinforced" and event["detail"] == {"via": "search"}
                   for state in states for event in state["history"])
    assert (searched > 0) == reinforce
    assert batch_mem.search_many([]) == []


def test_search_many_skips_anchors_and_validates():
    mem, _ = _memory(TEXTS)
    assert all(hit["memory_type"] != "anchor" for hits in mem.search_many(["goal friday"])
               for hit in hits)
    for bad, message in [("friday", "queries must be a list of strings, got 'friday'"),
                         ([1], "queries must hold strings only, got 1"),
                         (["ok", None], "queries must hold strings only, got None")]:
        with pytest.raises(ValueError, match=message):
            mem.search_many(bad)
    with pytest.raises(ValueError, match="top_k must be an int in 1..1000, got 0"):
        mem.search_many(["x"], top_k=0)
    with pytest.raises(ValueError, match="query"):
        mem.search_many(["\ud800"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_readers_get_the_serial_answers(backend):
    """Readers share the store's lock: they may build the snapshot and use kernel scratch at the
    same time, and must still get the serial answers."""
    from concurrent.futures import ThreadPoolExecutor
    rng = np.random.default_rng(1)
    corpus = [[f"w{j}" for j in rng.integers(0, 200, 10)] for _ in range(2000)]
    queries = [[f"w{j}" for j in rng.integers(0, 200, 3)] for _ in range(200)]
    serial = BM25Index(backend="numpy", snapshot="never")
    serial.add_many(corpus)
    want = [serial.top_k(q, 5) for q in queries]
    shared = BM25Index(backend=backend, snapshot="always")
    shared.add_many(corpus)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda q: shared.top_k(q, 5), queries * 3))
    for (gd, gs), (wd, ws) in zip(got, want * 3):
        np.testing.assert_array_equal(gd, wd)
        np.testing.assert_array_equal(gs, ws)
    if backend == "numpy":
        assert shared._scratch_pool == []  # the kernels' scratch is numba's only
    else:
        assert 1 <= len(shared._scratch_pool) <= 8  # one set per query running at once


@settings(max_examples=30, deadline=None)
@given(st.lists(st.lists(st.sampled_from(["friday", "deploy", "pizza", "auth", "team", "zebra"]),
                         max_size=4).map(" ".join), max_size=6),
       st.integers(1, 8))
def test_bm25_hits_many_is_the_bm25_stage_batched(queries, n):
    """Issue 15: search_many runs the BM25 stage search and surfacing run, batched: the same
    hits, scores and order (ties by item number) as bm25_hits one query at a time."""
    from memlab.surfacing.stages.retrieval import bm25_hits, bm25_hits_many

    mem, _ = _memory(TEXTS + ["friday deploy", "deploy friday"])  # tied documents
    ws = mem.store.workspace(mem.workspace_id)
    batched = bm25_hits_many(ws, mem.config, queries, n)
    assert len(batched) == len(queries)
    for query, (docs, scores) in zip(queries, batched):
        want_docs, want_scores = bm25_hits(ws, mem.config, query, n)
        assert docs.tolist() == want_docs.tolist()
        np.testing.assert_allclose(scores, want_scores, rtol=1e-12)
