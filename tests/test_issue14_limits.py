"""Issue 14, items 6 and 10: bounded work per request, reads that never create, a sub-quadratic
near-duplicate pass, strict booleans, the recorder, startup, the Host check, OpenAPI and MCP."""

import asyncio
import json
import os
import random
import stat
from datetime import datetime, timezone

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from _service_client import TestClient  # noqa: E402
from mcp import Client  # noqa: E402

from memlab import ManualClock, Memory, MemoryStore  # noqa: E402
from memlab.harness import Trace, replay  # noqa: E402
from memlab.maintenance import MaintenanceConfig, Reasoner  # noqa: E402
from memlab.maintenance import reasoner as reasoner_module  # noqa: E402
from memlab.maintenance.reasoner import jaccard, near_duplicate_pairs, shingles  # noqa: E402
from memlab.service import Limits, ServiceState, create_app, create_mcp_server  # noqa: E402

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)


def call_tool(server, name, args):
    async def go():
        async with Client(server) as client:
            return await client.call_tool(name, args)
    return asyncio.run(go())


# ---------------------------------------------------------------------------- reads never create
READS = [
    ("POST", "/v1/search", {"query": "deploy"}),
    ("POST", "/v1/context", {"session_id": "s1", "query": "deploy"}),
    ("GET", "/v1/edges", None),
    ("GET", "/v1/pins/s1", None),
    ("DELETE", "/v1/pins/s1/x", None),
    ("POST", "/v1/query", {"q": "deploy"}),
    ("POST", "/v1/resolve", {"session_id": "s1", "key": "deploy"}),
    ("GET", "/v1/status", None),
    ("POST", "/v1/graph/search", {"session_id": "s1", "query": "deploy"}),
    ("POST", "/v1/maintenance", {"dry_run": True}),
]


def test_issue14_a_read_naming_a_new_workspace_creates_nothing(tmp_path):
    state = ServiceState(db_path=str(tmp_path / "m.db"))
    http = TestClient(create_app(state))
    assert http.post("/v1/items", json={"content": "the deploy runs on fridays"}).status_code \
        == 200
    rows = state.store.journal.count()
    for n, (method, path, body) in enumerate(READS):
        ws = f"ghost-{n}"
        params = {"workspace_id": ws, "session_id": "s1"}
        if body is None:
            r = http.request(method, path, params=params)
        else:
            r = http.request(method, path, json={**body, "workspace_id": ws})
        assert r.status_code == 200, (path, r.text)
        answer = r.json()
        empty = {"/v1/search": [], "/v1/edges": [], "/v1/graph/search": [],
                 "/v1/pins/s1": {"pins": {}}, "/v1/pins/s1/x": {"pins": {}}}
        if path in empty:
            assert answer == empty[path]
        if path == "/v1/context":
            assert answer["items"] == []
    # the MCP reads too
    server = create_mcp_server(state)
    for name, args in (("get_working_context", {"session_id": "s1", "query": "deploy"}),
                       ("memory_status", {"session_id": "s1"}),
                       ("search_memory_graph", {"session_id": "s1", "query": "deploy"}),
                       ("unpin_item", {"session_id": "s1", "item_id": "x"})):
        assert not call_tool(server, name, {**args, "workspace_id": "ghost-mcp"}).is_error
    assert state.store.workspace_ids() == ["default"]
    assert state.store.journal.count() == rows
    # a failed pin or edge in an unknown workspace creates nothing either
    assert http.post("/v1/pins", json={"workspace_id": "ghost-w", "session_id": "s",
                                       "item_id": "x"}).status_code == 400
    assert state.store.workspace_ids() == ["default"]
    # a write does create it, and the next read sees it
    http.post("/v1/items", json={"workspace_id": "new", "content": "deploy on mondays"})
    assert len(http.post("/v1/search", json={"workspace_id": "new", "query": "deploy"}).json()) \
        == 1


def test_issue14_the_library_facade_still_creates_its_workspace():
    store = MemoryStore()
    Memory(store=store, workspace_id="mine")
    assert store.workspace_ids() == ["mine"] and store.has_workspace("mine")
    assert not store.has_workspace("other")


