"""The candidate frame that surfacing stages pass along: columns aligned per candidate, immutable.

A :class:`CandidateTable` holds one row per candidate (an item number ``idx`` of the workspace,
its ``source`` and whether it is ``mandatory``) and one numpy column per signal a stage has filled
in. Stages never change a table: they return a new one (:meth:`CandidateTable.with_columns`,
:meth:`~CandidateTable.add`, :meth:`~CandidateTable.filter`, :meth:`~CandidateTable.take`), and
every column is a read-only array, so a table handed to one stage is still the same table after
it. ``attrs`` carries what a stage learnt about the query as a whole (BM25's matches, the hybrid
scale, the items the query names, ...), also read-only.

Columns are numpy arrays; text columns (``source``, ``item_id``, ``filter_reason``) are object
arrays. :meth:`to_frame` and :meth:`from_frame` convert to and from a pandas DataFrame, which is
how counterfactual re-scoring feeds recorded candidates through the same stages.
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any, Iterable, Mapping

import numpy as np

__all__ = ["CandidateTable"]

_EMPTY_INT = np.empty(0, np.int64)


def _frozen(values: Any, n: int | None, name: str) -> np.ndarray:
    """``values`` as a read-only 1-d array of ``n`` rows. An array is frozen in place: a view
    frozen this way leaves its base writable, and a stage hands over the arrays it made."""
    arr = values if values.__class__ is np.ndarray else np.asarray(
        values, dtype=object if _is_text(values) else None)
    if arr.ndim != 1:
        raise ValueError(f"column {name!r} must be one-dimensional, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"column {name!r} must have {n} rows, got {len(arr)}")
    arr.setflags(False)
    return arr


def _is_text(values: Any) -> bool:
    return isinstance(values, (list, tuple)) and any(
        v is None or isinstance(v, str) for v in values[:1])


class CandidateTable:
    """An immutable, columnar frame of surfacing candidates (one row per candidate).

    Parameters
    ----------
    columns : mapping of str to array-like
        Equal-length columns. ``idx`` (item numbers, int64) is required.
    attrs : mapping, optional
        Query-level facts stages leave for later stages.

    Examples
    --------
    >>> t = CandidateTable.empty().add(np.array([3, 1, 3]), "bm25")
    >>> t.idx.tolist(), t.source.tolist()
    ([3, 1], ['bm25', 'bm25'])
    >>> t2 = t.with_columns(relevance=np.array([0.5, 1.0]))
    >>> "relevance" in t, "relevance" in t2
    (False, True)
    >>> t2.relevance[0] = 2.0
    Traceback (most recent call last):
    ...
    ValueError: assignment destination is read-only
    """

    def __init__(self, columns: Mapping[str, Any], attrs: Mapping[str, Any] | None = None) -> None:
        if "idx" not in columns:
            raise ValueError(f"columns must include 'idx', got {sorted(columns)}")
        idx = _frozen(np.asarray(columns["idx"], dtype=np.int64), None, "idx")
        n = len(idx)
        cols = {"idx": idx}
        for name, values in columns.items():
            if name != "idx":
                cols[name] = _frozen(values, n, name)
        self._set(cols, dict(attrs or {}))

    def _set(self, columns: dict[str, np.ndarray], attrs: dict[str, Any]) -> None:
        # columns are also plain instance attributes (a dict lookup, where __getattr__ would
        # cost an exception per access), except names the class itself uses
        d = self.__dict__
        d.update(columns if _RESERVED.isdisjoint(columns) else
                 {k: v for k, v in columns.items() if k not in _RESERVED})
        d["_columns"], d["_attrs"], d["_n"] = columns, attrs, len(columns["idx"])

    # construction ---------------------------------------------------------------------------
    @classmethod
    def empty(cls, attrs: Mapping[str, Any] | None = None) -> "CandidateTable":
        """A table without candidates (``idx``, ``source``, ``relevance_override`` columns)."""
        if not attrs:
            return _EMPTY_TABLE  # immutable, so one serves every pipeline
        return cls({"idx": _EMPTY_INT, "source": np.empty(0, object),
                    "relevance_override": np.empty(0)}, attrs)

    @classmethod
    def from_frame(cls, frame, attrs: Mapping[str, Any] | None = None) -> "CandidateTable":
        """A table of a DataFrame's columns (``idx`` defaults to the row numbers)."""
        columns = {name: frame[name].to_numpy() for name in frame.columns}
        columns.setdefault("idx", np.arange(len(frame), dtype=np.int64))
        return cls(columns, attrs)

    # reading --------------------------------------------------------------------------------
    def __len__(self) -> int:
        return self._n

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __getitem__(self, name: str) -> np.ndarray:
        try:
            return self._columns[name]
        except KeyError:
            raise KeyError(f"no column {name!r}; columns: {list(self._columns)}") from None

    def __getattr__(self, name: str) -> np.ndarray:
        try:
            return self._columns[name]
        except KeyError:
            raise AttributeError(f"CandidateTable has no column {name!r}; "
                                 f"columns: {list(self._columns)}") from None

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"CandidateTable is immutable: use with_columns({name}=...)")

    def __repr__(self) -> str:
        return f"CandidateTable({self._n} rows; columns {list(self._columns)})"

    @property
    def columns(self) -> tuple[str, ...]:
        return tuple(self._columns)

    @property
    def attrs(self) -> Mapping[str, Any]:
        """Query-level facts (read-only mapping)."""
        return MappingProxyType(self._attrs)

    def column_map(self) -> Mapping[str, np.ndarray]:
        """Every column by name (read-only mapping of read-only arrays)."""
        return MappingProxyType(self._columns)

    def get(self, name: str, default: Any = None) -> Any:
        return self._columns.get(name, default)

    def to_frame(self):
        """The columns as a pandas DataFrame (one row per candidate, this order)."""
        import pandas as pd

        return pd.DataFrame({name: col for name, col in self._columns.items()})

    # deriving -------------------------------------------------------------------------------
    def _derive(self, columns: dict[str, np.ndarray], attrs: dict[str, Any] | None = None
                ) -> "CandidateTable":
        out = object.__new__(CandidateTable)
        out._set(columns, self._attrs if attrs is None else attrs)
        return out

    def with_columns(self, **columns: Any) -> "CandidateTable":
        """A table with ``columns`` added or replaced (same rows)."""
        if "idx" in columns:
            raise ValueError("idx cannot be replaced; use take() or add()")
        n = self._n
        for name, values in columns.items():
            if values.__class__ is np.ndarray and values.ndim == 1 and values.shape[0] == n:
                values.setflags(False)  # the common case, inline: a stage's new array
            else:
                columns[name] = _frozen(values, n, name)
        return self._copy_with(columns, None)

    def _with(self, columns: dict[str, np.ndarray], attrs: Mapping[str, Any] | None = None
              ) -> "CandidateTable":
        """with_columns for a stage's own fresh arrays (frozen here, not checked) and attrs."""
        for values in columns.values():
            values.setflags(False)
        return self._copy_with(columns, attrs)

    def _copy_with(self, columns: dict[str, np.ndarray], attrs: Mapping[str, Any] | None
                   ) -> "CandidateTable":
        # the per-call cost matters (a stage boundary per stage per query): copy, then update
        out = object.__new__(CandidateTable)
        d = out.__dict__
        d.update(self.__dict__)
        d.update(columns if _RESERVED.isdisjoint(columns) else
                 {k: v for k, v in columns.items() if k not in _RESERVED})
        d["_columns"] = {**self._columns, **columns}
        if attrs:
            d["_attrs"] = {**self._attrs, **attrs}
        return out

    def with_attrs(self, **attrs: Any) -> "CandidateTable":
        """A table whose ``attrs`` has these entries added or replaced."""
        out = object.__new__(CandidateTable)
        d = out.__dict__
        d.update(self.__dict__)
        d["_attrs"] = {**self._attrs, **attrs}
        return out

    def take(self, positions: Iterable[int] | np.ndarray, *, attrs: Mapping[str, Any] | None = None,
             **columns: Any) -> "CandidateTable":
        """The rows at ``positions``, in that order; ``columns`` (aligned with the current
        rows) are added or replaced on the way, and ``attrs`` entries added."""
        pos = np.asarray(positions, dtype=np.int64)
        out = {}
        extra = {name: _frozen(values, self._n, name) for name, values in columns.items()}
        if "idx" in extra:
            raise ValueError("idx cannot be replaced; use take() or add()")
        for name, col in (self._columns | extra).items():
            taken = col[pos]  # fancy indexing: a new array, ours to freeze
            taken.setflags(False)
            out[name] = taken
        return self._derive(out, None if attrs is None else {**self._attrs, **attrs})

    def ranked(self) -> "CandidateTable":
        """The table in rank order (after a ``budget`` stage: ``attrs["order"]``)."""
        if "order" not in self._attrs:
            raise ValueError("the table has no rank order yet (run a budget stage)")
        return self.take(self._attrs["order"])

    def add(self, idx: np.ndarray, source: str, relevance: np.ndarray | None = None,
            *, allowed: np.ndarray | None = None) -> "CandidateTable":
        """Rows for the items of ``idx`` not yet in the table (the first source wins).

        ``relevance`` (aligned with ``idx``) becomes the new rows' ``relevance_override``;
        ``allowed`` (a boolean column over all item numbers) keeps out items where it is False.
        Other columns of the new rows get their type's blank (0, False, NaN, None).
        """
        new = np.asarray(idx, dtype=np.int64).reshape(-1)
        if not len(new):
            return self
        at = None  # positions in `new` still in the running (None: all of them)
        if allowed is not None:
            ok = allowed[new]
            if not ok.all():
                at = np.flatnonzero(ok)
        # pools hold tens to hundreds of items: a set beats np.isin/np.unique at this size; the
        # comprehension keeps each item's first occurrence not already in the table
        present = set(self._columns["idx"].tolist()) if self._n else set()
        values = (new if at is None else new[at]).tolist()
        if present.isdisjoint(values) and len(set(values)) == len(values):
            keep = range(len(values))  # all new and distinct (e.g. a ranked list): no walk
        else:
            seen = present.add
            keep = [pos for pos, i in enumerate(values) if not (i in present or seen(i))]
        if not keep:
            return self
        if len(keep) == len(new):
            keep_arr, new_idx = None, new
        else:
            keep_arr = np.array(keep, dtype=np.int64)
            if at is not None:
                keep_arr = at[keep_arr]
            new_idx = new[keep_arr]
        m = len(new_idx)
        if relevance is None:
            override = np.full(m, np.nan)
        else:
            override = np.asarray(relevance, dtype=float).reshape(-1)
            override = override if keep_arr is None else override[keep_arr]
        if keep_arr is None and not self._n:  # the caller's arrays: the table keeps copies
            new_idx, override = new_idx.copy(), override.copy()
        added = {"idx": new_idx, "source": text_column(m, source),
                 "relevance_override": override}
        columns = {}
        for name, col in self._columns.items():
            extra = added.get(name)
            if extra is None:
                extra = _blank(col, m)
            merged = np.concatenate([col, extra]) if self._n else \
                extra.astype(col.dtype, copy=False)
            merged.setflags(False)
            columns[name] = merged
        for name, extra in added.items():  # a column the table did not have yet
            if name not in columns:
                columns[name] = _frozen(np.concatenate([_blank(extra, self._n), extra]), None,
                                        name)
        return self._derive(columns)

    def filter(self, mask: np.ndarray, reason: str) -> "CandidateTable":
        """Exclude candidates from surfacing (they stay, with ``reason`` as their drop reason)."""
        filtered = self.get("filtered")
        filtered = np.zeros(self._n, dtype=bool) if filtered is None else filtered
        reasons = self.get("filter_reason")
        reasons = text_column(self._n) if reasons is None else reasons.copy()
        fresh = np.asarray(mask, dtype=bool) & ~filtered
        reasons[fresh] = reason
        return self.with_columns(filtered=filtered | fresh, filter_reason=reasons)


