"""Surfacing configuration as frozen, serialisable data, and the named recipes.

A configuration says everything about how a query is surfaced: BM25 parameters, signal constants,
the composite's weights, the router's rules and, per strategy, which registered implementation
runs it (``None`` = soft-degrade to ``fast:recency`` as the seed did for reserved strategies).

Recipes
-------
``SEED_COMPAT``
    The seed (SmartMemory) as SPEC §2–4 define it: its router rules with no entity counting (the
    seed never computed ``entity_count``, so its entity rules never fire: ``entity_detector=
    "none"``), its plain lowercase word tokenizer with English stopwords and no stemming
    (``analyzer="plain"``), only ``deep:multi-hop`` with behaviour of its own,
    ``procedural:lookup`` and ``temporal:windowed`` soft-degrading, PPR through
    ``networkx.pagerank`` with its default stopping rule and the 10,000-node cap. A deliberately
    naive re-implementation of the seed in ``tests/seed_reference.py`` checks it (same strategy,
    same items in the same order, scores to 1e-12) in legacy and router mode. What the seed left
    unspecified is memlab's reading, listed in the README ("How far SEED_COMPAT is the seed").
``DEFAULT``
    memlab's own: the store's analyzer (Porter stemming by default), memlab's entity detector
    (``"capitalised"``), every strategy a distinct pipeline; three more router rules (procedural cues,
    time windows, and plain questions, which go through the graph); recency and activation as
    gentle tie-breakers unless the query asks for recency; activation propagated from each seed
    in proportion to its relevance; PPR by exact power iteration or local push by graph size, with
    no node cap. Its relevance and graph settings were measured on the shared evaluation data
    (see the README's quality table).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from memlab._deprecation import caller_stacklevel
from memlab.graph.ppr import PPRConfig
from memlab.graph.spreading import SpreadConfig
from memlab.signals.activation import ACTIVATION_MODELS
from memlab.signals.dense import DenseConfig
from memlab.surfacing.rerank import is_ranker_file
from memlab.surfacing.router import (ENTITY_DETECTORS, ROUTER_RULE_ALIASES, ROUTER_RULES,
                                    deprecated_rule_name)
from memlab.surfacing.stages import Pipeline
from memlab.surfacing.strategies import STRATEGIES, STRATEGY_ALIASES, deprecated_strategy_name
from memlab.text import ANALYZERS

__all__ = ["SurfacingConfig", "SEED_COMPAT", "DEFAULT", "BM25_ONLY", "RECIPES", "get_recipe",
           "shipped_recipes", "load_recipe_file", "recipe_search_path", "RECIPE_FORMAT"]

_STRATEGY_NAMES = ("fast:recency", "deep:multi-hop", "factual:point-query", "procedural:lookup",
                   "temporal:windowed")

# Fields that are whole numbers (>= 0; overfetch >= 1), fields that are fractions in [0, 1],
# fields that must be > 0, and the one number that may be negative. Every other number is a
# finite float >= 0.
_INT_FIELDS = frozenset({"overfetch", "recent_candidates", "temporal_window_candidates",
                         "multi_hop_seeds", "title_homonym_support",
                         "graph_bridge_hits", "graph_bridge_links", "graph_guard_k"})
_UNIT_FIELDS = frozenset({"bm25_b", "recency_floor", "recency_cue_floor", "activation_floor",
                          "activation_initial", "temporal_window_relevance_floor",
                          "title_match_weight", "spelling_weight"})
_POSITIVE_FIELDS = frozenset({"bm25_k1", "recency_tau_h", "activation_half_life_h",
                              "freshness_window_h", "actr_scale", "pin_ttl_h", "overfetch",
                              "graph_bridge_hits", "graph_bridge_links"})
_SIGNED_FIELDS = frozenset({"actr_threshold"})


def _finite(value: Any) -> bool:
    try:
        return math.isfinite(value)
    except OverflowError:  # an int too large for a float
        return False


def _check_number(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    kinds = (int,) if name in _INT_FIELDS else (int, float)
    what = "an integer" if name in _INT_FIELDS else "a finite number"
    if isinstance(value, bool) or not isinstance(value, kinds) or not _finite(value):
        raise ValueError(f"{name} must be {what}, got {value!r}")
    if name in _SIGNED_FIELDS:
        return
    if name in _POSITIVE_FIELDS and value <= 0:
        raise ValueError(f"{name} must be {what} > 0, got {value!r}")
    if value < 0:
        raise ValueError(f"{name} must be {what} >= 0, got {value!r}")
    if name in _UNIT_FIELDS and value > 1:
        raise ValueError(f"{name} must be in [0, 1], got {value!r}")


def _registered(name: str, value: Any, registry: Mapping[str, Any], what: str = "") -> None:
    """``value`` must name an entry of ``registry`` now (registering it later is too late)."""
    if not isinstance(value, str) or value not in registry:
        raise ValueError(f"{name} names {value!r}{what}, which is not registered; "
                         f"registered: {sorted(registry)}")


def _check_name(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if not isinstance(value, str):
        raise ValueError(f"name must be a string, got {value!r}")


def _check_analyzer(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or value not in ANALYZERS):
        raise ValueError(f"analyzer must be None or one of {sorted(ANALYZERS)}, got {value!r}")


def _check_tail(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    _check_number(cfg, name, value)
    if value > 3650:
        raise ValueError(f"{name} must be at most 3650 (ten years), got {value!r}")


def _check_spelling_analyzer(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if not isinstance(value, str) or value not in ANALYZERS:
        raise ValueError(f"spelling_analyzer must be one of {sorted(ANALYZERS)}, got {value!r}")


def _check_activation_model(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    _registered(name, value, ACTIVATION_MODELS)


def _check_entity_detector(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    _registered(name, value, ENTITY_DETECTORS)


def _check_router_rules(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if isinstance(value, (str, bytes, Mapping)) or not isinstance(value, (list, tuple)):
        raise ValueError(f"router_rules must be a list of registered rule names, got {value!r}")
    for rule in value:
        _registered("router_rules", rule, ROUTER_RULES)
    # a deprecated rule name (warned) is stored under its new name, so the recipe serialises it
    object.__setattr__(cfg, "router_rules", tuple(
        deprecated_rule_name(rule, stacklevel=caller_stacklevel())
        if rule in ROUTER_RULE_ALIASES else rule
        for rule in value))


def _check_strategies(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if isinstance(value, Mapping):
        pairs = list(value.items())
    elif isinstance(value, (list, tuple)) and all(
            isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        pairs = [tuple(p) for p in value]
    else:
        raise ValueError(f"strategies must map strategy names to implementation names (or "
                         f"None), got {value!r}")
    unknown = [s for s, _ in pairs if not isinstance(s, str) or s not in _STRATEGY_NAMES]
    if unknown:
        raise ValueError(f"strategies names unknown strategies {unknown}; "
                         f"valid: {list(_STRATEGY_NAMES)}")
    strategies = dict(pairs)
    for strategy, impl in strategies.items():
        if isinstance(impl, (list, tuple)):  # a pipeline as to_dict wrote it
            try:
                impl = strategies[strategy] = Pipeline.from_dict(impl)
            except ValueError as exc:
                raise ValueError(f"strategies: the pipeline for {strategy!r} is invalid "
                                 f"({exc})") from None
        if isinstance(impl, str) and impl in STRATEGY_ALIASES:
            impl = strategies[strategy] = deprecated_strategy_name(
                impl, stacklevel=caller_stacklevel())
        if isinstance(impl, Pipeline):
            impl.check_strategy(f"strategies: the pipeline for {strategy!r}")
        elif impl is not None:
            _registered("strategies", impl, STRATEGIES, f" (for {strategy!r})")
    if strategies.get("fast:recency") is None:
        raise ValueError("strategies must implement 'fast:recency' (the soft-degrade target), "
                         f"got {value!r}")
    object.__setattr__(cfg, "strategies", tuple((s, strategies.get(s)) for s in _STRATEGY_NAMES))


def _check_spread_relevance(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if not isinstance(value, str) or value not in ("seed", "propagated"):
        raise ValueError(f"spread_relevance must be 'seed' or 'propagated', got {value!r}")


def _check_bool(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"{name} must be True or False, got {value!r}")


def _check_hop(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    """``second_hop_features``: True, False, or the groups to record (stages/ranker_features.py
    ``HOP_GROUPS``), kept as one canonical value: False, True (every group), or the group names
    in ``HOP_GROUPS`` order joined by ``+`` (``"prf"``, ``"title+homonym"``)."""
    from memlab.surfacing.stages.ranker_features import hop_groups
    object.__setattr__(cfg, name, _hop_value(hop_groups(value)))


def _hop_value(groups: tuple[str, ...]) -> bool | str:
    """``second_hop_features``' canonical value for ``groups`` (in ``HOP_GROUPS`` order)."""
    from memlab.surfacing.stages.ranker_features import HOP_GROUPS
    return bool(groups) if len(groups) in (0, len(HOP_GROUPS)) else "+".join(groups)


