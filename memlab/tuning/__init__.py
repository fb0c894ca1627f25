"""Honest tuning (issue 17): search ``SurfacingConfig`` fields with Optuna under grouped
cross-validation, and write the chosen configuration as a recipe file.

See :func:`tune` (the procedure), :func:`cv_fixed` (the same folds for a fixed
configuration), :func:`cv_choose` (the same folds, choosing among a few replayed
configurations; :func:`memlab.learn.nested_choose` adds learned rankers to that choice), the
evaluators in :mod:`memlab.tuning.evaluate` and the plots in
:mod:`memlab.tuning.plots`. Needs the ``tune`` extra (optuna).
"""

from memlab.tuning.evaluate import CounterfactualEvaluator, ReplayEvaluator, subtrace
from memlab.tuning.grid import ChooseResult, choose_by_folds, cv_choose
from memlab.tuning.plots import plot_history, plot_importance, plot_top_params, save_plots
from memlab.tuning.search import (DEFAULT_SPACE, GROUP_BY, Param, TuneResult, cv_fixed,
                                  grouped_folds, parse_space, score_holdout, tune,
                                  check_disjoint_holdout)

__all__ = ["tune", "cv_fixed", "cv_choose", "choose_by_folds", "ChooseResult", "TuneResult",
           "Param", "parse_space", "grouped_folds",
           "score_holdout", "check_disjoint_holdout", "DEFAULT_SPACE", "GROUP_BY",
           "CounterfactualEvaluator",
           "ReplayEvaluator", "subtrace", "plot_history", "plot_importance", "plot_top_params",
           "save_plots"]
