"""Train, save and cross-validate the learned ranking stage (issue 17 item 2).

A model learns, from the candidates a replay of a dev trace recorded (its *frames*), which
candidate of a question is gold: scikit-learn's ``LogisticRegression`` on standardised
features (``kind="logistic"``: gold or not) or LightGBM's ``lambdarank`` (``kind=
"lambdarank"``: the graded gold, per question). Features are
:func:`memlab.surfacing.rerank.candidate_features` (BM25, dense, title match, spread score,
PPR centrality, recency, activation, source, strategy, the composite, each candidate's rank
under each signal, the query's length). The model is saved as one JSON file with its feature
list and a training manifest (trace, base recipe, the questions it was trained on, settings,
library versions) and used as a stage of a recipe: ``SurfacingConfig(reranker=<file>)``.

It is evaluated only by grouped cross-validation (:func:`cv_ranker`): for each fold a model is
trained on the other folds' questions and ranks the held-out fold's candidates exactly as the
live stage would (the same ordering and ``k`` cut), so no question ever scores a model that saw
it. Needs the ``learn`` extra.
"""

from __future__ import annotations

import functools
import os
import platform
import re
import sys
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np
import pandas as pd

from memlab.harness.experiment import bootstrap_ci
from memlab.harness.measures import Measure, parse_measures
from memlab.harness.replay import ReplayResult, replay, resolve_config
from memlab.harness.trace import Trace
from memlab.surfacing.rerank import ALL_FEATURES, RankerModel, candidate_features
from memlab.tuning.evaluate import rank_frame
from memlab.tuning.search import (BOUNDS, GROUP_BY, _check_categories, _question_frame,
                                  _t_interval, grouped_folds)

__all__ = ["frame_features", "fit_ranker", "cv_ranker", "check_ranker_params", "RankerCV",
           "KINDS"]

KINDS = ("logistic", "lambdarank")
_LGBM_DEFAULTS = {"n_estimators": 200, "learning_rate": 0.05, "num_leaves": 15,
                  "min_child_samples": 20, "reg_lambda": 1.0}


def frame_features(live: ReplayResult) -> tuple[pd.DataFrame, np.ndarray]:
    """Features of every recorded candidate of ``live`` (row-aligned with
    ``live.candidates``) and each row's question number (its index in ``live.decisions``)."""
    cands, dec = live.candidates, live.decisions
    if cands.empty:
        raise ValueError("live has no recorded candidates (replay with record_candidates=True)")
    group = pd.Index(dec["qid"]).get_indexer(cands["qid"])
    strategy = dec["strategy_used"].to_numpy(dtype=object)[group]
    words = dec["query"].map(lambda q: len(str(q).split())).to_numpy()[group]
    return candidate_features(cands, strategy, words, group), group


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")


# settings memlab itself passes to the estimator (from ``seed`` or for determinism)
_FIXED = {"logistic": ("random_state",),
          "lambdarank": ("objective", "random_state", "n_jobs", "deterministic",
                         "force_row_wise", "verbose")}


def check_ranker_params(kind: str, params: Mapping[str, Any] | None) -> None:
    """Check a ranker's settings before any work: every key must be a setting of the estimator
    (``LogisticRegression`` or ``LGBMRanker``, or a LightGBM parameter) that memlab does not set
    itself, and the estimator must accept the values (a tiny fit on synthetic rows).

    Raises
    ------
    ValueError
        One line naming the setting and its value.

    Examples
    --------
    >>> check_ranker_params("logistic", {"C": 0.5})
    >>> check_ranker_params("logistic", {"nosuch": 1})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: logistic setting nosuch=1 is not a LogisticRegression parameter (known: C, ...)
    """
    _check_kind(kind)
    if params is None:
        return
    if not isinstance(params, Mapping):
        raise ValueError(f"{kind} params must be a mapping, got {params!r}")
    items = tuple(sorted((str(k), v) for k, v in params.items()))
    try:
        hash(items)
    except TypeError:  # a dict or list value (class_weight={...}): checked, not cached
        return _check_params_cached.__wrapped__(kind, items)
    _check_params_cached(kind, items)


