"""Issue 17 item 3, LoCoMo side: each quality option alone and together, by grouped 5-fold CV.

    PYTHONPATH=. .venv/bin/python benchmarks/locomo_quality.py [../shared/datasets]
        [--out out/locomo_quality] [--only "graph guard"]
    PYTHONPATH=. /path/to/venv-with-dense/bin/python benchmarks/locomo_quality.py --dense

LoCoMo categories 1-4 (R@10 and MRR; folds are its five conversations) and MuSiQue (R@5; folds
group questions), seed 0, k = 20. Every option's parameter is chosen inside the folds
(:func:`memlab.tuning.cv_choose`: each fold takes the grid point with the best R@10 (MuSiQue:
R@5) on the other folds, the base listed first so that it wins ties) and the CV estimate is the
mean of the held-out fold scores. Rows:

* the base recipe as is (``DEFAULT``, or with ``--dense`` the dense recipe);
* ``temporal_window_tail_days`` in {0, 1, 2, 3, 5, 7};
* ``spelling_weight`` (trigram field) in {0, 0.1, 0.2, 0.3};
* the graph guard, ``graph_guard_k`` in {0, 5, 10} (``stages/graph_rerank.py``);
* together: tail {0, 3, 7} x spelling {0, 0.2} x guard {0, 10};
* with ``--dense`` instead (each dense replay takes minutes on the project's machine):
  reciprocal-rank fusion (k = 60, weight 0.5), the convex hybrid's weight chosen by CV in
  {0.3, 0.4, 0.5, 0.6, 0.7}, tail {0, 3} x spelling {0, 0.2} chosen by CV, and the dense
  recipe against ``DEFAULT`` fold by fold.

The paired difference with the base on the same folds has a t-interval over the five fold
differences. "in-sample" is the grid point chosen on every question and its pooled score:
labelled so, never an estimate. An option kept for LoCoMo is checked for its cost on
MuSiQue: the LoCoMo in-sample choice (what a recipe would ship) replayed on MuSiQue, paired
with the base on MuSiQue's folds.
``--only TEXT`` (repeatable) keeps the option rows whose name contains one of the texts (the
base rows are always there), e.g. ``--only "graph guard"`` re-runs the guard's rows alone.
Writes ``ablation.csv``, ``ablation.md`` and ``folds.csv`` into ``--out``.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from memlab.datasets import shared_data_dir
from memlab.datasets.loaders import load_hipporag, load_locomo
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT, SurfacingConfig
from memlab.tuning import cv_choose, grouped_folds
from memlab.tuning.search import _groups, _question_frame, _t_interval

SEED, FOLDS, K = 0, 5, 20
# DEFAULT without its wall-clock budgets on the graph stages (as benchmarks/tuning_cv.py): on
# a loaded machine a budget can cut PPR or spreading short, so a run would not reproduce.
BASE = DEFAULT.replace(ppr=dataclasses.replace(DEFAULT.ppr, budget_ms=None),
                       spreading=dataclasses.replace(DEFAULT.spreading, budget_ms=None))

TAILS = (0.0, 1.0, 2.0, 3.0, 5.0, 7.0)
SPELLING = (0.0, 0.1, 0.2, 0.3)
GUARD = (0, 5, 10)
TOGETHER = list(itertools.product((0.0, 3.0, 7.0), (0.0, 0.2), (0, 10)))
# the dense run's LoCoMo options: a grid declared before any dense result was seen (each dense
# replay takes minutes here), mid-range values of the base grids
DENSE_TOGETHER = list(itertools.product((0.0, 3.0), (0.0, 0.2)))
DENSE_WEIGHTS = (0.5, 0.3, 0.4, 0.6, 0.7)  # the recipe's 0.5 first: it wins ties


def _options(base: SurfacingConfig) -> dict[str, dict[str, SurfacingConfig]]:
    """Option name -> {grid label: configuration}, the base's own value first."""
    if base.dense is not None:
        return {
            "RRF (k=60, weight 0.5) instead of max-scaled": {
                "rrf": base.replace(dense=dataclasses.replace(base.dense, fusion="rrf"))},
            "convex, weight chosen by CV": {
                f"weight={w:g}": base.replace(dense=dataclasses.replace(base.dense, weight=w))
                for w in DENSE_WEIGHTS},
            "tail and spelling together": {
                f"tail={t:g}, spelling={w:g}": base.replace(temporal_window_tail_days=t,
                                                            spelling_weight=w)
                for t, w in DENSE_TOGETHER},
        }
    grids = {
        "temporal tail (days)": {f"tail={t:g}": base.replace(temporal_window_tail_days=t)
                                 for t in TAILS},
        "spelling field (trigram weight)": {f"spelling={w:g}": base.replace(spelling_weight=w)
                                            for w in SPELLING},
        "graph guard (k)": {f"guard={d}": base.replace(graph_guard_k=d) for d in GUARD},
        "together": {f"tail={t:g}, spelling={w:g}, guard={d}": base.replace(
            temporal_window_tail_days=t, spelling_weight=w, graph_guard_k=d)
            for t, w, d in TOGETHER},
    }
    return grids


