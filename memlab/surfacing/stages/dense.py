"""The dense stage: hybrid retrieval by embedding similarity (the ``dense`` extra's embedder, or
a registered one, per :class:`~memlab.signals.dense.DenseConfig`)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.signals.dense import DenseConfig, dense_search, embed_query
from memlab.signals.fusion import HybridScale, RankFusion, ScoreScale
from memlab.surfacing.stages.base import CandidateTable, QueryRun, RecipeStage, register_stage
from memlab.surfacing.stages.retrieval import top_by_score

__all__ = ["Dense", "dense"]


@register_stage
@dataclass(frozen=True, repr=False)
class Dense(RecipeStage):
    """The ``config.candidates`` items nearest the query join (source ``dense``), and the hybrid
    scale (BM25 and similarity → relevance) is fitted to this query. ``config=None``: the
    recipe's ``dense``; the stage is off when that is None too, and in legacy mode. The query's
    embedding is timed on its own as ``query_embedding``, nested inside the stage's ``dense``."""

    name: ClassVar[str] = "dense"
    phase: ClassVar[str] = "retrieve"
    recipe: ClassVar[dict] = {"config": "dense"}
    loaders: ClassVar[dict] = {"config": DenseConfig.from_dict}
    requires: ClassVar[str] = "config"
    config: DenseConfig | None = None

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        config = self.setting(run, "config")
        t0 = time.perf_counter()
        vector = embed_query(run.query, config)
        run.timings["query_embedding"] = (run.timings.get("query_embedding", 0.0)
                                          + (time.perf_counter() - t0) * 1e3)
        _, sims = dense_search(run.ws, run.query, config, query_vector=vector)
        finite = np.flatnonzero(np.isfinite(sims))
        nearest = finite[top_by_score(finite, sims[finite], config.candidates)] \
            if config.candidates else np.empty(0, np.int64)
        semantic = np.maximum(sims[finite], 0.0)
        matched = table.attrs.get("matched_bm25", np.empty(0))
        if config.fusion == "rrf":
            hybrid = RankFusion.fit(matched, semantic, config.weight, config.rrf_k)
        else:
            hybrid = HybridScale(
                ScoreScale.fit(matched, config.normalise, config.norm_depth),
                ScoreScale.fit(semantic[semantic > 0], config.normalise, config.norm_depth),
                config.weight)
        run.notes["dense"] = {"embedder": config.embedder, "weight": config.weight,
                              "normalise": config.normalise, "fusion": config.fusion,
                              "nearest": len(nearest)}
        extra = tuple(table.attrs.get("extra_candidates", ())) + (nearest,)
        return table.add(nearest, "dense", allowed=run.eligible).with_attrs(
            dense_sims=sims, hybrid=hybrid, extra_candidates=extra)


def dense(config: DenseConfig | None = None) -> Dense:
    """The dense retrieval stage (``config=None``: the recipe's ``dense``)."""
    return Dense(config)
