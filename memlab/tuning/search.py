"""``tune``: choose ``SurfacingConfig`` fields with Optuna under grouped cross-validation.

The procedure (what makes the estimate honest):

1. The judged questions are split into ``folds`` groups of whole workspaces (``group_by=
   "workspace"``: every question of a conversation in one fold) or of single questions
   (``"question"``), seeded (:func:`grouped_folds`).
2. For each fold, Optuna's TPE sampler (seeded) searches the space on the *other* folds'
   questions only, for ``n_trials`` trials; the best configuration found is then scored once
   on the held-out fold. The held-out questions are never evaluated during that fold's search
   (the evaluators log every question they see; a test checks it).
3. The CV estimate is the mean of the held-out fold scores, with a 95 % Student-t interval
   over the folds, and a percentile bootstrap interval over the pooled held-out per-question
   values beside it.
4. The configuration to ship is then searched the same way on every question (``n_trials``
   more trials): the CV estimate describes this procedure, not that one configuration's
   in-sample score, which is reported apart and labelled so.

Composite weights (the fields in :data:`memlab.harness.counterfactual.RESCORABLE`) are searched
counterfactually (one replay, then re-scoring of its recorded candidates); any other field
replays (on the harness sweep's executors: ``"serial"``, ``"local"`` or ``"dask"``).
"""

from __future__ import annotations

import itertools
import json
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np
import pandas as pd
from scipy import stats

from memlab.harness.counterfactual import RESCORABLE
from memlab.harness.experiment import bootstrap_ci
from memlab.harness.measures import Measure, check_measure_on, parse_measure
from memlab.harness.replay import ReplayResult, replay, resolve_config
from memlab.harness.sweep import apply_point
from memlab.harness.trace import Trace
from memlab.surfacing.config import RECIPE_FORMAT, SurfacingConfig
from memlab.tuning.evaluate import CounterfactualEvaluator, ReplayEvaluator

__all__ = ["Param", "parse_space", "grouped_folds", "tune", "cv_fixed", "TuneResult",
           "DEFAULT_SPACE", "GROUP_BY"]

GROUP_BY = ("workspace", "question")

# The composite weights worth searching on traces without session pins or anchors.
DEFAULT_SPACE = {"activation_floor": (0.0, 1.0), "centrality_weight": (0.0, 2.0),
                 "freshness_weight": (0.0, 1.0)}


@dataclass(frozen=True)
class Param:
    """One dimension of the search: a float or int range (``log`` for a log scale) or a list
    of ``choices`` (router rule orders are tuples of rule names)."""

    name: str
    low: float | None = None
    high: float | None = None
    log: bool = False
    integer: bool = False
    choices: tuple | None = None

    def suggest(self, trial) -> Any:
        if self.choices is not None:
            labels = [_label(c) for c in self.choices]
            picked = trial.suggest_categorical(self.name, labels)
            return self.choices[labels.index(picked)]
        if self.integer:
            return trial.suggest_int(self.name, int(self.low), int(self.high), log=self.log)
        return trial.suggest_float(self.name, float(self.low), float(self.high), log=self.log)


def _label(choice: Any) -> Any:
    """Optuna's categorical values must be None, bool, int, float or str."""
    if isinstance(choice, (list, tuple)):
        return ",".join(map(str, choice))
    return choice


