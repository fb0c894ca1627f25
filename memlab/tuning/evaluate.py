"""Per-query measure values of a configuration on a set of questions: the tuner's objective.

Two evaluators, both answering ``values(config, qids) -> pd.Series`` (one value per judged
question in ``qids``) and both logging every question they were asked about in ``seen`` (the
leakage test reads it):

:class:`CounterfactualEvaluator`
    Re-scores the candidates one replay recorded under new composite weights (no replay). The
    ranking and the measures follow :func:`memlab.harness.counterfactual.rescore` exactly (a test
    compares them query by query), but vectorised over every question at once: ``rescore``
    walks the questions one by one (about 3 s for LoCoMo's 999) and a tuner calls it hundreds
    of times, so this path is written out in numpy for speed (about 20 ms per call there). It
    covers what the shared data needs (router mode, no token budget, relevance measures, no
    session pins or anchors under ``measure_on="retrieved"``) and falls back to ``rescore``
    otherwise.
:class:`ReplayEvaluator`
    Replays a copy of the trace holding only the questions asked about (so a held-out question
    is never even run while tuning), in this process, on a process pool or on Dask (the harness
    sweep's executors).
"""

from __future__ import annotations

import json
import math
from typing import Any, Iterable, Sequence

import numpy as np
import pandas as pd

from memlab.harness.counterfactual import RESCORABLE, rescore
from memlab.harness.measures import Measure, parse_measure
from memlab.harness.replay import ReplayResult, check_address, check_n_workers, replay
from memlab.harness.trace import Trace
from memlab.surfacing.composite import CompositeWeights, composite
from memlab.surfacing.config import SurfacingConfig

__all__ = ["CounterfactualEvaluator", "ReplayEvaluator", "subtrace", "rank_frame",
           "measure_ranked"]

_COMPOSITE = ("activation", "relevance_term", "recency_term", "centrality", "multiplier",
              "anchor_forced", "pin_weight", "freshness")


def subtrace(trace: Trace, qids: Iterable[str]) -> Trace:
    """``trace`` with only the query events of ``qids`` (every other event kept).

    Examples
    --------
    >>> from memlab.harness.trace import TraceBuilder
    >>> t = (TraceBuilder("t").add("a", item_id="a").query("q1", "a", gold=["a"])
    ...      .query("q2", "b").build())
    >>> [q.get("qid") for q in subtrace(t, ["q2"]).queries]
    ['q2']
    """
    keep = set(qids)
    events = [e for e in trace.events if e.type != "query" or e.get("qid") in keep]
    return Trace(events, name=trace.name, start=trace.start, workspace_id=trace.workspace_id,
                 metadata=dict(trace.metadata))


def _gold_dict(gold: Any) -> dict[str, float]:
    if gold is None or (isinstance(gold, float) and math.isnan(gold)):
        return {}
    if isinstance(gold, dict):
        return {str(k): float(v) for k, v in gold.items()}
    return {str(g): 1.0 for g in gold}


