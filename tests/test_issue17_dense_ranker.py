"""Issue 17, dense targets: the candidate pool's oracle bound that
``benchmarks/dense_ranker_cv.py`` reports, and the shipped ``dense-conversational`` recipe (the
dense recipe plus a ranker, chosen by ``memlab tune``'s nested grouped CV)."""

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("sklearn")
pytest.importorskip("lightgbm")

from benchmarks.dense_ranker_cv import oracle  # noqa: E402
from memlab.datasets.synthetic import synthetic_trace  # noqa: E402
from memlab.harness.replay import replay  # noqa: E402
from memlab.surfacing.config import _RECIPE_DIR, get_recipe  # noqa: E402
from memlab.surfacing.rerank import load_ranker  # noqa: E402


@pytest.fixture(scope="module")
def live():
    return replay(synthetic_trace(200, 20, seed=3), measures=["R@10"])


def test_the_pool_oracle_is_the_gold_share_among_all_recorded_candidates(live):
    qids = sorted(set(live.decisions["qid"]))
    out = oracle(live, qids).set_index("qid")
    dec = live.decisions.set_index("qid")
    checked = 0
    for qid, g in live.candidates.groupby("qid"):
        gold = dec.at[qid, "gold"]
        gold = dict(gold) if isinstance(gold, dict) else {i: 1.0 for i in gold or []}
        if not gold or sum(gold.values()) <= 0:
            assert qid not in out.index
            continue
        found = sum(w for i, w in gold.items() if i in set(g["item_id"]))
        assert out.at[qid, "pool"] == pytest.approx(found / sum(gold.values()))
        assert out.at[qid, "pool_size"] == len(g)
        # the top 20 by one signal is a subset of the pool: never a larger share
        assert out.at[qid, "bm25_top20"] <= out.at[qid, "pool"] + 1e-12
        checked += 1
    assert checked > 0
    # the pool bounds the recall of any ranking of it at any k (here the replay's R@10)
    r10 = live.metrics[live.metrics["measure"] == "R@10"].set_index("qid")["value"]
    common = out.index.intersection(r10.index)
    assert (r10.reindex(common) <= out["pool"].reindex(common) + 1e-9).all()


def test_the_pool_oracle_only_reads_the_questions_asked(live):
    qids = sorted(set(live.decisions["qid"]))[:3]
    out = oracle(live, qids)
    assert set(out["qid"]) <= set(qids)
    assert isinstance(out, pd.DataFrame)


PATH = _RECIPE_DIR / "dense-conversational.json"


@pytest.mark.skipif(not PATH.is_file(), reason="dense-conversational is not shipped")
def test_dense_conversational_is_the_dense_recipe_plus_its_chosen_point_and_ranker():
    recipe = json.loads(PATH.read_text())
    prov = recipe["provenance"]
    assert prov["base_recipe"] == "dense"
    assert "--config dense" in prov["command"] and "--group-by workspace" in prov["command"]
    loaded = get_recipe("dense-conversational")
    dense = get_recipe("dense")
    # only the chosen grid point, the name and the ranker differ from the dense recipe
    differs = {k for k, v in loaded.to_dict().items() if dense.to_dict()[k] != v}
    assert differs <= {"name", "reranker", *prov["chosen"]["point"]}
    assert loaded.dense == dense.dense
    model = load_ranker(loaded.reranker)
    assert model.kind == prov["chosen"]["ranker"]
    assert model.manifest["trace"]["hash"] == prov["trace"]
    # the nested estimate it reports is paired with the dense recipe on the same folds
    cv = {row["measure"]: row for row in prov["cv"]}
    assert set(cv) >= {"R@10", "MRR"}
    for row in cv.values():
        assert row["ci_low"] <= row["cv_mean"] <= row["ci_high"]
        assert np.isclose(row["diff_mean"], row["cv_mean"] - row["base_cv_mean"])
