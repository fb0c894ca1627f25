"""Measures named by strings (SPEC §7), parsed, never evaluated.

``R@k`` (recall: relevant items in the top k over all relevant), ``P@k`` (relevant in the top k
over k), ``nDCG@k`` (linear gains, log2 discount, as trec_eval and ir_measures), ``MRR`` or
``MRR@k`` (reciprocal rank of the first relevant item), ``Hit@k`` (1 if any relevant item is in
the top k), ``Tokens`` (tokens surfaced) and ``Latency`` (total milliseconds). A measure is a
hashable value whose ``str`` is its name, so it can name a column.

Relevance measures are computed on the surfaced items in response order, with graded gold
(``{item_id: grade}``; a list means grade 1); a query without gold has no relevance measures
(it is left out, as trec_eval leaves out queries without judgements).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

__all__ = ["Measure", "parse_measure", "parse_measures", "DEFAULT_MEASURES", "RELEVANCE_MEASURES",
           "evaluate"]

RELEVANCE_MEASURES = ("R", "P", "nDCG", "MRR", "Hit")
_CUTOFF_REQUIRED = {"R", "P", "nDCG", "Hit"}
_PATTERN = re.compile(r"^(R|P|nDCG|MRR|Hit|Tokens|Latency)(?:@([1-9][0-9]*))?$")


@dataclass(frozen=True, order=True)
class Measure:
    """A parsed measure: ``name`` and ``cutoff`` (None where the measure has none)."""

    name: str
    cutoff: int | None = None

    def __str__(self) -> str:
        return self.name if self.cutoff is None else f"{self.name}@{self.cutoff}"

    def __repr__(self) -> str:
        return f"Measure({str(self)!r})"

    @property
    def needs_gold(self) -> bool:
        return self.name in RELEVANCE_MEASURES

    def compute(self, ranking: Sequence[str], gold: Mapping[str, float] | None, *,
                tokens: float = math.nan, latency_ms: float = math.nan) -> float | None:
        """The measure for one query (None when it is undefined there: no gold)."""
        if self.name == "Tokens":
            return float(tokens)
        if self.name == "Latency":
            return float(latency_ms)
        relevant = {k: float(v) for k, v in (gold or {}).items() if v > 0}
        if not relevant:
            return None
        top = list(ranking) if self.cutoff is None else list(ranking)[:self.cutoff]
        hits = [item for item in top if item in relevant]
        if self.name == "R":
            return len(hits) / len(relevant)
        if self.name == "P":
            return len(hits) / self.cutoff
        if self.name == "Hit":
            return 1.0 if hits else 0.0
        if self.name == "MRR":
            for rank, item in enumerate(top, start=1):
                if item in relevant:
                    return 1.0 / rank
            return 0.0
        dcg = sum(relevant.get(item, 0.0) / math.log2(rank + 1)
                  for rank, item in enumerate(top, start=1))
        ideal = sorted(relevant.values(), reverse=True)[:self.cutoff]
        idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
        return dcg / idcg


def parse_measure(text: str | Measure) -> Measure:
    """``"nDCG@10"`` → ``Measure("nDCG", 10)``; ValueError naming the text otherwise.

    Examples
    --------
    >>> parse_measure("nDCG@10"), parse_measure("MRR")
    (Measure('nDCG@10'), Measure('MRR'))
    >>> parse_measure("R")
    Traceback (most recent call last):
    ...
    ValueError: measure 'R' needs a cutoff, as in 'R@10'
    """
    if isinstance(text, Measure):
        return text
    match = _PATTERN.match(text) if isinstance(text, str) else None
    if match is None:
        raise ValueError(f"measure must look like R@5, P@5, nDCG@10, MRR, MRR@10, Hit@5, Tokens "
                         f"or Latency, got {text!r}")
    name, cutoff = match.group(1), match.group(2)
    if name in _CUTOFF_REQUIRED and cutoff is None:
        raise ValueError(f"measure {text!r} needs a cutoff, as in '{name}@10'")
    if name in ("Tokens", "Latency") and cutoff is not None:
        raise ValueError(f"measure {text!r} takes no cutoff")
    return Measure(name, None if cutoff is None else int(cutoff))


def parse_measures(measures: Iterable[str | Measure] | str) -> list[Measure]:
    if isinstance(measures, (str, Measure)):
        measures = [measures]
    out = [parse_measure(m) for m in measures]
    if not out:
        raise ValueError("measures must name at least one measure")
    return list(dict.fromkeys(out))


DEFAULT_MEASURES = parse_measures(["R@2", "R@5", "R@10", "MRR", "nDCG@10"])


def evaluate(measures: Sequence[Measure], ranking: Sequence[str], gold: Mapping[str, float] | None,
             *, tokens: float = math.nan, latency_ms: float = math.nan) -> dict[str, float]:
    """Every defined measure for one query, by name."""
    out = {}
    for m in measures:
        value = m.compute(ranking, gold, tokens=tokens, latency_ms=latency_ms)
        if value is not None:
            out[str(m)] = value
    return out
