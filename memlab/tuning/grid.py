"""Grouped-CV choice among a few named configurations: the estimate of "pick the best on the
other folds" for options too costly to search trial by trial (each is a full replay).

:func:`cv_choose` replays every candidate configuration once on the whole trace, then for each
fold picks the candidate with the best mean on the *other* folds' questions and scores it on
the held-out fold. One replay per candidate is enough because surfacing reads the store and
never writes it (``get_working_context`` records no retrieval), so a question's value does
not depend on which other questions were asked; what a fold's choice may read is only the
other folds' values, and :func:`choose_by_folds` (the pure part, tested with planted values)
never reads anything else. The folds are :func:`~memlab.tuning.search.grouped_folds`', the
same as :func:`~memlab.tuning.tune` and :func:`~memlab.tuning.cv_fixed` use for one seed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from memlab.harness.measures import parse_measure
from memlab.harness.replay import ReplayResult, replay, resolve_config
from memlab.harness.trace import Trace
from memlab.tuning.search import (BOUNDS, _check_categories, _check_common, _groups,
                                  _question_frame, _t_interval, grouped_folds)

__all__ = ["choose_by_folds", "cv_choose", "ChooseResult"]


def choose_by_folds(values: pd.DataFrame, split: Sequence[Sequence[str]]
                    ) -> tuple[list[str], list[set[str]]]:
    """Per fold, the column of ``values`` with the best mean over the other folds' rows.

    ``values`` has one row per question (index: question id) and one column per candidate, in
    order of preference: a tie goes to the earlier column (list the base first, and it wins
    ties). Returns the chosen columns and, per fold, the questions its choice read.

    Examples
    --------
    >>> v = pd.DataFrame({"base": [0.5, 0.5, 0.0, 1.0], "new": [1.0, 1.0, 1.0, 0.0]},
    ...                  index=["a", "b", "c", "d"])
    >>> choose_by_folds(v, [["a", "b"], ["c", "d"]])[0]
    ['base', 'new']
    """
    if not isinstance(values, pd.DataFrame) or values.shape[1] == 0:
        raise ValueError(f"values must be a DataFrame with one column per candidate, "
                         f"got {type(values).__name__}")
    chosen, read = [], []
    for test in split:
        test_set = set(test)
        train = [q for q in values.index if q not in test_set]
        means = values.loc[train].mean(axis=0, skipna=True).fillna(-np.inf).to_numpy()
        chosen.append(str(values.columns[int(np.argmax(means))]))  # first of the best
        read.append(set(train))
    return chosen, read


@dataclass
class ChooseResult:
    """What :func:`cv_choose` measured.

    ``table``: per measure the CV estimate (``cv_mean``: mean of held-out fold scores of the
    candidate each fold chose; ``ci_low``/``ci_high``: 95 % t-interval over folds, clipped to
    [0, 1]), the base on the same folds (``base_cv_mean``), the paired difference
    (``diff_mean``, ``diff_ci_low``, ``diff_ci_high``, ``folds_better``), and ``in_sample``:
    the candidate chosen on every question, scored on them (``in_sample_choice``): an
    in-sample number, labelled so. ``folds``: per fold the choice and each measure's held-out
    score and base score. ``values``: per measure, the per-question values of every candidate.
    ``audit``: per fold, the questions its choice read and its held-out questions.
    """

    table: pd.DataFrame
    folds: pd.DataFrame
    values: dict[str, pd.DataFrame]
    audit: pd.DataFrame
    replays: dict[str, ReplayResult] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        rows = "; ".join(f"{r.measure} CV {r.cv_mean:.3f} (base {r.base_cv_mean:.3f})"
                         for r in self.table.itertuples())
        return f"ChooseResult({rows}; chosen {self.folds['chosen'].tolist()})"


def cv_choose(trace: Trace, candidates: Mapping[str, Any], *, base: str | None = None,
              measures: Iterable[str] = ("R@10",), select_on: str | None = None,
              folds: int = 5, group_by: str = "workspace", seed: int = 0, k: int = 20,
              categories: Iterable[Any] | None = None, mode: str = "router",
              measure_on: str = "retrieved", analyzer: str = "porter",
              replays: Mapping[str, ReplayResult] | None = None) -> ChooseResult:
    """Grouped ``folds``-fold CV of choosing among ``candidates`` (see the module notes).

    Parameters
    ----------
    trace : Trace
        The dev trace; its judged questions (in ``categories``) are dealt into folds.
    candidates : mapping of label -> SurfacingConfig or recipe name
        In order of preference (a tie goes to the earlier one).
    base : str, optional
        The label compared with (paired, per fold); default the first candidate.
    measures : iterable of str
        Relevance measures to report; ``select_on`` (default the first) is the one each
        fold's choice maximises.
    replays : mapping of label -> ReplayResult, optional
        Replays of ``trace`` already made (for labels present, with the measures); the rest
        are replayed here.

    Returns
    -------
    ChooseResult

    Raises
    ------
    ValueError
        A bad argument, named with its value.

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> from memlab.surfacing.config import DEFAULT
    >>> out = cv_choose(synthetic_trace(300, 40, seed=1),
    ...                 {"default": DEFAULT, "no-graph": DEFAULT.replace(ppr=None)},
    ...                 measures=["MRR"], folds=2, group_by="question")
    >>> list(out.table.columns[:4]), len(out.folds)
    (['measure', 'cv_mean', 'ci_low', 'ci_high'], 2)
    """
    measures = [str(parse_measure(m)) for m in measures]
    if not measures:
        raise ValueError("measures must name at least one relevance measure, got []")
    for m in measures:
        _check_common(trace, m, folds, 1, group_by, seed)
    select_on = measures[0] if select_on is None else str(parse_measure(select_on))
    if select_on not in measures:
        raise ValueError(f"select_on must be one of measures {measures}, got {select_on!r}")
    if not isinstance(candidates, Mapping) or not candidates:
        raise ValueError(f"candidates must be a non-empty mapping of label -> configuration, "
                         f"got {candidates!r}")
    labels = [str(label) for label in candidates]
    base = labels[0] if base is None else base
    if base not in labels:
        raise ValueError(f"base must be one of the candidates' labels {labels}, got {base!r}")
    configs = {str(label): resolve_config(c) for label, c in candidates.items()}
    replays = dict(replays or {})
    unknown = sorted(set(replays) - set(labels))
    if unknown:
        raise ValueError(f"replays names labels that are not candidates: {unknown}")
    for label, result in replays.items():
        if not isinstance(result, ReplayResult) or \
                result.manifest.get("trace", {}).get("hash") != trace.hash():
            raise ValueError(f"replays[{label!r}] must be a ReplayResult of this trace")
    categories = _check_categories(categories)
    questions = _question_frame(trace, categories)
    split = grouped_folds(_groups(questions, group_by), folds, seed)
    all_qids = questions["qid"].tolist()
    for label in labels:
        if label not in replays:
            replays[label] = replay(trace, configs[label], mode=mode, k=k, measures=measures,
                                    seed=seed, record_candidates=False, measure_on=measure_on,
                                    analyzer=analyzer, progress=False)
    values = {}
    for m in measures:
        columns = {}
        for label in labels:
            metrics = replays[label].metrics
            got = metrics[metrics["measure"] == m].set_index("qid")["value"]
            if got.empty:
                raise ValueError(f"replays[{label!r}] has no {m} values")
            columns[label] = got.reindex(all_qids)
        values[m] = pd.DataFrame(columns, index=pd.Index(all_qids, name="qid"))
    chosen, read = choose_by_folds(values[select_on], split)
    fold_rows, audit_rows = [], []
    for i, (test, pick) in enumerate(zip(split, chosen)):
        row: dict[str, Any] = {"fold": i, "chosen": pick, "n_test": len(test),
                               "n_train": len(read[i])}
        for m in measures:
            row[f"{m}"] = float(values[m].loc[test, pick].mean())
            row[f"{m}_base"] = float(values[m].loc[test, base].mean())
        fold_rows.append(row)
        audit_rows.append({"fold": i, "read": frozenset(read[i]), "held_out": frozenset(test)})
    fold_frame = pd.DataFrame(fold_rows)
    in_sample_choice = choose_by_folds(values[select_on], [[]])[0][0]
    rows = []
    for m in measures:
        scores = fold_frame[m].to_numpy()
        base_scores = fold_frame[f"{m}_base"].to_numpy()
        low, high = _t_interval(scores, bounds=BOUNDS)
        diff = scores - base_scores
        d_low, d_high = _t_interval(diff)
        rows.append({"measure": m, "cv_mean": float(scores.mean()), "ci_low": low,
                     "ci_high": high, "base_cv_mean": float(base_scores.mean()),
                     "diff_mean": float(diff.mean()), "diff_ci_low": d_low,
                     "diff_ci_high": d_high, "folds_better": int((diff > 1e-12).sum()),
                     "folds_worse": int((diff < -1e-12).sum()), "folds": folds,
                     "group_by": group_by, "questions": len(all_qids),
                     "selected_on": select_on, "in_sample_choice": in_sample_choice,
                     "in_sample": float(values[m][in_sample_choice].mean())})
    return ChooseResult(pd.DataFrame(rows), fold_frame, values, pd.DataFrame(audit_rows),
                        replays)
