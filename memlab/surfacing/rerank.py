"""A learned re-ranking stage: candidate features, saved ranking models, and the hook that
replaces the composite score by a model's score before the budgeted selection.

A recipe names its model with ``SurfacingConfig.reranker``: the path of a ranker file (JSON,
written by :mod:`memlab.learn`) or a name registered with :func:`register_reranker`. In router
mode, after the composite (SPEC §3 step 4), every candidate's features are computed from the
same columns the record holds (:func:`candidate_features`), and the model's score becomes the
candidate's ``score``; ordering (mandatory first, filtered last) and the budget are unchanged.
The composite's score is itself a feature, so a model can only re-weigh what is there.

The features are computed the same way from a replay's recorded candidate frame (training,
cross-validation) and from a live candidate table (this stage); a test checks that a replay
under a recipe with a reranker ranks exactly as the model ranks the recorded frame.

With the recipe's ``ranker_features`` on, the ``ranker_features`` stage records nine more
columns (``rf_*``: links and dense similarity to the top hits, the spelling field's BM25,
time-window membership, speaker and entity overlap), which :data:`EXTRA_FEATURES` read;
with its ``second_hop_features`` on, nine ``rf_hop_*`` columns (the candidate's title in the
top hits' text and theirs in its, BM25 and dense for the query expanded with the top hit,
homonyms of the top hit), which :data:`HOP_FEATURES` read (only the groups recorded:
:data:`HOP_FEATURE_GROUPS`, when the option names some).

Not recorded per candidate, so not a feature: the number of hops a spread candidate travelled
(only its spread score is: the relevance of a ``spread``-sourced candidate).

This module needs only numpy and pandas for logistic models; LightGBM models need the
``learn`` extra (``lightgbm``) at prediction time.
"""

from __future__ import annotations

import hashlib
import json
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np
import pandas as pd

from memlab._registry import register
from memlab.surfacing.stages.ranker_features import (HOP_GROUPS,
                                                     RANKER_FEATURE_COLUMNS)

__all__ = ["FEATURES", "EXTRA_FEATURES", "HOP_FEATURES", "HOP_FEATURE_GROUPS", "ALL_FEATURES", "SOURCES", "STRATEGY_NAMES", "RANKED_SIGNALS", "RANKER_FORMAT",
           "candidate_features", "RankerModel", "load_ranker", "register_reranker",
           "RERANKERS", "rerank_scores", "is_ranker_file", "ranker_label"]

RANKER_FORMAT = "memlab-ranker/1"
SOURCES = ("relevance", "spread", "dense", "title", "window", "recent", "procedural", "pin",
           "anchor")
STRATEGY_NAMES = ("fast:recency", "deep:multi-hop", "factual:point-query", "procedural:lookup",
                  "temporal:windowed")
# signals whose rank among the query's candidates is a feature (rank 1 = the largest)
RANKED_SIGNALS = ("bm25", "dense", "relevance", "centrality", "recency", "activation", "score")
_NUMERIC = ("bm25", "dense", "relevance", "relevance_term", "recency", "activation",
            "centrality_raw", "centrality", "freshness", "multiplier", "score")
_FLAGS = ("title_match", "exact_match")

FEATURES: tuple[str, ...] = (
    *_NUMERIC, "bm25_share", *_FLAGS, "spread_score",
    *(f"source_{s}" for s in SOURCES),
    *(f"strategy_{s}" for s in STRATEGY_NAMES),
    *(f"rank_{s}" for s in RANKED_SIGNALS),
    "query_words", "candidates",
)
# issue 17 (dense targets): features of the ``rf_*`` columns that the ranker-feature stage
# records when the recipe's ``ranker_features`` is on (stages/ranker_features.py)
EXTRA_FEATURES: tuple[str, ...] = (
    "links_top1", "links_top3", "links_top5", "dense_top3",
    "trigram", "trigram_share", "rank_trigram",
    "window_none", "window_in", "window_tail", "window_out", "window_days",
    "speaker_match", "entity_overlap",
)
# issue 17 (MuSiQue's second hop): features of the ``rf_hop_*`` columns the same stage records
# when the recipe's ``second_hop_features`` is on. Each column ``rf_hop_X`` gives ``hop_X``;
# the expanded-query scores also give their share of the query's best (``_HOP_SHARED``) and
# their rank (``_HOP_RANKED``).
_HOP_SHARED = ("prf_title", "prf_content")
_HOP_RANKED = ("prf_title", "prf_content", "prf_dense")