# ---------------------------------------------------------------------------- limits
def small_app(**limits):
    state = ServiceState(maintenance=False, limits=Limits(**limits))
    return state, TestClient(create_app(state))


def test_issue14_a_body_over_the_limit_is_413_naming_it():
    state, http = small_app(max_body_bytes=2_000)
    r = http.post("/v1/items", json={"content": "x" * 5_000})
    assert r.status_code == 413
    assert "max_body_bytes" in r.json()["detail"] and "2000" in r.json()["detail"]
    assert r.json()["limit"] == "max_body_bytes" and r.json()["allowed"] == 2_000

    def chunks():  # no Content-Length: counted as it arrives
        for _ in range(10):
            yield b" " * 500
    r = http.post("/v1/items", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["limit"] == "max_body_bytes"
    assert state.store.workspace_ids() == []
    assert http.post("/v1/items", json={"content": "fits"}).status_code == 200


def test_issue14_content_bulk_and_metadata_limits_are_413_naming_limit_and_value():
    state, http = small_app(max_content_chars=100, max_bulk_items=5, max_metadata_bytes=200,
                            max_metadata_depth=3)
    r = http.post("/v1/items", json={"content": "y" * 101})
    assert r.status_code == 413 and r.json()["detail"] == \
        "content is 101 characters; the limit max_content_chars is 100 characters"
    r = http.post("/v1/items/bulk", json={"items": [{"content": "a"}] * 6})
    assert r.status_code == 413 and "max_bulk_items is 5" in r.json()["detail"]
    r = http.post("/v1/items/bulk", json={"items": [{"content": "ok"}, {"content": "z" * 200}]})
    assert r.status_code == 413 and "items[1].content is 200" in r.json()["detail"]
    r = http.post("/v1/items", json={"content": "a", "metadata": {"a": {"b": {"c": {"d": 1}}}}})
    assert r.status_code == 413 and "max_metadata_depth is 3" in r.json()["detail"]
    r = http.post("/v1/items", json={"content": "a", "metadata": {"k": "v" * 300}})
    assert r.status_code == 413 and "max_metadata_bytes is 200" in r.json()["detail"]
    r = http.post("/v1/graph/nodes", json={"session_id": "s", "node_type": "concept",
                                           "label": "l", "content": "c" * 101})
    assert r.status_code == 413
    assert state.store.workspace_ids() == [] or len(state.store.workspace("default")) == 0
    server = create_mcp_server(state)
    out = call_tool(server, "add_memory", {"content": "q" * 101})
    assert out.is_error and "max_content_chars" in out.content[0].text
    with pytest.raises(ValueError, match="max_bulk_items must be a positive int"):
        Limits(max_bulk_items=0)
    assert Limits.from_env({"MEMLAB_MAX_BULK_ITEMS": "7"}).max_bulk_items == 7


def test_issue14_a_bulk_write_is_applied_in_bounded_chunks(tmp_path):
    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False,
                         limits=Limits(bulk_chunk_items=10))
    http = TestClient(create_app(state))
    items = [{"content": f"note {n}"} for n in range(35)]
    items[3]["item_id"] = "item-000004"  # a generated id must step around it, as in one call
    ids = http.post("/v1/items/bulk", json={"items": items}).json()["item_ids"]
    assert ids == Memory().add_many(items)  # the ids one all-or-nothing call gives
    adds = [op for op, _ in state.store.journal.ops(prefix="store.") if op == "store.add_items"]
    assert len(adds) == 4  # 10 + 10 + 10 + 5: the lock is released between transactions
    # validation is all-or-nothing before any chunk is written
    bad = [{"content": f"more {n}"} for n in range(25)] + [{"content": ""}]
    assert http.post("/v1/items/bulk", json={"items": bad}).status_code == 400
    dup = [{"content": f"more {n}"} for n in range(25)] + [{"content": "x", "item_id": ids[0]}]
    assert http.post("/v1/items/bulk", json={"items": dup}).status_code == 400
    assert len(state.store.workspace("default")) == 35


