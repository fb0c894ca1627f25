"""A strategy written as a composition of memlab's stages plus one new stage.

``decisions_first`` answers like ``fast:recency`` (the relevance over-fetch plus the five most
recently touched items) and then boosts every candidate whose metadata marks it as a decision
(``metadata_boost("kind", "decision", 1.0)``: multiplier ``1 + 1.0``). Importing this file
registers the stage and the strategy; a recipe then names the strategy::

    import decisions_first  # noqa: F401  (registers "decisions_first")
    from memlab import DEFAULT, Memory
    recipe = DEFAULT.replace(strategies={**dict(DEFAULT.strategies),
                                         "fast:recency": "decisions_first"})
    mem = Memory(config=recipe, surfacing_mode="router")
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.surfacing.stages import (CandidateTable, QueryRun, Stage, bm25, budget, composite,
                                     fuse, mandatory, recent, register_stage, signals,
                                     title_match)
from memlab.surfacing.strategies import register_strategy


@register_stage
@dataclass(frozen=True, repr=False)
class MetadataBoost(Stage):
    """Candidates whose ``metadata[key] == value`` get their multiplier times ``1 + boost``."""

    name: ClassVar[str] = "metadata_boost"
    phase: ClassVar[str] = "adjust"
    key: str = "kind"
    value: str = "decision"
    boost: float = 1.0

    def __post_init__(self) -> None:
        if not isinstance(self.key, str) or not self.key:
            raise ValueError(f"metadata_boost: key must be a non-empty string, got {self.key!r}")
        if isinstance(self.boost, bool) or not isinstance(self.boost, (int, float)) \
                or not self.boost >= 0:
            raise ValueError(f"metadata_boost: boost must be a number >= 0, got {self.boost!r}")

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        hit = np.array([run.ws.item(i).metadata.get(self.key) == self.value
                        for i in table.idx.tolist()], dtype=bool)
        return table.with_columns(multiplier=np.where(hit, table.multiplier * (1.0 + self.boost),
                                                      table.multiplier))


def metadata_boost(key: str = "kind", value: str = "decision", boost: float = 1.0
                   ) -> MetadataBoost:
    return MetadataBoost(key, value, boost)


DECISIONS_FIRST = (bm25() >> title_match() >> fuse() >> recent(5) >> mandatory() >> signals()
                   >> metadata_boost("kind", "decision", 1.0) >> composite() >> budget())

register_strategy("decisions_first", DECISIONS_FIRST)