def parse_space(space: Mapping[str, Any], base: SurfacingConfig) -> list[Param]:
    """The search space from ``{field: (low, high) | [choice, ...] | Param | "permutations"}``.

    Fields are ``SurfacingConfig`` fields or ``stage.field`` (``ppr.alpha``,
    ``spreading.damping``, ``dense.weight``); ``router_rules="permutations"`` searches every
    order of ``base``'s rules. Every value is checked against ``base`` now, so a bad space fails
    before any work (ValueError naming the field).

    Examples
    --------
    >>> from memlab.surfacing.config import DEFAULT
    >>> [p.name for p in parse_space({"centrality_weight": (0, 2), "ppr.alpha": [0.5, 0.85]},
    ...                              DEFAULT)]
    ['centrality_weight', 'ppr.alpha']
    >>> parse_space({"centrality_weight": (2, 0)}, DEFAULT)
    Traceback (most recent call last):
    ...
    ValueError: space['centrality_weight'] must have low < high, got (2, 0)
    """
    if not isinstance(space, Mapping) or not space:
        raise ValueError(f"space must be a non-empty mapping of field -> range or choices, "
                         f"got {space!r}")
    params = []
    for name, spec in space.items():
        if not isinstance(name, str) or not name:
            raise ValueError(f"space keys must be field names, got {name!r}")
        if isinstance(spec, Param):
            param = spec
        elif name == "router_rules" and spec == "permutations":
            param = Param(name, choices=tuple(itertools.permutations(base.router_rules)))
        elif isinstance(spec, tuple) and len(spec) == 2 and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) for v in spec):
            low, high = spec
            if not (math.isfinite(low) and math.isfinite(high)) or low >= high:
                raise ValueError(f"space[{name!r}] must have low < high, got {spec!r}")
            integer = isinstance(low, int) and isinstance(high, int) and isinstance(
                _field_value(base, name), int)
            param = Param(name, low, high, integer=integer)
        elif isinstance(spec, list) and spec:
            param = Param(name, choices=tuple(tuple(c) if isinstance(c, list) else c
                                              for c in spec))
        else:
            raise ValueError(f"space[{name!r}] must be (low, high), a non-empty list of "
                             f"choices or a Param, got {spec!r}")
        probes = param.choices if param.choices is not None else (param.low, param.high)
        for value in probes:
            try:
                apply_point(base, {name: int(value) if param.integer else value})
            except (ValueError, TypeError) as exc:
                raise ValueError(f"space[{name!r}]: {exc}") from None
        params.append(param)
    return params


def _field_value(base: SurfacingConfig, name: str) -> Any:
    if "." in name:
        stage, sub = name.split(".", 1)
        return getattr(getattr(base, stage, None), sub, None)
    return getattr(base, name, None)


def grouped_folds(groups: Mapping[str, str] | pd.Series, folds: int, seed: int = 0
                  ) -> list[list[str]]:
    """Split questions into ``folds`` lists, never splitting a group.

    ``groups`` maps each question id to its group (workspace, or the question itself). Groups
    are shuffled (seeded) and dealt largest first into the fold with the fewest questions so
    far, so folds are balanced. ValueError when there are fewer groups than folds.

    Examples
    --------
    >>> grouped_folds({"q1": "a", "q2": "a", "q3": "b", "q4": "c"}, 3, seed=0)
    [['q1', 'q2'], ['q4'], ['q3']]
    """
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
    groups = pd.Series(groups, dtype=object)
    members: dict[Any, list[str]] = {}
    for qid, group in groups.items():
        members.setdefault(group, []).append(qid)
    if len(members) < folds:
        raise ValueError(f"folds={folds} needs at least {folds} groups, got {len(members)}")
    names = list(members)
    rng = np.random.default_rng(seed)
    rng.shuffle(names)
    names.sort(key=lambda g: -len(members[g]))  # stable: ties keep the shuffled order
    out: list[list[str]] = [[] for _ in range(folds)]
    for g in names:
        smallest = min(range(folds), key=lambda i: (len(out[i]), i))
        out[smallest].extend(members[g])
    return out


