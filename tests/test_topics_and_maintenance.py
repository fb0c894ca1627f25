"""Topics with versioned fields, ingest/query (SPEC §6.2) and maintenance (SPEC §6.3)."""

import json
import random
import threading
from datetime import datetime, timezone

import pytest

from memlab import ManualClock, Memory, MemoryStore
from memlab.maintenance import MaintenanceConfig, Reasoner, jaccard, shingles
from memlab.model import HISTORY_CAP
from memlab.session import (PMMemoryStore, get_memory_status, promote_to_long_term,
                            resolve_context)
from memlab.topics import get_topic, ingest, query


@pytest.fixture
def mem():
    return Memory(surfacing_mode="router",
                  clock=ManualClock(datetime(2024, 3, 1, tzinfo=timezone.utc)))


def frozen(mem) -> str:
    return json.dumps(mem.store.serialize(), sort_keys=True)


# ---------------------------------------------------------------------------- ingest
def test_three_placements_version_fields_and_write_references(mem):
    db = ingest("new_topic", title="Orders database", fields={"engine": "postgres"}, memory=mem)
    svc = ingest("new_topic", title="Checkout service", memory=mem,
                 fields={"owner": "Lena", "depends_on": {"value": "orders db", "ref":
                                                        db["topic_id"]},
                         "replicas": {"value": 3, "type": "number", "salience": 4}})
    assert [c["op"] for c in svc["changes"]] == ["create_topic", "add_field", "add_field",
                                                "add_field"]
    ext = ingest("extend_topic", topic_id=svc["topic_id"], fields={"pager": "#checkout"},
                 memory=mem)
    assert ext["version_ids"] == [f"{svc['topic_id']}/pager@1"]
    mem.clock.advance(days=1)
    ver = ingest("version_field", topic_id=svc["topic_id"], field="owner", value="Omar",
                 why_changed="re-org", provenance="slack #eng", memory=mem)
    topic = get_topic(svc["topic_id"], memory=mem)
    owner = topic["fields"]["owner"]
    assert owner["value"] == "Omar" and owner["version_id"] == ver["version_ids"][0]
    assert [v["value"] for v in owner["history"]] == ["Omar", "Lena"]
    assert owner["history"][0]["why_changed"] == "re-org"
    assert owner["history"][0]["valid_from"] == "2024-03-02T00:00:00+00:00"
    assert topic["fields"]["replicas"] == {**topic["fields"]["replicas"], "value": 3,
                                           "type": "number", "salience": 4.0}
    assert mem.get_edges(svc["topic_id"]) == [{"src": svc["topic_id"], "dst": db["topic_id"],
                                              "edge_type": "LINKS_TO", "weight": 1.0}]
    # the topic's text follows its fields: BM25 and surfacing see the current owner
    ctx = mem.get_working_context("s1", "Omar checkout pager", k=3)
    assert ctx["items"][0]["item_id"] == svc["topic_id"]


def test_a_failed_ingest_writes_nothing(mem):
    t = ingest("new_topic", title="Payments", fields={"owner": "Ana"}, memory=mem)["topic_id"]
    before = frozen(mem)
    bad = [
        (dict(placement="teleport", title="x"), "placement"),
        (dict(placement="new_topic", title=""), "title"),
        (dict(placement="new_topic", title="Refunds", fields={"a": "ok", "b": {"value": "x",
              "ref": "missing-topic"}}), "ref"),
        (dict(placement="new_topic", title="Refunds", fields={"n": {"value": "x",
              "type": "number"}}), "number"),
        (dict(placement="new_topic", title="Refunds", fields={"n": {"value": 1,
              "type": "vector"}}), "type"),
        (dict(placement="new_topic", title="Refunds", fields={"n": {"value": 1, "colour": 2}}),
         "unknown keys"),
        (dict(placement="new_topic", title="Refunds", fields={"n": {"value": "x",
              "salience": 11}}), "salience"),
        (dict(placement="extend_topic", topic_id="missing-topic", fields={"a": "b"}),
         "topic_id"),
        (dict(placement="extend_topic", topic_id=t, fields={"owner": "dup"}), "already exists"),
        (dict(placement="extend_topic", topic_id=t, fields={}), "fields"),
        (dict(placement="version_field", topic_id=t, field="nope", value="x"), "field"),
        (dict(placement="version_field", topic_id=t, field="owner", value=""), "value"),
        (dict(placement="version_field", topic_id=t, field="owner", value="x",
              valid_from="yesterday-ish"), "valid_from"),
        (dict(placement="new_topic", topic_id=t, title="Again"), "already exists"),
    ]
    for kwargs, message in bad:
        with pytest.raises(ValueError, match=message):
            ingest(memory=mem, **kwargs)
        assert frozen(mem) == before, kwargs


