"""Grouped 5-fold CV of the dense recipe on the shared data: the README's dense rows and the
embedder table's quality columns (issue 17 item 4, issue 19 item 4).

    PYTHONPATH=. <venv with dense>/bin/python benchmarks/dense_cv.py [../shared/datasets]
        [--embedders minilm-onnx-int8 minilm-static ...] [--tuned DIR ...] [--out DIR]

Folds are those of ``memlab tune`` for seed 0: MuSiQue's 100 questions grouped by question
(one corpus), LoCoMo categories 1-4 grouped by conversation (its five workspaces); k = 20.
The base is ``benchmarks/recipes/default-nobudget.json`` (``DEFAULT`` with the graph stages'
wall-clock budgets off, so that a loaded machine does not change the candidates).

* ``--embedders``: the dense recipe as it was before the re-choice
  (``benchmarks/recipes/dense-start.json``) with each embedder. A fixed configuration: nothing
  is fitted, so its CV estimate is its mean over the held-out folds; the Δ is paired with the
  base fold by fold (t-interval over the five fold differences).
* ``--tuned DIR``: a ``memlab tune`` output folder (its ``folds.csv``, its recipe and
  manifest). Each fold's choice is replayed on that fold's held-out questions for every
  measure (the search maximised one; the others are read off the same held-out replay), and
  paired with the base fold by fold. The CV estimate of the measure searched equals tune's own
  (checked). The chosen configuration is also scored on the other dataset's folds: it was
  searched without them, so that is a held-out number too.

Writes ``dense_cv.csv`` (one row per data, measure, configuration) and ``dense_cv.md``, and
``dense_folds.csv`` (per fold: held-out score, base score) into ``--out``
(default ``out/dense_cv``).
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from memlab.datasets import shared_data_dir
from memlab.datasets.loaders import load_hipporag, load_locomo
from memlab.harness.replay import replay
from memlab.harness.sweep import apply_point
from memlab.surfacing.config import load_recipe_file
from memlab.tuning.evaluate import subtrace
from memlab.tuning.search import (
    BOUNDS,
    _groups,
    _question_frame,
    _t_interval,
    grouped_folds,
)

SEED, FOLDS, K = 0, 5, 20
HERE = Path(__file__).resolve().parent
BASE = load_recipe_file(HERE / "recipes" / "default-nobudget.json")
START = load_recipe_file(HERE / "recipes" / "dense-start.json")
MEASURES = ["R@5", "R@10", "MRR"]
# data -> (the measures its targets name, how folds group, categories)
SETUPS = {"MuSiQue 100": (["R@5"], "question", None),
          "LoCoMo cat. 1-4": (["R@10", "MRR"], "workspace", [1, 2, 3, 4])}


def _traces(root: Path) -> dict:
    return {"MuSiQue 100": load_hipporag(root / "hipporag" / "musique_train.json",
                                         root / "hipporag" / "musique_train_corpus.json"),
            "LoCoMo cat. 1-4": load_locomo(root / "locomo" / "locomo_dev.json")}


def _split(trace, data: str) -> list[list[str]]:
    _, group_by, categories = SETUPS[data]
    questions = _question_frame(trace, None if categories is None else set(categories))
    return grouped_folds(_groups(questions, group_by), FOLDS, SEED)


CACHE: Path | None = None  # --out/replays: one CSV per replay, so a re-run replays nothing


def _values(trace, config, qids=None) -> pd.DataFrame:
    """Per-question values (columns: measures) of ``config``, on ``qids`` only when given."""
    key = hashlib.sha256(json.dumps([trace.hash(), config.to_dict(), sorted(qids or [])],
                                    sort_keys=True, default=str).encode()).hexdigest()[:20]
    path = None if CACHE is None else CACHE / f"{key}.csv"
    if path is not None and path.is_file():
        return pd.read_csv(path, index_col="qid")
    run = trace if qids is None else subtrace(trace, qids)
    metrics = replay(run, config, k=K, measures=MEASURES, seed=SEED, record_candidates=False,
                     progress=False).metrics
    values = metrics.pivot(index="qid", columns="measure", values="value")
    if path is not None:
        path.parent.mkdir(parents=True, exist_ok=True)
        values.to_csv(path)
    return values


def _row(data, measure, label, scores, base_scores, pooled, kind) -> dict:
    low, high = _t_interval(scores, bounds=BOUNDS)
    diff = scores - base_scores
    d_low, d_high = _t_interval(diff)
    return {"data": data, "measure": measure, "configuration": label, "kind": kind,
            "cv_mean": scores.mean(), "ci_low": low, "ci_high": high,
            "base_cv_mean": base_scores.mean(), "diff_mean": diff.mean(), "diff_ci_low": d_low,
            "diff_ci_high": d_high, "folds_better": int((diff > 1e-12).sum()),
            "folds_worse": int((diff < -1e-12).sum()), "worst_fold_diff": diff.min(),
            "half_width": (high - low) / 2, "in_sample": pooled,
            "fold_scores": [round(float(s), 4) for s in scores],
            "base_fold_scores": [round(float(s), 4) for s in base_scores]}


def main(argv: list[str]) -> pd.DataFrame:
    def option(name):
        if name not in argv:
            return []
        i = argv.index(name) + 1
        values = []
        while i < len(argv) and not argv[i].startswith("--"):
            values.append(argv[i])
            i += 1
        return values

    embedders, tuned_dirs = option("--embedders"), [Path(d) for d in option("--tuned")]
    out = Path((option("--out") or ["out/dense_cv"])[0])
    used = set(embedders) | {str(d) for d in tuned_dirs} | set(option("--out"))
    paths = [a for a in argv if not a.startswith("--") and a not in used]
    root = Path(paths[0]) if paths else shared_data_dir()
    global CACHE
    CACHE = out / "replays"
    traces = _traces(root)
    splits = {data: _split(trace, data) for data, trace in traces.items()}
    rows, fold_rows = [], []
    started = time.perf_counter()
    base = {data: _values(trace, BASE) for data, trace in traces.items()}

    def fixed(label, config, kind):
        for data, trace in traces.items():
            values = _values(trace, config)
            for m in SETUPS[data][0]:
                scores = np.array([values.loc[f, m].mean() for f in splits[data]])
                base_scores = np.array([base[data].loc[f, m].mean() for f in splits[data]])
                qids = [q for f in splits[data] for q in f]
                rows.append(_row(data, m, label, scores, base_scores,
                                 float(values.loc[qids, m].mean()), kind))
                fold_rows.extend({"data": data, "measure": m, "configuration": label,
                                  "fold": i, "score": s, "base_score": b}
                                 for i, (s, b) in enumerate(zip(scores, base_scores)))
            print(f"{label} on {data}: {time.perf_counter() - started:.0f} s", flush=True)

    for data, trace in traces.items():  # the base itself, for the table
        for m in SETUPS[data][0]:
            scores = np.array([base[data].loc[f, m].mean() for f in splits[data]])
            qids = [q for f in splits[data] for q in f]
            rows.append(_row(data, m, "DEFAULT (base)", scores, scores,
                             float(base[data].loc[qids, m].mean()), "fixed"))
    for name in embedders:
        label = f"dense recipe before, {name}"
        fixed(label, START.replace(dense=START.dense.__class__(
            **{**START.dense.to_dict(), "embedder": name})), "fixed")
    for folder in tuned_dirs:
        recipe = next(p for p in folder.glob("*.json"))
        data_of = json.loads(recipe.read_text())["provenance"]
        searched = next(d for d, t in traces.items()
                        if t.hash() == data_of["trace"]["hash"])
        folds = pd.read_csv(folder / "folds.csv")
        params = [c for c in folds.columns if c.startswith("param_")]
        trace = traces[searched]
        per_fold = []
        for i, test in enumerate(splits[searched]):
            row = folds.iloc[i]
            point = {c.removeprefix("param_"): _cast(row[c]) for c in params}
            config = apply_point(START, point)
            per_fold.append(_values(trace, config, test))
            print(f"{folder.name} fold {i}: {time.perf_counter() - started:.0f} s", flush=True)
        label = f"tuned on {searched} ({folder.name})"
        for m in SETUPS[searched][0]:
            scores = np.array([v[m].mean() for v in per_fold])
            if m == data_of["measure"]:
                assert np.allclose(scores, folds["score"].to_numpy()), (scores, folds["score"])
            base_scores = np.array([base[searched].loc[f, m].mean()
                                    for f in splits[searched]])
            rows.append(_row(searched, m, label, scores, base_scores, float("nan"), "cv"))
            fold_rows += [{"data": searched, "measure": m, "configuration": label, "fold": i,
                           "score": s, "base_score": b}
                          for i, (s, b) in enumerate(zip(scores, base_scores))]
        # the final choice on the other dataset (never searched there): held out as a whole
        final = load_recipe_file(recipe)
        for data, other in traces.items():
            if data == searched:
                continue
            values = _values(other, final)
            for m in SETUPS[data][0]:
                scores = np.array([values.loc[f, m].mean() for f in splits[data]])
                base_scores = np.array([base[data].loc[f, m].mean() for f in splits[data]])
                rows.append(_row(data, m, f"{searched}'s final choice ({folder.name})", scores,
                                 base_scores, float("nan"), "other data"))
                fold_rows += [{"data": data, "measure": m,
                               "configuration": f"{searched}'s final choice ({folder.name})",
                               "fold": i, "score": s, "base_score": b}
                              for i, (s, b) in enumerate(zip(scores, base_scores))]
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    table.to_csv(out / "dense_cv.csv", index=False)
    pd.DataFrame(fold_rows).to_csv(out / "dense_folds.csv", index=False)
    (out / "dense_cv.md").write_text(_markdown(table))
    print(_markdown(table))
    print(f"took {time.perf_counter() - started:.0f} s")
    return table


def _cast(value):
    """A folds.csv parameter cell back to its type (numbers were written as numbers)."""
    if isinstance(value, np.integer):
        return int(value)
    if isinstance(value, np.floating):
        return float(value)
    return value


def _markdown(table: pd.DataFrame) -> str:
    header = ("| data | measure | configuration | CV estimate [95 %] | Δ vs base [95 %] | "
              "folds +/− | worst fold Δ |")
    lines = [header, "|---|---|---|---|---|---:|---:|"]
    for r in table.itertuples():
        delta = "" if r.configuration == "DEFAULT (base)" else \
            f"{100 * r.diff_mean:+.1f} [{100 * r.diff_ci_low:+.1f}, {100 * r.diff_ci_high:+.1f}]"
        folds = "" if not delta else f"{r.folds_better}/{r.folds_worse}"
        worst = "" if not delta else f"{100 * r.worst_fold_diff:+.1f}"
        lines.append(f"| {r.data} | {r.measure} | {r.configuration} | {100 * r.cv_mean:.1f} "
                     f"[{100 * r.ci_low:.1f}, {100 * r.ci_high:.1f}] | {delta} | {folds} | "
                     f"{worst} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    main(sys.argv[1:])