@dataclass
class TuneResult:
    """What :func:`tune` found.

    ``config``: the chosen configuration (searched on every question). ``cv``: the CV estimate
    (one row: ``measure``, ``cv_mean`` = mean of held-out fold scores, ``ci_low``/``ci_high``
    its 95 % Student-t interval over the folds (clipped to the measure's range [0, 1]),
    ``boot_low``/``boot_high`` a bootstrap interval
    over the pooled held-out questions, ``folds``, ``in_sample`` = the chosen configuration on
    every question it was searched on, labelled as such). ``folds``: per fold its held-out
    ``score``, the ``search_score`` on the other folds, question counts and the chosen
    parameters, and ``base_score``: the base configuration on the same held-out fold (the
    ``cv`` row's ``base_cv_mean``, ``diff_mean`` = mean over folds of tuned minus base, and
    ``diff_ci_low``/``diff_ci_high`` its 95 % t-interval; ``base_in_sample`` = the base on every
    question). ``trials``: every trial (``study`` = fold number or ``"final"``). ``held_out``:
    per-question held-out values. ``importance``: the final search's parameter importances.
    ``audit``: every question set each evaluator was asked about (the leakage test's record).
    """

    config: SurfacingConfig
    measure: str
    cv: pd.DataFrame
    folds: pd.DataFrame
    trials: pd.DataFrame
    held_out: pd.DataFrame
    importance: pd.Series
    best_params: dict[str, Any]
    audit: pd.DataFrame
    manifest: dict[str, Any] = field(default_factory=dict)
    holdout: pd.DataFrame | None = None

    def __repr__(self) -> str:
        """One line: the measure, the CV estimate with its interval, the base's, and the
        chosen parameters (the frames are attributes)."""
        cv = self.cv.iloc[0]
        params = ", ".join(f"{k}={_short_value(v)}" for k, v in self.best_params.items())
        base = f", base {cv['base_cv_mean']:.3f}" if "base_cv_mean" in cv else ""
        return (f"TuneResult({self.measure} CV {cv['cv_mean']:.3f} [{cv['ci_low']:.3f}, "
                f"{cv['ci_high']:.3f}]{base}, {cv['folds']} folds, in-sample "
                f"{cv['in_sample']:.3f}; {params})")

    def recipe(self) -> dict[str, Any]:
        """The chosen configuration as a recipe file's content, with its provenance."""
        return {"format": RECIPE_FORMAT, "name": self.config.name,
                "config": self.config.to_dict(),
                "provenance": {**self.manifest, "best_params": _jsonable(self.best_params),
                               "cv": self.cv.to_dict(orient="records")[0],
                               "fold_scores": self.folds["score"].tolist()}}

    def save_recipe(self, path: str | Path) -> Path:
        """Write :meth:`recipe` as JSON; load it with ``get_recipe(path)`` or by name."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.recipe(), indent=2, sort_keys=True) + "\n")
        return path


def _short_value(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else repr(value)


def _jsonable(params: Mapping[str, Any]) -> dict[str, Any]:
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def _t_interval(values: np.ndarray, level: float = 0.95,
                bounds: tuple[float, float] | None = None) -> tuple[float, float]:
    """Student-t interval of the mean; with ``bounds`` (a bounded measure's range, e.g. (0, 1)
    for every relevance measure) clipped to it: with a handful of folds the symmetric t
    interval can run past what the measure can take ([0.897, 1.038] for R@10)."""
    values = np.asarray(values, dtype=float)
    if len(values) < 2:
        return math.nan, math.nan
    half = stats.t.ppf(0.5 + level / 2, len(values) - 1) * values.std(ddof=1) / math.sqrt(
        len(values))
    low, high = float(values.mean() - half), float(values.mean() + half)
    if bounds is not None:
        low, high = max(low, bounds[0]), min(high, bounds[1])
    return low, high


BOUNDS = (0.0, 1.0)  # every relevance measure (R@k, P@k, nDCG@k, MRR, Hit@k) lies in [0, 1]


def _question_frame(trace: Trace, categories: set | None) -> pd.DataFrame:
    """The trace's judged questions (in ``categories`` when given): qid, workspace_id."""
    rows = []
    for event in trace.queries:
        gold = event.get("gold")
        grades = gold.values() if isinstance(gold, dict) else [1.0] * len(gold or [])
        if not any(v > 0 for v in grades):
            continue
        if categories is not None and event.get("category") not in categories:
            continue
        rows.append({"qid": event.get("qid"),
                     "workspace_id": event.get("workspace_id", trace.workspace_id)})
    if not rows:
        where = "" if categories is None else f" in categories {sorted(categories, key=str)}"
        raise ValueError(f"trace has no judged questions{where}")
    return pd.DataFrame(rows, columns=["qid", "workspace_id"])


def _check_common(trace, measure, folds, n_trials, group_by, seed):
    if not isinstance(trace, Trace):
        raise ValueError(f"trace must be a Trace, got {type(trace).__name__}")
    measure = parse_measure(measure)
    if not measure.needs_gold:
        raise ValueError(f"measure must be a relevance measure (R@k, P@k, nDCG@k, MRR, Hit@k), "
                         f"got {str(measure)!r}")
    if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
        raise ValueError(f"folds must be an integer >= 2, got {folds!r}")
    if isinstance(n_trials, bool) or not isinstance(n_trials, int) or n_trials < 1:
        raise ValueError(f"n_trials must be an integer >= 1, got {n_trials!r}")
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative integer, got {seed!r}")
    return measure


def _check_categories(categories: Any) -> set | None:
    if categories is None:
        return None
    if isinstance(categories, (str, bytes)) or not isinstance(categories, Iterable):
        raise ValueError(f"categories must be a list of question categories, got "
                         f"{categories!r}")
    return set(categories)


