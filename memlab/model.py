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

__all__ = [
    "MEMORY_TYPES", "DEFAULT_SPREADING_EDGE_TYPES", "NON_PROPAGATING_EDGE_TYPES", "KNOWN_EDGE_TYPES",
    "MemoryItem", "Edge", "SurfacingStrategy", "SurfacingDecision",
    "validate_edge_type", "validate_weight", "validate_metadata", "validate_id",
    "check_json_keys",
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
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{name} must be a number, got {value!r}")
    value = float(value)
    if not math.isfinite(value) or value < 0 or (value == 0 and not allow_zero):
        bound = ">= 0" if allow_zero else "> 0"
        raise ValueError(f"{name} must be finite and {bound}, got {value!r}")
    return value


def validate_id(value: Any, name: str) -> str:
    """Return ``value`` if it is a non-empty string, else raise ValueError naming ``name``."""
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def check_json_keys(value: Any, name: str = "metadata") -> None:
    """Raise ValueError unless every mapping key in ``value``, at every depth, is a string.

    JSON turns other keys into strings (``{1: "a"}`` comes back as ``{"1": "a"}``), so a store
    that accepted them would hand back something else after a round trip or a reopen.

    Examples
    --------
    >>> check_json_keys({"a": [{"b": 1}]})
    >>> check_json_keys({"a": [{2: "x"}]})
    Traceback (most recent call last):
    ...
    ValueError: metadata keys must be strings at every depth, got key 2 at metadata['a'][0]
    """
    stack, seen = [(value, name)], set()
    while stack:  # iterative: deep nesting is JSON's concern, not a RecursionError here
        node, where = stack.pop()
        if isinstance(node, (Mapping, list, tuple)):
            if id(node) in seen:  # a cycle: json.dumps reports it
                continue
            seen.add(id(node))
        if isinstance(node, Mapping):
            for key, child in node.items():
                if not isinstance(key, str):
                    raise ValueError(f"{name} keys must be strings at every depth, got key "
                                     f"{key!r} at {where}")
                stack.append((child, f"{where}[{key!r}]"))
        elif isinstance(node, (list, tuple)):
            stack.extend((child, f"{where}[{i}]") for i, child in enumerate(node))


def validate_metadata(metadata: Any) -> dict:
    """Return a JSON-serialisable copy of ``metadata`` (``None`` → ``{}``), else raise ValueError.

    Keys must be strings at every depth (:func:`check_json_keys`).
    """
    if metadata is None:
        return {}
    if not isinstance(metadata, Mapping):
        raise ValueError(f"metadata must be a dict or None, got {type(metadata).__name__}")
    if not metadata:
        return {}
    check_json_keys(metadata, "metadata")
    try:
        # A round trip both proves serialisability and gives the store its own deep copy.
        return json.loads(json.dumps(dict(metadata), allow_nan=False))
    except (TypeError, ValueError) as exc:
        raise ValueError(f"metadata must be JSON-serialisable: {exc}") from None


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