_RESERVED = frozenset(name for name in dir(CandidateTable) if not name.startswith("__"))
_EMPTY_TABLE = CandidateTable({"idx": _EMPTY_INT, "source": np.empty(0, object),
                               "relevance_override": np.empty(0)})


def _blank(like: np.ndarray, m: int) -> np.ndarray:
    kind = like.dtype.kind
    if kind == "f":
        return np.full(m, np.nan)
    if kind == "b":
        return np.zeros(m, dtype=bool)
    if kind in "iu":
        return np.zeros(m, dtype=like.dtype)
    return text_column(m)


_CONSTANT_COLUMNS: dict[tuple[str, int], np.ndarray] = {}


def constant_column(kind: str, m: int) -> np.ndarray:
    """A read-only column of ``m`` zeros (``"zeros"``), ones (``"ones"``), False (``"false"``)
    or None (``"none"``), shared: columns are immutable, so every table that starts a column at
    a neutral value can hold the same array (one allocation less per column per query).

    >>> constant_column("ones", 3).tolist(), constant_column("ones", 3) is constant_column("ones", 3)
    ([1.0, 1.0, 1.0], True)
    """
    key = (kind, m)
    out = _CONSTANT_COLUMNS.get(key)
    if out is None:
        if kind == "zeros":
            out = np.zeros(m)
        elif kind == "ones":
            out = np.ones(m)
        elif kind == "false":
            out = np.zeros(m, dtype=bool)
        elif kind == "none":
            out = np.empty(m, dtype=object)
        else:
            raise ValueError(f"kind must be 'zeros', 'ones', 'false' or 'none', got {kind!r}")
        out.setflags(write=False)
        if m <= 4096:  # candidate pools; a larger table gets its own array
            if len(_CONSTANT_COLUMNS) >= 1024:
                _CONSTANT_COLUMNS.clear()
            _CONSTANT_COLUMNS[key] = out
    return out


def text_column(m: int, value: str | None = None) -> np.ndarray:
    """An object column of ``m`` copies of ``value`` (None: blank).

    ``np.empty`` of object dtype starts as None and ``fill`` is one C loop, where
    ``np.full(m, text, dtype=object)`` costs a Python-level step per element (about 20x more
    for a pool of candidates)."""
    out = np.empty(m, dtype=object)
    if value is not None:
        out.fill(value)
    return out