def _groups(questions: pd.DataFrame, group_by: str) -> pd.Series:
    key = "workspace_id" if group_by == "workspace" else "qid"
    return pd.Series(questions[key].to_numpy(), index=questions["qid"].to_numpy())


def _config_of(base: SurfacingConfig, params: Mapping[str, Any], name: str) -> SurfacingConfig:
    return apply_point(base, params).replace(name=name)


def tune(trace: Trace, space: Mapping[str, Any] | None = None, *, base: Any = None,
         measure: str | Measure = "R@10", folds: int = 5, n_trials: int = 100,
         group_by: str = "workspace", seed: int = 0, k: int = 20,
         categories: Iterable[Any] | None = None, mode: str = "router",
         measure_on: str = "retrieved", analyzer: str = "porter", executor: str = "serial",
         n_workers: int = 2, address: str | None = None, name: str = "tuned",
         holdout: Trace | None = None, progress: bool = False,
         live: ReplayResult | None = None, compare: Any = None,
         reuse_replays: bool = False) -> TuneResult:
    """Search ``space`` on ``trace`` with grouped ``folds``-fold CV (see the module notes).

    Parameters
    ----------
    trace : Trace
        The dev trace. Its judged questions (in ``categories``, when given) are the folds'.
    space : mapping, optional
        Field -> ``(low, high)``, list of choices or :class:`Param` (see :func:`parse_space`);
        default :data:`DEFAULT_SPACE` (composite weights, searched counterfactually).
    base : SurfacingConfig, recipe name or None
        What the fields not searched are (None: ``DEFAULT``).
    compare : SurfacingConfig, recipe name or None
        What the tuned procedure is paired with, fold by fold (None: ``base``). A search of
        ``dense.*`` needs a base with a dense stage, and is judged against the recipe
        without one: ``base=<dense recipe>, compare="default"``.
    reuse_replays : bool
        On the replay path, replay each configuration's questions once and reuse their values
        when the search proposes it again (:class:`ReplayEvaluator` ``reuse``); no number
        changes. Worth it for spaces of choices, where TPE repeats itself.
    measure : str
        The relevance measure to maximise, as in :mod:`memlab.harness.measures`.
    folds, group_by, seed
        ``folds`` groups of whole workspaces or single questions; ``seed`` seeds the split,
        TPE (fold ``i`` uses ``seed + i``, the final search ``seed + folds``) and intervals.
    n_trials : int
        Trials per search (each fold's, and the final one's).
    executor, n_workers, address
        Where replays run when the space holds fields other than composite weights (the
        harness sweep's executors; ``"dask"`` starts a LocalCluster unless ``address``).
    holdout : Trace, optional
        Scored once with the chosen configuration, after every search; never searched on.
    live : ReplayResult, optional
        A replay of ``trace`` under ``base`` with candidates (the counterfactual path's; made
        here when None). Ignored when the space needs replays.

    Returns
    -------
    TuneResult

    Raises
    ------
    ValueError
        A bad argument, named with its value.

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> out = tune(synthetic_trace(300, 40, seed=1), {"centrality_weight": (0.0, 2.0)},
    ...            measure="MRR", folds=2, n_trials=4, group_by="question")
    >>> list(out.cv.columns[:4]), len(out.folds)
    (['measure', 'cv_mean', 'ci_low', 'ci_high'], 2)
    """
    measure = _check_common(trace, measure, folds, n_trials, group_by, seed)
    try:
        import optuna
    except ImportError:  # pragma: no cover - depends on the install
        raise ImportError("tune needs optuna: pip install 'memlab[tune]'") from None
    base = resolve_config(base)
    reference = base if compare is None else resolve_config(compare)
    check_measure_on(measure_on)
    if not isinstance(name, str) or not name:
        raise ValueError(f"name must be a non-empty string, got {name!r}")
    if holdout is not None and not isinstance(holdout, Trace):
        raise ValueError(f"holdout must be a Trace, got {type(holdout).__name__}")
    if holdout is not None:
        check_disjoint_holdout(trace, holdout)
    params = parse_space(DEFAULT_SPACE if space is None else space, base)
    counterfactual = all(p.name in RESCORABLE for p in params)
    if counterfactual and base.reranker is not None:
        raise ValueError(f"base {base.name!r} ranks with a learned reranker "
                         f"({base.reranker!r}), so the composite weights searched "
                         f"({', '.join(p.name for p in params)}) do not decide its ranking: "
                         f"search fields that replay (ppr.*, spreading.*, dense.*, ...), or "
                         f"tune a base without a reranker")
    categories = _check_categories(categories)
    if live is not None and (not isinstance(live, ReplayResult)
                             or live.manifest.get("trace", {}).get("hash") != trace.hash()):
        raise ValueError("live must be a ReplayResult of this trace (its manifest's trace hash "
                         f"differs), got {type(live).__name__}")
    started = time.perf_counter()
    if counterfactual:
        if live is None:
            live = replay(trace, base, mode=mode, k=k, measures=[str(measure)], seed=seed,
                          measure_on=measure_on, analyzer=analyzer, progress=False)
        evaluator: Any = CounterfactualEvaluator(live, measure)
    else:
        evaluator = ReplayEvaluator(trace, measure, mode=mode, k=k, seed=seed,
                                    measure_on=measure_on, analyzer=analyzer,
                                    executor=executor, n_workers=n_workers, address=address,
                                    reuse=reuse_replays)
    questions = _question_frame(trace, categories)
    split = grouped_folds(_groups(questions, group_by), folds, seed)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    audit_rows: list[dict[str, Any]] = []
    bar = _bar(progress, (folds + 1) * n_trials)

    def search(study_name: Any, qids: list[str], study_seed: int):
        seen_before = len(evaluator.seen)
        study = optuna.create_study(direction="maximize",
                                    sampler=optuna.samplers.TPESampler(seed=study_seed))
        _run_study(study, params, base, evaluator, qids, n_trials, n_workers
                   if executor != "serial" and not counterfactual else 1, bar)
        for seen in evaluator.seen[seen_before:]:
            audit_rows.append({"study": study_name, "phase": "search", "qids": seen})
        return study

    try:
        fold_rows, trial_frames, held = [], [], []
        all_qids = questions["qid"].tolist()
        for i, test in enumerate(split):
            test_set = set(test)
            train = [q for q in all_qids if q not in test_set]
            study = search(i, train, seed + i)
            chosen = _params_of(study, params)
            config = _config_of(base, chosen, f"{name}-fold{i}")
            before = len(evaluator.seen)
            values = evaluator.values(config, test)
            audit_rows.append({"study": i, "phase": "score", "qids": evaluator.seen[before]})
            held.append(pd.DataFrame({"fold": i, "qid": values.index, "value": values.values}))
            fold_rows.append({"fold": i, "score": float(values.mean()),
                              "search_score": float(study.best_value),
                              "n_test": len(values), "n_train": len(train),
                              "groups_test": int(_groups(questions[questions["qid"].isin(
                                  test_set)], group_by).nunique()),
                              **{f"param_{k}": _label(v) for k, v in chosen.items()}})
            trial_frames.append(_trials_frame(study, i))
        final = search("final", all_qids, seed + folds)
        best = _params_of(final, params)
        config = _config_of(base, best, name)
        trial_frames.append(_trials_frame(final, "final"))
    finally:
        if bar is not None:
            bar.close()
        if isinstance(evaluator, ReplayEvaluator):
            evaluator.close()
    fold_frame = pd.DataFrame(fold_rows)
    held_out = pd.concat(held, ignore_index=True)
    scores = fold_frame["score"].to_numpy()
    low, high = _t_interval(scores, bounds=BOUNDS)
    boot_low, boot_high = bootstrap_ci(held_out["value"].to_numpy(), seed=seed)
    # the base (or ``compare``) on the same folds (one replay of the whole trace; the
    # counterfactual path's ``live`` is the base's): paired per fold against the tuned scores
    base_metrics = (live if counterfactual and compare is None else replay(
        trace, reference, mode=mode, k=k, measures=[str(measure)], seed=seed,
        record_candidates=False, measure_on=measure_on, analyzer=analyzer,
        progress=False)).metrics
    base_values = base_metrics[base_metrics["measure"] == str(measure)].set_index("qid")[
        "value"]
    fold_frame["base_score"] = [float(base_values.reindex(test).fillna(0.0).mean())
                                for test in split]
    diffs = scores - fold_frame["base_score"].to_numpy()
    diff_low, diff_high = _t_interval(diffs)
    in_sample_base = float(base_values.reindex(all_qids).fillna(0.0).mean())
    cv = pd.DataFrame([{"measure": str(measure), "cv_mean": float(scores.mean()),
                        "ci_low": low, "ci_high": high, "boot_low": boot_low,
                        "boot_high": boot_high, "folds": folds, "group_by": group_by,
                        "questions": len(held_out), "in_sample": float(final.best_value),
                        "base_cv_mean": float(fold_frame["base_score"].mean()),
                        "diff_mean": float(diffs.mean()), "diff_ci_low": diff_low,
                        "diff_ci_high": diff_high, "base_in_sample": in_sample_base}])
    importance = _importance(final, params, seed)
    manifest = {"trace": {"name": trace.name, "hash": trace.hash(),
                          "queries": len(trace.queries)},
                "base": base.name, "compare": reference.name, "measure": str(measure),
                "folds": folds,
                "group_by": group_by, "n_trials": n_trials, "seed": seed, "k": k,
                "categories": None if categories is None else sorted(categories, key=str),
                "mode": mode, "measure_on": measure_on, "analyzer": analyzer,
                "space": [_param_dict(p) for p in params],
                "path": "counterfactual" if counterfactual else f"replay ({executor})"
                + (", replays reused" if reuse_replays and not counterfactual else ""),
                "optuna": optuna.__version__, "sampler": "TPESampler",
                "seconds": round(time.perf_counter() - started, 1)}
    result = TuneResult(config, str(measure), cv, fold_frame,
                        pd.concat(trial_frames, ignore_index=True), held_out, importance,
                        best, pd.DataFrame(audit_rows), manifest)
    if holdout is not None:
        result.holdout = score_holdout(holdout, config, measure, k=k, mode=mode,
                                       measure_on=measure_on, analyzer=analyzer,
                                       categories=categories, seed=seed)
    return result


