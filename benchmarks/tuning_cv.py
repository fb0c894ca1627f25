"""Grouped 5-fold CV estimates on the shared data: the README's "Tuning honestly" table.

    PYTHONPATH=. .venv/bin/python benchmarks/tuning_cv.py [../shared/datasets] [--trials 100]
        [--out out/tuning_cv]

For MuSiQue (R@5; one workspace, so folds group questions) and LoCoMo categories 1-4 (R@10
and MRR; folds group whole conversations), all with seed 0 and k = 20, three rows per measure:

* ``DEFAULT`` as it is: a fixed configuration's CV estimate is its mean on each held-out fold
  (nothing is fitted), averaged over the folds;
* ``tune``d composite weights (``activation_floor``, ``centrality_weight``,
  ``freshness_weight``; counterfactual, TPE, ``--trials`` per fold) for that measure;
* the learned ranker on DEFAULT's candidates, LogisticRegression and LightGBM lambdarank.

Every number is a mean of held-out fold scores; the interval is the 95 % Student-t interval
over the five folds, and the paired difference with DEFAULT on the same folds has its own
t-interval over the five fold differences. Writes ``cv.csv`` and ``cv.md`` into ``--out``.
"""

from __future__ import annotations

import dataclasses
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from memlab.datasets import shared_data_dir
from memlab.datasets.loaders import load_hipporag, load_locomo
from memlab.harness.replay import replay
from memlab.learn import cv_ranker
from memlab.surfacing.config import DEFAULT
from memlab.tuning import cv_fixed, tune
from memlab.tuning.search import _t_interval

SEED, FOLDS, K = 0, 5, 20
# DEFAULT without its wall-clock budgets on the graph stages: on a loaded machine a budget can
# cut PPR or spreading short and change the candidates, so a run would not reproduce (the
# README's advice for runs that must). On a calm machine no budget is hit and this is DEFAULT.
BASE = DEFAULT.replace(ppr=dataclasses.replace(DEFAULT.ppr, budget_ms=None),
                       spreading=dataclasses.replace(DEFAULT.spreading, budget_ms=None))


def main(argv: list[str]) -> pd.DataFrame:
    trials = int(argv[argv.index("--trials") + 1]) if "--trials" in argv else 100
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path("out/tuning_cv")
    skip = {argv[i + 1] for i, a in enumerate(argv) if a in ("--trials", "--out")}
    paths = [a for a in argv if not a.startswith("--") and a not in skip]
    root = Path(paths[0]) if paths else shared_data_dir()
    setups = [
        ("MuSiQue 100", load_hipporag(root / "hipporag" / "musique_train.json",
                                      root / "hipporag" / "musique_train_corpus.json"),
         ["R@5"], "question", None),
        ("LoCoMo cat. 1-4", load_locomo(root / "locomo" / "locomo_dev.json"),
         ["R@10", "MRR"], "workspace", [1, 2, 3, 4]),
    ]
    rows = []
    for data, trace, measures, group_by, categories in setups:
        live = replay(trace, BASE, k=K, measures=measures, seed=SEED, progress=False)
        common = dict(folds=FOLDS, group_by=group_by, seed=SEED, k=K, categories=categories)
        base_folds = {}
        for m in measures:
            fixed = cv_fixed(trace, BASE, measure=m, **common).iloc[0]
            base_folds[m] = np.asarray(fixed["fold_scores"])
            rows.append(_row(data, m, "DEFAULT as is", fixed, group_by))
            started = time.perf_counter()
            tuned = tune(trace, base=BASE, measure=m, n_trials=trials, live=live, **common)
            row = _row(data, m, f"tune: composite weights ({trials} trials/fold)",
                       tuned.cv.iloc[0], group_by)
            row.update(_paired(tuned.folds["score"].to_numpy() - base_folds[m]))
            row["seconds"] = round(time.perf_counter() - started, 1)
            row["chosen"] = ", ".join(f"{k}={v:.3g}" for k, v in tuned.best_params.items())
            rows.append(row)
        for kind in ("logistic", "lambdarank"):
            started = time.perf_counter()
            learned = cv_ranker(trace, base=BASE, live=live, kind=kind, measures=measures, **common)
            for rec in learned.table.to_dict(orient="records"):
                row = _row(data, rec["measure"], f"learned ranker ({kind})", rec, group_by)
                f = learned.folds[learned.folds["measure"] == rec["measure"]]
                assert np.allclose(f["base_score"].to_numpy(), base_folds[rec["measure"]])
                row.update(_paired(f["score"].to_numpy() - f["base_score"].to_numpy()))
                row["seconds"] = round(time.perf_counter() - started, 1)
                rows.append(row)
    table = pd.DataFrame(rows)
    for column in ("delta", "delta_low", "delta_high", "folds_better"):
        if column not in table:
            table[column] = np.nan
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "cv.csv", index=False)
    (out / "cv.md").write_text(to_markdown(table))
    print(to_markdown(table))
    return table


def _row(data, measure, what, rec, group_by) -> dict:
    return {"data": data, "measure": measure, "configuration": what,
            "cv_mean": 100 * float(rec["cv_mean"]), "ci_low": 100 * float(rec["ci_low"]),
            "ci_high": 100 * float(rec["ci_high"]), "questions": int(rec["questions"]),
            "group_by": group_by}


def _paired(diff: np.ndarray) -> dict:
    """The paired difference with DEFAULT on the same folds: mean, t-interval, folds won."""
    low, high = _t_interval(diff)
    return {"delta": 100 * float(diff.mean()), "delta_low": 100 * low,
            "delta_high": 100 * high, "folds_better": int((diff > 0).sum())}


def to_markdown(table: pd.DataFrame) -> str:
    lines = ["| data | measure | configuration | CV estimate | 95 % interval (folds) | "
             "Δ vs DEFAULT, same folds [95 %] | folds better | questions |",
             "|---|---|---|---:|---|---|---:|---:|"]
    for r in table.itertuples(index=False):
        delta = "" if pd.isna(r.delta) else \
            f"{r.delta:+.1f} [{r.delta_low:+.1f}, {r.delta_high:+.1f}]"
        better = "" if pd.isna(r.folds_better) else f"{int(r.folds_better)} of {FOLDS}"
        lines.append(f"| {r.data} | {r.measure} | {r.configuration} | {r.cv_mean:.1f} | "
                     f"{r.ci_low:.1f}–{r.ci_high:.1f} | {delta} | {better} | {r.questions} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
