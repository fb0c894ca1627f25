"""Measures named by strings (SPEC §7), parsed, never evaluated.

``R@k`` (recall: relevant items in the top k over all relevant), ``P@k`` (relevant in the top k
over k), ``nDCG@k`` (graded gains, log2 discount, as trec_eval and ir_measures), ``MRR`` or
``MRR@k`` (reciprocal rank of the first relevant item), ``Hit@k`` (1 if any relevant item is in
the top k), ``Tokens`` (tokens surfaced) and ``Latency`` (total milliseconds). A measure is a
hashable value whose ``str`` is its name, so it can name a column.

Semantics are trec_eval's (and so ir_measures'), edge cases included, and a hypothesis test
checks them against ir_measures (``R@k`` = ``R@k``, ``P@k`` = ``P@k``, ``nDCG@k`` = ``nDCG@k``,
``MRR`` = ``RR``, ``MRR@k`` = ``RR@k``, ``Hit@k`` = ``Success@k``):

* gold is graded, ``{item_id: grade}`` with grades >= 0 (a list means grade 1 each); an item is
  relevant when its grade is above 0 (for integer grades, trec_eval's relevance level 1) and
  gains its grade in nDCG;
* a ranking is deduplicated before it is scored: the first occurrence of an item wins and later
  ones are dropped (trec_eval reads a run as one score per item);
* a query without judgements (no gold, or empty gold) has no relevance measures: it is left out
  of the means, as trec_eval leaves out queries missing from the qrels (replay counts them in its
  manifest as ``unjudged_queries``);
* a query judged with no relevant item (every grade 0) scores 0 on every relevance measure, as
  in trec_eval, and stays in the means;
* every relevance measure lies in [0, 1]; :func:`evaluate` (which replay and the counterfactual
  re-scoring call for every query) raises :class:`MeasureRangeError` otherwise.

Which ranking is scored is the replay's ``measure_on`` (:data:`MEASURE_ON`): ``"retrieved"``
(the default) leaves the session's mandatory items (anchors and pins, which surface whatever the
query) out of the ranking the measures read and out of the gold (a query whose only gold was
mandatory is then unjudged); ``"surfaced"`` scores every surfaced item in response order
against all of the gold.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Iterable, Mapping, Sequence

__all__ = ["Measure", "parse_measure", "parse_measures", "DEFAULT_MEASURES", "RELEVANCE_MEASURES",
           "evaluate", "dedupe", "MeasureRangeError", "MEASURE_ON", "check_measure_on"]

MEASURE_ON = ("retrieved", "surfaced")

RELEVANCE_MEASURES = ("R", "P", "nDCG", "MRR", "Hit")
_CUTOFF_REQUIRED = {"R", "P", "nDCG", "Hit"}
_PATTERN = re.compile(r"^(R|P|nDCG|MRR|Hit|Tokens|Latency)(?:@([1-9][0-9]*))?$")


class MeasureRangeError(RuntimeError):
    """A relevance measure left [0, 1]: a defect in memlab, never the user's input."""


def check_measure_on(measure_on: str) -> str:
    """``measure_on`` itself, or ValueError naming the argument and the value."""
    if not isinstance(measure_on, str) or measure_on not in MEASURE_ON:
        raise ValueError(f"measure_on must be one of {list(MEASURE_ON)}, got {measure_on!r}")
    return measure_on


def dedupe(ranking: Sequence[str]) -> list[str]:
    """``ranking`` without repeats, the first occurrence of each item kept (trec_eval's run).

    Examples
    --------
    >>> dedupe(["a", "b", "a", "c", "b"])
    ['a', 'b', 'c']
    """
    return list(dict.fromkeys(ranking))


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
        """The measure for one query; None when it is undefined there (no judgements).

        ``ranking`` is deduplicated first (the first occurrence wins); a query whose gold
        judges no item relevant scores 0 (see the module notes).

        Examples
        --------
        >>> recall, ndcg = parse_measure("R@2"), parse_measure("nDCG@2")
        >>> recall.compute(["a", "a", "b"], {"a": 1}), ndcg.compute(["a", "a", "b"], {"a": 1})
        (1.0, 1.0)
        >>> recall.compute(["a"], {"a": 0}), recall.compute(["a"], {}) is None
        (0.0, True)
        """
        if self.name == "Tokens":
            return float(tokens)
        if self.name == "Latency":
            return float(latency_ms)
        if not gold:
            return None  # not judged: left out, as trec_eval leaves out queries without qrels
        relevant = {k: float(v) for k, v in gold.items() if v > 0}
        if not relevant:
            return 0.0  # judged, nothing relevant: 0 on every measure, as trec_eval
        ranking = dedupe(ranking)
        top = ranking if self.cutoff is None else ranking[:self.cutoff]
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
             *, tokens: float = math.nan, latency_ms: float = math.nan,
             qid: str | None = None) -> dict[str, float]:
    """Every defined measure for one query, by name.

    Raises
    ------
    MeasureRangeError
        A relevance measure outside [0, 1] (the message names the query ``qid`` and measure).
    """
    out = {}
    for m in measures:  # each measure deduplicates the ranking itself
        value = m.compute(ranking, gold, tokens=tokens, latency_ms=latency_ms)
        if value is None:
            continue
        if m.needs_gold and not 0.0 <= value <= 1.0:  # also catches NaN
            raise MeasureRangeError(f"measure {m} of query {qid!r} is {value!r}, outside "
                                    f"[0, 1]")
        out[str(m)] = value
    return out