def _question_keys(trace: Trace) -> set[tuple]:
    """Each question's identity: (workspace, qid, query text). Query ids alone are not enough
    (every synthetic trace numbers its questions q0, q1, ...)."""
    return {(event.get("workspace_id", trace.workspace_id), event.get("qid"),
             event.get("query")) for event in trace.queries}


def check_disjoint_holdout(trace: Trace, holdout: Trace) -> None:
    """Refuse a ``holdout`` that is the searched ``trace`` or shares questions with it: its
    score would be in-sample, not held out (ValueError naming ``holdout``).

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> check_disjoint_holdout(synthetic_trace(50, 10), synthetic_trace(50, 10))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: holdout is the trace searched on (same hash ...): its score would be ...
    """
    if holdout.hash() == trace.hash():
        raise ValueError(f"holdout is the trace searched on (same hash {trace.hash()[:12]}...): "
                         f"its score would be in-sample, not held out")
    shared = _question_keys(trace) & _question_keys(holdout)
    if shared:
        qids = sorted(str(q[1]) for q in shared)
        raise ValueError(f"holdout shares {len(shared)} questions with the trace searched on "
                         f"(e.g. {', '.join(qids[:3])}): their scores would be in-sample, not "
                         f"held out")


def score_holdout(trace: Trace, config: SurfacingConfig, measure: Measure | str, *, k: int = 20,
                  mode: str = "router", measure_on: str = "retrieved",
                  analyzer: str = "porter", categories: set | None = None,
                  seed: int = 0) -> pd.DataFrame:
    """``config`` scored once on a separate trace: measure, mean, bootstrap interval, count."""
    result = replay(trace, config, mode=mode, k=k, measures=[str(measure)], seed=seed,
                    record_candidates=False, measure_on=measure_on, analyzer=analyzer,
                    progress=False)
    metrics = result.metrics.merge(result.decisions[["qid", "category"]], on="qid")
    if categories is not None:
        metrics = metrics[metrics["category"].isin(categories)]
    values = metrics["value"].to_numpy()
    low, high = bootstrap_ci(values, seed=seed)
    return pd.DataFrame([{"trace": trace.name, "measure": str(measure),
                          "mean": float(values.mean()) if len(values) else math.nan,
                          "boot_low": low, "boot_high": high, "questions": len(values)}])


