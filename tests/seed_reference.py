"""A deliberately naive, independent re-implementation of the seed's surfacing (SmartMemory,
``seeds/003``), written from SPEC §2–4 for the differential test of ``SEED_COMPAT``.

It imports nothing from memlab: plain Python loops over plain records, ``math`` for the formulas
and ``networkx.pagerank`` for PPR (what the seed ran). Nothing here is fast or clever on purpose;
it exists so that a second reading of the contract can disagree with memlab.

Where the seed and SPEC leave a detail open, this file takes memlab's reading, and says so
(``# reading:``); the README's "How far SEED_COMPAT is the seed" lists the same points.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

import networkx as nx

# ----------------------------------------------------------------------------------- text (§2.1)
# NLTK's English stopword list, as published (with its apostrophes).
_NLTK_ENGLISH = """
i me my myself we our ours ourselves you you're you've you'll you'd your yours yourself yourselves
he him his himself she she's her hers herself it it's its itself they them their theirs themselves
what which who whom this that that'll these those am is are was were be been being have has had
having do does did doing a an the and but if or because as until while of at by for with about
against between into through during before after above below to from up down in out on off over
under again further then once here there when where why how all any both each few more most other
some such no nor not only own same so than too very s t can will just don don't should should've
now d ll m o re ve y ain aren aren't couldn couldn't didn didn't doesn doesn't hadn hadn't hasn
hasn't haven haven't isn isn't ma mightn mightn't mustn mustn't needn needn't shan shan't shouldn
shouldn't wasn wasn't weren weren't won won't wouldn wouldn't
""".split()


def words(text: str) -> list[str]:
    """Maximal runs of letters and digits (``str.isalnum``) of the lowercased text.

    # reading: SPEC says "lowercase word tokenizer"; a word is a run of letters/digits of any
    # script, so an apostrophe or an underscore separates words.
    """
    out, current = [], []
    for ch in text.lower():
        if ch.isalnum():
            current.append(ch)
        elif current:
            out.append("".join(current))
            current = []
    if current:
        out.append("".join(current))
    return out


STOPWORDS = frozenset(w for entry in _NLTK_ENGLISH for w in words(entry))


def tokenize(text: str) -> list[str]:
    """Lowercase words, English stopwords removed, no stemming (the seed's tokenizer)."""
    return [w for w in words(text) if w not in STOPWORDS]


def estimate_tokens(text: str) -> int:
    return 0 if not text else max(1, len(text) // 4)


# ----------------------------------------------------------------------------------- the world
@dataclass
class RefItem:
    item_id: str
    content: str
    memory_type: str
    created_h: float  # hours on the test's time axis
    stored_activation: float = 0.5
    activation_anchor_h: float = 0.0
    last_boost_h: float | None = None


@dataclass
class RefWorld:
    """Items (in order of addition), edges, one session's anchors and pins."""

    items: list[RefItem] = field(default_factory=list)
    edges: dict[tuple[str, str, str], float] = field(default_factory=dict)
    anchors: list[str] = field(default_factory=list)
    pins: dict[str, float] = field(default_factory=dict)
    pins_expire_h: float = -math.inf

    def item(self, item_id: str) -> RefItem:
        return next(it for it in self.items if it.item_id == item_id)

    # writes ---------------------------------------------------------------------------------
    def add(self, item_id: str, content: str, memory_type: str, created_h: float) -> None:
        self.items.append(RefItem(item_id, content, memory_type, created_h,
                                  activation_anchor_h=created_h))

    def add_edge(self, src: str, dst: str, edge_type: str, weight: float) -> None:
        self.edges[(src, dst, edge_type)] = weight  # an existing edge gets the new weight

    def get(self, item_id: str, now_h: float) -> None:
        """An explicit retrieval: +0.05 activation (clamped), decay restarts (SPEC §2.3)."""
        it = self.item(item_id)
        it.stored_activation = min(1.0, max(0.0, activation(it, now_h) + 0.05))
        it.activation_anchor_h = now_h
        it.last_boost_h = now_h

    def pin(self, item_id: str, weight: float, now_h: float) -> None:
        if now_h >= self.pins_expire_h:
            self.pins = {}
        self.pins[item_id] = weight
        self.pins_expire_h = now_h + 24.0  # the seed's 24 h TTL, refreshed by each pin write

    def unpin(self, item_id: str, now_h: float) -> None:
        if now_h >= self.pins_expire_h:
            self.pins = {}
            return
        if item_id in self.pins:
            del self.pins[item_id]
            self.pins_expire_h = now_h + 24.0

    def live_pins(self, now_h: float) -> dict[str, float]:
        return dict(self.pins) if now_h < self.pins_expire_h else {}


# ----------------------------------------------------------------------------------- signals
def activation(it: RefItem, now_h: float) -> float:
    elapsed = max(0.0, now_h - it.activation_anchor_h)
    return min(1.0, max(0.0, it.stored_activation * math.exp(-math.log(2) * elapsed / 720.0)))


def recency(it: RefItem, now_h: float) -> float:
    # reading: items are never edited here, so updated_at == created_at
    ref = it.last_boost_h if it.last_boost_h is not None else it.created_h
    return math.exp(-max(0.0, now_h - ref) / 24.0)


def freshness(it: RefItem, now_h: float) -> float:
    age = max(0.0, now_h - it.created_h)
    return (1.0 - age / 24.0) * 0.2 if age < 24.0 else 0.0


def bm25_scores(world: RefWorld, query_tokens: list[str]) -> dict[str, float]:
    """BM25 (k1 1.2, b 0.75) of every item containing a query term, over all the workspace's
    items. # reading: idf = ln(1 + (N - df + 0.5) / (df + 0.5)) (never negative); a repeated
    query term counts once per occurrence."""
    docs = {it.item_id: tokenize(it.content) for it in world.items}
    n = len(docs)
    avgdl = sum(len(t) for t in docs.values()) / n if n else 0.0
    out: dict[str, float] = {}
    for item_id, tokens in docs.items():
        score, hit = 0.0, False
        for term in query_tokens:
            tf = tokens.count(term)
            if tf == 0:
                continue
            hit = True
            df = sum(1 for t in docs.values() if term in t)
            idf = math.log(1.0 + (n - df + 0.5) / (df + 0.5))
            score += idf * tf * 2.2 / (tf + 1.2 * (1 - 0.75 + 0.75 * len(tokens) / avgdl))
        if hit:
            out[item_id] = score
    return out


# ----------------------------------------------------------------------------------- router (§4.1)
QUESTION_WORDS = {"what", "who", "where", "when", "why", "which", "whose", "how"}


def route(query: str) -> tuple[str, float, list[str], dict[str, int]]:
    """The seed's three rules, first match wins. The seed never computed entity_count: 0."""
    entity_count = 0
    signals = {"query_length": len(query), "word_count": len(query.split()),
               "entity_count": entity_count}
    reasons = []
    for kw in ("why", "how", "what caused", "explain"):
        if re.search(r"\b" + re.escape(kw) + r"\b", query, re.IGNORECASE):
            reasons.append(f"keyword:{kw}")
    if entity_count >= 2:
        reasons.append(f"entity_count:{entity_count}")
    if len(query) > 80:
        reasons.append(f"length:{len(query)}")
    if reasons:
        return "deep:multi-hop", 0.75, reasons, signals
    lowered = query.lower()
    hits = [f"recency_signal:{w}" for w in ("recent", "latest", "newest", "today", "yesterday")
            if w in lowered]
    if hits:
        return "fast:recency", 0.8, hits, signals
    split = query.split()
    if 0 < len(split) <= 6:
        # reading: the first word is compared without surrounding punctuation
        first = split[0].lower().strip(".,;:!?\"'()[]")
        if first not in QUESTION_WORDS:
            if first in ("list", "show", "get", "find", "all"):
                return "factual:point-query", 0.7, [f"lookup_prefix:{first}"], signals
            if re.match(r"^(the\s+)?\w+s?$", query.strip(), re.IGNORECASE):
                return "factual:point-query", 0.65, ["bare_noun"], signals
            if entity_count == 1:
                return "factual:point-query", 0.7, ["single_entity"], signals
    return "fast:recency", 0.5, ["fallback"], signals


# ----------------------------------------------------------------------------------- graph (§5)
SPREAD_TYPES = {"RELATED", "RELATES_TO", "CO_RETRIEVED", "ANSWERED_BY", "PART_OF", "MENTIONS",
                "MENTIONED_IN", "CONTAINS_ENTITY", "LINKS_TO", "LINKED_TO", "DERIVED_FROM",
                "INFERRED_FROM", "HAS_SKILL", "HAS_CONTEXT", "TAGGED_WITH", "ALIAS_OF"}


def spread(world: RefWorld, seeds: list[str], depth: int = 2, max_fan_out: int = 20,
           damping: float = 0.5) -> dict[str, float]:
    """Undirected BFS over allowlisted edges; each node passes to its ``max_fan_out`` strongest
    neighbours (summed weight; # reading: ties by order of addition); ``damping ** hops`` of the
    shortest path; seeds excluded; at most ``max_fan_out * depth``, nearest first, ties by id."""
    order = {it.item_id: n for n, it in enumerate(world.items)}
    strength: dict[str, dict[str, float]] = {}
    for (s, d, t), w in world.edges.items():
        if t in SPREAD_TYPES:
            strength.setdefault(s, {})[d] = strength.get(s, {}).get(d, 0.0) + w
            strength.setdefault(d, {})[s] = strength.get(d, {}).get(s, 0.0) + w
    hops: dict[str, int] = {}
    seen = set(seeds)
    frontier = list(seeds)
    for hop in range(1, depth + 1):
        nxt = []
        for v in frontier:
            nbrs = sorted(strength.get(v, {}).items(), key=lambda kv: (-kv[1], order[kv[0]]))
            for u, _ in nbrs[:max_fan_out]:
                if u not in seen:
                    seen.add(u)
                    hops[u] = hop
                    nxt.append(u)
        frontier = nxt
    ranked = sorted(hops.items(), key=lambda kv: (kv[1], kv[0]))[:max_fan_out * depth]
    return {u: damping ** h for u, h in ranked}


def pagerank(world: RefWorld, seeds: list[str]) -> dict[str, float]:
    """``networkx.pagerank`` over every item, all edge types (parallel edges summed), personalised
    uniformly on the seeds, networkx's default stopping rule; skipped above 10,000 items."""
    if not seeds or len(world.items) > 10_000:
        return {}
    graph = nx.DiGraph()
    graph.add_nodes_from(it.item_id for it in world.items)
    summed: dict[tuple[str, str], float] = {}
    for (s, d, _), w in world.edges.items():
        summed[(s, d)] = summed.get((s, d), 0.0) + w
    graph.add_weighted_edges_from((s, d, w) for (s, d), w in summed.items())
    ranks = nx.pagerank(graph, alpha=0.85, personalization=dict.fromkeys(sorted(seeds), 1.0))
    top = sorted(((m, i) for i, m in ranks.items() if m > 0), key=lambda p: (-p[0], p[1]))[:100]
    return {i: m for m, i in top}


# ----------------------------------------------------------------------------------- §3
class BudgetTooSmallError(ValueError):
    pass


def working_context(world: RefWorld, query: str, *, now_h: float, mode: str, k: int = 20,
                    max_tokens: int | None = None, strategy: str | None = None) -> dict:
    """``get_working_context`` of the seed: ``{"strategy", "confidence", "reasons", "signals",
    "items": [{"item_id", "score", "activation", "relevance", "recency", "centrality",
    "anchor_forced", "session_pin_boost", "freshness_boost"}], "tokens_used"}``."""
    legacy = mode == "legacy"
    anchors = list(world.anchors)
    if max_tokens is not None and anchors:
        if min(estimate_tokens(world.item(a).content) for a in anchors) > max_tokens:
            raise BudgetTooSmallError("budget_too_small")
    # 1. strategy
    if legacy:
        name, confidence, reasons, signals = "fast:recency", 1.0, ["legacy_mode"], {}
    elif strategy is not None:
        name, confidence, reasons, signals = strategy, 1.0, ["caller_explicit"], {}
    else:
        name, confidence, reasons, signals = route(query)
    if name in ("procedural:lookup", "temporal:windowed"):  # reserved in the seed
        name, reasons = "fast:recency", reasons + ["unimplemented_strategy_soft_degrade"]
    # 2. candidates: over-fetch 5k by relevance; anchors (and archived items) are not retrieved
    retrievable = {it.item_id for it in world.items if it.memory_type != "anchor"}
    bm25 = {i: s for i, s in bm25_scores(world, tokenize(query)).items() if i in retrievable}
    order = {it.item_id: n for n, it in enumerate(world.items)}
    ranked = sorted(bm25, key=lambda i: (-bm25[i], order[i]))[:5 * k]
    top = max(bm25.values()) if bm25 else 0.0
    relevance = {i: (bm25[i] / top if top > 0 else 0.0) for i in ranked}
    pool = list(ranked)
    centrality_raw: dict[str, float] = {}
    if not legacy and name == "deep:multi-hop":
        seeds = ranked[:5]
        for u, score in spread(world, seeds).items():
            if u in retrievable and u not in relevance:
                pool.append(u)
                relevance[u] = score  # spread-only items: relevance = spread score
        centrality_raw = pagerank(world, seeds)
    # 3. mandatory items: anchors, then pins
    pins = world.live_pins(now_h)
    rows = [(a, "anchor") for a in anchors]
    pool = [i for i in pool if i not in anchors]
    mandatory = set(anchors)
    for p in pins:
        if legacy and p not in pool:
            continue  # legacy fetches no pinned item the query did not retrieve
        mandatory.add(p)
        if p not in pool:
            rows.append((p, "pin"))
            relevance[p] = 0.0  # fetched pins get relevance 0
    rows += [(i, "relevance") for i in pool]
    # 4. composite
    scored = []
    cmax = max((centrality_raw.get(i, 0.0) for i, _ in rows), default=0.0)
    for i, _ in rows:
        it = world.item(i)
        rel = relevance.get(i, 0.0)
        rec = recency(it, now_h)
        act = activation(it, now_h)
        base = max(act, 0.05) * rel * rec
        cen = centrality_raw.get(i, 0.0) / cmax if (not legacy and cmax > 0) else 0.0
        anchor = i in anchors
        pin = pins[i] * 0.3 if (not legacy and i in pins) else 0.0
        fresh = freshness(it, now_h) if not legacy else 0.0
        score = base if legacy else base * (1 + 0.5 * cen) + (1.0 if anchor else 0.0) + pin + fresh
        scored.append({"item_id": i, "score": score, "activation": act, "relevance": rel,
                       "recency": rec, "centrality": cen, "anchor_forced": anchor,
                       "session_pin_boost": pin, "freshness_boost": fresh,
                       "mandatory": i in mandatory,
                       "tokens": estimate_tokens(it.content)})
    # 5. order: mandatory first, then by score; # reading: ties by relevance, then item id
    scored.sort(key=lambda r: (not r["mandatory"], -r["score"], -r["relevance"], r["item_id"]))
    # 6. budget
    out, used, optional = [], 0, 0
    for r in scored:
        if r["mandatory"] and not legacy:
            out.append(r)
            used += r["tokens"]
            continue
        if (len(out) if legacy else optional) >= k:
            continue
        if max_tokens is not None and used + r["tokens"] > max_tokens:
            continue
        out.append(r)
        used += r["tokens"]
        optional += not r["mandatory"]
    return {"strategy": name, "confidence": confidence, "reasons": reasons, "signals": signals,
            "items": out, "tokens_used": used}
