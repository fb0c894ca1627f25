"""Maintenance, the seed's "reasoner" (SPEC §6.3): revise duplicates, decay, forget, inhibit.

Every pass first *plans* (reads only) and then *applies* its plan, so a dry run returns exactly
the diff a real run would apply and leaves the store byte-for-byte unchanged. Passes run in the
order revise → decay → forget → inhibition, each planning on the state the previous ones would
leave (a merged-away item is not also forgotten; forgetting sees decayed salience).

``Reasoner.after_event`` is what ingest and query call: it runs only when enabled for that event,
and a failure is recorded in :attr:`Reasoner.failures`, never raised into the caller.
"""

from __future__ import annotations

import dataclasses
import math
import threading
import traceback
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from memlab.model import HISTORY_CAP
from memlab.text import normalise_title, words
from memlab.topics import render_topic

__all__ = ["MaintenanceConfig", "MaintenanceReport", "Reasoner", "PASSES", "shingles",
           "jaccard", "near_duplicate_groups", "near_duplicate_pairs"]

PASSES = ("revise_duplicates", "decay_sweep", "forget_low_salience", "capacity_inhibition")


@dataclass(frozen=True)
class MaintenanceConfig:
    """Maintenance settings (frozen, validated).

    Parameters
    ----------
    enabled : bool
        Run after the events in ``on_events`` (on demand always works).
    passes : tuple of str
        Which passes a run makes, from :data:`PASSES`.
    revise_memory_types : tuple of str
        Items considered for duplicate merging (conversation turns are left alone by default).
    near_duplicate_threshold : float
        Shingled Jaccard similarity (word ``shingle_size``-grams) at or above which two items are
        duplicates; titles equal after normalisation always are.
    forget_soft_limit, forget_threshold, forget_memory_types
        Archive items of those types with salience below the threshold, only while the workspace
        holds at least ``forget_soft_limit`` of them.
    salience_half_life_days, decay_memory_types
        The decay sweep halves salience every half-life (since the previous sweep).
    capacity, inhibition_fraction, inhibition_factor
        Capacity inhibition (SPEC §2.3, off while ``capacity`` is None): above ``capacity``
        surfaceable items, the bottom ``fraction`` by activation get their activation multiplied
        by ``factor``.
    """

    enabled: bool = False
    on_events: tuple[str, ...] = ("ingest", "query")
    passes: tuple[str, ...] = PASSES
    revise_memory_types: tuple[str, ...] = ("topic", "concept")
    near_duplicate_threshold: float = 0.9
    shingle_size: int = 3
    forget_soft_limit: int = 500
    forget_threshold: float = 0.05
    forget_memory_types: tuple[str, ...] = ("topic",)
    salience_half_life_days: float = 30.0
    decay_memory_types: tuple[str, ...] = ("topic",)
    capacity: int | None = None
    inhibition_fraction: float = 0.2
    inhibition_factor: float = 0.7

    def __post_init__(self) -> None:
        for name in ("on_events", "passes", "revise_memory_types", "forget_memory_types",
                     "decay_memory_types"):
            value = getattr(self, name)
            if isinstance(value, str) or not all(isinstance(v, str) for v in value):
                raise ValueError(f"{name} must be a tuple of strings, got {value!r}")
            object.__setattr__(self, name, tuple(value))
        unknown = set(self.passes) - set(PASSES)
        if unknown:
            raise ValueError(f"passes must be among {list(PASSES)}, got {sorted(unknown)}")
        for name, low, high in (("near_duplicate_threshold", 0.0, 1.0),
                                ("forget_threshold", 0.0, 10.0),
                                ("inhibition_fraction", 0.0, 1.0),
                                ("inhibition_factor", 0.0, 1.0)):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) \
                    or not low <= value <= high:
                raise ValueError(f"{name} must be in [{low}, {high}], got {value!r}")
        if not isinstance(self.salience_half_life_days, (int, float)) \
                or not self.salience_half_life_days > 0:
            raise ValueError(f"salience_half_life_days must be > 0, "
                             f"got {self.salience_half_life_days!r}")
        for name, optional in (("shingle_size", False), ("forget_soft_limit", False),
                               ("capacity", True)):
            value = getattr(self, name)
            if value is None and optional:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {value!r}")

    def replace(self, **changes: Any) -> "MaintenanceConfig":
        return dataclasses.replace(self, **changes)


