"""Which MuSiQue questions move between fp32 and int8 MiniLM, and by how much (issue 19, round 7).

    PYTHONPATH=. <dense venv>/bin/python benchmarks/int8_diagnose.py [../shared/datasets]
        [--embedders minilm-onnx minilm-onnx-int8 ...] [--out out/int8_diagnose]

Replays MuSiQue (100 questions, k = 20) under the dense recipe as ``memlab eval --dense`` runs
it but with the graph stages' wall-clock budgets off (``benchmarks/recipes/dense-start.json``:
hybrid 0.5, sentence 0.3, max-scaled convex fusion; the same weights as ``dense.json``), once
per embedder, recording every candidate. The first embedder is the reference. For every
question whose R@5 or R@10 differs from the reference's it prints the gold items' ranks and
composite scores under both, and the margin that decided the move: the score gap between the
gold item and the item it swapped places with across the cut-off (rank 5 or 10), under the
reference and under the other embedder. It also reports, over all 100 questions, the change
in the dense similarity (the ``dense`` signal) of every gold item, to tell a systematic loss
(gold items' cosines fall) from near-ties flipped by noise.

Writes ``questions.csv`` (qid, embedder, R@5, R@10, MRR) and ``moves.md`` into ``--out``.
This reads the evaluation data: it diagnoses, it chooses nothing.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd

from memlab.datasets import shared_data_dir
from memlab.datasets.loaders import load_hipporag
from memlab.harness.replay import replay
from memlab.surfacing.config import load_recipe_file

HERE = Path(__file__).resolve().parent
START = load_recipe_file(HERE / "recipes" / "dense-start.json")
K = 20


def _option(argv, name, default):
    if name not in argv:
        return default
    i, values = argv.index(name) + 1, []
    while i < len(argv) and not argv[i].startswith("--"):
        values.append(argv[i])
        i += 1
    return values


def run(trace, embedder: str):
    config = START.replace(dense=START.dense.__class__(
        **{**START.dense.to_dict(), "embedder": embedder}))
    result = replay(trace, config, k=K, measures=["R@5", "R@10", "MRR"], seed=0,
                    record_candidates=True, progress=False)
    values = result.metrics.pivot(index="qid", columns="measure", values="value")
    return values, result.candidates


def _ranked(cands: pd.DataFrame, qid) -> pd.DataFrame:
    """The retrieved ranking of one question (surfaced candidates in rank order)."""
    c = cands[(cands["qid"] == qid) & cands["surfaced"]].sort_values("rank")
    return c.reset_index(drop=True)


def main(argv: list[str]) -> None:
    embedders = _option(argv, "--embedders", ["minilm-onnx", "minilm-onnx-int8"])
    out = Path(_option(argv, "--out", ["out/int8_diagnose"])[0])
    used = set(embedders) | {str(out)}
    paths = [a for a in argv if not a.startswith("--") and a not in used]
    root = Path(paths[0]) if paths else shared_data_dir()
    trace = load_hipporag(root / "hipporag" / "musique_train.json",
                          root / "hipporag" / "musique_train_corpus.json")
    runs = {}
    out.mkdir(parents=True, exist_ok=True)
    for name in embedders:
        saved = out / f"candidates-{name}.pkl"
        if saved.is_file():  # a re-run re-analyses without replaying
            runs[name] = pd.read_pickle(saved)
        else:
            runs[name] = run(trace, name)
            pd.to_pickle(runs[name], saved)
        v = runs[name][0].mean() * 100
        print(f"{name}: R@5 {v['R@5']:.2f}  R@10 {v['R@10']:.2f}  MRR {v['MRR']:.2f}", flush=True)
    pd.concat([v.assign(embedder=n) for n, (v, _) in runs.items()]).to_csv(out / "questions.csv")
    ref_name = embedders[0]
    ref_values, ref_cands = runs[ref_name]
    lines = []
    for name in embedders[1:]:
        values, cands = runs[name]
        lines.append(f"## {name} against {ref_name}\n")
        for m in ("R@5", "R@10", "MRR"):
            d = (values[m] - ref_values[m]).dropna()
            lines.append(f"- {m}: mean {100 * d.mean():+.2f} points; questions up "
                         f"{int((d > 1e-9).sum())}, down {int((d < -1e-9).sum())}; "
                         f"sum of ups {100 * d[d > 0].sum() / len(d):+.2f}, downs "
                         f"{100 * d[d < 0].sum() / len(d):+.2f}")
        # the gold items' dense similarity, all questions: systematic or noise?
        gold_ref = ref_cands[ref_cands["gold"] > 0].set_index(["qid", "item_id"])
        gold_new = cands[cands["gold"] > 0].set_index(["qid", "item_id"])
        both = gold_ref.join(gold_new, lsuffix="_ref", rsuffix="_new", how="inner")
        for col in ("dense", "score"):
            if f"{col}_ref" in both:
                d = both[f"{col}_new"] - both[f"{col}_ref"]
                lines.append(f"- gold items' `{col}` (n={len(d)}): mean change {d.mean():+.5f}, "
                             f"median {d.median():+.5f}, |change| p95 {d.abs().quantile(.95):.5f}")
        allj = ref_cands.set_index(["qid", "item_id"]).join(
            cands.set_index(["qid", "item_id"]), lsuffix="_ref", rsuffix="_new", how="inner")
        if "dense_ref" in allj:
            d = (allj["dense_new"] - allj["dense_ref"]).dropna()
            lines.append(f"- every candidate's `dense` (n={len(d)}): mean change {d.mean():+.5f},"
                         f" |change| median {d.abs().median():.5f}, p95 "
                         f"{d.abs().quantile(.95):.5f}, max {d.abs().max():.5f}")
        lines.append("")
        moved = sorted(set(values.index[(values["R@5"] - ref_values["R@5"]).abs() > 1e-9]) |
                       set(values.index[(values["R@10"] - ref_values["R@10"]).abs() > 1e-9]))
        for qid in moved:
            a, b = _ranked(ref_cands, qid), _ranked(cands, qid)
            lines.append(f"### {qid}: R@5 {ref_values.loc[qid, 'R@5']:.3f} -> "
                         f"{values.loc[qid, 'R@5']:.3f}, R@10 {ref_values.loc[qid, 'R@10']:.3f} "
                         f"-> {values.loc[qid, 'R@10']:.3f}")
            for cut in (5, 10):
                if abs(values.loc[qid, f"R@{cut}"] - ref_values.loc[qid, f"R@{cut}"]) < 1e-9:
                    continue
                ina = set(a["item_id"][:cut]) & set(a.loc[a["gold"] > 0, "item_id"])
                inb = set(b["item_id"][:cut]) & set(b.loc[b["gold"] > 0, "item_id"])
                for item in sorted(ina ^ inb):
                    ra = a.index[a["item_id"] == item]
                    rb = b.index[b["item_id"] == item]
                    ra = int(ra[0]) + 1 if len(ra) else None
                    rb = int(rb[0]) + 1 if len(rb) else None
                    sa = a.loc[ra - 1, "score"] if ra else float("nan")
                    sb = b.loc[rb - 1, "score"] if rb else float("nan")
                    # the score at the cut-off's edge: the last item in, the first one out
                    edge_a = (a.loc[cut - 1, "score"], a.loc[cut, "score"]) if len(a) > cut else None
                    edge_b = (b.loc[cut - 1, "score"], b.loc[cut, "score"]) if len(b) > cut else None
                    da = a.loc[ra - 1, "dense"] if ra and "dense" in a else float("nan")
                    db = b.loc[rb - 1, "dense"] if rb and "dense" in b else float("nan")
                    lines.append(
                        f"- gold {item} @{cut}: rank {ra} -> {rb}; score {sa:.5f} -> {sb:.5f}; "
                        f"dense {da:.5f} -> {db:.5f}; edge (rank {cut}, {cut + 1}) "
                        f"{tuple(round(float(x), 5) for x in edge_a) if edge_a else '-'} -> "
                        f"{tuple(round(float(x), 5) for x in edge_b) if edge_b else '-'}")
            lines.append("")
    text = "\n".join(lines) + "\n"
    (out / "moves.md").write_text(text)
    print(text)


if __name__ == "__main__":
    main(sys.argv[1:])
