"""Issue 17 item 3, LoCoMo side: the temporal tail, the trigram spelling field, the graph guard
(``graph_guard_k`` of ``stages/graph_rerank.py``), reciprocal-rank fusion, and cv_choose
(grouped-CV choice among replayed configurations)."""

from datetime import timedelta

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, strategies as st

from memlab import DEFAULT, Memory, SurfacingConfig
from memlab.datasets.synthetic import synthetic_trace
from memlab.signals.dense import DenseConfig
from memlab.signals.fusion import RankFusion
from memlab.surfacing.stages.graph_rerank import guard_order
from memlab.surfacing.stages.variants import fuse_fields, with_spelling
from memlab.surfacing.strategies import STRATEGIES
from memlab.text import STOPWORDS, analyze_trigrams
from memlab.tuning import choose_by_folds, cv_choose, grouped_folds


# -- configuration -----------------------------------------------------------------------------

@pytest.mark.parametrize("field, value, message", [
    ("temporal_window_tail_days", -1.0, "temporal_window_tail_days must be a finite number >= 0"),
    ("temporal_window_tail_days", 1e7, "temporal_window_tail_days must be at most 3650"),
    ("spelling_weight", 1.5, "spelling_weight must be in [0, 1], got 1.5"),
    ("spelling_analyzer", "soundex", "spelling_analyzer must be one of"),
    ("graph_guard_k", 2.5, "graph_guard_k must be an integer, got 2.5"),
])
def test_new_fields_are_validated(field, value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        DEFAULT.replace(**{field: value})


def test_new_fields_round_trip_and_default_off():
    cfg = DEFAULT.replace(temporal_window_tail_days=3.0, spelling_weight=0.2,
                          graph_guard_k=10,
                          dense=DenseConfig(embedder="hashing", fusion="rrf", rrf_k=30))
    assert SurfacingConfig.from_dict(cfg.to_dict()) == cfg
    assert (DEFAULT.temporal_window_tail_days, DEFAULT.spelling_weight,
            DEFAULT.graph_guard_k) == (0.0, 0.0, 0)
    assert not hasattr(DEFAULT, "graph_guard_depth")  # one guard: graph_rerank's
    assert DenseConfig(embedder="hashing").fusion == "convex"


@pytest.mark.parametrize("kwargs, message", [({"fusion": "sum"}, "fusion must be one of"),
                                             ({"rrf_k": 0}, "rrf_k must be an integer >= 1")])
def test_dense_fusion_fields_are_validated(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DenseConfig(embedder="hashing", **kwargs)


# -- temporal tail -----------------------------------------------------------------------------

def test_tail_reaches_an_event_told_days_after_the_window(store, clock):
    start = clock.now()
    mem = Memory(store=store, clock=clock, surfacing_mode="router")
    # told two days later ("yesterday ..." in a later session): after the window of 2 January
    mem.add("yesterday I went bowling with friends", item_id="told",
            created_at=start + timedelta(days=3, hours=10))
    mem.add("lunch order", item_id="noise", created_at=start + timedelta(days=9))
    clock.advance(days=10)
    query = "what did she do on 2 January 2024"
    mem.get_working_context("s1", query)
    rec = mem.last_context_record
    assert rec.strategy_used == "temporal:windowed"
    assert "told" not in rec.candidates["item_id"]
    tailed = Memory(store=store, clock=clock, surfacing_mode="router",
                    config=DEFAULT.replace(temporal_window_tail_days=3.0))
    resp = tailed.get_working_context("s1", query)
    rec = tailed.last_context_record
    assert rec.notes["time_window"][:2] == ["2024-01-02T00:00:00+00:00",
                                            "2024-01-06T00:00:00+00:00"]
    assert dict(zip(rec.candidates["item_id"], rec.candidates["source"]))["told"] == "window"
    assert resp["items"][0]["item_id"] == "told"


# -- spelling field ----------------------------------------------------------------------------

@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz", min_size=1, max_size=30)
       .filter(lambda w: w not in STOPWORDS))
def test_trigrams_of_one_word(word):
    grams = analyze_trigrams(word)
    assert len(grams) == len(word)  # "^word$" has len(word) + 2 characters
    assert all(len(g) == 3 for g in grams)
    assert "".join(g[0] for g in grams) + grams[-1][1:] == f"^{word}$"


def test_trigram_analyzer_pinned():
    assert analyze_trigrams("Favourite impostors!") == [
        "^fa", "fav", "avo", "vou", "our", "uri", "rit", "ite", "te$",
        "^im", "imp", "mpo", "pos", "ost", "sto", "tor", "ors", "rs$"]


@given(st.dictionaries(st.integers(0, 40), st.floats(0.1, 10.0), max_size=12),
       st.dictionaries(st.integers(0, 40), st.floats(0.1, 10.0), min_size=1, max_size=20),
       st.floats(0.0, 1.0), st.integers(1, 10))
def test_fuse_fields_against_an_oracle(bm25, other, weight, depth):
    docs = np.array(sorted(bm25), dtype=np.int64)
    scores = np.array([bm25[d] for d in docs])
    odocs = np.array(sorted(other), dtype=np.int64)
    oscores = np.array([other[d] for d in odocs])
    got_docs, got = fuse_fields(docs, scores, odocs, oscores, weight, depth)
    if weight == 0:
        assert got_docs.tolist() == docs.tolist()
        return
    best = max(bm25.values()) if bm25 else 1.0
    share = {d: weight * best * s / max(other.values()) for d, s in other.items()}
    expect = {d: s + share.get(d, 0.0) for d, s in bm25.items()}
    only = sorted((d for d in other if d not in bm25), key=lambda d: (-share[d], d))[:depth]
    expect.update({d: share[d] for d in only})
    assert got_docs.tolist() == sorted(expect)
    assert np.allclose(got, [expect[d] for d in sorted(expect)])


def test_spelling_field_finds_the_other_spelling(store, clock):
    def ask(config):
        mem = Memory(store=store, clock=clock, surfacing_mode="router", config=config)
        resp = mem.get_working_context("s1", "What is her favourite colour?")
        return [it["item_id"] for it in resp["items"]], mem.last_context_record

    base = Memory(store=store, clock=clock, surfacing_mode="router")
    base.add("Caroline: my favorite color is teal", item_id="fav")
    base.add("Caroline: the weather was nice at the lake", item_id="lake")
    base.add("Melanie: I painted a sunrise last week", item_id="paint")
    items, rec = ask(DEFAULT)
    assert "fav" not in rec.candidates["item_id"]  # Porter: favourit/favorit, colour/color
    items, rec = ask(DEFAULT.replace(spelling_weight=0.3))
    assert items[0] == "fav"
    assert rec.notes["spelling"]["analyzer"] == "trigram"
    assert "spelling" in rec.timings_ms


def test_spelling_stage_joins_after_bm25_only_when_asked():
    p = with_spelling(STRATEGIES["multi_hop"])
    assert [s.name for s in p][:3] == ["bm25", "spelling", "dense"]
    assert with_spelling(p) == p and p.name == "multi_hop"


# -- reciprocal-rank fusion --------------------------------------------------------------------

@given(st.lists(st.floats(0.0, 10.0), min_size=1, max_size=15),
       st.lists(st.floats(-1.0, 1.0), min_size=1, max_size=15),
       st.floats(0.0, 1.0), st.integers(1, 100))
def test_rrf_against_naive_ranks(bm25, cosine, weight, k):
    n = min(len(bm25), len(cosine))
    bm25, cosine = np.array(bm25[:n]), np.array(cosine[:n])
    fusion = RankFusion.fit(bm25[bm25 > 0], cosine, weight, k)
    got = fusion(bm25, cosine)
    for i in range(n):
        lex = 0.0 if bm25[i] <= 0 else 1.0 / (k + 1 + sum(b > bm25[i] for b in bm25 if b > 0))
        sem = 0.0 if cosine[i] <= 0 else 1.0 / (k + 1 + sum(c > cosine[i] for c in cosine
                                                             if c > 0))
        assert got[i] == pytest.approx((k + 1) * ((1 - weight) * lex + weight * sem))
    assert ((got >= 0) & (got <= 1 + 1e-12)).all()


def test_rrf_runs_as_the_dense_fusion(store, clock):
    config = DEFAULT.replace(dense=DenseConfig(embedder="hashing", fusion="rrf", cache_dir=""))
    mem = Memory(store=store, clock=clock, surfacing_mode="router", config=config)
    mem.add("deploys run on fridays", item_id="a")
    mem.add("lunch is pizza on fridays", item_id="b")
    mem.add("the cat sleeps", item_id="c")
    resp = mem.get_working_context("s1", "when do deploys run?")
    rec = mem.last_context_record
    assert rec.notes["dense"]["fusion"] == "rrf"
    assert resp["items"][0]["item_id"] == "a"
    assert max(rec.candidates["relevance"]) <= 1.0


# -- graph guard -------------------------------------------------------------------------------

@given(st.data())
def test_guard_invariants(data):
    n = data.draw(st.integers(1, 25))
    k = data.draw(st.integers(1, 8))
    order = np.array(data.draw(st.permutations(range(n))), dtype=np.int64)  # the graph's
    retrieval = data.draw(st.permutations(range(n)))
    base_top = np.array(retrieval[:data.draw(st.integers(0, k))], dtype=np.int64)
    supported = np.array(data.draw(st.lists(st.booleans(), min_size=n, max_size=n)))
    out, restored = guard_order(order, base_top, supported, k)

    assert sorted(out.tolist()) == list(range(n))  # a permutation of the rows
    before, base = set(order[:k].tolist()), set(base_top.tolist())
    pushed = [j for j in base_top.tolist() if j not in before]  # retrieval's best first
    unsupported = [j for j in order[:k].tolist() if j not in base and not supported[j]]
    r = min(len(pushed), len(unsupported))
    assert restored.tolist() == pushed[:r]  # retrieval's best of those pushed out
    demoted = unsupported[len(unsupported) - r:]  # the lowest-ranked unsupported newcomers
    # the top k is the graph's minus the demoted plus the restored; what retrieval had in the
    # graph's top k and every supported newcomer stays
    assert set(out[:k].tolist()) == (before - set(demoted)) | set(restored.tolist())
    assert {j for j in before if j in base or supported[j]} <= set(out[:k].tolist())
    # restored rows take the demoted rows' places exactly (the best with the best), and the
    # demoted take theirs; every other row keeps its place
    rank = {j: p for p, j in enumerate(order.tolist())}
    back = sorted(restored.tolist(), key=rank.__getitem__)
    for a, b in zip(back, demoted):
        assert out[rank[b]] == a and out[rank[a]] == b
    moved = set(back) | set(demoted)
    assert all(out[p] == j for p, j in enumerate(order.tolist()) if j not in moved)
    if not r:
        assert np.array_equal(out, order)


def test_guard_runs_in_multi_hop_and_its_time_is_a_decisions_column():
    trace = synthetic_trace(400, 60, seed=3)
    from memlab.harness.replay import replay
    plain = replay(trace, DEFAULT, k=10, measures=["R@10"], progress=False)
    guarded = replay(trace, DEFAULT.replace(graph_guard_k=5), k=10, measures=["R@10"],
                     progress=False)
    assert "graph_rerank_ms" in guarded.decisions.columns
    multi = guarded.decisions["strategy_used"] == "deep:multi-hop"
    assert multi.any() and (~multi).any()
    assert guarded.decisions.loc[multi, "graph_rerank_ms"].notna().all()
    assert guarded.decisions.loc[~multi, "graph_rerank_ms"].isna().all()
    assert "graph_rerank_ms" not in plain.decisions.columns


# -- cv_choose ---------------------------------------------------------------------------------

def test_choose_by_folds_never_reads_the_held_out_fold():
    # "leaky" is perfect on fold 0's questions only: a choice that read fold 0 would take it
    qids = [f"q{i}" for i in range(6)]
    split = [["q0", "q1"], ["q2", "q3"], ["q4", "q5"]]
    values = pd.DataFrame({"base": [0.0, 0.0, 0.5, 0.5, 0.5, 0.5],
                           "leaky": [1.0, 1.0, 0.4, 0.4, 0.4, 0.4]}, index=qids)
    chosen, read = choose_by_folds(values, split)
    assert chosen == ["base", "leaky", "leaky"]
    for test, seen in zip(split, read):
        assert not seen & set(test) and seen | set(test) == set(qids)


def test_cv_choose_against_an_oracle():
    trace = synthetic_trace(300, 40, seed=1)
    candidates = {"default": DEFAULT, "no-ppr": DEFAULT.replace(ppr=None),
                  "flat": DEFAULT.replace(centrality_weight=0.0, activation_floor=1.0)}
    out = cv_choose(trace, candidates, measures=["MRR", "R@5"], folds=3,
                    group_by="question", seed=2)
    from memlab.tuning.search import _groups, _question_frame
    questions = _question_frame(trace, None)
    split = grouped_folds(_groups(questions, "question"), 3, 2)
    values = out.values["MRR"]
    for i, test in enumerate(split):
        train = [q for q in questions["qid"] if q not in set(test)]
        means = values.loc[train].mean()
        assert out.folds.loc[i, "chosen"] == means.index[int(np.argmax(means.to_numpy()))]
        pick = out.folds.loc[i, "chosen"]
        assert out.folds.loc[i, "MRR"] == pytest.approx(values.loc[test, pick].mean())
        assert out.folds.loc[i, "R@5_base"] == pytest.approx(
            out.values["R@5"].loc[test, "default"].mean())
        assert out.audit.loc[i, "read"] == frozenset(train)
    row = out.table.set_index("measure").loc["MRR"]
    assert row["cv_mean"] == pytest.approx(out.folds["MRR"].mean())
    assert row["diff_mean"] == pytest.approx((out.folds["MRR"] - out.folds["MRR_base"]).mean())
    assert row["in_sample"] == pytest.approx(values[row["in_sample_choice"]].mean())


@pytest.mark.parametrize("kwargs, message", [
    ({"candidates": {}}, "candidates must be a non-empty mapping"),
    ({"base": "nope"}, "base must be one of the candidates' labels"),
    ({"select_on": "R@5"}, "select_on must be one of measures"),
    ({"measures": []}, "measures must name at least one"),
    ({"folds": 1}, "folds must be an integer >= 2"),
])
def test_cv_choose_refuses_bad_input(kwargs, message):
    args = {"candidates": {"default": DEFAULT}, "measures": ["MRR"], **kwargs}
    with pytest.raises(ValueError, match=message):
        cv_choose(synthetic_trace(50, 10, seed=0), group_by="question", **args)
