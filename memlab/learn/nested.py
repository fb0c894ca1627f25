"""Nested grouped cross-validation of *choosing a recipe* (issue 17 item 4).

A candidate is a configuration, optionally followed by a learned ranking stage (a ranker kind
and its hyper-parameters) trained on that configuration's replay frames. :func:`nested_choose`
estimates the whole procedure "choose the best candidate, train its ranker, ship it":

1. the judged questions are dealt into ``folds`` grouped folds
   (:func:`~memlab.tuning.search.grouped_folds`, the same folds as ``tune``, ``cv_fixed``,
   ``cv_ranker`` and ``cv_choose`` for one seed);
2. for each outer fold, the choice is made on the *other* folds only: every candidate is scored
   by an inner grouped CV over those folds' questions (a ranker is trained on the inner
   training part and scored on the inner held-out part; a fixed configuration is just read),
   and the candidate with the best mean of inner fold means wins (ties: the earlier candidate);
3. the chosen candidate's ranker is trained on all the other folds' questions and scored once
   on the held-out fold; the CV estimate is the mean of those held-out fold scores, with a
   95 % Student-t interval over the folds, and paired with the base candidate on the same folds;
4. the shipped choice is the same selection run on every question (its grouped CV is the outer
   split), with the ranker trained on every question: its in-sample score is reported apart.

Every configuration is replayed once on the whole trace (surfacing reads the store and never
writes it, so a question's values and candidates do not depend on the other questions); what a
choice or a model may read is restricted to question ids, and :attr:`NestedResult.audit` lists,
for each outer fold, every question the choice and every model read, so a test can check that
no held-out question was ever read.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from memlab.harness.measures import parse_measure
from memlab.harness.replay import ReplayResult, replay, resolve_config
from memlab.harness.trace import Trace
from memlab.learn.ranker import check_ranker_params, fit_ranker, frame_features
from memlab.surfacing.config import SurfacingConfig
from memlab.tuning.evaluate import rank_frame
from memlab.tuning.search import (BOUNDS, _check_categories, _check_common, _groups,
                                  _question_frame, _t_interval, grouped_folds)

__all__ = ["Candidate", "NestedResult", "nested_choose", "parse_ranker_spec"]

RANKER_KINDS = ("logistic", "lambdarank")


@dataclass(frozen=True)
class Candidate:
    """One choice: ``config`` (a configuration or recipe name) and, optionally, a learned ranker
    of ``ranker`` kind (``"logistic"`` or ``"lambdarank"``) with ``params`` trained on its
    replay frames. ``label`` names it in every table.

    Examples
    --------
    >>> Candidate("default+logistic", "default", "logistic", {"C": 0.1}).ranker
    'logistic'
    """

    label: str
    config: Any
    ranker: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not isinstance(self.label, str) or not self.label:
            raise ValueError(f"label must be a non-empty string, got {self.label!r}")
        if self.ranker is not None and self.ranker not in RANKER_KINDS:
            raise ValueError(f"ranker must be None or one of {list(RANKER_KINDS)}, got "
                             f"{self.ranker!r}")
        if not isinstance(self.params, Mapping):
            raise ValueError(f"params must be a mapping, got {self.params!r}")
        if self.ranker is None and self.params:
            raise ValueError(f"params {dict(self.params)!r} need a ranker")
        if self.ranker is not None:
            try:
                check_ranker_params(self.ranker, self.params)
            except ImportError:  # no learn extra: fitting says so
                pass


def parse_ranker_spec(spec: str) -> tuple[str | None, dict[str, Any]]:
    """``"none"``, ``"logistic"``, ``"logistic:C=0.1"`` or
    ``"lambdarank:num_leaves=7,n_estimators=100"`` -> (kind or None, params).

    Examples
    --------
    >>> parse_ranker_spec("lambdarank:num_leaves=7,learning_rate=0.1")
    ('lambdarank', {'num_leaves': 7, 'learning_rate': 0.1})
    >>> parse_ranker_spec("none")
    (None, {})
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"ranker must be 'none', 'logistic' or 'lambdarank' with optional "
                         f":name=value,... parameters, got {spec!r}")
    kind, _, rest = spec.strip().partition(":")
    kind = kind.lower()
    if kind == "none":
        if rest:
            raise ValueError(f"ranker 'none' takes no parameters, got {spec!r}")
        return None, {}
    if kind not in RANKER_KINDS:
        raise ValueError(f"ranker must be 'none' or one of {list(RANKER_KINDS)}, got {spec!r}")
    params: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in rest.split(","))):
        name, eq, value = part.partition("=")
        if not eq or not name.isidentifier():
            raise ValueError(f"ranker parameter must be name=value, got {part!r} in {spec!r}")
        try:
            params[name] = int(value) if value.lstrip("-").isdigit() else float(value)
        except ValueError:
            raise ValueError(f"ranker parameter {name!r} must be a number, got {value!r} in "
                             f"{spec!r}") from None
    check_ranker_params(kind, params)
    return kind, params


