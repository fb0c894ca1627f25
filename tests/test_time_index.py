"""Issue 18: the kept recency order and the creation-time index (memlab.signals.time_index)
against the O(n) full sorts they replaced, on random stores with many ties."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from memlab import DEFAULT, ManualClock, Memory
from memlab.signals import time_index
from memlab.signals.time_index import (CreatedOrder, RecencyOrder, top_by_score_then_time,
                                      top_by_time)
from memlab.surfacing.stages import CandidateTable, QueryRun
from memlab.surfacing.stages.expand import Recent, Window
from memlab.surfacing.stages.retrieval import bm25_of
from memlab.surfacing.strategies import RETRIEVE
from memlab.surfacing.timewindow import parse_time_window

START = datetime(2024, 2, 10, tzinfo=timezone.utc)
WORDS = ["alpha", "beta", "gamma", "delta"]


# -- the O(n) paths before issue 18, with the full sort (lexsort) where they partitioned first ------

def recent_oracle(ws, n: int) -> np.ndarray:
    eligible = np.flatnonzero(ws.eligible_mask())
    ref = ws.recency_reference_ts(eligible)
    return eligible[np.lexsort((eligible, -ref))][:n]


def window_oracle(run, table, m: int) -> np.ndarray:
    """What ``Window`` added before issue 18 (every eligible item in the window scanned)."""
    window = parse_time_window(run.query, run.now)
    created, eligible = run.ws.created_column(), run.ws.eligible_mask()
    inside = np.flatnonzero(window.contains_ts(created) & eligible)
    if not len(inside):
        return np.empty(0, np.int64)
    bm25 = bm25_of(table, inside)
    matched, rest = inside[bm25 > 0], inside[bm25 == 0]
    order = np.lexsort((matched, -created[matched], -bm25[bm25 > 0]))[:m]
    picked = [matched[order]]
    if len(order) < m and len(rest):
        picked.append(rest[np.lexsort((rest, -created[rest]))][:m - len(order)])
    return np.concatenate(picked)


# -- the pieces ---------------------------------------------------------------------------------

@given(st.lists(st.tuples(st.integers(0, 20), st.integers(0, 3)), max_size=40),
       st.integers(0, 12))
def test_top_by_time_is_the_head_of_the_full_sort(pairs, n):
    ts = np.array([float(t) for t, _ in pairs])
    idx = np.arange(len(pairs), dtype=np.int64)[::-1].copy()  # not ascending: ties by idx
    expected = np.lexsort((idx, -ts))[:n]
    assert top_by_time(idx, ts, n).tolist() == expected.tolist()


OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.integers(0, 5), min_size=1, max_size=6)),
    st.tuples(st.just("set"), st.integers(0, 60), st.integers(0, 6)),  # new reference time
    st.tuples(st.just("eligible"), st.integers(0, 60), st.booleans()),
    st.tuples(st.just("top"), st.integers(0, 15)),
    st.tuples(st.just("sort"),),
), max_size=50)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(OPS, st.integers(0, 6))
def test_recency_order_equals_the_full_sort(ops, resort_min):
    """Any mix of adds, reference changes, eligibility changes and reads, re-sorting often
    (RESORT_MIN small) or never, answers as the full sort of the current columns."""
    ref, eligible, order = [], [], RecencyOrder()
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time_index, "RESORT_MIN", resort_min)
        for op in ops:
            if op[0] == "add":
                ref.extend(float(t) for t in op[1])
                eligible.extend(True for _ in op[1])
            elif op[0] in ("set", "eligible") and ref:
                i = op[1] % len(ref)
                if op[0] == "set":
                    ref[i] = float(op[2])
                else:
                    eligible[i] = op[2]
                order.touch([i])
            elif op[0] == "sort":
                r, e = np.array(ref, dtype=float), np.array(eligible, dtype=bool)
                order._resort(lambda idx: r[idx], e)
            elif op[0] == "top":
                r, e = np.array(ref, dtype=float), np.array(eligible, dtype=bool)
                rows = np.flatnonzero(e)
                expected = rows[np.lexsort((rows, -r[rows]))][:op[1]]
                got = order.top(op[1], lambda idx: r[idx], e)
                assert got.tolist() == expected.tolist()


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(st.integers(0, 8), min_size=1, max_size=6), max_size=8),
       st.integers(0, 9), st.integers(0, 9), st.integers(0, 10), st.integers(0, 7))
def test_created_order_equals_the_full_sort(batches, a, b, n, skip):
    """Batches in and out of time order (merged), windows and the newest-kept walk, ties."""
    order, created = CreatedOrder(), np.empty(0)
    for batch in batches:
        created = np.concatenate((created, np.array(batch, dtype=float)))
        lo, hi = float(min(a, b)), float(max(a, b))
        rows = np.arange(len(created))
        inside = rows[(created >= lo) & (created < hi)]
        assert order.window(created, lo, hi).tolist() == \
            inside[np.lexsort((inside, created[inside]))].tolist()
        keep = lambda idx: idx % 8 != skip  # noqa: E731
        kept = inside[keep(inside)]
        assert order.newest(created, lo, hi, n, keep).tolist() == \
            kept[np.lexsort((kept, -created[kept]))][:n].tolist()


# -- the store and the stages, through the public API --------------------------------------------

STORE_OPS = st.lists(st.one_of(
    st.tuples(st.just("add"), st.lists(st.tuples(st.integers(0, 3), st.integers(-40, 0)),
                                       min_size=1, max_size=8)),
    st.tuples(st.just("get"), st.integers(0, 200)),  # an explicit retrieval reinforces
    st.tuples(st.just("update"), st.integers(0, 200)),
    st.tuples(st.just("archive"), st.integers(0, 200)),
    st.tuples(st.just("anchor"), st.integers(0, 3)),
    st.tuples(st.just("advance"), st.sampled_from([0, 0, 1, 3600, 86400 * 3])),
    st.tuples(st.just("query"), st.integers(0, 4), st.integers(0, 3)),
    st.tuples(st.just("sort"),),  # re-sort the recency order now (else only when asked below)
), min_size=1, max_size=40)

WINDOW_PHRASES = ["in February 2024", "yesterday", "last week", "in January 2024",
                  "on 2024-02-09"]


def _table_and_run(mem, ws, query: str):
    analyze, _ = ws.bm25_for(None)
    run = QueryRun(ws, DEFAULT, query, analyze(query), 10, mem.clock.now(),
                   lock=mem.store.lock.shared())
    table = CandidateTable.empty()
    for stage in RETRIEVE:
        if stage.enabled(run, table):
            table = stage(run, table)
    return run, table


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(STORE_OPS, st.sampled_from([0, 2, 10**9]))
# a change after the sort to an item outside the first n: reinforced, updated, archived
@example([("add", [(0, -3), (1, -2), (2, -1), (3, -5)]), ("sort",), ("get", 3),
          ("query", 1, 0)], 10**9)
@example([("add", [(0, -3), (1, -2), (2, -1), (3, -5)]), ("sort",), ("advance", 1),
          ("update", 3), ("query", 2, 1)], 10**9)
@example([("add", [(0, -3), (1, -2), (2, -1), (3, -5)]), ("sort",), ("archive", 2),
          ("query", 1, 2), ("add", [(0, -1), (1, -1)]), ("get", 0), ("query", 3, 3)], 10**9)
def test_recent_and_window_stages_equal_the_o_n_path(ops, resort_min):
    """Random stores (items created at a few shared times, some back-dated, reinforced, updated,
    archived, anchors) read through ``Recent`` and ``Window`` as through the full scans; the
    recency order re-sorted on every read, after a few changes, or only by the ``sort`` op."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(time_index, "RESORT_MIN", resort_min)
        clock = ManualClock(START)
        mem = Memory(clock=clock, surfacing_mode="router")
        store, wid = mem.store, mem.workspace_id
        for op in ops:
            ws = store.workspace(wid) if store.has_workspace(wid) else None
            size = len(ws) if ws is not None else 0
            if op[0] == "add":
                mem.add_many([{"content": f"{WORDS[w]} note", "created_at":
                               clock.now() + timedelta(days=d)} for w, d in op[1]])
            elif op[0] == "get" and size:
                mem.get(ws.item_id_of(op[1] % size))
            elif op[0] == "update" and size:
                store.update_item(wid, op[1] % size, clock.now(), content=f"changed {op[1]}")
            elif op[0] == "archive" and size:
                store.archive(wid, [op[1] % size], clock.now(), "test")
            elif op[0] == "sort" and size:
                ws.recency_order._resort(ws.recency_reference_ts, ws.eligible_mask())
            elif op[0] == "anchor":
                mem.add_anchor("s1", f"goal {WORDS[op[1]]}")
            elif op[0] == "advance":
                clock.advance(minutes=op[1] / 60)
            elif op[0] == "query" and size:
                n = op[1]
                assert ws.most_recent(n).tolist() == recent_oracle(ws, n).tolist()
                query = f"{WORDS[op[2]]} {WINDOW_PHRASES[op[1] % len(WINDOW_PHRASES)]}"
                run, table = _table_and_run(mem, ws, query)
                got = Recent(n)(run, table)
                assert got.idx.tolist() == table.add(recent_oracle(ws, n), "recent",
                                                     allowed=ws.eligible_mask()).idx.tolist()
                got = Window(n)(run, table)
                if parse_time_window(query, run.now) is not None:
                    want = table.add(window_oracle(run, table, n), "window",
                                     allowed=ws.eligible_mask())
                    assert got.idx.tolist() == want.idx.tolist()
                    assert got.source.tolist() == want.source.tolist()