def test_issue14_a_failing_later_chunk_says_how_many_items_were_written():
    mem = Memory()
    calls = []
    real = mem.store.add_items

    def flaky(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:
            raise ValueError("disk full")
        return real(*args, **kwargs)

    mem.store.add_items = flaky
    with pytest.raises(ValueError, match="the first 2 of 5 items were written"):
        mem.add_many(["a", "b", "c", "d", "e"], chunk_size=2)
    assert len(mem) == 2
    with pytest.raises(ValueError, match="chunk_size must be a positive int"):
        mem.add_many(["a"], chunk_size=0)


# ---------------------------------------------------------------------------- strict booleans
@pytest.mark.parametrize("value", [0, 1, "no", "off", "false", "true", "0", None])
def test_issue14_dry_run_accepts_only_json_booleans(value):
    state = ServiceState(maintenance=False)
    http = TestClient(create_app(state))
    http.post("/v1/items", json={"content": "x", "memory_type": "concept",
                                 "metadata": {"title": "T"}})
    http.post("/v1/items", json={"content": "y", "memory_type": "concept",
                                 "metadata": {"title": "t!"}})
    r = http.post("/v1/maintenance", json={"dry_run": value})
    assert r.status_code == 422, r.text
    assert not any(i.archived for i in state.store.workspace("default").items)
    assert http.post("/v1/query", json={"q": "x", "explain": "yes"}).status_code == 422


# ---------------------------------------------------------------------------- near duplicates
WORDS = "deploy runs on fridays the auth service token expiry jwt lunch pizza queue".split()


def random_contents(rng: random.Random, n: int) -> list[str]:
    out: list[str] = []
    for _ in range(n):
        if out and rng.random() < 0.5:  # a near copy of an earlier item: one word changed
            words = rng.choice(out).split()
            words[rng.randrange(len(words))] = rng.choice(WORDS)
            if rng.random() < 0.3:
                words.append(rng.choice(WORDS))
        else:
            words = [rng.choice(WORDS) for _ in range(rng.randint(1, 14))]
        out.append(" ".join(words))
    return out


def all_pairs(sets: dict, threshold: float) -> dict:
    keys = sorted(sets)
    out = {}
    for a, i in enumerate(keys):
        for j in keys[a + 1:]:
            sim = jaccard(sets[i], sets[j])
            if sim >= threshold and sim > 0:
                out[(i, j)] = sim
    return out


@pytest.mark.parametrize("seed", range(12))
def test_issue14_prefix_filtered_pairs_equal_all_pairs_on_random_data(seed):
    rng = random.Random(seed)
    contents = random_contents(rng, 150)
    for size in (1, 2, 3):
        sets = {i: shingles(text, size) for i, text in enumerate(contents)}
        for threshold in (0.0, 0.3, 0.5, 0.6, 0.7, 0.75, 0.8, 0.9, 1.0):
            assert near_duplicate_pairs(sets, threshold) == all_pairs(sets, threshold), \
                (size, threshold)


def old_plan_revise_duplicates(self, ws, state, now):
    """The quadratic pass as it was before issue 14 (commit f04b7d9), kept as the oracle."""
    from memlab.maintenance.reasoner import _title_key
    cfg = self.config
    types = set(cfg.revise_memory_types)
    live = [i for i, item in enumerate(ws.items) if item.memory_type in types and not item.archived]
    parent = {i: i for i in live}

    def find(i):
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i
    reasons = {}

    def union(a, b, reason, similarity):
        ra, rb = find(a), find(b)
        if ra != rb:
            parent[max(ra, rb)] = min(ra, rb)
        reasons.setdefault((min(a, b), max(a, b)), (reason, similarity))
    by_title = {}
    for i in live:
        key = _title_key(ws.items[i])
        if key is None:
            continue
        if key in by_title:
            union(by_title[key], i, "title", 1.0)
        else:
            by_title[key] = i
    sets = {i: shingles(ws.items[i].content, cfg.shingle_size) for i in live}
    posting = {}
    for i in live:
        for sh in sets[i]:
            posting.setdefault(sh, []).append(i)
    checked = set()
    for i in live:
        for sh in sets[i]:
            for j in posting[sh]:
                if j <= i or (i, j) in checked:
                    continue
                checked.add((i, j))
                sim = jaccard(sets[i], sets[j])
                if sim >= cfg.near_duplicate_threshold and sim > 0:
                    union(i, j, "near_duplicate", sim)
    groups = {}
    for i in live:
        groups.setdefault(find(i), []).append(i)
    actions = []
    for members in groups.values():
        if len(members) < 2:
            continue
        keep = min(members, key=lambda i: (ws.created_ts.data[i], i))
        for other in sorted(members):
            if other == keep:
                continue
            pair = (min(keep, other), max(keep, other))
            found = reasons.get(pair)
            if found is None:
                found = next((v for (a, b), v in sorted(reasons.items()) if other in (a, b)),
                             ("transitive", 0.0))
            reason, sim = found
            state.archived.add(other)
            actions.append({"action": "merge", "keep": ws.item_ids[keep],
                            "merge": ws.item_ids[other], "reason": reason, "similarity": sim,
                            "edges_moved": len(ws.graph.table.rows_touching([other])),
                            "fields_merged": sorted(ws.topic_fields.get(other, {}))})
            state.salience[keep] = max(state.salience_of(keep), state.salience_of(other))
    return actions


class OldReasoner(Reasoner):
    _plan_revise_duplicates = old_plan_revise_duplicates


@pytest.mark.parametrize("seed", range(6))
def test_issue14_the_duplicate_pass_plans_what_the_quadratic_pass_planned(seed):
    rng = random.Random(seed)
    mem = Memory(clock=ManualClock(T0))
    titles = ["Token expiry", "token expiry!", "Deploy day", None, None, None]
    mem.add_many([{"content": text, "memory_type": "concept",
                   "metadata": {"title": t} if (t := rng.choice(titles)) else None}
                  for text in random_contents(rng, 200)])
    for threshold in (0.5, 0.75, 0.9):
        config = MaintenanceConfig(near_duplicate_threshold=threshold,
                                   shingle_size=rng.choice([1, 2, 3]))
        new = Reasoner(mem, config).run(dry_run=True).actions
        old = OldReasoner(mem, config).run(dry_run=True).actions
        assert new == old
        assert new  # the data has duplicates: the comparison is not vacuous


@pytest.mark.parametrize("seed", range(6))
def test_review14_the_grouped_pass_plans_what_the_quadratic_pass_planned_with_copies(seed):
    """Large groups of identical items, near groups around them, titles and creation times out
    of index order (so the kept item is not the first one): same plan as the old pass."""
    rng = random.Random(100 + seed)
    mem = Memory(clock=ManualClock(T0))
    base = random_contents(rng, 60)
    contents = [rng.choice(base[:8]) if rng.random() < 0.6 else rng.choice(base)
                for _ in range(240)]
    titles = ["Token expiry", "token expiry!", "Deploy day", None, None, None, None]
    items = []
    for text in contents:
        title = rng.choice(titles)
        items.append({"content": text, "memory_type": "concept",
                      "metadata": {"title": title} if title else None,
                      "created_at": datetime(2024, 3, 1 + rng.randrange(20), rng.randrange(24),
                                             tzinfo=timezone.utc)})
    for item in items:
        mem.add(item["content"], item["memory_type"], item["metadata"],
                created_at=item["created_at"])
    for threshold in (0.0, 0.5, 0.75, 0.9, 1.0):
        config = MaintenanceConfig(near_duplicate_threshold=threshold,
                                   shingle_size=rng.choice([1, 2, 3]))
        new = Reasoner(mem, config).run(dry_run=True).actions
        old = OldReasoner(mem, config).run(dry_run=True).actions
        assert new == old, threshold
        assert new


def test_review14_three_thousand_identical_items_are_planned_with_linear_work(monkeypatch):
    """3,000 identical concepts: one group of 2,999 merges, with one representative compared
    with nothing; the 4.5 million pairs of the group are never built or compared."""
    n = 3000
    mem = Memory(clock=ManualClock(T0))
    mem.add_many([{"content": "the deploy checklist for the payment service needs an owner "
                              "review before every friday release window opens",
                   "memory_type": "concept"} for _ in range(n)])
    mem.add_many([{"content": f"note {i} about the lunch menu on day {i}",
                   "memory_type": "concept"} for i in range(n)])
    calls = {"jaccard": 0}
    real_jaccard = reasoner_module.jaccard

    def counting_jaccard(a, b):
        calls["jaccard"] += 1
        return real_jaccard(a, b)

    stats: dict = {}
    real_groups = getattr(reasoner_module, "near_duplicate_groups", None)

    def counting_groups(sets, threshold, stats_arg=None):
        groups, pairs = real_groups(sets, threshold, stats)
        stats["pairs"] = stats.get("pairs", 0) + len(pairs)
        return groups, pairs

    monkeypatch.setattr(reasoner_module, "jaccard", counting_jaccard)
    monkeypatch.setattr(reasoner_module, "near_duplicate_groups", counting_groups,
                        raising=False)
    report = Reasoner(mem).run(dry_run=True, passes=("revise_duplicates",))
    merges = [a for a in report.actions if a["action"] == "merge"]
    assert len(merges) == n - 1
    assert {a["keep"] for a in merges} == {"item-000000"}
    assert all(a["reason"] == "near_duplicate" and a["similarity"] == 1.0 for a in merges)
    assert calls["jaccard"] <= 2 * n  # the quadratic pass compared n * (n - 1) / 2 pairs
    assert stats["groups"] == n + 1  # the identical ones are one group
    assert stats["pairs"] <= n  # near pairs between distinct sets only: O(n), here none
    assert stats["comparisons"] == calls["jaccard"]


# ---------------------------------------------------------------------------- recorder
def test_issue14_a_recorded_session_replays_to_the_same_contexts(tmp_path):
    path = tmp_path / "rec.jsonl"
    state = ServiceState(record=str(path), maintenance=False, clock=ManualClock(T0))
    http = TestClient(create_app(state))
    http.post("/v1/items/bulk", json={"items": [
        {"content": "We picked JWT for the auth service", "item_id": "a"},
        {"content": "Sessions did not scale past one node", "item_id": "b"},
        {"content": "Lunch on Friday is pizza", "item_id": "c"}]})
    http.post("/v1/edges", json={"src": "a", "dst": "b"})
    http.post("/v1/pins", json={"session_id": "s1", "item_id": "c"})
    http.post("/v1/cache/set", json={"key": "k", "value": "v", "cache": "team"})
    http.post("/v1/promote", json={"session_id": "s1", "key": "auth choice", "value": "JWT"})
    served = [http.post("/v1/context", json={"session_id": "s1", "query": q, "k": 5}).json()
              for q in ("why JWT?", "what is for lunch", "auth choice")]
    resolved = http.post("/v1/resolve", json={"session_id": "s1", "key": "k",
                                              "cache": "team"}).json()
    assert http.post("/v1/context", json={"session_id": "s1", "query": ""}).status_code == 422
    trace = Trace.read_jsonl(path)
    cache_set = next(e for e in trace if e.type == "cache_set")
    assert cache_set.get("cache") == "team"
    result = replay(trace, mode="router")
    replayed = result.candidates[result.candidates["surfaced"]]
    for qid, response in zip(result.decisions["qid"], served):
        rows = replayed[replayed["qid"] == qid].sort_values("rank")
        assert sorted(rows["item_id"]) == sorted(i["item_id"] for i in response["items"])
    log = [json.loads(o) if isinstance(o, str) else o for o in result.log["outcome"]]
    assert log[-1]["source"] == resolved["source"] == "short_term"


def test_issue14_the_recorder_writes_0600_rotates_and_redacts(tmp_path):
    path = tmp_path / "rec.jsonl"
    path.write_text("")
    os.chmod(path, 0o644)
    state = ServiceState(record=str(path), maintenance=False, record_max_bytes=2_000,
                         record_redact=True)
    http = TestClient(create_app(state))
    for n in range(30):
        http.post("/v1/items", json={"content": f"secret plan number {n}", "item_id": f"i{n}",
                                     "metadata": {"owner": "SECRET-OWNER"}})
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    rotated = sorted(tmp_path.glob("rec.jsonl.*"))
    assert rotated and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in rotated)
    assert all(p.stat().st_size <= 2_000 for p in [path, *rotated])
    for p in [path, *rotated]:
        text = p.read_text()
        assert "secret plan" not in text and "SECRET-OWNER" not in text
        Trace.read_jsonl(p)  # every file is a trace on its own
    assert "<redacted sha256:" in path.read_text()


