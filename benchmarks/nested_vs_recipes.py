"""A nested choice's held-out fold scores (``memlab tune --rankers/--grid --out DIR``) paired
with fixed recipes on the same folds (issue 17: "the dense recipe never scores below the base
recipe on any fold by more than its interval").

    PYTHONPATH=. <venv with dense>/bin/python benchmarks/nested_vs_recipes.py \\
        out/tune-dense-multihop shared:musique --group-by question \\
        --recipes default dense dense-conversational

Reads ``DIR/folds.csv`` (each outer fold's choice, held-out score per measure, the split's
seed and held-out question ids) and ``DIR/nested.csv``; rebuilds the grouped split with that
seed and refuses to go on unless every fold holds exactly the question ids the nested run held
out there; replays each recipe (graph budgets off, as the nested run's replays; k 20, its seed)
and scores it on those folds; prints per fold and measure the nested score and each recipe's,
the paired difference nested - recipe with its 95 % t-interval over folds and folds +/-, and
for the first recipe (the base) the worst fold difference against the half-width of the nested
estimate's interval.

Which numbers are held out: the nested scores are (each fold's choice and ranker never saw its
questions). The recipes' are held out only where the recipe was fitted elsewhere
(``dense-conversational``'s ranker was trained on LoCoMo, never on MuSiQue); the baselines
``default`` and ``dense`` are settings chosen with MuSiQue in view (README "Ranker features
not recorded before"), so their scores here are in-sample, which favours them in the paired
differences.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
from pathlib import Path

import numpy as np
import pandas as pd

from memlab.cli import _load_trace
from memlab.harness.replay import replay
from memlab.surfacing.config import get_recipe
from memlab.tuning.search import BOUNDS, _groups, _question_frame, _t_interval, grouped_folds


def _no_budgets(config):
    return config.replace(**{s: dataclasses.replace(getattr(config, s), budget_ms=None)
                             for s in ("ppr", "spreading") if getattr(config, s) is not None})


def same_split(folds: pd.DataFrame, groups: pd.Series) -> list[list[str]]:
    """The grouped split (:func:`grouped_folds` with ``folds.csv``'s seed) of ``groups``' questions,
    checked fold by fold against the question ids ``folds.csv`` records (``qids``), else
    ValueError naming the first fold that differs."""
    missing = [c for c in ("seed", "qids") if c not in folds.columns]
    if missing:
        raise ValueError(f"folds.csv lacks the column(s) {missing} (written by memlab tune "
                         f"since the split is recorded); re-run the nested choice")
    seeds = sorted(set(folds["seed"].astype(int)))
    if len(seeds) != 1:
        raise ValueError(f"folds.csv records the seeds {seeds}, expected one")
    split = grouped_folds(groups, len(folds), seeds[0])
    for i, (fold, recorded) in enumerate(zip(split, folds["qids"])):
        want = set(json.loads(recorded))
        got = {str(q) for q in fold}
        if got != want:
            raise ValueError(f"the split differs from the nested run's in fold {i} (seed "
                             f"{seeds[0]}): {len(want - got)} of its {len(want)} held-out "
                             f"questions are elsewhere, {len(got - want)} others are in it")
    return split


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", help="a memlab tune --rankers/--grid --out folder")
    ap.add_argument("trace")
    ap.add_argument("--recipes", nargs="+", default=["default", "dense"])
    ap.add_argument("--group-by", default="question", choices=["question", "workspace"])
    ap.add_argument("--categories", nargs="+", type=int, default=None)
    args = ap.parse_args(argv)
    folder = Path(args.out)
    folds = pd.read_csv(folder / "folds.csv")
    nested = pd.read_csv(folder / "nested.csv")
    measures = nested["measure"].tolist()
    trace = _load_trace(args.trace)
    questions = _question_frame(trace, set(args.categories) if args.categories else None)
    try:
        split = same_split(folds, _groups(questions, args.group_by))
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    scores = {}
    for name in args.recipes:
        out = replay(trace, _no_budgets(get_recipe(name)), k=20, measures=measures,
                     seed=int(folds["seed"].iloc[0]), progress=False)
        values = out.metrics.pivot_table(index="qid", columns="measure", values="value")
        scores[name] = {m: np.array([values[m].reindex(f).mean() for f in split])
                        for m in measures}
    print(f"each outer fold's choice: {folds['chosen'].tolist()}")
    for m in measures:
        mine = folds[m].to_numpy()
        row = nested[nested["measure"] == m].iloc[0]
        table = pd.DataFrame({"nested": mine, **{n: s[m] for n, s in scores.items()}})
        print(f"\n{m} per fold (x100):")
        print((100 * table).round(1).to_string())
        print(f"nested {100 * row.cv_mean:.1f} [{100 * row.ci_low:.1f}, {100 * row.ci_high:.1f}]")
        for name, s in scores.items():
            low, high = _t_interval(s[m], bounds=BOUNDS)
            d = mine - s[m]
            d_low, d_high = _t_interval(d)
            print(f"  {name}: {100 * s[m].mean():.1f} [{100 * low:.1f}, {100 * high:.1f}]; "
                  f"nested - {name} {100 * d.mean():+.1f} [{100 * d_low:+.1f}, "
                  f"{100 * d_high:+.1f}] (folds +{int((d > 1e-12).sum())}/"
                  f"-{int((d < -1e-12).sum())})")
        base = args.recipes[0]
        worst = float((mine - scores[base][m]).min())
        half = (row.ci_high - row.ci_low) / 2
        verdict = "holds" if worst >= -half else "FAILS"
        print(f"  rule (never below {base} on a fold by more than the interval): worst fold "
              f"{100 * worst:+.1f}, half-width {100 * half:.1f}: {verdict}")


if __name__ == "__main__":
    main()
