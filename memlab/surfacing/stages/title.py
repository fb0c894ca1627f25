"""The title stage: items whose title the query names (the workspace gazetteer) join."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.surfacing.stages.base import CandidateTable, QueryRun, RecipeStage, register_stage

__all__ = ["TitleMatch", "title_match"]


@register_stage
@dataclass(frozen=True, repr=False)
class TitleMatch(RecipeStage):
    """Eligible items whose title (metadata title/label/name, parenthetical suffix optional) the
    query names join (source ``title``), and relevance becomes ``(1 - weight) * relevance +
    weight * named``. ``weight=None``: the recipe's ``title_match_weight``; off at 0 and in
    legacy mode."""

    name: ClassVar[str] = "title_match"
    phase: ClassVar[str] = "retrieve"
    recipe: ClassVar[dict] = {"weight": "title_match_weight"}
    weight: float | None = None

    def __post_init__(self) -> None:
        w = self.weight
        if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float))
                              or not 0.0 <= w <= 1.0):
            raise ValueError(f"title_match: weight must be None or in [0, 1], got {w!r}")

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        return not run.legacy and self.setting(run, "weight") > 0

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        ws = run.ws
        named = np.asarray(ws.titles().items_named(run.query), dtype=np.int64)
        named = named[run.eligible[named]] if len(named) else named
        run.notes["title_match"] = ws.ids_of(named)
        extra = tuple(table.attrs.get("extra_candidates", ())) + (named,)
        return table.add(named, "title", allowed=run.eligible).with_attrs(
            named=named, title_weight=self.setting(run, "weight"), extra_candidates=extra)


def title_match(weight: float | None = None) -> TitleMatch:
    """The title-match stage (``weight=None``: the recipe's ``title_match_weight``)."""
    return TitleMatch(weight)
