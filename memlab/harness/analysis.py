"""Router analysis (SPEC §7): which strategy would have been best for each query, in hindsight.

The trace is replayed once as routed and once per strategy forced on every query; per query the
best strategy is the one with the highest value of the measure (ties go to the router's choice,
then to the order of :data:`STRATEGY_ORDER`), and the regret is best minus chosen.
"""

from __future__ import annotations

from typing import Any, Iterable

import pandas as pd

from memlab.harness.measures import parse_measure
from memlab.harness.replay import replay
from memlab.harness.trace import Trace
from memlab.model import SurfacingStrategy

__all__ = ["router_regret", "STRATEGY_ORDER"]

STRATEGY_ORDER = tuple(s.value for s in SurfacingStrategy)


def router_regret(trace: Trace, config: Any = None, *, measure: str = "nDCG@10", k: int = 20,
                  strategies: Iterable[str] | None = None, seed: int = 0) -> pd.DataFrame:
    """One row per query with gold: the chosen strategy and its value, each strategy's value
    (``value_<strategy>``), the best strategy in hindsight, its value and the regret.

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> trace = (TraceBuilder("t", start="2024-01-01T00:00:00+00:00")
    ...          .add("JWT was picked because sessions did not scale", item_id="a")
    ...          .query("q1", "why JWT", gold=["a"]).build())
    >>> router_regret(trace, measure="MRR")[["qid", "chosen", "best", "regret"]].values.tolist()
    [['q1', 'deep:multi-hop', 'deep:multi-hop', 0.0]]
    """
    m = str(parse_measure(measure))
    strategies = STRATEGY_ORDER if strategies is None else tuple(
        SurfacingStrategy.parse(s, "strategies").value for s in strategies)
    routed = replay(trace, config, k=k, measures=[m], seed=seed)
    values = {s: replay(trace, config, k=k, measures=[m], seed=seed, force_strategy=s,
                        record_candidates=False).metrics.set_index("qid")["value"]
              for s in strategies}
    chosen = routed.decisions.set_index("qid")["strategy_used"]
    chosen_value = routed.metrics.set_index("qid")["value"]
    rows = []
    for qid in chosen_value.index:
        row: dict[str, Any] = {"qid": qid, "chosen": chosen[qid],
                               "chosen_value": float(chosen_value[qid])}
        per = {s: float(values[s].get(qid, float("nan"))) for s in strategies}
        row.update({f"value_{s}": v for s, v in per.items()})
        ranked = sorted(per, key=lambda s: (-per[s], s != chosen[qid], STRATEGY_ORDER.index(s)))
        row["best"] = ranked[0]
        row["best_value"] = per[ranked[0]]
        row["regret"] = max(0.0, row["best_value"] - row["chosen_value"])
        rows.append(row)
    return pd.DataFrame(rows)
