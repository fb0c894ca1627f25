"""Snapshots of a durable store's full state: what compaction writes and a reopen loads.

A reopen of a journal-only store replays every row (SPEC §9, :mod:`memlab.persist`). Compaction
(:meth:`memlab.store.MemoryStore.compact`, ``memlab compact DB``) captures the state the replay
of rows ``1..upto`` builds and stores it in the same SQLite file, in one transaction with
deleting those store rows; a reopen then loads the snapshot and replays only the rows after it.

**What a snapshot holds**, per workspace: the items (ids, content, type, metadata, timestamps,
salience, archive flag, history and its dropped count), the item columns, activation (stored
score, decay anchor, last boost, every access time), the edge table row by row (removed rows
kept with weight 0, so row numbers and the type codes stay; the upsert index is rebuilt from the
live rows in row order, which is the order a replay inserts them), the BM25 index as it is (term
slots, postings, lengths, emptied slots: rebuilding it would stem every item again), the
gazetteer, node keys, topic fields, ``content_changes``, the decay mark, the version counters and
the id generator; for the store, pins with their expiry, anchors and review marks. Derived,
lazily built state is not stored and is rebuilt on use exactly as after a replay: the CSR view
(a replay also leaves it to be built by the first query), indexes of another analyzer, dense
indexes. Short-term caches journal their own rows, which compaction keeps.

**Format.** A JSON header (workspace scalars and a list of parts) and data parts: an array part
is the raw little-endian bytes of an allow-listed numeric dtype, a data part is the version-3
journal encoding (:func:`memlab.persist.encode`) of a JSON value. Every part has a CRC-32
(checked by :meth:`memlab.persist.Journal.snapshot_parts`), and the header carries the snapshot
format and the schema version. Decoding never allocates from a size the file claims: an array
is a view of the bytes actually stored, its length is checked against the header and against the
workspace's item and edge counts, and every value is checked (types, ranges, uniqueness) before
the store is touched. Format 3 adds a CRC-32 per item id and per content (parts
``<w>.item_id.crc`` and ``<w>.content.crc``) and a copy of the header in the last part row (the
manifest), which ``memlab recover`` uses to salvage items one by one (:func:`salvage`,
:func:`drop_items`) and to rebuild a damaged header. :func:`full_state` is the oracle the tests compare a replayed and a
snapshot-loaded store with: every attribute of every object the store holds, found by walking
them, so a field added later is compared without anyone listing it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import hashlib
import inspect
import itertools
import json
import math
import re
import zlib
from datetime import datetime, timezone
from typing import Any

import numpy as np

from memlab._arrays import Growable
from memlab._columns import ItemColumns, _created_ts, exact_ts
from memlab.graph.csr import _KEY_SHIFT, EdgeTable, GraphView, PairIndex
from memlab import persist as _persist
from memlab.persist import JournalCorruptError, SnapshotInfo, decode, encode
from memlab.signals.bm25 import IDF_VARIANTS, BM25Index
from memlab.text import ANALYZERS

# a memlab.store.MemoryStore: the store imports this module, so this one never imports the
# store (it reads the store's objects, and restore() is handed the classes it builds)
MemoryStore = Any

__all__ = ["CompactionReport", "capture", "restore", "salvage", "drop_items", "full_state",
           "state_digest"]


@dataclasses.dataclass(frozen=True)
class CompactionReport:
    """What :meth:`memlab.store.MemoryStore.compact` did.

    Attributes
    ----------
    upto : int
        The snapshot covers journal rows ``1..upto`` (0: nothing was written, the journal had
        no store rows after the latest snapshot).
    rows_removed : int
        Journal rows deleted (the store rows it covers; cache rows stay).
    snapshot_bytes : int
        The size of the snapshot's data parts.

    Examples
    --------
    >>> CompactionReport(10, 9, 4096).rows_removed
    9
    """

    upto: int
    rows_removed: int
    snapshot_bytes: int

_DTYPES = {"f8": "<f8", "f4": "<f4", "i8": "<i8", "i4": "<i4", "b1": "|b1"}


class _Writer:
    """Collects parts and their index entries (name, kind, dtype, length)."""

    def __init__(self) -> None:
        self.index: list[list] = []
        self.parts: list[bytes] = []

    def array(self, name: str, values: Any, code: str) -> None:
        arr = np.ascontiguousarray(np.asarray(values), dtype=_DTYPES[code])
        self.index.append([name, "nd", code, int(arr.shape[0])])
        self.parts.append(arr.tobytes())

    def data(self, name: str, value: Any) -> None:
        try:  # plain JSON needs no tags and no escapes: json.dumps alone (C speed)
            text = json.dumps({"v": value}, allow_nan=True)
            if '"__' in text:
                raise TypeError
        except TypeError:  # datetimes, arrays, "__" keys: the journal's encoding
            text = encode({"v": value})
        text = text.encode("utf-8")
        self.index.append([name, "data", "", len(text)])
        self.parts.append(text)


class _Reader:
    """Reads parts by name, checking kind, dtype and length before anything uses them."""

    def __init__(self, path: Any, info: SnapshotInfo, parts: list[bytes]) -> None:
        self.path, self.where = path, f"snapshot {info.snap_id} (of rows 1..{info.upto})"
        self.info = info
        index = info.header.get("index")
        if not isinstance(index, list) or len(index) != len(parts) or not all(
                isinstance(e, list) and len(e) == 4 and isinstance(e[0], str)
                and e[1] in ("nd", "data") and (e[2] in _DTYPES or e[1] == "data")
                and isinstance(e[3], int) and e[3] >= 0 for e in index):
            self.fail("its list of parts is malformed")
        self.parts = {e[0]: (e, data) for e, data in zip(index, parts)}
        if len(self.parts) != len(parts):
            self.fail("its list of parts names one part twice")

    def fail(self, problem: str) -> None:
        raise JournalCorruptError(self.path, None, f"{self.where} is damaged: {problem}")

    def _part(self, name: str, kind: str) -> tuple[list, bytes]:
        entry = self.parts.get(name)
        if entry is None or entry[0][1] != kind:
            self.fail(f"part {name!r} is missing")
        if entry[1] is None:  # found damaged by its checksum (see salvage)
            self.fail(f"part {name!r} is damaged")
        return entry

    def array(self, name: str, code: str, length: int | None = None) -> np.ndarray:
        (_, _, dtype, n), data = self._part(name, "nd")
        itemsize = np.dtype(_DTYPES[code]).itemsize
        if dtype != code or len(data) != n * itemsize or (length is not None and n != length):
            self.fail(f"part {name!r} does not have the dtype and length it should")
        # a copy of bytes that are there: never an allocation from a claimed size
        arr = np.frombuffer(data, dtype=_DTYPES[code]).astype(_DTYPES[code][1:], copy=True)
        if code == "b1" and len(data) and np.frombuffer(data, np.uint8).max() > 1:
            self.fail(f"part {name!r} holds a boolean that is neither 0 nor 1")
        return arr

    def finite(self, name: str, length: int | None = None, *, nan: bool = False
               ) -> np.ndarray:
        """A float64 array part whose values are all finite (``nan=True``: or NaN, never
        infinite): writes refuse non-finite numbers, so a snapshot holding one is damaged."""
        arr = self.array(name, "f8", length)
        bad = np.isinf(arr) if nan else ~np.isfinite(arr)
        if bad.any():
            self.fail(f"part {name!r} holds a number that is not finite (at position "
                      f"{int(np.flatnonzero(bad)[0])})")
        return arr

    def data(self, name: str) -> Any:
        (_, _, _, n), text = self._part(name, "data")
        if len(text) != n:
            self.fail(f"part {name!r} does not have the length it should")
        try:
            if b'"__' not in text:  # no tag and no escaped key: plain JSON (C speed, no hook)
                return json.loads(text)["v"]
            return decode(text.decode("utf-8"))["v"]
        except (UnicodeDecodeError, ValueError, KeyError, TypeError, RecursionError):
            self.fail(f"part {name!r} does not decode")

    def strings(self, name: str, length: int) -> list[str]:
        value = self.data(name)
        if not isinstance(value, list) or len(value) != length or not _all_of(value, str):
            self.fail(f"part {name!r} is not a list of {length} strings")
        return value


# ---------------------------------------------------------------------------- capture
def capture(store: MemoryStore) -> tuple[dict[str, Any], list[bytes]]:
    """The store's full state as ``(header, parts)`` (call under the store's lock).

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory(); _ = mem.add("the deploy runs on fridays")
    >>> header, parts = capture(mem.store)
    >>> [w["items"] for w in header["workspaces"]], len(parts) > 10
    ([1], True)
    """
    out = _Writer()
    workspaces = []
    for w, ws in enumerate(store._workspaces.values()):
        p = f"{w}."
        cols = ws.items  # memlab._columns.ItemColumns
        n = len(cols)
        out.data(p + "item_id", ws.item_ids)
        out.data(p + "content", cols.contents)
        # one checksum per item id and per content (format 3): a damaged id or content part
        # then loses only the items whose own checksum fails (see salvage)
        if _persist.SNAPSHOT_FORMAT >= 3:
            out.array(p + "item_id.crc", [_text_crc(x) for x in ws.item_ids], "i8")
            out.array(p + "content.crc", [_text_crc(x) for x in cols.contents], "i8")
        # memory types and dates as codes into their distinct values (few: a bulk write
        # shares one date), which keeps millions of strings out of the snapshot
        out.array(p + "memory_type", cols.type_code.view(), "i4")
        out.data(p + "memory_types", cols.type_names)
        empty: dict = {}
        out.data(p + "metadata", [cols.metadata.get(i, empty) for i in range(n)])
        iso: list[str] = []
        date_codes: dict[str, int] = {}
        for attr, exact in (("created_ts", cols.created_exact), ("updated_ts", cols.updated_exact)):
            column = getattr(cols, attr).view()
            uniq, inverse = np.unique(column, return_inverse=True)
            texts = [datetime.fromtimestamp(t, timezone.utc).isoformat() for t in uniq.tolist()]
            table = np.array([date_codes.setdefault(t, len(date_codes)) for t in texts],
                             dtype=np.int64)
            codes = table[inverse.reshape(-1)] if n else np.empty(0, np.int64)
            for i, when in exact.items():
                codes[i] = date_codes.setdefault(when.isoformat(), len(date_codes))
            out.array(p + attr.replace("_ts", "_at"), codes, "i4")
        iso = list(date_codes)
        out.data(p + "dates", iso)
        _history(out, p, cols)
        out.array(p + "salience", cols.salience.view(), "f8")
        out.array(p + "archived", cols.archived.view(), "b1")
        dropped = np.zeros(n, np.int64)
        for i, d in cols.history_dropped.items():
            dropped[i] = d
        out.array(p + "history_dropped", dropped, "i8")
        for name in ("created_ts", "updated_ts"):
            out.array(p + name, getattr(ws, name).view(), "f8")
        for name in ("eligible", "procedural", "longterm"):
            out.array(p + name, getattr(ws, name).view(), "b1")
        out.array(p + "tokens", ws.tokens.view(), "i8")
        act = ws.activation
        for name in ("stored", "anchor_ts", "last_boost_ts"):
            out.array(p + "act." + name, getattr(act, name).view(), "f8")
        out.array(p + "act.keys", list(act.access_times), "i8")
        out.array(p + "act.counts", [len(v) for v in act.access_times.values()], "i8")
        out.array(p + "act.times", [t for v in act.access_times.values() for t in v], "f8")
        table = ws.graph.table
        for name, code in (("src", "i8"), ("dst", "i8"), ("code", "i4"), ("weight", "f8"),
                           ("updated_ts", "f8")):
            out.array(p + "edge." + name, getattr(table, name).view(), code)
        out.data(p + "edge.types", table.type_names)
        bm = ws.bm25
        out.data(p + "bm25.terms", list(bm._vocab))
        out.array(p + "bm25.tids", list(bm._vocab.values()), "i8")
        out.array(p + "bm25.counts", [g.size for g in bm._post_docs], "i8")
        out.array(p + "bm25.docs", np.concatenate([g.view() for g in bm._post_docs])
                  if bm._post_docs else [], "i4")
        out.array(p + "bm25.tfs", np.concatenate([g.view() for g in bm._post_tfs])
                  if bm._post_tfs else [], "f4")
        out.array(p + "bm25.free", bm._free, "i8")
        out.array(p + "bm25.doc_len", bm._doc_len.view(), "f8")
        out.array(p + "bm25.removed", sorted(bm._removed), "i8")
        gaz = ws.gazetteer
        out.data(p + "gaz.phrases", list(gaz._items))
        out.array(p + "gaz.counts", [len(v) for v in gaz._items.values()], "i8")
        out.array(p + "gaz.items", [i for v in gaz._items.values() for i in sorted(v)], "i8")
        out.data(p + "node_index", [[k[0], k[1], v] for k, v in ws.node_index.items()])
        out.data(p + "topic_fields", [[k, v] for k, v in ws.topic_fields.items()])
        out.array(p + "content_changes", ws.content_changes, "i8")
        workspaces.append({
            "workspace_id": ws.workspace_id, "analyzer": ws.analyzer, "items": n,
            "edges": len(table), "version": ws.version, "graph_version": ws.graph.version,
            "next_generated": ws._next_generated, "last_decay_ts": ws.last_decay_ts,
            "bm25": {"idf": bm.idf_variant, "epsilon": bm.epsilon, "total_len": bm._total_len,
                     "slots": len(bm._post_docs)},
            "gazetteer": {"longest": gaz._longest, "max_words": gaz._max_words}})
    out.data("pins", [[sid, s.workspace_id, list(s.pins.items()), s.expires_ts]
                      for sid, s in store._pins.items()])
    out.data("anchors", [[w, s, rows] for (w, s), rows in store._anchors.items()])
    out.data("reviews", [[w, s, list(r.items())] for (w, s), r in store._anchor_reviews.items()])
    return {"workspaces": workspaces, "index": out.index}, out.parts


def _text_crc(text: str) -> int:
    """CRC-32 of one item id or content (what the ``*.crc`` parts of format 3 hold)."""
    return zlib.crc32(text.encode("utf-8", "surrogatepass"))


_NEAR_CUT = re.compile(r'(?=., "|".\x20"|",."|", .)', re.DOTALL)
_LENIENT_TRIES = 64  # separators tried per string before it counts as lost


def _lenient_strings(data: bytes, crcs: np.ndarray) -> list[str | None]:
    """The strings of a damaged data part holding a JSON list of strings (an id or content
    part), each kept only when it matches its own checksum in ``crcs`` (None otherwise).

    The part is plain JSON written with ``ensure_ascii``, so its strings are separated by a
    quote, a comma, a space and a quote, and any other quote is escaped: a changed byte can
    only break or fake one separator, or change one string. Strings are taken from the front,
    each ending at the first separator (or a separator one byte off) after which its text
    matches its checksum; then from the back likewise. A string that matches no separator is
    lost, and so are those between the two passes. Only bytes present are read, and a string
    is kept only when its CRC-32 equals its own item's.
    """
    n = len(crcs)
    text = data.decode("latin-1")  # one character per byte: positions stay put
    out: list[str | None] = [None] * n
    # the list is written as '{"v": [' + strings + ']}': cut at those fixed places (the
    # bytes there may be the damaged ones)
    if n == 0 or len(text) < len('{"v": [""]}'):
        return out
    body = text[len('{"v": ['):-len("]}")]  # '"s0", "s1", ..., "sN"'
    cuts = [m.start() for m in _NEAR_CUT.finditer(body)]  # where a closing quote may be
    want = crcs.tolist()

    def fits(inner: str, i: int) -> str | None:
        try:
            got = json.loads('"' + inner + '"')
        except (ValueError, RecursionError):
            return None
        return got if isinstance(got, str) and _text_crc(got) == want[i] else None

    # forward: string i starts at ``pos`` (after its opening quote)
    pos, i, last = 1, 0, len(body) - 1  # ``last``: the final closing quote
    at = 0
    while i < n:
        while at < len(cuts) and cuts[at] < pos:
            at += 1
        ends = cuts[at:at + _LENIENT_TRIES] + ([last] if i == n - 1 else [])
        for q in ends:
            got = fits(body[pos:q], i)
            if got is not None:
                out[i], pos = got, q + 4
                break
        else:
            break
        i += 1
    front = i
    # backward: string j ends at ``stop`` (its closing quote)
    stop, j = last, n - 1
    at = len(cuts) - 1
    while j > front:
        while at >= 0 and cuts[at] + 4 > stop:
            at -= 1
        starts = [cuts[k] + 4 for k in range(at, max(at - _LENIENT_TRIES, -1), -1)]
        if j == 0:
            starts.append(1)
        for q in starts:
            got = fits(body[q:stop], j)
            if got is not None:
                out[j], stop = got, q - 4
                break
        else:
            break
        j -= 1
    return out


def _history(out: _Writer, p: str, cols: Any) -> None:
    """The items' histories as a table of their distinct events (``history.events``) and,
    per item, how many it has (``history.counts``) and which (``history.codes``, flat).

    Why: a bulk write gives every item the same ``created`` event, so a million items hold a
    million equal events; decoding them as JSON builds ~3 million containers (0.96 s of a 1M
    reopen's 4.4 s CPU, issue 14's profile), the table a few. An item whose history is only
    its ``created`` event is not stored as a list (:class:`memlab._columns.ItemColumns`): its
    event is looked up by ``(added time, memory type)``. Histories that plain JSON cannot key
    (a datetime in an event) are written whole as ``history``, as format 1 did."""
    key = json.JSONEncoder(allow_nan=True, check_circular=False).encode
    table: dict[str, int] = {}
    events: list = []
    n = len(cols)
    counts = np.ones(n, np.int64)
    kept = cols.history
    added, type_code = cols.added_ts.view(), cols.type_code.view()
    created: dict[tuple[float, int], int] = {}  # (added time, type code) -> event code
    codes: list[int] = []
    try:
        for i in range(n):
            history = kept.get(i)
            if history is None:
                pair = (float(added[i]), int(type_code[i]))
                code = created.get(pair)
                if code is None:
                    event = cols.created_event(i)
                    code = created[pair] = table.setdefault(key(event), len(events))
                    if code == len(events):
                        events.append(event)
                codes.append(code)
                continue
            counts[i] = len(history)
            for event in history:
                text = key(event)
                code = table.get(text)
                if code is None:
                    code = table[text] = len(events)
                    events.append(event)
                codes.append(code)
    except TypeError:
        out.data(p + "history", [cols.history_of(i) for i in range(n)])
        return
    out.data(p + "history.events", events)
    out.array(p + "history.counts", counts, "i8")
    out.array(p + "history.codes", codes, "i8")


def _read_history(r: _Reader, p: str, n: int) -> tuple:
    """The items' histories from either layout (see :func:`_history`), checked: ``(events,
    counts, codes)`` (the table of distinct events, how many each item has, which) or, for the
    whole-history layout, ``(None, histories, None)``."""
    if p + "history" in r.parts:  # format 1, or events plain JSON cannot key
        history = r.data(p + "history")
        _check(isinstance(history, list) and len(history) == n and _all_of(history, list)
               and _all_of(itertools.chain.from_iterable(history), dict),
               r, f"part {p}history is malformed")
        return None, history, None
    events = r.data(p + "history.events")
    counts = r.array(p + "history.counts", "i8", n)
    codes = r.array(p + "history.codes", "i8")
    _check(isinstance(events, list) and _all_of(events, dict) and bool(np.all(counts >= 0))
           and int(counts.sum()) == len(codes) and _in_range(codes, len(events)),
           r, f"part {p}history is malformed")
    return events, counts, codes


# ---------------------------------------------------------------------------- restore
def _growable(values: np.ndarray) -> Growable:
    g = Growable(values.dtype, 0)
    g.data, g.size = values, len(values)
    return g


def _all_of(values: Any, kind: type) -> bool:
    """Whether every value is exactly of type ``kind`` (at C speed: a set of their types)."""
    return set(map(type, values)) <= {kind}


def _check(cond: bool, reader: _Reader, problem: str) -> None:
    if not cond:
        reader.fail(problem)


def _is_int(v: Any, lo: int = 0) -> bool:
    return type(v) is int and v >= lo


def _is_float(v: Any) -> bool:
    return type(v) in (int, float)


def _is_finite(v: Any) -> bool:
    return _is_float(v) and math.isfinite(v)


def _in_range(arr: np.ndarray, bound: int) -> bool:
    return not len(arr) or (int(arr.min()) >= 0 and int(arr.max()) < bound)


def restore(store: MemoryStore, info: SnapshotInfo, parts: list[bytes], *,
            workspace_cls: type, pin_session_cls: type) -> None:
    """Replace ``store``'s state with the snapshot's (call under the store's lock, on a store
    whose state was just reset), building its workspaces and pin sessions with the store's
    ``workspace_cls`` and ``pin_session_cls``. Everything is decoded and checked first; a
    damaged snapshot raises :class:`~memlab.persist.JournalCorruptError` naming it and leaves
    the store as it was."""
    heads = info.header.get("workspaces")
    size = sum(h["items"] + h["edges"] for h in heads if isinstance(h, dict) and _is_int(
        h.get("items")) and _is_int(h.get("edges"))) if isinstance(heads, list) else 0
    # millions of acyclic objects: the collector would rescan them repeatedly
    with _no_gc(freeze=size >= FREEZE_AT):
        _restore(store, info, parts, workspace_cls, pin_session_cls)


FREEZE_AT = 100_000  # items + edges of a snapshot from which a load freezes what it built


@contextlib.contextmanager
def _no_gc(freeze: bool = False):
    """Pause the cyclic garbage collector; with ``freeze``, move everything alive at the end
    into the collector's permanent generation (:func:`gc.freeze`) before resuming it.

    Why freeze: every object allocated while the collector is off stays in its youngest
    generation, so the first collection after a large load scans all of them (1M items: the
    items, their metadata dicts and history lists, ~3 million containers; ~0.9 s CPU in issue
    14's reopen profile), and later full collections scan them again. A store's state
    is long-lived and acyclic (reference counting frees what a write drops, frozen or not), so
    the collector has nothing to find there. The freeze is process-wide: other objects alive
    at that moment are frozen too, which only matters for cyclic garbage among them (it waits
    for :func:`gc.unfreeze`); hence it applies from :data:`FREEZE_AT` items and edges only."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if freeze:
            gc.freeze()
        if enabled:
            gc.enable()


def _restore(store: MemoryStore, info: SnapshotInfo, parts: list[bytes], workspace_cls: type,
             pin_session_cls: type) -> None:
    r = _Reader(store._journal.path if store._journal is not None else "", info, parts)
    heads = info.header.get("workspaces")
    _check(isinstance(heads, list), r, "its header lists no workspaces")
    built: dict[str, Any] = {}
    for w, head in enumerate(heads):
        ws = _restore_workspace(r, f"{w}.", head, workspace_cls)
        _check(ws.workspace_id not in built, r, "it names one workspace twice")
        built[ws.workspace_id] = ws
    pins, anchors, reviews = (_store_part(r, name, built) for name in ("pins", "anchors",
                                                                         "reviews"))
    # ---- checked: from here on the store changes
    _install(store, built, pins, anchors, reviews, pin_session_cls)


def _install(store: MemoryStore, built: dict, pins: list, anchors: list, reviews: list,
             pin_session_cls: type) -> None:
    store._workspaces = built
    store._pins = {sid: pin_session_cls(wid, {k: float(v) for k, v in items}, float(expires))
                   for sid, wid, items, expires in pins}
    store._anchors = {(w, s): list(rows) for w, s, rows in anchors}
    store._anchor_reviews = {(w, s): dict(pairs) for w, s, pairs in reviews}


# ---------------------------------------------------------------------------- salvage
# A workspace's parts in groups that are rebuilt together when one of them is damaged: each
# group is self-contained (its checks in _restore_workspace only look at the group and the
# item count), so a rebuilt group next to kept ones still loads.
_GROUPS = (
    ("memory types", ("memory_type", "memory_types")),
    ("dates", ("dates", "created_at", "updated_at", "created_ts", "updated_ts")),
    ("metadata", ("metadata",)),
    ("history", ("history", "history.events", "history.counts", "history.codes",
                 "history_dropped")),
    ("salience and archive flags", ("salience", "archived", "eligible", "procedural",
                                    "longterm")),
    ("token counts", ("tokens",)),
    ("activation and access times", ("act.stored", "act.anchor_ts", "act.last_boost_ts",
                                     "act.keys", "act.counts", "act.times")),
    ("edges", ("edge.src", "edge.dst", "edge.code", "edge.weight", "edge.updated_ts",
               "edge.types")),
    ("BM25 index", ("bm25.terms", "bm25.tids", "bm25.counts", "bm25.docs", "bm25.tfs",
                    "bm25.free", "bm25.doc_len", "bm25.removed")),
    ("gazetteer", ("gaz.phrases", "gaz.counts", "gaz.items")),
    ("node keys", ("node_index",)),
    ("topic fields", ("topic_fields",)),
    ("content-change marks", ("content_changes",)),
)
_HEAD_OF_GROUP = {"edges": ("edges",), "BM25 index": ("bm25",), "gazetteer": ("gazetteer",)}


def salvage(store: MemoryStore, info: SnapshotInfo, parts: list[bytes | None], *,
            workspace_cls: type, pin_session_cls: type, rebuild: Any,
            damaged: dict[int, bytes] | None = None,
            tombstones: list[tuple[str, str, str, str]] | None = None) -> list[str]:
    """Load every intact part of a damaged snapshot into ``store`` (a fresh one) and return
    one line per loss (``memlab recover``; :func:`restore` refuses a damaged snapshot whole).

    ``parts`` holds None for a part that failed its checksum
    (:func:`memlab.persist.read_snapshot_parts_salvaged`), and ``damaged`` the bytes such a
    part still has, by its position in ``parts``. A workspace whose parts all load is restored
    exactly. In another one its items are kept and each damaged group of parts
    (:data:`_GROUPS`: its dates, metadata, history, edges, BM25 index, …) is replaced by that
    group as writing the items afresh builds it: ``rebuild(workspace_id, analyzer, ids,
    contents, types, metadata, created)`` returns the capture (``(header, parts)``) of a store
    holding only those items, written by the store's own write path (types, metadata and
    creation dates as the snapshot has them when their parts are intact; else ``semantic``,
    ``{}`` and the epoch). Each group replaced is one line saying what was lost.

    When the part of item ids or of contents is damaged, each item whose id and content match
    their own checksums (format 3, see :func:`_lenient_strings`) is kept; each other one keeps
    its number under a placeholder id and an empty content, so every later row naming items by
    number still applies, and is listed in ``tombstones`` as ``(workspace_id, placeholder id,
    the item, where it is damaged)`` for the caller to drop (:func:`drop_items`) once those rows are
    applied. Without per-item checksums (formats 1 and 2) such a workspace is lost whole.
    Pins, anchors and review marks are kept when their part is intact (entries of a lost
    workspace dropped).
    """
    with _no_gc():
        return _salvage(store, info, parts, workspace_cls, pin_session_cls, rebuild,
                        damaged or {}, tombstones if tombstones is not None else [])


def _salvage(store: MemoryStore, info: SnapshotInfo, parts: list[bytes | None],
             workspace_cls: type, pin_session_cls: type, rebuild: Any,
             damaged: dict[int, bytes], tombstones: list) -> list[str]:
    r = _Reader("", info, parts)
    names = [e[0] for e in info.header["index"]]
    raw = {names[i]: data for i, data in damaged.items() if 0 <= i < len(names)}
    heads = info.header.get("workspaces")
    _check(isinstance(heads, list), r, "its header lists no workspaces")
    lines: list[str] = []
    built: dict[str, Any] = {}
    for w, head in enumerate(heads):
        p = f"{w}."
        try:
            ws = _restore_workspace(r, p, head, workspace_cls)
        except JournalCorruptError as exc:
            ws = _salvage_workspace(r, p, head, workspace_cls, rebuild, lines,
                                    exc.problem.split("is damaged: ", 1)[-1], raw, tombstones)
        if ws is not None and ws.workspace_id not in built:
            built[ws.workspace_id] = ws
    values = {}
    for name, what in _STORE_PARTS.items():
        try:
            raw_value = r.data(name)
            _check(isinstance(raw_value, list), r, f"part {name!r} is malformed")
            value = [x for x in raw_value if _store_entry_ok(name, x, built)]
            if len(value) < len(raw_value):
                lines.append(f"{len(raw_value) - len(value)} of the {len(raw_value)} {what} "
                             f"are lost (their workspace is lost or they are malformed)")
        except JournalCorruptError as exc:
            value = []
            lines.append(f"all {what} are lost ({exc.problem.split('is damaged: ', 1)[-1]})")
        values[name] = value
    _install(store, built, values["pins"], values["anchors"], values["reviews"],
             pin_session_cls)
    return lines


def _with_parts(r: _Reader, replace: dict[str, tuple[list, bytes]]) -> _Reader:
    """A reader of ``r``'s parts with those named in ``replace`` swapped (``name -> (entry,
    bytes)``; entries of ``r`` not named are kept in their order)."""
    index, data = [], []
    for name, (entry, blob) in r.parts.items():
        if name in replace:
            entry, blob = replace[name]
        index.append(entry)
        data.append(blob)
    for name, (entry, blob) in replace.items():
        if name not in r.parts:
            index.append(entry)
            data.append(blob)
    return _Reader(r.path, dataclasses.replace(r.info, header={**r.info.header, "index": index}),
                   data)


def _salvage_items(r: _Reader, p: str, n: int, raw: dict[str, bytes]
                   ) -> tuple[list[str | None], list[str | None]]:
    """The item ids and contents of workspace ``p``: every one when their parts are intact;
    from a damaged part, those matching their own checksum (None for the rest; see
    :func:`_lenient_strings`). Raises :class:`JournalCorruptError` when a damaged part cannot
    be read item by item (no per-item checksums, or they are damaged too)."""
    out = []
    for name in ("item_id", "content"):
        entry = r.parts.get(p + name)
        if entry is None or entry[0][1] != "data":
            r.fail(f"part {p + name!r} is missing")
        if entry[1] is not None:
            out.append(list(r.strings(p + name, n)))
            continue
        if p + name + ".crc" not in r.parts:
            r.fail(f"part {p + name!r} is damaged (and this snapshot, written before format 3, "
                   f"has no checksum per item to salvage it item by item)")
        try:
            crcs = r.array(p + name + ".crc", "i8", n)
        except JournalCorruptError:
            r.fail(f"part {p + name!r} is damaged, and so is its checksum per item")
        out.append(_lenient_strings(raw.get(p + name, b""), crcs))
    return out[0], out[1]


def _salvage_workspace(r: _Reader, p: str, head: Any, workspace_cls: type, rebuild: Any,
                       lines: list[str], reason: str, raw: dict[str, bytes],
                       tombstones: list) -> Any:
    """The workspace of parts ``p*`` with its damaged items kept as placeholders and its damaged
    groups rebuilt (see :func:`salvage`), or None (a line says why) when even that does not
    load."""
    wid = head.get("workspace_id") if isinstance(head, dict) else None
    label = f"workspace {wid!r}" if type(wid) is str else f"workspace {p[:-1]}"
    try:
        _check(type(wid) is str and _is_int(head.get("items")) and _is_int(head.get("edges")),
               r, f"workspace {p[:-1]}'s header is malformed")
        n = head["items"]
        ids, contents = _salvage_items(r, p, n, raw)
    except JournalCorruptError as exc:
        lines.append(f"{label} is lost whole: its item ids or contents are unreadable "
                     f"({exc.problem.split('is damaged: ', 1)[-1]})")
        return None
    lost = [k for k in range(n) if ids[k] is None or contents[k] is None]
    if lost:
        # placeholders hold the lost items' numbers: later rows name items by number
        taken = {x for x in ids if x is not None}
        for k in lost:
            label = f"item {ids[k]!r} (number {k})" if ids[k] is not None else \
                f"item number {k} (its id is unreadable)"
            where = "its content fails its own checksum in part " + repr(p + "content") \
                if ids[k] is not None else "its id fails its own checksum in part " + \
                repr(p + "item_id")
            holder, extra = f"damaged-item-{k}", 0
            while holder in taken:
                extra += 1
                holder = f"damaged-item-{k}-{extra}"
            taken.add(holder)
            ids[k], contents[k] = holder, ""
            tombstones.append((wid, holder, label, where))
    if any(r.parts[p + x][1] is None for x in ("item_id", "content")):
        fresh = _Writer()  # the salvaged ids and contents in place of the damaged parts
        fresh.data(p + "item_id", ids)
        fresh.data(p + "content", contents)
        fresh.array(p + "item_id.crc", [_text_crc(x) for x in ids], "i8")
        fresh.array(p + "content.crc", [_text_crc(x) for x in contents], "i8")
        r = _with_parts(r, {e[0]: (e, blob) for e, blob in zip(fresh.index, fresh.parts)})
    damaged = [(what, names) for what, names in _GROUPS
               if any(p + x in r.parts and r.parts[p + x][1] is None for x in names)]

    def attempt(groups: list) -> Any:
        if not groups:
            return _restore_workspace(r, p, head, workspace_cls)
        types = ["semantic"] * n
        metadata: list = [{} for _ in range(n)]
        created: list = [datetime(1970, 1, 1, tzinfo=timezone.utc)] * n
        rebuilt = {what for what, _ in groups}
        with contextlib.suppress(JournalCorruptError, IndexError, TypeError):
            if "memory types" not in rebuilt:
                names = r.data(p + "memory_types")
                types = [names[c] for c in r.array(p + "memory_type", "i4", n).tolist()]
        with contextlib.suppress(JournalCorruptError, TypeError):
            if "metadata" not in rebuilt:
                value = r.data(p + "metadata")
                if isinstance(value, list) and len(value) == n and _all_of(value, dict):
                    metadata = value
        with contextlib.suppress(JournalCorruptError, IndexError, TypeError, ValueError):
            if "dates" not in rebuilt:
                iso = r.data(p + "dates")
                dates = [datetime.fromisoformat(t) for t in iso]
                created = [dates[c] for c in r.array(p + "created_at", "i4", n).tolist()]
        try:
            header, fresh = rebuild(wid, head.get("analyzer"), ids, contents, types, metadata,
                                    created)
        except (ValueError, TypeError, KeyError) as exc:  # e.g. one item id twice
            r.fail(f"workspace {p[:-1]}'s items cannot be written again ({exc})")
        fresh_head = header["workspaces"][0]
        swap = {p + x for _, names in groups for x in names}
        replace = {}
        for entry, blob in zip(header["index"], fresh):
            name = p + entry[0].split(".", 1)[1] if entry[0].startswith("0.") else None
            if name in swap:
                replace[name] = ([name, *entry[1:]], blob)
        new_head = dict(head)
        for what, _ in groups:
            for key in _HEAD_OF_GROUP.get(what, ()):
                new_head[key] = fresh_head[key]
        sub = _with_parts(r, replace)
        for name in swap - set(replace):  # a part the fresh capture has not (format 1 history)
            sub.parts.pop(name, None)
        return _restore_workspace(sub, p, new_head, workspace_cls)

    try:
        ws = attempt(damaged)
    except JournalCorruptError:  # a kept group that does not fit the rebuilt ones: keep items
        damaged = list(_GROUPS)
        try:
            ws = attempt(damaged)
        except JournalCorruptError as exc:
            lines.append(f"{label} is lost whole ({exc.problem.split('is damaged: ', 1)[-1]})")
            return None
    if damaged:
        what_lost = ", ".join(f"{what} ({head['edges']} edges)" if what == "edges" else what
                              for what, _ in damaged)
        lines.append(f"{label}: kept its {n - len(lost)} items; lost its {what_lost}, rebuilt "
                     f"as writing the items afresh builds them ({reason})")
    return ws


def _store_part(r: _Reader, name: str, built: dict, value: Any = None) -> list:
    """The store-level part ``name`` (pins, anchors or reviews; ``value`` when already
    decoded), checked against the workspaces ``built``."""
    value = r.data(name) if value is None else value
    ok = isinstance(value, list) and all(_store_entry_ok(name, x, built) for x in value)
    _check(ok, r, f"its {_STORE_PARTS[name]} are malformed")
    return value


_STORE_PARTS = {"pins": "pins", "anchors": "anchors", "reviews": "review marks"}


def _store_entry_ok(name: str, x: Any, built: dict) -> bool:
    """Whether one entry of store-level part ``name`` is well formed and names a workspace
    of ``built`` (and, for an anchor, only items that workspace holds)."""
    if name == "pins":
        return isinstance(x, list) and len(x) == 4 and type(x[0]) is str and x[1] in built \
            and isinstance(x[2], list) and all(isinstance(y, list) and len(y) == 2
                                               and type(y[0]) is str and _is_finite(y[1])
                                               for y in x[2]) and _is_finite(x[3])
    if name == "anchors":
        return isinstance(x, list) and len(x) == 3 and x[0] in built and type(x[1]) is str \
            and isinstance(x[2], list) and all(_is_int(i) and i < len(built[x[0]])
                                               for i in x[2])
    return isinstance(x, list) and len(x) == 3 and type(x[0]) is str and type(x[1]) is str \
        and isinstance(x[2], list) and all(isinstance(y, list) and len(y) == 2 and all(
            type(z) is str for z in y) for y in x[2])


def _restore_workspace(r: _Reader, p: str, head: Any, workspace_cls: type) -> Any:
    ok = isinstance(head, dict) and type(head.get("workspace_id")) is str \
        and head.get("analyzer") in ANALYZERS and all(
            _is_int(head.get(k)) for k in ("items", "edges", "version", "graph_version",
                                           "next_generated")) \
        and (head.get("last_decay_ts") is None or _is_finite(head.get("last_decay_ts"))) \
        and isinstance(head.get("bm25"), dict) and isinstance(head.get("gazetteer"), dict)
    _check(ok, r, f"workspace {p[:-1]}'s header is malformed")
    n, m = head["items"], head["edges"]
    ws = workspace_cls(head["workspace_id"], head["analyzer"])
    ids = r.strings(p + "item_id", n)
    contents = r.strings(p + "content", n)
    type_names = r.data(p + "memory_types")
    _check(isinstance(type_names, list) and _all_of(type_names, str), r,
           f"part {p}memory_types is malformed")
    type_codes = r.array(p + "memory_type", "i4", n)
    iso = r.data(p + "dates")
    _check(isinstance(iso, list) and _all_of(iso, str), r, f"part {p}dates is malformed")
    created = r.array(p + "created_at", "i4", n)
    updated = r.array(p + "updated_at", "i4", n)
    _check(_in_range(type_codes, len(type_names)) and _in_range(created, len(iso))
           and _in_range(updated, len(iso)), r, f"workspace {p[:-1]}'s item codes are malformed")
    metadata = r.data(p + "metadata")
    history = _read_history(r, p, n)
    _check(isinstance(metadata, list) and len(metadata) == n and _all_of(metadata, dict),
           r, f"part {p}metadata is malformed")
    salience = r.finite(p + "salience", n)
    archived = r.array(p + "archived", "b1", n)
    dropped = r.array(p + "history_dropped", "i8", n)
    _check(bool(np.all(dropped >= 0)), r, f"part {p}history_dropped is malformed")
    try:
        if any(len(text) > 64 for text in iso):
            raise ValueError
        dates = [datetime.fromisoformat(text) for text in iso]
    except ValueError:
        r.fail(f"workspace {p[:-1]} holds a date that is not an ISO date")
    _check(len(type_names) <= 127 and len(set(type_names)) == len(type_names), r,
           f"part {p}memory_types is malformed")
    index_of = dict(zip(ids, range(n)))
    _check(len(index_of) == n, r, f"workspace {p[:-1]} names one item twice")
    created_ts, updated_ts = r.finite(p + "created_ts", n), r.finite(p + "updated_ts", n)
    ws.items = _item_columns(ws.workspace_id, ids, contents, type_names, type_codes, metadata,
                             dates, created, updated, created_ts, updated_ts, salience,
                             archived, history, dropped)
    ws.item_ids, ws.index_of = ws.items.ids, index_of
    ws.created_ts, ws.updated_ts = ws.items.created_ts, ws.items.updated_ts
    for name in ("eligible", "procedural", "longterm"):
        setattr(ws, name, _growable(r.array(p + name, "b1", n)))
    ws.tokens = _growable(r.array(p + "tokens", "i8", n))
    act = ws.activation
    for name in ("stored", "anchor_ts"):
        setattr(act, name, _growable(r.finite(p + "act." + name, n)))
    # NaN until an item's first reinforcement (ActivationState), never infinite
    act.last_boost_ts = _growable(r.finite(p + "act.last_boost_ts", n, nan=True))
    keys = r.array(p + "act.keys", "i8")
    counts = r.array(p + "act.counts", "i8", len(keys))
    times = r.finite(p + "act.times")
    _check(_in_range(keys, n) and len(set(keys.tolist())) == len(keys)
           and bool(np.all(counts >= 0)) and int(counts.sum()) == len(times),
           r, f"workspace {p[:-1]}'s access times are malformed")
    starts = np.concatenate(([0], np.cumsum(counts)))
    flat = times.tolist()
    act.access_times = {k: flat[s:e] for k, s, e in
                        zip(keys.tolist(), starts[:-1].tolist(), starts[1:].tolist())}
    ws.graph = _restore_graph(r, p, n, m, head["graph_version"])
    ws.bm25 = _restore_bm25(r, p, head["bm25"])
    _check(len(ws.bm25) == n, r, f"workspace {p[:-1]}'s BM25 index does not have one "
           f"document per item")
    _restore_gazetteer(r, p, ws.gazetteer, head["gazetteer"], n)
    nodes = r.data(p + "node_index")
    _check(isinstance(nodes, list) and all(
        isinstance(x, list) and len(x) == 3 and type(x[0]) is str and type(x[1]) is str
        and _is_int(x[2]) and x[2] < n for x in nodes), r, f"part {p}node_index is malformed")
    ws.node_index = {(a, b): i for a, b, i in nodes}
    topics = r.data(p + "topic_fields")
    _check(isinstance(topics, list) and all(
        isinstance(x, list) and len(x) == 2 and _is_int(x[0]) and x[0] < n
        and isinstance(x[1], dict) for x in topics), r, f"part {p}topic_fields is malformed")
    ws.topic_fields = {k: v for k, v in topics}
    changes = r.array(p + "content_changes", "i8")
    _check(_in_range(changes, n), r, f"part {p}content_changes is malformed")
    ws.content_changes = changes.tolist()
    ws.version, ws._next_generated = head["version"], head["next_generated"]
    ws.last_decay_ts = None if head["last_decay_ts"] is None else float(head["last_decay_ts"])
    return ws


def _item_columns(wid: str, ids: list, contents: list, type_names: list,
                  type_codes: np.ndarray, metadata: list, dates: list, created: np.ndarray,
                  updated: np.ndarray, created_ts: np.ndarray, updated_ts: np.ndarray,
                  salience: np.ndarray, archived: np.ndarray, history: Any,
                  dropped: np.ndarray) -> ItemColumns:
    """The item columns of a snapshot's items (every part already checked).

    A creation or update time is kept as a datetime only where its float column does not give
    it back exactly; a history only where it is more than the ``created`` event the columns
    give back (see :class:`~memlab._columns.ItemColumns`), decided per distinct date and event.
    """
    n = len(ids)
    cols = ItemColumns(wid)
    cols.ids, cols.contents = ids, contents
    cols.type_names = list(type_names)
    cols.type_code_of = {t: c for c, t in enumerate(type_names)}
    cols.type_code = _growable(type_codes.astype(np.int8))
    cols.salience, cols.archived = _growable(salience), _growable(archived)
    cols.metadata = {i: m for i, m in enumerate(metadata) if m}
    date_ts = np.array([d.timestamp() for d in dates])
    date_exact = np.array([exact_ts(d) for d in dates], dtype=bool)
    for codes, column, target in ((created, created_ts, cols.created_exact),
                                  (updated, updated_ts, cols.updated_exact)):
        if n:
            kept = ~date_exact[codes] | (date_ts[codes] != column)
            for i in np.flatnonzero(kept).tolist():
                target[i] = dates[codes[i]]
    cols.created_ts, cols.updated_ts = _growable(created_ts), _growable(updated_ts)
    events, counts, codes = history
    added = np.full(n, np.nan)
    if events is not None:  # a table of distinct events: decided per event
        event_ts = np.array([np.nan if (t := _created_ts(e)) is None else t for e in events])
        event_type = np.array([cols.type_code_of.get(e["detail"]["memory_type"], -1)
                               if not np.isnan(t) else -1 for e, t in zip(events, event_ts)],
                              dtype=np.int64)
        starts = np.concatenate(([0], np.cumsum(counts)[:-1])) if n else np.empty(0, np.int64)
        first = codes[np.minimum(starts, max(len(codes) - 1, 0))] if len(codes) else \
            np.zeros(n, np.int64)
        derived = (counts == 1) & (dropped == 0) & (event_type[first] == type_codes) \
            if n and len(events) else np.zeros(n, bool)
        added[derived] = event_ts[first[derived]]
        pick = events.__getitem__
        flat = codes.tolist()
        ends = np.cumsum(counts).tolist()
        for i in np.flatnonzero(~derived).tolist():
            cols.history[i] = list(map(pick, flat[ends[i] - int(counts[i]):ends[i]]))
    else:  # whole histories: decided per item
        for i, (items_history, code) in enumerate(zip(counts, type_codes.tolist())):
            if len(items_history) == 1 and not dropped[i]:
                ts = _created_ts(items_history[0])
                if ts is not None and items_history[0]["detail"]["memory_type"] == \
                        type_names[code]:
                    added[i] = ts
                    continue
            cols.history[i] = items_history
    cols.added_ts = _growable(added)
    cols.history_dropped = {i: d for i, d in enumerate(dropped.tolist()) if d}
    return cols


def _restore_graph(r: _Reader, p: str, n: int, m: int, version: int) -> GraphView:
    src, dst = r.array(p + "edge.src", "i8", m), r.array(p + "edge.dst", "i8", m)
    code = r.array(p + "edge.code", "i4", m)
    weight = r.array(p + "edge.weight", "f8", m)
    ts = r.finite(p + "edge.updated_ts", m)
    names = r.data(p + "edge.types")
    _check(isinstance(names, list) and all(type(t) is str for t in names)
           and len(set(names)) == len(names), r, f"part {p}edge.types is malformed")
    _check(_in_range(src, n) and _in_range(dst, n) and _in_range(code, len(names))
           and bool(np.all(np.isfinite(weight) & (weight >= 0))),
           r, f"workspace {p[:-1]}'s edges are malformed")
    table = EdgeTable()
    table.src, table.dst, table.code = _growable(src), _growable(dst), _growable(code)
    table.weight, table.updated_ts = _growable(weight), _growable(ts)
    table.type_names = list(names)
    table._code_of = {t: c for c, t in enumerate(names)}
    n_types = len(names)
    _check(not _live_duplicate(src, dst, code, weight, n, n_types), r,
           f"workspace {p[:-1]} holds one live edge twice")

    # the upsert index is built from the live rows on first use (an edge write or lookup):
    # every change to the table goes through the index first, so the columns are as loaded then
    table._index = PairIndex(lambda: (src, dst, code, weight, n_types))
    view = GraphView(table)
    view.version = version
    return view


def _live_duplicate(src: np.ndarray, dst: np.ndarray, code: np.ndarray, weight: np.ndarray,
                    n: int, n_types: int) -> bool:
    """Whether two live edges (weight > 0) share source, target and type (all in range).

    One sort of one int64 key per live edge, ``(src * n + dst) * n_types + code`` (distinct
    triples, distinct keys), when it fits in 63 bits; else a lexsort of the pair key and the
    type. Issue 14's reopen profile (5M edges): the graph's restore took 1.84 s CPU with the
    lexsort, 0.95 s with the single sort."""
    live = np.flatnonzero(weight > 0)
    if len(live) < 2:
        return False
    if n * n * max(n_types, 1) < 2 ** 62:
        key = src[live] * n
        key += dst[live]
        key *= max(n_types, 1)
        key += code[live]
        key.sort()
        return bool(np.any(key[1:] == key[:-1]))
    keys, codes = (src[live] << _KEY_SHIFT) | dst[live], code[live]
    order = np.lexsort((codes, keys))
    keys, codes = keys[order], codes[order]
    return bool(np.any((keys[1:] == keys[:-1]) & (codes[1:] == codes[:-1])))


def _restore_bm25(r: _Reader, p: str, head: dict) -> BM25Index:
    ok = head.get("idf") in IDF_VARIANTS and _is_finite(head.get("epsilon")) \
        and _is_float(head.get("total_len")) and _is_int(head.get("slots"))
    _check(ok, r, f"part {p}bm25's header is malformed")
    slots = head["slots"]
    terms = r.strings(p + "bm25.terms", len(r.array(p + "bm25.tids", "i8")))
    tids = r.array(p + "bm25.tids", "i8", len(terms))
    counts = r.array(p + "bm25.counts", "i8", slots)
    docs = r.array(p + "bm25.docs", "i4")
    tfs = r.array(p + "bm25.tfs", "f4", len(docs))
    free = r.array(p + "bm25.free", "i8")
    doc_len = r.finite(p + "bm25.doc_len")
    removed = r.array(p + "bm25.removed", "i8")
    n_docs = len(doc_len)
    _check(len(tfs) == len(docs) and bool(np.all(np.isfinite(tfs))) and bool(np.all(counts >= 0))
           and int(counts.sum()) == len(docs) and _in_range(docs, n_docs)
           and _in_range(tids, slots) and _in_range(free, slots)
           and len(set(tids.tolist()) | set(free.tolist())) == len(tids) + len(free)
           and len(set(terms)) == len(terms) and _in_range(removed, n_docs)
           and math.isfinite(float(head["total_len"])), r, f"part {p}bm25 is malformed")
    index = BM25Index(head["idf"], head["epsilon"])
    index._vocab = dict(zip(terms, tids.tolist()))
    ends = np.cumsum(counts).tolist()
    starts = [0] + ends[:-1]
    index._post_docs = [_growable(docs[s:e]) for s, e in zip(starts, ends)]
    index._post_tfs = [_growable(tfs[s:e]) for s, e in zip(starts, ends)]
    index._free = free.tolist()
    index._doc_len = _growable(doc_len)
    index._total_len = float(head["total_len"])
    index._removed = set(removed.tolist())
    index._n_postings = int(counts.sum())  # every posting kept is live (a removal drops its own)
    return index


def _restore_gazetteer(r: _Reader, p: str, gaz: Any, head: dict, n: int) -> None:
    _check(_is_int(head.get("longest")) and _is_int(head.get("max_words"), 1), r,
           f"part {p}gaz's header is malformed")
    phrases = r.strings(p + "gaz.phrases", len(r.array(p + "gaz.counts", "i8")))
    counts = r.array(p + "gaz.counts", "i8", len(phrases))
    items = r.array(p + "gaz.items", "i8")
    _check(bool(np.all(counts >= 0)) and int(counts.sum()) == len(items)
           and (not len(items) or (int(items.min()) >= -1 and int(items.max()) < n))
           and len(set(phrases)) == len(phrases), r, f"part {p}gaz is malformed")
    flat = items.tolist()
    ends = np.cumsum(counts).tolist()
    gaz._items = {ph: set(flat[s:e]) for ph, s, e in zip(phrases, [0] + ends[:-1], ends)}
    gaz._longest, gaz._max_words = head["longest"], head["max_words"]


# ---------------------------------------------------------------------------- the oracle
# Attributes that are not store state: locks, the journal, functions, lazily built or derived
# views (rebuilt on use exactly as after a replay), and transient write bookkeeping.
_NOT_STATE = frozenset([
    "lock", "_lock", "_journal", "path", "analyze", "dense", "other_bm25", "cache", "_base",
    "_delta_src", "_delta_dst", "_delta_code", "_delta_w", "_delta_out", "_delta_touch",
    "_stale", "rebuilds", "_okapi_cache", "_pending", "_depth", "_applying", "_batch",
    "_replaying", "_compactor", "_compact_lock", "_tail_rows", "last_compaction_error",
    "compact_after", "_closing", "reinforcements", "fsync_outside_lock",
    "reads_during_fsync", "_admit_at_commit",
    # the journal's group commit (memlab.store.journal): rows on their way to disk
    "_commit_cond", "_commit_queue", "_commit_issued", "_durable_upto", "_committing",
    "_commit_failure", "_commit_errors", "_owed", "_undoing",
    # BM25's read-side caches: the frozen postings, the query work since a write, kernel scratch
    "_frozen", "_pending", "_scratch_pool", "_build_lock",
    # the workspace's item-id rank (Workspace.id_sort_keys), built on demand
    "_id_rank", "_id_rank_spent"])


def full_state(store: MemoryStore) -> Any:
    """Every attribute of every object ``store`` holds, as comparable data (arrays by their
    dtype, shape and a hash of their bytes; dicts with their key order; sets sorted).

    Walks the objects rather than listing fields, so state added later is compared too. Only
    :data:`_NOT_STATE` (locks, the journal, lazily built indexes and views) is skipped.

    Examples
    --------
    >>> from datetime import datetime, timezone
    >>> from memlab import ManualClock, Memory
    >>> a, b = (Memory(clock=ManualClock(datetime(2024, 1, 1, tzinfo=timezone.utc)))
    ...         for _ in range(2))
    >>> _ = a.add("x", item_id="i"); _ = b.add("x", item_id="i")
    >>> full_state(a.store) == full_state(b.store)
    True
    >>> _ = b.search("x"); full_state(a.store) == full_state(b.store)
    False
    """
    with store.lock.shared():
        return _walk(store, set())


def state_digest(store: MemoryStore) -> str:
    """A SHA-256 of :func:`full_state` (equal digests: equal states)."""
    text = json.dumps(full_state(store), sort_keys=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def _walk(obj: Any, seen: set[int]) -> Any:
    if obj is None or isinstance(obj, (bool, int, str)):
        return obj
    if isinstance(obj, float):  # np.float64 too: the same IEEE value, whichever type holds it
        return repr(float(obj))
    if isinstance(obj, np.generic):
        return [str(obj.dtype), repr(obj.item())]
    if isinstance(obj, np.ndarray):
        return ["nd", str(obj.dtype), list(obj.shape),
                hashlib.sha256(np.ascontiguousarray(obj).tobytes()).hexdigest()]
    if isinstance(obj, Growable):
        return _walk(obj.view(), seen)
    if isinstance(obj, datetime):
        return ["dt", obj.isoformat(), repr(obj.tzinfo)]
    if isinstance(obj, dict):
        return ["dict", [[_walk(k, seen), _walk(v, seen)] for k, v in obj.items()]]
    if isinstance(obj, (set, frozenset)):
        return ["set", sorted((_walk(v, seen) for v in obj), key=repr)]
    if isinstance(obj, (list, tuple)):
        return [type(obj).__name__, [_walk(v, seen) for v in obj]]
    if hasattr(type(obj), "oracle_state"):  # state kept in a form that depends on write order
        # (PairIndex: arrays, pending entries, tombstones; ItemColumns: sparse dicts)
        return [type(obj).__name__, _walk(obj.oracle_state(), seen)]
    if callable(obj) and not hasattr(obj, "__dict__") and not hasattr(obj, "__slots__"):
        return "<function>"
    if id(obj) in seen:
        return "<cycle>"
    seen = seen | {id(obj)}
    names: list[str] = []
    if dataclasses.is_dataclass(obj):
        names = [f.name for f in dataclasses.fields(obj)]
    else:
        for cls in type(obj).__mro__:
            names += [n for n in getattr(cls, "__slots__", ()) if n not in names]
        names += [n for n in getattr(obj, "__dict__", {}) if n not in names]
    out = {}
    for n in sorted(names):
        if n in _NOT_STATE or not hasattr(obj, n):
            continue
        value = getattr(obj, n)
        if not inspect.isroutine(value):
            out[n] = _walk(value, seen)
    return [type(obj).__name__, out]


# ---------------------------------------------------------------------------- dropping items
_PER_ITEM_ARRAYS = (("memory_type", "i4"), ("created_at", "i4"), ("updated_at", "i4"),
                    ("salience", "f8"), ("archived", "b1"), ("history_dropped", "i8"),
                    ("created_ts", "f8"), ("updated_ts", "f8"), ("eligible", "b1"),
                    ("procedural", "b1"), ("longterm", "b1"), ("tokens", "i8"),
                    ("act.stored", "f8"), ("act.anchor_ts", "f8"), ("act.last_boost_ts", "f8"),
                    ("item_id.crc", "i8"), ("content.crc", "i8"))


def drop_items(header: dict[str, Any], parts: list[bytes], drops: dict[str, set[str]]
               ) -> tuple[dict[str, Any], list[bytes], dict[str, list[tuple[str, str, str]]]]:
    """A capture (:func:`capture`) without the items ``drops`` names (workspace id -> item
    ids), every other item renumbered in order: ``(header, parts, edges)``, ``edges`` listing
    per workspace the live edges dropped with them as ``(source id, type, target id)``.

    What ``memlab recover`` does with the items it could not salvage (their placeholders,
    see :func:`salvage`), once every journal row naming items by number is applied: an item
    is taken out of every part that holds it (columns, history, activation, edges touching
    it, BM25 postings, gazetteer, node keys, topic fields, content-change marks, and the
    store's anchors and pins naming it); the workspace's version counters move on.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory(); _ = mem.add("alpha", item_id="a"); _ = mem.add("beta", item_id="b")
    >>> mem.add_edge("a", "b")
    >>> header, parts, edges = drop_items(*capture(mem.store), {"default": {"a"}})
    >>> header["workspaces"][0]["items"], edges
    (1, {'default': [('a', 'RELATED', 'b')]})
    """
    info = SnapshotInfo(0, 0, np.empty(0, np.int64), len(parts), header)
    r = _Reader("", info, parts)
    replace: dict[str, Any] = {}  # part name -> (code or None for a data part, value)
    heads = [dict(h) for h in header["workspaces"]]
    dropped_edges: dict[str, list[tuple[str, str, str]]] = {}
    new_of_ws: dict[str, tuple[np.ndarray, list[str]]] = {}
    for w, head in enumerate(heads):
        wid = head["workspace_id"]
        gone = drops.get(wid)
        if not gone:
            continue
        p, n = f"{w}.", head["items"]
        ids = r.strings(p + "item_id", n)
        dead = np.fromiter((x in gone for x in ids), dtype=bool, count=n)
        if not dead.any():
            continue
        keep = ~dead
        new_of = np.cumsum(keep) - 1
        new_of[dead] = -1
        new_of_ws[wid] = (new_of, ids)
        kept = np.flatnonzero(keep).tolist()

        def data(name: str, value: Any) -> None:
            replace[p + name] = (None, value)

        def array(name: str, code: str, value: Any) -> None:
            replace[p + name] = (code, value)

        for name in ("item_id", "content", "metadata", "history"):
            if p + name in r.parts:
                values = r.data(p + name)
                data(name, [values[i] for i in kept])
        for name, code in _PER_ITEM_ARRAYS:
            if p + name in r.parts:
                array(name, code, r.array(p + name, code, n)[keep])
        if p + "history.counts" in r.parts:
            counts = r.array(p + "history.counts", "i8", n)
            codes = r.array(p + "history.codes", "i8")
            array("history.counts", "i8", counts[keep])
            array("history.codes", "i8", codes[np.repeat(keep, counts)])
        keys = r.array(p + "act.keys", "i8")
        counts = r.array(p + "act.counts", "i8", len(keys))
        times = r.array(p + "act.times", "f8")
        alive = keep[keys] if len(keys) else np.zeros(0, bool)
        array("act.keys", "i8", new_of[keys[alive]])
        array("act.counts", "i8", counts[alive])
        array("act.times", "f8", times[np.repeat(alive, counts)])
        # edges touching a dropped item go with it (listed); the others are renumbered
        m = head["edges"]
        src, dst = r.array(p + "edge.src", "i8", m), r.array(p + "edge.dst", "i8", m)
        code, weight = r.array(p + "edge.code", "i4", m), r.array(p + "edge.weight", "f8", m)
        types = r.data(p + "edge.types")
        rows = keep[src] & keep[dst] if m else np.zeros(0, bool)
        dropped_edges[wid] = [(ids[s], types[c], ids[d]) for s, d, c in zip(
            src[~rows & (weight > 0)].tolist(), dst[~rows & (weight > 0)].tolist(),
            code[~rows & (weight > 0)].tolist())]
        array("edge.src", "i8", new_of[src[rows]])
        array("edge.dst", "i8", new_of[dst[rows]])
        array("edge.code", "i4", code[rows])
        array("edge.weight", "f8", weight[rows])
        array("edge.updated_ts", "f8", r.array(p + "edge.updated_ts", "f8", m)[rows])
        head["edges"] = int(rows.sum())
        # BM25: postings of dropped documents out, the rest renumbered; a term left with no
        # posting leaves the vocabulary and its slot is free (as BM25Index.remove leaves it)
        bm = dict(head["bm25"])
        slots = bm["slots"]
        terms = r.data(p + "bm25.terms")
        tids = r.array(p + "bm25.tids", "i8", len(terms))
        pcounts = r.array(p + "bm25.counts", "i8", slots)
        docs, tfs = r.array(p + "bm25.docs", "i4"), r.array(p + "bm25.tfs", "f4")
        doc_len = r.array(p + "bm25.doc_len", "f8", n)
        live = keep[docs] if len(docs) else np.zeros(0, bool)
        slot_of = np.repeat(np.arange(slots), pcounts)
        new_counts = np.bincount(slot_of[live], minlength=slots).astype(np.int64)
        empty = set(np.flatnonzero((new_counts == 0) & (pcounts > 0)).tolist())
        pairs = [(t, i) for t, i in zip(terms, tids.tolist()) if i not in empty]
        data("bm25.terms", [t for t, _ in pairs])
        array("bm25.tids", "i8", [i for _, i in pairs])
        array("bm25.counts", "i8", new_counts)
        array("bm25.docs", "i4", new_of[docs[live]])
        array("bm25.tfs", "f4", tfs[live])
        array("bm25.free", "i8", r.array(p + "bm25.free", "i8").tolist() + sorted(empty))
        array("bm25.doc_len", "f8", doc_len[keep])
        removed = r.array(p + "bm25.removed", "i8")
        array("bm25.removed", "i8", new_of[removed[keep[removed]]] if len(removed) else [])
        bm["total_len"] = float(bm["total_len"]) - float(doc_len[dead].sum())
        head["bm25"] = bm
        # gazetteer: phrases keep their other items (-1: a phrase naming no item stays)
        phrases = r.data(p + "gaz.phrases")
        gcounts = r.array(p + "gaz.counts", "i8", len(phrases))
        gitems = r.array(p + "gaz.items", "i8")
        new_phrases, new_gcounts, new_gitems = [], [], []
        at = 0
        for phrase, c in zip(phrases, gcounts.tolist()):
            group = gitems[at:at + c].tolist()
            at += c
            left = [i if i < 0 else int(new_of[i]) for i in group if i < 0 or keep[i]]
            if left or not group:
                new_phrases.append(phrase)
                new_gcounts.append(len(left))
                new_gitems += sorted(left)
        data("gaz.phrases", new_phrases)
        array("gaz.counts", "i8", new_gcounts)
        array("gaz.items", "i8", new_gitems)
        data("node_index", [[a, b, int(new_of[i])] for a, b, i in r.data(p + "node_index")
                            if keep[i]])
        data("topic_fields", [[int(new_of[i]), f] for i, f in r.data(p + "topic_fields")
                              if keep[i]])
        changes = r.array(p + "content_changes", "i8")
        array("content_changes", "i8", new_of[changes[keep[changes]]] if len(changes) else [])
        head["items"] = n - int(dead.sum())
        head["version"] += 1
        head["graph_version"] += 1
    # the store's parts: anchors name items by number, pins and review marks by id
    for name in ("pins", "anchors", "reviews"):
        value = r.data(name)
        out = []
        for entry in value:
            wid = entry[1] if name == "pins" else entry[0]
            if wid not in new_of_ws:
                out.append(entry)
                continue
            new_of, ids = new_of_ws[wid]
            # pins and review marks name items by id: those of a dropped item go (whatever
            # id it had before its placeholder took its place)
            present = {i for i, k in zip(ids, new_of.tolist()) if k >= 0}
            if name == "pins":
                out.append([entry[0], wid, [x for x in entry[2] if x[0] in present], entry[3]])
            elif name == "anchors":
                out.append([wid, entry[1], [int(new_of[i]) for i in entry[2] if new_of[i] >= 0]])
            else:
                out.append([wid, entry[1], [x for x in entry[2] if x[0] in present]])
        replace[name] = (None, out)
    writer = _Writer()
    index, new_parts = [], []
    for (entry, blob) in r.parts.values():
        name = entry[0]
        if name in replace:
            code, value = replace[name]
            if code is None:
                writer.data(name, value)
            else:
                writer.array(name, np.asarray(value), code)
            entry, blob = writer.index[-1], writer.parts[-1]
        index.append(entry)
        new_parts.append(blob)
    return {**header, "workspaces": heads, "index": index}, new_parts, dropped_edges
