"""The data model of SPEC §1 and the router's decision record of SPEC §3.

Items and edges live in :mod:`memlab.store`; this module holds their value types, the known
memory and edge types, and :class:`SurfacingDecision`.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from datetime import datetime
from enum import Enum
from typing import Any, Mapping

import numpy as np

__all__ = [
    "MEMORY_TYPES", "DEFAULT_SPREADING_EDGE_TYPES", "NON_PROPAGATING_EDGE_TYPES", "KNOWN_EDGE_TYPES",
    "MemoryItem", "Edge", "SurfacingStrategy", "SurfacingDecision",
    "validate_edge_type", "validate_weight", "validate_metadata", "validate_id", "validate_text",
    "validate_json", "check_text", "MAX_JSON_DEPTH",
]

MEMORY_TYPES: frozenset[str] = frozenset(
    {"semantic", "episodic", "procedural", "working", "topic", "anchor", "concept"}
)

DEFAULT_SPREADING_EDGE_TYPES: tuple[str, ...] = (
    "RELATED", "RELATES_TO", "CO_RETRIEVED", "ANSWERED_BY", "PART_OF", "MENTIONS", "MENTIONED_IN",
    "CONTAINS_ENTITY", "LINKS_TO", "LINKED_TO", "DERIVED_FROM", "INFERRED_FROM", "HAS_SKILL",
    "HAS_CONTEXT", "TAGGED_WITH", "ALIAS_OF",
)
# Contradictions must not propagate boosts; supersession is replacement; grounding leaves the workspace.
NON_PROPAGATING_EDGE_TYPES: tuple[str, ...] = ("CONTRADICTS", "SUPERSEDES", "GROUNDED_IN")
KNOWN_EDGE_TYPES: frozenset[str] = frozenset(DEFAULT_SPREADING_EDGE_TYPES + NON_PROPAGATING_EDGE_TYPES)

HISTORY_CAP = 500  # events kept per item (and versions kept per topic field)

_EDGE_TYPE_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def validate_edge_type(edge_type: Any) -> str:
    """Return ``edge_type`` if it matches ``^[A-Za-z_][A-Za-z0-9_]*$``, else raise ValueError."""
    if not isinstance(edge_type, str) or not _EDGE_TYPE_RE.match(edge_type):
        raise ValueError(f"edge_type must match ^[A-Za-z_][A-Za-z0-9_]*$, got {edge_type!r}")
    return edge_type


def validate_weight(value: Any, name: str = "weight", *, allow_zero: bool = True) -> float:
    """Return ``value`` as a float if finite and non-negative (positive when ``allow_zero`` is False)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, float, np.integer,
                                                                      np.floating)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    if isinstance(value, np.generic):  # a column's value (a DataFrame of edges): as the Python one
        value = value.item()
    try:
        value = float(value)
    except OverflowError:  # an int beyond the float range
        raise ValueError(f"{name} must be finite, got an int of {value.bit_length()} bits") from None
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return value


_SURROGATE_RE = re.compile("[\ud800-\udfff]")

# How deep metadata (and a topic's JSON field values) may nest: deep enough for any real record,
# shallow enough that every later encode, copy and response stays far from the recursion limit.
MAX_JSON_DEPTH = 32


def check_text(value: str, name: str) -> str:
    """Return ``value`` (a str) unless it holds a lone surrogate (U+D800..U+DFFF), else raise.

    A Python ``str`` can hold a surrogate code point that no UTF-8 text can: it journals, but
    every response that contains it fails to encode. This is the one check that every write
    path and every query path of memlab applies to the text it is given (content, ids, session
    ids, labels, queries, metadata keys and values at any depth).

    Raises
    ------
    ValueError
        ``"<name> contains a lone surrogate at <position>"`` (the message never repeats the
        character itself, so the error can always be reported).

    Examples
    --------
    >>> check_text("deploy checklist", "content")
    'deploy checklist'
    >>> check_text("deploy \\udc00 checklist", "content")
    Traceback (most recent call last):
    ...
    ValueError: content contains a lone surrogate at 7
    """
    if not value.isascii():
        found = _SURROGATE_RE.search(value)
        if found is not None:
            raise ValueError(f"{name} contains a lone surrogate at {found.start()}")
    return value


