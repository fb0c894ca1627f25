"""Item writes: add, update, archive, salience, activation, topic fields (a mixin of
:class:`~memlab.store.MemoryStore`)."""

from __future__ import annotations

import contextlib
import gc
import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memlab.clock import as_utc
from memlab.errors import DuplicateItemError
from memlab.model import validate_id, validate_metadata, validate_text
from memlab.store.journal import journaled
from memlab.store.workspace import NewItem, index_text, node_key_of
from memlab.text import ANALYZERS, TITLE_KEYS, estimate_tokens

__all__ = ["ItemsMixin", "claim_item_ids", "paused_gc", "release_freed_memory"]

# Bulk writes at least this large hand the allocator's freed pages back (release_freed_memory)
RELEASE_AFTER = 50_000


def _malloc_trim():
    try:
        import ctypes
        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):  # not glibc: nothing to call
        return None


_TRIM = _malloc_trim()


def release_freed_memory(size: int, threshold: int = RELEASE_AFTER) -> bool:
    """After a bulk write of ``size`` items or edges (at least ``threshold``), give the C
    allocator's free pages back to the system (glibc's ``malloc_trim(0)``; elsewhere nothing).

    A bulk write allocates and frees temporaries (sort keys, token lists, the grown columns'
    old buffers) that glibc keeps in its heap; the process's resident set then counts them
    (measured: ~50 bytes per edge and ~100 per item at 1M items + 5M edges,
    ``benchmarks/memory_footprint.py``). Costs milliseconds; returns whether it ran.
    """
    if size < threshold or _TRIM is None:
        return False
    _TRIM(0)
    return True


@contextlib.contextmanager
def paused_gc(size: int, threshold: int = 1000):
    """Pause the cyclic garbage collector while a bulk write of ``size`` objects allocates.

    Bulk ingest creates several container objects per item and none of them form cycles; with
    the collector on, its generation-2 passes re-scan the whole growing store again and again
    (measured: ~40% of ``add_many`` time at 50k items).
    """
    if size < threshold or not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def claim_item_ids(new_items: Sequence[NewItem], exists, workspace_id: str) -> set[str]:
    """The ids ``new_items`` give (an item without one gets a generated id later); raises
    DuplicateItemError when one is taken (``exists(item_id)``) or given twice in the batch.

    Examples
    --------
    >>> def item(item_id):
    ...     return NewItem(item_id, "text", "semantic", {}, None)
    >>> claim_item_ids([item("x"), item(None)], lambda i: False, "w")
    {'x'}
    >>> claim_item_ids([item("x"), item("x")], lambda i: False, "w")
    Traceback (most recent call last):
    ...
    memlab.errors.DuplicateItemError: item_id 'x' is given twice in this batch (items 0 and 1)
    """
    taken: dict[str, int] = {}
    for pos, new in enumerate(new_items):
        item_id = new.item_id
        if item_id is None:
            continue
        if item_id in taken:
            raise DuplicateItemError(f"item_id {item_id!r} is given twice in this batch "
                                     f"(items {taken[item_id]} and {pos})")
        if exists(item_id):
            raise DuplicateItemError(f"item_id {item_id!r} already exists in workspace "
                                     f"{workspace_id!r} (item {pos})")
        taken[item_id] = pos
    return set(taken)


