"""Candidate facts for a learned ranker that no other stage records (issue 17, dense targets).

The learned ranker (:mod:`memlab.surfacing.rerank`) reads the columns a record keeps. Four
kinds of evidence the miss analysis of issue 17 points at are not among them, so this stage
computes them once per query, as record columns named ``rf_*``, and the feature builder
(:func:`memlab.surfacing.rerank.candidate_features`) reads them the same way from a live
table (the ``rerank`` stage) and from a replay's recorded frame (training, cross-validation):

* **links to the top hits** (the multi-hop second hop): the top hits are the ``1``, ``3`` and
  ``5`` best optional candidates by the score at this point (the composite, after the graph
  re-ranker when that runs), ordered as the budget orders them. ``rf_links_top1/3/5``: how
  many of them the candidate shares an edge with (undirected, the recipe's
  ``graph_link_types``, else the spreading's types; a hit is not linked to itself);
  ``rf_dense_top3``: the best cosine between the candidate's embedding and those of the top 3
  (itself excluded; 0 without a dense recipe);
* **the spelling field**: ``rf_trigram``, the candidate's BM25 score on the recipe's
  ``spelling_analyzer`` field (character trigrams), whether or not that field retrieves;
* **the query's time window** (parsed from the query whatever the strategy, without the
  recipe's tail): ``rf_window`` 0 no window, 1 inside, 2 within 7 days after its end, 3
  elsewhere; ``rf_window_days``: days between the item's creation and the window (0 inside);
* **who and what the query names**: ``rf_speaker`` 1 when the item's ``speaker`` metadata is a
  word of the query; ``rf_entities``: how many of the query's capitalised words (not its
  first) are words of the item's content.

**Second-hop evidence** (the recipe's ``second_hop_features``; MuSiQue's misses are second
hops: the bridge passage is about an entity the first-hop passage names), ``rf_hop_*``; an
item's title is its ``title``/``label``/``name`` metadata without a parenthetical suffix, its
body its content without a leading line equal to its title; matching is on lower-cased words:

* ``rf_hop_title_top1`` / ``rf_hop_title_top3``: the candidate's title is in the body of the
  top hit / of how many of the top 3 (itself excluded); ``rf_hop_top_title3``: how many of the
  top 3's titles are in the candidate's body (itself excluded);
* ``rf_hop_prf_title`` / ``rf_hop_prf_content``: the candidate's BM25 (the workspace's
  analyzer, the recipe's k1 and b) for the query followed by the top hit's title / body, a
  second retrieval pass conditioned on the first hop; ``rf_hop_dense_top1``: cosine to the top
  hit (itself 0) and ``rf_hop_prf_dense``: cosine to the normalised sum of the query's and the
  top hit's vectors (both 0 without a dense recipe);
* ``rf_hop_homonym``: 1 when the candidate is not the top hit but has its title ("X
  (footballer)" against "X"); ``rf_hop_rank_nodup``: its 1-based rank by the score at this
  point among the candidates that are not such homonyms (a homonym keeps its full rank).

The three groups (*title*, *prf*, *homonym*: :data:`HOP_GROUPS`) can be recorded alone:
``second_hop_features="prf"`` or ``"title+homonym"`` (a list of names too) computes and records
only those groups' columns, with the values they have when every group is recorded
(``True``), so a ranker trained on such a replay reads only those groups and a nested choice
can choose among them (``memlab tune --grid second_hop_features=false,title,prf,homonym,true``).

Router mode runs it right before the budget (after the graph re-ranker, before ``rerank``)
when the recipe's ``ranker_features`` is on; it changes no score and no order, and is off in
legacy mode. Counterfactual re-scoring reads the recorded columns and does not re-run it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from memlab.surfacing.composite import order_candidates
from memlab.surfacing.stages.base import CandidateTable, QueryRun, Stage, register_stage
from memlab.surfacing.stages.graph_rerank import linked_counts
from memlab.surfacing.timewindow import parse_time_window
from memlab.text import TITLE_KEYS, strip_parenthetical

__all__ = ["RankerFeatures", "ranker_features", "RANKER_FEATURE_COLUMNS", "HOP_FEATURE_COLUMNS",
           "HOP_GROUPS", "hop_groups", "TAIL_DAYS", "query_entities", "item_title"]

RANKER_FEATURE_COLUMNS = ("rf_links_top1", "rf_links_top3", "rf_links_top5", "rf_dense_top3",
                          "rf_trigram", "rf_window", "rf_window_days", "rf_speaker",
                          "rf_entities")
HOP_FEATURE_COLUMNS = ("rf_hop_title_top1", "rf_hop_title_top3", "rf_hop_top_title3",
                       "rf_hop_prf_title", "rf_hop_prf_content", "rf_hop_dense_top1",
                       "rf_hop_prf_dense", "rf_hop_homonym", "rf_hop_rank_nodup")
# the second-hop columns by group, in HOP_FEATURE_COLUMNS order: a recipe's
# ``second_hop_features`` may name groups to record only those (``"prf"``, ``"title+prf"``)
HOP_GROUPS: dict[str, tuple[str, ...]] = {
    "title": ("rf_hop_title_top1", "rf_hop_title_top3", "rf_hop_top_title3"),
    "prf": ("rf_hop_prf_title", "rf_hop_prf_content", "rf_hop_dense_top1", "rf_hop_prf_dense"),
    "homonym": ("rf_hop_homonym", "rf_hop_rank_nodup"),
}
TAIL_DAYS = 7.0
_DAY = 86400.0
_WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019\-]+")


def hop_groups(value) -> tuple[str, ...]:
    """The second-hop groups a recipe's ``second_hop_features`` records, in :data:`HOP_GROUPS`
    order: none for False, every group for True, else the groups it names (a group name, names
    joined by ``+``, or a sequence of names).

    Raises
    ------
    ValueError
        ``second_hop_features`` is none of these (an unknown or repeated group, an empty list).

    Examples
    --------
    >>> hop_groups(False), hop_groups("prf"), hop_groups("homonym+title")
    ((), ('prf',), ('title', 'homonym'))
    >>> hop_groups(True)
    ('title', 'prf', 'homonym')
    """
    if isinstance(value, bool):
        return tuple(HOP_GROUPS) if value else ()
    names = value.split("+") if isinstance(value, str) else value
    if not isinstance(names, (list, tuple)) or not names or \
            not all(isinstance(n, str) for n in names):
        names = None
    else:
        names = [n.strip().lower() for n in names]
    if names is None or any(n not in HOP_GROUPS for n in names) or len(set(names)) != len(names):
        raise ValueError(f"second_hop_features must be True, False, a group of "
                         f"{list(HOP_GROUPS)}, groups joined by '+' or a non-empty list of "
                         f"distinct groups, got {value!r}")
    return tuple(g for g in HOP_GROUPS if g in names)


def _word_list(text: str) -> list[str]:
    """The words of ``text`` as written, a possessive ending dropped ("Melanie's", "Jon\u2019s",
    "James'" name Melanie, Jon and James)."""
    words = []
    for w in _WORD.findall(str(text)):
        w = w.replace("\u2019", "'")
        if w.lower().endswith("'s"):
            w = w[:-2]
        w = w.rstrip("'")
        if len(w) > 1:
            words.append(w)
    return words


def query_entities(query: str) -> list[str]:
    """The query's capitalised words after its first, lower-cased, once each, in order.

    Examples
    --------
    >>> query_entities("When did Caroline go to the LGBTQ support group with Caroline?")
    ['caroline', 'lgbtq']
    >>> query_entities("What is Melanie's pup called?")
    ['melanie']
    """
    words = _word_list(query)
    out: list[str] = []
    for w in words[1:]:
        low = w.lower()
        if w[0].isupper() and low not in out:
            out.append(low)
    return out


_TOKEN = re.compile(r"\w+")


def item_title(item) -> str | None:
    """``item``'s title: its ``title``, ``label`` or ``name`` metadata (the first a non-empty
    string), else None.

    Examples
    --------
    >>> from types import SimpleNamespace
    >>> item_title(SimpleNamespace(metadata={"label": "", "title": "Paris (France)"}))
    'Paris (France)'
    """
    meta = item.metadata
    if meta.__class__ is not dict:
        return None
    for key in TITLE_KEYS:
        value = meta.get(key)
        if isinstance(value, str) and value.strip():
            return value
    return None


def _padded(text: str) -> str:
    """Lower-cased words joined by single spaces, with a space either side (for whole-word
    substring tests)."""
    return " " + " ".join(_TOKEN.findall(text.lower())) + " "


def _body(content: str, title: str | None) -> str:
    if title is not None:
        head, sep, rest = content.partition("\n")
        if sep and head.strip() == title.strip():
            return rest
    return content


def _hop_names(groups: tuple[str, ...]) -> tuple[str, ...]:
    """The ``rf_hop_*`` columns ``groups`` record, in :data:`HOP_FEATURE_COLUMNS` order."""
    names = {name for g in groups for name in HOP_GROUPS[g]}
    return tuple(name for name in HOP_FEATURE_COLUMNS if name in names)


def _hop_columns(run: QueryRun, table: CandidateTable, order: np.ndarray,
                 groups: tuple[str, ...] = tuple(HOP_GROUPS)) -> dict:
    """The ``rf_hop_*`` columns of ``groups`` (module notes) for ``table``, ``order`` the
    optional candidates' rows, best first."""
    n = len(table)
    ws, config, idx = run.ws, run.config, table.idx
    cols = {name: np.zeros(n) for name in _hop_names(groups)}
    if "homonym" in groups:
        cols["rf_hop_rank_nodup"] = np.full(n, float(n + 1))
    if not len(order):
        return cols
    first = order[0]
    keys: list[str] = []  # each candidate's padded title ("" without one)
    bodies: list[str] = []
    if "title" in groups or "homonym" in groups:
        for i in idx.tolist():
            item = ws.item(i)
            title = item_title(item)
            key = _padded(strip_parenthetical(title)) if title is not None else ""
            keys.append(key if key.strip() else "")
            if "title" in groups:
                bodies.append(_padded(_body(item.content or "", title)))
    if "title" in groups:
        top = order[:3].tolist()
        title_top1, title_top3, top_title3 = (np.zeros(n) for _ in range(3))
        for row in range(n):
            key = keys[row]
            for hit in top:
                if hit == row:
                    continue
                if key and key in bodies[hit]:
                    title_top3[row] += 1.0
                    if hit == first:
                        title_top1[row] = 1.0
                if keys[hit] and keys[hit] in bodies[row]:
                    top_title3[row] += 1.0
        cols["rf_hop_title_top1"], cols["rf_hop_title_top3"] = title_top1, title_top3
        cols["rf_hop_top_title3"] = top_title3
    if "prf" in groups:
        # a second BM25 pass: the query followed by the top hit's title / body
        analyze, index = ws.bm25_for(None)
        first_item = ws.item(int(idx[first]))
        first_title = item_title(first_item) or ""
        for name, extra in (("rf_hop_prf_title", first_title),
                            ("rf_hop_prf_content", _body(first_item.content or "", first_title
                                                         or None))):
            docs, scores = index.scores(analyze(f"{run.query} {extra}"), k1=config.bm25_k1,
                                        b=config.bm25_b)
            if len(docs):
                pos = np.minimum(np.searchsorted(docs, idx), len(docs) - 1)
                cols[name] = np.where(docs[pos] == idx, scores[pos], 0.0).astype(float)
        if config.dense is not None:
            from memlab.signals.dense import DenseIndex, embed_query, get_embedder
            embedder = get_embedder(config.dense)
            dindex = ws.dense_index(embedder.name, DenseIndex)
            dindex.ensure(ws, embedder, sentences=config.dense.sentence_weight > 0)
            vectors = dindex.items.view()
            cand = vectors[idx]
            to_first = cand @ vectors[idx[first]]
            cols["rf_hop_dense_top1"] = np.where(np.arange(n) == first, 0.0,
                                                 to_first).astype(float)
            mixed = embed_query(run.query, config.dense) + vectors[idx[first]]
            norm = float(np.linalg.norm(mixed))
            if norm > 0:
                cols["rf_hop_prf_dense"] = (cand @ (mixed / norm)).astype(float)
    if "homonym" in groups:
        # homonyms of the top hit, and the rank without them
        homonym = np.array([row != first and bool(keys[first]) and keys[row] == keys[first]
                            for row in range(n)])
        cols["rf_hop_homonym"] = homonym.astype(float)
        rank = cols["rf_hop_rank_nodup"]
        kept = 0
        for full, row in enumerate(order.tolist(), start=1):
            if homonym[row]:
                rank[row] = float(full)
            else:
                kept += 1
                rank[row] = float(kept)
    return cols


