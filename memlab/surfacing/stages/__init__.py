"""Surfacing as composable stages (see :mod:`memlab.surfacing.stages.base`).

Every stage takes the query's :class:`QueryRun` and a :class:`CandidateTable` and returns a new
table; ``>>`` composes stages into a :class:`Pipeline`. The constructors below are the
vocabulary a strategy is written in::

    bm25() >> dense() >> title_match() >> fuse() >> spread() >> mandatory() >> signals()
        >> ppr() >> composite() >> budget()

=========================  ========  ==================================================
stage                      phase     does
=========================  ========  ==================================================
``bm25(n)``                retrieve  BM25 over-fetch (source ``relevance``)
``dense(config)``          retrieve  nearest items by embedding; hybrid relevance
``title_match(weight)``    retrieve  items the query names by title
``fuse()``                 retrieve  re-rank the over-fetch by the full relevance
``recent(n)``              expand    most recently touched items
``window(n)``              expand    items inside the query's time window
``procedural(n)``          expand    best-matching procedural items
``spread(config, ...)``    expand    spreading activation from the seeds
``mandatory()``            mandatory session anchors and pins, each once
``signals()``              signals   every candidate's signals
``recency_cue(floor)``     adjust    full recency when the query asks for it
``exact_match(boost)``     adjust    point-query exact-title boost
``procedural_boost(b)``    adjust    procedural items' multiplier
``window_boost(...)``      adjust    in-window relevance floor, recency, boost, restriction
``ppr(config, seeds)``     adjust    Personalized PageRank centrality
``composite(weights)``     score     composite score and its terms
``rerank(model)``          score     a learned model's score (the recipe's ``reranker``)
``graph_rerank(...)``      score     bridges lifted, retrieval's top kept (issue 17)
``budget(k, max_tokens)``  select    order, cut to ``k`` and ``max_tokens``
=========================  ========  ==================================================
"""

from memlab.surfacing.stages.base import (PHASES, STAGES, Pipeline, QueryRun, RecipeStage,
                                          Stage, register_stage, stage_from_dict)
from memlab.surfacing.stages.dense import Dense, dense
from memlab.surfacing.stages.expand import (ExactMatch, ProceduralBoost, ProceduralItems,
                                            RecencyCue, Recent, Window, WindowBoost, exact_match,
                                            procedural, procedural_boost, recency_cue, recent,
                                            window, window_boost)
from memlab.surfacing.stages.graph import PPR, Spread, ppr, spread
from memlab.surfacing.stages.graph_rerank import GraphRerank, graph_rerank
from memlab.surfacing.stages.retrieval import (BM25, Fuse, bm25, bm25_of, fuse,
                                               normalised_relevance, top_by_score)
from memlab.surfacing.stages.scoring import (COMPOSITE_INPUTS, Budget, Composite, Mandatory,
                                             Rerank, Signals, budget, mandatory, rerank,
                                             signals)
from memlab.surfacing.stages.scoring import composite_stage as composite
from memlab.surfacing.stages.title import TitleMatch, title_match
# issue 17's optional stages (registered here so that a serialised pipeline naming them loads)
from memlab.surfacing.stages.variants import SpellingVariants, spelling_variants  # noqa: F401
from memlab.surfacing.stages.ranker_features import (RankerFeatures,  # noqa: F401
                                                     ranker_features)
from memlab.surfacing.table import CandidateTable

__all__ = ["Stage", "RecipeStage", "Pipeline", "QueryRun", "CandidateTable", "STAGES", "PHASES",
           "register_stage", "stage_from_dict", "COMPOSITE_INPUTS",
           "bm25", "dense", "title_match", "fuse", "recent", "window", "procedural", "spread",
           "mandatory", "signals", "recency_cue", "exact_match", "procedural_boost",
           "window_boost", "ppr", "composite", "rerank", "graph_rerank", "budget",
           "BM25", "Dense", "TitleMatch", "Fuse", "Recent", "Window", "ProceduralItems", "Spread",
           "Mandatory", "Signals", "RecencyCue", "ExactMatch", "ProceduralBoost", "WindowBoost",
           "PPR", "Composite", "Rerank", "GraphRerank", "Budget", "normalised_relevance", "bm25_of",
           "top_by_score"]