@dataclass
class NestedResult:
    """What :func:`nested_choose` measured.

    ``table``: per measure the nested CV estimate of the procedure (``cv_mean``, ``ci_low``,
    ``ci_high``: mean of held-out fold scores and its 95 % t-interval over folds, clipped to
    [0, 1]), the base candidate on the same folds and the paired difference, and the shipped
    choice's ``in_sample`` score (trained and scored on every question: **not** an estimate).
    ``folds``: per outer fold the choice, its inner CV score, held-out and base scores, the
    split's ``seed`` and its held-out question ids (``qids``, a JSON list, sorted).
    ``candidates``: per candidate and measure its plain (non-nested) grouped-CV estimate on
    the outer folds (the numbers the final choice reads) with the paired difference to base.
    ``inner``: per outer fold and candidate the inner CV score the choice compared.
    ``audit``: per outer fold the questions the choice read, the questions every model of
    that fold was trained on, and the held-out questions. ``chosen``: the shipped candidate;
    ``model``: its ranker trained on every question (None for a plain configuration).
    """

    table: pd.DataFrame
    folds: pd.DataFrame
    candidates: pd.DataFrame
    inner: pd.DataFrame
    audit: pd.DataFrame
    chosen: Candidate
    config: SurfacingConfig
    model: Any = None
    split: list[list[str]] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)

    def __repr__(self) -> str:
        rows = "; ".join(f"{r.measure} CV {r.cv_mean:.3f} [{r.ci_low:.3f}, {r.ci_high:.3f}] "
                         f"(base {r.base_cv_mean:.3f})" for r in self.table.itertuples())
        return (f"NestedResult({rows}; folds chose {self.folds['chosen'].tolist()}; "
                f"ships {self.chosen.label!r})")


class _Scorer:
    """Per-question values of a candidate on some questions, a ranker trained on others; every
    model's training questions are logged (``trained``)."""

    def __init__(self, candidates: Sequence[Candidate], replays: Mapping[str, ReplayResult],
                 keys: Mapping[str, str], measures: Sequence[str], seed: int) -> None:
        self.candidates, self.replays, self.keys = candidates, replays, keys
        self.measures, self.seed = list(measures), seed
        self.features: dict[str, tuple[pd.DataFrame, np.ndarray]] = {}
        self.row_qid: dict[str, np.ndarray] = {}
        self.metrics: dict[str, pd.DataFrame] = {}
        for key, live in replays.items():
            self.metrics[key] = live.metrics.pivot_table(index="qid", columns="measure",
                                                         values="value")
            if any(c.ranker for c in candidates if keys[c.label] == key):
                feats, group = frame_features(live)
                self.features[key] = (feats, group)
                self.row_qid[key] = live.decisions["qid"].to_numpy(dtype=object)[group]
        self.trained: list[frozenset[str]] = []

    def fit(self, cand: Candidate, train: Sequence[str], seed: int):
        key = self.keys[cand.label]
        model = fit_ranker(self.replays[key], list(train), kind=cand.ranker, seed=seed,
                           params=dict(cand.params), _features=self.features[key])
        self.trained.append(frozenset(model.manifest["train_qids"]))
        return model

    def values(self, cand: Candidate, train: Sequence[str], test: Sequence[str],
               seed: int) -> dict[str, pd.Series]:
        key = self.keys[cand.label]
        if cand.ranker is None:
            return {m: self.metrics[key][m].reindex(list(test)).dropna() for m in self.measures}
        model = self.fit(cand, train, seed)
        feats, _ = self.features[key]
        live = self.replays[key]
        rows = np.flatnonzero(np.isin(self.row_qid[key], np.asarray(list(test), dtype=object)))
        scores = model.predict(feats.iloc[rows])
        dec = live.decisions[live.decisions["qid"].isin(set(test))]
        return {m: rank_frame(live.candidates.iloc[rows], dec, scores, m)
                .reindex(list(test)).dropna() for m in self.measures}


