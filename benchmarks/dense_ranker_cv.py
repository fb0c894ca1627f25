"""The dense recipe with a learned ranker, by nested grouped CV, and the candidate pool's
oracle bound (issue 17, dense targets).

    PYTHONPATH=. <venv with dense and learn>/bin/python benchmarks/dense_ranker_cv.py
        {musique,locomo} [--embedders minilm-onnx-int8 minilm-openvino]
        [--rankers logistic lambdarank ...] [--grid FIELD=V1,V2 ...] [--out DIR]

Replays the dense recipe (graph budgets off, so that load does not change the candidates)
once per configuration with candidates recorded, caching each replay as Parquet under
``<out>/replays`` (keyed by the configuration and the trace hash), then:

* the **pool oracle**: per question, the share of its gold that is among the recorded
  candidates at all (the best any re-ranking of this pool can reach at k = 100), and the
  share among the top 20 by BM25 alone / by dense alone, pooled and per fold;
* ``memlab.learn.nested_choose`` over the candidates (each configuration alone and followed
  by each ranker), with the folds of ``memlab tune`` (seed 0, grouped by question for
  MuSiQue, by conversation for LoCoMo); the same procedure as ``memlab tune --rankers``,
  without rewriting replays per run. Prints the nested estimate, the fold choices and every
  candidate's own (not nested) grouped-CV estimate.

``DEFAULT`` (``benchmarks/recipes/default-nobudget.json``) is replayed and included as a
candidate too, so the nested choice may fall back to it and its fold scores pair with the
dense candidates' on the same folds.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import time
from pathlib import Path

import numpy as np
import pandas as pd

from memlab.cli import _grid, _shared_trace
from memlab.harness.replay import ReplayResult, replay
from memlab.learn.nested import Candidate, grid_configs, nested_choose, parse_ranker_spec
from memlab.surfacing.config import get_recipe, load_recipe_file
from memlab.tuning.search import _groups, _question_frame, _t_interval, grouped_folds

HERE = Path(__file__).resolve().parent
SETUPS = {"musique": ("R@5", ["R@10", "MRR"], "question", None),
          "locomo": ("R@10", ["MRR", "R@5"], "workspace", [1, 2, 3, 4])}


def _nobudget(config):
    return config.replace(**{stage: dataclasses.replace(getattr(config, stage), budget_ms=None)
                             for stage in ("ppr", "spreading")
                             if getattr(config, stage) is not None})


def _cached_replay(trace, config, measures, folder: Path) -> ReplayResult:
    key = hashlib.sha256(json.dumps([trace.hash(), config.to_dict(), measures], sort_keys=True,
                                    default=str).encode()).hexdigest()[:16]
    path = folder / f"{config.name}-{key}"
    if (path / "manifest.json").is_file():
        return ReplayResult.load(path)
    started = time.process_time()
    live = replay(trace, config, mode="router", k=20, measures=measures, seed=0,
                  measure_on="retrieved", record_candidates=True)
    print(f"  replayed {config.name}: {time.process_time() - started:.0f} s CPU", flush=True)
    live.save(path)
    return live


def oracle(live: ReplayResult, qids) -> pd.DataFrame:
    """Per question: the share of gold weight among all candidates, and in the top 20 by
    BM25 and by dense alone."""
    cands = live.candidates[live.candidates["qid"].isin(set(qids))]
    dec = live.decisions.set_index("qid")
    rows = []
    for qid, g in cands.groupby("qid", sort=True):
        gold = dec.at[qid, "gold"]
        gold = dict(gold) if isinstance(gold, dict) else {g: 1.0 for g in (gold or [])}
        total = float(sum(gold.values()))
        if total <= 0:
            continue
        weight = g["item_id"].map(lambda i: float(gold.get(i, 0.0))).to_numpy()
        row = {"qid": qid, "pool": weight.sum() / total, "pool_size": len(g)}
        for signal in ("bm25", "dense"):
            if signal in g and g[signal].notna().any():  # no dense column without dense
                top = np.argsort(-np.nan_to_num(g[signal].to_numpy(dtype=float)),
                                 kind="stable")[:20]
                row[f"{signal}_top20"] = weight[top].sum() / total
        rows.append(row)
    return pd.DataFrame(rows)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("data", choices=sorted(SETUPS))
    ap.add_argument("--embedders", nargs="+", default=["minilm-onnx-int8"])
    ap.add_argument("--rankers", nargs="+", default=["logistic", "lambdarank"])
    ap.add_argument("--grid", nargs="+", default=None)
    ap.add_argument("--no-default", action="store_true", help="leave DEFAULT out of the "
                    "candidates (it is still replayed for the pairing)")
    ap.add_argument("--out", default="out/dense_ranker")
    args = ap.parse_args(argv)
    measure, also, group_by, categories = SETUPS[args.data]
    measures = [measure, *also]
    out = Path(args.out)
    (out / "replays").mkdir(parents=True, exist_ok=True)
    trace = _shared_trace(f"shared:{args.data}")
    default = load_recipe_file(HERE / "recipes" / "default-nobudget.json").replace(
        name="default")
    dense = _nobudget(get_recipe("dense"))
    grid = _grid(args.grid) if args.grid else {}
    grid["dense.embedder"] = args.embedders
    configs = [c.replace(name="dense-" + "-".join(f"{k}={v}" for k, v in p.items())
                         .replace("dense.embedder=", "").replace(".", ""))
               for p, c in grid_configs(dense, grid)]
    replays = {c.name: _cached_replay(trace, c, measures, out / "replays")
               for c in [default, *configs]}
    questions = _question_frame(trace, None if categories is None else set(categories))
    split = grouped_folds(_groups(questions, group_by), 5, 0)
    # the pool oracle, per configuration
    print(f"pool oracle ({args.data}, {len(questions)} questions; mean over questions, and the "
          f"t-interval of fold means):")
    for name, live in replays.items():
        o = oracle(live, questions["qid"])
        folds = [o[o["qid"].isin(set(f))] for f in split]
        cells = []
        for col in ("pool", "bm25_top20", "dense_top20"):
            if col in o:
                lo, hi = _t_interval([f[col].mean() for f in folds])
                cells.append(f"{col} {o[col].mean():.3f} [{lo:.3f}, {hi:.3f}]")
        print(f"  {name}: {'; '.join(cells)}; pool size {o['pool_size'].mean():.0f}")
        o.to_csv(out / f"oracle-{args.data}-{name}.csv", index=False)
    rankers = [("none", None, {})] + [(s, *parse_ranker_spec(s)) for s in args.rankers]
    cands = [] if args.no_default else [Candidate("default", default, None, {})]
    for c in configs:
        cands += [Candidate(c.name if k is None else f"{c.name}+{s}", c, k, p)
                  for s, k, p in rankers]
    # the base of the pairing is the first candidate: DEFAULT (or the first dense config)
    started = time.process_time()
    res = nested_choose(trace, cands, measures=measures, folds=5, group_by=group_by, seed=0,
                        k=20, categories=categories, measure_on="retrieved", replays=replays)
    print(f"nested choice among {len(cands)} candidates on {measure} "
          f"({time.process_time() - started:.0f} s CPU), base {cands[0].label!r}:")
    print(res.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(res.folds.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print("each candidate's own grouped-CV estimate (not nested):")
    print(res.candidates.drop(columns=["fold_scores"]).to_string(
        index=False, float_format=lambda v: f"{v:.4f}"))
    tag = f"{args.data}-{'-'.join(args.embedders)}-{'-'.join(args.rankers)}".replace(":", "_")
    res.table.to_csv(out / f"nested-{tag}.csv", index=False)
    res.folds.to_csv(out / f"folds-{tag}.csv", index=False)
    res.candidates.to_csv(out / f"candidates-{tag}.csv", index=False)


if __name__ == "__main__":
    main()