def _check_nested(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    kind = {"spreading": SpreadConfig, "ppr": PPRConfig, "dense": DenseConfig}[name]
    if isinstance(value, Mapping):
        try:
            value = kind.from_dict(value)
        except (ValueError, TypeError) as exc:
            raise ValueError(f"{name} is not a valid {kind.__name__} ({exc}), "
                             f"got {dict(value)!r}") from None
        object.__setattr__(cfg, name, value)
    elif value is not None and not isinstance(value, kind):
        raise ValueError(f"{name} must be a {kind.__name__}, a mapping of its fields, or None, "
                         f"got {value!r}")


def _check_reranker(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if value is None:
        return
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"reranker must be None, a registered reranker or a ranker file "
                         f"(*.json), got {value!r}")
    if not is_ranker_file(value):
        from memlab.surfacing.rerank import RERANKERS
        _registered(name, value, RERANKERS, " (and is not a *.json ranker file)")


def _check_link_types(cfg: "SurfacingConfig", name: str, value: Any) -> None:
    if value is None:
        return
    if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)) or not value or \
            not all(isinstance(v, str) and v for v in value):
        raise ValueError(f"{name} must be None or a non-empty list of edge type names, "
                         f"got {value!r}")
    object.__setattr__(cfg, name, tuple(value))


