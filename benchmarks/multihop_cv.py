"""Issue 17 item 3, multi-hop: each change alone and together, by grouped 5-fold CV.

    PYTHONPATH=. .venv/bin/python benchmarks/multihop_cv.py [../shared/datasets] [--out DIR]
        [--dense] [--from-csv]

The changes (each a configuration option, off in ``DEFAULT``):

* **year keeps the graph**: ``temporal:windowed`` runs ``temporal_multi_hop`` (the window's
  items join and are boosted inside the multi-hop pipeline) instead of ``temporal``;
* **title homonym precision**: ``title_homonym_support`` n in {1, 2, 3};
* **graph bridges**: ``graph_bridge_boost`` in {0.1, 0.25, 0.5} x (``graph_bridge_hits``,
  ``graph_bridge_links``) in {(3, 2), (5, 2), (1, 1)} x ``graph_link_types`` in {the
  spreading's types, title mentions only};
* **graph guard**: ``graph_guard_k`` in {3, 5, 10} x the same two link types;
* **graph re-ranker**: bridges (boost {0.1, 0.25}, 3 hits, 2 links) and guard ({3, 5})
  together, x the two link types;
* **all together**: in each fold, every option with the parameters it chose on that fold's
  training questions.

Every grid point is replayed once on MuSiQue's 100 questions (k = 20), giving per-question
values. For each held-out fold (5 folds grouped by question, seed 0: the folds of
``memlab tune`` and ``cv_fixed``), an option's parameters are the grid point with the best
R@5 on the *other* four folds (ties: the first in grid order); the CV estimate is the mean of
the held-out fold scores, with a 95 % t-interval over folds, and the paired difference with
``DEFAULT`` on the same folds has its own t-interval. The in-sample row (parameters chosen on
all 100 questions and scored on them) is printed apart and labelled so. LoCoMo (categories
1-4, folds = its five conversations) is then replayed with the parameters chosen on all of
MuSiQue (a fixed configuration, never tuned on LoCoMo: its fold means are held-out numbers)
to check that it is not hurt. Graph-stage budgets are off so that runs reproduce.

Writes ``cv.csv`` and ``cv.md`` (every measure, and the parameters each fold chose),
``summary.md`` (the README's table) and ``grid.csv`` (every grid point's in-sample means) into
``--out`` (default ``out/multihop_cv``); ``--from-csv`` prints the tables of a finished run.
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
from memlab.surfacing.config import DEFAULT, SurfacingConfig
from memlab.tuning.search import BOUNDS, _groups, _question_frame, _t_interval, grouped_folds

SEED, FOLDS, K = 0, 5, 20
BASE = DEFAULT.replace(ppr=dataclasses.replace(DEFAULT.ppr, budget_ms=None),
                       spreading=dataclasses.replace(DEFAULT.spreading, budget_ms=None))
_TEMPORAL_GRAPH = tuple((s, "temporal_multi_hop" if s == "temporal:windowed" else impl)
                        for s, impl in DEFAULT.strategies)

MENTIONS = ("MENTIONS", "MENTIONED_IN")  # the title-mention links (HippoRAG-format loaders)
OPTIONS: dict[str, list[dict]] = {
    "year keeps the graph": [{"strategies": _TEMPORAL_GRAPH}],
    "title homonym precision": [{"title_homonym_support": n} for n in (1, 2, 3)],
    "graph bridges": [{"graph_bridge_boost": b, "graph_bridge_hits": h, "graph_bridge_links": n,
                       "graph_link_types": t}
                      for t in (None, MENTIONS) for b in (0.1, 0.25, 0.5)
                      for h, n in ((3, 2), (5, 2), (1, 1))],
    "graph guard": [{"graph_guard_k": g, "graph_link_types": t}
                    for t in (None, MENTIONS) for g in (3, 5, 10)],
    "graph re-ranker (bridges + guard)": [
        {"graph_bridge_boost": b, "graph_guard_k": g, "graph_link_types": t}
        for t in (None, MENTIONS) for b in (0.1, 0.25) for g in (3, 5)],
}
MEASURES = {"MuSiQue 100": ["R@5", "R@10", "MRR"], "LoCoMo cat. 1-4": ["R@10", "MRR"]}
SELECT = "R@5"  # what an option's parameters are chosen by, inside the folds (MuSiQue)


def label(changes: dict) -> str:
    """A short, stable name for a grid point."""
    if not changes:
        return "DEFAULT"
    parts = []
    for key, value in changes.items():
        if key == "strategies":
            parts.append("temporal:windowed=temporal_multi_hop")
        elif key == "graph_link_types":
            parts.append("links=" + ("spreading's" if value is None else "mentions"))
        else:
            parts.append(f"{key}={value}")
    return ", ".join(parts)


class Values:
    """Per-question values of each configuration on one trace, replayed once and cached."""

    def __init__(self, trace, measures: list[str], base_config: SurfacingConfig) -> None:
        self.trace, self.measures, self.base = trace, measures, base_config
        self.cache: dict[str, pd.DataFrame] = {}
        self.seconds = 0.0

    def of(self, changes: dict) -> pd.DataFrame:
        """qid x measure values (in [0, 1]) of BASE with ``changes``."""
        key = label(changes)
        if key not in self.cache:
            started = time.perf_counter()
            config = self.base.replace(name=key[:60] or "default", **changes)
            result = replay(self.trace, config, k=K, measures=self.measures, seed=SEED,
                            record_candidates=False, progress=False)
            self.cache[key] = result.metrics.pivot_table(index="qid", columns="measure",
                                                         values="value")
            self.seconds += time.perf_counter() - started
        return self.cache[key]


def folds_of(trace, group_by: str, categories=None) -> list[list[str]]:
    questions = _question_frame(trace, None if categories is None else set(categories))
    return grouped_folds(_groups(questions, group_by), FOLDS, SEED)


def choose(values: Values, grid: list[dict], qids: list[str]) -> dict:
    """The grid point with the best mean ``SELECT`` on ``qids`` (first on ties)."""
    means = [values.of(g)[SELECT].reindex(qids).mean() for g in grid]
    return grid[int(np.argmax(means))]


def merged(choices: list[dict]) -> dict:
    out: dict = {}
    for c in choices:
        out.update(c)
    return out


def summary(data: str, measure: str, what: str, fold_scores, base_scores, n: int,
            kind: str, chosen: str = "") -> dict:
    fold_scores, base_scores = np.asarray(fold_scores), np.asarray(base_scores)
    low, high = _t_interval(fold_scores, bounds=BOUNDS)
    row = {"data": data, "measure": measure, "configuration": what, "kind": kind,
           "cv_mean": 100 * fold_scores.mean(), "ci_low": 100 * low, "ci_high": 100 * high,
           "questions": n, "chosen": chosen}
    if what != "DEFAULT":
        diff = fold_scores - base_scores
        dlow, dhigh = _t_interval(diff)
        row.update(delta=100 * diff.mean(), delta_low=100 * dlow, delta_high=100 * dhigh,
                   folds_better=int((diff > 1e-12).sum()), folds_worse=int((diff < -1e-12).sum()))
    return row


def musique_cv(values: Values, folds: list[list[str]]) -> tuple[list[dict], dict]:
    rows, final = [], {}
    every = [q for f in folds for q in f]
    base = values.of({})
    base_scores = {m: [base[m].reindex(f).mean() for f in folds] for m in values.measures}
    for m in values.measures:
        rows.append(summary("MuSiQue 100", m, "DEFAULT", base_scores[m], base_scores[m],
                            len(every), "CV"))
    per_fold_choice: dict[str, list[dict]] = {}
    for name, grid in OPTIONS.items():
        picks = []
        for i, held in enumerate(folds):
            train = [q for j, f in enumerate(folds) if j != i for q in f]
            picks.append(choose(values, grid, train))
        per_fold_choice[name] = picks
        final[name] = choose(values, grid, every)
        chosen = "; ".join(label(p) for p in picks)
        for m in values.measures:
            scores = [values.of(p)[m].reindex(f).mean() for p, f in zip(picks, folds)]
            rows.append(summary("MuSiQue 100", m, name, scores, base_scores[m], len(every),
                                "CV", chosen))
            inside = values.of(final[name])[m].reindex(every).mean()
            rows.append({"data": "MuSiQue 100", "measure": m, "configuration": name,
                         "kind": "in-sample", "cv_mean": 100 * inside, "questions": len(every),
                         "chosen": label(final[name])})
    # all together: each option's own in-fold choice, combined (the re-ranker row is the
    # bridges and guard rows' union, so it is left out of the combination)
    parts = ["year keeps the graph", "title homonym precision", "graph bridges", "graph guard"]
    picks = [merged([per_fold_choice[p][i] for p in parts]) for i in range(len(folds))]
    final["all together"] = merged([final[p] for p in parts])
    for m in values.measures:
        scores = [values.of(p)[m].reindex(f).mean() for p, f in zip(picks, folds)]
        rows.append(summary("MuSiQue 100", m, "all together", scores, base_scores[m],
                            len(every), "CV", "; ".join(label(p) for p in picks)))
        inside = values.of(final["all together"])[m].reindex(every).mean()
        rows.append({"data": "MuSiQue 100", "measure": m, "configuration": "all together",
                     "kind": "in-sample", "cv_mean": 100 * inside, "questions": len(every),
                     "chosen": label(final["all together"])})
    return rows, final


def locomo_check(values: Values, folds: list[list[str]], final: dict) -> list[dict]:
    rows = []
    base = values.of({})
    n = sum(len(f) for f in folds)
    base_scores = {m: [base[m].reindex(f).mean() for f in folds] for m in values.measures}
    for m in values.measures:
        rows.append(summary("LoCoMo cat. 1-4", m, "DEFAULT", base_scores[m], base_scores[m], n,
                            "CV"))
    for name, changes in final.items():
        for m in values.measures:
            scores = [values.of(changes)[m].reindex(f).mean() for f in folds]
            rows.append(summary("LoCoMo cat. 1-4", m, name, scores, base_scores[m], n,
                                "fixed (MuSiQue's choice)", label(changes)))
    return rows


def to_markdown(table: pd.DataFrame) -> str:
    lines = ["| data | measure | change | estimate | 95 % interval (folds) | "
             "Δ vs DEFAULT, same folds [95 %] | folds better/worse | parameters |",
             "|---|---|---|---:|---|---|---|---|"]
    for r in table.to_dict(orient="records"):
        what = r["configuration"] + (" (**in-sample**)" if r["kind"] == "in-sample" else "")
        ci = "" if pd.isna(r.get("ci_low")) else f"{r['ci_low']:.1f}–{r['ci_high']:.1f}"
        delta = "" if pd.isna(r.get("delta")) else \
            f"{r['delta']:+.1f} [{r['delta_low']:+.1f}, {r['delta_high']:+.1f}]"
        better = "" if pd.isna(r.get("folds_better")) else \
            f"{int(r['folds_better'])}/{int(r['folds_worse'])}"
        lines.append(f"| {r['data']} | {r['measure']} | {what} | {r['cv_mean']:.1f} | {ci} | "
                     f"{delta} | {better} | {r.get('chosen') or ''} |")
    return "\n".join(lines) + "\n"


def summary_markdown(table: pd.DataFrame) -> str:
    """One row per change: MuSiQue R@5 (CV, Δ, folds, in-sample) and LoCoMo's Δ (the README's
    ablation table)."""
    def pick(data, measure, what, kind="CV"):
        hit = table[(table["data"] == data) & (table["measure"] == measure)
                    & (table["configuration"] == what) & (table["kind"] != "in-sample")]
        inside = table[(table["data"] == data) & (table["measure"] == measure)
                       & (table["configuration"] == what) & (table["kind"] == "in-sample")]
        return (hit.iloc[0].to_dict() if len(hit) else None,
                inside.iloc[0].to_dict() if len(inside) else None)

    def delta(r):
        return "" if r is None or pd.isna(r.get("delta")) else \
            f"{r['delta']:+.1f} [{r['delta_low']:+.1f}, {r['delta_high']:+.1f}]"

    lines = ["| change | MuSiQue R@5, CV [95 %] | Δ vs DEFAULT [95 %] | folds +/− | "
             "in-sample R@5 | MuSiQue MRR Δ | LoCoMo R@10 Δ | LoCoMo MRR Δ |",
             "|---|---|---|---|---:|---|---|---|"]
    for what in ["DEFAULT", *OPTIONS, "all together"]:
        r5, inside = pick("MuSiQue 100", "R@5", what)
        mrr, _ = pick("MuSiQue 100", "MRR", what)
        l10, _ = pick("LoCoMo cat. 1-4", "R@10", what)
        lmrr, _ = pick("LoCoMo cat. 1-4", "MRR", what)
        folds = "" if what == "DEFAULT" else \
            f"{int(r5['folds_better'])}/{int(r5['folds_worse'])}"
        lines.append(f"| {what} | {r5['cv_mean']:.1f} [{r5['ci_low']:.1f}, {r5['ci_high']:.1f}] "
                     f"| {delta(r5)} | {folds} | "
                     f"{'' if inside is None else format(inside['cv_mean'], '.1f')} | "
                     f"{delta(mrr)} | {delta(l10)} | {delta(lmrr)} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str]) -> pd.DataFrame:
    out = Path(argv[argv.index("--out") + 1]) if "--out" in argv else Path("out/multihop_cv")
    skip = {argv[i + 1] for i, a in enumerate(argv) if a == "--out"}
    paths = [a for a in argv if not a.startswith("--") and a not in skip]
    if "--from-csv" in argv:  # the tables again from a finished run's cv.csv, no replay
        table = pd.read_csv(out / "cv.csv")
        print(to_markdown(table))
        print(summary_markdown(table))
        return table
    root = Path(paths[0]) if paths else shared_data_dir()
    base = BASE
    if "--dense" in argv:
        from memlab.signals.dense import DenseConfig
        base = BASE.replace(dense=DenseConfig())
    started = time.perf_counter()
    musique = load_hipporag(root / "hipporag" / "musique_train.json",
                            root / "hipporag" / "musique_train_corpus.json")
    mv = Values(musique, MEASURES["MuSiQue 100"], base)
    rows, final = musique_cv(mv, folds_of(musique, "question"))
    locomo = load_locomo(root / "locomo" / "locomo_dev.json")
    lv = Values(locomo, MEASURES["LoCoMo cat. 1-4"], base)
    rows += locomo_check(lv, folds_of(locomo, "workspace", [1, 2, 3, 4]), final)
    table = pd.DataFrame(rows)
    out.mkdir(parents=True, exist_ok=True)
    grid = pd.DataFrame([{"data": name, "configuration": key, **(100 * v.mean()).round(2)}
                         for name, values in (("MuSiQue 100", mv), ("LoCoMo (all)", lv))
                         for key, v in values.cache.items()])
    grid.to_csv(out / "grid.csv", index=False)  # every grid point's in-sample means
    table.to_csv(out / "cv.csv", index=False)
    text = to_markdown(table)
    (out / "cv.md").write_text(text)
    short = summary_markdown(table)
    (out / "summary.md").write_text(short)
    print(text)
    print(short)
    print(f"{len(mv.cache)} MuSiQue and {len(lv.cache)} LoCoMo configurations replayed; "
          f"{time.perf_counter() - started:.0f} s", file=sys.stderr)
    return table


if __name__ == "__main__":
    main(sys.argv[1:])