class Replays:
    """One replay per distinct configuration and trace (grids share points)."""

    def __init__(self, trace, measures) -> None:
        self.trace, self.measures, self.cache = trace, measures, {}
        self.seconds = 0.0

    def __call__(self, config: SurfacingConfig):
        key = json.dumps({**config.to_dict(), "name": ""}, sort_keys=True, default=str)
        if key not in self.cache:
            started = time.perf_counter()
            self.cache[key] = replay(self.trace, config, k=K, measures=self.measures,
                                     seed=SEED, record_candidates=False, progress=False)
            self.seconds += time.perf_counter() - started
            print(f"  replayed {config.name} ({time.perf_counter() - started:.0f} s)",
                  file=sys.stderr, flush=True)
        return self.cache[key]


def _choose(trace, replays: Replays, grid, base_config, measures, group_by, categories):
    labels = {"base": base_config, **grid}
    results = {label: replays(config) for label, config in labels.items()}
    return cv_choose(trace, labels, base="base", measures=measures, folds=FOLDS,
                     group_by=group_by, seed=SEED, k=K, categories=categories,
                     replays=results)


def _paired(trace, a, b, measure, group_by, categories) -> dict:
    """Fixed configuration replays ``a`` against ``b`` on the CV folds (no choice)."""
    questions = _question_frame(trace, set(categories) if categories else None)
    split = grouped_folds(_groups(questions, group_by), FOLDS, SEED)
    va = a.metrics[a.metrics["measure"] == measure].set_index("qid")["value"]
    vb = b.metrics[b.metrics["measure"] == measure].set_index("qid")["value"]
    fa = np.array([va.reindex(f).mean() for f in split])
    fb = np.array([vb.reindex(f).mean() for f in split])
    low, high = _t_interval(fa - fb)
    a_low, a_high = _t_interval(fa, bounds=(0.0, 1.0))
    return {"cv_mean": fa.mean(), "ci_low": a_low, "ci_high": a_high, "base": fb.mean(),
            "delta": (fa - fb).mean(), "delta_low": low, "delta_high": high,
            "folds_better": int(((fa - fb) > 1e-12).sum()),
            "worst_fold": float((fa - fb).min()), "half_width": (a_high - a_low) / 2}