@dataclass
class MaintenanceReport:
    """One run: the event, whether it was a dry run, and the actions (applied or planned)."""

    event: str
    dry_run: bool
    ts: str
    actions: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for action in self.actions:
            out[action["action"]] = out.get(action["action"], 0) + 1
        return out


def shingles(text: str, size: int = 3) -> frozenset[tuple[str, ...]]:
    """Word ``size``-grams of ``text``'s :func:`~memlab.text.words` (the whole text when shorter).

    Examples
    --------
    >>> sorted(shingles("The deploy runs on Fridays", 3))[:2]
    [('deploy', 'runs', 'on'), ('runs', 'on', 'fridays')]
    """
    found = words(text)
    if len(found) <= size:
        return frozenset([tuple(found)]) if found else frozenset()
    return frozenset(tuple(found[i:i + size]) for i in range(len(found) - size + 1))


def jaccard(a: frozenset, b: frozenset) -> float:
    """``|a & b| / |a | b|`` (0 for two empty sets)."""
    union = len(a | b)
    return len(a & b) / union if union else 0.0


class Reasoner:
    """Maintenance of one memory's workspace.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory()
    >>> a = mem.add("JWT tokens expire after 15 minutes", memory_type="concept",
    ...             metadata={"title": "Token expiry"})
    >>> b = mem.add("JWT tokens expire after 15 minutes.", memory_type="concept",
    ...             metadata={"title": "token expiry!"})
    >>> report = Reasoner(mem).run(dry_run=True)
    >>> [(x["action"], x["keep"], x["merge"], x["reason"]) for x in report.actions]
    [('merge', 'item-000000', 'item-000001', 'title')]
    """

    def __init__(self, memory, config: MaintenanceConfig | None = None, *,
                 attach: bool = False) -> None:
        if config is None:
            config = MaintenanceConfig()
        if not isinstance(config, MaintenanceConfig):
            raise ValueError(f"config must be a MaintenanceConfig, got {config!r}")
        self.memory = memory
        self.config = config
        self.reports: list[MaintenanceReport] = []
        self.failures: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        if attach:
            memory.reasoner = self

    # ------------------------------------------------------------------ entry points
    def after_event(self, event: str) -> MaintenanceReport | None:
        """Run for ``event`` if enabled; a failure is recorded, never raised."""
        if not self.config.enabled or event not in self.config.on_events:
            return None
        try:
            return self.run(event)
        except Exception as exc:  # noqa: BLE001 - maintenance must never break the caller
            self.failures.append({"event": event, "error": f"{type(exc).__name__}: {exc}",
                                  "traceback": traceback.format_exc(),
                                  "ts": self.memory.clock.now().isoformat()})
            return None

    def run(self, event: str = "on_demand", *, dry_run: bool = False,
            passes: tuple[str, ...] | None = None) -> MaintenanceReport:
        """Plan the passes and (unless ``dry_run``) apply them; returns the report."""
        if not isinstance(dry_run, bool):
            raise ValueError(f"dry_run must be a bool, got {dry_run!r}")
        passes = self.config.passes if passes is None else tuple(passes)
        unknown = set(passes) - set(PASSES)
        if unknown:
            raise ValueError(f"passes must be among {list(PASSES)}, got {sorted(unknown)}")
        mem = self.memory
        store = mem.store
        with self._lock, store.lock:
            ws = store.workspace(mem.workspace_id)
            now = mem.clock.now()
            state = _Plan(ws)
            actions: list[dict[str, Any]] = []
            for name in PASSES:  # fixed order, whatever order the caller listed them in
                if name in passes:
                    actions += getattr(self, f"_plan_{name}")(ws, state, now)
            if not dry_run:
                with store.transaction():
                    for action in actions:
                        self._apply(ws, action, now)
                    if "decay_sweep" in passes:
                        store.set_last_decay(mem.workspace_id, now.timestamp())
            report = MaintenanceReport(event, dry_run, now.isoformat(), actions)
            self.reports.append(report)
            del self.reports[:-100]
            return report

    # ------------------------------------------------------------------ planning
    def _plan_revise_duplicates(self, ws, state: "_Plan", now) -> list[dict]:
        cfg = self.config
        types = set(cfg.revise_memory_types)
        live = [i for i, item in enumerate(ws.iter_items())
                if item.memory_type in types and not item.archived]
        parent = {i: i for i in live}

        def find(i: int) -> int:
            while parent[i] != i:
                parent[i] = parent[parent[i]]
                i = parent[i]
            return i

        def union(a: int, b: int) -> None:
            ra, rb = find(a), find(b)
            if ra != rb:
                parent[max(ra, rb)] = min(ra, rb)

        # Equal titles: a star from the first item with the title, O(items).
        title_pairs: set[tuple[int, int]] = set()
        title_members: dict[tuple[str, str], list[int]] = {}
        title_of: dict[int, tuple[str, str]] = {}
        for i in live:
            key = _title_key(ws.item(i))
            if key is None:
                continue
            title_of[i] = key
            members = title_members.setdefault(key, [])
            if members:
                union(members[0], i)
                title_pairs.add((members[0], i))
            members.append(i)
        # Near duplicates: identical shingle sets form one group (joined as a chain, never as
        # all their pairs), and only one representative per group is compared with the others.
        sets = {i: shingles(ws.item(i).content, cfg.shingle_size) for i in live}
        dup_groups, rep_pairs = near_duplicate_groups(sets, cfg.near_duplicate_threshold)
        group_of: dict[int, int] = {}
        for rep, members in dup_groups.items():
            for i in members:
                group_of[i] = rep
                union(rep, i)
        near_rep: dict[int, int] = {}  # per group: the smallest member of any near group
        for (ra, rb), _sim in rep_pairs.items():
            union(ra, rb)
            near_rep[ra] = min(near_rep.get(ra, rb), rb)  # a representative is its group's min
            near_rep[rb] = min(near_rep.get(rb, ra), ra)

        def reason_of(a: int, b: int) -> tuple[str, float] | None:
            """Why ``a`` and ``b`` are duplicates directly (a title wins), or ``None``."""
            pair = (min(a, b), max(a, b))
            if pair in title_pairs:
                return "title", 1.0
            ga, gb = group_of.get(a), group_of.get(b)
            if ga is None or gb is None:
                return None
            if ga == gb:
                return "near_duplicate", 1.0
            sim = rep_pairs.get((min(ga, gb), max(ga, gb)))
            return None if sim is None else ("near_duplicate", sim)

        def first_partner(x: int) -> int | None:
            """The smallest item ``x`` is directly a duplicate of: its first pair in order."""
            found = []

            def first_other(members: list[int]) -> None:  # members are in increasing order
                if members[0] != x:
                    found.append(members[0])
                elif len(members) > 1:
                    found.append(members[1])

            key = title_of.get(x)
            if key is not None:
                first_other(title_members[key])
            g = group_of.get(x)
            if g is not None:
                first_other(dup_groups[g])
                if g in near_rep:
                    found.append(near_rep[g])
            return min(found) if found else None

        groups: dict[int, list[int]] = {}
        for i in live:
            groups.setdefault(find(i), []).append(i)
        actions = []
        created = ws.created_column()
        for members in groups.values():
            if len(members) < 2:
                continue
            keep = min(members, key=lambda i: (created[i], i))  # the older one
            for other in sorted(members):
                if other == keep:
                    continue
                found = reason_of(keep, other)
                if found is None:  # joined via a third item: its first pair says why
                    partner = first_partner(other)
                    found = ("transitive", 0.0) if partner is None \
                        else reason_of(other, partner)
                reason, sim = found
                state.archived.add(other)
                actions.append({
                    "action": "merge", "keep": ws.item_id_of(keep),
                    "merge": ws.item_id_of(other),
                    "reason": reason, "similarity": sim,
                    "edges_moved": len(ws.graph_view().table.rows_touching([other])),
                    "fields_merged": sorted(ws.topic_fields_of(other) or {}),
                })
                state.salience[keep] = max(state.salience_of(keep), state.salience_of(other))
        return actions

    def _plan_decay_sweep(self, ws, state: "_Plan", now) -> list[dict]:
        cfg = self.config
        types = set(cfg.decay_memory_types)
        now_ts = now.timestamp()
        half_life_s = cfg.salience_half_life_days * 86400.0
        actions = []
        created, last_decay = ws.created_column(), ws.last_decay()
        for i, item in enumerate(ws.iter_items()):
            if item.memory_type not in types or item.archived or i in state.archived:
                continue
            since = created[i] if last_decay is None else max(last_decay, created[i])
            elapsed = max(0.0, now_ts - since)
            if elapsed == 0:
                continue
            before = state.salience_of(i)
            after = round(before * math.exp(-math.log(2) * elapsed / half_life_s), 12)
            if after != before:
                state.salience[i] = after
                actions.append({"action": "decay", "item_id": ws.item_id_of(i),
                                "salience_before": before, "salience_after": after,
                                "elapsed_h": elapsed / 3600.0})
        return actions

    def _plan_forget_low_salience(self, ws, state: "_Plan", now) -> list[dict]:
        cfg = self.config
        types = set(cfg.forget_memory_types)
        live = [i for i, item in enumerate(ws.iter_items())
                if item.memory_type in types and not item.archived and i not in state.archived]
        if len(live) < cfg.forget_soft_limit:
            return []
        actions = []
        for i in live:
            salience = state.salience_of(i)
            if salience < cfg.forget_threshold:
                state.archived.add(i)
                actions.append({"action": "archive", "item_id": ws.item_id_of(i),
                                "reason": "low_salience", "salience": salience,
                                "threshold": cfg.forget_threshold,
                                "live_count": len(live)})
        return actions

    def _plan_capacity_inhibition(self, ws, state: "_Plan", now) -> list[dict]:
        cfg = self.config
        if cfg.capacity is None:
            return []
        eligible = np.flatnonzero(ws.eligible_mask())
        eligible = eligible[~np.isin(eligible, np.array(sorted(state.archived), np.int64))]
        if len(eligible) <= cfg.capacity:
            return []
        activation = ws.activation_state().seed_score(eligible, now.timestamp(),
                                                      self.memory.config.activation_half_life_h)
        count = int(math.floor(len(eligible) * cfg.inhibition_fraction))
        order = np.lexsort((eligible, activation))[:count]
        stored = ws.stored_activation()
        return [{"action": "inhibit", "item_id": ws.item_id_of(i),
                 "activation_before": float(activation[p]),
                 "stored_before": float(stored[i]),
                 "stored_after": float(stored[i] * cfg.inhibition_factor)}
                for p, i in ((p, int(eligible[p])) for p in order.tolist())]

    # ------------------------------------------------------------------ applying
    def _apply(self, ws, action: dict, now) -> None:
        store, wid = self.memory.store, self.memory.workspace_id
        kind = action["action"]
        if kind == "merge":
            _merge(store, ws, wid, ws.require(action["keep"]), ws.require(action["merge"]),
                   action, now)
        elif kind == "decay":
            store.set_salience(wid, [ws.require(action["item_id"])], [action["salience_after"]])
        elif kind == "archive":
            store.archive(wid, [ws.require(action["item_id"])], now, "low_salience",
                          {"salience": action["salience"]})
        elif kind == "inhibit":
            i = ws.require(action["item_id"])
            store.set_stored_activation(wid, [i], [action["stored_after"]])
            store.record_event(wid, i, now, "inhibited",
                               {"stored_before": action["stored_before"],
                                "stored_after": action["stored_after"]})