class ItemsMixin:
    """The item writes of :class:`~memlab.store.MemoryStore`: validate, compute, then apply."""

    def prepare_item(self, content: Any, memory_type: Any = "semantic", metadata: Any = None,
                     item_id: Any = None, created_at: Any = None) -> NewItem:
        """Validate one item's arguments (raises ValueError naming the argument)."""
        validate_text(content, "content")
        if memory_type not in self.memory_types:
            raise ValueError(f"memory_type must be one of {sorted(self.memory_types)}, "
                             f"got {memory_type!r}")
        if item_id is not None:
            validate_id(item_id, "item_id")
        if created_at is not None:
            created_at = as_utc(created_at, name="created_at")
        return NewItem(item_id, content, memory_type, validate_metadata(metadata), created_at)

    @journaled
    def add_items(self, workspace_id: str, new_items: Sequence[NewItem], now: datetime,
                  initial_activation: float = 0.5,
                  added_at: Sequence[datetime] | None = None) -> list[str]:
        """Write validated items all-or-nothing; returns their ids in order.

        ``added_at`` (one UTC datetime per item, default ``now`` for all) is when each item was
        added: its ``created_at`` unless given and its history's ``created`` event, so a replay
        writes adds made at different times in one call, as the separate calls would have.

        Everything that can fail (duplicate ids, text analysis for every index, titles, node
        keys, timestamps) is computed first; only then does the store change.
        """
        with self.lock, paused_gc(len(new_items)):
            ws = self._target(workspace_id)
            taken = claim_item_ids(new_items, ws.index_of.__contains__, workspace_id)
            ids, next_generated = ws.generate_ids(new_items, taken)
            stamps = [now] * len(new_items) if added_at is None else list(added_at)
            if len(stamps) != len(new_items):
                raise ValueError(f"added_at must hold one time per item ({len(new_items)}), "
                                 f"got {len(stamps)}")
            iso = {t: t.isoformat() for t in set(stamps)}
            first = len(ws.items)
            contents, memory_types, metadata, created_at = [], [], [], []
            created, token_lists, tokens, eligible, procedural, longterm = [], [], [], [], [], []
            titles: list[tuple[list[str], int]] = []  # (gazetteer phrases, item number)
            node_keys: list[tuple[tuple[str, str], int]] = []
            texts = [index_text(new.content, new.metadata) for new in new_items]  # every index
            for offset, (new, stamp) in enumerate(zip(new_items, stamps)):
                made = new.created_at or stamp
                contents.append(new.content)
                memory_types.append(new.memory_type)
                metadata.append(new.metadata)
                created_at.append(made)
                node_key = None
                if new.metadata:
                    for key in TITLE_KEYS:
                        title = new.metadata.get(key)
                        if isinstance(title, str):
                            titles.append((ws.gazetteer.phrases(title), first + offset))
                    node_key = node_key_of(new.metadata)
                    if node_key is not None:
                        node_keys.append((node_key, first + offset))
                longterm.append(node_key is not None)
                created.append(made.timestamp())
                token_lists.append(ws.analyze(texts[offset]))
                tokens.append(estimate_tokens(new.content))
                eligible.append(new.memory_type != "anchor")
                procedural.append(new.memory_type == "procedural")
            ws.items.plan_types(memory_types)
            other_lists = {name: [ANALYZERS[name](text) for text in texts]
                           for name in ws.other_bm25}
            created_arr = np.asarray(created, dtype=np.float64)
            # ---- computed: from here on the store changes
            self._mutating()
            self._register(ws)
            ws._next_generated = next_generated
            ws.items.extend(ids, contents, memory_types, metadata, created_at, stamps, iso)
            ws.index_of.update(zip(ids, range(first, first + len(ids))))
            for phrases, i in titles:
                ws.gazetteer.add_phrases(phrases, i)
            for node_key, i in node_keys:
                ws.node_index.setdefault(node_key, i)
            if len(new_items) == 1:
                ws.bm25.add(token_lists[0])
            else:
                ws.bm25.add_many(token_lists)
            for name, index in ws.other_bm25.items():
                index.add_many(other_lists[name])
            ws.tokens.extend(tokens)
            ws.eligible.extend(eligible)
            ws.procedural.extend(procedural)
            ws.longterm.extend(longterm)
            ws.activation.add(created_arr, initial_activation)
            ws.version += 1
            del token_lists, other_lists, texts, titles  # the write's temporaries
            release_freed_memory(len(new_items))
            return ids

    @journaled
    def record_retrieval(self, workspace_id: str, idx: Sequence[int], now: datetime, *,
                         increment: float, half_life_h: float, kind: str) -> None:
        """Reinforce activation of explicitly retrieved items and append a history event."""
        with self.lock:
            ws = self.workspace(workspace_id)
            if not len(idx):
                return
            rows = ws.check_rows(idx)
            now_ts, event_ts = now.timestamp(), now.isoformat()
            self._mutating()
            ws.activation.reinforce(rows, now_ts, increment=increment, half_life_h=half_life_h)
            ws.recency_order.touch(rows)
            record = ws.items.record
            for i in rows.tolist():
                record(i, {"ts": event_ts, "kind": "reinforced", "detail": {"via": kind}})
            ws.version += 1

    @journaled
    def record_retrievals(self, calls: Sequence[dict[str, Any]]) -> None:
        """Apply several :meth:`record_retrieval` calls (keyword-argument dicts) in order; the
        journal row a group commit writes (see :meth:`flush`)."""
        with self.lock:
            for call in calls:
                self.record_retrieval(**call)

    @journaled
    def update_item(self, workspace_id: str, idx: int, now: datetime, *,
                    content: str | None = None, metadata: dict | None = None,
                    kind: str = "updated", detail: dict | None = None) -> None:
        """Change an item's content and/or metadata in place (validated input only).

        The BM25 index re-indexes only the item's old and new terms; the item keeps its number.
        Every index's terms, titles and node keys are computed before anything changes.
        """
        with self.lock:
            ws = self.workspace(workspace_id)
            (idx,) = ws.check_rows([idx]).tolist()
            item = ws.items.item(idx)
            new_content = item.content if content is None else content
            new_metadata = item.metadata if metadata is None else metadata
            if item.memory_type == "topic" and metadata is not None:
                # a topic is named by its metadata title (memlab.topics): keep one, or every
                # later read of the topic would fail
                validate_text(metadata.get("title"), "metadata['title'] of a topic")
            old_text = index_text(item.content, item.metadata)
            new_text = index_text(new_content, new_metadata)
            content_changed = new_content != item.content
            new_tokens = estimate_tokens(new_content) if content_changed else None
            old_key, new_key = node_key_of(item.metadata), node_key_of(new_metadata)
            titles_out = [ws.gazetteer.phrases(item.metadata[key]) for key in TITLE_KEYS
                          if isinstance(item.metadata.get(key), str)] if metadata is not None else []
            titles_in = [ws.gazetteer.phrases(new_metadata[key]) for key in TITLE_KEYS
                         if isinstance(new_metadata.get(key), str)] if metadata is not None else []
            reindex = []
            if new_text != old_text:
                reindex.append((ws.bm25, ws.analyze(old_text), ws.analyze(new_text)))
                for name, index in ws.other_bm25.items():
                    analyze = ANALYZERS[name]
                    reindex.append((index, analyze(old_text), analyze(new_text)))
            event = {"ts": now.isoformat(), "kind": kind, "detail": detail or {}}
            # ---- computed: from here on the store changes
            self._mutating()
            if content_changed:
                ws.tokens.data[idx] = new_tokens
                ws.items.set_content(idx, new_content)
                ws.content_changes.append(idx)
            if metadata is not None:
                if old_key != new_key:
                    if old_key is not None and ws.node_index.get(old_key) == idx:
                        del ws.node_index[old_key]
                    if new_key is not None:
                        ws.node_index.setdefault(new_key, idx)
                    ws.longterm.data[idx] = new_key is not None
                for phrases in titles_out:
                    ws.gazetteer.remove_phrases(phrases, idx)
                for phrases in titles_in:
                    ws.gazetteer.add_phrases(phrases, idx)
                ws.items.set_metadata(idx, metadata)
            for index, old_terms, new_terms in reindex:
                index.replace(idx, old_terms, new_terms)
            ws.items.set_updated(idx, now)
            ws.recency_order.touch((idx,))
            ws.items.record(idx, event)
            ws.version += 1

    @journaled
    def record_event(self, workspace_id: str, idx: int, now: datetime, kind: str,
                     detail: dict | None = None) -> None:
        """Append a history event to one item."""
        with self.lock:
            ws = self.workspace(workspace_id)
            (idx,) = ws.check_rows([idx]).tolist()
            event = {"ts": now.isoformat(), "kind": kind, "detail": detail or {}}
            self._mutating()
            ws.items.record(idx, event)
            ws.version += 1

    @journaled
    def set_salience(self, workspace_id: str, idx: Sequence[int], values: Sequence[float]) -> None:
        """Set items' salience (clamped to [0, 10])."""
        with self.lock:
            ws = self.workspace(workspace_id)
            rows = ws.check_rows(idx).tolist()
            # rounded so that repeated +0.1 bumps read as 1.1, 1.2, … not 1.2000000000000002
            clamped = [round(min(10.0, max(0.0, float(value))), 12) for value in values]
            self._mutating()
            salience = ws.items.salience.data
            for i, value in zip(rows, clamped):
                salience[i] = value
            ws.version += 1

    @journaled
    def archive(self, workspace_id: str, idx: Sequence[int], now: datetime, reason: str,
                detail: dict | None = None) -> None:
        """Archive items: kept with their history, never surfaced again (nothing is deleted)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            archived = ws.items.archived.data
            rows = [i for i in ws.check_rows(idx).tolist() if not archived[i]]
            keys = [node_key_of(ws.metadata_of(i)) for i in rows]
            event_ts, full_detail = now.isoformat(), {"reason": reason, **(detail or {})}
            self._mutating()
            for i, key in zip(rows, keys):
                if archived[i]:  # listed twice
                    continue
                archived[i] = True
                ws.eligible.data[i] = False
                ws.recency_order.touch((i,))
                if key is not None and ws.node_index.get(key) == i:
                    del ws.node_index[key]
                ws.items.record(i, {"ts": event_ts, "kind": "archived",
                                    "detail": dict(full_detail)})
            ws.version += 1

    @journaled
    def set_topic_fields(self, workspace_id: str, idx: int, fields: dict[str, dict]) -> None:
        """Replace a topic's versioned fields (a JSON-able copy is stored)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            (idx,) = ws.check_rows([idx]).tolist()
            copied = json.loads(json.dumps(fields))
            self._mutating()
            ws.topic_fields[idx] = copied
            ws.version += 1

    @journaled
    def set_stored_activation(self, workspace_id: str, idx: Sequence[int],
                              values: Sequence[float]) -> None:
        """Overwrite items' stored activation (capacity inhibition)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            rows = ws.check_rows(idx).tolist()
            floats = [float(v) for v in values]
            self._mutating()
            for i, v in zip(rows, floats):
                ws.activation.stored.data[i] = v
            ws.version += 1

    @journaled
    def set_last_decay(self, workspace_id: str, ts: float) -> None:
        """Record when the maintenance decay sweep last ran."""
        with self.lock:
            ws = self.workspace(workspace_id)
            ts = float(ts)
            self._mutating()
            ws.last_decay_ts = ts
