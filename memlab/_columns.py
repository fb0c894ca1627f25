"""A workspace's items as columns (issue 18, goal "Memory"): :class:`ItemColumns`.

One :class:`~memlab.model.MemoryItem` per item cost ~1,100 bytes beyond its text (the object,
its datetimes, its metadata dict, a one-event history of two dicts). The columns keep what every
item has in numpy arrays and what few items have in dicts keyed by item number; a
``MemoryItem`` is made when someone asks for one (:meth:`ItemColumns.item`).

- ``created_ts``, ``updated_ts``, ``added_ts``, ``salience`` (float64), ``archived`` (bool) and
  ``type_code`` (int8 into ``type_names``): one entry per item;
- ``contents``: one list of strings; ``metadata``: a dict, only items whose metadata is not
  empty;
- datetimes are the float columns: a UTC ``datetime`` that ``datetime.fromtimestamp`` gives
  back exactly is not kept (any other, e.g. another ``datetime`` subclass, is kept as given in
  ``created_exact`` / ``updated_exact``);
- history: an item whose history is only its ``created`` event (``{"ts": added_at,
  "kind": "created", "detail": {"memory_type": ...}}``) keeps nothing; the first event after it
  (or a creation time the float column cannot give back) stores the whole list in ``history``.
"""

from __future__ import annotations

import dataclasses
import functools
from datetime import datetime, timezone
from typing import Any

import numpy as np

from memlab._arrays import Growable
from memlab.model import HISTORY_CAP, MemoryItem, copy_json

__all__ = ["ItemColumns", "ItemView", "exact_ts"]

_UTC = timezone.utc
_fromtimestamp = datetime.fromtimestamp


@functools.lru_cache(maxsize=4096)
def _iso(ts: float) -> str:
    """The ISO string of the UTC time ``ts`` (cached: an item's creation, update and
    ``created`` event usually share one time, and a bulk write gives many items the same)."""
    return _fromtimestamp(ts, _UTC).isoformat()


def exact_ts(when: datetime) -> bool:
    """Whether ``datetime.fromtimestamp(when.timestamp(), utc)`` gives back ``when`` exactly
    (same type, same zone object, same fields), so a float column can hold it.

    Examples
    --------
    >>> exact_ts(datetime(2024, 1, 1, 12, 30, 0, 123456, tzinfo=timezone.utc))
    True
    >>> from datetime import timedelta
    >>> exact_ts(datetime(2024, 1, 1, tzinfo=timezone(timedelta(hours=2))))
    False
    """
    return type(when) is datetime and when.tzinfo is _UTC \
        and _fromtimestamp(when.timestamp(), _UTC) == when


