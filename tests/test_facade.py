"""Memory is a thin facade: search runs the relevance stage, bulk edges are checked by the store."""

import numpy as np
import pandas as pd
import pytest

from memlab import Memory
from memlab.errors import UnknownItemError
from memlab.surfacing.stages import BM25, CandidateTable, QueryRun
from memlab.surfacing.stages.retrieval import bm25_hits


def test_search_is_the_bm25_stage():
    mem = Memory()
    for i in range(12):
        mem.add(f"alpha {'beta ' * (i % 4)} gamma {i}", item_id=f"i{i}")
    hits = mem.search("alpha beta", top_k=5, reinforce=False)
    ws = mem.store.workspace("default")
    table = BM25(5, ws.analyzer)(QueryRun(ws, mem.config, "alpha beta", [], 5, None),
                                 CandidateTable.empty())
    assert [h["item_id"] for h in hits] == ws.ids_of(table.idx)
    docs, scores = bm25_hits(ws, mem.config, "alpha beta", 5)
    assert [h["score"] for h in hits] == scores.tolist()
    assert [h["item_id"] for h in hits] == ["i3", "i7", "i11", "i2", "i6"]


def test_bulk_edges_report_the_first_bad_row_as_prepare_edge_says_it():
    mem = Memory()
    mem.add_many([{"content": c, "item_id": c} for c in "abc"])
    with pytest.raises(UnknownItemError, match=r"^edges row 1: dst 'zz' does not exist"):
        mem.add_edges(pd.DataFrame({"src": ["a", "b"], "dst": ["b", "zz"]}))
    with pytest.raises(ValueError, match=r"^edges row 0: edge_type"):
        mem.add_edges(pd.DataFrame({"src": ["a"], "dst": ["b"], "edge_type": ["no spaces"]}))
    with pytest.raises(ValueError, match=r"^edges row 2: weight must be finite and > 0, got 0.0"):
        mem.add_edges(pd.DataFrame({"src": ["a", "b", "c"], "dst": ["b", "c", "a"],
                                    "weight": [1.0, 2.0, 0.0]}))
    assert mem.get_edges() == []
    assert mem.add_edges(pd.DataFrame({"src": ["a", "b"], "dst": ["b", "c"],
                                       "weight": np.array([0.5, 2.0], dtype=object)})) == 2
    assert sorted(e["weight"] for e in mem.get_edges()) == [0.5, 2.0]
