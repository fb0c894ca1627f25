"""BM25 against rank-bm25 and a plain reference; recency, freshness and activation numbers."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from memlab.signals.activation import ACTRActivation, ActivationState, SeedActivation
from memlab.signals.bm25 import BM25Index
from memlab.signals.fusion import HybridScale, ScoreScale
from memlab.signals.recency import freshness_boost, recency, tau_from_half_life

rank_bm25 = pytest.importorskip("rank_bm25")

words = st.sampled_from([f"w{i}" for i in range(12)])
corpora = st.lists(st.lists(words, min_size=1, max_size=15), min_size=1, max_size=40)
queries = st.lists(words, min_size=1, max_size=5)


def dense(index, query, n, **kw):
    docs, scores = index.scores(query, **kw)
    out = np.zeros(n)
    out[docs] = scores
    return out


@settings(max_examples=150, deadline=None)
@given(corpora, queries, st.integers(0, 40))
def test_okapi_equals_rank_bm25(corpus, query, split):
    index = BM25Index(idf="okapi")
    index.add_many(corpus[:split])
    for doc in corpus[split:]:
        index.add(doc)
    ref = rank_bm25.BM25Okapi(corpus, k1=1.2, b=0.75)
    np.testing.assert_allclose(dense(index, query, len(corpus)), ref.get_scores(query),
                               atol=1e-6, rtol=0)


def lucene_reference(corpus, query, k1=1.2, b=0.75):
    n = len(corpus)
    avgdl = sum(map(len, corpus)) / n
    sets = [set(d) for d in corpus]
    dfs = {q: sum(q in d for d in sets) for q in set(query)}
    out = []
    for doc in corpus:
        s = 0.0
        for q in query:
            df = dfs[q]
            tf = doc.count(q)
            if tf:
                idf = math.log(1 + (n - df + 0.5) / (df + 0.5))
                s += idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * len(doc) / avgdl))
        out.append(s)
    return np.array(out)


@settings(max_examples=150, deadline=None)
@given(corpora, queries, st.floats(0.1, 3.0), st.floats(0.0, 1.0))
def test_lucene_equals_plain_reference(corpus, query, k1, b):
    index = BM25Index()
    for doc in corpus:
        index.add(doc)
    np.testing.assert_allclose(dense(index, query, len(corpus), k1=k1, b=b),
                               lucene_reference(corpus, query, k1, b), atol=1e-9, rtol=0)


def test_dense_and_sparse_accumulation_agree():
    rng = np.random.default_rng(0)
    corpus = [[f"w{j}" for j in rng.integers(0, 300, 12)] for _ in range(2000)]
    index = BM25Index()
    index.add_many(corpus)
    few = ["w1", "w299"]   # short postings: the sort path
    many = [f"w{i}" for i in range(0, 300, 3)]  # long postings: the dense path
    for query in (few, many):
        np.testing.assert_allclose(dense(index, query, len(corpus)), lucene_reference(corpus, query),
                                   atol=1e-9)


def test_adding_touches_only_own_postings():
    index = BM25Index()
    index.add(["a", "b"])
    arrays = [p.data for p in index._post_docs]
    index.add(["c"])
    assert index._post_docs[0].data is arrays[0] and index._post_docs[1].data is arrays[1]


def test_doc_term_matrix():
    index = BM25Index()
    index.add(["a", "b", "a"])
    index.add(["b"])
    matrix, terms = index.doc_term_matrix()
    assert terms == ["a", "b"] and matrix.toarray().tolist() == [[2, 1], [0, 1]]


def test_score_docs_and_unknown_terms():
    index = BM25Index()
    index.add(["a"])
    index.add(["b"])
    assert index.score_docs(["b"], np.array([0, 1]))[0] == 0.0
    assert index.score_docs(["b"], np.array([0, 1]))[1] > 0
    docs, scores = index.scores(["zzz"])
    assert len(docs) == len(scores) == 0
    with pytest.raises(ValueError, match="idf must be one of"):
        BM25Index(idf="tfidf")


def test_recency_and_freshness_numbers():
    h = 3600.0
    assert recency(np.array([-24 * h]), 0.0, 24.0)[0] == pytest.approx(math.exp(-1))
    assert recency(np.array([np.nan]), 0.0)[0] == 0.5
    assert recency(np.array([10 * h]), 0.0)[0] == 1.0  # future timestamps count as age 0
    assert recency(np.array([-24 * h]), 0.0, tau_from_half_life(24.0))[0] == pytest.approx(0.5)
    f = freshness_boost(np.array([0.0, -12 * h, -23.99 * h, -24 * h]), 0.0)
    np.testing.assert_allclose(f, [0.2, 0.1, (1 - 23.99 / 24) * 0.2, 0.0])
    with pytest.raises(ValueError, match="half_life_h"):
        tau_from_half_life(0)


def test_seed_activation_decay_and_reinforcement():
    state = ActivationState()
    state.add(np.array([0.0, 0.0]), 0.5)
    model = SeedActivation(720)
    h = 3600.0
    assert model(state, np.array([0]), 720 * h, None)[0] == pytest.approx(0.25)
    state.reinforce(np.array([0]), 720 * h, increment=0.05, half_life_h=720)
    assert model(state, np.array([0, 1]), 720 * h, None) == pytest.approx([0.30, 0.25])
    assert model(state, np.array([0]), 1440 * h, None)[0] == pytest.approx(0.15)


def test_actr_base_level():
    state = ActivationState()
    state.add(np.array([0.0]), 0.5)
    model = ACTRActivation(decay=0.5)
    b1 = model.base_level(state, np.array([0]), 100.0, np.array([0.0]))[0]
    assert b1 == pytest.approx(math.log(100 ** -0.5))
    state.reinforce(np.array([0]), 50.0, increment=0.05, half_life_h=720)
    b2 = model.base_level(state, np.array([0]), 100.0, np.array([0.0]))[0]
    assert b2 == pytest.approx(math.log(100 ** -0.5 + 50 ** -0.5))
    a = model(state, np.array([0]), 100.0, np.array([0.0]))[0]
    assert a == pytest.approx(1 / (1 + math.exp(-(b2 + 5.0))))
    # decays with time, rises with use
    later = model(state, np.array([0]), 1e6, np.array([0.0]))[0]
    assert 0 < later < a < 1


def test_actr_model_in_memory(clock):
    from memlab import DEFAULT, Memory
    mem = Memory(clock=clock, surfacing_mode="router", config=DEFAULT.replace(activation_model="actr"))
    mem.add("alpha", item_id="a")
    mem.add("alpha", item_id="b")
    clock.advance(hours=1)
    mem.get("a")
    clock.advance(hours=1)
    mem.get_working_context("s1", "alpha", strategy="fast:recency")
    c = mem.last_context_record.candidates
    act = dict(zip(c["item_id"], c["activation"]))
    assert act["a"] > act["b"]
    with pytest.raises(ValueError, match="activation_model names 'nope'"):
        Memory(config=DEFAULT.replace(activation_model="nope"))


# ---------------------------------------------------------------------------- fusion


def test_score_scale_pins_max_and_minmax():
    scores = np.array([8.0, 6.0, 4.0, 2.0, 1.0])
    assert ScoreScale.fit(scores, "max")(scores).tolist() == [1.0, 0.75, 0.5, 0.25, 0.125]
    minmax = ScoreScale.fit(scores, "minmax", depth=3)   # the 3rd best (4.0) maps to 0
    assert (minmax.low, minmax.high) == (4.0, 8.0)
    assert minmax(scores).tolist() == [1.0, 0.5, 0.0, 0.0, 0.0]
    # fewer scores than the depth: the absent items' 0 is the floor
    assert ScoreScale.fit(scores, "minmax", depth=10) == ScoreScale(0.0, 8.0)
    assert ScoreScale.fit(np.array([3.0, 3.0]), "minmax", depth=2) == ScoreScale(0.0, 3.0)
    assert ScoreScale.fit(np.empty(0), "minmax")(np.array([1.0])).tolist() == [0.0]
    with pytest.raises(ValueError, match="method must be one of"):
        ScoreScale.fit(scores, "zscore")


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(0, 100), min_size=1, max_size=40),
       st.sampled_from(["max", "minmax"]), st.integers(1, 50), st.floats(0, 1))
def test_hybrid_scale_is_bounded_and_monotone(values, method, depth, weight):
    x = np.array(values)
    lexical = ScoreScale.fit(x[x > 0], method, depth)
    semantic = ScoreScale.fit(x / 100, method, depth)
    hybrid = HybridScale(lexical, semantic, weight)
    out = hybrid(x, x / 100)
    assert np.all((out >= 0) & (out <= 1 + 1e-12))
    order = np.argsort(x, kind="stable")
    assert np.all(np.diff(out[order]) >= -1e-12)   # more of both never scores lower
