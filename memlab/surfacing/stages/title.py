"""The title stage: items whose title the query names (the workspace gazetteer) join."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.surfacing.stages.base import CandidateTable, QueryRun, RecipeStage, register_stage
from memlab.surfacing.stages.title_precision import supported_homonyms

__all__ = ["TitleMatch", "title_match"]


@register_stage
@dataclass(frozen=True, repr=False)
class TitleMatch(RecipeStage):
    """Eligible items whose title (metadata title/label/name, parenthetical suffix optional) the
    query names join (source ``title``), and relevance becomes ``(1 - weight) * relevance +
    weight * named``. ``weight=None``: the recipe's ``title_match_weight``; off at 0 and in
    legacy mode. With the recipe's ``title_homonym_support`` above 0, a title matched only
    without its parenthetical qualifier counts when the query supports it
    (:mod:`~memlab.surfacing.stages.title_precision`)."""

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
        if run.config.title_homonym_support > 0:  # issue 17: homonyms need the query's support
            named, dropped = supported_homonyms(ws, run.query, run.terms, named,
                                                run.config.title_homonym_support,
                                                ws.bm25_for(run.config.analyzer)[0])
            if dropped:
                run.notes["title_homonyms_dropped"] = ws.ids_of(np.array(dropped))
        run.notes["title_match"] = ws.ids_of(named)
        extra = tuple(table.attrs.get("extra_candidates", ())) + (named,)
        return table.add(named, "title", allowed=run.eligible).with_attrs(
            named=named, title_weight=self.setting(run, "weight"), extra_candidates=extra)


def title_match(weight: float | None = None) -> TitleMatch:
    """The title-match stage (``weight=None``: the recipe's ``title_match_weight``)."""
    return TitleMatch(weight)
