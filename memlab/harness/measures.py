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
from typing import Callable, Iterable, Mapping, Sequence

from memlab._registry import register

__all__ = ["Measure", "MeasureDef", "MEASURES", "register_measure", "parse_measure",
           "parse_measures", "DEFAULT_MEASURES", "RELEVANCE_MEASURES", "evaluate",
           "evaluate_frame", "dedupe", "MeasureRangeError", "MEASURE_ON", "check_measure_on"]

MEASURE_ON = ("retrieved", "surfaced")


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


# -- the registry ----------------------------------------------------------------------------

@dataclass(frozen=True)
class MeasureDef:
    """How a measure name is computed.

    ``fn`` gets, for a relevance measure (``needs_gold``), the deduplicated ranking cut at the
    cutoff, the relevant items' grades (every grade > 0) and the cutoff; for another measure,
    the query's ``context`` (``{"tokens": ..., "latency_ms": ...}``). ``cutoff`` is
    ``"required"``, ``"optional"`` or ``"none"``.
    """

    name: str
    fn: Callable[..., float]
    cutoff: str = "required"
    needs_gold: bool = True


MEASURES: dict[str, MeasureDef] = {}


def register_measure(name: str, fn: Callable[..., float], *, cutoff: str = "required",
                     needs_gold: bool = True, replace: bool = False) -> None:
    """Make ``name`` (and ``name@k``) parse as a measure computed by ``fn``; a name already
    registered is refused (ValueError) unless ``replace=True``.

    Examples
    --------
    >>> register_measure("First", lambda top, relevant, k: float(top[:1] == list(relevant)[:1]),
    ...                  cutoff="none")
    >>> parse_measure("First").compute(["a", "b"], {"a": 1})
    1.0
    >>> del MEASURES["First"]
    """
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", name):
        raise ValueError(f"name must be a word (letters, digits, _), got {name!r}")
    if cutoff not in ("required", "optional", "none"):
        raise ValueError(f"cutoff must be 'required', 'optional' or 'none', got {cutoff!r}")
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {fn!r}")
    register(MEASURES, name, MeasureDef(name, fn, cutoff, bool(needs_gold)), what="measure",
             check_callable=False, replace=replace)


def _recall(top, relevant, cutoff):
    return sum(item in relevant for item in top) / len(relevant)


def _precision(top, relevant, cutoff):
    return sum(item in relevant for item in top) / cutoff


def _hit(top, relevant, cutoff):
    return 1.0 if any(item in relevant for item in top) else 0.0


def _reciprocal_rank(top, relevant, cutoff):
    for rank, item in enumerate(top, start=1):
        if item in relevant:
            return 1.0 / rank
    return 0.0


def _ndcg(top, relevant, cutoff):
    dcg = sum(relevant.get(item, 0.0) / math.log2(rank + 1)
              for rank, item in enumerate(top, start=1))
    ideal = sorted(relevant.values(), reverse=True)[:cutoff]
    idcg = sum(g / math.log2(rank + 1) for rank, g in enumerate(ideal, start=1))
    return dcg / idcg


for _name, _fn, _cut in (("R", _recall, "required"), ("P", _precision, "required"),
                         ("nDCG", _ndcg, "required"), ("MRR", _reciprocal_rank, "optional"),
                         ("Hit", _hit, "required")):
    register_measure(_name, _fn, cutoff=_cut)
register_measure("Tokens", lambda context: float(context["tokens"]), cutoff="none",
                 needs_gold=False)
register_measure("Latency", lambda context: float(context["latency_ms"]), cutoff="none",
                 needs_gold=False)

RELEVANCE_MEASURES = ("R", "P", "nDCG", "MRR", "Hit")  # the built-in relevance measures
_PATTERN = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)(?:@([1-9][0-9]*))?$")


