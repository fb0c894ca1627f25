"""A seeded synthetic item generator for scale tests and benchmarks.

Items are short texts over a Zipf-distributed vocabulary, spread over a time span, with a share of
``procedural`` items. The same seed always gives the same items.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import numpy as np

__all__ = ["SYNTHETIC_LIMITS", "synthetic_items", "synthetic_vocabulary", "power_law_edges",
           "synthetic_trace", "synthetic_longmemeval", "QUERY_KINDS"]


# The largest trace synthetic_trace builds: past these, memory runs out before the first item.
SYNTHETIC_LIMITS = {"n_items": 10_000_000, "n_queries": 1_000_000, "n_topics": 10_000,
                    "n_sessions": 1_000_000}

_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def synthetic_vocabulary(size: int) -> list[str]:
    """``size`` distinct pronounceable words of two or more syllables (deterministic).

    Examples
    --------
    >>> synthetic_vocabulary(3)
    ['baba', 'babe', 'babi']
    """
    words = []
    for n in range(size):
        syllables = []
        while True:
            syllables.append(_SYLLABLES[n % len(_SYLLABLES)])
            n //= len(_SYLLABLES)
            if n == 0:
                break
        syllables += ["ba"] * (2 - len(syllables))
        words.append("".join(reversed(syllables)))
    return words


def synthetic_items(n: int, *, seed: int = 0, vocabulary: int = 20_000, words: tuple[int, int] = (8, 24),
                    start: datetime = datetime(2024, 1, 1, tzinfo=timezone.utc),
                    span_days: float = 90.0, procedural_share: float = 0.1,
                    zipf_a: float = 1.1) -> list[dict]:
    """``n`` item dicts (``content``, ``memory_type``, ``created_at``) ready for ``Memory.add_many``.

    Examples
    --------
    >>> items = synthetic_items(3, seed=1)
    >>> len(items), items == synthetic_items(3, seed=1)
    (3, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"n must be an int >= 0, got {n!r}")
    rng = np.random.default_rng(seed)
    vocab = np.array(synthetic_vocabulary(vocabulary))
    lengths = rng.integers(words[0], words[1] + 1, size=n)
    ranks = rng.zipf(zipf_a, size=int(lengths.sum())) - 1
    ranks = np.minimum(ranks, vocabulary - 1)  # the Zipf tail beyond the vocabulary: rarest word
    perm = rng.permutation(vocabulary)  # which word gets which frequency rank
    tokens = vocab[perm[ranks]]
    offsets = np.r_[0, np.cumsum(lengths)]
    seconds = np.sort(rng.uniform(0, span_days * 86400.0, size=n))
    procedural = rng.random(n) < procedural_share
    return [{"content": " ".join(tokens[offsets[i]:offsets[i + 1]].tolist()),
             "memory_type": "procedural" if procedural[i] else "semantic",
             "created_at": start + timedelta(seconds=float(seconds[i]))}
            for i in range(n)]


