"""Title-match precision: a homonym counts only when the rest of the query supports it.

The workspace gazetteer knows ``"Scott Howell (footballer)"`` both by its full title and by
``"scott howell"``, so every question that names a Scott Howell names the footballer, and on
multi-hop data such homonym matches took top-5 slots from the second hop (issue 17). With
``SurfacingConfig.title_homonym_support = n`` (``n >= 1``; 0, the default, keeps every match), an
item whose title has a parenthetical qualifier and that the query names only without it counts
as named when

* the qualifier is in the query ("David Jones is an international in **rugby** union" names
  ``"David Jones (rugby)"``), or
* at least ``n`` of the query's other terms (its analyzed terms, less those of the title) occur
  in the item's text: the rest of the query speaks about that item.

Items named with their qualifier, and titles without one, always count. The title stage
(:class:`~memlab.surfacing.stages.title.TitleMatch`) applies this filter; its note
``title_homonyms_dropped`` lists the items it left out.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from memlab.text import STOPWORDS, TITLE_KEYS, strip_parenthetical, words

__all__ = ["supported_homonyms"]


def _titles(item: Any) -> list[str]:
    metadata = item.metadata or {}
    return [metadata[key] for key in TITLE_KEYS if isinstance(metadata.get(key), str)]


def supported_homonyms(ws: Any, query: str, terms: Sequence[str], named: np.ndarray,
                       min_support: int, analyze: Callable[[str], list[str]]
                       ) -> tuple[np.ndarray, list[int]]:
    """``named`` (item numbers the query names by title) split into those that count and those
    dropped as unsupported homonyms (see the module notes).

    ``terms`` are the query's analyzed terms and ``analyze`` the analyzer that made them (the
    item's text and title go through it too). ``min_support`` < 1 keeps everything.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> a = mem.add("Scott Howell is a former footballer who played as a striker.",
    ...             metadata={"title": "Scott Howell (footballer)"})
    >>> b = mem.add("Scott Howell founded the Alpine ski school in 1990.",
    ...             metadata={"title": "Scott Howell (skier)"})
    >>> ws = mem.store.workspace("default")
    >>> analyze, _ = ws.bm25_for("porter")
    >>> q = "Which ski school did Scott Howell found?"
    >>> keep, dropped = supported_homonyms(ws, q, analyze(q), np.array([0, 1]), 1, analyze)
    >>> ws.ids_of(keep) == [b], ws.ids_of(np.array(dropped)) == [a]
    (True, True)
    """
    named = np.asarray(named, dtype=np.int64)
    if min_support < 1 or not len(named):
        return named, []
    query_words = set(words(query))
    matched = {phrase for _, _, phrase in ws.titles().find(query)}
    query_terms = set(terms)
    keep, dropped = [], []
    for i in named.tolist():
        item = ws.item(i)
        verdicts = [_supported(title, matched, query_words, query_terms, item.content,
                               min_support, analyze) for title in _titles(item)]
        # dropped only when some title names it as an unsupported homonym and none supports it
        (dropped if False in verdicts and True not in verdicts else keep).append(i)
    return np.array(keep, dtype=np.int64), dropped


def _supported(title: str, matched: set[str], query_words: set[str], query_terms: set[str],
               content: str, min_support: int, analyze: Callable[[str], list[str]]
               ) -> bool | None:
    """True/False: ``title`` names the item as a homonym that the query does/does not support;
    None: ``title`` has no qualifier, or the query names it with it, or not through it at all."""
    full, bare = words(title), words(strip_parenthetical(title))
    if full == bare or " ".join(full) in matched or " ".join(bare) not in matched:
        return None
    if (set(full) - set(bare) - STOPWORDS) & query_words:
        return True  # the qualifier is in the query
    rest = query_terms - set(analyze(" ".join(bare)))
    return len(rest & set(analyze(content))) >= min_support
