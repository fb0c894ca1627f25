"""Datasets: loaders for public data (LoCoMo, HippoRAG, LongMemEval), graph builders, the
repository's small fixtures, and seeded synthetic generators."""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path
from typing import Any

from memlab.datasets.loaders import load_hipporag, load_locomo, load_longmemeval
from memlab.datasets.synthetic import synthetic_items, synthetic_trace

__all__ = ["FIXTURES_DIR", "FIXTURE_TRACES", "FIXTURE_COMPANIONS", "load_fixture",
           "load_fixture_trace", "build_memory", "fixture_trace", "synthetic_items",
           "synthetic_trace", "load_locomo", "load_hipporag", "load_longmemeval",
           "shared_data_dir"]

FIXTURES_DIR = Path(__file__).resolve().parents[2] / "datasets"


def shared_data_dir() -> Path:
    """Where the shared public datasets are: ``$MEMLAB_SHARED_DATA`` when set, else
    ``../shared/datasets`` beside the repository (it may not exist: a user's machine has only
    the project).

    Examples
    --------
    >>> shared_data_dir().name
    'datasets'
    """
    override = os.environ.get("MEMLAB_SHARED_DATA")
    if override:
        return Path(override).expanduser()
    return FIXTURES_DIR.parents[1] / "shared" / "datasets"


def load_fixture(name: str) -> dict[str, Any]:
    """Parse ``datasets/<name>.json`` from the repository (see its data card in datasets/README.md).

    Examples
    --------
    >>> fixture = load_fixture("apollo_demo")
    >>> len(fixture["items"]), len(fixture["queries"])
    (28, 7)
    """
    if not isinstance(name, str) or not name or "/" in name or "\\" in name:
        raise ValueError(f"name must be a fixture name such as 'apollo_demo', got {name!r}")
    path = FIXTURES_DIR / f"{name}.json"
    if not path.is_file():
        available = sorted(p.stem for p in FIXTURES_DIR.glob("*.json")) if FIXTURES_DIR.is_dir() else []
        raise ValueError(f"name {name!r} is not a fixture in {FIXTURES_DIR}; available: {available}")
    return json.loads(path.read_text(encoding="utf-8"))


def build_memory(fixture: dict[str, Any], **memory_kwargs: Any):
    """A :class:`~memlab.Memory` holding a fixture's items, edges and anchors.

    Keyword arguments go to ``Memory``; when no ``clock`` is given, a ``ManualClock`` at the
    fixture's ``now`` is used.

    Examples
    --------
    >>> mem = build_memory(load_fixture("apollo_demo"), surfacing_mode="router")
    >>> len(mem), len(mem.get_edges())
    (29, 15)
    """
    from memlab import ManualClock, Memory

    memory_kwargs.setdefault("clock", ManualClock(datetime.fromisoformat(fixture["now"])))
    mem = Memory(**memory_kwargs)
    mem.add_many([{**item, "created_at": datetime.fromisoformat(item["created_at"])}
                  for item in fixture["items"]])
    mem.add_edges(fixture.get("edges", []))
    for anchor in fixture.get("anchors", []):
        mem.add_anchor(anchor["session_id"], anchor["content"], anchor.get("anchor_type", "goal"))
    return mem


def fixture_trace(fixture: dict[str, Any]):
    """A fixture as a replayable :class:`~memlab.harness.Trace`: its items (at their
    ``created_at``), edges and anchors, then its queries with their gold at the fixture's ``now``.

    Examples
    --------
    >>> trace = fixture_trace(load_fixture("apollo_demo"))
    >>> len(trace.queries), trace.queries[0].get("gold")
    (7, ['turn-06', 'fact-jwt'])
    """
    from memlab.harness.trace import TraceBuilder

    if not isinstance(fixture, dict) or not isinstance(fixture.get("items"), list) or \
            "queries" not in fixture or "now" not in fixture:
        raise ValueError(
            "fixture must be a memlab-format fixture (a dict with 'items', 'queries' and "
            "'now', such as load_fixture('apollo_demo')), got "
            f"{type(fixture).__name__}; fixtures in a published format have their own loader: "
            "load_fixture_trace(name) (e.g. load_fixture_trace('locomo_sample')), or "
            "memlab.datasets.loaders.load_locomo / load_hipporag / load_longmemeval")
    first = min(item["created_at"] for item in fixture["items"])
    builder = TraceBuilder(fixture.get("name", "fixture"), start=first,
                           metadata={"description": fixture.get("description", "")})
    builder.add_many({"content": item["content"], "item_id": item["item_id"],
                      "memory_type": item.get("memory_type"), "metadata": item.get("metadata"),
                      "created_at": item["created_at"]} for item in fixture["items"])
    for edge in fixture.get("edges", []):
        builder.edge(edge["src"], edge["dst"], edge.get("edge_type"), edge.get("weight"))
    for anchor in fixture.get("anchors", []):
        builder.anchor(anchor["session_id"], anchor["content"], anchor.get("anchor_type"),
                       ts=fixture["now"])
    for q in fixture["queries"]:
        builder.query(q["qid"], q["query"], session_id=q.get("session_id"), gold=q.get("gold"),
                      ts=fixture["now"])
    return builder.build()


# Each repository fixture that is a trace, read by its own loader (the files are in different
# formats: memlab's fixture format, LoCoMo's, HippoRAG's and LongMemEval's published ones).
FIXTURE_TRACES = {
    "apollo_demo": lambda: fixture_trace(load_fixture("apollo_demo")),
    "locomo_sample": lambda: load_locomo(FIXTURES_DIR / "locomo_sample.json"),
    "hipporag_sample": lambda: load_hipporag(FIXTURES_DIR / "hipporag_sample.json",
                                             FIXTURES_DIR / "hipporag_sample_corpus.json"),
    "longmemeval_sample": lambda: load_longmemeval(FIXTURES_DIR / "longmemeval_sample.json"),
}
#: fixture files that are part of another fixture's trace, not a trace of their own
FIXTURE_COMPANIONS = {"hipporag_sample_corpus": "hipporag_sample"}


def load_fixture_trace(name: str):
    """The repository fixture ``name`` as a replayable trace, read by its own loader
    (see :data:`FIXTURE_TRACES`; ``memlab replay fixture:<name>`` uses this).

    Examples
    --------
    >>> len(load_fixture_trace("hipporag_sample").queries)
    2
    >>> load_fixture_trace("hipporag_sample_corpus")
    Traceback (most recent call last):
    ...
    ValueError: name 'hipporag_sample_corpus' is not a trace fixture (it is part of 'hipporag_sample'); available: apollo_demo, hipporag_sample, locomo_sample, longmemeval_sample
    """
    available = ", ".join(sorted(FIXTURE_TRACES))
    loader = FIXTURE_TRACES.get(name) if isinstance(name, str) else None
    if loader is None:
        part = f" (it is part of {FIXTURE_COMPANIONS[name]!r})" \
            if isinstance(name, str) and name in FIXTURE_COMPANIONS else ""
        raise ValueError(f"name {name!r} is not a trace fixture{part}; available: {available}")
    return loader()