def _hop_feature_names(columns: Sequence[str]) -> tuple[str, ...]:
    names: list[str] = []
    for column in columns:
        base = column.removeprefix("rf_hop_")
        names.append(f"hop_{base}")
        if base in _HOP_SHARED:
            names.append(f"hop_{base}_share")
        if base in _HOP_RANKED:
            names.append(f"rank_hop_{base}")
    return tuple(names)


# the features each second-hop group's columns give, derived from the stage's ``HOP_GROUPS``
# (so a group and its features cannot drift apart): a recipe recording only some groups
# (``second_hop_features="prf"``) gives only theirs
HOP_FEATURE_GROUPS: dict[str, tuple[str, ...]] = {
    group: _hop_feature_names(columns) for group, columns in HOP_GROUPS.items()}
HOP_FEATURES: tuple[str, ...] = tuple(
    name for names in HOP_FEATURE_GROUPS.values() for name in names)
ALL_FEATURES: tuple[str, ...] = FEATURES + EXTRA_FEATURES + HOP_FEATURES


def candidate_features(columns: Mapping[str, Any], strategy: Sequence[str] | str,
                       query_words: Sequence[int] | int,
                       group: Sequence[int] | None = None) -> pd.DataFrame:
    """The feature matrix (one row per candidate, columns :data:`FEATURES`, and
    :data:`EXTRA_FEATURES` after them when ``columns`` has the ranker-feature stage's ``rf_*``
    columns, then :data:`HOP_FEATURES` when it has its ``rf_hop_*`` ones: those of each group of
    :data:`HOP_FEATURE_GROUPS` whose columns it has).

    ``columns`` holds the candidate columns a record has (``bm25``, ``dense``, ``relevance``,
    ``relevance_term``, ``recency``, ``activation``, ``centrality_raw``, ``centrality``,
    ``freshness``, ``multiplier``, ``score`` = the composite, ``title_match``, ``exact_match``,
    ``source``); ``strategy`` and ``query_words`` (the number of whitespace-separated words of
    the query) per candidate or one for all; ``group`` numbers each row's query (ranks and
    shares are within a query; None: one query).

    Examples
    --------
    >>> cols = {name: [1.0, 3.0] for name in _NUMERIC}
    >>> cols.update(title_match=[False, True], exact_match=[False, False],
    ...             source=["relevance", "spread"])
    >>> f = candidate_features(cols, "deep:multi-hop", 3)
    >>> f[["rank_bm25", "bm25_share", "spread_score", "source_spread",
    ...    "query_words"]].values.tolist()
    [[2.0, 0.3333333333333333, 0.0, 0.0, 3.0], [1.0, 1.0, 3.0, 1.0, 3.0]]
    """
    source = np.asarray(columns["source"], dtype=object)
    n = len(source)
    group = np.zeros(n, dtype=np.int64) if group is None else np.asarray(group, dtype=np.int64)
    out: dict[str, np.ndarray] = {}
    for name in _NUMERIC:
        out[name] = np.nan_to_num(np.asarray(columns[name], dtype=float))
    by = pd.Series(out["bm25"]).groupby(group)
    top = by.transform("max").to_numpy()
    out["bm25_share"] = np.divide(out["bm25"], top, out=np.zeros(n), where=top > 0)
    for name in _FLAGS:
        out[name] = np.asarray(columns[name], dtype=bool).astype(float)
    out["spread_score"] = np.where(source == "spread", out["relevance"], 0.0)
    for s in SOURCES:
        out[f"source_{s}"] = (source == s).astype(float)
    strategy = np.full(n, strategy, dtype=object) if isinstance(strategy, str) \
        else np.asarray(strategy, dtype=object)
    for s in STRATEGY_NAMES:
        out[f"strategy_{s}"] = (strategy == s).astype(float)
    for s in RANKED_SIGNALS:
        out[f"rank_{s}"] = pd.Series(out[s]).groupby(group).rank(
            method="min", ascending=False).to_numpy()
    out["query_words"] = np.broadcast_to(np.asarray(query_words, dtype=float), (n,)).copy()
    out["candidates"] = pd.Series(np.ones(n)).groupby(group).transform("sum").to_numpy()
    names = list(FEATURES)
    if "rf_links_top3" in columns:
        names += EXTRA_FEATURES
        _extra_features(columns, out, group, n)
    hop = tuple(g for g, cols in HOP_GROUPS.items() if all(c in columns for c in cols))
    if hop:
        for g in hop:
            names += HOP_FEATURE_GROUPS[g]
        _hop_features(columns, out, group, hop)
    return pd.DataFrame(out, columns=names)