def _inner_scores(scorer: _Scorer, candidates: Sequence[Candidate], split: Sequence[Sequence[str]],
                  select_on: str, seed: int) -> list[float]:
    """Each candidate's grouped-CV score (mean of fold means of ``select_on``) over ``split``."""
    out = []
    every = [q for fold in split for q in fold]
    for cand in candidates:
        fold_means = []
        for j, test in enumerate(split):
            test_set = set(test)
            train = [q for q in every if q not in test_set]
            got = scorer.values(cand, train, test, seed + j)[select_on]
            fold_means.append(float(got.mean()))
        out.append(float(np.mean(fold_means)))
    return out


def nested_choose(trace: Trace, candidates: Sequence[Candidate], *,
                  measures: Iterable[str] = ("R@10",), select_on: str | None = None,
                  folds: int = 5, group_by: str = "workspace", seed: int = 0, k: int = 20,
                  categories: Iterable[Any] | None = None, mode: str = "router",
                  measure_on: str = "retrieved", analyzer: str = "porter",
                  replays: Mapping[Any, ReplayResult] | None = None,
                  progress: bool = False) -> NestedResult:
    """Nested grouped CV of choosing among ``candidates`` (see the module notes).

    Parameters
    ----------
    trace : Trace
        The dev trace; its judged questions (in ``categories``) are dealt into folds.
    candidates : sequence of Candidate
        In order of preference (a tie goes to the earlier); the first is the base every
        estimate is paired with. Labels must be distinct.
    measures : iterable of str
        Relevance measures reported; ``select_on`` (default the first) is what each choice
        maximises.
    folds, group_by, seed, k, categories, mode, measure_on, analyzer
        As for :func:`memlab.tuning.tune` (outer folds; each inner CV uses the remaining
        ``folds - 1`` outer folds as its folds, so inner folds never split a group either).
    replays : mapping of configuration label -> ReplayResult, optional
        Replays of ``trace`` already made with candidates recorded, keyed by the
        configuration's ``name``; the rest are replayed here.

    Returns
    -------
    NestedResult

    Raises
    ------
    ValueError
        A bad argument, named with its value.

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> out = nested_choose(synthetic_trace(300, 40, seed=1),
    ...                     [Candidate("default", "default"),
    ...                      Candidate("default+logistic", "default", "logistic")],
    ...                     measures=["MRR"], folds=3, group_by="question")
    >>> len(out.folds), list(out.table["measure"])
    (3, ['MRR'])
    """
    measures = [str(parse_measure(m)) for m in measures]
    if not measures:
        raise ValueError("measures must name at least one relevance measure, got []")
    for m in measures:
        _check_common(trace, m, folds, 1, group_by, seed)
    if folds < 3:
        raise ValueError(f"folds must be at least 3 for a nested choice (each inner CV needs "
                         f"two folds), got {folds}")
    select_on = measures[0] if select_on is None else str(parse_measure(select_on))
    if select_on not in measures:
        raise ValueError(f"select_on must be one of measures {measures}, got {select_on!r}")
    candidates = list(candidates) if not isinstance(candidates, (str, bytes)) else candidates
    if not isinstance(candidates, list) or not candidates or \
            not all(isinstance(c, Candidate) for c in candidates):
        raise ValueError(f"candidates must be a non-empty sequence of Candidate, got "
                         f"{candidates!r}")
    labels = [c.label for c in candidates]
    if len(set(labels)) != len(labels):
        raise ValueError(f"candidates must have distinct labels, got {labels}")
    configs: dict[str, SurfacingConfig] = {}
    keys: dict[str, str] = {}
    for c in candidates:
        config = resolve_config(c.config)
        key = config.name
        if key in configs and configs[key] != config:
            raise ValueError(f"candidates name two different configurations {key!r}: give "
                             f"each configuration its own name")
        configs[key], keys[c.label] = config, key
    replays = dict(replays or {})
    for key, result in replays.items():
        if key not in configs:
            raise ValueError(f"replays names {key!r}, not a candidate's configuration "
                             f"({sorted(configs)})")
        if not isinstance(result, ReplayResult) or \
                result.manifest.get("trace", {}).get("hash") != trace.hash():
            raise ValueError(f"replays[{key!r}] must be a ReplayResult of this trace")
    categories = _check_categories(categories)
    questions = _question_frame(trace, categories)
    groups = _groups(questions, group_by)
    split = grouped_folds(groups, folds, seed)
    all_qids = questions["qid"].tolist()
    for key, config in configs.items():
        if key not in replays:
            replays[key] = replay(trace, config, mode=mode, k=k, measures=measures, seed=seed,
                                  measure_on=measure_on, analyzer=analyzer,
                                  record_candidates=True, progress=progress)
    scorer = _Scorer(candidates, replays, keys, measures, seed)
    # outer folds: each candidate's held-out values (what the final choice's CV reads), and
    # the nested choice made on the other folds only
    held: dict[str, dict[str, list[pd.Series]]] = {c.label: {m: [] for m in measures}
                                                   for c in candidates}
    fold_rows, inner_rows, audit_rows = [], [], []
    for i, test in enumerate(split):
        others = [fold for j, fold in enumerate(split) if j != i]
        train = [q for fold in others for q in fold]
        mark = len(scorer.trained)
        inner = _inner_scores(scorer, candidates, others, select_on, seed + 100 * (i + 1))
        pick = int(np.argmax(inner))  # first of the best
        for c, s in zip(candidates, inner):
            inner_rows.append({"fold": i, "candidate": c.label, f"inner_{select_on}": s,
                               "chosen": c.label == candidates[pick].label})
        chosen_values = None
        for c in candidates:
            got = scorer.values(c, train, test, seed + i)
            for m in measures:
                held[c.label][m].append(got[m])
            if c.label == candidates[pick].label:
                chosen_values = got
        row: dict[str, Any] = {"fold": i, "chosen": candidates[pick].label,
                               f"inner_{select_on}": inner[pick], "n_test": len(test),
                               "n_train": len(train), "seed": seed,
                               # the held-out question ids, so a later comparison on "the
                               # same folds" can check membership, not only sizes
                               "qids": json.dumps(sorted(str(q) for q in test))}
        for m in measures:
            row[m] = float(chosen_values[m].mean())
            row[f"{m}_base"] = float(held[candidates[0].label][m][-1].mean())
        fold_rows.append(row)
        audit_rows.append({"fold": i, "choice_read": frozenset(train),
                           "models_trained_on": tuple(scorer.trained[mark:]),
                           "held_out": frozenset(test)})
    fold_frame = pd.DataFrame(fold_rows)
    # the candidates' own grouped-CV estimates on the outer folds; the shipped choice is the
    # best of them on select_on (the same selection as each fold's, on every question)
    cand_rows = []
    for c in candidates:
        for m in measures:
            scores = np.array([float(s.mean()) for s in held[c.label][m]])
            base = np.array([float(s.mean()) for s in held[candidates[0].label][m]])
            low, high = _t_interval(scores, bounds=BOUNDS)
            d_low, d_high = _t_interval(scores - base)
            cand_rows.append({"candidate": c.label, "measure": m,
                              "cv_mean": float(scores.mean()), "ci_low": low, "ci_high": high,
                              "diff_mean": float((scores - base).mean()),
                              "diff_ci_low": d_low, "diff_ci_high": d_high,
                              "folds_better": int((scores - base > 1e-12).sum()),
                              "folds_worse": int((scores - base < -1e-12).sum()),
                              "fold_scores": scores.tolist()})
    cand_frame = pd.DataFrame(cand_rows)
    final_scores = [float(cand_frame[(cand_frame["candidate"] == c.label)
                                     & (cand_frame["measure"] == select_on)]["cv_mean"].iloc[0])
                    for c in candidates]
    chosen = candidates[int(np.argmax(final_scores))]
    model = scorer.fit(chosen, all_qids, seed + folds) if chosen.ranker else None
    if model is not None:
        in_sample = scorer.values(chosen, all_qids, all_qids, seed + folds)
        scorer.trained.pop()  # the same fit again, to score it: not a second model
    else:
        in_sample = scorer.values(chosen, [], all_qids, seed)
    base_in_sample = scorer.values(candidates[0], [], all_qids, seed) \
        if candidates[0].ranker is None else None
    rows = []
    for m in measures:
        scores = fold_frame[m].to_numpy()
        base_scores = fold_frame[f"{m}_base"].to_numpy()
        low, high = _t_interval(scores, bounds=BOUNDS)
        diff = scores - base_scores
        d_low, d_high = _t_interval(diff)
        b_low, b_high = _t_interval(base_scores, bounds=BOUNDS)
        rows.append({"measure": m, "cv_mean": float(scores.mean()), "ci_low": low,
                     "ci_high": high, "base": candidates[0].label,
                     "base_cv_mean": float(base_scores.mean()), "base_ci_low": b_low,
                     "base_ci_high": b_high, "diff_mean": float(diff.mean()),
                     "diff_ci_low": d_low, "diff_ci_high": d_high,
                     "folds_better": int((diff > 1e-12).sum()),
                     "folds_worse": int((diff < -1e-12).sum()), "folds": folds,
                     "group_by": group_by, "questions": len(all_qids), "selected_on": select_on,
                     "shipped": chosen.label, "in_sample": float(in_sample[m].mean()),
                     "base_in_sample": (float(base_in_sample[m].mean())
                                        if base_in_sample is not None else float("nan"))})
    config = configs[keys[chosen.label]]
    manifest = {"trace": trace.hash(), "trace_name": trace.name, "folds": folds,
                "group_by": group_by, "seed": seed, "k": k, "measures": measures,
                "select_on": select_on, "categories": sorted(categories, key=str)
                if categories else None, "mode": mode, "measure_on": measure_on,
                "candidates": [{"label": c.label, "config": keys[c.label], "ranker": c.ranker,
                                "params": dict(c.params)} for c in candidates]}
    return NestedResult(pd.DataFrame(rows), fold_frame, cand_frame, pd.DataFrame(inner_rows),
                        pd.DataFrame(audit_rows), chosen, config, model, split, manifest)