def _param_dict(p: Param) -> dict[str, Any]:
    if p.choices is not None:
        return {"name": p.name, "choices": [_label(c) for c in p.choices]}
    return {"name": p.name, "low": p.low, "high": p.high, "log": p.log, "integer": p.integer}


def _bar(progress: bool, total: int):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional (the tune extra installs it)
        return None
    return tqdm(total=total, desc="tune", unit="trial")


def _run_study(study, params: list[Param], base: SurfacingConfig, evaluator, qids: list[str],
               n_trials: int, batch: int, bar) -> None:
    """Ask/tell ``n_trials`` trials, ``batch`` at a time (batches run on the executor)."""
    import optuna
    done = 0
    while done < n_trials:
        size = min(batch, n_trials - done)
        trials, configs = [], []
        for _ in range(size):
            trial = study.ask()
            values = {p.name: p.suggest(trial) for p in params}
            try:
                configs.append(_config_of(base, values, "trial"))
            except ValueError:  # a combination the configuration refuses: prune it
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
                done += 1
                if bar is not None:
                    bar.update(1)
                continue
            trials.append(trial)
        if trials:
            if hasattr(evaluator, "values_many") and len(configs) > 1:
                series = evaluator.values_many(configs, qids)
            else:
                series = [evaluator.values(c, qids) for c in configs]
            for trial, values in zip(trials, series):
                study.tell(trial, float(values.mean()) if len(values) else 0.0)
        done += len(trials)
        if bar is not None:
            bar.update(len(trials))