def _extra_features(columns, out, group, n) -> None:
    rf = {name: np.nan_to_num(np.asarray(columns[name], dtype=float))
          for name in RANKER_FEATURE_COLUMNS}
    for hits in (1, 3, 5):
        out[f"links_top{hits}"] = rf[f"rf_links_top{hits}"]
    out["dense_top3"] = rf["rf_dense_top3"]
    out["trigram"] = rf["rf_trigram"]
    best = pd.Series(out["trigram"]).groupby(group).transform("max").to_numpy()
    out["trigram_share"] = np.divide(out["trigram"], best, out=np.zeros(n), where=best > 0)
    out["rank_trigram"] = pd.Series(out["trigram"]).groupby(group).rank(
        method="min", ascending=False).to_numpy()
    for code, name in enumerate(("window_none", "window_in", "window_tail", "window_out")):
        out[name] = (rf["rf_window"] == code).astype(float)
    out["window_days"] = rf["rf_window_days"]
    out["speaker_match"] = rf["rf_speaker"]
    out["entity_overlap"] = rf["rf_entities"]


def _hop_features(columns, out, group, groups) -> None:
    for g in groups:
        for column in HOP_GROUPS[g]:
            out["hop_" + column.removeprefix("rf_hop_")] = np.nan_to_num(
                np.asarray(columns[column], dtype=float))
    derived = [column.removeprefix("rf_hop_") for g in groups for column in HOP_GROUPS[g]]
    for name in (n for n in derived if n in _HOP_RANKED):
        series = pd.Series(out[f"hop_{name}"]).groupby(group)
        if name in _HOP_SHARED:
            best = series.transform("max").to_numpy()
            out[f"hop_{name}_share"] = np.divide(out[f"hop_{name}"], best,
                                                 out=np.zeros(len(best)), where=best > 0)
        out[f"rank_hop_{name}"] = series.rank(method="min", ascending=False).to_numpy()