@functools.lru_cache(maxsize=256)
def _check_params_cached(kind: str, items: tuple) -> None:
    params = dict(items)
    x = np.tile(np.array([[0.0, 1.0], [1.0, 0.0], [0.5, 0.2], [0.1, 0.9]]), (2, 1))
    y = np.array([0, 1, 0, 1, 1, 0, 1, 0])
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression
        settings = {"C": 1.0, "max_iter": 2000, **params}
        known = sorted(LogisticRegression().get_params())
        name = "LogisticRegression"
    else:
        import lightgbm
        settings = {**_LGBM_DEFAULTS, **params}
        known = sorted(lightgbm.LGBMRanker().get_params())
        name = "LGBMRanker"
        try:
            from lightgbm.basic import _ConfigAliases
            native = _ConfigAliases._get_all_param_aliases()
            known_all = set(known) | set(native) | {a for al in native.values() for a in al}
        except Exception:  # pragma: no cover - a LightGBM without the alias table
            known_all = set(known)
    for key, value in params.items():
        if key in _FIXED[kind]:
            raise ValueError(f"{kind} setting {key}={value!r} is set by memlab (from the seed, "
                             f"or for deterministic training): leave it out")
        if key not in (known if kind == "logistic" else known_all):
            shown = [k for k in known if k not in _FIXED[kind]]
            raise ValueError(f"{kind} setting {key}={value!r} is not a {name} parameter "
                             f"(known: {', '.join(shown[:11])}, ...)")
    try:
        if kind == "logistic":
            from sklearn.linear_model import LogisticRegression
            LogisticRegression(random_state=0, **settings).fit(x, y)
        else:
            import lightgbm
            import lightgbm.basic as basic
            if isinstance(settings.get("n_estimators"), int) and settings["n_estimators"] > 2:
                settings["n_estimators"] = 2  # the values are checked, not the model
            saved = (basic._LOGGER, basic._INFO_METHOD_NAME, basic._WARNING_METHOD_NAME)

            class _Quiet:
                def info(self, msg: str) -> None: pass

                def warning(self, msg: str) -> None: pass

            lightgbm.register_logger(_Quiet())
            sys.stderr.flush()
            err = os.dup(2)  # LightGBM's native library writes a refusal to stderr itself
            null = os.open(os.devnull, os.O_WRONLY)
            os.dup2(null, 2)
            try:
                lightgbm.LGBMRanker(objective="lambdarank", random_state=0, n_jobs=1,
                                    deterministic=True, force_row_wise=True, verbose=-1,
                                    **settings).fit(x, y, group=[4, 4])
            finally:
                os.dup2(err, 2)
                os.close(err)
                os.close(null)
                basic._log_native("")  # flush a half-sent native message while quiet
                basic._LOGGER, basic._INFO_METHOD_NAME, basic._WARNING_METHOD_NAME = saved
    except Exception as exc:  # noqa: BLE001 - any refusal of the estimator is the user's value
        given = ", ".join(f"{k}={v!r}" for k, v in params.items())
        text = " ".join(str(exc).split()) or type(exc).__name__
        text = re.sub(r" at \S+, line \d+ ?\.?$", "", text)  # LightGBM's source location
        raise ValueError(f"{kind} settings {given} rejected by {name}: {text}") from None


