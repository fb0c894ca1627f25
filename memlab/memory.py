"""The :class:`Memory` facade: the public entry point (SPEC §10). It validates and wires; the
algorithms live in :mod:`memlab.store`, :mod:`memlab.signals` and :mod:`memlab.surfacing`."""

from __future__ import annotations

import random
from collections.abc import Sequence
from datetime import datetime
from typing import Any, Callable, ClassVar, Iterable, Mapping

from memlab._deprecation import RenamedKeys
from memlab.clock import Clock, SystemClock, as_utc
from memlab.model import (Edge, SurfacingDecision, SurfacingStrategy, check_text, copy_json,
                          validate_id, validate_metadata, validate_text)
from memlab.signals.activation import ACTIVATION_MODELS
from memlab.store import MemoryStore, NewItem, paused_gc
from memlab.store.items import claim_item_ids
from memlab.surfacing.config import (DEFAULT, SEED_COMPAT, SurfacingConfig, check_reranker_file,
                                     get_recipe)
from memlab.surfacing.context import ContextRecord, assemble
from memlab.surfacing.router import ENTITY_DETECTORS, ROUTER_RULES
from memlab.surfacing.stages.retrieval import bm25_hits, bm25_hits_many
from memlab.surfacing.strategies import STRATEGIES

__all__ = ["Memory", "SURFACING_MODES"]

SURFACING_MODES = ("legacy", "router")


def _check_config(config: Any) -> SurfacingConfig:
    named = isinstance(config, str)
    if named:
        config = get_recipe(config)
    if not isinstance(config, SurfacingConfig):
        raise ValueError(f"config must be a SurfacingConfig or a recipe name, got {config!r}")
    # a ranker file reading features the recipe does not record is refused now, not at the
    # first get_working_context (a recipe file read by get_recipe was checked already)
    if not named:
        check_reranker_file(config)
    checks = [("activation_model", config.activation_model, ACTIVATION_MODELS),
              ("entity_detector", config.entity_detector, ENTITY_DETECTORS)]
    checks += [("router_rules", rule, ROUTER_RULES) for rule in config.router_rules]
    checks += [("strategies", impl, STRATEGIES) for _, impl in config.strategies
               if isinstance(impl, str)]  # a Pipeline value is the implementation itself
    for name, value, registry in checks:
        if value is not None and value not in registry:
            raise ValueError(f"{name} names {value!r}, which is not registered; "
                             f"registered: {sorted(registry)}")
    return config


class SearchHit(RenamedKeys):
    """One :meth:`Memory.search` hit: a plain dict (JSON and ``dict(hit)`` keep every key),
    whose ``"score"`` key is the deprecated name of ``"bm25"``: reading it warns, and it goes
    in the next release ("score" is the composite in a context record)."""

    what = "Memory.search: the hit"
    renamed: ClassVar[dict] = {"score": ("bm25", ("the item's raw BM25 for the query, not the "
                                                  "composite score that 'score' means in a "
                                                  "context record"))}


def _search_hits(ws, docs, scores) -> list[dict[str, Any]]:
    """The hits of :meth:`Memory.search` and :meth:`Memory.search_many`."""
    out = []
    for i, score in zip(docs.tolist(), scores.tolist()):
        item = ws.item(i)
        out.append(SearchHit({"item_id": item.item_id, "content": item.content,
                              "memory_type": item.memory_type,
                              "metadata": copy_json(item.metadata), "bm25": score,
                              "score": score}))
    return out


def _check_search_args(top_k: Any, reinforce: Any) -> None:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or not 1 <= top_k <= 1000:
        raise ValueError(f"top_k must be an int in 1..1000, got {top_k!r}")
    _check_reinforce(reinforce)


def _check_reinforce(reinforce: Any) -> None:
    if not isinstance(reinforce, bool):
        raise ValueError(f"reinforce must be a bool, got {reinforce!r}")