@dataclass(frozen=True, order=True)
class Measure:
    """A parsed measure: ``name`` (a key of :data:`MEASURES`) and ``cutoff`` (None where the
    measure has none). Hashable; its ``str`` is its name (``"nDCG@10"``)."""

    name: str
    cutoff: int | None = None

    def __str__(self) -> str:
        return self.name if self.cutoff is None else f"{self.name}@{self.cutoff}"

    def __repr__(self) -> str:
        return f"Measure({str(self)!r})"

    @property
    def definition(self) -> MeasureDef:
        return MEASURES[self.name]

    @property
    def needs_gold(self) -> bool:
        return MEASURES[self.name].needs_gold

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
        definition = MEASURES[self.name]
        if not definition.needs_gold:
            return definition.fn({"tokens": tokens, "latency_ms": latency_ms})
        if not gold:
            return None  # not judged: left out, as trec_eval leaves out queries without qrels
        relevant = {k: float(v) for k, v in gold.items() if v > 0}
        if not relevant:
            return 0.0  # judged, nothing relevant: 0 on every measure, as trec_eval
        ranking = dedupe(ranking)
        top = ranking if self.cutoff is None else ranking[:self.cutoff]
        return definition.fn(top, relevant, self.cutoff)

    def calc(self, run, qrels):
        """The measure per query over a run frame (``qid``, ``item_id``, ``rank``) and a qrels
        frame (``qid``, ``item_id``, ``grade``): a frame ``qid``, ``value`` (see
        :func:`evaluate_frame`)."""
        frame = evaluate_frame([self], run, qrels)
        return frame[["qid", "value"]].reset_index(drop=True)


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
    definition = MEASURES.get(match.group(1)) if match is not None else None
    if definition is None:
        raise ValueError(f"measure must look like R@5, P@5, nDCG@10, MRR, MRR@10, Hit@5, Tokens "
                         f"or Latency (registered: {sorted(MEASURES)}), got {text!r}")
    name, cutoff = match.group(1), match.group(2)
    if definition.cutoff == "required" and cutoff is None:
        raise ValueError(f"measure {text!r} needs a cutoff, as in '{name}@10'")
    if definition.cutoff == "none" and cutoff is not None:
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


def evaluate_frame(measures: Iterable[str | Measure] | str, run, qrels, *, context=None,
                   check_range: bool = True):
    """Measures per query, the ir_measures way: a run frame in, a tidy frame out.

    Parameters
    ----------
    measures : names or Measure objects
    run : DataFrame
        ``qid``, ``item_id``, ``rank`` (0 or 1 first; only the order within a query counts).
    qrels : DataFrame
        ``qid``, ``item_id``, ``grade`` (>= 0). A query without rows here is unjudged; a
        judged query without rows in ``run`` is scored as an empty ranking.
    context : DataFrame, optional
        ``qid`` and ``tokens``/``latency_ms`` for the ``Tokens`` and ``Latency`` measures.

    Returns
    -------
    DataFrame
        ``qid``, ``measure``, ``value``: one row per query and defined measure, queries in order
        of first appearance in ``run`` (then ``qrels``), measures in the order given. The same numbers as
        :func:`evaluate` per query (it is what this calls).

    Examples
    --------
    >>> import pandas as pd
    >>> run = pd.DataFrame({"qid": ["q1", "q1", "q2"], "item_id": ["a", "b", "c"],
    ...                     "rank": [1, 2, 1]})
    >>> qrels = pd.DataFrame({"qid": ["q1", "q2"], "item_id": ["b", "x"], "grade": [1, 1]})
    >>> evaluate_frame(["R@1", "MRR"], run, qrels)
      qid measure  value
    0  q1     R@1    0.0
    1  q1     MRR    0.5
    2  q2     R@1    0.0
    3  q2     MRR    0.0
    """
    import pandas as pd

    parsed = parse_measures(measures)
    for name, frame, cols in (("run", run, ("qid", "item_id", "rank")),
                              ("qrels", qrels, ("qid", "item_id", "grade"))):
        missing = [c for c in cols if c not in getattr(frame, "columns", ())]
        if missing:
            raise ValueError(f"{name} must be a DataFrame with columns {list(cols)}; "
                             f"missing {missing}")
    gold: dict = {}
    for qid, item, grade in zip(qrels["qid"].tolist(), qrels["item_id"].tolist(),
                                qrels["grade"].tolist()):
        gold.setdefault(qid, {})[item] = grade
    extra = {}
    if context is not None:
        for row in context.to_dict("records"):
            extra[row["qid"]] = row
    rows = []
    ordered = run.sort_values(["rank"], kind="stable")
    by_qid = {qid: group["item_id"].tolist()
              for qid, group in ordered.groupby("qid", sort=False)}
    for qid in dict.fromkeys(run["qid"].tolist() + list(gold)):
        ctx = extra.get(qid, {})
        by_qid.setdefault(qid, [])
        values = evaluate(parsed, by_qid[qid], gold.get(qid), qid=qid,
                          tokens=ctx.get("tokens", math.nan),
                          latency_ms=ctx.get("latency_ms", math.nan)) if check_range else {
            str(m): v for m in parsed
            if (v := m.compute(by_qid[qid], gold.get(qid))) is not None}
        rows.extend((qid, name, value) for name, value in values.items())
    return pd.DataFrame(rows, columns=["qid", "measure", "value"])
