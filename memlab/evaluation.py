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

Every number has its 95% interval (``<measure> ci_low`` / ``ci_high``: percentile bootstrap over
the queries, seeded, in the same % units); the point estimates are the plain means, unchanged.
``where`` filters the queries by their metadata and ``by`` adds one row per metadata value
(``by="category"``: LoCoMo's five categories; see :func:`memlab.harness.stats.query_metadata`).
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any, Mapping

import pandas as pd

from memlab.datasets.loaders import load_hipporag, load_locomo
from memlab.harness.experiment import bootstrap_ci, progress_bar
from memlab.harness.measures import check_measure_on
from memlab.harness.replay import dask_address, replay
from memlab.harness.stats import (SmallSampleWarning, compare_paired, format_table_latex,
                                  format_table_markdown,
                                  interval_text, query_metadata, select_queries)
from memlab.surfacing.config import BM25_ONLY, DEFAULT

__all__ = ["EVAL_MEASURES", "eval_configs", "eval_notes", "run_eval", "check_data_root",
           "DATASET_FILES",
           "to_markdown", "to_latex", "interval_markdown", "fit_width", "EVAL_REFERENCE"]

EVAL_MEASURES = ["R@2", "R@5", "R@10", "MRR"]
# the configuration the others are tested against, per (dataset, subset) table
EVAL_REFERENCE = "BM25 (Porter)"
DATASET_FILES = {"locomo": ("locomo/locomo_dev.json",),
                 "musique": ("hipporag/musique_train.json",
                             "hipporag/musique_train_corpus.json")}


def _without_graph(config):
    """``config`` without its graph stages (what the graph earns), named ``<name>-nograph``."""
    return config.replace(name=f"{config.name}-nograph", spreading=None, ppr=None)


DENSE_RECIPE = "dense"  # memlab/recipes/dense.json: chosen by `memlab tune` (README)


def dense_recipe(embedder: str | None = None):
    """The dense recipe (``memlab/recipes/dense.json``, loaded by name), with its embedder
    replaced by ``embedder``, else by ``$MEMLAB_EMBEDDER`` when set, else the recipe's own.

    Examples
    --------
    >>> dense_recipe().name, dense_recipe("hashing").dense.embedder
    ('dense', 'hashing')
    """
    from memlab.surfacing.config import get_recipe

    config = get_recipe(DENSE_RECIPE)
    chosen = embedder if embedder is not None else os.environ.get("MEMLAB_EMBEDDER") or None
    if chosen is None or chosen == config.dense.embedder:
        return config
    return config.replace(dense=dataclasses.replace(config.dense, embedder=chosen))


def eval_configs(dense: bool = False, embedder: str | None = None
                 ) -> dict[str, tuple[Any, str]]:
    """name -> (configuration, analyzer); the dense rows are :func:`dense_recipe`'s;
    ``embedder`` names their embedder and implies ``dense`` (default: the recipe's own, or
    ``$MEMLAB_EMBEDDER`` when set)."""
    configs = {
        "memlab DEFAULT": (DEFAULT, "porter"),
        "memlab DEFAULT, no graph": (_without_graph(DEFAULT), "porter"),
        "BM25 (Porter)": (BM25_ONLY, "porter"),
        "BM25 (no stemming)": (BM25_ONLY, "plain"),
    }
    if dense or embedder is not None:
        from memlab.surfacing.config import get_recipe
        hybrid = dense_recipe(embedder)
        # rows name their embedder unless it is the recipe's own
        used = hybrid.dense.embedder
        own = get_recipe(DENSE_RECIPE).dense.embedder
        label = "memlab DEFAULT + dense" + ("" if used == own else f" [{used}]")
        configs[label] = (hybrid, "porter")
        configs[f"{label}, no graph"] = (_without_graph(hybrid), "porter")
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


def eval_notes(configs: Mapping[str, tuple[Any, str]]) -> list[str]:
    """The lines every ``memlab eval`` table carries under it: which embedder the dense rows
    (if any) used, and that the table is in-sample.

    Examples
    --------
    >>> eval_notes(eval_configs(embedder="hashing"))[0]
    "Dense rows ('memlab DEFAULT + dense [hashing]', and its no-graph row): the dense recipe (memlab/recipes/dense.json) with embedder hashing (the recipe's own: minilm-onnx-int8)."
    """
    lines = []
    dense = [(label, config) for label, (config, _) in configs.items()
             if getattr(config, "dense", None) is not None and not label.endswith("no graph")]
    if dense:
        from memlab.surfacing.config import get_recipe
        own = get_recipe(DENSE_RECIPE).dense.embedder
        for label, config in dense:
            used = config.dense.embedder
            lines.append(f"Dense rows ({label!r}, and its no-graph row): the dense recipe "
                         f"(memlab/recipes/{DENSE_RECIPE}.json) with embedder {used}"
                         + (" (the recipe's own)." if used == own else
                            f" (the recipe's own: {own})."))
    lines.append("In-sample: memlab's recipes (DEFAULT" + (", the dense recipe" if dense else "")
                 + ") had their settings chosen on these same questions, so these numbers are "
                 "not estimates for new data (memlab tune prints grouped-CV ones).")
    return lines


def run_eval(data_root: str | Path, *, out: str | Path | None = None, k: int = 20,
             dense: bool = False, datasets: tuple[str, ...] = ("musique", "locomo"),
             progress: bool = False, measure_on: str = "retrieved",
             where: Mapping[str, Any] | None = None, by: str | None = None,
             n_boot: int = 1000, seed: int = 0, embedder: str | None = None,
             executor: str = "serial", address: str | None = None,
             n_workers: int = 2) -> pd.DataFrame:
    """Replay the datasets under :func:`eval_configs`; returns (and writes) the results table.

    ``embedder`` (a registered name, see :data:`~memlab.signals.dense.EMBEDDERS`) implies
    ``dense`` and names the dense rows' embedder.

    ``measure_on`` is the ranking the measures read, as in :func:`~memlab.harness.replay`.
    ``where`` (``{"category": [1, 2]}``) keeps the queries whose metadata match; ``by``
    (``"category"``) adds, for each dataset whose queries carry that metadata, one row per value
    (``subset`` ``"category=1"`` …). ``progress`` shows a bar naming the configuration and
    dataset being replayed. ``executor="dask"`` shards every replay by workspace (LoCoMo's
    conversations; MuSiQue is one workspace and replays serially) over one Dask cluster: the
    scheduler at ``address``, else a ``LocalCluster`` of ``n_workers`` started once.
    """
    check_measure_on(measure_on)
    configs = eval_configs(dense, embedder)  # first: DenseConfig refuses an unknown embedder
    root = check_data_root(data_root, datasets)
    traces = {}
    if "musique" in datasets:
        traces["musique"] = load_hipporag(root / DATASET_FILES["musique"][0],
                                          root / DATASET_FILES["musique"][1])
    if "locomo" in datasets:
        traces["locomo"] = load_locomo(root / DATASET_FILES["locomo"][0])
    metadata = {}
    for dataset, trace in traces.items():
        meta = query_metadata(trace).assign(dataset=dataset)
        if where is not None:
            try:
                meta = select_queries(meta, where)
            except ValueError as exc:
                if "selects no query" not in str(exc):
                    raise
                meta = meta.iloc[0:0]
        metadata[dataset] = meta
    if where is not None and all(m.empty for m in metadata.values()):
        raise ValueError(f"where {dict(where)!r} selects no query")
    if by is not None and (by == "qid" or by not in next(iter(metadata.values())).columns):
        raise ValueError(f"by must be one of {['category', 'session_id', 'workspace_id']}, "
                         f"got {by!r}")
    if executor not in ("serial", "dask"):
        raise ValueError(f"executor must be 'serial' or 'dask', got {executor!r}")
    bar = progress_bar(len(configs) * len(traces), "eval", progress)
    with dask_address(executor, address, n_workers) as shared_address:
        rows, frames = _eval_runs(configs, traces, metadata, k, measure_on, where, by, bar,
                                  n_boot, seed, executor, shared_address, n_workers)
    return _eval_table(rows, frames, out, n_boot, seed, eval_notes(configs))


def _eval_runs(configs, traces, metadata, k, measure_on, where, by, bar, n_boot, seed,
               executor, address, n_workers):
    rows = []
    frames: dict[tuple[str, str], list[pd.DataFrame]] = {}
    for config_name, (config, analyzer) in configs.items():
        for dataset, trace in traces.items():
            if bar is not None:
                bar.set_description(f"eval: {config_name} on {dataset}")
            started = time.perf_counter()
            result = replay(trace, config, k=k, measures=EVAL_MEASURES, record_candidates=False,
                            analyzer=analyzer, progress=False, measure_on=measure_on,
                            executor=executor, address=address, n_workers=n_workers)
            seconds = time.perf_counter() - started
            if bar is not None:
                bar.update(1)
            metrics = result.metrics.merge(result.decisions[["qid", "category"]], on="qid")
            meta = metadata[dataset]
            if where is not None:
                metrics = metrics[metrics["qid"].isin(set(meta["qid"]))]
                if metrics.empty:
                    continue
            subsets = {"all": metrics} if dataset == "musique" else {
                "categories 1-4" if where is None else _categories_label(metrics["category"]):
                    metrics[metrics["category"].isin([1, 2, 3, 4])],
                "adversarial (5)": metrics[metrics["category"] == 5]}
            if by is not None and meta[by].notna().any():
                labels = dict(zip(meta["qid"], meta[by]))
                for value in sorted(meta[by].dropna().unique(), key=str):
                    subsets[f"{by}={value}"] = metrics[metrics["qid"].map(labels) == value]
            for subset, frame in subsets.items():
                if frame.empty:
                    continue
                frames.setdefault((dataset, subset), []).append(
                    frame[["qid", "measure", "value"]].assign(name=config_name))
                means = frame.groupby("measure")["value"].mean() * 100.0
                row = {"dataset": dataset, "subset": subset, "config": config_name,
                       **{m: round(float(means.get(m, float("nan"))), 1)
                          for m in EVAL_MEASURES},
                       "queries": int(frame["qid"].nunique()),
                       "seconds": round(seconds, 1), "recipe": config.name,
                       "analyzer": analyzer, "measure_on": measure_on}
                for m in EVAL_MEASURES:
                    low, high = bootstrap_ci(frame.loc[frame["measure"] == m, "value"]
                                             .to_numpy() * 100.0, n_boot=n_boot, seed=seed)
                    row[f"{m} ci_low"], row[f"{m} ci_high"] = round(low, 1), round(high, 1)
                rows.append(row)
    if bar is not None:
        bar.close()
    return rows, frames


def _eval_table(rows, frames, out, n_boot, seed, notes=()) -> pd.DataFrame:
    table = _with_marks(pd.DataFrame(rows), frames, n_boot, seed)
    table.attrs["notes"] = list(notes)  # under every rendering of the table (eval_notes)
    if out is not None:
        out = Path(out)
        out.mkdir(parents=True, exist_ok=True)
        table.to_csv(out / "results.csv", index=False)
        (out / "results.md").write_text(to_markdown(table) + "\n" + interval_markdown(table))
        (out / "results.tex").write_text(to_latex(table))
    return table


def _categories_label(categories: pd.Series) -> str:
    """The LoCoMo block's label from the categories 1-4 actually present (a ``where`` filter
    may keep only some): ``"categories 1-4"`` for all four, else e.g. ``"categories 1, 2"``.

    Examples
    --------
    >>> _categories_label(pd.Series([1, 2, 3, 4, 5])), _categories_label(pd.Series([2, 1, 1]))
    ('categories 1-4', 'categories 1, 2')
    >>> _categories_label(pd.Series([3]))
    'category 3'
    """
    present = sorted({int(c) for c in categories.dropna().unique() if c in (1, 2, 3, 4)})
    if present == [1, 2, 3, 4] or not present:
        return "categories 1-4"
    if len(present) == 1:
        return f"category {present[0]}"
    return "categories " + ", ".join(map(str, present))


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
    if table.attrs.get("notes"):
        lines += ["", *table.attrs["notes"]]
    return "\n".join(lines) + "\n"


def _with_marks(table: pd.DataFrame, frames: dict, n_boot: int, seed: int) -> pd.DataFrame:
    """Per (dataset, subset): each configuration against :data:`EVAL_REFERENCE`, paired Wilcoxon,
    Holm-corrected across that table's comparisons: ``<m> p_holm`` and ``<m> mark`` columns."""
    if table.empty:
        return table
    marks: dict[tuple[str, str, str, str], tuple[float, str]] = {}
    for (dataset, subset), parts in frames.items():
        long = pd.concat(parts, ignore_index=True)
        if EVAL_REFERENCE not in set(long["name"]) or long["name"].nunique() < 2:
            continue
        compared = compare_paired(long, key="name", measures=EVAL_MEASURES,
                                  reference=EVAL_REFERENCE, n_boot=n_boot, seed=seed, warn=False)
        if compared.warnings:  # the block's † rows, one SmallSampleWarning (the CLI: stderr)
            warnings.warn(f"{dataset}, {subset}: {len(compared.warnings)} of "
                          f"{len(compared.table)} comparisons marked † (fewer than 6 non-zero "
                          f"differences)",
                          SmallSampleWarning, stacklevel=3)
        for row in compared.table.itertuples(index=False):
            marks[(dataset, subset, row.name, row.measure)] = (row.p_adjusted, row.mark)
    for m in EVAL_MEASURES:
        keys = list(zip(table["dataset"], table["subset"], table["config"], [m] * len(table)))
        table[f"{m} p_holm"] = [marks.get(k, (float("nan"), ""))[0] for k in keys]
        table[f"{m} mark"] = [marks.get(k, (float("nan"), ""))[1] for k in keys]
    return table


def _interval_cells(group: pd.DataFrame) -> pd.DataFrame:
    cells = pd.DataFrame({"config": group["config"].to_numpy()})
    for m in EVAL_MEASURES:
        marks = group[f"{m} mark"] if f"{m} mark" in group else [""] * len(group)
        cells[m] = [interval_text(v, lo, hi, 1) + mark for v, lo, hi, mark in
                    zip(group[m], group[f"{m} ci_low"], group[f"{m} ci_high"], marks)]
    return cells


EVAL_NOTE = ("Mean in % [95% bootstrap interval over the queries: percentile method, seeded]. "
             f"Marks: paired Wilcoxon signed-rank against {EVAL_REFERENCE}, Holm–Bonferroni "
             "across each block's comparisons; * p<0.05, ** p<0.01, *** p<0.001 (adjusted), "
             "▲/▼ higher/lower than the reference; † fewer than 6 non-zero paired "
             "differences: Wilcoxon cannot reach p<0.05.")


def to_latex(table: pd.DataFrame) -> str:
    """Every (dataset, subset) block of the table as a LaTeX ``table`` (booktabs), each number
    with its 95% interval and significance marks against :data:`EVAL_REFERENCE`."""
    out = []
    for (dataset, subset), group in table.groupby(["dataset", "subset"], sort=False):
        caption = (f"{dataset}, {subset} ({int(group['queries'].iloc[0])} queries). "
                   + EVAL_NOTE)
        out.append(format_table_latex(_interval_cells(group), caption))
    return "\n".join(out)


def interval_markdown(table: pd.DataFrame, width: int | None = None) -> str:
    """The table with every number's 95% interval, ``"47.6 [44.1, 51.0]"``, one block per
    (dataset, subset), split into column groups no wider than ``width`` characters (None: one
    table per block, however wide).

    Examples
    --------
    >>> row = {"dataset": "d", "subset": "all", "config": "c", "queries": 3, "R@2": 50.0,
    ...        "R@2 ci_low": 40.0, "R@2 ci_high": 60.0, "R@5": 70.0, "R@5 ci_low": 60.0,
    ...        "R@5 ci_high": 80.0, "R@10": 80.0, "R@10 ci_low": 70.0, "R@10 ci_high": 90.0,
    ...        "MRR": 55.0, "MRR ci_low": 45.0, "MRR ci_high": 65.0, "measure_on": "retrieved"}
    >>> print(interval_markdown(pd.DataFrame([row])).splitlines()[4])
    | c | 50.0 [40.0, 60.0] | 70.0 [60.0, 80.0] | 80.0 [70.0, 90.0] | 55.0 [45.0, 65.0] |
    """
    blocks = []
    for (dataset, subset), group in table.groupby(["dataset", "subset"], sort=False):
        cells = _interval_cells(group)
        head = f"{dataset}, {subset} ({int(group['queries'].iloc[0])} queries)"
        blocks.append(head + "\n\n" + "\n".join(
            format_table_markdown(part) for part in fit_width(cells, ["config"], width)))
    notes = [EVAL_NOTE, *table.attrs.get("notes", [])]
    note = "\n".join(n if width is None else textwrap.fill(n, width, break_on_hyphens=False)
                     for n in notes)
    return "\n".join(blocks) + "\n" + note + "\n"


def fit_width(frame: pd.DataFrame, keep: list[str], width: int | None = 100
              ) -> list[pd.DataFrame]:
    """``frame`` split into column groups whose Markdown rows fit ``width`` characters, each
    repeating the ``keep`` columns (one group when ``width`` is None or everything fits).

    Examples
    --------
    >>> frame = pd.DataFrame({"name": ["a"], "x" * 30: [1], "y" * 30: [2], "z" * 30: [3]})
    >>> [list(part.columns) for part in fit_width(frame, ["name"], 80)]
    [['name', 'xxxxxxxxxxxxxxxxxxxxxxxxxxxxxx', 'yyyyyyyyyyyyyyyyyyyyyyyyyyyyyy'], \
['name', 'zzzzzzzzzzzzzzzzzzzzzzzzzzzzzz']]
    """
    def cell_width(column: str) -> int:
        return max([len(str(column)), *(len(str(v)) for v in frame[column])]) + 3

    if width is None:
        return [frame]
    base = sum(cell_width(c) for c in keep) + 1
    parts, current, used = [], [], base
    for column in [c for c in frame.columns if c not in keep]:
        w = cell_width(column)
        if current and used + w > width:
            parts.append(frame[keep + current])
            current, used = [], base
        current.append(column)
        used += w
    if current or not parts:
        parts.append(frame[keep + current])
    return parts
