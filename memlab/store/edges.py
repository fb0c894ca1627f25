"""Edge writes and reads (a mixin of :class:`~memlab.store.MemoryStore`)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

import numpy as np

from memlab.model import validate_edge_type, validate_weight
from memlab.store.items import release_freed_memory
from memlab.store.journal import journaled
from memlab.store.workspace import Workspace

__all__ = ["EdgesMixin"]


class EdgesMixin:
    """The edges of :class:`~memlab.store.MemoryStore`: validation (once, for the facade too),
    writes and the edge list."""

    def prepare_edge(self, workspace_id: str, src: Any, dst: Any, edge_type: Any = "RELATED",
                     weight: Any = 1.0) -> tuple[int, int, str, float]:
        ws = self.workspace(workspace_id)
        s = ws.require(src, "src")
        d = ws.require(dst, "dst")
        if s == d:
            raise ValueError(f"dst must differ from src (self-loops are not stored), got {dst!r}")
        return s, d, validate_edge_type(edge_type), validate_weight(weight, "weight",
                                                                    allow_zero=False)

    def prepare_edge_columns(self, workspace_id: str, src: Sequence[Any], dst: Sequence[Any],
                             edge_types: Sequence[Any] | str = "RELATED",
                             weights: np.ndarray | None = None
                             ) -> tuple[np.ndarray, np.ndarray, Sequence[str] | str, np.ndarray]:
        """:meth:`prepare_edge` for columns of edges (the bulk path), checked column by column.

        Returns ``(src rows, dst rows, edge types, weights)`` for :meth:`add_edge_arrays`. The
        first row that fails is re-checked by :meth:`prepare_edge`, whose error is raised with
        ``edges row <n>: `` in front, so both paths say the same thing.
        """
        ws = self.workspace(workspace_id)
        n = len(src)
        bad = np.zeros(n, dtype=bool)
        ends = []
        for values in (list(src), list(dst)):
            idx = [ws.index_of.get(v) if v.__class__ is str else None for v in values]
            missing = np.fromiter((i is None for i in idx), bool, n)
            bad |= missing
            ends.append(np.array([-1 if i is None else i for i in idx], dtype=np.int64))
        bad |= ends[0] == ends[1]  # self-loops
        if not isinstance(edge_types, str):
            edge_types = list(edge_types)
            valid: set[str] = set()
            for row, t in enumerate(edge_types):
                if t.__class__ is not str or t not in valid:
                    try:
                        validate_edge_type(t)
                        valid.add(t)
                    except ValueError:
                        bad[row] = True
        raw = None if weights is None else np.asarray(weights)
        if raw is None:
            weights = np.ones(n)
        else:
            numeric = raw.dtype.kind in "iuf"
            weights = raw.astype(np.float64) if numeric else np.full(n, np.nan)
            for row in np.flatnonzero(~np.isfinite(weights) | (weights <= 0)).tolist():
                try:  # object columns: entry by entry
                    weights[row] = validate_weight(raw[row], "weight", allow_zero=False)
                except ValueError:
                    bad[row] = True
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            edge_type = edge_types if isinstance(edge_types, str) else edge_types[row]
            try:
                if raw is not None and raw.dtype.kind == "f" and np.isnan(raw[row]):
                    # pandas stores None in a number column as NaN: name the missing value
                    raise ValueError("weight is missing (NaN; a None in a number column reads "
                                     "as NaN); weights must be finite and > 0")
                self.prepare_edge(workspace_id, list(src)[row], list(dst)[row], edge_type,
                                  1.0 if raw is None else raw[row])
            except ValueError as exc:
                raise type(exc)(f"edges row {row}: {exc}") from None
            raise AssertionError(f"edges row {row} failed a column check only")  # pragma: no cover
        return ends[0], ends[1], edge_types, weights

    @journaled
    def add_edges(self, workspace_id: str, edges: Sequence[tuple[int, int, str, float]],
                  now: datetime | None = None) -> None:
        """Write prepared edges (an existing ``(src, dst, type)`` edge gets the new weight)."""
        if not edges:
            return
        src, dst, types, weights = zip(*edges)
        self.add_edge_arrays(workspace_id, np.array(src, np.int64), np.array(dst, np.int64),
                             list(types), np.array(weights, np.float64), now)

    @journaled
    def add_edge_arrays(self, workspace_id: str, src: np.ndarray, dst: np.ndarray,
                        edge_types: Sequence[str] | str, weights: np.ndarray,
                        now: datetime | None = None) -> None:
        """Write validated edges given as item numbers (the bulk path)."""
        with self.lock:
            ws = self.workspace(workspace_id)
            if not len(src):
                return
            src, dst = ws.check_rows(src), ws.check_rows(dst)
            weights = np.asarray(weights, dtype=np.float64)
            if not (len(src) == len(dst) == len(weights)) or (
                    not isinstance(edge_types, str) and len(edge_types) != len(src)):
                raise ValueError("src, dst, edge_types and weights must have one entry per edge")
            if not np.all(np.isfinite(weights) & (weights > 0)):
                raise ValueError("weights must be finite and > 0")
            for edge_type in ({edge_types} if isinstance(edge_types, str) else set(edge_types)):
                validate_edge_type(edge_type)
            ts = float("nan") if now is None else now.timestamp()
            self._mutating()
            ws.graph.write(src, dst, edge_types, weights, ts)
            ws.version += 1
            release_freed_memory(len(src))  # the upsert's sort keys and grown columns' old buffers

    @journaled
    def remove_edges(self, workspace_id: str, rows: Sequence[int]) -> int:
        """Remove edge rows (see :meth:`EdgeTable.remove`); returns how many were live."""
        with self.lock:
            ws = self.workspace(workspace_id)
            rows = np.asarray(rows, dtype=np.int64)
            weight = ws.graph.table.weight.view()
            if len(rows) and (rows.min() < 0 or rows.max() >= len(weight)):
                raise ValueError(f"rows must be edge rows in 0..{len(weight) - 1}")
            live = rows[weight[rows] > 0] if len(rows) else rows
            if len(live):
                self._mutating()
                ws.graph.remove(live)
                ws.version += 1
            return len(live)

    def _edge_rows(self, ws: Workspace, only: int | None = None) -> list[list]:
        table = ws.graph.table
        rows = np.flatnonzero(table.alive())
        src, dst = table.src.view(), table.dst.view()
        if only is not None:
            rows = rows[(src[rows] == only) | (dst[rows] == only)]
        ids, names = ws.item_ids, table.type_names
        return [[ids[s], ids[d], names[c], w] for s, d, c, w in
                zip(src[rows].tolist(), dst[rows].tolist(), table.code.view()[rows].tolist(),
                    table.weight.view()[rows].tolist())]

    def edge_list(self, workspace_id: str, item_id: str | None = None) -> list[dict[str, Any]]:
        with self.lock.shared():
            ws = self.workspace(workspace_id)
            only = None if item_id is None else ws.require(item_id)
            return [{"src": s, "dst": d, "edge_type": t, "weight": w}
                    for s, d, t, w in self._edge_rows(ws, only)]