def grid_configs(base: SurfacingConfig, grid: Mapping[str, Sequence[Any]] | None
                 ) -> list[tuple[dict[str, Any], SurfacingConfig]]:
    """``base`` first, then every point of ``grid``'s cross product (other than the base's own
    values), each as ``(point, configuration)`` named ``base.name[field=value,...]``.

    Keys are configuration fields as :func:`memlab.harness.sweep.apply_point` takes them
    (``spelling_weight``, ``ppr.alpha``), or ``strategies.<strategy>`` to choose the pipeline
    one strategy runs (``strategies.temporal:windowed=temporal,temporal_multi_hop``).

    Examples
    --------
    >>> from memlab.surfacing.config import DEFAULT
    >>> [c.name for _, c in grid_configs(DEFAULT, {"spelling_weight": [0.0, 0.2]})]
    ['default', 'default[spelling_weight=0.2]']
    """
    import itertools

    from memlab.harness.sweep import apply_point
    if not isinstance(base, SurfacingConfig):
        raise ValueError(f"base must be a SurfacingConfig, got {type(base).__name__}")
    grid = dict(grid or {})
    for key, values in grid.items():
        if not isinstance(values, (list, tuple)) or not values:
            raise ValueError(f"grid[{key!r}] must be a non-empty list of values, got {values!r}")

    def apply(point: Mapping[str, Any]) -> SurfacingConfig:
        plain = {k: v for k, v in point.items() if not k.startswith("strategies.")}
        config = apply_point(base, plain)
        chosen = {k.split(".", 1)[1]: v for k, v in point.items() if k.startswith("strategies.")}
        if chosen:
            known = dict(config.strategies)
            unknown = sorted(set(chosen) - set(known))
            if unknown:
                raise ValueError(f"grid key strategies.{unknown[0]} names no strategy of "
                                 f"{base.name!r} ({sorted(known)})")
            config = config.replace(strategies=tuple(
                (s, chosen.get(s, impl)) for s, impl in config.strategies))
        return config

    def canonical(config: SurfacingConfig, key: str, value: Any) -> Any:
        # the value as the configuration keeps it (second_hop_features "prf+title" is
        # "title+prf", "PRF" is "prf"), so labels and recorded points match the recipe
        if key.startswith("strategies."):
            return value
        stage, _, name = key.rpartition(".")
        return getattr(getattr(config, stage) if stage else config, name)

    out: list[tuple[dict[str, Any], SurfacingConfig]] = [({}, base)]
    seen = {base.replace(name="_")}
    for values in itertools.product(*grid.values()):
        config = apply(dict(zip(grid, values)))
        if config.replace(name="_") in seen:
            continue
        seen.add(config.replace(name="_"))
        point = {k: canonical(config, k, v) for k, v in zip(grid, values)}
        label = ",".join(f"{k.removeprefix('strategies.')}={v}" for k, v in point.items()
                         if apply({k: v}).replace(name="_") != base.replace(name="_"))
        out.append((point, config.replace(name=f"{base.name}[{label}]")))
    return out
