"""Counterfactual re-scoring (SPEC §7): re-rank recorded candidates under new composite weights.

Retrieval, routing and strategies are not re-run: every candidate a replay recorded keeps its
signals, and only the tail of the pipeline runs again on the recorded frames: the ``composite``
and ``budget`` stages (:data:`memlab.surfacing.strategies.TAIL`), the very stage objects live
surfacing ends with. With unchanged weights the result is
the live ranking exactly (tested). Only the composite's constants can change this way:
``activation_floor``, ``centrality_weight``, ``pin_boost_factor``, ``anchor_boost`` and
``freshness_weight``; anything that changes which candidates exist needs a real replay.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Mapping

import numpy as np
import pandas as pd

from memlab.harness.measures import Measure, check_measure_on, evaluate, parse_measures
from memlab.harness.replay import ReplayResult, measured_judgements
from memlab.surfacing.composite import TERM_COLUMNS, CompositeWeights
from memlab.surfacing.config import SurfacingConfig
from memlab.surfacing.stages import CandidateTable, Composite, Pipeline, QueryRun
from memlab.surfacing.strategies import TAIL

__all__ = ["rescore", "weights_of", "RESCORABLE"]

RESCORABLE = CompositeWeights.FIELDS
# the columns the tail recomputes
_RESCORED = TERM_COLUMNS + ("session_pin_boost", "freshness_boost", "score", "surfaced",
                            "drop_reason", "rank")


def weights_of(result: ReplayResult, changes: Mapping[str, float] | SurfacingConfig | None
               ) -> CompositeWeights:
    """The replay's weights with ``changes`` applied (names outside :data:`RESCORABLE` raise)."""
    recorded = CompositeWeights(**{f: result.manifest["config"][f] for f in RESCORABLE})
    if changes is None:
        return recorded
    if isinstance(changes, SurfacingConfig):
        return CompositeWeights.from_config(changes)
    unknown = sorted(set(changes) - set(RESCORABLE))
    if unknown:
        raise ValueError(f"counterfactual weights must be among {list(RESCORABLE)}; "
                         f"{unknown} change the candidates themselves (replay instead)")
    for name, value in changes.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
            raise ValueError(f"{name} must be a number >= 0, got {value!r}")
    return dataclasses.replace(recorded, **{k: float(v) for k, v in changes.items()})


def rescore(result: ReplayResult, weights: Mapping[str, float] | SurfacingConfig | None = None,
            measures: Iterable[str | Measure] | None = None,
            measure_on: str | None = None) -> ReplayResult:
    """A new result whose candidates, tokens and metrics follow the new ``weights``.

    ``measures`` and ``measure_on`` default to the replay's (its manifest; a result saved
    before ``measure_on`` existed was measured on ``"surfaced"``).

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> from memlab.harness.replay import replay
    >>> trace = (TraceBuilder("t", start="2024-01-01T00:00:00+00:00")
    ...          .add("JWT was picked because sessions did not scale", item_id="a")
    ...          .query("q1", "why JWT", gold=["a"]).build())
    >>> live = replay(trace)
    >>> same = rescore(live)
    >>> same.candidates["score"].tolist() == live.candidates["score"].tolist()
    True
    """
    if result.candidates.empty and not result.decisions.empty:
        raise ValueError("result has no recorded candidates (replay with record_candidates=True)")
    if result.manifest.get("config", {}).get("reranker") is not None:
        raise ValueError("result was replayed with a learned reranker, whose scores the "
                         "composite's weights do not decide: re-scoring cannot answer; replay "
                         "the new weights instead (a sweep without counterfactual)")
    new_weights = weights_of(result, weights)
    measures = parse_measures(measures if measures is not None else result.manifest["measures"])
    measure_on = check_measure_on(result.manifest.get("measure_on", "surfaced")
                                  if measure_on is None else measure_on)
    decisions = result.decisions.copy()
    legacy = result.manifest["mode"] == "legacy"
    frames, metrics = [], []
    by_qid = dict(tuple(result.candidates.groupby("qid", sort=False)))
    # the live tail (composite >> budget), with the composite's weights swapped in
    tail = Pipeline(Composite(new_weights) if isinstance(s, Composite) else s for s in TAIL)
    for row_pos, decision in enumerate(decisions.itertuples(index=False)):
        cand = by_qid.get(decision.qid)
        if cand is None:
            continue
        cand = cand.reset_index(drop=True)
        filtered = cand["filtered"].to_numpy(dtype=bool)
        known = [r if f else None for r, f in zip(cand["drop_reason"].tolist(), filtered)]
        max_tokens = decision.max_tokens
        max_tokens = None if max_tokens is None or pd.isna(max_tokens) else int(max_tokens)
        table = CandidateTable({**{name: cand[name].to_numpy() for name in cand.columns},
                                "idx": np.arange(len(cand)), "filtered": filtered,
                                "mandatory": cand["mandatory"].to_numpy(dtype=bool),
                                "filter_reason": np.array(known, dtype=object)})
        run = QueryRun(None, None, decision.query, [], int(decision.k), None,
                       max_tokens=max_tokens, legacy=legacy)
        table = tail(run, table)
        used = table.attrs["tokens_used"]
        surfaced = table.surfaced
        order = table.attrs["order"]  # row positions of the recorded frame, in rank order
        out = cand.iloc[order].reset_index(drop=True)
        for name in _RESCORED:
            out[name] = table[name][order]  # fancy indexing: a new, writable array
        frames.append(out)
        decisions.iat[row_pos, decisions.columns.get_loc("tokens_used")] = used
        decisions.iat[row_pos, decisions.columns.get_loc("n_surfaced")] = int(surfaced.sum())
        ranking, gold = measured_judgements(out["item_id"].tolist(), out["surfaced"].tolist(),
                                            out["mandatory"].tolist(), decision.gold or {},
                                            measure_on)
        for name, value in evaluate(measures, ranking, gold, tokens=used,
                                    latency_ms=decision.total_ms, qid=decision.qid).items():
            metrics.append((decision.qid, name, value))
    candidates = pd.concat(frames, ignore_index=True) if frames else result.candidates.iloc[:0]
    manifest = {**result.manifest, "counterfactual": dataclasses.asdict(new_weights),
                "measures": [str(m) for m in measures], "measure_on": measure_on}
    return ReplayResult(decisions, candidates,
                        pd.DataFrame(metrics, columns=["qid", "measure", "value"]),
                        result.log.copy(), manifest)
