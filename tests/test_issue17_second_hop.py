"""The second-hop ranker columns (issue 17, MuSiQue's dense target): the candidate's title in
the top hits' text and theirs in its, a second BM25 pass conditioned on the top hit, homonyms
of the top hit; computed the same live and from a replay's frame; off, nothing changes."""

import numpy as np
import pytest

from memlab import Memory
from memlab.datasets.synthetic import synthetic_trace
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT, SurfacingConfig
from memlab.surfacing.rerank import ALL_FEATURES, EXTRA_FEATURES, FEATURES, HOP_FEATURES, \
    candidate_features
from memlab.surfacing.stages.ranker_features import (HOP_FEATURE_COLUMNS,
                                                     RANKER_FEATURE_COLUMNS, item_title)

from _support import SECOND_HOP_QUERY, assert_live_ranks_as_the_frame, second_hop_memory  # noqa: E402,E501

QUERY = SECOND_HOP_QUERY


def _memory(**options) -> Memory:
    return second_hop_memory(True, **options)


def _columns(mem: Memory, query: str, names=HOP_FEATURE_COLUMNS + ("bm25",)) -> dict:
    mem.get_working_context("s", query)
    cands = mem.last_context_record.candidates
    return {i: {c: cands[c][r] for c in names} for r, i in enumerate(cands["item_id"])}


def test_the_stage_records_the_second_hop_evidence():
    cols = _columns(_memory(), QUERY)
    assert list(cols)[0] == "anna"  # the top hit (rank order)
    # the bridge: Lindau's title is in the top hit's body; the top hit is not its own bridge
    assert cols["lindau"]["rf_hop_title_top1"] == 1.0
    assert cols["lindau"]["rf_hop_title_top3"] >= 1.0
    assert cols["anna"]["rf_hop_title_top1"] == 0.0
    # the reverse: the top hit's title ("Anna Weber", suffix-free) is in the homonym's body
    assert cols["homonym"]["rf_hop_top_title3"] >= 1.0
    # "Bremen" is in no top hit's body unless the homonym is a top hit; "Rhine" is in Lindau's
    assert cols["noise"]["rf_hop_title_top1"] == 0.0
    # the second pass: the query plus the top hit's body ("Lindau") reaches Lindau harder
    # than the query alone; the query plus its title ("Anna Weber") adds nothing for Lindau
    assert cols["lindau"]["rf_hop_prf_content"] > cols["lindau"]["bm25"] > 0
    assert cols["lindau"]["rf_hop_prf_title"] == pytest.approx(cols["lindau"]["bm25"])
    # homonyms of the top hit, and the rank without them (1-based; the homonym keeps its own)
    assert cols["homonym"]["rf_hop_homonym"] == 1.0
    assert cols["anna"]["rf_hop_homonym"] == 0.0 and cols["lindau"]["rf_hop_homonym"] == 0.0
    ranks = {i: c["rf_hop_rank_nodup"] for i, c in cols.items()}
    assert ranks["anna"] == 1.0
    full = list(cols).index("homonym") + 1
    assert ranks["homonym"] == float(full)
    after = [i for i in list(cols)[full:] if i != "homonym"]
    for i in after:  # everything after the homonym moves up one
        assert ranks[i] == float(list(cols).index(i))
    # no dense recipe: no dense evidence
    assert all(c["rf_hop_dense_top1"] == 0.0 and c["rf_hop_prf_dense"] == 0.0
               for c in cols.values())
    # second_hop_features alone records no rf_* column of the other stage
    mem = _memory()
    mem.get_working_context("s", QUERY)
    assert not set(RANKER_FEATURE_COLUMNS) & set(mem.last_context_record.candidates)