class RankerModel:
    """A saved ranking model: its kind (``"logistic"`` or ``"lambdarank"``), the feature names
    it reads, its parameters, and the manifest of its training (trace, questions, settings).

    ``predict(features)`` scores rows of a :func:`candidate_features` frame (higher ranks
    first). Logistic models are stored as their standardisation and coefficients and scored
    in numpy (the decision function); LightGBM models as LightGBM's own model text.
    """

    def __init__(self, kind: str, features: Sequence[str], params: Mapping[str, Any],
                 manifest: Mapping[str, Any] | None = None) -> None:
        if kind not in ("logistic", "lambdarank"):
            raise ValueError(f"kind must be 'logistic' or 'lambdarank', got {kind!r}")
        unknown = sorted(set(features) - set(ALL_FEATURES))
        if unknown or not features:
            raise ValueError(f"features must be among ALL_FEATURES, got unknown {unknown}")
        self.kind, self.features = kind, list(features)
        self.params, self.manifest = dict(params), dict(manifest or {})
        self._booster = None
        # the SHA-256 of the file bytes it was parsed from (:func:`load_ranker`), else None
        self.file_sha256: str | None = None

    def predict(self, features: pd.DataFrame) -> np.ndarray:
        missing = [f for f in self.features if f not in features.columns]
        if missing:
            raise ValueError(f"the ranker reads features the candidates lack: {missing[:4]} "
                             f"(ranker features need a recipe with ranker_features=True, "
                             f"second-hop ones second_hop_features naming their group)")
        x = features[self.features].to_numpy(dtype=float)
        if self.kind == "logistic":
            p = self.params
            z = (x - np.asarray(p["mean"])) / np.asarray(p["scale"])
            return z @ np.asarray(p["coef"], dtype=float) + float(p["intercept"])
        if self._booster is None:
            try:
                import lightgbm
            except ImportError:  # pragma: no cover - depends on the install
                raise ImportError("a lambdarank ranker needs lightgbm: pip install "
                                  "'memlab[learn]'") from None
            self._booster = lightgbm.Booster(model_str=self.params["model"])
        return np.asarray(self._booster.predict(x, num_threads=1), dtype=float)

    def to_dict(self) -> dict[str, Any]:
        return {"format": RANKER_FORMAT, "kind": self.kind, "features": self.features,
                "params": self.params, "manifest": self.manifest}

    def save(self, path: str | Path) -> Path:
        """Write the model as one JSON file (no pickle)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), sort_keys=True))
        return path

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "data") -> "RankerModel":
        if not isinstance(data, Mapping) or data.get("format") != RANKER_FORMAT:
            raise ValueError(f"{where} must hold a {RANKER_FORMAT!r} ranker, got "
                             f"{(data.get('format') if isinstance(data, Mapping) else data)!r}")
        try:
            return cls(data["kind"], data["features"], data["params"], data.get("manifest"))
        except KeyError as exc:
            raise ValueError(f"{where} lacks {exc.args[0]!r}") from None


def is_ranker_file(reranker: Any) -> bool:
    """True when a recipe's ``reranker`` names a ranker file (``*.json``), not a registered name.

    Examples
    --------
    >>> is_ranker_file("recipes/multihop.ranker.json"), is_ranker_file("my-scorer")
    (True, False)
    """
    return isinstance(reranker, str) and reranker.endswith(".json")


def ranker_label(reranker: str) -> str:
    """How results name a reranker: a ranker file by its file name (never the folder it lies
    in, so manifests do not depend on where files are), a registered reranker by its name.

    Examples
    --------
    >>> ranker_label("/home/me/recipes/multihop.ranker.json"), ranker_label("my-scorer")
    ('multihop.ranker.json', 'my-scorer')
    """
    return Path(reranker).name if is_ranker_file(reranker) else reranker


_CACHE: dict[tuple[str, float], RankerModel] = {}
_CACHE_LOCK = threading.Lock()


def load_ranker(path: str | Path) -> RankerModel:
    """A ranker file (cached by path and modification time); ValueError naming ``path``."""
    path = Path(path)
    try:
        key = (str(path.resolve()), path.stat().st_mtime)
    except OSError as exc:
        raise ValueError(f"path {str(path)!r} cannot be read: {exc.strerror}") from None
    with _CACHE_LOCK:
        model = _CACHE.get(key)
    if model is None:
        try:
            raw = path.read_bytes()
            data = json.loads(raw.decode("utf-8"))
        except OSError as exc:
            raise ValueError(f"path {str(path)!r} cannot be read: {exc.strerror}") from None
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ValueError(f"path {str(path)!r} is not a ranker file: {exc}") from None
        model = RankerModel.from_dict(data, f"path {str(path)!r}")
        model.file_sha256 = hashlib.sha256(raw).hexdigest()
        with _CACHE_LOCK:
            _CACHE[key] = model
    return model


# name -> a function (feature frame) -> scores; register before building a recipe naming it
RERANKERS: dict[str, Callable[[pd.DataFrame], np.ndarray]] = {}


def register_reranker(name: str, score: Callable[[pd.DataFrame], np.ndarray] | RankerModel,
                      *, replace: bool = False) -> None:
    """Make ``score`` (a :class:`RankerModel` or a function of the feature frame) available as
    ``SurfacingConfig(reranker=name)``; a name already registered is refused (ValueError)
    unless ``replace=True``."""
    if not isinstance(name, str) or not name or is_ranker_file(name):
        raise ValueError(f"name must be a non-empty string not ending in .json, got {name!r}")
    if isinstance(score, RankerModel):
        score = score.predict
    if not callable(score):
        raise ValueError(f"score must be a RankerModel or callable, got {score!r}")
    register(RERANKERS, name, score, what="reranker", replace=replace)


def resolve_reranker(spec: str) -> Callable[[pd.DataFrame], np.ndarray]:
    """The scoring function a recipe's ``reranker`` names (registered name or file path)."""
    if spec in RERANKERS:
        return RERANKERS[spec]
    if is_ranker_file(spec):
        return load_ranker(spec).predict
    raise ValueError(f"reranker names {spec!r}, which is neither a registered reranker "
                     f"({sorted(RERANKERS)}) nor a ranker file (*.json)")


def rerank_scores(spec: str, columns: Mapping[str, Any], strategy: str, query: str
                  ) -> np.ndarray:
    """The stage: the model's score for one query's candidates."""
    scorer = resolve_reranker(spec)
    if not len(columns["source"]):
        return np.empty(0)
    features = candidate_features(columns, strategy, len(query.split()))
    return np.asarray(scorer(features), dtype=float)
