"""The dense recipe's learned ranker with and without the ranker-feature columns (``rf_*``:
links and dense similarity to the top hits, the spelling field's BM25, time-window membership,
speaker and entity overlap), by nested grouped CV (issue 17, dense targets).

    PYTHONPATH=. <venv with dense and learn>/bin/python benchmarks/ranker_features_cv.py
        {musique,locomo} [--rankers logistic lambdarank ...] [--out DIR]
        [--features {rf,hop,rf+hop}] [--only GROUP ...]

``--features hop`` (MuSiQue's second hop) records the ``rf_hop_*`` columns instead
(``second_hop_features=True``, configuration ``dense-hop``; groups ``title``, ``prf``,
``homonym``), ``rf+hop`` both; ``--only GROUP`` adds, on the new side, each ranker on the old
features plus that group alone, so the choice of group is made inside the folds too.

Replays the ``dense`` recipe (graph budgets off) **once** with ``ranker_features=True``
(cached as Parquet under ``<out>/replays``). The stage changes no score and no order, so the
same replay without its ``rf_*`` columns is exactly the ``dense`` replay: the candidates
with the old features read that copy (configuration ``dense``), those with the new ones the
full frame (configuration ``dense-rf``), on the same candidates and the same folds (seed 0,
grouped by question for MuSiQue, by conversation for LoCoMo).

Reports, all held out:

* ``old``: ``memlab.learn.nested_choose`` among ``dense`` alone and followed by each ranker
  on the old features (the procedure that shipped ``dense-conversational``, without its
  spelling grid);
* ``new``: the same candidates plus each ranker on the old and new features together; the
  choice between feature sets is made inside the folds like every other;
* the paired fold differences new - old of the nested estimates, and each candidate's plain
  (not nested) grouped-CV estimate with its paired difference to ``dense``;
* a group ablation (plain grouped CV of one ranker, ``--ablate``; ``--ablate-only`` skips the
  nested runs): each group of new features alone added to the old ones, and every group but
  it (the other ``rf_*`` columns set to 0, which no model can learn from), paired with the old
  features on the same folds.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np

from benchmarks.dense_ranker_cv import _cached_replay, _nobudget
from memlab.cli import _shared_trace
from memlab.harness.replay import ReplayResult
from memlab.learn.nested import Candidate, nested_choose, parse_ranker_spec
from memlab.surfacing.config import get_recipe
from memlab.surfacing.stages.ranker_features import (HOP_FEATURE_COLUMNS, HOP_GROUPS,
                                                     RANKER_FEATURE_COLUMNS)
from memlab.tuning.search import _t_interval

SETUPS = {"musique": ("R@5", ["MRR", "R@10"], "question", None),
          "locomo": ("R@10", ["MRR", "R@5"], "workspace", [1, 2, 3, 4])}
GROUPS = {"links": ("rf_links_top1", "rf_links_top3", "rf_links_top5", "rf_dense_top3"),
          "trigram": ("rf_trigram",),
          "window": ("rf_window", "rf_window_days"),
          "names": ("rf_speaker", "rf_entities")}
# --features: which recorded columns the "new" side adds (config name, options, columns)
FEATURE_SETS = {"rf": ("dense-rf", dict(ranker_features=True), RANKER_FEATURE_COLUMNS),
                "hop": ("dense-hop", dict(second_hop_features=True), HOP_FEATURE_COLUMNS),
                "rf+hop": ("dense-rf-hop", dict(ranker_features=True, second_hop_features=True),
                           RANKER_FEATURE_COLUMNS + HOP_FEATURE_COLUMNS)}


def _variant(live: ReplayResult, name: str, keep: tuple[str, ...] | None,
             columns: tuple[str, ...] = RANKER_FEATURE_COLUMNS) -> ReplayResult:
    """``live`` as configuration ``name``: without the ``columns`` (``keep`` None) or with
    those not in ``keep`` set to 0."""
    cands = live.candidates
    if keep is None:
        cands = cands.drop(columns=[c for c in columns if c in cands])
    else:
        cands = cands.copy()
        for c in columns:
            if c not in keep:
                cands[c] = 0.0
    manifest = json.loads(json.dumps(live.manifest, default=str))
    manifest["config"] = {**manifest.get("config", {}), "name": name}
    return dataclasses.replace(live, candidates=cands, manifest=manifest)


def _paired(a: np.ndarray, b: np.ndarray) -> str:
    d = np.asarray(a) - np.asarray(b)
    lo, hi = _t_interval(d)
    return (f"{100 * d.mean():+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}] "
            f"({int((d > 0).sum())}/{int((d < 0).sum())})")


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", choices=sorted(SETUPS))
    ap.add_argument("--rankers", nargs="+", default=["logistic", "logistic:C=0.1",
                                                      "lambdarank"])
    ap.add_argument("--ablate", default=None, help="a ranker spec for the group ablation")
    ap.add_argument("--ablate-only", action="store_true", help="skip the two nested runs")
    ap.add_argument("--out", default="out/ranker_features")
    ap.add_argument("--only", nargs="+", default=[], metavar="GROUP",
                    help="also, on the new side, each ranker on the old features plus this "
                         "group of new ones alone (the others set to 0), chosen in the folds")
    ap.add_argument("--features", choices=sorted(FEATURE_SETS), default="rf",
                    help="the new side: the rf_* columns (default), the second-hop rf_hop_* "
                         "ones (MuSiQue), or both")
    args = ap.parse_args(argv)
    measure, also, group_by, categories = SETUPS[args.data]
    measures = [measure, *also]
    out = Path(args.out)
    (out / "replays").mkdir(parents=True, exist_ok=True)
    trace = _shared_trace(f"shared:{args.data}")
    dense = _nobudget(get_recipe("dense"))
    wall = time.time()
    new_name, options, new_columns = FEATURE_SETS[args.features]
    everything = RANKER_FEATURE_COLUMNS + HOP_FEATURE_COLUMNS
    recorded = dense.replace(name=new_name, **options)
    full = _cached_replay(trace, recorded, measures, out / "replays")
    replays = {"dense": _variant(full, "dense", None, everything), new_name: full}
    configs = {"dense": dense, new_name: recorded}
    rankers = [(s, *parse_ranker_spec(s)) for s in args.rankers]
    old = [Candidate("dense", configs["dense"])] + [
        Candidate(f"dense+{s}", configs["dense"], k, p) for s, k, p in rankers]
    new = old + [Candidate(f"{new_name}+{s}", configs[new_name], k, p) for s, k, p in rankers]
    all_groups = {**(GROUPS if "rf_links_top3" in new_columns else {}),
                  **(HOP_GROUPS if "rf_hop_title_top1" in new_columns else {})}
    for group in args.only:
        if group not in all_groups:
            ap.error(f"--only {group!r}: groups of --features {args.features} are "
                     f"{sorted(all_groups)}")
        name = f"{new_name}-only-{group}"
        replays[name] = _variant(full, name, all_groups[group], new_columns)
        configs[name] = recorded.replace(name=name)
        new += [Candidate(f"{name}+{s}", configs[name], k, p) for s, k, p in rankers]
    common = dict(measures=measures, folds=5, group_by=group_by, seed=0, k=20,
                  categories=categories, measure_on="retrieved")
    results = {}
    for tag, cands in () if args.ablate_only else (("old", old), ("new", new)):
        started = time.process_time()
        res = nested_choose(trace, cands, replays={k: v for k, v in replays.items()
                                                   if any(c.config.name == k for c in cands)},
                            **common)
        results[tag] = res
        print(f"\n== nested ({tag} features), {len(cands)} candidates, "
              f"{time.process_time() - started:.0f} s CPU; folds chose "
              f"{res.folds['chosen'].tolist()}")
        print(res.table[["measure", "cv_mean", "ci_low", "ci_high", "base_cv_mean", "diff_mean",
                         "diff_ci_low", "diff_ci_high", "in_sample"]].to_string(
            index=False, float_format=lambda v: f"{v:.4f}"))
        res.table.to_csv(out / f"nested-{args.data}-{tag}.csv", index=False)
        res.folds.to_csv(out / f"folds-{args.data}-{tag}.csv", index=False)
        res.candidates.to_csv(out / f"candidates-{args.data}-{tag}.csv", index=False)
    for m in measures if results else ():
        if m == measures[0]:
            print("\n== nested new - old, paired over the five outer folds [95 % t] "
                  "(folds +/-):")
        a = results["new"].folds[m].to_numpy()
        b = results["old"].folds[m].to_numpy()
        lo, hi = _t_interval(a)
        print(f"  {m}: new {100 * a.mean():.1f} [{100 * lo:.1f}, {100 * hi:.1f}], old "
              f"{100 * b.mean():.1f}; new - old {_paired(a, b)}")
    if results:
        print("\n== each candidate's plain grouped CV (not nested) and new - old features, "
              "same ranker, paired:")
    for s, _, _ in rankers if results else ():
        cand = results["new"].candidates
        for m in measures:
            a = cand[(cand["candidate"] == f"{new_name}+{s}") & (cand["measure"] == m)].iloc[0]
            b = cand[(cand["candidate"] == f"dense+{s}") & (cand["measure"] == m)].iloc[0]
            lo, hi = _t_interval(np.asarray(a["fold_scores"]))
            print(f"  {s} {m}: rf {100 * a['cv_mean']:.1f} [{100 * lo:.1f}, {100 * hi:.1f}] "
                  f"vs old {100 * b['cv_mean']:.1f}: {_paired(a['fold_scores'], b['fold_scores'])}")
    if args.ablate:
        kind, params = parse_ranker_spec(args.ablate)
        variants = {"dense": replays["dense"], new_name: full}
        cands = [Candidate(f"dense+{args.ablate}", configs["dense"], kind, params),
                 Candidate(f"{new_name}+{args.ablate}", configs[new_name], kind, params)]
        groups = {**(GROUPS if "rf_links_top3" in new_columns else {}),
                  **(HOP_GROUPS if "rf_hop_title_top1" in new_columns else {})}
        for group, cols in groups.items():  # the group alone, and every group but it
            others = tuple(c for g, cc in groups.items() if g != group for c in cc)
            for name, keep in ((f"{new_name}-only-{group}", cols),
                               (f"{new_name}-without-{group}", others)):
                variants[name] = _variant(full, name, keep, new_columns)
                cands.append(Candidate(f"{name}+{args.ablate}", configs[new_name].replace(
                    name=name), kind, params))
        res = nested_choose(trace, cands, replays=variants, **common)
        c = res.candidates
        print(f"\n== group ablation ({args.ablate}; plain grouped CV, paired with the old "
              f"features):")
        for label in [x.label for x in cands[1:]]:
            cells = []
            for m in measures:
                a = c[(c["candidate"] == label) & (c["measure"] == m)].iloc[0]
                b = c[(c["candidate"] == cands[0].label) & (c["measure"] == m)].iloc[0]
                cells.append(f"{m} {100 * a['cv_mean']:.1f} "
                             f"{_paired(a['fold_scores'], b['fold_scores'])}")
            print(f"  {label}: " + "; ".join(cells))
        c.to_csv(out / f"ablation-{args.data}.csv", index=False)
    print(f"\nwall {time.time() - wall:.0f} s")


if __name__ == "__main__":
    main()