class ItemColumns:
    """Every item of one workspace, by item number (see the module notes). The store writes it;
    readers get :class:`~memlab.model.MemoryItem` objects from :meth:`item`.

    Examples
    --------
    >>> cols = ItemColumns("ws")
    >>> when = datetime(2024, 1, 1, tzinfo=timezone.utc)
    >>> cols.extend(["a"], ["deploys run on fridays"], ["semantic"], [{}], [when], [when])
    >>> item = cols.item(0)
    >>> item.content, item.created_at == when, item.history[0]["kind"]
    ('deploys run on fridays', True, 'created')
    """

    def __init__(self, workspace_id: str) -> None:
        self.workspace_id = workspace_id
        self.ids: list[str] = []  # shared with the workspace's item_ids
        self.contents: list[str] = []
        self.type_names: list[str] = []
        self.type_code_of: dict[str, int] = {}
        self.type_code = Growable(np.int8, 64)
        self.created_ts = Growable(np.float64, 64)
        self.updated_ts = Growable(np.float64, 64)
        # the time of each item's "created" event; NaN where the history is kept whole
        self.added_ts = Growable(np.float64, 64)
        self.salience = Growable(np.float64, 64)
        self.archived = Growable(np.bool_, 64)
        self.metadata: dict[int, dict] = {}
        self.created_exact: dict[int, datetime] = {}
        self.updated_exact: dict[int, datetime] = {}
        self.history: dict[int, list[dict]] = {}
        self.history_dropped: dict[int, int] = {}
        self._views: dict[int, ItemView] = {}  # made views, by item number (see item())

    VIEWS = 4096

    def __len__(self) -> int:
        return len(self.contents)

    # ------------------------------------------------------------------ writes
    def _code(self, memory_type: str) -> int:
        code = self.type_code_of.get(memory_type)
        if code is None:
            if len(self.type_names) >= 127:
                raise ValueError(f"a workspace holds at most 127 memory types, got a 128th: "
                                 f"{memory_type!r}")
            code = self.type_code_of[memory_type] = len(self.type_names)
            self.type_names.append(memory_type)
        return code

    def plan_types(self, memory_types: list[str]) -> None:
        """Raise ValueError if ``memory_types`` would not fit (before a write changes anything)."""
        new = {t for t in memory_types if t not in self.type_code_of}
        if len(self.type_names) + len(new) > 127:
            raise ValueError(f"a workspace holds at most 127 memory types, got "
                             f"{len(self.type_names) + len(new)}")

    def extend(self, ids: list[str], contents: list[str], memory_types: list[str],
               metadata: list[dict], created_at: list[datetime], added_at: list[datetime],
               iso: dict[datetime, str] | None = None) -> None:
        """Append items.

        ``created_at`` is each item's creation (and first update) time, ``added_at`` the time
        of its ``created`` history event (``iso``: their ISO strings, if known)."""
        first = len(self.contents)
        n = len(contents)
        self.ids.extend(ids)
        self.contents.extend(contents)
        codes = [self._code(t) for t in memory_types]
        created = [t.timestamp() for t in created_at]
        added_ts = [t.timestamp() for t in added_at]
        if n == 1:  # one item (Memory.add): appends, no temporary arrays
            self.type_code.append(codes[0])
            self.created_ts.append(created[0])
            self.updated_ts.append(created[0])
            self.salience.append(1.0)
            self.archived.append(False)
        else:
            self.type_code.extend(np.asarray(codes, dtype=np.int8))
            self.created_ts.extend(created)
            self.updated_ts.extend(created)
            self.salience.extend(np.ones(n))
            self.archived.extend(np.zeros(n, bool))
        known: dict[tuple, bool] = {}  # equal instants in other zones are other keys

        def exact(when: datetime) -> bool:  # exact_ts, once per distinct time of a bulk write
            key = (when, when.tzinfo, type(when))
            ok = known.get(key)
            if ok is None:
                ok = known[key] = exact_ts(when)
            return ok

        for offset, (meta, made, added, memory_type) in enumerate(
                zip(metadata, created_at, added_at, memory_types)):
            i = first + offset
            if meta:
                self.metadata[i] = meta
            if not exact(made):
                self.created_exact[i] = made
                self.updated_exact[i] = made
            if not exact(added):
                stamp = iso[added] if iso is not None and added in iso else added.isoformat()
                self.history[i] = [{"ts": stamp, "kind": "created",
                                    "detail": {"memory_type": memory_type}}]
                added_ts[offset] = float("nan")
        self.added_ts.extend(added_ts)

    def set_content(self, i: int, content: str) -> None:
        self._views.pop(i, None)
        self.contents[i] = content

    def set_metadata(self, i: int, metadata: dict) -> None:
        self._views.pop(i, None)
        if metadata:
            self.metadata[i] = metadata
        else:
            self.metadata.pop(i, None)

    def set_updated(self, i: int, when: datetime) -> None:
        self.updated_ts.data[i] = when.timestamp()
        if exact_ts(when):
            self.updated_exact.pop(i, None)
        else:
            self.updated_exact[i] = when

    def record(self, i: int, event: dict) -> None:
        """Append a history event to item ``i``, keeping the newest ``HISTORY_CAP`` (drops
        counted), as :meth:`MemoryItem.record` does."""
        history = self.history.get(i)
        if history is None:
            history = self.history[i] = [self.created_event(i)]
            self.added_ts.data[i] = np.nan  # NaN exactly where the history is kept whole
        history.append(event)
        if len(history) > HISTORY_CAP:
            del history[0]
            self.history_dropped[i] = self.history_dropped.get(i, 0) + 1

    # ------------------------------------------------------------------ reads
    def memory_type(self, i: int) -> str:
        return self.type_names[self.type_code.data[i]]

    def created_event(self, i: int) -> dict:
        """Item ``i``'s ``created`` event as the columns give it."""
        return {"ts": _iso(float(self.added_ts.data[i])), "kind": "created",
                "detail": {"memory_type": self.memory_type(i)}}

    def iso_times(self, i: int) -> tuple[str, str]:
        """Item ``i``'s creation and update times as ISO strings."""
        created, updated = self.created_exact.get(i), self.updated_exact.get(i)
        return (_iso(float(self.created_ts.data[i])) if created is None else created.isoformat(),
                _iso(float(self.updated_ts.data[i])) if updated is None else updated.isoformat())

    def history_of(self, i: int) -> list[dict]:
        history = self.history.get(i)
        return history if history is not None else [self.created_event(i)]

    def created_at(self, i: int) -> datetime:
        when = self.created_exact.get(i)
        return when if when is not None else _fromtimestamp(float(self.created_ts.data[i]), _UTC)

    def updated_at(self, i: int) -> datetime:
        when = self.updated_exact.get(i)
        return when if when is not None else _fromtimestamp(float(self.updated_ts.data[i]), _UTC)

    def item(self, i: int) -> MemoryItem:
        """Item number ``i`` as an :class:`ItemView` (a read-only
        :class:`~memlab.model.MemoryItem`). The views of the last :attr:`VIEWS` items asked for
        are kept (the hot paths ask for the same few items again and again); a write to an
        item's content or metadata drops its view."""
        view = self._views.get(i)
        if view is None:
            view = ItemView(self, i)
            if len(self._views) >= self.VIEWS:
                self._views = {}
            self._views[i] = view
        return view

    def materialise(self, i: int) -> MemoryItem:
        """Item number ``i`` as a plain :class:`~memlab.model.MemoryItem` holding its values."""
        history = self.history.get(i)
        return MemoryItem(self.ids[i], self.contents[i],
                          self.type_names[self.type_code.data[i]],
                          self.metadata.get(i) or {}, self.workspace_id,
                          self.created_at(i), self.updated_at(i),
                          float(self.salience.data[i]), bool(self.archived.data[i]),
                          history if history is not None else [self.created_event(i)],
                          self.history_dropped.get(i, 0))

    def __getitem__(self, i: int | slice) -> MemoryItem | list[MemoryItem]:
        rows = range(len(self.contents))[i]  # negative numbers and slices as a list's
        return list(map(self.item, rows)) if isinstance(i, slice) else self.item(rows)

    def __iter__(self):
        return map(self.item, range(len(self.contents)))

    def oracle_state(self) -> Any:
        """What :func:`memlab.snapshot.full_state` compares: every item as a ``MemoryItem``
        (independent of the order the sparse dicts were filled in), and the columns."""
        return [list(map(self.materialise, range(len(self)))), self.created_ts,
                self.updated_ts, self.added_ts]