def validate_text(value: Any, name: str) -> str:
    """Return ``value`` if it is a non-empty (not all-space) string of valid Unicode.

    Examples
    --------
    >>> validate_text("fresh login flow", "content")
    'fresh login flow'
    >>> validate_text("  ", "content")
    Traceback (most recent call last):
    ...
    ValueError: content must be a non-empty string, got '  '
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r:.80}")
    return check_text(value, name)


def validate_id(value: Any, name: str) -> str:
    """Return ``value`` if it is a non-empty string of valid Unicode without NUL, else raise
    ValueError naming ``name``.

    Examples
    --------
    >>> validate_id("item-1", "item_id")
    'item-1'
    >>> validate_id("a\\x00b", "item_id")
    Traceback (most recent call last):
    ...
    ValueError: item_id must not contain NUL (at 1), got 'a\\x00b'
    """
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r:.80}")
    nul = value.find("\x00")
    if nul >= 0:
        raise ValueError(f"{name} must not contain NUL (at {nul}), got {value!r:.80}")
    return check_text(value, name)


def validate_json(value: Any, name: str, *, max_depth: int = MAX_JSON_DEPTH) -> None:
    """Check JSON-like data before it is stored: every key a string, every string (keys
    included) valid Unicode, nesting at most ``max_depth`` containers deep. Other problems (types JSON cannot hold,
    NaN, ints too long to print) are left to the JSON round trip that follows.

    Raises
    ------
    ValueError
        Naming the path of the bad value, e.g. ``metadata['a'][0] contains a lone surrogate
        at 2``, ``metadata['a'] nests deeper than 32 levels`` or ``metadata keys must be
        strings at every depth, got key 2 at metadata['a'][0]``.

    Examples
    --------
    >>> validate_json({"a": [{"b": 1}]}, "metadata")
    >>> validate_json({"a": [{2: "x"}]}, "metadata")
    Traceback (most recent call last):
    ...
    ValueError: metadata keys must be strings at every depth, got key 2 at metadata['a'][0]
    """
    stack = [(value, name, 0)]
    while stack:
        node, path, depth = stack.pop()
        if isinstance(node, str):
            check_text(node, path)
        elif isinstance(node, (dict, list, tuple)) or isinstance(node, Mapping):
            if depth >= max_depth:
                raise ValueError(f"{path} nests deeper than {max_depth} levels")
            if isinstance(node, Mapping):
                for key, child in node.items():
                    if not isinstance(key, str):  # JSON would hand it back as a string
                        raise ValueError(f"{name} keys must be strings at every depth, got key "
                                         f"{key!r:.40} at {path}")
                    check_text(key, f"{path} key {key!r:.40}")
                    stack.append((child, f"{path}[{key!r:.40}]", depth + 1))
            else:
                stack.extend((child, f"{path}[{i}]", depth + 1) for i, child in enumerate(node))


def validate_metadata(metadata: Any, name: str = "metadata") -> dict:
    """Return a JSON-serialisable copy of ``metadata`` (``None`` → ``{}``), else raise ValueError.

    Keys and string values must be valid Unicode at any depth (:func:`check_text`), nesting is
    at most :data:`MAX_JSON_DEPTH` levels, numbers must be finite.

    Examples
    --------
    >>> validate_metadata({"tags": ["a", "b"], "n": 1})
    {'tags': ['a', 'b'], 'n': 1}
    >>> validate_metadata({"tags": ["a", "\\udc00"]})
    Traceback (most recent call last):
    ...
    ValueError: metadata['tags'][1] contains a lone surrogate at 0
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"{name} must be a dict or None, got {type(metadata).__name__}")
    if not metadata:
        return {}
    validate_json(metadata, name)
    try:
        # A round trip both proves serialisability and gives the store its own deep copy.
        return json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be JSON-serialisable: {exc}") from None