def test_review14_a_topic_keeps_its_title_through_a_metadata_update(mem):
    # found by hypothesis: update(metadata={}) on a topic, then every read of it raised KeyError
    t = ingest("new_topic", title="Payments", fields={"owner": "Ana"}, memory=mem)["topic_id"]
    idx = mem.store.workspace(mem.workspace_id).index_of[t]
    before = frozen(mem)
    for metadata in ({}, {"title": ""}, {"title": 7}):
        with pytest.raises(ValueError, match="title"):
            mem.store.update_item(mem.workspace_id, idx, mem.clock.now(), metadata=metadata)
        assert frozen(mem) == before
    mem.store.update_item(mem.workspace_id, idx, mem.clock.now(),
                          metadata={"title": "Payments v2"})
    assert get_topic(t, memory=mem)["title"] == "Payments v2"
    assert query("Payments", memory=mem)["topics"][0]["topic_id"] == t


def test_field_history_is_capped_at_500_newest_first(mem):
    t = ingest("new_topic", title="Counter", fields={"n": {"value": 0, "type": "number"}},
               memory=mem)["topic_id"]
    for value in range(1, HISTORY_CAP + 10):
        ingest("version_field", topic_id=t, field="n", value=value, memory=mem)
    field = get_topic(t, memory=mem)["fields"]["n"]
    assert len(field["history"]) == HISTORY_CAP and field["dropped_versions"] == 10
    assert field["history"][0]["value"] == HISTORY_CAP + 9
    assert field["history"][-1]["value"] == 10
    assert field["version_id"] == f"{t}/n@{HISTORY_CAP + 10}"
    item = mem.get(t)
    assert len(item["history"]) == HISTORY_CAP and item["history_dropped"] > 0


# ---------------------------------------------------------------------------- query
def test_query_stages_explain_and_salience_bump(mem):
    db = ingest("new_topic", title="Orders database", fields={"engine": "postgres"},
                memory=mem)["topic_id"]
    svc = ingest("new_topic", title="Checkout service", memory=mem,
                 fields={"owner": "Lena", "store": {"value": "orders", "ref": db}})["topic_id"]
    ingest("new_topic", title="Lunch menu", fields={"friday": "pizza"}, memory=mem)
    ingest("version_field", topic_id=svc, field="owner", value="Omar", memory=mem)
    semantic = query("checkout owner", stages=["semantic"], memory=mem)
    assert [(t["topic_id"], t["stage"]) for t in semantic["topics"]] == [(svc, "semantic")]
    assert "history" not in semantic["topics"][0]["fields"]["owner"]
    full = query("checkout owner", explain=True, memory=mem)
    assert [(t["topic_id"], t["stage"]) for t in full["topics"]] == [(svc, "semantic"),
                                                                    (db, "structural")]
    assert full["topics"][1]["score"] == full["topics"][0]["score"] * 0.5
    history = full["topics"][0]["fields"]["owner"]["history"]
    assert [v["value"] for v in history] == ["Omar", "Lena"]
    assert mem._ws.items[mem._ws.index_of[svc]].salience == pytest.approx(1.2)
    assert mem._ws.items[mem._ws.index_of[db]].salience == pytest.approx(1.1)
    events = [e["kind"] for e in mem.get(svc)["history"]]
    assert events.count("queried") == 2
    with pytest.raises(ValueError, match="stages"):
        query("x", stages=["temporal"], memory=mem)
    with pytest.raises(ValueError, match="top_k"):
        query("x", top_k=0, memory=mem)


