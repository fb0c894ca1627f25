"""Traces (SPEC §7): typed, versioned event records, JSON Lines on disk, and a builder.

A trace is a header and a sequence of events. Each event has a ``type`` from
:data:`EVENT_SCHEMA`, that type's fields (checked for presence and type), and an optional ``ts``
(ISO 8601 with a timezone): replay sets its manual clock to ``ts`` before applying the event, so
timestamps must never go backwards. Any event may carry ``workspace_id`` (default: the header's),
so one trace can drive several independent workspaces of one store. On disk, line 1 is the header and each further line one event::

    {"type": "header", "format": "memlab-trace", "version": 1, "name": "demo", "start": "2024-05-01T09:00:00+00:00"}
    {"type": "add", "ts": "2024-05-01T09:00:00+00:00", "item_id": "t1", "content": "We picked JWT"}
    {"type": "query", "qid": "q1", "session_id": "s1", "query": "why JWT?", "gold": ["t1"]}

A malformed line raises :class:`TraceFormatError` naming the line and the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import operator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from memlab.clock import as_utc

__all__ = ["TRACE_FORMAT", "TRACE_VERSION", "EVENT_SCHEMA", "TraceFormatError", "Event", "Trace",
           "TraceBuilder"]

TRACE_FORMAT = "memlab-trace"
TRACE_VERSION = 1


class TraceFormatError(ValueError):
    """A trace line or event that does not follow the schema (the message names line and field)."""


def _text(v: Any) -> bool:
    return isinstance(v, str) and v.strip() != ""


def _number(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, (int, float)) and math.isfinite(v)


def _positive_int(v: Any) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v >= 1


def _mapping(v: Any) -> bool:
    return isinstance(v, Mapping)


def _gold(v: Any) -> bool:
    if isinstance(v, (list, tuple)):
        return all(_text(x) for x in v)
    if isinstance(v, Mapping):
        return all(_text(k) and _number(x) and x >= 0 for k, x in v.items())
    return False


def _text_list(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_text(x) for x in v)


def _timestamp(v: Any) -> bool:
    try:
        parse_ts(v)
        return True
    except (TypeError, ValueError):
        return False


def _any(v: Any) -> bool:
    return v is not None


# type -> (required {field: check}, optional {field: check}); "ts" is allowed on every event
EVENT_SCHEMA: dict[str, tuple[dict[str, Callable], dict[str, Callable]]] = {
    "add": ({"content": _text}, {"item_id": _text, "memory_type": _text, "metadata": _mapping,
                                 "created_at": _timestamp}),
    "add_edge": ({"src": _text, "dst": _text}, {"edge_type": _text, "weight": _number}),
    "query": ({"qid": _text, "query": _text},
              {"session_id": _text, "k": _positive_int, "max_tokens": _positive_int,
               "strategy": _text, "gold": _gold, "category": _any}),
    "pin": ({"session_id": _text, "item_id": _text}, {"weight": _number}),
    "unpin": ({"session_id": _text, "item_id": _text}, {}),
    "anchor": ({"session_id": _text, "content": _text},
               {"anchor_type": _text, "item_id": _text}),
    "ingest": ({"placement": _text}, {"topic_id": _text, "title": _text, "fields": _mapping,
                                      "field": _text, "value": _any, "ref": _text,
                                      "why_changed": _text, "provenance": _text,
                                      "valid_from": _timestamp}),
    "cache_set": ({"key": _text, "value": _text}, {"cache": _text}),
    "cache_peek": ({"key": _text}, {"cache": _text}),
    "promote": ({"session_id": _text, "key": _text, "value": _text}, {"node_type": _text}),
    "resolve": ({"session_id": _text, "key": _text}, {"cache": _text}),
    "clock": ({}, {"advance_s": _number}),
    "maintenance": ({}, {"dry_run": lambda v: isinstance(v, bool), "passes": _text_list}),
}


for _required, _optional in EVENT_SCHEMA.values():
    # any event may name the workspace it acts on (default: the trace's), so one trace can hold
    # several independent memories, e.g. one per LoCoMo conversation
    _optional["workspace_id"] = _text


#: what ``json.dumps(obj, sort_keys=True)`` uses, made once (the canonical JSON of a trace line)
_CANONICAL = json.JSONEncoder(sort_keys=True)


def parse_ts(value: Any) -> datetime:
    """An ISO 8601 string or datetime *with a timezone*, as a UTC datetime (a trace must not
    leave the reader to guess the zone)."""
    if isinstance(value, str):
        value = datetime.fromisoformat(value)
    if isinstance(value, datetime) and value.tzinfo is None:
        raise ValueError(f"ts must carry a timezone, got {value.isoformat()!r}")
    return as_utc(value, name="ts")


@dataclass(frozen=True)
class Event:
    """One trace event: its ``type``, its fields, and an optional timestamp."""

    type: str
    fields: Mapping[str, Any]
    ts: datetime | None = None

    def get(self, name: str, default: Any = None) -> Any:
        return self.fields.get(name, default)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"type": self.type}
        if self.ts is not None:
            out["ts"] = self.ts.isoformat()
        out.update(self.fields)
        return out


def validate_event(data: Any, where: str) -> Event:
    """Check one event mapping against :data:`EVENT_SCHEMA`; ``where`` prefixes errors."""
    if not isinstance(data, Mapping):
        raise TraceFormatError(f"{where}: an event must be a JSON object, got {data!r:.80}")
    kind = data.get("type")
    if kind not in EVENT_SCHEMA:
        raise TraceFormatError(f"{where}: field 'type' must be one of {sorted(EVENT_SCHEMA)}, "
                               f"got {kind!r}")
    required, optional = EVENT_SCHEMA[kind]
    for name, check in required.items():
        if name not in data:
            raise TraceFormatError(f"{where}: {kind} event is missing field {name!r}")
        if not check(data[name]):
            raise TraceFormatError(f"{where}: field {name!r} of a {kind} event is invalid: "
                                   f"{data[name]!r:.80}")
    for name, value in data.items():
        if name in ("type", "ts") or name in required:
            continue
        if name not in optional:
            raise TraceFormatError(f"{where}: {kind} event has unknown field {name!r}")
        if not optional[name](value):
            raise TraceFormatError(f"{where}: field {name!r} of a {kind} event is invalid: "
                                   f"{value!r:.80}")
    ts = None
    if data.get("ts") is not None:
        try:
            ts = parse_ts(data["ts"])
        except (TypeError, ValueError):
            raise TraceFormatError(f"{where}: field 'ts' must be an ISO 8601 timestamp with a "
                                   f"timezone, got {data['ts']!r}") from None
    fields = {k: v for k, v in data.items() if k not in ("type", "ts")}
    json.dumps(fields)  # events must round-trip through JSON
    return Event(kind, fields, ts)


@dataclass
class Trace:
    """A validated event sequence. Build one with :class:`TraceBuilder` or read JSON Lines.

    Examples
    --------
    >>> trace = (TraceBuilder("tiny", start="2024-01-01T00:00:00+00:00")
    ...          .add("We picked JWT for auth", item_id="a")
    ...          .query("q1", "why JWT?", gold=["a"]).build())
    >>> len(trace), [q.get("qid") for q in trace.queries]
    (2, ['q1'])
    >>> Trace.from_jsonl(trace.to_jsonl()).hash() == trace.hash()
    True
    """

    events: list[Event]
    name: str = "trace"
    start: datetime | None = None
    workspace_id: str = "default"
    metadata: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _text(self.name):
            raise TraceFormatError(f"name must be a non-empty string, got {self.name!r}")
        if not _text(self.workspace_id):
            raise TraceFormatError(f"workspace_id must be a non-empty string, "
                                   f"got {self.workspace_id!r}")
        if self.start is not None:
            self.start = parse_ts(self.start)
        last = self.start
        qids: set[str] = set()
        for pos, event in enumerate(self.events):
            where = f"event {pos}"
            if not isinstance(event, Event):
                raise TraceFormatError(f"{where}: must be an Event, got {event!r:.80}")
            if event.ts is not None:
                if last is not None and event.ts < last:
                    raise TraceFormatError(f"{where}: field 'ts' goes back in time "
                                           f"({event.ts.isoformat()} < {last.isoformat()})")
                last = event.ts
            if event.type == "query":
                if event.get("qid") in qids:
                    raise TraceFormatError(f"{where}: field 'qid' repeats {event.get('qid')!r}")
                qids.add(event.get("qid"))

    def __len__(self) -> int:
        return len(self.events)

    def __iter__(self) -> Iterator[Event]:
        return iter(self.events)

    @property
    def queries(self) -> list[Event]:
        return [e for e in self.events if e.type == "query"]

    def header(self) -> dict[str, Any]:
        return {"type": "header", "format": TRACE_FORMAT, "version": TRACE_VERSION,
                "name": self.name, "start": None if self.start is None else self.start.isoformat(),
                "workspace_id": self.workspace_id, "metadata": self.metadata}

    # ------------------------------------------------------------------ JSON Lines
    def to_jsonl(self) -> str:
        lines = [json.dumps(self.header(), sort_keys=True)]
        lines += [json.dumps(e.to_dict(), sort_keys=True) for e in self.events]
        return "\n".join(lines) + "\n"

    def hash(self) -> str:
        """SHA-256 of the canonical JSON Lines (what the manifest records).

        Fed line by line (the text is never built whole) and computed once: the digest is kept
        with the events it covered and reused while the trace holds the very same event
        objects, header and metadata (events are frozen; their fields must not be changed in
        place). Appending, removing or replacing an event, or changing the header, hashes again.
        """
        header = _CANONICAL.encode(self.header())
        events = tuple(self.events)
        cached = self.__dict__.get("_hash_memo")
        if cached is not None and cached[0] == header and len(cached[1]) == len(events) \
                and all(map(operator.is_, cached[1], events)):
            return cached[2]
        digest = hashlib.sha256(header.encode())
        encode = _CANONICAL.encode
        for event in events:
            digest.update(b"\n")
            digest.update(encode(event.to_dict()).encode())
        digest.update(b"\n")
        self.__dict__["_hash_memo"] = (header, events, digest.hexdigest())
        return self.__dict__["_hash_memo"][2]

    def write_jsonl(self, path: str | Path) -> Path:
        path = Path(path)
        path.write_text(self.to_jsonl())
        return path

    @classmethod
    def from_jsonl(cls, text: str) -> "Trace":
        """Parse JSON Lines text (see the module notes); errors name the line (1-based)."""
        lines = [(n, line) for n, line in enumerate(text.splitlines(), start=1) if line.strip()]
        if not lines:
            raise TraceFormatError("line 1: the trace is empty (a header line is required)")
        records = []
        for n, line in lines:
            try:
                records.append((n, json.loads(line)))
            except json.JSONDecodeError as exc:
                raise TraceFormatError(f"line {n}: not valid JSON ({exc.msg})") from None
            except RecursionError:
                raise TraceFormatError(f"line {n}: JSON nested too deeply") from None
        n, header = records[0]
        if not isinstance(header, Mapping) or header.get("type") != "header":
            raise TraceFormatError(f"line {n}: field 'type' of the first line must be 'header'")
        if header.get("format") != TRACE_FORMAT:
            raise TraceFormatError(f"line {n}: field 'format' must be {TRACE_FORMAT!r}, "
                                   f"got {header.get('format')!r}")
        if header.get("version") != TRACE_VERSION:
            raise TraceFormatError(f"line {n}: field 'version' {header.get('version')!r} is not "
                                   f"supported (this memlab reads version {TRACE_VERSION})")
        events = [validate_event(data, f"line {m}") for m, data in records[1:]]
        try:
            return cls(events, name=header.get("name") or "trace", start=header.get("start"),
                       workspace_id=header.get("workspace_id") or "default",
                       metadata=dict(header.get("metadata") or {}))
        except TraceFormatError as exc:  # event k is on line k + 2 (after the header)
            message = str(exc)
            if message.startswith("event "):
                pos, rest = message[6:].split(":", 1)
                raise TraceFormatError(f"line {records[int(pos) + 1][0]}:{rest}") from None
            raise TraceFormatError(f"line {n}: {message}") from None

    @classmethod
    def read_jsonl(cls, path: str | Path) -> "Trace":
        return cls.from_jsonl(Path(path).read_text())


class TraceBuilder:
    """Build a trace in Python; each method validates its event and returns the builder.

    ``ts=`` on any method stamps that event; :meth:`advance` moves time forward by a delta.
    """

    def __init__(self, name: str = "trace", *, start: Any = None,
                 workspace_id: str = "default", metadata: dict | None = None) -> None:
        self.name, self.workspace_id = name, workspace_id
        self.start = None if start is None else parse_ts(start)
        self.metadata = dict(metadata or {})
        self.events: list[Event] = []
        self._now = self.start
        self.current_workspace: str | None = None  # set by in_workspace()

    def in_workspace(self, workspace_id: str | None) -> "TraceBuilder":
        """Stamp the following events with ``workspace_id`` (None: the trace's default)."""
        self.current_workspace = workspace_id
        return self

    def event(self, kind: str, ts: Any = None, **fields: Any) -> "TraceBuilder":
        if self.current_workspace is not None:
            fields.setdefault("workspace_id", self.current_workspace)
        data = {"type": kind, **{k: v for k, v in fields.items() if v is not None}}
        if ts is not None:
            data["ts"] = parse_ts(ts).isoformat()
        event = validate_event(data, f"event {len(self.events)}")
        if event.ts is not None:
            self._now = event.ts
        self.events.append(event)
        return self

    def add(self, content: str, *, item_id: str | None = None, memory_type: str | None = None,
            metadata: dict | None = None, created_at: Any = None, ts: Any = None):
        created = None if created_at is None else parse_ts(created_at).isoformat()
        return self.event("add", ts, content=content, item_id=item_id, memory_type=memory_type,
                          metadata=metadata, created_at=created)

    def add_many(self, items: Iterable[Mapping[str, Any]]) -> "TraceBuilder":
        for item in items:
            self.add(**item)
        return self

    def edge(self, src: str, dst: str, edge_type: str | None = None, weight: float | None = None,
             ts: Any = None):
        return self.event("add_edge", ts, src=src, dst=dst, edge_type=edge_type, weight=weight)

    def query(self, qid: str, query: str, *, session_id: str | None = None, k: int | None = None,
              max_tokens: int | None = None, strategy: str | None = None, gold: Any = None,
              category: Any = None, ts: Any = None):
        return self.event("query", ts, qid=qid, query=query, session_id=session_id, k=k,
                          max_tokens=max_tokens, strategy=strategy,
                          gold=list(gold) if isinstance(gold, (set, tuple)) else gold,
                          category=category)

    def pin(self, session_id: str, item_id: str, weight: float | None = None, ts: Any = None):
        return self.event("pin", ts, session_id=session_id, item_id=item_id, weight=weight)

    def unpin(self, session_id: str, item_id: str, ts: Any = None):
        return self.event("unpin", ts, session_id=session_id, item_id=item_id)

    def anchor(self, session_id: str, content: str, anchor_type: str | None = None,
               item_id: str | None = None, ts: Any = None):
        return self.event("anchor", ts, session_id=session_id, content=content,
                          anchor_type=anchor_type, item_id=item_id)

    def ingest(self, placement: str, ts: Any = None, **fields: Any):
        return self.event("ingest", ts, placement=placement, **fields)

    def cache_set(self, key: str, value: str, ts: Any = None):
        return self.event("cache_set", ts, key=key, value=value)

    def cache_peek(self, key: str, ts: Any = None):
        return self.event("cache_peek", ts, key=key)

    def promote(self, session_id: str, key: str, value: str, node_type: str | None = None,
                ts: Any = None):
        return self.event("promote", ts, session_id=session_id, key=key, value=value,
                          node_type=node_type)

    def resolve(self, session_id: str, key: str, ts: Any = None):
        return self.event("resolve", ts, session_id=session_id, key=key)

    def advance(self, **delta: float) -> "TraceBuilder":
        """Move time forward (``days=``, ``hours=``, ``minutes=``, ``seconds=``)."""
        seconds = timedelta(**delta).total_seconds()
        return self.event("clock", None, advance_s=seconds)

    def maintenance(self, dry_run: bool | None = None, passes: list[str] | None = None,
                    ts: Any = None):
        return self.event("maintenance", ts, dry_run=dry_run, passes=passes)

    def build(self) -> Trace:
        return Trace(list(self.events), name=self.name, start=self.start,
                     workspace_id=self.workspace_id, metadata=self.metadata)
