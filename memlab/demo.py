"""``make demo`` / ``memlab demo``: the main job on the built-in data.

Replays the Apollo fixture's trace under the seed's behaviour (``SEED_COMPAT``, in legacy and in
router mode) and memlab's ``DEFAULT`` recipe, prints what each query surfaced and the experiment
table (means, bootstrap 95% intervals, paired tests against the seed), saves every result
(Parquet frames and manifest) and a score-breakdown PNG. Measures read the retrieved ranking by
default (the session's goal anchor, which surfaces first on every query, is left out; see
:func:`~memlab.harness.replay.replay`), and the output says so.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from memlab.datasets import fixture_trace, load_fixture
from memlab.harness.experiment import Experiment, ExperimentResult
from memlab.harness.measures import check_measure_on
from memlab.harness.plots import plot_score_breakdown
from memlab.surfacing.config import DEFAULT, SEED_COMPAT

__all__ = ["run_demo", "DEMO_CONFIGS", "DEMO_MEASURES"]

DEMO_CONFIGS = {"seed legacy": ("legacy", SEED_COMPAT), "seed router": ("router", SEED_COMPAT),
                "memlab default": ("router", DEFAULT)}
DEMO_MEASURES = ["R@5", "R@10", "MRR", "nDCG@10", "Tokens", "Latency"]


def run_demo(out_dir: str | Path = "out/demo", k: int = 10, breakdown_qid: str = "q1",
             measure_on: str = "retrieved") -> ExperimentResult:
    """Run the demo and return its :class:`~memlab.harness.ExperimentResult`.

    ``measure_on``: the ranking relevance measures read (``"retrieved"``: without the session's
    anchors and pins; ``"surfaced"``: everything surfaced).
    """
    if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
        raise ValueError(f"k must be an int in 1..100, got {k!r}")
    check_measure_on(measure_on)
    out_dir = Path(out_dir)
    trace = fixture_trace(load_fixture("apollo_demo"))
    experiment = Experiment(trace, DEMO_CONFIGS, DEMO_MEASURES, baseline="seed legacy", k=k,
                            measure_on=measure_on)
    pd.set_option("display.width", 160)
    print("measures: " + ("the retrieved ranking, surfaced items without the session's anchors "
                          "and pins (measure_on='retrieved')" if measure_on == "retrieved" else
                          "every surfaced item, anchors and pins included "
                          "(measure_on='surfaced')"))
    for name, result in experiment.results.items():
        print(f"\n=== {name} ===")
        metrics = result.metrics.pivot(index="qid", columns="measure", values="value")
        view = result.decisions.set_index("qid")[["query", "strategy_used", "confidence"]]
        view = view.join(metrics[["R@5", "MRR"]])
        surfaced = result.candidates[result.candidates["surfaced"]]
        view["surfaced"] = surfaced.groupby("qid")["item_id"].apply(
            lambda ids: ", ".join(ids.head(4)) + (" …" if len(ids) > 4 else ""))
        print(view.to_string(float_format=lambda v: f"{v:.2f}", max_colwidth=40))
    columns = ["name", "mode", "recipe"] + [c for m in DEMO_MEASURES for c in
                                            (m, f"{m} ci_low", f"{m} ci_high", f"{m} p_ttest",
                                             f"{m} p_wilcoxon")
                                            if c in experiment.table]
    print(f"\n=== experiment: {len(trace.queries)} queries, k={k}, baseline 'seed legacy', "
          f"measured on the {measure_on} ranking ===")
    print(experiment.table[columns].to_string(index=False, float_format=lambda v: f"{v:.3f}"))
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, result in experiment.results.items():
        result.save(out_dir / name.replace(" ", "_"))
    experiment.table.to_csv(out_dir / "experiment.csv", index=False)
    figure = plot_score_breakdown(experiment.results["memlab default"], breakdown_qid)
    figure.savefig(out_dir / "score_breakdown.png", dpi=100)
    print(f"\nwrote {out_dir}/experiment.csv, one Parquet result folder per configuration "
          f"({', '.join(n.replace(' ', '_') for n in experiment.results)}) and "
          f"{out_dir}/score_breakdown.png")
    return experiment