# ---------------------------------------------------------------------------- maintenance
def test_merge_moves_edges_and_fields_and_records_itself(mem):
    old = ingest("new_topic", title="Auth Service", fields={"owner": "Lena"},
                 memory=mem)["topic_id"]
    mem.clock.advance(hours=1)
    dup = ingest("new_topic", title="auth service!", memory=mem,
                 fields={"owner": "Omar", "sla": "99.9"})["topic_id"]
    other = mem.add("the login page calls the auth service", item_id="note")
    mem.add_edges([(other, dup, "MENTIONS"), (dup, old, "RELATED")])
    report = Reasoner(mem, MaintenanceConfig(passes=("revise_duplicates",))).run()
    assert [(a["action"], a["keep"], a["merge"], a["reason"]) for a in report.actions] == [
        ("merge", old, dup, "title")]
    kept = get_topic(old, explain=True, memory=mem)
    assert kept["fields"]["sla"]["value"] == "99.9"
    assert [v["value"] for v in kept["fields"]["owner"]["history"]] == ["Omar", "Lena"]
    assert mem.get_edges() == [{"src": "note", "dst": old, "edge_type": "MENTIONS",
                                "weight": 1.0}]
    ws = mem._ws
    kept_item, merged_item = ws.items[ws.index_of[old]], ws.items[ws.index_of[dup]]
    assert merged_item.archived is True
    assert kept_item.history[-1]["kind"] == "merged"
    assert kept_item.history[-1]["detail"]["from"] == dup
    assert kept_item.history[-1]["detail"]["edges_moved"] == 1  # dup -> old became a self-loop
    assert merged_item.history[-1]["detail"] == {"reason": "merged_into", "into": old}
    ctx = mem.get_working_context("s1", "auth service owner", k=10)
    assert dup not in [it["item_id"] for it in ctx["items"]]  # archived: never surfaces


def test_near_duplicates_by_shingled_jaccard_with_a_threshold(mem):
    a = mem.add("the deploy pipeline runs every friday at noon with a canary at five percent",
                memory_type="concept")
    b = mem.add("the deploy pipeline runs every friday at noon with a canary at ten percent",
                memory_type="concept")
    mem.add("lunch on friday is pizza", memory_type="concept")
    sim = jaccard(shingles(mem.get(a)["content"]), shingles(mem.get(b)["content"]))
    assert 0.6 < sim < 0.9
    assert Reasoner(mem).run(dry_run=True).actions == []
    loose = Reasoner(mem, MaintenanceConfig(near_duplicate_threshold=0.6)).run(dry_run=True)
    assert [(x["keep"], x["merge"], x["reason"]) for x in loose.actions] == [
        (a, b, "near_duplicate")]
    assert loose.actions[0]["similarity"] == pytest.approx(sim)


def test_forgetting_only_below_the_threshold_and_past_the_soft_limit(mem):
    topics = [ingest("new_topic", title=f"topic {i}", memory=mem)["topic_id"] for i in range(6)]
    ws = mem._ws
    mem.store.set_salience(mem.workspace_id, [ws.index_of[t] for t in topics[:3]],
                           [0.01, 0.049, 0.05])
    config = MaintenanceConfig(passes=("forget_low_salience",), forget_soft_limit=7)
    assert Reasoner(mem, config).run().actions == []             # 6 topics < soft limit 7
    report = Reasoner(mem, config.replace(forget_soft_limit=6)).run()
    assert [a["item_id"] for a in report.actions] == topics[:2]  # 0.05 is not below 0.05
    assert [mem.get(t)["archived"] for t in topics] == [True, True, False, False, False, False]
    assert len(mem._ws.items) == 6                                # archived, not deleted


def test_decay_sweep_halves_salience_per_half_life(mem):
    t = ingest("new_topic", title="Decaying", memory=mem)["topic_id"]
    reasoner = Reasoner(mem, MaintenanceConfig(passes=("decay_sweep",),
                                               salience_half_life_days=10))
    mem.clock.advance(days=10)
    reasoner.run()
    assert mem.get(t)["salience"] == pytest.approx(0.5)
    mem.clock.advance(days=10)
    reasoner.run()
    assert mem.get(t)["salience"] == pytest.approx(0.25)  # since the last sweep, not creation


def test_capacity_inhibition_scales_the_weakest_fifth(mem):
    ids = mem.add_many([f"memory number {i}" for i in range(10)])
    for i in ids[5:]:
        mem.get(i)  # reinforced: stronger
    report = Reasoner(mem, MaintenanceConfig(passes=("capacity_inhibition",), capacity=8)).run()
    assert [a["item_id"] for a in report.actions] == ids[:2]
    assert mem._ws.activation.stored.view()[0] == pytest.approx(0.35)