def test_dense_evidence_with_a_dense_recipe():
    pytest.importorskip("numpy")
    from memlab.signals.dense import DenseConfig
    mem = _memory(dense=DenseConfig(embedder="hashing", cache_dir=""))
    cols = _columns(mem, QUERY)
    top = list(cols)[0]
    assert cols[top]["rf_hop_dense_top1"] == 0.0  # itself excluded
    assert any(c["rf_hop_dense_top1"] != 0.0 for i, c in cols.items() if i != top)
    assert all(-1.0 - 1e-9 <= c["rf_hop_prf_dense"] <= 1.0 + 1e-9 for c in cols.values())
    assert any(c["rf_hop_prf_dense"] > 0 for c in cols.values())


def test_item_title_and_the_option():
    assert item_title(type("I", (), {"metadata": {"title": "X (y)"}})()) == "X (y)"
    assert item_title(type("I", (), {"metadata": {"label": " ", "name": "N"}})()) == "N"
    assert item_title(type("I", (), {"metadata": None})()) is None
    assert SurfacingConfig.from_dict(DEFAULT.to_dict()).second_hop_features is False
    with pytest.raises(ValueError, match="second_hop_features"):
        DEFAULT.replace(second_hop_features="yes")


def test_feature_builder_adds_hop_features_only_when_recorded():
    cols = {name: [1.0, 3.0, 2.0] for name in (
        "bm25", "dense", "relevance", "relevance_term", "recency", "activation",
        "centrality_raw", "centrality", "freshness", "multiplier", "score")}
    cols.update(title_match=[False, True, False], exact_match=[False] * 3,
                source=["relevance", "spread", "dense"])
    hop = {name: [0.0, 0.0, 0.0] for name in HOP_FEATURE_COLUMNS}
    hop.update(rf_hop_title_top1=[0, 1, 0], rf_hop_prf_content=[4.0, 8.0, 0.0],
               rf_hop_prf_dense=[0.1, 0.3, 0.2], rf_hop_rank_nodup=[2, 1, 3])
    f = candidate_features({**cols, **hop}, "deep:multi-hop", 5)
    assert list(f.columns) == list(FEATURES + HOP_FEATURES)
    assert f["hop_title_top1"].tolist() == [0, 1, 0]
    assert f["hop_prf_content_share"].tolist() == [0.5, 1.0, 0.0]
    assert f["rank_hop_prf_content"].tolist() == [2, 1, 3]
    assert f["rank_hop_prf_dense"].tolist() == [3, 1, 2]
    assert f["hop_prf_title_share"].tolist() == [0.0, 0.0, 0.0]  # no score: no share
    rf = {name: [0.0] * 3 for name in RANKER_FEATURE_COLUMNS}
    both = candidate_features({**cols, **rf, **hop}, "deep:multi-hop", 5)
    assert list(both.columns) == list(ALL_FEATURES)
    assert list(FEATURES + EXTRA_FEATURES + HOP_FEATURES) == list(ALL_FEATURES)


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace(300, 48, seed=4)


@pytest.fixture(scope="module")
def live(trace):
    pytest.importorskip("sklearn")
    pytest.importorskip("lightgbm")
    return replay(trace, DEFAULT.replace(second_hop_features=True), measures=["R@10", "MRR"])


def test_the_option_changes_no_ranking(trace, live):
    plain = replay(trace, DEFAULT, measures=["R@10", "MRR"])
    cols = [c for c in plain.candidates.columns if c != "decision_id"]
    np.testing.assert_array_equal(plain.metrics["value"], live.metrics["value"])
    assert plain.candidates[cols].equals(live.candidates[cols])
    assert set(HOP_FEATURE_COLUMNS) <= set(live.candidates.columns)


@pytest.mark.parametrize("kind", ["logistic", "lambdarank"])
def test_live_stage_ranks_as_the_model_ranks_the_frame(trace, live, kind, tmp_path):
    """A model on the second-hop features ranks a replay under its recipe exactly as it
    ranks the recorded frame, with the same rf_hop_* values."""
    path = assert_live_ranks_as_the_frame(trace, live, kind, tmp_path, "second_hop_features",
                                          FEATURES + HOP_FEATURES, HOP_FEATURE_COLUMNS)
    with pytest.raises(ValueError, match="lack"):  # a recipe without the option refuses it
        replay(trace, DEFAULT.replace(reranker=str(path)))