class _Ranked:
    """Candidate rows grouped by question, with what the measures need precomputed."""

    def __init__(self, candidates: pd.DataFrame, decisions: pd.DataFrame) -> None:
        order = pd.Index(decisions["qid"])
        self.qids = np.asarray(order, dtype=object)
        self.qcode = order.get_indexer(candidates["qid"]).astype(np.int64)
        if (self.qcode < 0).any():
            raise ValueError("candidates name questions that the decisions do not hold")
        ids = candidates["item_id"].to_numpy(dtype=object)
        self.id_rank = np.argsort(np.argsort(ids.astype(str), kind="stable"), kind="stable")
        self.relevance = candidates["relevance"].to_numpy(dtype=float)
        self.mandatory = candidates["mandatory"].to_numpy(dtype=bool)
        self.filtered = candidates["filtered"].to_numpy(dtype=bool)
        self.k = decisions["k"].to_numpy(dtype=np.int64)
        nq = len(self.qids)
        # measured gold ("retrieved", no mandatory rows): every gold item, retrieved or not
        self.grade = np.zeros(len(candidates))
        self.n_rel = np.zeros(nq)
        self.judged = np.zeros(nq, dtype=bool)
        self.ideal: list[np.ndarray] = []
        grade_col = candidates["gold"].to_numpy(dtype=float)
        self.grade = np.where(grade_col > 0, grade_col, 0.0)
        for q, gold in enumerate(decisions["gold"].tolist()):
            g = _gold_dict(gold)
            self.judged[q] = bool(g)
            rel = sorted((v for v in g.values() if v > 0), reverse=True)
            self.n_rel[q] = len(rel)
            self.ideal.append(np.asarray(rel, dtype=float))

    def positions(self, score: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows in ranking order and each row's position among its question's rankable rows
        (unfiltered, not mandatory; -1 otherwise), ordered as ``order_candidates`` orders."""
        order = np.lexsort((self.id_rank, -self.relevance, -score, ~self.mandatory,
                            self.filtered, self.qcode))
        rankable = (~self.filtered & ~self.mandatory)[order]
        cum = np.cumsum(rankable)
        q = self.qcode[order]
        starts = np.searchsorted(q, np.arange(len(self.qids)))
        before = np.concatenate([[0], cum])[starts]  # rankable rows before each question
        pos_sorted = np.where(rankable, cum - 1 - before[q], -1)
        pos = np.empty_like(pos_sorted)
        pos[order] = pos_sorted
        return order, pos


def measure_ranked(ranked: _Ranked, pos: np.ndarray, measure: Measure) -> np.ndarray:
    """Per-question values of ``measure`` (NaN where unjudged), from row positions."""
    nq = len(ranked.qids)
    cut = ranked.k if measure.cutoff is None else np.minimum(ranked.k, measure.cutoff)
    inside = (pos >= 0) & (pos < cut[ranked.qcode])
    hit = inside & (ranked.grade > 0)
    q = ranked.qcode
    if measure.name == "R":
        hits = np.bincount(q[hit], minlength=nq).astype(float)
        out = np.divide(hits, ranked.n_rel, out=np.zeros(nq), where=ranked.n_rel > 0)
    elif measure.name == "P":
        out = np.bincount(q[hit], minlength=nq) / float(measure.cutoff)
    elif measure.name == "Hit":
        out = (np.bincount(q[hit], minlength=nq) > 0).astype(float)
    elif measure.name == "MRR":
        best = np.full(nq, np.inf)
        np.minimum.at(best, q[hit], pos[hit].astype(float))
        out = np.where(np.isfinite(best), 1.0 / (best + 1.0), 0.0)
    elif measure.name == "nDCG":
        dcg = np.bincount(q[hit], weights=ranked.grade[hit] / np.log2(pos[hit] + 2.0),
                          minlength=nq)
        out = np.zeros(nq)
        for i, ideal in enumerate(ranked.ideal):
            top = ideal[:measure.cutoff]
            if len(top):
                out[i] = dcg[i] / float(np.sum(top / np.log2(np.arange(2, len(top) + 2))))
    else:  # pragma: no cover - callers check
        raise ValueError(f"measure {measure} is not a relevance measure")
    return np.where(ranked.judged, out, np.nan)


def rank_frame(candidates: pd.DataFrame, decisions: pd.DataFrame, score: np.ndarray,
               measure: Measure | str) -> pd.Series:
    """Per-question ``measure`` when each question's candidates are ranked by ``score`` (the
    budgeted selection of live assembly: mandatory first, filtered last, ties by relevance
    then item id; the top ``k`` unfiltered). Used by the learned ranker's evaluation.

    Examples
    --------
    >>> cands = pd.DataFrame({"qid": ["q"] * 3, "item_id": ["a", "b", "c"],
    ...                       "relevance": [1.0, 0.5, 0.2], "mandatory": [False] * 3,
    ...                       "filtered": [False] * 3, "gold": [0.0, 0.0, 1.0]})
    >>> dec = pd.DataFrame({"qid": ["q"], "k": [2], "gold": [{"c": 1.0}]})
    >>> rank_frame(cands, dec, np.array([0.1, 0.2, 0.9]), "MRR").tolist()
    [1.0]
    """
    ranked = _Ranked(candidates, decisions)
    _, pos = ranked.positions(np.asarray(score, dtype=float))
    values = measure_ranked(ranked, pos, parse_measure(measure))
    keep = ~np.isnan(values)
    return pd.Series(values[keep], index=pd.Index(ranked.qids[keep], name="qid"))


class CounterfactualEvaluator:
    """Composite weights on the candidates of one replay (see the module notes).

    ``live`` is a replay with candidates recorded; ``measure`` one relevance measure.
    """

    def __init__(self, live: ReplayResult, measure: Measure | str) -> None:
        self.measure = parse_measure(measure)
        if not self.measure.needs_gold:
            raise ValueError(f"measure must be a relevance measure (R@k, P@k, nDCG@k, MRR, "
                             f"Hit@k), got {str(self.measure)!r}")
        if live.candidates.empty and not live.decisions.empty:
            raise ValueError("live has no recorded candidates (replay with "
                             "record_candidates=True)")
        self.live = live
        self.seen: list[frozenset[str]] = []
        cands, dec = live.candidates, live.decisions
        self.fast = (live.manifest.get("mode") == "router"
                     and live.manifest.get("measure_on", "surfaced") == "retrieved"
                     and not cands["mandatory"].astype(bool).any()
                     and dec["max_tokens"].isna().all())
        if self.fast:
            self._ranked = _Ranked(cands, dec)
            self._columns = {c: cands[c].to_numpy() for c in _COMPOSITE}
            self._columns["anchor_forced"] = self._columns["anchor_forced"].astype(bool)
            self._columns["pin_weight"] = self._columns["pin_weight"].astype(float)

    def values(self, config: SurfacingConfig, qids: Sequence[str]) -> pd.Series:
        """Per-question values under ``config``'s composite weights, for ``qids`` only."""
        self.seen.append(frozenset(qids))
        weights = CompositeWeights.from_config(config)
        if self.fast:
            score, _ = composite(self._columns, weights, False)
            _, pos = self._ranked.positions(score)
            values = pd.Series(measure_ranked(self._ranked, pos, self.measure),
                               index=self._ranked.qids)
        else:
            changes = {f: getattr(weights, f) for f in RESCORABLE}
            out = rescore(self.live, changes, [self.measure]).metrics
            values = out.set_index("qid")["value"]
        values = values.reindex(pd.Index(list(qids))).dropna()
        values.index.name = "qid"
        return values


