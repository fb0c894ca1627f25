"""Learned surfacing stages (issue 17 item 2): a ranking model trained on replay frames, saved
with its features and training manifest, used as a recipe's ``reranker`` stage and evaluated
only by grouped cross-validation, and :func:`nested_choose`: the nested grouped-CV choice of
the recipe to ship among configurations with and without a ranker (``memlab tune --rankers``).
Needs the ``learn`` extra (scikit-learn, lightgbm)."""

from memlab.learn.ranker import KINDS, RankerCV, cv_ranker, fit_ranker, frame_features
from memlab.learn.nested import Candidate, NestedResult, grid_configs, nested_choose
from memlab.surfacing.rerank import (ALL_FEATURES, EXTRA_FEATURES, FEATURES, HOP_FEATURES,
                                    RankerModel, load_ranker, register_reranker)

__all__ = ["fit_ranker", "cv_ranker", "RankerCV", "frame_features", "KINDS", "FEATURES",
           "EXTRA_FEATURES", "HOP_FEATURES", "ALL_FEATURES",
           "RankerModel", "load_ranker", "register_reranker", "nested_choose", "NestedResult",
           "Candidate", "grid_configs"]