# ---------------------------------------------------------------------------- startup, Host
def test_issue14_serve_refuses_a_public_host_without_a_key_and_warns_loudly(monkeypatch, capsys):
    import uvicorn

    from memlab.cli import main
    ran = []
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: ran.append(kw))
    monkeypatch.delenv("MEMLAB_API_KEY", raising=False)
    assert main(["serve", "--host", "0.0.0.0"]) == 2
    assert "without an API key" in capsys.readouterr().err and not ran
    assert main(["serve"]) == 0
    assert "WARNING: no API key" in capsys.readouterr().err
    assert ran[-1]["host"] == "127.0.0.1"
    assert main(["serve", "--host", "0.0.0.0", "--insecure"]) == 0
    assert "WARNING" in capsys.readouterr().err
    assert main(["serve", "--host", "0.0.0.0", "--api-key", "k"]) == 0
    assert "WARNING" not in capsys.readouterr().err


def test_issue14_the_host_header_is_checked_against_an_allow_list():
    http = TestClient(create_app(ServiceState(maintenance=False)))
    evil = http.get("/health", headers={"host": "evil.example:8765"})
    assert evil.status_code == 400 and "evil.example" in evil.json()["detail"]
    for host in ("localhost:8765", "127.0.0.1", "[::1]:8765"):
        assert http.get("/health", headers={"host": host}).status_code == 200
    custom = TestClient(create_app(ServiceState(), allowed_hosts=["memory.internal"]))
    assert custom.get("/health", headers={"host": "memory.internal"}).status_code == 200
    assert custom.get("/health", headers={"host": "localhost"}).status_code == 400


