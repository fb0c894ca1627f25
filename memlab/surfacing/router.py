"""The router (SPEC §4.1): query text → :class:`SurfacingDecision`, first matching rule wins.

Rules are registered callables (:data:`ROUTER_RULES`), and a configuration lists the ones it
runs, in order (``SurfacingConfig.router_rules``). The seed's three rules are ``multi_hop``,
``recency_words`` and ``point_query``; ``SEED_COMPAT`` runs exactly these with the ``"none"`` entity
detector, so, as in the seed, ``entity_count`` is 0 and the entity clauses never fire. Other
recipes count entities with :class:`~memlab.text.CapitalisedSpanDetector` (``"capitalised"``),
which makes those clauses live. memlab's ``DEFAULT`` recipe runs six rules, in this order:

1. ``procedural`` (before ``multi_hop``, since "how to" contains "how") → ``procedural:lookup``;
2. ``temporal``: a time window parsed from the query → ``temporal:windowed``;
3. ``multi_hop``, 4. ``recency_words``, 5. ``point_query``: the seed's rules;
6. ``question``: any other question (a question word first, or a final "?") →
   ``deep:multi-hop`` with confidence 0.6.

A query no rule matches falls back to ``fast:recency`` (0.5, ``fallback``).

``recency_words`` (a recency word such as "latest" or "today" in the query) was called
``recency``, which is also the name of a signal; the old name still works for one release, with
a DeprecationWarning (:data:`ROUTER_RULE_ALIASES`).
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass
from datetime import datetime
from typing import Callable

from memlab._deprecation import RenamedEntries, caller_stacklevel
from memlab._registry import register
from memlab.errors import MemlabDeprecationWarning
from memlab.model import SurfacingDecision, SurfacingStrategy
from memlab.surfacing.timewindow import parse_time_window
from memlab.text import CapitalisedSpanDetector, EntityDetector, Gazetteer

__all__ = ["RouterInput", "route", "ROUTER_RULES", "ENTITY_DETECTORS", "register_router_rule",
           "register_entity_detector", "FALLBACK", "NoEntityDetector"]

MULTI_HOP_KEYWORDS = ("why", "how", "what caused", "explain")
RECENCY_WORDS = ("recent", "latest", "newest", "today", "yesterday")
QUESTION_WORDS = frozenset("what who where when why which whose how".split())
LOOKUP_PREFIXES = ("list", "show", "get", "find", "all")
PROCEDURAL_CUES = ("how do i", "how to", "how should i", "steps to", "steps for", "procedure for",
                   "instructions for", "runbook", "checklist")
_KEYWORD_RES = [(kw, re.compile(r"\b" + re.escape(kw) + r"\b", re.IGNORECASE))
                for kw in MULTI_HOP_KEYWORDS]
_BARE_NOUN_RE = re.compile(r"^(the\s+)?\w+s?$", re.IGNORECASE)
FALLBACK = (SurfacingStrategy.FAST_RECENCY, 0.5, ("fallback",))


@dataclass(frozen=True)
class RouterInput:
    """What a rule sees: the query, its signals, the entities found and the clock's time."""

    query: str
    lowered: str
    words: tuple[str, ...]
    entities: tuple[str, ...]
    now: datetime

    @property
    def signals(self) -> dict[str, int]:
        return {"query_length": len(self.query), "word_count": len(self.words),
                "entity_count": len(self.entities)}


RuleResult = tuple[SurfacingStrategy, float, tuple[str, ...]] | None


def rule_multi_hop(q: RouterInput) -> RuleResult:
    reasons = [f"keyword:{kw}" for kw, pattern in _KEYWORD_RES if pattern.search(q.query)]
    if len(q.entities) >= 2:
        reasons.append(f"entity_count:{len(q.entities)}")
    if len(q.query) > 80:
        reasons.append(f"length:{len(q.query)}")
    return (SurfacingStrategy.DEEP_MULTI_HOP, 0.75, tuple(reasons)) if reasons else None


def rule_recency_words(q: RouterInput) -> RuleResult:
    hits = tuple(f"recency_signal:{w}" for w in RECENCY_WORDS if w in q.lowered)
    return (SurfacingStrategy.FAST_RECENCY, 0.8, hits) if hits else None


def rule_point_query(q: RouterInput) -> RuleResult:
    if not (0 < len(q.words) <= 6):
        return None
    first = q.words[0].lower().strip(".,;:!?\"'()[]")
    if first in QUESTION_WORDS:
        return None
    if first in LOOKUP_PREFIXES:
        return SurfacingStrategy.FACTUAL_POINT, 0.7, (f"lookup_prefix:{first}",)
    if _BARE_NOUN_RE.match(q.query.strip()):
        return SurfacingStrategy.FACTUAL_POINT, 0.65, ("bare_noun",)
    if len(q.entities) == 1:
        return SurfacingStrategy.FACTUAL_POINT, 0.7, ("single_entity",)
    return None


