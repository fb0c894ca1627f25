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

__all__ = ["RankerFeatures", "ranker_features", "RANKER_FEATURE_COLUMNS", "TAIL_DAYS",
           "query_entities"]

RANKER_FEATURE_COLUMNS = ("rf_links_top1", "rf_links_top3", "rf_links_top5", "rf_dense_top3",
                          "rf_trigram", "rf_window", "rf_window_days", "rf_speaker",
                          "rf_entities")
TAIL_DAYS = 7.0
_DAY = 86400.0
_WORD = re.compile(r"[A-Za-z][A-Za-z'\u2019\-]+")


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
        cols = {name: np.zeros(n) for name in RANKER_FEATURE_COLUMNS}
        if n == 0:
            return table._with(cols)
        ws, config, idx = run.ws, run.config, table.idx
        optional = np.flatnonzero(~table.mandatory & ~table.filtered)
        order = order_candidates(table.item_id, table.relevance, table.score, table.mandatory,
                                 table.filtered)
        order = order[np.isin(order, optional)]
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
        return table._with(cols)


def ranker_features() -> RankerFeatures:
    """The ranker-feature stage.

    Examples
    --------
    >>> ranker_features()
    ranker_features()
    """
    return RankerFeatures()