# ---------------------------------------------------------------------------- OpenAPI, MCP
def test_issue14_openapi_documents_errors_and_constraints():
    schema = create_app(ServiceState()).openapi()
    paths = schema["paths"]
    for code in ("400", "401", "413", "422"):
        assert code in paths["/v1/items"]["post"]["responses"], code
    assert "202" in paths["/v1/maintenance"]["post"]["responses"]
    assert "503" in paths["/health/graph"]["get"]["responses"]
    ctx = schema["components"]["schemas"]["ContextIn"]["properties"]
    assert (ctx["k"]["minimum"], ctx["k"]["maximum"]) == (1, 100)
    assert ctx["query"]["minLength"] == 1 and ctx["session_id"]["minLength"] == 1
    assert schema["components"]["schemas"]["MaintenanceIn"]["properties"]["dry_run"][
        "type"] == "boolean"


def test_issue14_mcp_refuses_unknown_arguments_and_nul_ids_and_says_why():
    state = ServiceState(maintenance=False)
    server = create_mcp_server(state)
    out = call_tool(server, "add_memory", {"content": "x", "colour": "red"})
    assert out.is_error and "unknown arguments ['colour']" in out.content[0].text
    for args in ({"content": "x", "item_id": "a\x00b"}, {"content": "x", "workspace_id": "\x00"}):
        out = call_tool(server, "add_memory", args)
        assert out.is_error and "NUL" in out.content[0].text
    assert state.store.workspace_ids() == []

    def crash(*args, **kwargs):
        raise RuntimeError("disk on fire")
    state.memory("default").add = crash
    out = call_tool(server, "add_memory", {"content": "x"})
    assert out.is_error and "RuntimeError: disk on fire" in out.content[0].text
    http = TestClient(create_app(state))
    assert http.post("/v1/items", json={"content": "x", "item_id": "a\x00b"}).status_code == 400
