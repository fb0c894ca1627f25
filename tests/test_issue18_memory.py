"""Issue 18, goal "Memory": the edge upsert index as columns (``PairIndex``) and items kept as
columns; each checked against a plain reference model of what the store promised before."""

from __future__ import annotations

import numpy as np
import pytest

from memlab.graph.csr import EdgeTable, PairIndex


class _ReferenceTable:
    """The upsert semantics of ``EdgeTable`` with one dict per type (the former index)."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, int, int], int] = {}
        self.weight: list[float] = []
        self.ts: list[float] = []
        self.ends: list[tuple[int, int, str]] = []

    def upsert(self, src, dst, types, weights, ts):
        added, reweighted, changes = 0, set(), []
        first = len(self.weight)
        for s, d, t, w in zip(src, dst, types, weights):
            row = self.rows.get((t, s, d))
            if row is None:
                row = self.rows[(t, s, d)] = len(self.weight)
                self.weight.append(w)
                self.ts.append(ts)
                self.ends.append((s, d, t))
                added += 1
            else:
                if row < first:
                    reweighted.add(row) if self.weight[row] != w else None
                self.weight[row] = w
                self.ts[row] = ts
        return added

    def remove(self, rows):
        for row in rows:
            if self.weight[row] > 0:
                s, d, t = self.ends[row]
                del self.rows[(t, s, d)]
                self.weight[row] = 0.0


@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("bulk", [3, 40, 2000])
def test_edge_table_upserts_like_the_dict_index(seed, bulk):
    """Random writes (small and bulk, repeats within a call, re-weights, removals and
    re-adds of removed pairs) give the same rows, weights and lookups as the reference."""
    rng = np.random.default_rng(seed)
    table, ref = EdgeTable(), _ReferenceTable()
    types = ["RELATED", "MENTIONS", "PART_OF"]
    PairIndex_merge = PairIndex.MIN_MERGE
    PairIndex.MIN_MERGE = 8  # merge often, so pending entries, merges and tombstones all occur
    try:
        for step in range(25):
            m = int(rng.integers(1, bulk + 1))
            src = rng.integers(0, 30, m)
            dst = rng.integers(0, 30, m)
            kinds = [types[i] for i in rng.integers(0, 3, m)]
            weights = rng.choice([0.5, 1.0, 2.0], m)
            ts = float(step)
            changes = table.upsert(src, dst, kinds, weights, ts)
            added = ref.upsert(src.tolist(), dst.tolist(), kinds, weights.tolist(), ts)
            assert changes.added == added
            if step % 4 == 3 and len(ref.weight):
                gone = rng.integers(0, len(ref.weight), int(rng.integers(1, 20)))
                table.remove(gone)
                ref.remove(gone.tolist())
            assert table.weight.view().tolist() == ref.weight
            assert table.updated_ts.view().tolist() == ref.ts
            names = table.type_names
            assert [(s, d, names[c]) for s, d, c in zip(table.src.view().tolist(),
                    table.dst.view().tolist(), table.code.view().tolist())] == ref.ends
            for s in range(0, 30, 3):
                for d in range(30):
                    for t in types:
                        assert table.row_of(s, d, t) == ref.rows.get((t, s, d))
            assert len(table._index) == len(ref.rows)
    finally:
        PairIndex.MIN_MERGE = PairIndex_merge


def test_edge_changes_keep_the_write_order():
    """New rows in order of first appearance with their last weight; re-weighted rows in
    order of first appearance, bulk path and one-by-one path alike."""
    for m in (4, PairIndex.BULK + 1):
        table = EdgeTable()
        table.upsert([5, 1], [6, 2], "RELATED", [1.0, 1.0])
        src = [1, 9, 5, 9] + [100 + i for i in range(m - 4)]
        dst = [2, 8, 6, 8] + [200 + i for i in range(m - 4)]
        changes = table.upsert(src, dst, "RELATED", [3.0, 1.0, 4.0, 7.0] + [1.0] * (m - 4))
        assert changes.src.tolist()[:1] == [9] and changes.src.tolist()[-2:] == [1, 5]
        assert changes.dweight.tolist()[:1] == [7.0] and changes.dweight.tolist()[-2:] == [2.0, 3.0]
        assert (changes.added, changes.reweighted) == (m - 3, 2)
        assert table.row_of(9, 8, "RELATED") == 2


def test_pair_index_bytes_per_edge():
    """The index holds 12 bytes per edge in its arrays (an int64 key and an int32 row)."""
    table = EdgeTable()
    n = 10_000
    table.upsert(np.arange(n), np.arange(n) + 1, "RELATED", np.ones(n))
    assert table._index.nbytes == 12 * n
    assert len(table._index) == n
