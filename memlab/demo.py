"""``make demo`` / ``memlab demo``: the main job on the built-in data.

Replays the Apollo fixture's trace under the seed's behaviour (``SEED_COMPAT``, in legacy and in
router mode) and memlab's ``DEFAULT`` recipe, prints what each query surfaced and the experiment
table (means, bootstrap 95% intervals, paired tests against the seed), saves every result
(Parquet frames and manifest) and a score-breakdown PNG. Measures read the retrieved ranking by
default (the session's goal anchor, which surfaces first on every query, is left out; see
:func:`~memlab.harness.replay.replay`), and the output says so.
"""

from __future__ import annotations

import textwrap
import warnings
from pathlib import Path

from memlab.datasets import fixture_trace, load_fixture
from memlab.evaluation import fit_width
from memlab.harness.display import experiment_printable
from memlab.harness.experiment import Experiment, ExperimentResult
from memlab.harness.measures import check_measure_on
from memlab.harness.plots import item_labels, plot_score_breakdown
from memlab.harness.stats import SmallSampleWarning, format_table_markdown
from memlab.surfacing.config import DEFAULT, SEED_COMPAT

__all__ = ["run_demo", "DEMO_CONFIGS", "DEMO_MEASURES"]

DEMO_CONFIGS = {"seed legacy": ("legacy", SEED_COMPAT), "seed router": ("router", SEED_COMPAT),
                "memlab default": ("router", DEFAULT)}
DEMO_MEASURES = ["R@5", "R@10", "MRR", "nDCG@10", "Tokens", "Latency"]
WIDTH = 100  # the demo's output fits a 100-column terminal


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
    with warnings.catch_warnings(record=True) as caught:  # summarised below, not one per test
        warnings.simplefilter("always", SmallSampleWarning)
        experiment = Experiment(trace, DEMO_CONFIGS, DEMO_MEASURES, baseline="seed legacy",
                                k=k, measure_on=measure_on)
    print(textwrap.fill("measures: " + (
        "the retrieved ranking, surfaced items without the session's anchors and pins "
        "(measure_on='retrieved')" if measure_on == "retrieved" else
        "every surfaced item, anchors and pins included (measure_on='surfaced')"), WIDTH))
    labels = item_labels(trace, width=36)
    for name, result in experiment.results.items():
        print(f"\n=== {name}: what each query retrieved (the goal anchor, always surfaced, "
              f"not listed) ===")
        metrics = result.metrics.pivot(index="qid", columns="measure", values="value")
        surfaced = result.candidates[result.candidates["surfaced"]]
        for qid, row in result.decisions.set_index("qid").iterrows():
            mine = surfaced[(surfaced["qid"] == qid) & ~surfaced["mandatory"].astype(bool)]
            print(f"{qid} “{row['query']}” → {row['strategy_used']} "
                  f"(R@5 {metrics.loc[qid, 'R@5']:.2f}, MRR {metrics.loc[qid, 'MRR']:.2f})")
            for rank, (item, gold) in enumerate(zip(mine["item_id"], mine["gold"]), start=1):
                if rank > 3:
                    print(f"     … {len(mine) - 3} more")
                    break
                print(f"   {'★' if gold > 0 else ' '} {rank}. {labels.get(item, item)} "
                      f"[{item}]")
    print(f"\n=== experiment: {len(trace.queries)} queries, k={k}, baseline 'seed legacy', "
          f"measured on the {measure_on} ranking ===")
    frame, note = experiment_printable(experiment)
    for part in fit_width(frame, ["name", "n"], WIDTH):
        print(format_table_markdown(part))
    print(textwrap.fill(note, WIDTH))
    print()
    comparisons = experiment.comparisons._printable(3)
    for part in fit_width(comparisons, ["name", "vs", "measure"], WIDTH):
        print(format_table_markdown(part))
    if caught:
        print(f"({len(caught)} comparisons marked † have too few non-zero differences for "
              f"the Wilcoxon test on {len(trace.queries)} queries)")
    out_dir.mkdir(parents=True, exist_ok=True)
    for name, result in experiment.results.items():
        result.save(out_dir / name.replace(" ", "_"))
    experiment.table.to_csv(out_dir / "experiment.csv", index=False)
    figure = plot_score_breakdown(experiment.results["memlab default"], breakdown_qid,
                                  trace=trace)
    figure.savefig(out_dir / "score_breakdown.png", dpi=100)
    print(textwrap.fill(
        f"wrote {out_dir}/experiment.csv, one Parquet result folder per configuration "
        f"({', '.join(n.replace(' ', '_') for n in experiment.results)}) and "
        f"{out_dir}/score_breakdown.png", WIDTH))
    return experiment
