"""The ranker-feature columns (issue 17, dense targets): what the stage records, that the
feature builder reads them the same way live and from a replay's frame, and that recipes
without them are unchanged."""

from datetime import datetime, timezone

import numpy as np
import pytest

from memlab import Memory
from memlab.datasets.synthetic import synthetic_trace
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT, SurfacingConfig
from memlab.surfacing.rerank import EXTRA_FEATURES, FEATURES, candidate_features
from memlab.surfacing.stages.ranker_features import RANKER_FEATURE_COLUMNS, query_entities

from _support import assert_live_ranks_as_the_frame  # noqa: E402


def _memory() -> Memory:
    mem = Memory(surfacing_mode="router", config=DEFAULT.replace(ranker_features=True))
    t = lambda day: datetime(2023, 5, day, 12, tzinfo=timezone.utc)  # noqa: E731
    mem.add("Caroline: I adopted a puppy at the shelter", item_id="pup",
            metadata={"speaker": "Caroline"}, created_at=t(9))
    mem.add("Melanie: the shelter is in Stamford", item_id="stamford",
            metadata={"speaker": "Melanie"}, created_at=t(12))
    mem.add("Melanie: my favorite colour is blue", item_id="colour",
            metadata={"speaker": "Melanie"}, created_at=t(25))
    mem.add("Caroline: we went bowling with the puppy", item_id="bowling",
            metadata={"speaker": "Caroline"}, created_at=t(2))
    mem.add_edge("pup", "stamford")
    return mem


def _columns(mem: Memory, query: str) -> dict:
    mem.get_working_context("s", query)
    cands = mem.last_context_record.candidates
    return {i: {c: cands[c][r] for c in RANKER_FEATURE_COLUMNS}
            for r, i in enumerate(cands["item_id"])}


def test_the_stage_records_each_kind_of_evidence():
    cols = _columns(_memory(), "What puppy did Caroline adopt at the shelter on 9 May 2023?")
    top = list(cols)[0]  # rank order: the first candidate is the top hit
    assert top == "pup"
    # links to the top hits: stamford is linked to pup, the top hit is not linked to itself
    assert cols["stamford"]["rf_links_top1"] == 1.0 and cols["pup"]["rf_links_top1"] == 0.0
    assert cols["bowling"]["rf_links_top1"] == 0.0
    # the trigram field scores a spelling it shares and nothing for no shared trigram
    assert cols["pup"]["rf_trigram"] > 0
    # 9 May: pup inside, stamford 3 days after (the tail), bowling a week before
    assert cols["pup"]["rf_window"] == 1.0 and cols["pup"]["rf_window_days"] == 0.0
    assert cols["stamford"]["rf_window"] == 2.0
    assert cols["stamford"]["rf_window_days"] == pytest.approx(2.5)
    assert cols["bowling"]["rf_window"] == 3.0
    assert cols["bowling"]["rf_window_days"] == pytest.approx(6.5)
    # the speaker the query names, and the capitalised words it shares
    assert cols["pup"]["rf_speaker"] == 1.0 and cols["stamford"]["rf_speaker"] == 0.0
    assert cols["pup"]["rf_entities"] == 1.0  # "caroline" (not "What", the first word)
    # no dense recipe: no similarity to the top hits
    assert all(c["rf_dense_top3"] == 0.0 for c in cols.values())


def test_no_window_and_spelling_variants():
    cols = _columns(_memory(), "what is Melanie's favourite colour")
    assert all(c["rf_window"] == 0.0 and c["rf_window_days"] == 0.0 for c in cols.values())
    # "favourite" shares trigrams with "favorite" though BM25 does not match it
    assert cols["colour"]["rf_trigram"] > 0


def test_query_entities_skip_the_first_word():
    assert query_entities("Where did Jon and Gina meet Jon?") == ["jon", "gina"]
    assert query_entities("") == []


def test_recipes_without_the_option_record_no_new_columns():
    mem = Memory(surfacing_mode="router")
    mem.add("a note on deploys", item_id="a")
    mem.get_working_context("s", "deploys")
    assert not set(RANKER_FEATURE_COLUMNS) & set(mem.last_context_record.candidates)
    assert SurfacingConfig.from_dict(DEFAULT.to_dict()).ranker_features is False
    with pytest.raises(ValueError, match="ranker_features"):
        DEFAULT.replace(ranker_features=1)


def test_feature_builder_adds_the_extra_features_only_when_recorded():
    cols = {name: [1.0, 3.0] for name in ("bm25", "dense", "relevance", "relevance_term",
                                          "recency", "activation", "centrality_raw",
                                          "centrality", "freshness", "multiplier", "score")}
    cols.update(title_match=[False, True], exact_match=[False, False],
                source=["relevance", "spread"])
    assert list(candidate_features(cols, "deep:multi-hop", 3).columns) == list(FEATURES)
    cols.update(rf_links_top1=[0, 1], rf_links_top3=[1, 2], rf_links_top5=[1, 2],
                rf_dense_top3=[0.2, 0.9], rf_trigram=[2.0, 4.0], rf_window=[1, 3],
                rf_window_days=[0.0, 9.0], rf_speaker=[1, 0], rf_entities=[2, 0])
    f = candidate_features(cols, "deep:multi-hop", 3)
    assert list(f.columns) == list(FEATURES + EXTRA_FEATURES)  # no rf_hop_* columns: no HOP
    assert f["trigram_share"].tolist() == [0.5, 1.0] and f["rank_trigram"].tolist() == [2, 1]
    assert f[["window_in", "window_out", "window_none", "window_tail"]].values.tolist() == \
        [[1, 0, 0, 0], [0, 1, 0, 0]]


@pytest.fixture(scope="module")
def trace():
    return synthetic_trace(300, 48, seed=4)


@pytest.fixture(scope="module")
def live(trace):
    pytest.importorskip("sklearn")  # the tests below need the learn extra
    pytest.importorskip("lightgbm")
    return replay(trace, DEFAULT.replace(ranker_features=True), measures=["R@10", "MRR"])


def test_the_option_changes_no_ranking(trace, live):
    plain = replay(trace, DEFAULT, measures=["R@10", "MRR"])
    cols = [c for c in plain.candidates.columns if c != "decision_id"]
    np.testing.assert_array_equal(plain.metrics["value"], live.metrics["value"])
    assert plain.candidates[cols].equals(live.candidates[cols])
    assert set(RANKER_FEATURE_COLUMNS) <= set(live.candidates.columns)


@pytest.mark.parametrize("kind", ["logistic", "lambdarank"])
def test_live_stage_ranks_as_the_model_ranks_the_frame(trace, live, kind, tmp_path):
    """A model on the new features ranks a replay under its recipe exactly as it ranks the
    recorded frame: the rf_* columns are computed the same way live and from the record."""
    assert_live_ranks_as_the_frame(trace, live, kind, tmp_path, "ranker_features",
                                   FEATURES + EXTRA_FEATURES, RANKER_FEATURE_COLUMNS)


def test_a_model_on_new_features_needs_the_option(trace, live, tmp_path):
    from memlab.learn import fit_ranker
    path = fit_ranker(live, kind="logistic").save(tmp_path / "m.json")
    with pytest.raises(ValueError, match="ranker_features=True"):
        replay(trace, DEFAULT.replace(reranker=str(path)))
    plain = replay(trace, DEFAULT)
    with pytest.raises(ValueError, match="not in live's candidates"):
        fit_ranker(plain, features=list(EXTRA_FEATURES))
    # without the option a model reads the old features, as before
    assert fit_ranker(plain).features == list(FEATURES)