def test_a_restored_snapshot_reads_its_own_columns(tmp_path):
    """A compacted store reopened from its snapshot answers as the store it was."""
    from memlab import MemoryStore

    path = tmp_path / "m.db"
    store = MemoryStore(path=path)
    clock = ManualClock(START)
    mem = Memory(store=store, workspace_id="w", clock=clock)
    mem.add_many([{"content": f"note {i}", "created_at": START + timedelta(hours=i % 5)}
                  for i in range(40)])
    ws = store.workspace("w")
    before = ws.most_recent(7).tolist()
    clock.advance(hours=5)  # past every creation time
    mem.get(ws.item_id_of(3))
    after = ws.most_recent(7).tolist()
    assert after[0] == 3 and after[1:] == [r for r in before if r != 3][:6]
    store.compact()
    store.close()
    reopened = MemoryStore(path=path).workspace("w")
    assert reopened.most_recent(7).tolist() == after == recent_oracle(reopened, 7).tolist()
    assert reopened.created_between(START.timestamp(), START.timestamp() + 3600).tolist() == \
        list(range(0, 40, 5))


@given(st.lists(st.tuples(st.integers(0, 4), st.integers(0, 4)), max_size=40), st.integers(0, 12))
def test_top_by_score_then_time_is_the_head_of_the_full_sort(pairs, n):
    score = np.array([float(s) for s, _ in pairs])
    ts = np.array([float(t) for _, t in pairs])
    idx = np.arange(len(pairs), dtype=np.int64)[::-1].copy()
    expected = np.lexsort((idx, -ts, -score))[:n]
    assert top_by_score_then_time(idx, score, ts, n).tolist() == expected.tolist()