def test_a_dry_run_leaves_the_store_byte_for_byte_unchanged(mem):
    a = ingest("new_topic", title="Same", fields={"x": "1"}, memory=mem)["topic_id"]
    ingest("new_topic", title="same", fields={"y": "2"}, memory=mem)
    mem.add_edge(a, mem.add("neighbour"))
    mem.clock.advance(days=3)
    config = MaintenanceConfig(forget_soft_limit=1, forget_threshold=2.0, capacity=1)
    before = frozen(mem)
    planned = Reasoner(mem, config).run(dry_run=True)
    assert frozen(mem) == before
    # the merge comes first, so the decay and the forgetting see only the kept topic, and
    # inhibition finds one surfaceable item left (the neighbour): not over capacity
    assert planned.counts() == {"merge": 1, "decay": 1, "archive": 1}
    applied = Reasoner(mem, config).run()
    assert applied.actions == planned.actions
    assert frozen(mem) != before


def test_maintenance_runs_after_events_and_its_failures_stay_inside(mem):
    reasoner = Reasoner(mem, MaintenanceConfig(enabled=True), attach=True)
    ingest("new_topic", title="Alpha", memory=mem)
    ingest("new_topic", title="alpha", memory=mem)
    assert [r.event for r in reasoner.reports] == ["ingest", "ingest"]
    assert reasoner.reports[-1].counts().get("merge") == 1
    query("alpha", memory=mem)
    assert reasoner.reports[-1].event == "query"

    def broken(*args, **kwargs):
        raise RuntimeError("disk on fire")

    reasoner._plan_decay_sweep = broken
    out = ingest("new_topic", title="Beta", memory=mem)  # the write and its answer stand
    assert mem.get(out["topic_id"])["content"] == "Beta"
    assert reasoner.failures[-1]["event"] == "ingest"
    assert "disk on fire" in reasoner.failures[-1]["error"]


# ---------------------------------------------------------------------------- concurrency
OPS_PER_THREAD = 400  # a fixed amount of work, not a duration: the same test on any machine


def test_eight_threads_on_one_store():
    store = MemoryStore()
    mem = Memory(store=store, surfacing_mode="router")
    cache = PMMemoryStore(silo_size=10_000)
    topic = ingest("new_topic", title="Shared topic", fields={"n": {"value": 0,
                                                                    "type": "number"}},
                   memory=mem)["topic_id"]
    errors: list[BaseException] = []
    written_keys: list[set] = [set() for _ in range(8)]
    promoted: list[set] = [set() for _ in range(8)]
    versions = [0] * 8
    created_topics: list[list] = [[] for _ in range(8)]

    def worker(n: int) -> None:
        rng = random.Random(n)
        try:
            for _ in range(OPS_PER_THREAD):
                op = rng.randrange(6)
                key = f"k{n}-{rng.randrange(50)}"
                if op == 0:
                    cache.set(key, f"value of {key}")
                    written_keys[n].add(key)
                elif op == 1:
                    cache.peek(key)
                elif op == 2:
                    label = f"concept {n} {rng.randrange(20)}"
                    promote_to_long_term(f"s{n}", label, f"about {label}", memory=mem)
                    promoted[n].add(label)
                elif op == 3:
                    resolve_context(f"s{n}", key, cache, memory=mem)
                elif op == 4:
                    if rng.random() < 0.5:
                        out = ingest("new_topic", title=f"topic {n} {versions[n]}", memory=mem)
                        created_topics[n].append(out["topic_id"])
                    else:
                        ingest("version_field", topic_id=topic, field="n",
                               value=versions[n] + 1000 * n, memory=mem)
                    versions[n] += 1
                else:
                    query("shared topic", memory=mem)
        except BaseException as exc:  # noqa: BLE001 - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(600)  # a hang guard, not a time limit on the work
    assert not any(t.is_alive() for t in threads), "a worker hung"
    assert not errors, errors[:3]
    for n in range(8):  # no lost write: every key still cached (the silo never filled)
        for key in written_keys[n]:
            assert key in cache
    status = get_memory_status("s0", cache, memory=mem)
    assert status["short_term"]["slots_used"] == len(set().union(*written_keys))
    assert status["long_term"]["nodes"] == len(set().union(*promoted))
    all_topics = [t for ts in created_topics for t in ts]
    assert len(set(all_topics)) == len(all_topics)
    assert all(t in mem._ws.topic_fields for t in map(mem._ws.index_of.get, all_topics))
    field = get_topic(topic, memory=mem)["fields"]["n"]
    expected_versions = 1 + sum(versions) - len(all_topics)
    assert int(field["version_id"].rsplit("@", 1)[1]) == expected_versions
