"""``memlab eval``: retrieval quality on the shared public data, baselines in the same run.

Replays LoCoMo (``locomo/locomo_dev.json``) and HippoRAG's MuSiQue set
(``hipporag/musique_train.json`` + ``musique_train_corpus.json``) under several configurations
and writes one table: HippoRAG's fractional Recall@k (R@2, R@5, R@10) and MRR, LoCoMo categories
1–4 together and the adversarial category 5 apart, with the number of queries and seconds.

The configurations are memlab's ``DEFAULT`` recipe, the same without its graph stages (what the
graph earns), plain BM25 with memlab's Porter analyzer (``BM25_ONLY``) and without stemming (the
reference implementation's setting), and, when the ``dense`` extra is installed, ``DEFAULT``
with hybrid dense relevance, with and without its graph stages.

Measures follow trec_eval (see :mod:`memlab.harness.measures`) and read the ranking chosen by
``measure_on`` (``"retrieved"`` by default: the session's anchors and pins left out; the public
datasets' traces have neither, so both choices give the same table there). The table has a
``measure_on`` column and its Markdown says which one was used.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pandas as pd

from memlab.datasets.loaders import load_hipporag, load_locomo
from memlab.harness.measures import check_measure_on
from memlab.harness.replay import replay
from memlab.surfacing.config import BM25_ONLY, DEFAULT

__all__ = ["EVAL_MEASURES", "eval_configs", "run_eval", "check_data_root", "DATASET_FILES"]

EVAL_MEASURES = ["R@2", "R@5", "R@10", "MRR"]
DATASET_FILES = {"locomo": ("locomo/locomo_dev.json",),
                 "musique": ("hipporag/musique_train.json",
                             "hipporag/musique_train_corpus.json")}


def _without_graph(config):
    """``config`` without its graph stages (what the graph earns), named ``<name>-nograph``."""
    return config.replace(name=f"{config.name}-nograph", spreading=None, ppr=None)


def eval_configs(dense: bool = False) -> dict[str, tuple[Any, str]]:
    """name -> (configuration, analyzer)."""
    configs = {
        "memlab DEFAULT": (DEFAULT, "porter"),
        "memlab DEFAULT, no graph": (_without_graph(DEFAULT), "porter"),
        "BM25 (Porter)": (BM25_ONLY, "porter"),
        "BM25 (no stemming)": (BM25_ONLY, "plain"),
    }
    if dense:
        from memlab.signals.dense import hybrid_recipe
        hybrid = hybrid_recipe(DEFAULT)
        configs["memlab DEFAULT + dense"] = (hybrid, "porter")
        configs["memlab DEFAULT + dense, no graph"] = (_without_graph(hybrid), "porter")
    return configs


def check_data_root(data_root: str | Path, datasets: tuple[str, ...] = ("musique", "locomo"),
                    *, option: str = "data_root") -> Path:
    """``data_root`` as a Path, after checking it holds every file ``datasets`` need.

    Raises ValueError naming ``option`` (the argument, or the command line's ``--data``).
    """
    unknown = set(datasets) - set(DATASET_FILES)
    if unknown:
        raise ValueError(f"datasets must be among {sorted(DATASET_FILES)}, got {sorted(unknown)}")
    root = Path(data_root)
    for name in datasets:
        for rel in DATASET_FILES[name]:
            if not (root / rel).is_file():
                raise ValueError(f"{option} {str(root)!r} has no {rel} (see the shared "
                                 f"datasets' README)")
    return root


def run_eval(data_root: str | Path, *, out: str | Path | None = None, k: int = 20,
             dense: bool = False, datasets: tuple[str, ...] = ("musique", "locomo"),
             progress: bool = False, measure_on: str = "retrieved") -> pd.DataFrame:
    """Replay the datasets under :func:`eval_configs`; returns (and writes) the results table.

    ``measure_on`` is the ranking the measures read, as in :func:`~memlab.harness.replay`.
    """
    check_measure_on(measure_on)
    root = check_data_root(data_root, datasets)
    traces = {}
    if "musique" in datasets:
        traces["musique"] = load_hipporag(root / DATASET_FILES["musique"][0],
                                          root / DATASET_FILES["musique"][1])
    if "locomo" in datasets:
        traces["locomo"] = load_locomo(root / DATASET_FILES["locomo"][0])
    rows = []
    for config_name, (config, analyzer) in eval_configs(dense).items():
        for dataset, trace in traces.items():
            started = time.perf_counter()
            result = replay(trace, config, k=k, measures=EVAL_MEASURES, record_candidates=False,
                            analyzer=analyzer, progress=progress, measure_on=measure_on)
            seconds = time.perf_counter() - started
            metrics = result.metrics.merge(result.decisions[["qid", "category"]], on="qid")
            subsets = {"all": metrics} if dataset == "musique" else {
                "categories 1-4": metrics[metrics["category"].isin([1, 2, 3, 4])],
                "adversarial (5)": metrics[metrics["category"] == 5]}
            for subset, frame in subsets.items():
                means = frame.groupby("measure")["value"].mean() * 100.0
                rows.append({"dataset": dataset, "subset": subset, "config": config_name,
                             **{m: round(float(means.get(m, float("nan"))), 1)
                                for m in EVAL_MEASURES},
                             "queries": int(frame["qid"].nunique()),
                             "seconds": round(seconds, 1), "recipe": config.name,
                             "analyzer": analyzer, "measure_on": measure_on})
    table = pd.DataFrame(rows)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "results.csv", index=False)
        (out / "results.md").write_text(to_markdown(table))
    return table


def to_markdown(table: pd.DataFrame) -> str:
    """The table as a Markdown table (no extra dependency)."""
    columns = ["dataset", "subset", "config", *EVAL_MEASURES, "queries"]
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for row in table[columns].itertuples(index=False):
        lines.append("| " + " | ".join(f"{v:.1f}" if isinstance(v, float) else str(v)
                                       for v in row) + " |")
    used = sorted(set(table["measure_on"])) if "measure_on" in table else []
    if used:
        lines += ["", f"Measures (trec_eval semantics) read the {' and '.join(used)} ranking"
                  + (" (anchors and pins left out)." if used == ["retrieved"] else ".")]
    return "\n".join(lines) + "\n"