class _Plan:
    """What earlier passes of a run would change, so later ones plan on it."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.salience: dict[int, float] = {}
        self.archived: set[int] = set()

    def salience_of(self, i: int) -> float:
        return self.salience.get(i, self.ws.item(i).salience)


def _title_key(item) -> tuple[str, str] | None:
    meta = item.metadata
    if isinstance(meta.get("node_type"), str) and isinstance(meta.get("label"), str):
        return meta["node_type"], normalise_title(meta["label"])
    title = meta.get("title")
    if isinstance(title, str) and normalise_title(title):
        return item.memory_type, normalise_title(title)
    return None


def near_duplicate_groups(sets: dict[int, frozenset], threshold: float,
                          stats: dict[str, int] | None = None
                          ) -> tuple[dict[int, list[int]], dict[tuple[int, int], float]]:
    """Near duplicates as groups of identical sets plus the near pairs between groups.

    Items whose sets are equal (and non-empty) have :func:`jaccard` 1.0 with each other, so they
    form one group, listed once; only its representative (its first member in ``sets`` order)
    takes part in the pair search. The work therefore grows with the number of items plus the
    number of near pairs between *distinct* sets, never with the square of a group's size.

    Parameters
    ----------
    sets : dict of int to frozenset
        Each item's shingle set (see :func:`shingles`), keyed by item number.
    threshold : float
        Jaccard similarity at or above which (and above 0) two sets are near duplicates.
    stats : dict, optional
        When given, ``"groups"`` (distinct non-empty sets) and ``"comparisons"`` (Jaccard
        similarities computed) are added to it, so callers and tests can see the work done.

    Returns
    -------
    groups : dict of int to list of int
        Representative to all members of its group (the representative first, then the others
        in ``sets`` order); every distinct non-empty set has a group, even a group of one.
    pairs : dict of (int, int) to float
        ``(a, b)`` for representatives ``a < b`` whose sets are near duplicates, to their
        similarity; every member of ``a``'s group is then a near duplicate of every member of
        ``b``'s with that same similarity.

    Examples
    --------
    >>> a = shingles("the deploy runs on fridays at noon")
    >>> b = shingles("the deploy runs on fridays at noon!")
    >>> c = shingles("lunch is pizza on fridays")
    >>> near_duplicate_groups({0: a, 1: b, 2: c, 3: a}, 0.9)
    ({0: [0, 1, 3], 2: [2]}, {})
    >>> d = shingles("the deploy runs on mondays at noon")
    >>> near_duplicate_groups({0: a, 1: d, 2: a}, 0.2)
    ({0: [0, 2], 1: [1]}, {(0, 1): 0.25})
    """
    groups: dict[int, list[int]] = {}
    rep_of_set: dict[frozenset, int] = {}
    for i, found in sets.items():
        if not found:
            continue
        rep = rep_of_set.setdefault(found, i)
        groups.setdefault(rep, []).append(i)
    reps = {rep: sets[rep] for rep in groups}
    pairs = _prefix_filtered_pairs(reps, threshold, stats)
    if stats is not None:
        stats["groups"] = stats.get("groups", 0) + len(groups)
    return groups, pairs


def near_duplicate_pairs(sets: dict[int, frozenset], threshold: float
                         ) -> dict[tuple[int, int], float]:
    """Every pair ``(i, j)``, ``i < j``, whose sets' :func:`jaccard` is ``>= threshold`` and > 0.

    The answer is exactly the all-pairs one (an oracle test compares them); it is built from
    :func:`near_duplicate_groups`, so the search is near-linear, but the answer itself holds every
    pair of a group of identical sets: ``k`` identical items give ``k * (k - 1) / 2`` pairs. Use
    :func:`near_duplicate_groups` where that can be large (the maintenance pass does).

    Examples
    --------
    >>> a = shingles("the deploy runs on fridays at noon")
    >>> b = shingles("the deploy runs on fridays at noon!")
    >>> c = shingles("lunch is pizza on fridays")
    >>> near_duplicate_pairs({0: a, 1: b, 2: c}, 0.9)
    {(0, 1): 1.0}
    """
    groups, rep_pairs = near_duplicate_groups(sets, threshold)
    pairs: dict[tuple[int, int], float] = {}
    for members in groups.values():
        for x, i in enumerate(members):
            for j in members[x + 1:]:
                pairs[(min(i, j), max(i, j))] = 1.0
    for (ra, rb), sim in rep_pairs.items():
        for i in groups[ra]:
            for j in groups[rb]:
                pairs[(min(i, j), max(i, j))] = sim
    return dict(sorted(pairs.items()))


def _prefix_filtered_pairs(sets: dict[int, frozenset], threshold: float,
                           stats: dict[str, int] | None) -> dict[tuple[int, int], float]:
    """The near pairs among ``sets`` (keyed ``(min, max)``), by prefix filtering.

    Prefix filtering (Chaudhuri et al. 2006; Bayardo et al. 2007's All-Pairs): shingles are
    ordered rarest first; two sets with Jaccard ``>= t`` share at least ``floor(t * n)``
    shingles, so each one's first ``n - floor(t * n) + 1`` shingles must meet. Only pairs that
    meet there and pass the size bound ``min/max >= t`` are compared, so the answer is exactly
    the all-pairs one while the work grows with the number of near pairs, not with the square of
    the sets: pairs sharing only common shingles ("the deploy runs") are never compared.
    """
    frequency: dict = {}
    for found in sets.values():
        for shingle in found:
            frequency[shingle] = frequency.get(shingle, 0) + 1
    rank = {shingle: pos for pos, shingle in
            enumerate(sorted(frequency, key=lambda sh: (frequency[sh], sh)))}
    index: dict[int, list[int]] = {}
    pairs: dict[tuple[int, int], float] = {}
    comparisons = 0
    for i, found in sets.items():
        n = len(found)
        if not n:
            continue
        overlap = max(1, min(n, math.floor(threshold * n)))
        prefix = sorted(rank[sh] for sh in found)[:n - overlap + 1]
        candidates: set[int] = set()
        for token in prefix:
            bucket = index.get(token)
            if bucket is None:
                index[token] = [i]
            else:
                candidates.update(bucket)
                bucket.append(i)
        for j in sorted(candidates):
            other = sets[j]
            small, large = sorted((n, len(other)))
            if small / large < threshold:  # jaccard <= min/max: cannot reach the threshold
                continue
            comparisons += 1
            sim = jaccard(found, other)
            if sim >= threshold and sim > 0:
                pairs[(min(i, j), max(i, j))] = sim
    if stats is not None:
        stats["comparisons"] = stats.get("comparisons", 0) + comparisons
    return pairs


def _merge(store, ws, wid: str, keep: int, other: int, action: dict, now) -> None:
    """Merge item ``other`` into ``keep``: edges, topic fields, salience; archive ``other``."""
    table = ws.graph_view().table
    rows = table.rows_touching([other])
    src, dst = table.src.view()[rows], table.dst.view()[rows]
    codes, weights = table.code.view()[rows], table.weight.view()[rows]
    moved = []
    for s, d, c, w in zip(src.tolist(), dst.tolist(), codes.tolist(), weights.tolist()):
        s2, d2 = (keep if s == other else s), (keep if d == other else d)
        if s2 == d2:
            continue
        name = table.type_names[c]
        existing = table.row_of(s2, d2, name)
        weight = max(w, table.weight.data[existing]) if existing is not None else w
        moved.append((s2, d2, name, weight))
    store.remove_edges(wid, rows)
    if moved:
        store.add_edges(wid, moved, now)
    kept_fields = ws.topic_fields_of(keep)
    other_fields = ws.topic_fields_of(other) or {}
    if kept_fields is not None:
        kept_fields = {name: _copy_field(entry) for name, entry in kept_fields.items()}
        for name, entry in other_fields.items():
            if name not in kept_fields:
                kept_fields[name] = _copy_field(entry)
            else:
                target = kept_fields[name]
                merged = {v["version_id"]: dict(v) for v in target["history"] + entry["history"]}
                history = sorted(merged.values(), key=lambda v: (v["valid_from"],
                                                                 v["recorded_at"]), reverse=True)
                target["dropped_versions"] = target.get("dropped_versions", 0) + \
                    entry.get("dropped_versions", 0) + max(0, len(history) - HISTORY_CAP)
                target["history"] = history[:HISTORY_CAP]
                target["salience"] = max(target["salience"], entry["salience"])
        store.set_topic_fields(wid, keep, kept_fields)
    keep_item, other_item = ws.item(keep), ws.item(other)
    store.set_salience(wid, [keep], [max(keep_item.salience, other_item.salience)])
    content = None
    if kept_fields is not None:
        content = render_topic(keep_item.metadata["title"], kept_fields)
    store.update_item(wid, keep, now, content=content, kind="merged",
                      detail={"from": other_item.item_id, "reason": action["reason"],
                              "similarity": action["similarity"],
                              "edges_moved": len(moved), "fields": action["fields_merged"]})
    store.archive(wid, [other], now, "merged_into", {"into": keep_item.item_id})


def _copy_field(entry: dict) -> dict:
    return {**entry, "history": [dict(v) for v in entry["history"]]}