def fit_ranker(live: ReplayResult, qids: Iterable[str] | None = None, *,
               kind: str = "logistic", seed: int = 0, params: Mapping[str, Any] | None = None,
               features: Sequence[str] | None = None,
               _features: tuple[pd.DataFrame, np.ndarray] | None = None) -> RankerModel:
    """A model trained on the candidates of ``qids`` (default: every judged question).

    ``params`` go to ``LogisticRegression`` (default ``C=1.0, max_iter=2000``) or to
    ``lightgbm.LGBMRanker`` (defaults: 200 trees, learning rate 0.05, 15 leaves); training is
    deterministic for a ``seed`` (LightGBM on one thread, ``deterministic=True``).

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> model = fit_ranker(replay(synthetic_trace(200, 30, seed=1)), kind="logistic")
    >>> model.kind, len(model.manifest["train_qids"]) > 0
    ('logistic', True)
    """
    check_ranker_params(kind, params)
    if not isinstance(live, ReplayResult):
        raise ValueError(f"live must be a ReplayResult, got {type(live).__name__}")
    if features is not None:
        unknown = sorted(set(features) - set(ALL_FEATURES))
        if unknown or not len(features):
            raise ValueError(f"features must be a non-empty subset of ALL_FEATURES, got "
                             f"unknown {unknown}")
    feats, group = _features if _features is not None else frame_features(live)
    if features is None:  # every feature the frame has (the rf_* ones when recorded)
        features = list(feats.columns)
    absent = [f for f in features if f not in feats.columns]
    if absent:
        raise ValueError(f"features {absent[:4]} are not in live's candidates (replay a recipe "
                         f"with ranker_features=True)")
    dec = live.decisions
    wanted = dec["qid"].tolist() if qids is None else list(qids)
    missing = sorted(set(wanted) - set(dec["qid"]))
    if missing:
        raise ValueError(f"qids names questions live does not hold: {missing[:5]}")
    label = live.candidates["gold"].to_numpy(dtype=float)
    rows = np.flatnonzero(np.isin(dec["qid"].to_numpy(dtype=object)[group],
                                  np.asarray(wanted, dtype=object)))
    if not (label[rows] > 0).any() or (label[rows] > 0).all():
        raise ValueError("qids must give candidates of both kinds (gold and not) to learn from")
    trained_on = sorted(set(dec["qid"].to_numpy(dtype=object)[group[rows]]))
    x = feats.iloc[rows][list(features)].to_numpy(dtype=float)
    y = label[rows]
    if kind == "logistic":
        from sklearn.linear_model import LogisticRegression
        from sklearn.preprocessing import StandardScaler
        import sklearn
        scaler = StandardScaler().fit(x)
        settings = {"C": 1.0, "max_iter": 2000, **(params or {})}
        clf = LogisticRegression(random_state=seed, **settings).fit(scaler.transform(x),
                                                                  (y > 0).astype(int))
        stored = {"mean": scaler.mean_.tolist(), "scale": scaler.scale_.tolist(),
                  "coef": clf.coef_[0].tolist(), "intercept": float(clf.intercept_[0])}
        library = {"scikit-learn": sklearn.__version__}
    else:
        import lightgbm
        order = np.argsort(group[rows], kind="stable")  # LightGBM wants each query contiguous
        x, y, g = x[order], y[order], group[rows][order]
        sizes = np.unique(g, return_counts=True)[1]
        settings = {**_LGBM_DEFAULTS, **(params or {})}
        model = lightgbm.LGBMRanker(objective="lambdarank", random_state=seed, n_jobs=1,
                                    deterministic=True, force_row_wise=True, verbose=-1,
                                    **settings)
        model.fit(x, np.rint(y).astype(int), group=sizes)
        stored = {"model": model.booster_.model_to_string()}
        library = {"lightgbm": lightgbm.__version__}
    manifest = {"kind": kind, "seed": seed, "settings": settings,
                "trace": live.manifest.get("trace"),
                "base_config": live.manifest.get("config", {}).get("name"),
                "k": live.manifest.get("k"), "train_qids": trained_on,
                "rows": int(len(rows)), "positives": int((y > 0).sum()),
                "versions": {**library, "python": platform.python_version()}}
    return RankerModel(kind, list(features), stored, manifest)


@dataclass
class RankerCV:
    """Grouped-CV estimate of a learned ranker: ``table`` (per measure: ``cv_mean`` = mean of
    held-out fold means, t-interval over folds, bootstrap over pooled held-out questions, and
    beside it the base replay's ``base_cv_mean`` on the same folds), ``folds`` (per fold and
    measure), ``held_out`` (per question), ``models`` (one per fold, each with its training
    manifest) and ``split`` (the held-out questions of each fold)."""

    table: pd.DataFrame
    folds: pd.DataFrame
    held_out: pd.DataFrame
    models: list[RankerModel] = field(default_factory=list)
    split: list[list[str]] = field(default_factory=list)

    def __repr__(self) -> str:
        """One line: per measure the CV mean with its interval and the base's (the frames,
        models and question lists are attributes)."""
        parts = []
        for row in self.table.to_dict("records"):
            base = f" vs base {row['base_cv_mean']:.3f}" if "base_cv_mean" in row else ""
            parts.append(f"{row['measure']} {row['cv_mean']:.3f} [{row['ci_low']:.3f}, "
                         f"{row['ci_high']:.3f}]{base}")
        kind = self.models[0].kind if self.models else "?"
        return (f"RankerCV({kind}, {len(self.split)} folds, "
                f"{sum(len(s) for s in self.split)} held-out questions: {'; '.join(parts)})")