def main(argv: list[str]) -> pd.DataFrame:
    dense = "--dense" in argv
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path(
        "out/locomo_quality" + ("_dense" if dense else ""))
    skip = {argv[i + 1] for i, a in enumerate(argv) if a in ("--out", "--only")}
    only = [argv[i + 1] for i, a in enumerate(argv) if a == "--only"]
    paths = [a for a in argv if not a.startswith("--") and a not in skip]
    root = Path(paths[0]) if paths else shared_data_dir()
    base = BASE
    if dense:
        from memlab.signals.dense import DenseConfig
        base = BASE.replace(name="dense", dense=DenseConfig(embedder="minilm"))
    options = _options(base)
    if only:
        options = {o: g for o, g in options.items() if any(t in o for t in only)}
        if not options:
            raise ValueError(f"--only: no option row contains {only!r}; the rows: "
                             f"{sorted(_options(base))}")
    locomo = load_locomo(root / "locomo" / "locomo_dev.json")
    musique = load_hipporag(root / "hipporag" / "musique_train.json",
                            root / "hipporag" / "musique_train_corpus.json")
    lo_measures, mu_measures = ["R@10", "MRR"], ["R@5"]
    lo = Replays(locomo, lo_measures)
    mu = Replays(musique, mu_measures)
    rows, fold_frames = [], []
    what = "dense recipe" if dense else "DEFAULT"
    for m in lo_measures:
        fixed = _paired(locomo, lo(base), lo(base), m, "workspace", [1, 2, 3, 4])
        rows.append({"option": f"{what} as is", "data": "LoCoMo cat. 1-4", "measure": m,
                     **{k: fixed[k] for k in ("cv_mean", "ci_low", "ci_high")}})
    fixed = _paired(musique, mu(base), mu(base), "R@5", "question", None)
    rows.append({"option": f"{what} as is", "data": "MuSiQue 100", "measure": "R@5",
                 **{k: fixed[k] for k in ("cv_mean", "ci_low", "ci_high")}})
    if dense:  # the dense recipe against DEFAULT, fold by fold (the "never below")
        for trace, rep, ms, group_by, cats, data in (
                (locomo, lo, lo_measures, "workspace", [1, 2, 3, 4], "LoCoMo cat. 1-4"),
                (musique, mu, mu_measures, "question", None, "MuSiQue 100")):
            for m in ms:
                p = _paired(trace, rep(base), rep(BASE), m, group_by, cats)
                rows.append({"option": "dense recipe vs DEFAULT (fixed, paired)", "data": data,
                             "measure": m, "cv_mean": p["cv_mean"], "ci_low": p["ci_low"],
                             "ci_high": p["ci_high"], "delta": p["delta"],
                             "delta_low": p["delta_low"], "delta_high": p["delta_high"],
                             "folds_better": p["folds_better"], "worst_fold": p["worst_fold"],
                             "half_width": p["half_width"]})
    for option, grid in options.items():
        print(option, file=sys.stderr, flush=True)
        lo_out = _choose(locomo, lo, grid, base, lo_measures, "workspace", [1, 2, 3, 4])
        for data, res in (("LoCoMo cat. 1-4", lo_out),):
            for r in res.table.to_dict(orient="records"):
                rows.append({"option": option, "data": data, "measure": r["measure"],
                             "cv_mean": r["cv_mean"], "ci_low": r["ci_low"],
                             "ci_high": r["ci_high"], "delta": r["diff_mean"],
                             "delta_low": r["diff_ci_low"], "delta_high": r["diff_ci_high"],
                             "folds_better": r["folds_better"],
                             "folds_worse": r["folds_worse"],
                             "chosen": ", ".join(res.folds["chosen"]),
                             "in_sample_choice": r["in_sample_choice"],
                             "in_sample": r["in_sample"]})
            fold_frames.append(res.folds.assign(option=option, data=data))
        # the LoCoMo in-sample choice (what a recipe would ship) applied to MuSiQue, paired
        pick = lo_out.table["in_sample_choice"].iloc[0]
        config = base if pick == "base" else grid[pick]
        p = _paired(musique, mu(config), mu(base), "R@5", "question", None)
        rows.append({"option": f"{option}: LoCoMo's choice ({pick}) on MuSiQue",
                     "data": "MuSiQue 100", "measure": "R@5", "cv_mean": p["cv_mean"],
                     "ci_low": p["ci_low"], "ci_high": p["ci_high"], "delta": p["delta"],
                     "delta_low": p["delta_low"], "delta_high": p["delta_high"],
                     "folds_better": p["folds_better"], "worst_fold": p["worst_fold"]})
    table = pd.DataFrame(rows)
    for column in ("delta", "delta_low", "delta_high", "folds_better", "folds_worse", "chosen",
                   "in_sample_choice", "in_sample", "worst_fold", "half_width"):
        if column not in table:
            table[column] = np.nan
    pct = ["cv_mean", "ci_low", "ci_high", "delta", "delta_low", "delta_high", "in_sample",
           "worst_fold", "half_width"]
    table[pct] = table[pct].astype(float) * 100
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "ablation.csv", index=False)
    pd.concat(fold_frames, ignore_index=True).to_csv(out / "folds.csv", index=False)
    (out / "ablation.md").write_text(to_markdown(table, what))
    print(to_markdown(table, what))
    print(f"replay time: LoCoMo {lo.seconds:.0f} s ({len(lo.cache)} configurations), "
          f"MuSiQue {mu.seconds:.0f} s ({len(mu.cache)})", file=sys.stderr)
    return table


def to_markdown(table: pd.DataFrame, what: str) -> str:
    lines = [f"| option | data | measure | CV estimate [95 %] | Δ vs {what}, same folds [95 %] "
             "| folds better / worse | chosen per fold | in-sample choice (in-sample score) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in table.itertuples(index=False):
        delta = "" if pd.isna(r.delta) else \
            f"{r.delta:+.1f} [{r.delta_low:+.1f}, {r.delta_high:+.1f}]"
        better = "" if pd.isna(r.folds_better) else (
            f"{int(r.folds_better)} / {int(r.folds_worse)}" if not pd.isna(r.folds_worse)
            else f"{int(r.folds_better)} better; worst fold {r.worst_fold:+.1f}")
        chosen = "" if pd.isna(r.chosen) else r.chosen
        insample = "" if pd.isna(r.in_sample) else f"{r.in_sample_choice} ({r.in_sample:.1f})"
        lines.append(f"| {r.option} | {r.data} | {r.measure} | {r.cv_mean:.1f} "
                     f"[{r.ci_low:.1f}, {r.ci_high:.1f}] | {delta} | {better} | {chosen} | "
                     f"{insample} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