def copy_json(value: dict) -> dict:
    """A deep copy of JSON data (the store never hands out its own mutable metadata)."""
    return json.loads(json.dumps(value)) if value else {}


@dataclass(slots=True)
class MemoryItem:
    """One stored memory (SPEC §1.1). The store owns these; the public API returns dicts."""

    item_id: str
    content: str
    memory_type: str
    metadata: dict
    workspace_id: str
    created_at: datetime
    updated_at: datetime
    salience: float = 1.0
    archived: bool = False
    history: list[dict] = field(default_factory=list)
    history_dropped: int = 0  # events beyond HISTORY_CAP, oldest first, counted not kept

    def record(self, event: dict) -> None:
        """Append a history event, keeping the newest ``HISTORY_CAP`` (drops are counted)."""
        self.history.append(event)
        if len(self.history) > HISTORY_CAP:
            del self.history[0]
            self.history_dropped += 1

    def to_dict(self) -> dict[str, Any]:
        """A JSON-friendly snapshot (datetimes as ISO strings, copies of mutable fields)."""
        return {
            "item_id": self.item_id, "content": self.content, "memory_type": self.memory_type,
            "metadata": copy_json(self.metadata), "workspace_id": self.workspace_id,
            "created_at": self.created_at.isoformat(), "updated_at": self.updated_at.isoformat(),
            "salience": self.salience, "archived": self.archived,
            "history": [dict(event) for event in self.history],
            "history_dropped": self.history_dropped,
        }


@dataclass(frozen=True, slots=True)
class Edge:
    """A directed, typed, weighted edge between two items of one workspace (SPEC §1.2)."""

    src: str
    dst: str
    edge_type: str = "RELATED"
    weight: float = 1.0


class SurfacingStrategy(str, Enum):
    """The strategies of SPEC §4.2. Values are the wire names."""

    FAST_RECENCY = "fast:recency"
    DEEP_MULTI_HOP = "deep:multi-hop"
    FACTUAL_POINT = "factual:point-query"
    PROCEDURAL_LOOKUP = "procedural:lookup"
    TEMPORAL_WINDOWED = "temporal:windowed"

    def __str__(self) -> str:  # so f-strings and reprs show the wire name
        return self.value

    @classmethod
    def parse(cls, value: Any, name: str = "strategy") -> "SurfacingStrategy":
        """Return the member named by ``value`` (a member or its wire name), else ValueError."""
        if isinstance(value, cls):
            return value
        try:
            return cls(value)
        except ValueError:
            valid = ", ".join(repr(s.value) for s in cls)
            raise ValueError(f"{name} must be one of {valid}; got {value!r}") from None


@dataclass(frozen=True)
class SurfacingDecision:
    """What drove one dispatch: the strategy, the router's confidence, its reasons and signals.

    Examples
    --------
    >>> d = SurfacingDecision(SurfacingStrategy.DEEP_MULTI_HOP, 0.75, ("keyword:why",),
    ...                       {"query_length": 27, "word_count": 6, "entity_count": 1})
    >>> SurfacingDecision.from_dict(d.to_dict()) == d
    True
    """

    strategy: SurfacingStrategy
    confidence: float
    reasons: tuple[str, ...]
    signals: Mapping[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        object.__setattr__(self, "strategy", SurfacingStrategy.parse(self.strategy))
        object.__setattr__(self, "reasons", tuple(self.reasons))
        object.__setattr__(self, "signals", dict(self.signals))

    def to_dict(self) -> dict[str, Any]:
        return {"strategy": self.strategy.value, "confidence": self.confidence,
                "reasons": list(self.reasons), "signals": dict(self.signals)}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SurfacingDecision":
        return cls(strategy=SurfacingStrategy.parse(data["strategy"]),
                   confidence=float(data["confidence"]), reasons=tuple(data["reasons"]),
                   signals=dict(data.get("signals", {})))