def _words(text: str) -> set[str]:
    return {w.lower() for w in _word_list(text)}


@register_stage
@dataclass(frozen=True, repr=False)
class RankerFeatures(Stage):
    """The ``rf_*`` columns (see the module notes) for every candidate; nothing else changes.
    Router mode adds it before the budget when the recipe's ``ranker_features`` is on."""

    name: ClassVar[str] = "ranker_features"
    phase: ClassVar[str] = "score"

    def enabled(self, run: QueryRun, table: CandidateTable) -> bool:
        return not run.legacy

    def __call__(self, run: QueryRun, table: CandidateTable) -> CandidateTable:
        n = len(table)
        base, hop = run.config.ranker_features, hop_groups(run.config.second_hop_features)
        names = (RANKER_FEATURE_COLUMNS if base else ()) + _hop_names(hop)
        if n == 0 or not names:
            return table._with({name: np.zeros(n) for name in names})
        optional = np.flatnonzero(~table.mandatory & ~table.filtered)
        order = order_candidates(table.item_id, table.relevance, table.score, table.mandatory,
                                 table.filtered)
        order = order[np.isin(order, optional)]
        cols = self._base(run, table, order) if base else {}
        if hop:
            cols.update(_hop_columns(run, table, order, hop))
        return table._with(cols)

    @staticmethod
    def _base(run: QueryRun, table: CandidateTable, order: np.ndarray) -> dict:
        n = len(table)
        cols = {name: np.zeros(n) for name in RANKER_FEATURE_COLUMNS}
        ws, config, idx = run.ws, run.config, table.idx
        # links to the top hits
        for hits in (1, 3, 5):
            top = idx[order[:hits]]
            cols[f"rf_links_top{hits}"] = linked_counts(
                ws, top, idx, config.spreading, config.graph_link_types).astype(float)
        # dense similarity to the top 3
        if config.dense is not None and len(order):
            from memlab.signals.dense import DenseIndex, get_embedder
            embedder = get_embedder(config.dense)
            index = ws.dense_index(embedder.name, DenseIndex)
            index.ensure(ws, embedder, sentences=config.dense.sentence_weight > 0)
            vectors = index.items.view()
            top = idx[order[:3]]
            sims = vectors[idx] @ vectors[top].T  # (n, <=3) cosines (unit vectors)
            sims = np.where(idx[:, None] == top[None, :], -np.inf, sims)
            best = sims.max(axis=1)
            cols["rf_dense_top3"] = np.where(np.isfinite(best), best, 0.0).astype(float)
        # the spelling field's BM25
        analyze, field_index = ws.bm25_for(config.spelling_analyzer)
        docs, scores = field_index.scores(analyze(run.query), k1=config.bm25_k1,
                                          b=config.bm25_b)
        if len(docs):
            pos = np.searchsorted(docs, idx)
            pos = np.minimum(pos, len(docs) - 1)
            hit = docs[pos] == idx
            cols["rf_trigram"] = np.where(hit, scores[pos], 0.0).astype(float)
        # the query's time window
        window = parse_time_window(run.query, run.now)
        if window is not None:
            created = ws.created_column()[idx].astype(float)
            start, end = window.start.timestamp(), window.end.timestamp()
            inside = (created >= start) & (created < end)
            after = np.maximum(created - end, 0.0) / _DAY
            before = np.maximum(start - created, 0.0) / _DAY
            days = np.where(inside, 0.0, np.maximum(after, before))
            tail = ~inside & (created >= end) & (after <= TAIL_DAYS)
            cols["rf_window"] = np.where(inside, 1.0, np.where(tail, 2.0, 3.0))
            cols["rf_window_days"] = days
        # speaker and entities the query names
        query_words = _words(run.query)
        entities = query_entities(run.query)
        speaker = np.zeros(n)
        overlap = np.zeros(n)
        named: dict[str, bool] = {}  # speaker -> named by the query (a few per workspace)
        for row, i in enumerate(idx.tolist()):
            item = ws.item(i)
            meta = item.metadata
            who = meta.get("speaker") if meta.__class__ is dict else None
            if isinstance(who, str) and who:
                hit = named.get(who)
                if hit is None:
                    hit = named[who] = _words(who) <= query_words
                speaker[row] = float(hit)
            if entities:
                text = (item.content or "").lower()
                if any(e in text for e in entities):  # a substring first: most items lack all
                    content = _words(text)
                    overlap[row] = sum(e in content for e in entities)
        cols["rf_speaker"], cols["rf_entities"] = speaker, overlap
        return cols


def ranker_features() -> RankerFeatures:
    """The ranker-feature stage.

    Examples
    --------
    >>> ranker_features()
    ranker_features()
    """
    return RankerFeatures()