def cv_ranker(trace: Trace, *, base: Any = None, live: ReplayResult | None = None,
              kind: str = "logistic", measures: Iterable[str | Measure] = ("R@10", "MRR"),
              folds: int = 5, group_by: str = "workspace", seed: int = 0, k: int = 20,
              categories: Iterable[Any] | None = None, params: Mapping[str, Any] | None = None,
              analyzer: str = "porter") -> RankerCV:
    """Grouped ``folds``-fold CV of a ranker trained on ``base``'s replay frames of ``trace``.

    The folds are :func:`memlab.tuning.grouped_folds` of the judged questions (in
    ``categories``), the same as :func:`memlab.tuning.tune` and :func:`memlab.tuning.cv_fixed`
    use for the same ``seed``, so the three estimates are comparable fold by fold.

    Examples
    --------
    >>> from memlab.datasets.synthetic import synthetic_trace
    >>> out = cv_ranker(synthetic_trace(300, 40, seed=1), measures=["MRR"], folds=2,
    ...                 group_by="question")
    >>> out.table[["measure", "folds"]].values.tolist()
    [['MRR', 2]]
    """
    check_ranker_params(kind, params)
    if not isinstance(trace, Trace):
        raise ValueError(f"trace must be a Trace, got {type(trace).__name__}")
    if group_by not in GROUP_BY:
        raise ValueError(f"group_by must be one of {list(GROUP_BY)}, got {group_by!r}")
    measures = parse_measures(list(measures) if not isinstance(measures, str) else measures)
    bad = [str(m) for m in measures if not m.needs_gold]
    if bad:
        raise ValueError(f"measures must be relevance measures, got {bad}")
    base = resolve_config(base)
    if live is None:
        live = replay(trace, base, k=k, measures=measures, seed=seed, analyzer=analyzer,
                      progress=False)
    categories = _check_categories(categories)
    if live is not None and (not isinstance(live, ReplayResult)
                             or live.manifest.get("trace", {}).get("hash") != trace.hash()):
        raise ValueError("live must be a ReplayResult of this trace (its manifest's trace hash "
                         f"differs), got {type(live).__name__}")
    questions = _question_frame(trace, categories)
    key = "workspace_id" if group_by == "workspace" else "qid"
    split = grouped_folds(pd.Series(questions[key].to_numpy(), index=questions["qid"]), folds,
                          seed)
    feats, group = frame_features(live)
    cands, dec = live.candidates, live.decisions
    row_qid = dec["qid"].to_numpy(dtype=object)[group]
    all_qids = questions["qid"].tolist()
    base_values = live.metrics.pivot_table(index="qid", columns="measure", values="value")
    fold_rows, held, models = [], [], []
    for i, test in enumerate(split):
        test_set = set(test)
        train = [q for q in all_qids if q not in test_set]
        model = fit_ranker(live, train, kind=kind, seed=seed + i, params=params,
                           _features=(feats, group))
        rows = np.flatnonzero(np.isin(row_qid, np.asarray(test, dtype=object)))
        scores = model.predict(feats.iloc[rows])
        test_dec = dec[dec["qid"].isin(test_set)]
        for m in measures:
            values = rank_frame(cands.iloc[rows], test_dec, scores, m).reindex(test).dropna()
            base_m = (base_values[str(m)] if str(m) in base_values else
                      pd.Series(dtype=float)).reindex(test).dropna()
            held.append(pd.DataFrame({"fold": i, "measure": str(m), "qid": values.index,
                                      "value": values.to_numpy(),
                                      "base": base_m.reindex(values.index).to_numpy()}))
            fold_rows.append({"fold": i, "measure": str(m), "score": float(values.mean()),
                              "base_score": float(base_m.mean()), "n_test": len(values),
                              "n_train": len(train)})
        models.append(model)
    fold_frame = pd.DataFrame(fold_rows)
    held_out = pd.concat(held, ignore_index=True)
    rows = []
    for m in measures:
        f = fold_frame[fold_frame["measure"] == str(m)]
        h = held_out[held_out["measure"] == str(m)]
        low, high = _t_interval(f["score"].to_numpy(), bounds=BOUNDS)
        d_low, d_high = _t_interval((f["score"] - f["base_score"]).to_numpy())
        b_low, b_high = bootstrap_ci(h["value"].to_numpy(), seed=seed)
        rows.append({"measure": str(m), "cv_mean": float(f["score"].mean()), "ci_low": low,
                     "ci_high": high, "boot_low": b_low, "boot_high": b_high,
                     "base_cv_mean": float(f["base_score"].mean()),
                     "delta": float(f["score"].mean() - f["base_score"].mean()),
                     "delta_ci_low": d_low, "delta_ci_high": d_high,
                     "folds_better": int((f["score"] > f["base_score"]).sum()),
                     "folds": folds, "group_by": group_by, "questions": len(h), "kind": kind})
    return RankerCV(pd.DataFrame(rows), fold_frame, held_out, models, split)