def _params_of(study, params: list[Param]) -> dict[str, Any]:
    best = study.best_trial.params
    out = {}
    for p in params:
        value = best[p.name]
        if p.choices is not None:
            value = p.choices[[_label(c) for c in p.choices].index(value)]
        out[p.name] = value
    return out


def _trials_frame(study, name: Any) -> pd.DataFrame:
    frame = study.trials_dataframe(attrs=("number", "value", "params", "state"))
    frame.insert(0, "study", str(name))
    frame["state"] = frame["state"].astype(str)
    return frame


def _importance(study, params: list[Param], seed: int) -> pd.Series:
    """Parameter importances of the final search (Optuna's fANOVA, seeded); one parameter
    alone has importance 1."""
    import optuna
    names = [p.name for p in params]
    if len(names) == 1:
        return pd.Series({names[0]: 1.0}, name="importance")
    complete = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if len(complete) < 2 or len({t.value for t in complete}) < 2:
        return pd.Series({n: math.nan for n in names}, name="importance")
    evaluator = optuna.importance.FanovaImportanceEvaluator(seed=seed)
    values = optuna.importance.get_param_importances(study, evaluator=evaluator)
    return pd.Series({n: float(values.get(n, 0.0)) for n in names},
                     name="importance").sort_values(ascending=False)


def cv_fixed(trace: Trace, config: Any = None, *, measure: str | Measure = "R@10",
             folds: int = 5, group_by: str = "workspace", seed: int = 0, k: int = 20,
             categories: Iterable[Any] | None = None, mode: str = "router",
             measure_on: str = "retrieved", analyzer: str = "porter") -> pd.DataFrame:
    """The grouped-CV estimate of a fixed configuration: its mean on each held-out fold (the
    same folds :func:`tune` uses for the same seed), their mean and 95 % t-interval.

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> out = cv_fixed(synthetic_trace(300, 40, seed=1), "default", measure="MRR", folds=2,
    ...                group_by="question")
    >>> list(out.columns[:4])
    ['measure', 'cv_mean', 'ci_low', 'ci_high']
    """
    measure = _check_common(trace, measure, folds, 1, group_by, seed)
    config = resolve_config(config)
    result = replay(trace, config, mode=mode, k=k, measures=[str(measure)], seed=seed,
                    record_candidates=False, measure_on=measure_on, analyzer=analyzer,
                    progress=False)
    categories = _check_categories(categories)
    questions = _question_frame(trace, categories)
    split = grouped_folds(_groups(questions, group_by), folds, seed)
    values = result.metrics.set_index("qid")["value"]
    scores = np.array([values.reindex(f).mean() for f in split])
    low, high = _t_interval(scores, bounds=BOUNDS)
    pooled = values.reindex(questions["qid"]).dropna().to_numpy()
    boot_low, boot_high = bootstrap_ci(pooled, seed=seed)
    return pd.DataFrame([{"measure": str(measure), "cv_mean": float(scores.mean()),
                          "ci_low": low, "ci_high": high, "boot_low": boot_low,
                          "boot_high": boot_high, "folds": folds, "group_by": group_by,
                          "questions": len(pooled), "config": config.name,
                          "fold_scores": [round(float(s), 6) for s in scores]}])