def rule_procedural(q: RouterInput) -> RuleResult:
    hits = tuple(f"procedural_cue:{cue}" for cue in PROCEDURAL_CUES
                 if re.search(r"\b" + re.escape(cue) + r"\b", q.lowered))
    return (SurfacingStrategy.PROCEDURAL_LOOKUP, 0.7, hits) if hits else None


def rule_temporal(q: RouterInput) -> RuleResult:
    window = parse_time_window(q.query, q.now)
    if window is None:
        return None
    return SurfacingStrategy.TEMPORAL_WINDOWED, 0.7, (f"time_window:{window.phrase}",)


def rule_question(q: RouterInput) -> RuleResult:
    """A question with no other cue (beyond the seed): expand it through the graph."""
    first = q.words[0].lower().strip(".,;:!?\"'()[]") if q.words else ""
    if first in QUESTION_WORDS:
        return SurfacingStrategy.DEEP_MULTI_HOP, 0.6, (f"question:{first}",)
    if q.query.rstrip().endswith("?"):
        return SurfacingStrategy.DEEP_MULTI_HOP, 0.6, ("question:?",)
    return None


#: rule names of one release ago, deprecated: old name -> its new name
ROUTER_RULE_ALIASES = {"recency": "recency_words"}


def deprecated_rule_name(name: str, *, stacklevel: int = 2) -> str:
    """The current name of a deprecated router rule name (with a DeprecationWarning), or
    ``name`` itself.

    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     deprecated_rule_name("recency")
    'recency_words'
    """
    new = ROUTER_RULE_ALIASES.get(name)
    if new is None:
        return name
    warnings.warn(f"the router rule {name!r} is now called {new!r} ({name!r} is also the name "
                  f"of a signal); the old name goes in the next release", MemlabDeprecationWarning,
                  stacklevel=stacklevel + 1)
    return new


ROUTER_RULES: dict[str, Callable[[RouterInput], RuleResult]] = RenamedEntries({
    "multi_hop": rule_multi_hop,
    "question": rule_question,
    "recency_words": rule_recency_words,
    "point_query": rule_point_query,
    "procedural": rule_procedural,
    "temporal": rule_temporal,
}, ROUTER_RULE_ALIASES, lambda old: deprecated_rule_name(old, stacklevel=caller_stacklevel()))


def rule_recency(q: RouterInput) -> RuleResult:
    """Deprecated alias of :func:`rule_recency_words` (goes in the next release)."""
    warnings.warn("rule_recency is now called rule_recency_words; the old name goes in the next "
                  "release", MemlabDeprecationWarning, stacklevel=2)
    return rule_recency_words(q)

class NoEntityDetector:
    """Finds no entities: the seed's router, which never computed ``entity_count``.

    Examples
    --------
    >>> NoEntityDetector().detect("Did Alice meet Bob?")
    []
    """

    def detect(self, query: str, gazetteer: Gazetteer | None = None) -> list[str]:
        return []


ENTITY_DETECTORS: dict[str, EntityDetector] = {"capitalised": CapitalisedSpanDetector(),
                                               "none": NoEntityDetector()}


def register_router_rule(name: str, rule: Callable[[RouterInput], RuleResult], *,
                         replace: bool = False) -> None:
    """Make ``rule`` available to configurations as ``router_rules=(…, name, …)``; a name
    already registered is refused (ValueError) unless ``replace=True``."""
    register(ROUTER_RULES, name, rule, what="router rule", replace=replace)


def register_entity_detector(name: str, detector: EntityDetector, *,
                             replace: bool = False) -> None:
    """Make ``detector`` available as ``entity_detector=name``; a name already registered is
    refused (ValueError) unless ``replace=True``."""
    register(ENTITY_DETECTORS, name, detector, what="entity detector", check_callable=False,
             requires="detect", replace=replace)


def route(query: str, rules: tuple[str, ...], *, now: datetime, detector: EntityDetector,
          gazetteer: Gazetteer | None = None) -> SurfacingDecision:
    """Classify ``query`` with ``rules`` (names in :data:`ROUTER_RULES`), first match wins.

    Examples
    --------
    >>> from datetime import timezone
    >>> d = route("Why did we pick JWT?", ("multi_hop", "recency_words", "point_query"),
    ...           now=datetime(2024, 1, 1, tzinfo=timezone.utc), detector=CapitalisedSpanDetector())
    >>> d.strategy.value, d.confidence, d.reasons, d.signals["entity_count"]
    ('deep:multi-hop', 0.75, ('keyword:why',), 1)
    """
    words = tuple(query.split())
    q = RouterInput(query, query.lower(), words, tuple(detector.detect(query, gazetteer)), now)
    for name in rules:
        result = ROUTER_RULES[name](q)
        if result is not None:
            return SurfacingDecision(result[0], result[1], result[2], q.signals)
    return SurfacingDecision(FALLBACK[0], FALLBACK[1], FALLBACK[2], q.signals)
