"""Topics with versioned fields: ``ingest`` and ``query`` (SPEC §6.2, seed 001's executor).

A topic is an item (``memory_type="topic"``, ``metadata["title"]``) whose content is its title and
the current value of each field, so BM25, surfacing and the graph all see it. Its fields live in
the store beside it: each has a ``type``, an optional ``ref`` to another topic (also written as a
``LINKS_TO`` edge), a ``salience`` in [0, 10] and a newest-first ``history`` of versions
(``version_id``, ``value``, ``valid_from``, ``why_changed``, ``provenance``, ``recorded_at``)
capped at 500 entries (older ones are counted in ``dropped_versions``, not kept).

``ingest`` validates everything before it writes anything: an unknown topic, field or reference
raises ``ValueError`` naming it and the store is unchanged. ``query`` ranks topics (semantic),
adds their graph neighbours (structural) and their field history (temporal, with
``explain=True``); every returned topic gets a salience bump (+0.1) and a history event.

When the memory has a reasoner attached (:class:`memlab.maintenance.Reasoner`), it runs after
each ingest and query; its failures are recorded there and never reach the caller.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Any, Mapping

import numpy as np

from memlab.clock import as_utc
from memlab.graph.spreading import SpreadConfig, run_spread
from memlab.model import HISTORY_CAP, check_text, validate_json, validate_text
from memlab.session.default import resolve_memory

__all__ = ["PLACEMENTS", "FIELD_TYPES", "QUERY_STAGES", "REFERENCE_EDGE", "SALIENCE_BUMP",
           "ingest", "query", "get_topic"]

PLACEMENTS = ("new_topic", "extend_topic", "version_field")
FIELD_TYPES = ("text", "number", "bool", "date", "json")
QUERY_STAGES = ("semantic", "structural", "temporal")
REFERENCE_EDGE = "LINKS_TO"
SALIENCE_BUMP = 0.1
_FIELD_KEYS = {"value", "type", "ref", "salience", "why_changed", "provenance", "valid_from"}


# ---------------------------------------------------------------------------- validation
def _check_value(value: Any, field_type: str, name: str) -> Any:
    if field_type == "text":
        ok = isinstance(value, str) and value.strip() != ""
        if ok:
            check_text(value, name)
    elif field_type == "number":
        # an int is finite however long (math.isfinite would overflow converting it)
        ok = (not isinstance(value, bool) and isinstance(value, int)) \
            or (isinstance(value, float) and math.isfinite(value))
    elif field_type == "bool":
        ok = isinstance(value, bool)
    elif field_type == "date":
        try:
            as_utc(datetime.fromisoformat(value) if isinstance(value, str) else value)
            ok = True
        except (TypeError, ValueError):
            ok = False
    else:  # json
        validate_json(value, name)
        try:
            json.dumps(value, allow_nan=False)
            ok = value is not None
        except (TypeError, ValueError):
            ok = False
    if not ok:
        raise ValueError(f"{name} is not a valid {field_type!r} value: {value!r:.80}")
    return value


def _topic_index(ws, topic_id: Any, name: str = "topic_id") -> int:
    idx = ws.require(topic_id, name)
    if not ws.is_topic(idx) or ws.item(idx).archived:
        raise ValueError(f"{name} {topic_id!r} is not a live topic")
    return idx


def _valid_from(value: Any, now: datetime, name: str) -> str:
    if value is None:
        return now.isoformat()
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{name} must be an ISO datetime, got {value!r}") from None
    return as_utc(value, name=name).isoformat()


def _prepare_field(ws, name: Any, spec: Any, now: datetime, where: str,
                   self_id: str | None = None) -> tuple[str, dict]:
    """Validate one field spec (a value, or a dict with _FIELD_KEYS); returns (name, plan)."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"{where}: field names must be non-empty strings, got {name!r}")
    check_text(name, f"{where}: field name")
    spec = dict(spec) if isinstance(spec, Mapping) else {"value": spec}
    unknown = set(spec) - _FIELD_KEYS
    if unknown:
        raise ValueError(f"{where}: field {name!r} has unknown keys {sorted(unknown)}")
    field_type = spec.get("type", "text")
    if field_type not in FIELD_TYPES:
        raise ValueError(f"{where}: field {name!r} type must be one of {list(FIELD_TYPES)}, "
                         f"got {field_type!r}")
    if "value" not in spec:
        raise ValueError(f"{where}: field {name!r} needs a value")
    _check_value(spec["value"], field_type, f"{where}: field {name!r} value")
    ref = spec.get("ref")
    if ref is not None:
        if ref == self_id:
            raise ValueError(f"{where}: field {name!r} ref cannot point to its own topic")
        _topic_index(ws, ref, f"{where}: field {name!r} ref")
    salience = spec.get("salience", 1.0)
    if isinstance(salience, bool) or not isinstance(salience, (int, float)) \
            or not 0 <= salience <= 10:
        raise ValueError(f"{where}: field {name!r} salience must be in [0, 10], got {salience!r}")
    for key in ("why_changed", "provenance"):
        if spec.get(key) is not None and not isinstance(spec[key], str):
            raise ValueError(f"{where}: field {name!r} {key} must be a string, got {spec[key]!r}")
        if spec.get(key) is not None:
            check_text(spec[key], f"{where}: field {name!r} {key}")
    plan = {"type": field_type, "ref": ref, "salience": float(salience), "value": spec["value"],
            "why_changed": spec.get("why_changed"), "provenance": spec.get("provenance"),
            "valid_from": _valid_from(spec.get("valid_from"), now,
                                      f"{where}: field {name!r} valid_from")}
    return name, plan


