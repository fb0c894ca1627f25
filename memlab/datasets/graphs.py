"""Graph builders that derive edges from text and structure, without an LLM (SPEC §8).

A builder takes the loader's records (``{"item_id", "content", "metadata"}``, in corpus order)
and returns edges ``(src, dst, edge_type, weight)``. Loaders pick builders by name from
:data:`GRAPH_BUILDERS` (or take callables); :func:`register_graph_builder` adds one.

Costs (measured on this project's machine, see each docstring) are for the builder alone.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Callable, Iterable, Sequence

from memlab._registry import register
from memlab.text import STOPWORDS, strip_parenthetical, words as _words

__all__ = ["GRAPH_BUILDERS", "register_graph_builder", "build_edges", "turn_adjacency",
           "session_adjacency", "title_mentions", "shared_entities", "strip_parenthetical"]

Edge = tuple[str, str, str, float]
_CAPITALISED = re.compile(r"\b[A-Z][a-zA-Z0-9'’-]+(?:\s+(?:of|the|de|von|van|and)?\s*[A-Z][a-zA-Z0-9'’-]+)*")


def _both_ways(a: str, b: str, kind: str, weight: float = 1.0) -> list[Edge]:
    return [(a, b, kind, weight), (b, a, kind, weight)]


def turn_adjacency(records: Sequence[dict]) -> list[Edge]:
    """Consecutive turns of one session, linked both ways (``RELATED``).

    Records carry ``metadata["session"]``; order is corpus order. O(turns): ~5 ms for LoCoMo's
    2,900 turns.
    """
    edges: list[Edge] = []
    for prev, cur in zip(records, records[1:]):
        if prev["metadata"].get("session") == cur["metadata"].get("session") is not None:
            edges += _both_ways(prev["item_id"], cur["item_id"], "RELATED")
    return edges


def session_adjacency(records: Sequence[dict]) -> list[Edge]:
    """The last turn of each session linked both ways to the first turn of the next
    (``RELATED``, weight 0.5). O(turns)."""
    edges: list[Edge] = []
    for prev, cur in zip(records, records[1:]):
        s1, s2 = prev["metadata"].get("session"), cur["metadata"].get("session")
        if s1 is not None and s2 is not None and s1 != s2:
            edges += _both_ways(prev["item_id"], cur["item_id"], "RELATED", 0.5)
    return edges


def title_mentions(records: Sequence[dict], max_title_words: int = 8) -> list[Edge]:
    """A passage whose text names another passage's title links to it (``MENTIONS``; the reverse
    ``MENTIONED_IN``). Titles are matched as whole word sequences (:func:`memlab.text.words`
    without case folding: NFKC, letters, digits and marks of any script), case-sensitively, with
    any parenthetical suffix dropped; titles that are a single stopword or shorter than 3
    characters are ignored.

    Every passage's words are scanned once for n-grams of up to ``max_title_words`` words
    looked up in a dict of titles: O(words × max_title_words). ~0.3 s for MuSiQue's 1,890
    passages, ~1.5 s for 2WikiMultihopQA's 6,119.
    """
    by_title: dict[tuple[str, ...], list[str]] = defaultdict(list)
    for r in records:
        title = r["metadata"].get("title")
        if not isinstance(title, str):
            continue
        words = tuple(_words(strip_parenthetical(title), fold_case=False))
        if not words or len(words) > max_title_words:
            continue
        if len(words) == 1 and (len(words[0]) < 3 or words[0].lower() in STOPWORDS):
            continue
        by_title[words].append(r["item_id"])
    edges: list[Edge] = []
    seen: set[tuple[str, str]] = set()
    for r in records:
        words = _words(r["content"], fold_case=False)
        own = r["item_id"]
        for i in range(len(words)):
            for n in range(1, min(max_title_words, len(words) - i) + 1):
                targets = by_title.get(tuple(words[i:i + n]))
                if not targets:
                    continue
                for target in targets:
                    if target != own and (own, target) not in seen:
                        seen.add((own, target))
                        edges.append((own, target, "MENTIONS", 1.0))
                        edges.append((target, own, "MENTIONED_IN", 1.0))
    return edges


def shared_entities(records: Sequence[dict], max_items_per_entity: int = 20) -> list[Edge]:
    """Items naming the same capitalised entity (a run of capitalised words, sentence-initial
    stopwords dropped) link both ways (``RELATED``), weighted by the entity's rarity
    ``1 / log2(1 + items naming it)``. Entities named by more than ``max_items_per_entity``
    items are skipped (they connect everything and mean little), which bounds the edges at
    O(entities × max²); ~0.2 s for MuSiQue's corpus.
    """
    items_of: dict[str, list[str]] = defaultdict(list)
    for r in records:
        names = set()
        for match in _CAPITALISED.finditer(r["content"]):
            name = match.group(0).strip()
            if name.lower() in STOPWORDS or len(name) < 3:
                continue
            names.add(name)
        for name in sorted(names):
            items_of[name].append(r["item_id"])
    pair_weight: dict[tuple[str, str], float] = {}
    for name in sorted(items_of):
        ids = items_of[name]
        if len(ids) < 2 or len(ids) > max_items_per_entity:
            continue
        weight = 1.0 / math.log2(1 + len(ids))
        for i, a in enumerate(ids):
            for b in ids[i + 1:]:
                key = (a, b) if a < b else (b, a)
                pair_weight[key] = pair_weight.get(key, 0.0) + weight
    edges: list[Edge] = []
    for (a, b), w in sorted(pair_weight.items()):
        edges += _both_ways(a, b, "RELATED", round(w, 6))
    return edges


GRAPH_BUILDERS: dict[str, Callable[[Sequence[dict]], list[Edge]]] = {
    "turn_adjacency": turn_adjacency, "session_adjacency": session_adjacency,
    "title_mentions": title_mentions, "shared_entities": shared_entities,
}


def register_graph_builder(name: str, fn: Callable[[Sequence[dict]], list[Edge]], *,
                           replace: bool = False) -> None:
    """Make ``fn`` selectable by ``name`` in the loaders' ``graph=`` argument; a name already
    registered is refused (ValueError) unless ``replace=True``."""
    register(GRAPH_BUILDERS, name, fn, what="graph builder", replace=replace)


def build_edges(records: Sequence[dict], graph: Iterable[str | Callable] | None) -> list[Edge]:
    """Run the builders named (or given) in ``graph``; repeated edges keep their largest weight."""
    if graph is None:
        return []
    if isinstance(graph, str) or callable(graph):
        graph = [graph]
    best: dict[tuple[str, str, str], float] = {}
    for builder in graph:
        if isinstance(builder, str):
            if builder not in GRAPH_BUILDERS:
                raise ValueError(f"graph must name builders among {sorted(GRAPH_BUILDERS)}, "
                                 f"got {builder!r}")
            builder = GRAPH_BUILDERS[builder]
        elif not callable(builder):
            raise ValueError(f"graph entries must be builder names or callables, got {builder!r}")
        for src, dst, kind, weight in builder(records):
            key = (src, dst, kind)
            best[key] = max(weight, best.get(key, 0.0))
    return [(s, d, k, w) for (s, d, k), w in best.items()]
