"""The graph stages of ``deep:multi-hop`` (SPEC §5): ``spread`` adds the items activation reaches
from the seeds, ``ppr`` gives every candidate its centrality. Seeds are the best ``seeds`` items
of the relevance over-fetch (``attrs["ranked_docs"]``). A stage whose configuration is None (and
whose recipe's is None too) is skipped and noted ``not_configured``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.graph.ppr import PPRConfig
from memlab.graph.spreading import SpreadConfig, SpreadResult, run_spread, run_spreads
from memlab.signals.bm25 import lookup_scores
from memlab.surfacing.ppr import surfacing_ppr
from memlab.surfacing.stages.base import CandidateTable, QueryRun, RecipeStage, register_stage
from memlab.surfacing.stages.retrieval import _check_count, _check_instance, normalised_relevance

__all__ = ["Spread", "PPR", "spread", "ppr"]

_NO_DOCS = np.empty(0, np.int64)


def _seeds(run: QueryRun, table: CandidateTable, stage: RecipeStage) -> np.ndarray:
    return table.attrs.get("ranked_docs", _NO_DOCS)[:stage.setting(run, "seeds")]


def _merge_lift(table: CandidateTable, nodes: np.ndarray, values: np.ndarray) -> CandidateTable:
    """Items ``nodes`` will have relevance at least ``values`` (kept by item, so that an item
    that joins later, e.g. an anchor, is lifted too)."""
    old_nodes, old_values = table.attrs.get("relevance_lift", (_NO_DOCS, np.empty(0)))
    all_nodes = np.concatenate([old_nodes, nodes])
    all_values = np.concatenate([old_values, values])
    order = np.lexsort((-all_values, all_nodes))  # per node, the largest value first
    all_nodes, all_values = all_nodes[order], all_values[order]
    first = np.ones(len(all_nodes), dtype=bool)
    first[1:] = all_nodes[1:] != all_nodes[:-1]
    keep = first & (all_values > 0)
    return table.with_attrs(relevance_lift=(all_nodes[keep], all_values[keep]))


def _propagate(results: list[SpreadResult], relevance: list[float], damping: float
               ) -> tuple[np.ndarray, np.ndarray]:
    """The items the per-seed ``results`` reached and the largest ``relevance[seed] * damping
    ** hops`` each got, positive values only, in order of first reach (seeds in order, each
    seed's results in its order): what updating ``{item: value}`` seed by seed keeps."""
    powers: dict[int, float] = {}
    parts_nodes, parts_values = [], []
    for result, rel in zip(results, relevance):
        if not len(result.indices):
            continue
        hops = result.hops.tolist()
        for h in hops:
            if h not in powers:
                powers[h] = damping ** h
        parts_nodes.append(result.indices)
        # the same float product as ``rel * damping ** h`` per item
        parts_values.append(np.array([rel * powers[h] for h in hops], dtype=np.float64))
    if not parts_nodes:
        return _NO_DOCS, np.empty(0)
    nodes, values = np.concatenate(parts_nodes), np.concatenate(parts_values)
    positive = values > 0
    nodes, values, at = nodes[positive], values[positive], np.flatnonzero(positive)
    if not len(nodes):
        return _NO_DOCS, np.empty(0)
    order = np.lexsort((at, nodes))  # by item, then first reach
    nodes, values = nodes[order], values[order]
    starts = np.flatnonzero(np.concatenate(([True], nodes[1:] != nodes[:-1])))
    best = np.maximum.reduceat(values, starts)
    first_reach = at[order][starts]
    back = np.argsort(first_reach, kind="stable")
    return nodes[starts][back], best[back]


@register_stage
@dataclass(frozen=True, repr=False)
class Spread(RecipeStage):
    """Spreading activation from the seeds; the items reached join (source ``spread``).

    ``relevance="seed"``: spread-only items get relevance ``damping ** hops`` (SPEC §4.2);
    ``"propagated"``: each seed sends its own relevance times ``damping ** hops``, lifting every
    item reached, retrieved or not, to at least that. None: the recipe's ``spreading``,
    ``spread_relevance`` and ``multi_hop_seeds``.
    """

    name: ClassVar[str] = "spread"
    phase: ClassVar[str] = "expand"
    recipe: ClassVar[dict] = {"config": "spreading", "relevance": "spread_relevance",
                              "seeds": "multi_hop_seeds"}
    loaders: ClassVar[dict] = {"config": SpreadConfig.from_dict}
    config: SpreadConfig | None = None
    relevance: str | None = None
    seeds: int | None = None

    def __post_init__(self) -> None:
        if self.relevance not in (None, "seed", "propagated"):
            raise ValueError(f"spread: relevance must be None, 'seed' or 'propagated', "
                             f"got {self.relevance!r}")
        _check_count("spread", "seeds", self.seeds)
        _check_instance("spread", "config", self.config, SpreadConfig)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        seeds = _seeds(run, table, self)
        run.notes["multi_hop_seeds"] = run.ws.ids_of(seeds)
        config = self.setting(run, "config")
        if config is None:
            run.notes["spreading"] = "not_configured"
            return table
        eligible = run.eligible
        mode = self.setting(run, "relevance")
        if mode == "seed":
            result = run_spread(run.ws, seeds, config)
            run.notes["spreading"] = result.info()
            return table.add(result.indices, "spread",
                             relevance=config.damping ** result.hops.astype(float),
                             allowed=eligible)
        seed_relevance = normalised_relevance(table, seeds)
        results = run_spreads(run.ws, [seeds[i:i + 1] for i in range(len(seeds))], config)
        infos = [result.info() for result in results]
        elapsed = 0.0
        for result in results:
            elapsed += result.elapsed_ms
        nodes, values = _propagate(results, seed_relevance.tolist(), config.damping)
        # the seeds' spreads search together under one deadline (run_spreads): the overrun is
        # their total time over the one budget
        run.notes["spreading"] = {**infos[0], "elapsed_ms": elapsed,
                                  "results": len(nodes), "per_seed": len(infos),
                                  "budget_exhausted": any(i["budget_exhausted"] for i in infos),
                                  "overrun_ms": 0.0 if config.budget_ms is None
                                  else max(0.0, elapsed - config.budget_ms)} \
            if infos else {"results": 0}
        table = table.add(nodes, "spread", relevance=values, allowed=eligible)
        return _merge_lift(table, nodes, values)


@register_stage
@dataclass(frozen=True, repr=False)
class PPR(RecipeStage):
    """Personalized PageRank from the seeds: every candidate's ``centrality_raw`` is its mass,
    ``centrality`` that over the largest among candidates. None: the recipe's ``ppr`` and
    ``multi_hop_seeds``. Runs through :func:`memlab.surfacing.ppr.surfacing_ppr`, which applies
    the node cap, the cache, the concurrency slots and the time budget and notes each decision
    (``notes["ppr"]``); a method that does not converge is noted (``error``) and leaves
    centrality at 0."""

    name: ClassVar[str] = "ppr"
    phase: ClassVar[str] = "adjust"
    recipe: ClassVar[dict] = {"config": "ppr", "seeds": "multi_hop_seeds"}
    loaders: ClassVar[dict] = {"config": PPRConfig.from_dict}
    config: PPRConfig | None = None
    seeds: int | None = None

    def __post_init__(self) -> None:
        _check_count("ppr", "seeds", self.seeds)
        _check_instance("ppr", "config", self.config, PPRConfig)

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        config = self.setting(run, "config")
        if config is None:
            run.notes["ppr"] = "not_configured"
            return table
        result, run.notes["ppr"] = surfacing_ppr(run.ws, _seeds(run, table, self), config,
                                                 lock=run.lock)
        if result is None:  # did not converge (noted): centrality stays 0
            return table
        order = np.argsort(result.indices)
        raw = lookup_scores(result.indices[order], result.mass[order], table.idx)
        top = raw.max() if len(raw) else 0.0
        return table.with_columns(centrality_raw=raw,
                                  centrality=raw / top if top > 0 else np.zeros_like(raw))


def spread(config: SpreadConfig | None = None, relevance: str | None = None,
           seeds: int | None = None) -> Spread:
    """The spreading-activation stage (None: the recipe's settings)."""
    return Spread(config, relevance, seeds)


def ppr(config: PPRConfig | None = None, seeds: int | None = None) -> PPR:
    """The Personalized PageRank stage (None: the recipe's settings)."""
    return PPR(config, seeds)