def _new_version(topic_id: str, name: str, field: dict, plan: dict, now: datetime) -> str:
    field["versions"] = field.get("versions", 0) + 1
    version_id = f"{topic_id}/{name}@{field['versions']}"
    field["history"].insert(0, {"version_id": version_id, "value": plan["value"],
                                "valid_from": plan["valid_from"],
                                "why_changed": plan["why_changed"],
                                "provenance": plan["provenance"], "recorded_at": now.isoformat()})
    if len(field["history"]) > HISTORY_CAP:
        del field["history"][HISTORY_CAP:]
        field["dropped_versions"] = field.get("dropped_versions", 0) + 1
    return version_id


def render_topic(title: str, fields: Mapping[str, dict]) -> str:
    """A topic's searchable text: its title, then ``name: current value`` per field."""
    lines = [title]
    for name in sorted(fields):
        lines.append(f"{name}: {fields[name]['history'][0]['value']}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------- ingest
def ingest(placement: str, *, topic_id: str | None = None, title: str | None = None,
           fields: Mapping[str, Any] | None = None, field: str | None = None,
           value: Any = None, ref: str | None = None, why_changed: str | None = None,
           provenance: str | None = None, valid_from: Any = None,
           memory=None) -> dict[str, Any]:
    """Write a topic observation, all or nothing.

    Parameters
    ----------
    placement : {"new_topic", "extend_topic", "version_field"}
        ``new_topic``: a topic titled ``title`` with ``fields`` (``topic_id`` optional).
        ``extend_topic``: add ``fields`` (new names only) to topic ``topic_id``.
        ``version_field``: a new ``value`` for ``field`` of ``topic_id`` (keeps its type; ``ref``
        may change), with ``why_changed``, ``provenance``, ``valid_from``.
    fields : mapping
        ``name -> value`` or ``name -> {"value", "type", "ref", "salience", "why_changed",
        "provenance", "valid_from"}``.

    Every text argument must be valid Unicode (no lone surrogate), including the ones the
    placement ignores; a bad one is a ValueError naming it.

    Returns
    -------
    dict
        ``{"topic_id", "changes": [{"op", "field", "version_id"}], "version_ids": [...]}``.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> out = ingest("new_topic", title="Checkout service", fields={"owner": "Lena"}, memory=mem)
    >>> out["version_ids"]
    ['item-000000/owner@1']
    >>> ingest("version_field", topic_id=out["topic_id"], field="owner", value="Omar",
    ...        why_changed="team change", memory=mem)["version_ids"]
    ['item-000000/owner@2']
    >>> ingest("extend_topic", topic_id="nope", fields={"x": "y"}, memory=mem)
    Traceback (most recent call last):
    ...
    memlab.errors.UnknownItemError: topic_id 'nope' does not exist in workspace 'default'
    """
    if placement not in PLACEMENTS:
        raise ValueError(f"placement must be one of {list(PLACEMENTS)}, got {placement!r}")
    # every text argument is valid Unicode, whether or not this placement uses it
    for name, arg in (("topic_id", topic_id), ("title", title), ("field", field), ("ref", ref),
                      ("why_changed", why_changed), ("provenance", provenance),
                      ("valid_from", valid_from)):
        if isinstance(arg, str):
            check_text(arg, name)
    if value is not None:
        validate_json(value, "value")
    mem = resolve_memory(memory)
    store = mem.store
    with store.lock:
        ws = store.workspace(mem.workspace_id)
        now = mem.clock.now()
        changes: list[dict] = []
        if placement == "new_topic":
            validate_text(title, "title")
            new = store.prepare_item(title, "topic", {"title": title}, item_id=topic_id)
            if topic_id is not None and ws.row_of(topic_id) is not None:
                raise ValueError(f"topic_id {topic_id!r} already exists")
            plans = [_prepare_field(ws, n, s, now, "fields", topic_id)
                     for n, s in _field_items(fields, required=False)]
            idx = None
            changes.append({"op": "create_topic", "field": None, "version_id": None})
        elif placement == "extend_topic":
            idx = _topic_index(ws, topic_id)
            plans = [_prepare_field(ws, n, s, now, "fields", topic_id)
                     for n, s in _field_items(fields, required=True)]
            for name, _ in plans:
                if name in ws.topic_fields_of(idx):
                    raise ValueError(f"fields: field {name!r} already exists on topic "
                                     f"{topic_id!r}; use placement='version_field'")
        else:
            idx = _topic_index(ws, topic_id)
            validate_text(field, "field")
            current = ws.topic_fields_of(idx).get(field)
            if current is None:
                raise ValueError(f"field {field!r} does not exist on topic {topic_id!r}; "
                                 f"use placement='extend_topic'")
            spec = {"value": value, "type": current["type"], "salience": current["salience"],
                    "ref": current["ref"] if ref is None else ref, "why_changed": why_changed,
                    "provenance": provenance, "valid_from": valid_from}
            plans = [_prepare_field(ws, field, spec, now, "version_field", topic_id)]
        # ---- validated: write, as one transaction on a durable store
        with store.transaction():
            if idx is None:
                (topic_id,) = store.add_items(mem.workspace_id, [new], now,
                                              mem.config.activation_initial)
                idx = ws.row_of(topic_id)
                store.set_topic_fields(mem.workspace_id, idx, {})
            topic, version_ids = _write_fields(store, mem.workspace_id, ws, idx, plans,
                                               placement, now, changes)
    _after(mem, "ingest")
    return {"topic_id": topic.item_id, "changes": changes, "version_ids": version_ids}


def _write_fields(store, workspace_id: str, ws, idx: int, plans: list, placement: str, now,
                  changes: list) -> tuple[Any, list[str]]:
    topic = ws.item(idx)
    topic_fields = json.loads(json.dumps(ws.topic_fields_of(idx)))  # changed as a copy, then stored
    version_ids = []
    edges = []
    for name, plan in plans:
        entry = topic_fields.setdefault(name, {"type": plan["type"], "ref": None,
                                                "salience": plan["salience"], "history": []})
        entry["ref"] = plan["ref"]
        version_id = _new_version(topic.item_id, name, entry, plan, now)
        version_ids.append(version_id)
        changes.append({"op": "version_field" if placement == "version_field"
                        else "add_field", "field": name, "version_id": version_id})
        if plan["ref"] is not None:
            edges.append((idx, ws.row_of(plan["ref"]), REFERENCE_EDGE, 1.0))
    store.set_topic_fields(workspace_id, idx, topic_fields)
    if edges:
        store.add_edges(workspace_id, edges, now)
    store.update_item(workspace_id, idx, now,
                      content=render_topic(topic.metadata["title"], topic_fields),
                      kind="ingested", detail={"placement": placement,
                                               "version_ids": version_ids})
    return topic, version_ids


def _field_items(fields: Any, *, required: bool) -> list[tuple[Any, Any]]:
    if fields is None and not required:
        return []
    if not isinstance(fields, Mapping) or (required and not fields):
        raise ValueError(f"fields must be a {'non-empty ' if required else ''}mapping of field "
                         f"name to value, got {fields!r:.80}")
    return list(fields.items())


def _after(mem, event: str) -> None:
    reasoner = getattr(mem, "reasoner", None)
    if reasoner is not None:
        reasoner.after_event(event)


# ---------------------------------------------------------------------------- read
def _topic_view(ws, idx: int, explain: bool) -> dict[str, Any]:
    item = ws.item(idx)
    fields = {}
    for name, entry in sorted(ws.topic_fields_of(idx).items()):
        current = entry["history"][0]
        view = {"value": current["value"], "type": entry["type"], "ref": entry["ref"],
                "salience": entry["salience"], "valid_from": current["valid_from"],
                "version_id": current["version_id"]}
        if explain:
            view["history"] = [dict(v) for v in entry["history"]]
            view["dropped_versions"] = entry.get("dropped_versions", 0)
        fields[name] = view
    return {"topic_id": item.item_id, "title": item.metadata["title"], "salience": item.salience,
            "fields": fields}


def get_topic(topic_id: str, *, explain: bool = True, memory=None) -> dict[str, Any]:
    """One topic with its fields (and their full history when ``explain``); no side effects."""
    mem = resolve_memory(memory)
    with mem.store.lock:
        ws = mem.store.workspace(mem.workspace_id)
        return _topic_view(ws, _topic_index(ws, topic_id), explain)


def query(q: str, stages=QUERY_STAGES, explain: bool = False, top_k: int = 8, *,
          memory=None, reinforce: bool = True) -> dict[str, Any]:
    """Topics for ``q``: ``semantic`` (absolute term coverage, ties by BM25), ``structural``
    (their graph neighbours that are topics, score halved), ``temporal`` (each field's history
    when ``explain``).

    Returns ``{"query", "stages", "explain", "topics": [{topic_id, title, salience, score,
    stage, fields}]}``. Each returned topic's salience rises by 0.1 (at most 10) and it records a
    ``queried`` event, and the memory's attached reasoner runs after the query.
    ``reinforce=False`` queries without side effects: no salience bump, no event, no journal
    row, no maintenance (the topics report their current salience).

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> t = ingest("new_topic", title="Checkout service", fields={"owner": "Lena"}, memory=mem)
    >>> hit = query("who owns checkout", memory=mem)["topics"][0]
    >>> hit["title"], hit["fields"]["owner"]["value"], hit["salience"]
    ('Checkout service', 'Lena', 1.1)
    """
    validate_text(q, "q")
    if isinstance(stages, str) or not isinstance(stages, (list, tuple)) \
            or not set(stages) <= set(QUERY_STAGES) or "semantic" not in stages:
        raise ValueError(f"stages must be a list of {list(QUERY_STAGES)} including 'semantic', "
                         f"got {stages!r}")
    if not isinstance(explain, bool):
        raise ValueError(f"explain must be a bool, got {explain!r}")
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 100:
        raise ValueError(f"top_k must be an integer in 1..100, got {top_k!r}")
    if not isinstance(reinforce, bool):
        raise ValueError(f"reinforce must be a bool, got {reinforce!r}")
    mem = resolve_memory(memory)
    store = mem.store
    with store.lock:
        ws = store.workspace(mem.workspace_id)
        now = mem.clock.now()
        analyze, index = ws.bm25_for(None)
        tokens = analyze(q)
        docs, cover = index.coverage(tokens)
        is_topic = np.array([ws.is_topic(i) and not ws.item(i).archived
                             for i in docs.tolist()], dtype=bool)
        docs, cover = docs[is_topic], cover[is_topic]
        bm25 = index.score_docs(tokens, docs, k1=mem.config.bm25_k1, b=mem.config.bm25_b)
        order = np.lexsort((docs, -bm25, -cover))[:top_k]
        picked: dict[int, tuple[float, str]] = {int(docs[p]): (float(cover[p]), "semantic")
                                                for p in order}
        if "structural" in stages:
            config = SpreadConfig(depth=1, max_fan_out=top_k, edge_types="*")
            for i, (score, _) in list(picked.items()):
                neighbours = run_spread(ws, np.array([i]), config).indices.tolist()
                for j in neighbours:
                    if ws.is_topic(j) and not ws.item(j).archived and j not in picked:
                        picked[j] = (score * 0.5, "structural")
        explain_history = explain and "temporal" in stages
        ranked = sorted(picked.items(), key=lambda kv: (-kv[1][0], ws.item_id_of(kv[0])))
        if reinforce:
            with store.transaction():  # the bumps and events reach the disk together
                store.set_salience(mem.workspace_id, [i for i, _ in ranked],
                                   [ws.item(i).salience + SALIENCE_BUMP for i, _ in ranked])
                for i, (score, stage) in ranked:
                    store.record_event(mem.workspace_id, i, now, "queried",
                                       {"query": q, "stage": stage})
        results = [{**_topic_view(ws, i, explain_history), "score": score, "stage": stage}
                   for i, (score, stage) in ranked]
    if reinforce:
        _after(mem, "query")
    return {"query": q, "stages": list(stages), "explain": explain, "topics": results}