_FIELD_CHECKS = {
    "name": _check_name, "graph_link_types": _check_link_types, "analyzer": _check_analyzer,
    "activation_model": _check_activation_model, "entity_detector": _check_entity_detector,
    "router_rules": _check_router_rules, "strategies": _check_strategies,
    "spread_relevance": _check_spread_relevance, "temporal_restrict": _check_bool,
    "ranker_features": _check_bool, "second_hop_features": _check_hop,
    "spreading": _check_nested, "ppr": _check_nested, "dense": _check_nested,
    "reranker": _check_reranker, "spelling_analyzer": _check_spelling_analyzer,
    "temporal_window_tail_days": _check_tail,
}


@dataclass(frozen=True)
class SurfacingConfig:
    """Every knob of surfacing. Build variants with :meth:`replace`; validated on construction.

    Construction checks every field's type and value and raises ValueError naming the field and
    the value. Names of router rules, strategy implementations, the activation model and the
    entity detector are checked against their registries as they stand at construction: register
    a custom one (``register_router_rule``, ``register_strategy``, ...) before building a
    configuration that names it.

    Examples
    --------
    >>> cfg = DEFAULT.replace(centrality_weight=0.8)
    >>> cfg.centrality_weight, SurfacingConfig.from_dict(cfg.to_dict()) == cfg
    (0.8, True)
    >>> DEFAULT.replace(pin_boost_factor=-1)
    Traceback (most recent call last):
    ...
    ValueError: pin_boost_factor must be a finite number >= 0, got -1
    >>> DEFAULT.replace(router_rules=("nope",))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: router_rules names 'nope', which is not registered; registered: [...]
    """

    name: str = "custom"
    # relevance (SPEC §2.1)
    bm25_k1: float = 1.2
    bm25_b: float = 0.75
    # how item text and the query become BM25 terms for surfacing (a name in memlab.text.ANALYZERS:
    # "porter" or "plain"); None: the store's own analyzer (MemoryStore(analyzer=...), "porter"
    # by default). Another analyzer than the store's gets its own index in each workspace, built
    # on first use and kept up to date by every write after that.
    analyzer: str | None = None
    overfetch: int = 5
    # recency and freshness (SPEC §2.2)
    recency_tau_h: float = 24.0
    recency_floor: float = 0.0  # router mode: recency term = floor + (1 - floor) * recency
    recency_cue_floor: float = 0.0  # the floor when the query asks for recency (fast:recency)
    freshness_weight: float = 0.2
    freshness_window_h: float = 24.0
    # activation (SPEC §2.3)
    activation_model: str = "seed"
    activation_initial: float = 0.5
    activation_half_life_h: float = 720.0
    activation_increment: float = 0.05
    activation_floor: float = 0.05
    actr_decay: float = 0.5
    actr_threshold: float = -5.0
    actr_scale: float = 1.0
    # composite (SPEC §3 step 4)
    centrality_weight: float = 0.5
    pin_boost_factor: float = 0.3
    anchor_boost: float = 1.0
    # pins (SPEC §2.5)
    pin_ttl_h: float = 24.0
    # router (SPEC §4.1): rule names from memlab.surfacing.router.ROUTER_RULES, first match wins
    router_rules: tuple[str, ...] = ("multi_hop", "recency_words", "point_query")
    # the router's entity counter (memlab.surfacing.router.ENTITY_DETECTORS): "capitalised"
    # (memlab's detector) or "none" (entity_count is always 0, as in the seed)
    entity_detector: str = "capitalised"
    # strategy → registered implementation (memlab.surfacing.strategies.STRATEGIES), a
    # Pipeline of stages (serialised as its list of stages), or None
    strategies: tuple[tuple[str, "str | Pipeline | None"], ...] = (
        ("fast:recency", "plain"), ("deep:multi-hop", "multi_hop"),
        ("factual:point-query", "plain"), ("procedural:lookup", None),
        ("temporal:windowed", None),
    )
    # strategy parameters (SPEC §4.2)
    recent_candidates: int = 10
    exact_match_boost: float = 0.5
    point_query_recency_exponent: float = 0.25
    procedural_type_boost: float = 1.0
    temporal_window_boost: float = 1.0
    temporal_window_relevance_floor: float = 0.5
    temporal_restrict: bool = False
    temporal_window_candidates: int = 50
    multi_hop_seeds: int = 5
    # "seed": spread-only items get relevance damping**hops (SPEC §4.2); "propagated": each seed
    # sends its own relevance times damping**hops, lifting every item reached to at least that
    spread_relevance: str = "seed"
    # graph stages of deep:multi-hop (SPEC §5); None skips the stage (noted in the record)
    spreading: SpreadConfig | None = SpreadConfig()
    ppr: PPRConfig | None = PPRConfig()
    # hybrid dense relevance (router mode; the dense extra's embedder, or a registered one)
    dense: DenseConfig | None = None
    # router mode: items whose title (metadata title/label/name, parenthetical suffix optional)
    # the query names join the candidates, and relevance = (1 - w) * relevance + w * named
    title_match_weight: float = 0.0
    # title-match precision (issue 17): 0 counts every title match; n >= 1 counts an item named
    # only without its parenthetical qualifier ("X (footballer)" by "X") when the qualifier is in
    # the query or n of the query's other terms are in its text (stages/title_precision.py)
    title_homonym_support: int = 0
    # the graph as a re-ranker that can only help (issue 17; stages/graph_rerank.py), after the
    # composite of a strategy with graph stages. Bridges: a candidate linked to at least
    # graph_bridge_links of the graph_bridge_hits best candidates gets its score times
    # (1 + graph_bridge_boost) (0: off). Guard: an item of the retrieval's top graph_guard_k
    # that the graph pushes out of the top graph_guard_k comes back unless its replacement is
    # linked to a seed or is a bridge (0: off).
    graph_bridge_boost: float = 0.0
    graph_bridge_hits: int = 3
    graph_bridge_links: int = 2
    graph_guard_k: int = 0
    # the edge types that count as a link for bridges and the guard (None: the spreading's)
    graph_link_types: tuple[str, ...] | None = None
    # router mode: a learned re-ranking stage (memlab.surfacing.rerank) whose score replaces
    # the composite's before the budget: a ranker file (*.json, memlab.learn writes them) or
    # a name registered with register_reranker; None: no such stage
    reranker: str | None = None
    # router mode: record the ranker-feature columns (rf_*: links and dense similarity to the
    # top hits, the spelling field's BM25, time-window membership, speaker and entity overlap;
    # stages/ranker_features.py) before the budget, for a ranker to learn from and read
    ranker_features: bool = False
    # router mode: record the second-hop columns (rf_hop_*: the candidate's title in the top
    # hits' text and theirs in its, BM25 and dense for the query expanded with the top hit,
    # homonyms of the top hit; stages/ranker_features.py), with or without ``ranker_features``;
    # True records every group, a group name ("title", "prf", "homonym") or names joined by
    # "+" ("title+prf") only those groups' columns (and a ranker then reads only those)
    second_hop_features: bool | str = False
    # LoCoMo quality options (issue 17; README "LoCoMo quality work"), all off by default:
    # temporal:windowed's window extended this many days past its end (events told later:
    # "yesterday I went bowling" in the next session)
    temporal_window_tail_days: float = 0.0
    # a second BM25 field over ``spelling_analyzer`` (character trigrams) fused with BM25:
    # lexical score = bm25 + w * best_bm25 * second / best_second
    spelling_weight: float = 0.0
    spelling_analyzer: str = "trigram"

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            _FIELD_CHECKS.get(f.name, _check_number)(self, f.name, getattr(self, f.name))
        if self.graph_bridge_links > self.graph_bridge_hits:  # a bridge could never qualify
            raise ValueError(f"graph_bridge_links must be at most graph_bridge_hits "
                             f"({self.graph_bridge_hits}), got {self.graph_bridge_links}")

    def strategy_impl(self, strategy: str) -> "str | Pipeline | None":
        """The implementation (a registered name or a pipeline) that runs ``strategy`` (None:
        soft-degrades)."""
        table = self.__dict__.get("_strategy_table")
        if table is None:  # built once: this runs on every query
            table = dict(self.strategies)
            object.__setattr__(self, "_strategy_table", table)
        return table[strategy]

    def _repr_html_(self) -> str:
        from memlab.surfacing.display import config_html; return config_html(self, DEFAULT)  # noqa: E702,E501

    def __repr__(self) -> str:
        from memlab.surfacing.display import config_repr; return config_repr(self, DEFAULT)  # noqa: E702,E501

    def replace(self, **changes: Any) -> "SurfacingConfig":
        """A copy with ``changes`` applied (validated). Unknown names raise ValueError."""
        known = {f.name for f in dataclasses.fields(self)}
        bad = sorted(set(changes) - known)
        if bad:
            raise ValueError(f"unknown configuration field(s) {bad}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["router_rules"] = list(self.router_rules)
        out["strategies"] = {s: impl.to_dict() if isinstance(impl, Pipeline) else impl
                             for s, impl in self.strategies}
        for name in ("spreading", "ppr", "dense"):
            value = getattr(self, name)
            out[name] = None if value is None else value.to_dict()
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SurfacingConfig":
        """The configuration :meth:`to_dict` wrote; ValueError for anything else. A deprecated
        strategy or router rule name loads under its new name with a
        :class:`~memlab.errors.MemlabDeprecationWarning` attributed to the caller's line (as
        from :func:`load_recipe_file` and :func:`get_recipe`)."""
        if not isinstance(data, Mapping):
            raise ValueError(f"data must be a mapping of configuration fields, got {data!r}")
        data = dict(data)
        if "strategies" in data and isinstance(data["strategies"], Mapping):
            data["strategies"] = tuple(data["strategies"].items())
        known = {f.name for f in dataclasses.fields(cls)}
        bad = sorted((set(data) - known), key=repr)
        if bad:
            raise ValueError(f"unknown configuration field(s) {bad}")
        return cls(**data)


# The seed ran networkx.pagerank (its default stopping rule) and skipped workspaces over 10,000 nodes;
# it tokenized without stemming and never counted entities.
SEED_COMPAT = SurfacingConfig(
    name="seed_compat",
    analyzer="plain",
    entity_detector="none",
    ppr=PPRConfig(method="networkx", tol_scaled_by_n=True, max_nodes=10_000),
)

# memlab's own recipe. Its relevance and graph settings (recency and activation as gentle
# tie-breakers unless the query asks for recency, no freshness bonus, questions routed through
# the graph, propagated spreading with damping 0.7, a quarter of relevance from naming an item's
# title) were chosen by measuring on the shared
# evaluation data (LoCoMo's 5 dev conversations and HippoRAG's MuSiQue 100-question set), the only
# real data this project has: the README's quality table says so next to every number.
DEFAULT = SurfacingConfig(
    name="default",
    recency_floor=0.95,
    recency_cue_floor=0.2,
    activation_floor=0.5,
    freshness_weight=0.0,
    router_rules=("procedural", "temporal", "multi_hop", "recency_words", "point_query",
                  "question"),
    strategies=(
        ("fast:recency", "recent_items"), ("deep:multi-hop", "multi_hop"),
        ("factual:point-query", "point_query"), ("procedural:lookup", "procedural"),
        ("temporal:windowed", "temporal"),
    ),
    spread_relevance="propagated",
    spreading=SpreadConfig(damping=0.7),
    title_match_weight=0.25,
)

# Plain BM25 as a baseline: no router, no graph, no recency, flat activation, no boosts.
BM25_ONLY = SurfacingConfig(
    name="bm25",
    router_rules=(),
    recency_floor=1.0,
    activation_floor=1.0,
    freshness_weight=0.0,
    centrality_weight=0.0,
    strategies=(("fast:recency", "plain"), ("deep:multi-hop", "plain"),
                ("factual:point-query", "plain"), ("procedural:lookup", None),
                ("temporal:windowed", None)),
    spreading=None,
    ppr=None,
)

RECIPES: dict[str, SurfacingConfig] = {"seed_compat": SEED_COMPAT, "default": DEFAULT,
                                       "bm25": BM25_ONLY}


RECIPE_FORMAT = "memlab-recipe/1"
_RECIPE_DIR = Path(__file__).resolve().parent.parent / "recipes"  # recipes shipped with memlab


def recipe_search_path() -> list[Path]:
    """Folders searched for ``<name>.json`` recipe files: those in ``$MEMLAB_RECIPE_PATH``
    (``os.pathsep``-separated), then the ``memlab/recipes`` folder shipped with memlab."""
    extra = [Path(p) for p in os.environ.get("MEMLAB_RECIPE_PATH", "").split(os.pathsep) if p]
    return [*extra, _RECIPE_DIR]


def load_recipe_file(path: str | Path) -> SurfacingConfig:
    """The configuration in a recipe file: ``{"format": "memlab-recipe/1", "config": {...},
    ...provenance}`` (what ``memlab tune`` writes) or bare :meth:`SurfacingConfig.to_dict`
    output. ValueError naming ``path`` for anything else. A ``reranker`` file named by a
    relative path is looked for beside the recipe file first (so a recipe and its ranker
    travel together), else read as given.

    Examples
    --------
    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> file = Path(folder) / "mine.json"
    >>> _ = file.write_text(json.dumps({"format": RECIPE_FORMAT,
    ...                                 "config": DEFAULT.replace(name="mine").to_dict()}))
    >>> load_recipe_file(file) == DEFAULT.replace(name="mine")
    True
    """
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"path {str(path)!r} is not valid JSON: {exc.msg} at line "
                         f"{exc.lineno}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"path {str(path)!r} cannot be read: {exc}") from None
    if isinstance(data, dict) and "format" in data:
        if data["format"] != RECIPE_FORMAT or not isinstance(data.get("config"), dict):
            raise ValueError(f"path {str(path)!r} must hold a {RECIPE_FORMAT!r} recipe with a "
                             f"'config' object, got format {data.get('format')!r}")
        unknown = sorted(set(data) - set(RECIPE_KEYS), key=str)
        if unknown:
            raise ValueError(f"path {str(path)!r} holds unknown recipe key(s) {unknown} (a "
                             f"recipe has {list(RECIPE_KEYS)})")
        data = data["config"]
    if not isinstance(data, dict):
        raise ValueError(f"path {str(path)!r} must hold a JSON object (a recipe or "
                         f"SurfacingConfig.to_dict() output), got {type(data).__name__}")
    try:
        config = SurfacingConfig.from_dict(data)
    except (ValueError, TypeError) as exc:
        raise ValueError(f"path {str(path)!r} is not a valid configuration: {exc}") from None
    if is_ranker_file(config.reranker) and not Path(config.reranker).is_absolute():
        # a ranker file named relative to its recipe file (how memlab tune writes them and
        # memlab/recipes ships them): found beside the recipe, wherever it is read from
        beside = path.resolve().parent / config.reranker
        if beside.is_file():
            config = config.replace(reranker=str(beside))
    check_reranker_file(config, f"path {str(path)!r}")
    return config


RECIPE_KEYS = ("format", "name", "config", "provenance")


def check_reranker_file(config: SurfacingConfig, where: str = "config") -> None:
    """Read ``config``'s ranker file now (when its ``reranker`` is a ``*.json`` path), so a
    missing or bad file, or one reading features the recipe does not record, is blamed on the
    recipe that names it, not on a trace mid-replay.

    The model's features must be ones the recipe records: the base features always, the
    ``rf_*`` ones with ``ranker_features`` on, and the second-hop ones of the groups its
    ``second_hop_features`` names (``rerank.HOP_FEATURE_GROUPS``). A recipe recording a group
    (or ``ranker_features``) its ranker does not read gets a warning: the stage then computes
    columns nobody reads.

    Raises
    ------
    ValueError
        The file cannot be read, is not a ranker, or reads features the recipe does not
        record (naming the file, the groups it reads and ``second_hop_features``).

    Examples
    --------
    >>> check_reranker_file(get_recipe("dense-multihop"))  # records prf, its ranker reads prf
    >>> bad = get_recipe("dense-multihop").replace(second_hop_features="title")
    >>> check_reranker_file(bad)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    ValueError: config: its reranker '...' reads ... ['prf'], ... second_hop_features='title', ...
    """
    if not is_ranker_file(config.reranker):
        return
    from memlab.surfacing.rerank import EXTRA_FEATURES, HOP_FEATURE_GROUPS, load_ranker
    from memlab.surfacing.stages.ranker_features import hop_groups
    try:
        model = load_ranker(config.reranker)
    except ValueError as exc:
        raise ValueError(f"{where}: its reranker {config.reranker!r} is not usable: "
                         f"{exc}") from None
    reads = set(model.features)
    reads_rf = bool(reads & set(EXTRA_FEATURES))
    needs = tuple(g for g, names in HOP_FEATURE_GROUPS.items() if reads & set(names))
    recorded = hop_groups(config.second_hop_features)
    value = config.second_hop_features

    lacking = [g for g in needs if g not in recorded]
    lacks_rf = reads_rf and not config.ranker_features
    if lacking or lacks_rf:
        also = (f" and ranker_features={config.ranker_features!r} (it reads rf_* features)"
                if lacks_rf else "")
        fix = f"second_hop_features={_hop_value(needs)!r}" + (" and ranker_features=True"
                                                            if reads_rf else "")
        raise ValueError(
            f"{where}: its reranker {config.reranker!r} reads the second-hop group(s) "
            f"{list(needs)}, but the recipe records second_hop_features={value!r}{also}, so "
            f"its candidates would lack {lacking + (['rf_*'] if lacks_rf else [])}; set {fix} "
            f"or name a ranker trained on what the recipe records")
    unread = [g for g in recorded if g not in needs]
    if unread or (config.ranker_features and not reads_rf):
        from memlab._deprecation import caller_stacklevel
        unread_rf = config.ranker_features and not reads_rf
        what = ([f"the second-hop group(s) {unread}"] if unread else []) + (
            ["the rf_* features (ranker_features=True)"] if unread_rf else [])
        warnings.warn(
            f"{where}: the recipe records {' and '.join(what)} (second_hop_features={value!r}), "
            f"which its reranker {config.reranker!r} does not read (its second-hop groups: "
            f"{list(needs)}): they cost CPU per query for nothing; second_hop_features="
            f"{_hop_value(needs)!r}{', ranker_features=False' if unread_rf else ''} ranks the same",
            UserWarning, stacklevel=caller_stacklevel())


def _recipe_in(folder: Path, name: str) -> Path | None:
    """``<name>.json`` in ``folder``, the exact name first, else matched case-insensitively
    (as built-in names are: ``DEFAULT``); None when absent."""
    exact = folder / f"{name}.json"
    if exact.is_file():
        return exact
    try:
        matches = sorted(p for p in folder.iterdir()
                         if p.name.lower() == f"{name}.json".lower() and p.is_file())
    except OSError:
        return None
    return matches[0] if matches else None


def shipped_recipes() -> list[str]:
    """The names of the recipe files shipped in memlab/recipes (``multihop``, ...), sorted: the
    one list that :func:`get_recipe`'s error and the CLI's ``--config`` error show."""
    return sorted(p.stem for p in _RECIPE_DIR.glob("*.json")
                  if not p.name.endswith(".ranker.json"))


def get_recipe(name: str) -> SurfacingConfig:
    """A recipe by name or by path, else ValueError.

    ``name`` is a built-in recipe (``"seed_compat"``, ``"default"``, ``"bm25"``), a path to a
    recipe file (``*.json``, see :func:`load_recipe_file`), or the name of a recipe file
    ``<name>.json`` in one of :func:`recipe_search_path`'s folders. A recipe file naming a
    deprecated strategy or router rule loads with a DeprecationWarning that points at the
    line calling this function.

    Examples
    --------
    >>> get_recipe("bm25").name
    'bm25'
    >>> get_recipe("nope")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    memlab.errors.UnknownRecipeError: recipe must be one of ['bm25', 'default', 'seed_compat'], ...
    """
    if isinstance(name, str) and name in RECIPES:
        return RECIPES[name]
    if isinstance(name, str) and name.lower() in RECIPES and not Path(name).exists():
        return RECIPES[name.lower()]
    if isinstance(name, (str, Path)) and str(name).strip():
        path = Path(name)
        if path.suffix == ".json" and path.is_file():
            return load_recipe_file(path)
        if path.suffix != ".json" and path.name == str(name):  # a bare name: search the path
            for folder in recipe_search_path():
                candidate = _recipe_in(folder, str(name))
                if candidate is not None:
                    return load_recipe_file(candidate)
    from memlab.errors import UnknownRecipeError
    shipped = shipped_recipes()
    raise UnknownRecipeError(f"recipe must be one of {sorted(RECIPES)}, a recipe file (*.json) or the "
                     f"name of one in {[str(p) for p in recipe_search_path()]} (shipped: "
                     f"{shipped}), got {name!r}")
