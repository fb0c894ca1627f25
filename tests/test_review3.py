"""Regression tests for the round-3 outside review (merge of issues 14, 15, 17, 18, 19 work)."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from memlab import Memory
from memlab.signals.dense import DenseConfig, HashingEmbedder, register_embedder
from memlab.surfacing.config import DEFAULT
from memlab.surfacing.strategies import STRATEGIES

ROOT = Path(__file__).resolve().parents[1]


def test_a_clean_exit_keeps_buffered_reinforcements(tmp_path):
    """Reinforcements buffered by group commit are written when the process exits normally."""
    db = tmp_path / "m.db"
    code = ("from memlab import Memory; m = Memory(path=r'%s'); m.add('alpha beta', item_id='a');"
            "[m.search('alpha') for _ in range(10)]" % db)
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT)
    history = Memory(path=db).get("a", reinforce=False)["history"]
    assert [e["kind"] for e in history].count("reinforced") == 10


def test_memory_closes_as_a_context_manager(tmp_path):
    with Memory(path=tmp_path / "m.db") as mem:
        mem.add("alpha beta", item_id="a")
        for _ in range(3):
            mem.search("alpha")
    assert mem.store._closing
    history = Memory(path=tmp_path / "m.db").get("a", reinforce=False)["history"]
    assert [e["kind"] for e in history].count("reinforced") == 3


def test_an_unknown_embedder_is_refused_when_the_config_is_built(monkeypatch):
    with pytest.raises(ValueError, match=r"embedder must be one of .*got 'nosuch'"):
        DenseConfig(embedder="nosuch")
    with pytest.raises(ValueError, match=r"embedder must be one of"):
        DEFAULT.replace(dense=DenseConfig(embedder=""))
    monkeypatch.setenv("MEMLAB_EMBEDDER", "nosuch")
    with pytest.raises(ValueError, match=r"\(from \$MEMLAB_EMBEDDER\), got 'nosuch'"):
        DenseConfig()
    register_embedder("hashing-review3", lambda: HashingEmbedder(8))
    assert DenseConfig(embedder="hashing-review3").embedder == "hashing-review3"


def test_deprecated_strategy_names_answer_in_and_get():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        assert "relevance" in STRATEGIES and "recency" in STRATEGIES
        assert "nope" not in STRATEGIES and STRATEGIES.get("nope", 0) == 0
    with pytest.warns(DeprecationWarning, match="'relevance' is now called 'plain'"):
        assert STRATEGIES.get("relevance") is STRATEGIES["plain"]


def test_bridge_links_cannot_exceed_the_hits_they_are_counted_among():
    with pytest.raises(ValueError, match="graph_bridge_links must be at most graph_bridge_hits "
                                         r"\(3\), got 5"):
        DEFAULT.replace(graph_bridge_links=5)
    assert DEFAULT.replace(graph_bridge_hits=5, graph_bridge_links=5).graph_bridge_links == 5


@pytest.mark.slow  # waits for the connection timeout (~30 s)
def test_eval_names_an_unreachable_dask_scheduler_in_one_line(capsys):
    pytest.importorskip("distributed")
    from tests._support import cli
    code, err = cli(capsys, "eval", "--datasets", "locomo", "--executor", "dask", "--address",
                    "tcp://127.0.0.1:1")
    assert code == 2 and len(err) == 1
    assert "--address 'tcp://127.0.0.1:1': cannot reach the Dask scheduler" in err[0]