def _replay_metrics(trace: Trace, config: SurfacingConfig, mode: str, k: int,
                    measure: str, seed: int, measure_on: str, analyzer: str) -> pd.DataFrame:
    """One replay's per-query metrics (module level so process pools and Dask can pickle it)."""
    return replay(trace, config, mode=mode, k=k, measures=[measure], seed=seed,
                  record_candidates=False, measure_on=measure_on, analyzer=analyzer,
                  progress=False).metrics


class ReplayEvaluator:
    """Any configuration field, by replaying the questions asked about (see the module notes).

    ``executor`` is the harness sweep's: ``"serial"``, ``"local"`` (a process pool of
    ``n_workers``) or ``"dask"`` (a ``LocalCluster`` of ``n_workers``, or ``address``).
    :meth:`values_many` evaluates a batch of configurations on the executor.

    ``reuse=True`` remembers each configuration's value of each question and replays only the
    questions not yet valued under it (``replayed`` logs what each replay received). A
    question's value does not depend on which other questions a trace holds (surfacing reads
    the store and never writes it), so this changes no number; it pays when a search over
    choices proposes the same configuration again (TPE does, in every fold).
    """

    def __init__(self, trace: Trace, measure: Measure | str, *, mode: str = "router",
                 k: int = 20, seed: int = 0, measure_on: str = "retrieved",
                 analyzer: str = "porter", executor: str = "serial", n_workers: int = 2,
                 address: str | None = None, reuse: bool = False) -> None:
        from memlab.harness.sweep import EXECUTORS
        self.measure = parse_measure(measure)
        if not self.measure.needs_gold:
            raise ValueError(f"measure must be a relevance measure, got {str(self.measure)!r}")
        if executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {executor!r}")
        check_n_workers(n_workers)
        check_address(address)
        self.trace, self.mode, self.k, self.seed = trace, mode, k, seed
        self.measure_on, self.analyzer = measure_on, analyzer
        self.executor, self.n_workers, self.address = executor, n_workers, address
        if not isinstance(reuse, bool):
            raise ValueError(f"reuse must be True or False, got {reuse!r}")
        self.seen: list[frozenset[str]] = []
        self.reuse = reuse
        self.replayed: list[frozenset[str]] = []
        self._known: dict[str, tuple[set[str], pd.Series]] = {}  # config key -> asked, values
        self._client = None
        self._cluster = None
        self._pool = None

    def _args(self, config: SurfacingConfig, qids: Sequence[str]) -> tuple:
        self.seen.append(frozenset(qids))
        self.replayed.append(frozenset(qids))
        return (subtrace(self.trace, qids), config, self.mode, self.k, str(self.measure),
                self.seed, self.measure_on, self.analyzer)

    @staticmethod
    def _series(frame: pd.DataFrame, qids: Sequence[str]) -> pd.Series:
        values = frame.set_index("qid")["value"].reindex(pd.Index(list(qids))).dropna()
        values.index.name = "qid"
        return values

    def values(self, config: SurfacingConfig, qids: Sequence[str]) -> pd.Series:
        return self.values_many([config], qids)[0]

    def values_many(self, configs: Sequence[SurfacingConfig], qids: Sequence[str]
                    ) -> list[pd.Series]:
        if not self.reuse:
            return [self._series(f, qids) for f in self._run([self._args(c, qids)
                                                              for c in configs])]
        keys = [json.dumps(c.to_dict(), sort_keys=True, default=str) for c in configs]
        jobs, owners = [], []
        for config, key in zip(configs, keys):
            self.seen.append(frozenset(qids))
            asked, _ = self._known.setdefault(key, (set(), pd.Series(dtype=float)))
            missing = [q for q in dict.fromkeys(qids) if q not in asked]
            if missing and key not in owners:
                asked.update(missing)  # claimed now: a repeat in this batch waits for it
                jobs.append((subtrace(self.trace, missing), config, self.mode, self.k,
                             str(self.measure), self.seed, self.measure_on, self.analyzer))
                owners.append(key)
                self.replayed.append(frozenset(missing))
        for key, frame in zip(owners, self._run(jobs)):
            asked, known = self._known[key]
            fresh = frame.set_index("qid")["value"]
            self._known[key] = (asked, pd.concat([known, fresh]) if len(known) else fresh)
        out = []
        for key in keys:
            values = self._known[key][1].reindex(pd.Index(list(qids))).dropna()
            values.index.name = "qid"
            out.append(values)
        return out

    def _run(self, jobs: list[tuple]) -> list[pd.DataFrame]:
        """Run replay jobs on the executor."""
        if not jobs:
            return []
        if self.executor == "serial" or len(jobs) == 1:
            frames = [_replay_metrics(*job) for job in jobs]
        elif self.executor == "local":
            if self._pool is None:
                from concurrent.futures import ProcessPoolExecutor
                self._pool = ProcessPoolExecutor(max_workers=self.n_workers)
            frames = list(self._pool.map(_replay_metrics, *zip(*jobs)))
        else:
            client = self._dask()
            frames = client.gather([client.submit(_replay_metrics, *job, pure=False)
                                    for job in jobs])
        return frames

    def _dask(self):
        if self._client is None:
            try:
                from distributed import Client, LocalCluster
            except ImportError:  # pragma: no cover - depends on the install
                raise ImportError("executor='dask' needs distributed: pip install "
                                  "'memlab[dist]'") from None
            if self.address is None:
                self._cluster = LocalCluster(n_workers=self.n_workers, threads_per_worker=1,
                                             processes=True, dashboard_address=None)
                self._client = Client(self._cluster)
            else:
                self._client = Client(self.address)
        return self._client

    def close(self) -> None:
        """Shut down the pool or the Dask client this evaluator started."""
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._client is not None:
            self._client.close()
            self._client = None
        if self._cluster is not None:
            self._cluster.close()
            self._cluster = None