class ItemView(MemoryItem):
    """One item of an :class:`ItemColumns`, made on access.

    A :class:`~memlab.model.MemoryItem` (``isinstance`` holds; ``to_dict``, ``repr`` and
    equality with any ``MemoryItem`` work). What a reader reads most (id, content, type,
    metadata) is taken when the view is made; the rest (dates, salience, archive flag,
    history) is read from the columns when asked for, so a reader that wants an item's content
    and metadata pays for nothing else. Read-only: the store writes the columns (``record``
    raises). A pickle or ``copy`` of it is a plain ``MemoryItem`` with the values of that moment.
    """

    __slots__ = ("_cols", "_i")

    def __init__(self, cols: ItemColumns, i: int) -> None:  # not MemoryItem's __init__
        put = object.__setattr__  # every later assignment is refused (__setattr__)
        put(self, "_cols", cols)
        put(self, "_i", i)
        # MemoryItem's own slots (these fields are not overridden below)
        put(self, "item_id", cols.ids[i])
        put(self, "content", cols.contents[i])
        put(self, "memory_type", cols.type_names[cols.type_code.data[i]])
        put(self, "workspace_id", cols.workspace_id)

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"an item read from the store is read-only (setting {name!r}): "
                             f"write through the store (MemoryStore.update_item, set_salience, archive)")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"an item read from the store is read-only (deleting {name!r})")

    @property
    def metadata(self) -> dict:
        """A copy at every read, so a caller's change never reaches the store's own metadata:
        a flat dict (the common case: titles, speakers) is copied shallowly, which is all it
        needs and costs ~0.3 us where a JSON round trip costs ~4 us on every candidate a stage
        reads; nested values take the deep copy."""
        stored = self._cols.metadata.get(self._i)
        if not stored:
            return {}
        if all(type(value) in _SCALARS for value in stored.values()):
            return dict(stored)
        return copy_json(stored)
    created_at = property(lambda self: self._cols.created_at(self._i))
    updated_at = property(lambda self: self._cols.updated_at(self._i))
    salience = property(lambda self: float(self._cols.salience.data[self._i]))
    archived = property(lambda self: bool(self._cols.archived.data[self._i]))
    history = property(lambda self: self._cols.history_of(self._i))
    history_dropped = property(lambda self: self._cols.history_dropped.get(self._i, 0))

    def record(self, event: dict) -> None:
        raise TypeError("an item read from the store is read-only: write through the store")

    def to_dict(self) -> dict[str, Any]:
        """:meth:`MemoryItem.to_dict`, with the times' ISO strings straight from the columns."""
        cols, i = self._cols, self._i
        created, updated = cols.iso_times(i)
        return {
            "item_id": self.item_id, "content": self.content, "memory_type": self.memory_type,
            "metadata": self.metadata, "workspace_id": self.workspace_id,
            "created_at": created, "updated_at": updated,
            "salience": float(cols.salience.data[i]), "archived": bool(cols.archived.data[i]),
            "history": [dict(event) for event in cols.history_of(i)],
            "history_dropped": cols.history_dropped.get(i, 0),
        }

    def _values(self) -> tuple:
        return tuple(getattr(self, name) for name in _FIELDS)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MemoryItem):
            return NotImplemented
        return self._values() == tuple(getattr(other, name) for name in _FIELDS)

    __hash__ = None  # as MemoryItem's (a mutable dataclass)

    def __reduce__(self):
        return MemoryItem, self._values()

    def __copy__(self) -> MemoryItem:
        return MemoryItem(*self._values())

    def __deepcopy__(self, memo) -> MemoryItem:
        import copy
        return copy.deepcopy(MemoryItem(*self._values()), memo)


_FIELDS = tuple(f.name for f in dataclasses.fields(MemoryItem))
_SCALARS = frozenset((str, int, float, bool, type(None)))


def _created_ts(event: Any) -> float | None:
    """The time of a ``created`` event if the columns would give the event back exactly."""
    if not (isinstance(event, dict) and list(event) == ["ts", "kind", "detail"]
            and event["kind"] == "created" and isinstance(event["detail"], dict)
            and list(event["detail"]) == ["memory_type"] and type(event["ts"]) is str
            and type(event["detail"]["memory_type"]) is str):
        return None
    try:
        when = datetime.fromisoformat(event["ts"])
    except ValueError:
        return None
    if when.tzinfo is None or when.utcoffset() != timezone.utc.utcoffset(None):
        return None
    ts = when.timestamp()
    return ts if _fromtimestamp(ts, _UTC).isoformat() == event["ts"] else None
