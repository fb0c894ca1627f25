"""A shipped recipe's learned ranker on the *other* dataset (issue 17 item 4): a held-out
number by construction, since the ranker never saw a question of it.

    PYTHONPATH=. .venv/bin/python benchmarks/recipe_transfer.py RECIPE shared:locomo \\
        --categories 1 2 3 4 --measures R@10 MRR --group-by workspace

Replays the trace under the recipe and under ``DEFAULT`` (graph budgets off in both, as in
the runs that chose the recipe), and prints, per measure, the per-fold means on the same
grouped 5-fold split (seed 0) as ``memlab tune``, their mean with a 95 % t-interval over
folds, and the paired difference with ``DEFAULT``.
"""

from __future__ import annotations

import argparse
import dataclasses

import numpy as np

from memlab.cli import _load_trace
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT, get_recipe
from memlab.tuning.search import BOUNDS, _groups, _question_frame, _t_interval, grouped_folds


def _no_budgets(config):
    return config.replace(**{s: dataclasses.replace(getattr(config, s), budget_ms=None)
                             for s in ("ppr", "spreading") if getattr(config, s) is not None})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("recipe")
    ap.add_argument("trace")
    ap.add_argument("--categories", nargs="+", type=int, default=None)
    ap.add_argument("--measures", nargs="+", default=["R@10", "MRR"])
    ap.add_argument("--group-by", default="workspace")
    args = ap.parse_args()
    trace = _load_trace(args.trace)
    questions = _question_frame(trace, set(args.categories) if args.categories else None)
    split = grouped_folds(_groups(questions, args.group_by), 5, 0)
    values = {}
    for label, config in (("DEFAULT", DEFAULT), (args.recipe, get_recipe(args.recipe))):
        out = replay(trace, _no_budgets(config), k=20, measures=args.measures, seed=0,
                     progress=False)
        values[label] = out.metrics.pivot_table(index="qid", columns="measure", values="value")
    for m in args.measures:
        folds = {label: np.array([v[m].reindex(f).mean() for f in split])
                 for label, v in values.items()}
        for label, scores in folds.items():
            low, high = _t_interval(scores, bounds=BOUNDS)
            pooled = values[label][m].reindex(questions["qid"]).mean()
            print(f"{m} {label}: fold mean {100 * scores.mean():.1f} [{100 * low:.1f}, "
                  f"{100 * high:.1f}] (pooled {100 * pooled:.1f})")
        diff = folds[args.recipe] - folds["DEFAULT"]
        low, high = _t_interval(diff)
        print(f"{m} {args.recipe} - DEFAULT: {100 * diff.mean():+.1f} [{100 * low:+.1f}, "
              f"{100 * high:+.1f}] (folds better {(diff > 1e-12).sum()}, worse "
              f"{(diff < -1e-12).sum()})")


if __name__ == "__main__":
    main()