def power_law_edges(n: int, edges_per_node: int = 5, seed: int = 0,
                    skew: float = 2.0) -> tuple[np.ndarray, np.ndarray]:
    """A seeded directed graph with a power-law in-degree, as ``(src, dst)`` item numbers.

    Node ``i > 0`` links to ``edges_per_node`` earlier nodes ``floor(i * u ** skew)`` with
    ``u`` uniform: old nodes collect links like in preferential attachment (with ``skew=2`` the
    expected in-degree of node ``j`` grows like ``sqrt(n / j)``, a degree tail of exponent 3 as
    in Barabási–Albert), but vectorised, so a million nodes take a fraction of a second. Node 0
    has no outgoing edge; repeated pairs are possible (an upsert keeps one).

    Examples
    --------
    >>> src, dst = power_law_edges(1000, seed=1)
    >>> len(src), bool((dst < src).all())
    (4995, True)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 2:
        raise ValueError(f"n must be an integer >= 2, got {n!r}")
    if isinstance(edges_per_node, bool) or not isinstance(edges_per_node, int) \
            or edges_per_node < 1:
        raise ValueError(f"edges_per_node must be an integer >= 1, got {edges_per_node!r}")
    if not isinstance(skew, (int, float)) or not skew >= 1:
        raise ValueError(f"skew must be a number >= 1, got {skew!r}")
    rng = np.random.default_rng(seed)
    src = np.repeat(np.arange(1, n, dtype=np.int64), edges_per_node)
    dst = np.floor(src * rng.random(len(src)) ** skew).astype(np.int64)
    return src, dst



_MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August",
           "September", "October", "November", "December"]
_VERBS = ["deploy", "rotate", "migrate", "restore", "configure", "upgrade", "audit", "scale"]
QUERY_KINDS = ("point", "recency", "multi_hop", "procedural", "temporal")


def synthetic_trace(n_items: int = 1000, n_queries: int = 100, *, seed: int = 0,
                    n_topics: int = 20, n_sessions: int = 50, span_days: float = 180.0,
                    start: datetime = datetime(2024, 1, 1, tzinfo=timezone.utc),
                    query_mix: dict[str, float] | None = None, progress: bool = False):
    """A seeded trace of any size: sessions of items on topics, edges, and gold-labelled queries
    aimed at each strategy (the query's ``category`` says which).

    Items belong to a topic (its name is a capitalised word; its words a Zipf-weighted subset of
    the vocabulary) and a session (sessions are consecutive in time over ``span_days``). A tenth
    carry a title, a tenth are procedures ("steps to <verb> <object>"). Each topic's items form a
    chain of ``RELATED`` edges in time order. Queries come after the last session:

    ``point``: "show <title>" → the titled item. ``recency``: "latest <Topic> news" → the
    topic's 3 newest items. ``multi_hop``: "why <two rare words of an item>" → that item and its
    chain successor, which shares no query word (only the graph reaches it). ``procedural``:
    "how to <verb> <object>" → that procedure. ``temporal``: "what happened with <Topic> in
    <Month Year>" → the topic's items of that month.

    Sizes are bounded by :data:`SYNTHETIC_LIMITS` (at most 10,000,000 items, 1,000,000 queries,
    10,000 topics and 1,000,000 sessions); beyond them, and below the minimums, ValueError names
    the argument. ``progress=True`` shows a bar naming the size (100,000 items take about a
    minute).

    Examples
    --------
    >>> trace = synthetic_trace(200, 20, seed=1)
    >>> sum(e.type == "add" for e in trace), len(trace.queries)
    (200, 20)
    >>> sorted({q.get("category") for q in trace.queries}) == sorted(QUERY_KINDS)
    True
    """
    from memlab.harness.trace import TraceBuilder

    for name, value, low in (("n_items", n_items, 10), ("n_queries", n_queries, 0),
                             ("n_topics", n_topics, 1), ("n_sessions", n_sessions, 1)):
        high = SYNTHETIC_LIMITS[name]
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be an integer in {low}..{high:,}, got {value!r}")
    mix = dict(query_mix or {kind: 1.0 for kind in QUERY_KINDS})
    unknown = set(mix) - set(QUERY_KINDS)
    if unknown or not mix or any(v < 0 for v in mix.values()) or sum(mix.values()) <= 0:
        raise ValueError(f"query_mix must weigh kinds among {list(QUERY_KINDS)}, got {mix!r}")
    rng = np.random.default_rng(seed)
    vocab = synthetic_vocabulary(5000 + 40 * n_topics)
    names = [w.capitalize() for w in vocab[:n_topics]]
    pool = vocab[n_topics:]
    topic_words = [rng.choice(len(pool), 40, replace=False) for _ in range(n_topics)]
    zipf = 1.0 / np.arange(1, 41)
    zipf /= zipf.sum()
    seconds = np.sort(rng.uniform(0, span_days * 86400.0, n_items))
    session_of = np.minimum((seconds / (span_days * 86400.0) * n_sessions).astype(int),
                            n_sessions - 1)
    topic_of = rng.integers(0, n_topics, n_items)
    kind_of = rng.random(n_items)
    items = []
    used_titles: set[str] = set()
    bar = _bar(2 * n_items, f"synthetic_trace({n_items:,} items)", progress)
    for i in range(n_items):
        if bar is not None:
            bar.update(1)
        t = int(topic_of[i])
        words = [pool[j] for j in rng.choice(topic_words[t], rng.integers(6, 14), p=zipf)]
        words += [pool[j] for j in rng.integers(0, len(pool), 3)]  # general noise words
        unique = f"{pool[int(rng.integers(len(pool)))]}{i}"  # a rare word of its own
        metadata: dict = {"topic": names[t], "session": int(session_of[i])}
        memory_type = "semantic"
        if kind_of[i] < 0.1:
            verb, obj = _VERBS[i % len(_VERBS)], f"{names[t].lower()}{i}"
            content = f"Steps to {verb} {obj}: " + " ".join(words)
            memory_type = "procedural"
            metadata["procedure"] = [verb, obj]
        else:
            content = f"{names[t]} {' '.join(words)} {unique}"
            if kind_of[i] < 0.2:
                title = f"{names[t]} {unique}"
                if title not in used_titles:
                    used_titles.add(title)
                    metadata["title"] = title
        items.append({"item_id": f"s{i}", "content": content, "memory_type": memory_type,
                      "metadata": metadata, "unique": unique,
                      "created_at": start + timedelta(seconds=float(seconds[i]))})
    builder = TraceBuilder(f"synthetic-{n_items}-{seed}", start=start,
                           metadata={"seed": seed, "n_topics": n_topics,
                                     "n_sessions": n_sessions, "generator": "synthetic_trace"})
    for item in items:
        if bar is not None:
            bar.update(1)
        builder.add(item["content"], item_id=item["item_id"], memory_type=item["memory_type"],
                    metadata=item["metadata"], created_at=item["created_at"],
                    ts=item["created_at"])
    if bar is not None:
        bar.close()
    by_topic: dict[int, list[int]] = {}
    for i in range(n_items):
        by_topic.setdefault(int(topic_of[i]), []).append(i)
    successor: dict[int, int] = {}
    for members in by_topic.values():
        for a, b in zip(members, members[1:]):
            builder.edge(f"s{a}", f"s{b}", "RELATED")
            successor[a] = b
    end = start + timedelta(days=span_days, hours=1)
    kinds = list(mix)
    weights = np.array([mix[k] for k in kinds], dtype=float)
    plan = rng.choice(len(kinds), n_queries, p=weights / weights.sum())
    for q, kind_index in enumerate(plan.tolist()):
        kind = kinds[kind_index]
        query, gold = _synthetic_query(kind, rng, items, names, by_topic, successor, topic_of,
                                       seconds, start)
        builder.query(f"q{q}", query, gold=gold, category=kind, ts=end)
    return builder.build()


def _synthetic_query(kind, rng, items, names, by_topic, successor, topic_of, seconds, start):
    n = len(items)
    if kind == "point":
        titled = [i for i in range(n) if "title" in items[i]["metadata"]] or [0]
        i = titled[int(rng.integers(len(titled)))]
        title = items[i]["metadata"].get("title", items[i]["unique"])
        return f"show {title}", [items[i]["item_id"]]
    if kind == "recency":
        t = int(rng.integers(len(names)))
        members = by_topic.get(t) or [n - 1]
        return f"latest {names[t]} news", [items[i]["item_id"] for i in members[-3:]]
    if kind == "multi_hop":
        chained = [i for i in successor if items[i]["memory_type"] == "semantic"] or [0]
        a = chained[int(rng.integers(len(chained)))]
        b = successor.get(a, a)
        words = items[a]["content"].split()
        rare = [items[a]["unique"], words[1]]
        return f"why {' '.join(rare)}", [items[a]["item_id"], items[b]["item_id"]]
    if kind == "procedural":
        procedures = [i for i in range(n) if items[i]["memory_type"] == "procedural"] or [0]
        i = procedures[int(rng.integers(len(procedures)))]
        verb, obj = items[i]["metadata"].get("procedure", ["do", items[i]["unique"]])
        return f"how to {verb} {obj}", [items[i]["item_id"]]
    i = int(rng.integers(n))  # temporal
    t = int(topic_of[i])
    when = items[i]["created_at"]
    gold = [items[j]["item_id"] for j in by_topic[t]
            if items[j]["created_at"].year == when.year
            and items[j]["created_at"].month == when.month]
    return f"what happened with {names[t]} in {_MONTHS[when.month - 1]} {when.year}", gold


def _bar(total: int, desc: str, enabled: bool):
    """A tqdm bar (a widget in Jupyter), or None when disabled or tqdm is not installed."""
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # tqdm is optional (the parquet/notebooks/test extras install it)
        return None
    return tqdm(total=total, desc=desc, unit="item")


def synthetic_longmemeval(n_questions: int = 500, n_sessions: int = 500, *, seed: int = 0,
                          turns: tuple[int, int] = (2, 6), words: tuple[int, int] = (6, 16),
                          span_days: float = 720.0, vocabulary: int = 20_000,
                          start: datetime = datetime(2023, 1, 1, tzinfo=timezone.utc)):
    """A seeded trace of LongMemEval's shape at any scale, gold included.

    As :func:`~memlab.datasets.loaders.load_longmemeval` reads the real one: every question has
    its own haystack, so its own workspace (named ``q<n>``), of ``n_sessions`` chat sessions
    (``turns`` turns each, alternating ``user:`` and ``assistant:``, Zipf-distributed words)
    at dates spread over ``span_days``; the turns are items at their session's date
    (``episodic``, metadata ``role`` and ``session``); consecutive turns of a session are linked
    both ways (``RELATED``, the loader's ``turn_adjacency``), added after the question's last
    session; the question comes after that. One user turn of one session (the evidence) states a
    fact in two words found nowhere else in the trace; the question asks for those two words
    and its gold is that turn. All questions' events are merged in time order, as the loader
    merges them, so the haystacks interleave.

    LongMemEval_M has 500 questions of ~500 sessions (~10 turns each); the default keeps its
    question and session counts with shorter sessions (2–6 turns: ~2M items).

    Examples
    --------
    >>> trace = synthetic_longmemeval(3, 4, seed=1)
    >>> len({q.get("workspace_id") for q in trace.queries}), len(trace.queries)
    (3, 3)
    >>> gold = trace.queries[0].get("gold")[0]
    >>> fact = trace.queries[0].get("query").split()[-2:]
    >>> [e.get("item_id") for e in trace if e.type == "add" and
    ...  all(w in e.get("content") for w in fact)] == [gold]
    True
    """
    from memlab.harness.trace import Event, Trace

    for name, value, low, high in (("n_questions", n_questions, 1, 100_000),
                                   ("n_sessions", n_sessions, 1, 100_000)):
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ValueError(f"{name} must be an integer in {low}..{high:,}, got {value!r}")
    for name, pair, low in (("turns", turns, 1), ("words", words, 1)):
        if not (isinstance(pair, tuple) and len(pair) == 2 and
                all(isinstance(v, int) and not isinstance(v, bool) for v in pair) and
                low <= pair[0] <= pair[1]):
            raise ValueError(f"{name} must be a pair (low, high) of integers with "
                             f"{low} <= low <= high, got {pair!r}")
    if not (isinstance(span_days, (int, float)) and span_days > 0):
        raise ValueError(f"span_days must be a positive number, got {span_days!r}")
    if isinstance(vocabulary, bool) or not isinstance(vocabulary, int) or vocabulary < 100:
        raise ValueError(f"vocabulary must be an integer >= 100, got {vocabulary!r}")
    if n_questions * n_sessions * turns[0] > SYNTHETIC_LIMITS["n_items"]:
        raise ValueError(f"n_questions x n_sessions x turns gives at least "
                         f"{n_questions * n_sessions * turns[0]:,} items, more than "
                         f"{SYNTHETIC_LIMITS['n_items']:,}")
    rng = np.random.default_rng(seed)
    per_session = rng.integers(turns[0], turns[1] + 1, size=(n_questions, n_sessions))
    n_items = int(per_session.sum())
    if n_items > SYNTHETIC_LIMITS["n_items"]:
        raise ValueError(f"n_questions x n_sessions x turns gives {n_items:,} items, more than "
                         f"{SYNTHETIC_LIMITS['n_items']:,}")
    vocab = np.array(synthetic_vocabulary(vocabulary))
    # the fact words: two per question, kept out of every turn's own words
    facts = np.array(synthetic_vocabulary(vocabulary + 2 * n_questions)[vocabulary:]) \
        .reshape(n_questions, 2)
    lengths = rng.integers(words[0], words[1] + 1, size=n_items)
    ranks = np.minimum(rng.zipf(1.1, size=int(lengths.sum())) - 1, vocabulary - 1)
    tokens = vocab[rng.permutation(vocabulary)[ranks]]
    text_at = np.r_[0, np.cumsum(lengths)]
    session_s = np.sort(rng.uniform(0, span_days * 86400.0, size=(n_questions, n_sessions)),
                        axis=1)
    evidence_session = rng.integers(0, n_sessions, size=n_questions)
    timeline: list[tuple[float, int, Event]] = []  # (seconds, order, event)
    item = 0
    for q in range(n_questions):
        ws = f"q{q}"
        ids: list[str] = []
        edges: list[tuple[str, str]] = []
        gold = None
        for s in range(n_sessions):
            at = start + timedelta(seconds=float(session_s[q, s]))
            stamp, session = at.isoformat(), f"{ws}-s{s}"
            for n in range(int(per_session[q, s])):
                role = "user" if n % 2 == 0 else "assistant"
                text = " ".join(tokens[text_at[item]:text_at[item + 1]].tolist())
                item_id = f"{session}:{n}"
                if gold is None and s == evidence_session[q] and role == "user":
                    gold = item_id
                    text += f" and my code words are {facts[q, 0]} {facts[q, 1]}"
                timeline.append((session_s[q, s], len(timeline), Event("add", {
                    "content": f"{role}: {text}", "item_id": item_id,
                    "memory_type": "episodic", "metadata": {"role": role, "session": session},
                    "created_at": stamp, "workspace_id": ws}, at)))
                if n:
                    edges.append((ids[-1], item_id))
                ids.append(item_id)
                item += 1
        last_s = float(session_s[q, -1])
        last = start + timedelta(seconds=last_s)
        for a, b in edges:
            for src, dst in ((a, b), (b, a)):
                timeline.append((last_s, len(timeline), Event("add_edge", {
                    "src": src, "dst": dst, "edge_type": "RELATED", "weight": 1.0,
                    "workspace_id": ws}, last)))
        asked_s = last_s + 3600.0
        timeline.append((asked_s, len(timeline), Event("query", {
            "qid": ws, "query": f"what were my code words {facts[q, 0]} {facts[q, 1]}",
            "gold": [gold] if gold is not None else [], "category": "single-session-user",
            "session_id": ws, "workspace_id": ws}, start + timedelta(seconds=asked_s))))
    timeline.sort(key=lambda entry: (entry[0], entry[1]))
    return Trace([event for _, _, event in timeline], name=f"synthetic-longmemeval:"
                 f"{n_questions}x{n_sessions}", start=start,
                 metadata={"generator": "synthetic_longmemeval", "seed": seed,
                           "n_questions": n_questions, "n_sessions": n_sessions,
                           "turns": list(turns), "items": n_items})