def _not_anchor(memory_type: Any) -> None:
    """Anchors belong to a session: only :meth:`Memory.add_anchor` makes them."""
    if isinstance(memory_type, str) and memory_type == "anchor":
        raise ValueError("memory_type 'anchor' is not accepted here: an anchor belongs to a "
                         "session, so add it with add_anchor(session_id, content, ...)")


class Memory:
    """A view of one workspace of a :class:`MemoryStore`, with surfacing.

    Parameters
    ----------
    store : MemoryStore, optional
        The store to use; a new private one when omitted. Share one store between facades to give
        several workspaces (or surfaces) the same data.
    workspace_id : str
        The workspace this facade reads and writes (``"default"``).
    surfacing_mode : {"legacy", "router"}
        ``"legacy"``: the seed's M1a scoring (relevance × recency × activation with floor).
        ``"router"``: the router, strategies, pins' boosts, freshness and centrality.
    clock : Clock, optional
        The time source of every time-dependent rule (``SystemClock()`` by default).
    config : SurfacingConfig or str, optional
        Configuration or recipe name (``"default"``, ``"seed_compat"``). Without one: the seed's
        constants (``SEED_COMPAT``) in legacy mode, memlab's ``DEFAULT`` in router mode.
    seed : int
        Seeds the decision-id generator, so replays are reproducible.
    on_record : callable, optional
        Called with every :class:`~memlab.surfacing.context.ContextRecord` (the harness's hook).
    path : str, optional
        Open (or create) a durable store in this SQLite file (see :mod:`memlab.persist`);
        ``Memory(path=p)`` is ``Memory(store=MemoryStore(path=p))``.

    Examples
    --------
    >>> from datetime import datetime, timezone
    >>> from memlab import ManualClock
    >>> mem = Memory(surfacing_mode="router", clock=ManualClock(datetime(2024, 1, 1, tzinfo=timezone.utc)))
    >>> jwt = mem.add("We picked JWT for the auth service because sessions did not scale")
    >>> _ = mem.add("Lunch on Friday is pizza")
    >>> ctx = mem.get_working_context("s1", "Why did we pick JWT?", k=5)
    >>> ctx["strategy_used"], [item["item_id"] for item in ctx["items"]] == [jwt]
    ('deep:multi-hop', True)
    >>> mem.last_surfacing_decision.reasons
    ('keyword:why',)
    """

    def __init__(self, store: MemoryStore | None = None, workspace_id: str = "default",
                 surfacing_mode: str = "legacy", clock: Clock | None = None,
                 config: SurfacingConfig | str | None = None, seed: int = 0,
                 on_record: Callable[[ContextRecord], None] | None = None,
                 path: str | None = None) -> None:
        if path is not None:
            if store is not None:
                raise ValueError("give either store or path, not both")
            store = MemoryStore(path=path)
        if surfacing_mode not in SURFACING_MODES:
            raise ValueError(f"surfacing_mode must be one of {SURFACING_MODES}, "
                             f"got {surfacing_mode!r}")
        if store is not None and not isinstance(store, MemoryStore):
            raise ValueError(f"store must be a MemoryStore, got {type(store).__name__}")
        validate_id(workspace_id, "workspace_id")
        if clock is not None and not callable(getattr(clock, "now", None)):
            raise ValueError(f"clock must have a now() method, got {clock!r}")
        if on_record is not None and not callable(on_record):
            raise ValueError(f"on_record must be callable, got {on_record!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        if config is None:  # each mode's own defaults: the seed's constants in legacy mode
            config = SEED_COMPAT if surfacing_mode == "legacy" else DEFAULT
        self.config = _check_config(config)
        self.store = store if store is not None else MemoryStore()
        self.workspace_id = workspace_id
        self.surfacing_mode = surfacing_mode
        self.reasoner = None  # a memlab.maintenance.Reasoner runs after topic events
        self.clock = clock if clock is not None else SystemClock()
        self.on_record = on_record
        self._rng = random.Random(seed)
        self.last_surfacing_decision: SurfacingDecision | None = None
        self.last_context_record: ContextRecord | None = None
        self.store.ensure_workspace(workspace_id)  # journaled: an empty workspace survives

    def __repr__(self) -> str:
        return (f"Memory(workspace_id={self.workspace_id!r}, surfacing_mode="
                f"{self.surfacing_mode!r}, config={self.config.name!r}, items={len(self)})")

    def __len__(self) -> int:
        return len(self._ws)

    def __contains__(self, item_id: object) -> bool:
        return self._ws.row_of(item_id) is not None

    @property
    def _ws(self):
        return self.store.workspace(self.workspace_id)

    # ------------------------------------------------------------------ writing
    def add(self, content: str, memory_type: str = "semantic", metadata: dict | None = None,
            item_id: str | None = None, created_at=None) -> str:
        """Store one item and return its id.

        Raises
        ------
        ValueError
            Empty or non-string ``content``, unknown ``memory_type`` or ``"anchor"`` (anchors
            belong to a session: :meth:`add_anchor`), non-JSON ``metadata`` or metadata with
            keys that are not strings, an ``item_id`` that exists
            (:class:`~memlab.errors.DuplicateItemError`).

        Examples
        --------
        >>> mem = Memory()
        >>> mem.add("deploys run on fridays", item_id="deploy")
        'deploy'
        """
        _not_anchor(memory_type)
        new = self.store.prepare_item(content, memory_type, metadata, item_id, created_at)
        with self.store.single_write():  # one write (its commit lets gets read)
            return self.store.add_items(self.workspace_id, [new], self.clock.now(),
                                        self.config.activation_initial)[0]

    def add_many(self, items: Iterable[str | Mapping[str, Any]], *,
                 chunk_size: int | None = None,
                 added_at: Sequence[datetime] | None = None) -> list[str]:
        """Store many items at once; returns their ids in order.

        Each entry is a content string or a mapping with ``content`` and optionally
        ``memory_type``, ``metadata``, ``item_id``, ``created_at``.

        Parameters
        ----------
        items : iterable of str or mapping
            The items.
        chunk_size : int, optional
            Without it the write is all or nothing, in one transaction under the store's lock.
            With it the write is *chunk-atomic*: every item is validated first (an invalid item
            or a taken ``item_id`` writes nothing), then the items are written in transactions
            of at most ``chunk_size``, releasing the lock between them so that other callers
            interleave. Ids are the same as one call would give. If a later chunk still fails
            (a concurrent writer took one of its ids, or the disk failed) the earlier chunks
            stay written and the error says how many items were.
        added_at : sequence of datetime, optional
            When each item was added (one per item, naive ones taken as UTC; default: the clock's now
            for all): the ``created_at`` of an item that gives none and the time of its
            ``created`` history event. A replay writes a run of adds made at different times in
            one call this way, with the state the separate calls would have left.

        Examples
        --------
        >>> mem = Memory()
        >>> mem.add_many(["alpha", {"content": "beta", "item_id": "b"}])
        ['item-000000', 'b']
        >>> mem.add_many(["gamma", "delta", "epsilon"], chunk_size=2)
        ['item-000001', 'item-000002', 'item-000003']
        """
        if chunk_size is not None and (isinstance(chunk_size, bool) or
                                       not isinstance(chunk_size, int) or chunk_size < 1):
            raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
        items = list(items)
        stamps = None
        if added_at is not None:
            if isinstance(added_at, (str, bytes)) or not isinstance(added_at, Sequence) \
                    or len(added_at) != len(items):
                raise ValueError(f"added_at must be a sequence of {len(items)} datetimes (one "
                                 f"per item), got {added_at!r:.80}")
            stamps = [as_utc(t, name="added_at") for t in added_at]
        with paused_gc(len(items)):
            prepared = self._prepare_items(items)
        if chunk_size is None or len(prepared) <= chunk_size:
            with self.store.single_write():  # one write (its commit lets gets read)
                if stamps is None:  # (no added_at in the journal row when not given)
                    return self.store.add_items(self.workspace_id, prepared, self.clock.now(),
                                                self.config.activation_initial)
                return self.store.add_items(self.workspace_id, prepared, self.clock.now(),
                                            self.config.activation_initial, added_at=stamps)
        prepared = self._assign_ids(prepared)
        written: list[str] = []
        for start in range(0, len(prepared), chunk_size):
            try:
                with self.store.single_write():  # one write (its commit lets gets read)
                    chunk = {} if stamps is None else \
                        {"added_at": stamps[start:start + chunk_size]}
                    written += self.store.add_items(self.workspace_id,
                                                    prepared[start:start + chunk_size],
                                                    self.clock.now(),
                                                    self.config.activation_initial, **chunk)
            except Exception as exc:
                if not written:
                    raise
                message = (f"{exc} (chunk-atomic bulk write: the first {len(written)} of "
                           f"{len(prepared)} items were written, the rest were not)")
                try:
                    failure = type(exc)(message)
                except Exception:  # noqa: BLE001 - an exception type with another signature
                    failure = RuntimeError(message)
                raise failure from exc
        return written

    def _assign_ids(self, prepared: list[NewItem]) -> list[NewItem]:
        """Check ``prepared`` against the workspace and give every item its final id (the ids
        one :meth:`MemoryStore.add_items` call would give), so a chunked write cannot collide
        with itself."""
        from dataclasses import replace

        with self.store.lock:
            ws = self._ws
            taken = claim_item_ids(prepared, lambda i: ws.row_of(i) is not None,
                                   self.workspace_id)
            return [new if new.item_id is not None else replace(new, item_id=ws.generate_id(taken))
                    for new in prepared]

    _ITEM_KEYS = frozenset({"content", "memory_type", "metadata", "item_id", "created_at"})

    def _prepare_items(self, items: list) -> list[NewItem]:
        prepared: list[NewItem] = []
        allowed = self._ITEM_KEYS
        for pos, entry in enumerate(items):
            try:
                if isinstance(entry, str):
                    prepared.append(self.store.prepare_item(entry))
                    continue
                if not isinstance(entry, Mapping):
                    raise ValueError(f"must be a string or a mapping, got {type(entry).__name__}")
                unknown = set(entry) - allowed
                if unknown:
                    raise ValueError(f"unknown keys {sorted(unknown)}; allowed {sorted(allowed)}")
                _not_anchor(entry.get("memory_type", "semantic"))
                prepared.append(self.store.prepare_item(
                    entry.get("content"), entry.get("memory_type", "semantic"),
                    entry.get("metadata"), entry.get("item_id"), entry.get("created_at")))
            except ValueError as exc:
                raise type(exc)(f"items[{pos}]: {exc}") from None
        return prepared

    def add_edge(self, src_id: str, dst_id: str, edge_type: str = "RELATED",
                 weight: float = 1.0) -> None:
        """Add (or re-weight) a directed, typed edge between two items of this workspace.

        Examples
        --------
        >>> mem = Memory(); a = mem.add("alpha"); b = mem.add("beta")
        >>> mem.add_edge(a, b, "RELATED", 0.5); mem.get_edges(a)[0]["weight"]
        0.5
        """
        with self.store.single_write():  # one write (its commit lets gets read)
            edge = self.store.prepare_edge(self.workspace_id, src_id, dst_id, edge_type, weight)
            self.store.add_edges(self.workspace_id, [edge], self.clock.now())

    def add_edges(self, edges) -> int:
        """Add many edges, all or nothing; returns how many entries were written.

        ``edges`` is a pandas DataFrame with columns ``src``, ``dst`` and optionally
        ``edge_type`` and ``weight`` (the bulk path: validated column by column, ~1 s per million
        edges), or an iterable whose entries are :class:`~memlab.model.Edge` objects, tuples
        ``(src, dst[, edge_type[, weight]])`` or mappings with those keys.

        Examples
        --------
        >>> import pandas as pd
        >>> mem = Memory(); _ = mem.add_many([{"content": c, "item_id": c} for c in "abc"])
        >>> mem.add_edges([("a", "b"), {"src": "b", "dst": "c", "edge_type": "MENTIONS"}])
        2
        >>> mem.add_edges(pd.DataFrame({"src": ["a"], "dst": ["c"], "weight": [0.5]}))
        1
        >>> mem.add_edges([("a", "zz")])
        Traceback (most recent call last):
        ...
        memlab.errors.UnknownItemError: edges[0]: dst 'zz' does not exist in workspace 'default'
        """
        if type(edges).__module__.startswith("pandas") and hasattr(edges, "columns"):
            return self._add_edge_frame(edges)
        prepared = []
        with self.store.single_write():  # one write (its commit lets gets read)
            for pos, entry in enumerate(edges):
                try:
                    if isinstance(entry, Edge):
                        args = (entry.src, entry.dst, entry.edge_type, entry.weight)
                    elif isinstance(entry, tuple) and 2 <= len(entry) <= 4:
                        args = entry
                    elif isinstance(entry, Mapping):
                        args = (entry.get("src"), entry.get("dst"),
                                entry.get("edge_type", "RELATED"), entry.get("weight", 1.0))
                    else:
                        raise ValueError(f"must be an Edge, a 2-4 tuple or a mapping, got {entry!r}")
                    prepared.append(self.store.prepare_edge(self.workspace_id, *args))
                except ValueError as exc:
                    raise type(exc)(f"edges[{pos}]: {exc}") from None
            self.store.add_edges(self.workspace_id, prepared, self.clock.now())
        return len(prepared)

    def _add_edge_frame(self, frame) -> int:
        columns = set(frame.columns)
        missing = {"src", "dst"} - columns
        extra = columns - {"src", "dst", "edge_type", "weight"}
        if missing or extra:
            raise ValueError(f"edges frame must have columns src, dst and optionally edge_type, "
                             f"weight; missing {sorted(missing)}, unexpected {sorted(extra)}")

        with self.store.single_write():  # one write (its commit lets gets read)
            src, dst, types, weights = self.store.prepare_edge_columns(
                self.workspace_id, frame["src"].tolist(), frame["dst"].tolist(),
                frame["edge_type"].tolist() if "edge_type" in columns else "RELATED",
                frame["weight"].to_numpy() if "weight" in columns else None)
            self.store.add_edge_arrays(self.workspace_id, src, dst, types, weights,
                                       self.clock.now())
        return len(frame)

    def get_edges(self, item_id: str | None = None) -> list[dict[str, Any]]:
        """Edges of this workspace (touching ``item_id`` when given), in insertion order."""
        return self.store.edge_list(self.workspace_id, item_id)

    # ------------------------------------------------------------------ explicit retrieval
    def get(self, item_id: str, *, reinforce: bool = True) -> dict[str, Any]:
        """Return one item as a dict; an explicit retrieval, so it reinforces activation.

        ``reinforce=False`` reads without side effects: no activation change, no history
        event, no journal row (what the service does for a key that may only read).

        The item is read without the store's lock unless a write changes state meanwhile
        (:meth:`memlab._rwlock.RWLock.optimistic`), so a get does not wait behind writes, not
        even a write's fsync; its reinforcement is applied at once when the write lock is free,
        else queued (:mod:`memlab._reinforce`).

        Raises
        ------
        UnknownItemError
            (a ValueError) when ``item_id`` is not in this workspace.
        """
        _check_reinforce(reinforce)
        self.store.reinforcements.settle()  # with own_reads: this thread's queued ones first

        def read():
            # the workspace is looked up inside the checked read: a failed write's undo
            # replaces the store's workspace objects, and a read of the old one would pass
            ws = self._ws
            idx = ws.require(item_id)
            return ws, idx, ws.item_dict(idx)

        # without the lock unless a write's exclusive section overlaps the read (then under
        # the shared side): a get never waits behind a write's fsync (RWLock.optimistic)
        ws, idx, item = self.store.lock.optimistic(read)
        if not reinforce:
            return item

        def again():  # under the exclusive lock, right after the reinforcement
            if self.store._workspaces.get(self.workspace_id) is not ws \
                    or ws.row_of(item_id) != idx:
                return None  # undone since the read: not reinforced
            return ws.item(idx).to_dict()

        # applied at once when the lock is free (the item is then read again, with its new
        # history event, as before), else queued: see memlab._reinforce. The item's id goes
        # with it: applied only while that number still holds that item
        again = self.store.reinforcements.submit([self._retrieval([idx], self.clock.now(), "get")],
                                                 then=again, ids=[[item_id]])
        return item if again is None else again

    def _retrieval(self, idx: list[int], now, kind: str) -> dict[str, Any]:
        """The keyword arguments of one :meth:`MemoryStore.record_retrieval` call."""
        return {"workspace_id": self.workspace_id, "idx": idx, "now": now,
                "increment": self.config.activation_increment,
                "half_life_h": self.config.activation_half_life_h, "kind": kind}

    def _reinforce_searches(self, ranked: list, hits: list[list[dict]], reinforce: bool) -> None:
        """Reinforce each query's hits (:meth:`search`, :meth:`search_many`), query by query in
        order, with one clock reading for the call: at once if the store's lock is free, else
        queued (:mod:`memlab._reinforce`), each with its hits' ids (applied only to the items
        the search returned). Called after the read lock is released."""
        if reinforce:
            now = self.clock.now()
            self.store.reinforcements.submit([self._retrieval(docs.tolist(), now, "search")
                                              for docs, _ in ranked],
                                             ids=[[hit["item_id"] for hit in query_hits]
                                                  for query_hits in hits])

    def search(self, query: str, top_k: int = 10, *,
               reinforce: bool = True) -> list[dict[str, Any]]:
        """BM25 search; returns up to ``top_k`` hits (best first) and reinforces each.

        ``reinforce=False`` searches without side effects (no activation change, no history
        event, no journal row); the hits are the same.

        The search runs under the store's shared lock, beside other reads; the reinforcement
        is applied before it returns when the write lock is free, else queued and applied in
        order by the next write (:mod:`memlab._reinforce`).

        Each hit is ``{"item_id", "content", "memory_type", "metadata", "bm25", "score"}`` with
        ``bm25`` the raw BM25 (``score``, the same number, is its deprecated name: "score" means
        the composite in a context record; reading ``hit["score"]`` or ``hit.get("score")``
        raises a DeprecationWarning, and the key goes in the next release). Each hit is a
        :class:`SearchHit`, a plain dict. Anchors and archived items are not searched.

        Examples
        --------
        >>> mem = Memory(); _ = mem.add("deploys run on fridays"); _ = mem.add("lunch is pizza")
        >>> [hit["content"] for hit in mem.search("friday deploys")]
        ['deploys run on fridays']
        """
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {query!r}")
        check_text(query, "query")
        _check_search_args(top_k, reinforce)
        self.store.reinforcements.settle()  # with own_reads: this thread's queued ones first
        with self.store.lock.shared():  # a read: searches run side by side
            ws = self._ws  # under the lock: an undo may replace the workspace before it
            # the relevance stage surfacing runs, with the store's own analyzer
            ranked = [bm25_hits(ws, self.config, query, top_k)]
            out = _search_hits(ws, *ranked[0])
        self._reinforce_searches(ranked, [out], reinforce)
        return out

    # ------------------------------------------------------------------ surfacing
    def get_working_context(self, session_id: str, query: str, k: int = 20,
                            max_tokens: int | None = None, strategy: str | None = None
                            ) -> dict[str, Any]:
        """The items to put in front of the model this turn (SPEC §3).

        Parameters
        ----------
        session_id : str
            Session scope of anchors and pins (non-empty).
        query : str
            The turn's query text.
        k : int
            ``1..100``. Router mode: the maximum number of non-mandatory items; the session's
            anchors and pins come on top of it. Legacy mode (the seed's rule): the maximum number
            of items in total. Anchors, and pinned items the query retrieved, are ranked first
            but count against ``k`` like any other item (``k=1`` with two anchors surfaces only
            the first); a pinned item the query did not retrieve is not fetched.
        max_tokens : int, optional
            Soft token budget (``max(1, len(content) // 4)`` tokens per item). Router mode:
            mandatory items always go in, the others while the budget lasts. Legacy mode: every
            item, mandatory or not, goes in only while the budget lasts.
        strategy : str, optional
            Override the router. Legacy mode accepts only ``None`` or ``"fast:recency"``.

        Returns
        -------
        dict
            ``decision_id``, ``strategy_used``, ``items`` (each with ``score_breakdown``),
            ``drift_warnings``, ``tokens_used``, ``tokens_budget``, ``deprecation``. The full
            record is in :attr:`last_context_record`; the router's decision in
            :attr:`last_surfacing_decision`. Never reinforces activation.

        Raises
        ------
        ValueError
            Bad ``k``, ``session_id``, ``query``, ``max_tokens`` or ``strategy``.
        BudgetTooSmall
            ``max_tokens`` is below the smallest anchor of the session.
        """
        validate_id(session_id, "session_id")
        if not isinstance(query, str):
            raise ValueError(f"query must be a string, got {query!r}")
        check_text(query, "query")
        if isinstance(k, bool) or not isinstance(k, int) or not 1 <= k <= 100:
            raise ValueError(f"k must be an int in 1..100, got {k!r}")
        if max_tokens is not None and (isinstance(max_tokens, bool) or not isinstance(max_tokens, int)
                                       or max_tokens < 1):
            raise ValueError(f"max_tokens must be None or an int >= 1, got {max_tokens!r}")
        requested = None
        if strategy is not None:
            requested = SurfacingStrategy.parse(strategy, "strategy")
            if self.surfacing_mode == "legacy" and requested is not SurfacingStrategy.FAST_RECENCY:
                raise ValueError(f"strategy {strategy!r} is not available in legacy mode; "
                                 f"legacy accepts only None or 'fast:recency'")
        self.store.reinforcements.settle()  # with own_reads: this thread's queued ones first
        with self.store.lock.shared():  # a read: contexts assemble side by side
            ws = self._ws  # under the lock: an undo may replace the workspace before it
            response, record = assemble(
                self.store, ws, session_id=session_id, query=query, k=k,
                max_tokens=max_tokens, requested=requested, mode=self.surfacing_mode,
                config=self.config, now=self.clock.now(), rng=self._rng)
        self.last_surfacing_decision = record.decision
        self.last_context_record = record
        if self.on_record is not None:
            self.on_record(record)
        return response

    # ------------------------------------------------------------------ pins and anchors
    def pin_item(self, session_id: str, item_id: str, weight: float = 1.0) -> None:
        """Force-include ``item_id`` in the session's contexts; boost ``weight * 0.3`` (router).

        The first pin binds the session to this workspace for ``pin_ttl_h`` (24 h), refreshed by
        every pin write; pinning from another workspace meanwhile raises
        :class:`~memlab.errors.SessionPinWorkspaceConflict`.
        """
        self.store.pin(self.workspace_id, session_id, item_id, weight, self.clock.now(),
                       self.config.pin_ttl_h)

    def unpin_item(self, session_id: str, item_id: str) -> None:
        """Remove a pin (no-op when absent)."""
        self.store.unpin(self.workspace_id, session_id, item_id, self.clock.now(),
                         self.config.pin_ttl_h)

    def get_pins(self, session_id: str) -> dict[str, float]:
        """``{item_id: weight}``; ``{}`` when unknown, expired or bound to another workspace."""
        return self.store.pins(self.workspace_id, session_id, self.clock.now())

    def add_anchor(self, session_id: str, content: str, anchor_type: str = "goal",
                   metadata: dict | None = None, item_id: str | None = None) -> str:
        """Add an always-included, session-scoped item (``memory_type="anchor"``); returns its id."""
        validate_id(session_id, "session_id")
        validate_text(anchor_type, "anchor_type")
        meta = validate_metadata(metadata)  # a ValueError naming metadata, not a TypeError
        meta.update({"anchor_type": anchor_type, "session_id": session_id})
        new = self.store.prepare_item(content, "anchor", meta, item_id=item_id)
        with self.store.single_write():  # one write (its commit lets gets read)
            return self.store.add_anchor(self.workspace_id, session_id, new, self.clock.now(),
                                         self.config.activation_initial)

    def flag_anchor_for_review(self, session_id: str, anchor_id: str, reason: str) -> None:
        """Mark an anchor as drifting; it then appears in ``drift_warnings`` with ``reason``."""
        self.store.flag_anchor(self.workspace_id, session_id, anchor_id, reason)

    def clear_anchor_review(self, session_id: str, anchor_id: str) -> None:
        """Remove an anchor's review mark (no-op when absent)."""
        self.store.clear_anchor_flag(self.workspace_id, session_id, anchor_id)

    def drift_warnings(self, session_id: str) -> list[dict[str, Any]]:
        """The anchors of ``session_id`` marked for review, as in the context response."""
        validate_id(session_id, "session_id")
        return self.store.drift_warnings(self.workspace_id, session_id)

    def flush(self) -> None:
        """Write buffered reinforcements to the journal now (:meth:`MemoryStore.flush`)."""
        self.store.flush()

    def close(self) -> None:
        """Write buffered reinforcements and close the database file (:meth:`MemoryStore.close`;
        a durable store is also closed at interpreter exit). ``with Memory(path=...) as mem:``
        closes it at the end of the block.

        Examples
        --------
        >>> with Memory() as mem:
        ...     _ = mem.add("deploys run on fridays")
        """
        self.store.close()

    def __enter__(self) -> "Memory":
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def compact(self):
        """Compact the durable store's journal into a snapshot (see
        :meth:`MemoryStore.compact`): a reopen then loads the snapshot and replays only the
        rows written after it. Covers every workspace of the store, not only this one.

        Returns
        -------
        memlab.snapshot.CompactionReport

        Raises
        ------
        ValueError
            The store is in memory (no ``path``).

        Examples
        --------
        >>> import tempfile, pathlib
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "m.db"
        >>> mem = Memory(path=str(path)); _ = mem.add("the deploy runs on fridays")
        >>> mem.compact().rows_removed
        2
        >>> mem.store.close(); len(Memory(path=str(path)))
        1
        """
        return self.store.compact()

    # ------------------------------------------------------------------ batch search
    def search_many(self, queries: list[str], top_k: int = 10, *,
                    reinforce: bool = True) -> list[list[dict[str, Any]]]:
        """:meth:`search` for many queries at once: one list of hits per query, in order.

        Equal to ``[self.search(q, top_k, reinforce=reinforce) for q in queries]`` (same hits,
        scores, and reinforcement, applied query by query): the same BM25 stage, batched
        (:func:`memlab.surfacing.stages.retrieval.bm25_hits_many`, one call of
        :meth:`memlab.signals.bm25.BM25Index.batch_top_k`, compiled with the ``fast`` extra).

        Examples
        --------
        >>> mem = Memory(); _ = mem.add("deploys run on fridays"); _ = mem.add("lunch is pizza")
        >>> [[hit["content"] for hit in hits] for hits in mem.search_many(["friday", "pizza"])]
        [['deploys run on fridays'], ['lunch is pizza']]
        """
        if isinstance(queries, str) or not isinstance(queries, (list, tuple)):
            raise ValueError(f"queries must be a list of strings, got {queries!r}")
        for query in queries:
            if not isinstance(query, str):
                raise ValueError(f"queries must hold strings only, got {query!r}")
            check_text(query, "query")
        _check_search_args(top_k, reinforce)
        self.store.reinforcements.settle()  # with own_reads: this thread's queued ones first
        with self.store.lock.shared():  # a read: searches run side by side
            ws = self._ws  # under the lock: an undo may replace the workspace before it
            # the relevance stage search and surfacing run, batched
            ranked = bm25_hits_many(ws, self.config, queries, top_k)
            out = [_search_hits(ws, docs, scores) for docs, scores in ranked]
        self._reinforce_searches(ranked, out, reinforce)
        return out
