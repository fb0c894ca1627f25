"""Issue 14 items 4 and 5: scoped API keys, per-workspace caches and sessions, quiet health,
and cache names that share a dotted prefix (SPEC §9)."""

import asyncio
import json
import re

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi")
pytest.importorskip("httpx")
pytest.importorskip("mcp")

from _service_client import TestClient  # noqa: E402
from mcp import Client  # noqa: E402

from memlab import MemoryStore, PMMemoryStore  # noqa: E402
from memlab.service import ServiceState, create_app, create_mcp_server  # noqa: E402

KEYS = {"keys": [
    {"name": "team-a", "key": "secret-team-a", "write": ["team-a-*"]},
    {"name": "team-b", "key": "secret-team-b", "read": ["shared"], "write": ["team-b-*"]},
    {"name": "reader", "key": "secret-reader", "read": ["team-a-1"]},
    {"name": "ops", "key": "secret-admin", "admin": True},
]}
A, B, R, ADMIN = ({"X-API-Key": f"secret-{n}"} for n in ("team-a", "team-b", "reader", "admin"))


def app_with_keys(state=None):
    from memlab.service.auth import KeyRing
    return TestClient(create_app(state or ServiceState(maintenance=False),
                                 keys=KeyRing.from_mapping(KEYS)))


def call_tool(server, name, args):
    async def go():
        async with Client(server) as client:
            return await client.call_tool(name, args)
    return asyncio.run(go())


# ---------------------------------------------------------------------------- item 4: reads
def test_issue14_a_key_cannot_read_or_write_a_workspace_outside_its_scope():
    http = app_with_keys()
    r = http.post("/v1/items", headers=B, json={"workspace_id": "team-b-1", "item_id": "b1",
                                                "content": "TEAM-B-SECRET roadmap"})
    assert r.status_code == 200
    reads = [("GET", "/v1/items/b1", {"workspace_id": "team-b-1"}, None),
             ("POST", "/v1/search", None, {"workspace_id": "team-b-1", "query": "roadmap"}),
             ("POST", "/v1/context", None, {"workspace_id": "team-b-1", "session_id": "s",
                                           "query": "roadmap"}),
             ("GET", "/v1/edges", {"workspace_id": "team-b-1"}, None),
             ("GET", "/v1/pins/s", {"workspace_id": "team-b-1"}, None),
             ("GET", "/v1/status", {"workspace_id": "team-b-1", "session_id": "s"}, None),
             ("POST", "/v1/query", None, {"workspace_id": "team-b-1", "q": "roadmap"})]
    for method, url, params, body in reads:
        r = http.request(method, url, params=params, json=body, headers=A)
        assert r.status_code == 403, (url, r.text)
        assert "TEAM-B-SECRET" not in r.text
        assert r.json()["detail"] == "this API key may not read workspace 'team-b-1'"
    # the answer for a workspace that does not exist is the same: existence is not revealed
    ghost = http.post("/v1/search", headers=A, json={"workspace_id": "team-b-ghost",
                                                    "query": "x"})
    assert ghost.status_code == 403
    assert ghost.json()["detail"] == "this API key may not read workspace 'team-b-ghost'"
    # writes out of scope are refused and change nothing
    assert http.post("/v1/items", headers=A, json={"workspace_id": "team-b-1",
                                                   "content": "planted"}).status_code == 403
    assert http.post("/v1/items", headers=R, json={"workspace_id": "team-a-1",
                                                   "content": "planted"}).status_code == 403
    assert http.post("/v1/search", headers=B, json={"workspace_id": "team-b-1",
                                                    "query": "planted"}).json() == []
    # in scope: the reader reads team-a-1, team-b reads shared but may not write it
    assert http.post("/v1/search", headers=R, json={"workspace_id": "team-a-1",
                                                    "query": "x"}).status_code == 200
    assert http.post("/v1/search", headers=B, json={"workspace_id": "shared",
                                                    "query": "x"}).status_code == 200
    assert http.post("/v1/items", headers=B, json={"workspace_id": "shared",
                                                   "content": "x"}).status_code == 403
    # the admin key reads everything; a wrong key is still a 401
    assert http.get("/v1/items/b1", headers=ADMIN,
                    params={"workspace_id": "team-b-1"}).status_code == 200
    assert http.get("/v1/items/b1", headers={"X-API-Key": "nope"},
                    params={"workspace_id": "team-b-1"}).status_code == 401


def test_issue14_the_single_api_key_stays_an_all_workspaces_admin_key(tmp_path):
    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False)
    http = TestClient(create_app(state, api_key="s3cret"))
    key = {"Authorization": "Bearer s3cret"}
    for ws in ("team-a-1", "anything"):
        assert http.post("/v1/items", headers=key, json={"workspace_id": ws,
                                                         "content": "x"}).status_code == 200
    graph = http.get("/health/graph", headers=key).json()
    assert set(graph["workspaces"]) == {"team-a-1", "anything"}
    assert graph["journal"]["path"] == str(tmp_path / "m.db")


# ---------------------------------------------------------------------------- caches
def test_issue14_a_cache_value_of_one_workspace_is_invisible_in_another():
    http = app_with_keys()
    r = http.post("/v1/cache/set", headers=B, json={"workspace_id": "team-b-1", "key": "plan",
                                                    "value": "TEAM-B-SECRET"})
    assert r.status_code == 200, r.text
    peek = http.post("/v1/cache/peek", headers=A, json={"workspace_id": "team-a-1",
                                                        "key": "plan"}).json()
    assert peek == {"hit": False, "value": None, "index": -1}
    resolved = http.post("/v1/resolve", headers=A, json={"workspace_id": "team-a-1",
                                                         "session_id": "s", "key": "plan"})
    assert resolved.json()["source"] == "miss"
    status = http.get("/v1/status", headers=A, params={"workspace_id": "team-a-1",
                                                       "session_id": "s"}).json()
    assert status["short_term"]["slots_used"] == 0
    assert http.post("/v1/cache/peek", headers=A, json={"workspace_id": "team-b-1",
                                                        "key": "plan"}).status_code == 403
    assert http.post("/v1/cache/flush", headers=A,
                     params={"workspace_id": "team-b-1"}).status_code == 403
    assert http.post("/v1/cache/peek", headers=B, json={"workspace_id": "team-b-1",
                                                        "key": "plan"}).json()["value"] == \
        "TEAM-B-SECRET"


def test_issue14_caches_stay_per_workspace_after_a_restart(tmp_path):
    path = str(tmp_path / "m.db")
    state = ServiceState(db_path=path)
    state.cache("default", "team-b-1").set("plan", "TEAM-B-SECRET")
    state.cache("default").set("plan", "default-value")
    state.store.close()
    again = ServiceState(db_path=path)
    assert again.cache("default", "team-a-1").peek("plan") == (False, None, -1)
    assert again.cache("default", "team-b-1").peek("plan")[1] == "TEAM-B-SECRET"
    assert again.cache("default").peek("plan")[1] == "default-value"
    again.store.close()


# ---------------------------------------------------------------------------- sessions
def test_issue14_a_session_id_cannot_be_squatted_from_another_workspace():
    http = app_with_keys()
    for headers, ws in ((B, "team-b-1"), (A, "team-a-1")):
        http.post("/v1/items", headers=headers, json={"workspace_id": ws, "item_id": "i",
                                                      "content": f"{ws} notes"})
    assert http.post("/v1/pins", headers=B, json={"workspace_id": "team-b-1",
                                                  "session_id": "s1", "item_id": "i"}
                     ).status_code == 200
    r = http.post("/v1/pins", headers=A, json={"workspace_id": "team-a-1", "session_id": "s1",
                                               "item_id": "i", "weight": 0.5})
    assert r.status_code == 200, r.text
    assert r.json() == {"pins": {"i": 0.5}}
    assert http.get("/v1/pins/s1", headers=B,
                    params={"workspace_id": "team-b-1"}).json() == {"pins": {"i": 1.0}}
    ctx = http.post("/v1/context", headers=A, json={"workspace_id": "team-a-1",
                                                    "session_id": "s1", "query": "zzz"}).json()
    assert [i["item_id"] for i in ctx["items"]] == ["i"]
    assert http.delete("/v1/pins/s1/i", headers=A,
                       params={"workspace_id": "team-a-1"}).json() == {"pins": {}}
    assert http.get("/v1/pins/s1", headers=B,
                    params={"workspace_id": "team-b-1"}).json() == {"pins": {"i": 1.0}}


# ---------------------------------------------------------------------------- health
def test_issue14_health_reveals_nothing_without_an_admin_key(tmp_path):
    path = str(tmp_path / "secret-location.db")
    state = ServiceState(db_path=path, maintenance=False)
    http = app_with_keys(state)
    http.post("/v1/items", headers=B, json={"workspace_id": "team-b-1", "content": "x"})
    assert http.get("/health").json() == {"status": "ok"}
    assert http.get("/health", headers=A).json() == {"status": "ok"}
    assert http.get("/health/graph").status_code == 401
    for headers in (A, B, R):
        r = http.get("/health/graph", headers=headers)
        assert r.status_code == 403
        assert "team-b-1" not in r.text and "secret-location" not in r.text
    full = http.get("/health/graph", headers=ADMIN).json()
    assert "team-b-1" in full["workspaces"] and full["journal"]["path"] == path
    state.store.close()


# ---------------------------------------------------------------------------- keys file
def test_issue14_keys_load_from_json_toml_and_the_environment(tmp_path):
    import hashlib

    from memlab.service.auth import KeyRing
    digest = hashlib.sha256(b"secret-ops-key").hexdigest()
    (tmp_path / "keys.toml").write_text(
        '[[keys]]\nname = "team-a"\nkey = "secret-team-a"\nread = ["shared"]\n'
        'write = ["team-a-*"]\n\n[[keys]]\nname = "ops"\n'
        f'sha256 = "{digest}"\nadmin = true\n')
    (tmp_path / "keys.json").write_text(json.dumps(KEYS))
    toml_ring = KeyRing.from_file(tmp_path / "keys.toml")
    a = toml_ring.authenticate("secret-team-a")
    assert (a.can_write("team-a-9"), a.can_read("shared"), a.can_write("shared"),
            a.can_read("team-a"), a.can_read("team-b-1")) == (True, True, False, False, False)
    assert toml_ring.authenticate("secret-ops-key").admin
    assert len(KeyRing.from_file(tmp_path / "keys.json")) == 4
    env_ring = KeyRing.from_env({"MEMLAB_KEYS_FILE": str(tmp_path / "keys.json"),
                                 "MEMLAB_API_KEY": "old-single-key"})
    assert env_ring.authenticate("old-single-key").admin and len(env_ring) == 5
    inline = KeyRing.from_env({"MEMLAB_KEYS": json.dumps(KEYS)})
    assert inline.authenticate("secret-reader").can_read("team-a-1")
    assert KeyRing.from_env({}).open


@pytest.mark.parametrize("entry, message", [
    ({"name": "x", "key": "long-secret", "raed": ["a"]}, r"unknown fields \['raed'\]"),
    ({"name": "x", "read": ["a"]}, "exactly one of 'key' and 'sha256'"),
    ({"name": "x", "key": "long-secret"}, "grants nothing"),
    ({"name": "x", "key": "long-secret", "read": "team-a-*"}, r"read must be a list"),
    ({"name": "x", "key": "long-secret", "write": [""]}, r"write\[0\] must be a non-empty"),
    ({"name": "x", "key": "short", "admin": True}, "at least 8 characters"),
    ({"name": "x", "sha256": "abc", "admin": True}, "64 hex digits"),
    ({"name": "x", "key": "long-secret", "admin": "yes"}, "admin must be true or false"),
    ({"key": "long-secret", "admin": True}, r"name must be a non-empty string"),
])
def test_issue14_a_bad_keys_entry_is_a_value_error_naming_it(entry, message):
    from memlab.service.auth import KeyRing
    with pytest.raises(ValueError, match=message):
        KeyRing.from_mapping({"keys": [entry]})


def test_issue14_a_bad_keys_file_is_a_value_error(tmp_path):
    from memlab.service.auth import KeyRing
    (tmp_path / "k.json").write_text("{not json")
    with pytest.raises(ValueError, match="not valid JSON"):
        KeyRing.from_file(tmp_path / "k.json")
    with pytest.raises(ValueError, match="cannot be read"):
        KeyRing.from_file(tmp_path / "missing.toml")
    with pytest.raises(ValueError, match="same secret"):
        KeyRing.from_mapping({"keys": [{"name": "a", "key": "same-secret", "admin": True},
                                       {"name": "b", "key": "same-secret", "admin": True}]})
    with pytest.raises(ValueError, match="exactly one field, 'keys'"):
        KeyRing.from_mapping({"key": []})


# ---------------------------------------------------------------------------- MCP
def test_issue14_mcp_scoping_by_allowed_workspaces_and_per_workspace_caches():
    state = ServiceState(maintenance=False)
    server = create_mcp_server(state, workspaces=["team-a-*"])
    ok = call_tool(server, "add_memory", {"content": "alpha notes", "workspace_id": "team-a-1"})
    assert not ok.is_error
    for tool, args in (("add_memory", {"content": "x", "workspace_id": "team-b-1"}),
                       ("get_working_context", {"session_id": "s", "query": "x",
                                                "workspace_id": "team-b-1"}),
                       ("peek", {"key": "k", "workspace_id": "team-b-1"}),
                       ("set", {"key": "k", "value": "v"})):  # "default" is not allowed either
        out = call_tool(server, tool, args)
        assert out.is_error, tool
        assert "outside this server's allowed workspaces" in out.content[0].text
    assert not call_tool(server, "set", {"key": "k", "value": "A-VALUE",
                                         "workspace_id": "team-a-1"}).is_error
    open_server = create_mcp_server(state)
    peek = call_tool(open_server, "peek", {"key": "k", "workspace_id": "team-a-2"})
    assert json.loads(peek.content[0].text)["hit"] is False
    peek = call_tool(open_server, "peek", {"key": "k", "workspace_id": "team-a-1"})
    assert json.loads(peek.content[0].text)["value"] == "A-VALUE"


# ---------------------------------------------------------------------------- item 5
def test_issue14_cache_names_sharing_a_dotted_prefix_stay_apart_before_and_after_restart(
        tmp_path):
    path = str(tmp_path / "m.db")
    store = MemoryStore(path=path)
    alice = PMMemoryStore(durable=store, name="team.alice")
    alice.set("token", "ALICE-SECRET")
    team = PMMemoryStore(durable=store, name="team")
    assert team.peek("token") == (False, None, -1)
    assert len(team) == 0
    team.set("other", "team value")
    store.close()
    store = MemoryStore(path=path)
    team = PMMemoryStore(durable=store, name="team")
    assert team.snapshot() == [{"key": "other", "value": "team value", "index": 0,
                                "access_count": 1}]
    assert PMMemoryStore(durable=store, name="team.alice").peek("token")[1] == "ALICE-SECRET"
    assert PMMemoryStore(durable=store, name="team.al").peek("token") == (False, None, -1)
    store.close()


def test_issue14_dotted_cache_names_stay_apart_through_the_service(tmp_path):
    path = str(tmp_path / "m.db")
    http = TestClient(create_app(ServiceState(db_path=path, maintenance=False)))
    http.post("/v1/cache/set", json={"cache": "team.alice", "key": "k", "value": "ALICE-SECRET"})
    assert http.post("/v1/cache/peek", json={"cache": "team", "key": "k"}).json()["hit"] is False
    http.app.state.memlab.store.close()
    http = TestClient(create_app(ServiceState(db_path=path, maintenance=False)))
    assert http.post("/v1/cache/peek", json={"cache": "team", "key": "k"}).json()["hit"] is False
    assert http.post("/v1/cache/peek", json={"cache": "team.alice", "key": "k"}).json()[
        "value"] == "ALICE-SECRET"
    http.app.state.memlab.store.close()


# ---------------------------------------------------------------------------- the property
WORKSPACES = ["team-a-1", "team-a-2", "team-b-1", "shared"]
READABLE = {"A": {"team-a-1", "team-a-2"}, "B": {"team-b-1", "shared"}, "R": {"team-a-1"},
            "ADMIN": set(WORKSPACES)}
WRITABLE = {"A": {"team-a-1", "team-a-2"}, "B": {"team-b-1"}, "R": set(),
            "ADMIN": set(WORKSPACES)}
HEADERS = {"A": A, "B": B, "R": R, "ADMIN": ADMIN}
MARK = re.compile(r"zq(\d)x")   # every value written under WORKSPACES[d] carries "zq<d>x"
OPS = ["add", "search", "context", "get", "edge", "edges", "pin", "pins", "unpin", "cache_set",
       "cache_peek", "cache_flush", "resolve", "status", "promote", "node", "graph_search",
       "health"]

request_sequences = st.lists(st.tuples(
    st.sampled_from(sorted(HEADERS)), st.sampled_from(OPS), st.integers(0, len(WORKSPACES) - 1),
    st.sampled_from(["s1", "s2"]), st.sampled_from(["team", "team.alice"]),
    st.integers(0, 1)), min_size=8, max_size=40)


def request_for(op, ws, w, session, cache, n):
    """(method, url, params, json body, is a write) of one request."""
    tag = f"zq{w}x{n}"
    body = {"workspace_id": ws}
    if op == "add":
        return "POST", "/v1/items", None, {**body, "item_id": f"item-{tag}",
                                           "content": f"alpha beta {tag}"}, True
    if op == "search":
        return "POST", "/v1/search", None, {**body, "query": "alpha beta"}, False
    if op == "context":
        return "POST", "/v1/context", None, {**body, "session_id": session,
                                             "query": "alpha beta", "k": 50}, False
    if op == "get":
        return "GET", f"/v1/items/item-zq{w}x{n}", {"workspace_id": ws}, None, False
    if op == "edge":
        return "POST", "/v1/edges", None, {**body, "src": f"item-zq{w}x0",
                                           "dst": f"item-{tag}"}, True
    if op == "edges":
        return "GET", "/v1/edges", {"workspace_id": ws}, None, False
    if op == "pin":  # the item is added first (by the same key) so that the pin can bind
        return "POST", "/v1/pins", None, {**body, "session_id": session,
                                          "item_id": f"item-{tag}"}, True, \
            ("POST", "/v1/items", None, {**body, "item_id": f"item-{tag}",
                                         "content": f"alpha beta {tag}"}, True)
    if op == "pins":
        return "GET", f"/v1/pins/{session}", {"workspace_id": ws}, None, False
    if op == "unpin":
        return "DELETE", f"/v1/pins/{session}/item-{tag}", {"workspace_id": ws}, None, True
    if op == "cache_set":
        return "POST", "/v1/cache/set", None, {**body, "cache": cache, "key": f"k{n}",
                                               "value": f"value {tag}"}, True
    if op == "cache_peek":
        return "POST", "/v1/cache/peek", None, {**body, "cache": cache, "key": f"k{n}"}, False
    if op == "cache_flush":
        return "POST", "/v1/cache/flush", {"workspace_id": ws, "cache": cache}, None, True
    if op == "resolve":
        return "POST", "/v1/resolve", None, {**body, "session_id": session, "key": f"k{n}",
                                             "cache": cache}, False
    if op == "status":
        return "GET", "/v1/status", {"workspace_id": ws, "session_id": session,
                                     "cache": cache}, None, False
    if op == "promote":
        return "POST", "/v1/promote", None, {**body, "session_id": session, "key": f"k{n}",
                                             "value": f"promoted {tag}"}, True
    if op == "node":
        return "POST", "/v1/graph/nodes", None, {**body, "session_id": session,
                                                 "node_type": "fact", "label": f"k{n}",
                                                 "content": f"node {tag}"}, True
    if op == "graph_search":
        return "POST", "/v1/graph/search", None, {**body, "session_id": session,
                                                  "query": f"k{n}"}, False
    assert op == "health"
    return "GET", "/health/graph", None, None, False


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_sequences)
# the issue's three leaks, always tried: a cache value across workspaces, a squatted session id,
# a cache of a dotted name
@example([("B", "cache_set", 2, "s1", "team", 0), ("A", "cache_peek", 0, "s1", "team", 0),
          ("A", "resolve", 1, "s1", "team", 0)])
@example([("B", "pin", 2, "s1", "team", 0), ("A", "pin", 0, "s1", "team", 0),
          ("A", "context", 0, "s1", "team", 0)])
@example([("A", "cache_set", 0, "s1", "team.alice", 1), ("A", "cache_peek", 0, "s1", "team", 1),
          ("B", "cache_peek", 2, "s1", "team.alice", 1)])
def test_issue14_no_response_ever_carries_data_of_a_workspace_the_key_may_not_read(requests):
    http = app_with_keys()
    for who, op, w, session, cache, n in requests:
        ws = WORKSPACES[w]
        method, url, params, body, write, *first = request_for(op, ws, w, session, cache, n)
        for f_method, f_url, f_params, f_body, _ in first:
            http.request(f_method, f_url, params=f_params, json=f_body, headers=HEADERS[who])
        r = http.request(method, url, params=params, json=body, headers=HEADERS[who])
        allowed = (ws in WRITABLE[who]) if write else (ws in READABLE[who])
        if op == "health":
            allowed = who == "ADMIN"
        if not allowed:
            assert r.status_code == 403, (who, op, ws, r.text)
        else:
            assert r.status_code != 403, (who, op, ws, r.text)
            # within scope nothing squats: a pin of an item that exists never conflicts
            assert "bound to workspace" not in r.text, (who, op, ws, r.text)
        leaked = {WORKSPACES[int(d)] for d in MARK.findall(r.text)} - READABLE[who]
        assert not leaked, (who, op, ws, r.text)


# ---------------------------------------------------------------------------- the reproductions
def test_issue14_repro_session_squat_with_one_shared_key():
    """The issue's reproduction as written: one server, no scoped keys, two workspaces."""
    http = TestClient(create_app(ServiceState(maintenance=False), api_key="shared-key"))
    key = {"X-API-Key": "shared-key"}
    for ws in ("tenant-1", "tenant-2"):
        http.post("/v1/items", headers=key, json={"workspace_id": ws, "item_id": "i",
                                                  "content": "notes"})
    assert http.post("/v1/pins", headers=key, json={"workspace_id": "tenant-2",
                                                    "session_id": "s1", "item_id": "i"}
                     ).status_code == 200
    r = http.post("/v1/pins", headers=key, json={"workspace_id": "tenant-1", "session_id": "s1",
                                                 "item_id": "i"})
    assert r.status_code == 200 and r.json() == {"pins": {"i": 1.0}}, r.text


def test_issue14_repro_cache_set_in_one_workspace_resolves_in_another():
    http = TestClient(create_app(ServiceState(maintenance=False)))
    r = http.post("/v1/cache/set", json={"workspace_id": "tenant-2", "key": "plan",
                                         "value": "TENANT-2-SECRET"})
    assert r.status_code == 200, r.text
    out = http.post("/v1/resolve", json={"workspace_id": "tenant-1", "session_id": "s",
                                         "key": "plan"}).json()
    assert out["source"] == "miss" and "TENANT-2-SECRET" not in json.dumps(out)


# ---------------------------------------------------------------------------- the CLI
def test_issue14_cli_serve_takes_a_keys_file_and_mcp_takes_allowed_workspaces(
        tmp_path, capsys, monkeypatch):
    import uvicorn

    from memlab.cli import main
    (tmp_path / "keys.json").write_text(json.dumps(KEYS))
    served = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: served.setdefault("app", app))
    monkeypatch.delenv("MEMLAB_KEYS", raising=False)
    assert main(["serve", "--keys-file", str(tmp_path / "keys.json"),
                 "--api-key", "old-single-key"]) == 0
    http = TestClient(served["app"])
    assert http.post("/v1/search", headers=A, json={"workspace_id": "team-b-1",
                                                    "query": "x"}).status_code == 403
    assert http.get("/health/graph", headers={"X-API-Key": "old-single-key"}).status_code == 200
    assert capsys.readouterr().err.startswith("memlab serve: starting on ")
    (tmp_path / "bad.toml").write_text('[[keys]]\nname = "x"\nkey = "long-secret"\n')
    assert main(["serve", "--keys-file", str(tmp_path / "bad.toml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("memlab serve: error: --keys-file: ")
    assert "grants nothing" in err[0]
    assert main(["mcp", "--workspaces", "team-a-*, "]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--workspaces[1] must be a non-empty string" in err[0]


# ---------------------------------------------------------------------------- review 14: reads
def test_review14_read_only_key_changes_nothing(tmp_path):
    """A key that may only read a workspace changes nothing in it: no reinforcement (search,
    get, graph search, resolve), no topic salience bump or ``queried`` event, no cache use
    (peek), no journal row, no maintenance after a read. A key that may write keeps today's
    behaviour: its reads reinforce."""
    from memlab.service.auth import KeyRing
    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=True)
    http = TestClient(create_app(state, keys=KeyRing.from_mapping(KEYS)))
    ws = "shared"
    for i in range(12):
        assert http.post("/v1/items", headers=ADMIN, json={
            "workspace_id": ws, "item_id": f"d{i}",
            "content": f"shared deploy doc number {i % 3} about the release"}).status_code == 200
    assert http.post("/v1/ingest", headers=ADMIN, json={
        "workspace_id": ws, "placement": "new_topic", "title": "release plan",
        "fields": {"owner": "ana"}}).status_code == 200
    assert http.post("/v1/graph/nodes", headers=ADMIN, json={
        "workspace_id": ws, "session_id": "s", "node_type": "concept", "label": "pricing",
        "content": "pricing page for the release"}).status_code == 200
    assert http.post("/v1/edges", headers=ADMIN, json={
        "workspace_id": ws, "src": "d0", "dst": "d1"}).status_code == 200
    assert http.post("/v1/pins", headers=ADMIN, json={
        "workspace_id": ws, "session_id": "s", "item_id": "d2"}).status_code == 200
    assert http.post("/v1/cache/set", headers=ADMIN, json={
        "workspace_id": ws, "key": "pricing", "value": "cached pricing"}).status_code == 200
    reads = [("POST", "/v1/context", None, {"workspace_id": ws, "session_id": "s",
                                           "query": "deploy release"}),
             ("POST", "/v1/search", None, {"workspace_id": ws, "query": "deploy release"}),
             ("POST", "/v1/query", None, {"workspace_id": ws, "q": "release plan"}),
             ("GET", "/v1/items/d0", {"workspace_id": ws}, None),
             ("GET", "/v1/edges", {"workspace_id": ws}, None),
             ("GET", "/v1/pins/s", {"workspace_id": ws}, None),
             ("GET", "/v1/status", {"workspace_id": ws, "session_id": "s"}, None),
             ("POST", "/v1/resolve", None, {"workspace_id": ws, "session_id": "s",
                                           "key": "pricing"}),
             ("POST", "/v1/resolve", None, {"workspace_id": ws, "session_id": "s",
                                           "key": "pricing page"}),
             ("POST", "/v1/cache/peek", None, {"workspace_id": ws, "key": "pricing"}),
             ("POST", "/v1/graph/search", None, {"workspace_id": ws, "session_id": "s",
                                                "query": "pricing"}),
             ("POST", "/v1/maintenance", None, {"workspace_id": ws, "dry_run": True})]

    def snapshot():
        state.store.flush()  # buffered reinforcements reach the journal
        return json.dumps(state.store.serialize(), sort_keys=True, default=str), \
            state.store.journal.count()

    def read_all(headers):
        for _ in range(3):
            for method, url, params, body in reads:
                r = http.request(method, url, params=params, json=body, headers=headers)
                assert r.status_code == 200, (url, r.text)

    def salience():
        return http.post("/v1/query", headers=B, json={"workspace_id": ws, "q": "release plan"}
                         ).json()["topics"][0]["salience"]

    salience_before = salience()
    before, rows = snapshot()
    cache = state.cache("default", ws)
    counts = cache.access_count("pricing")
    reports = {name: len(r.reports) for name, r in state._reasoners.items()}
    read_all(B)  # team-b may read "shared", not write it
    after, rows_after = snapshot()
    assert rows_after == rows, "a read-only key's reads added journal rows"
    assert after == before, "a read-only key's reads changed the workspace"
    assert cache.access_count("pricing") == counts  # a peek by a reader is not a use
    # no maintenance ran after its reads (the dry run's own report aside)
    ran = {name: [rep.event for rep in r.reports[reports.get(name, 0):]]
           for name, r in state._reasoners.items()}
    assert all(event == "api" for events in ran.values() for event in events), ran
    assert salience() == salience_before  # the topic's salience others see is unchanged

    # a key that may write keeps today's behaviour: its reads reinforce
    read_all(ADMIN)
    after_writer, rows_writer = snapshot()
    assert rows_writer > rows_after and after_writer != after
    assert salience() > salience_before
    assert cache.access_count("pricing") > counts


def test_review14_library_reads_without_side_effects():
    """``reinforce=False`` reads through the library change nothing; the default reinforces."""
    from memlab import Memory
    from memlab.session import resolve_context, search_graph, upsert_node
    from memlab.topics import ingest, query
    mem = Memory()
    mem.add("deploys run on fridays", item_id="d1")
    ingest("new_topic", title="Checkout service", fields={"owner": "Lena"}, memory=mem)
    upsert_node("s", "concept", "pricing", "pricing page", memory=mem)
    cache = PMMemoryStore()
    cache.set("k", "v")
    before = json.dumps(mem.store.serialize(), sort_keys=True, default=str)
    assert mem.search("fridays", reinforce=False)[0]["item_id"] == "d1"
    assert mem.get("d1", reinforce=False)["item_id"] == "d1"
    assert query("checkout", memory=mem, reinforce=False)["topics"][0]["salience"] == 1.0
    assert search_graph("s", "pricing", memory=mem, reinforce=False)[0]["label"] == "pricing"
    assert resolve_context("s", "k", cache, memory=mem, reinforce=False)["value"] == "v"
    assert resolve_context("s", "pricing", PMMemoryStore(), memory=mem,
                           reinforce=False)["source"] == "long_term"
    assert cache.peek("k", reinforce=False) == (True, "v", 0)
    assert cache.access_count("k") == 1
    assert json.dumps(mem.store.serialize(), sort_keys=True, default=str) == before
    for bad in (0, "no", None):
        with pytest.raises(ValueError, match="reinforce must be a bool"):
            mem.search("x", reinforce=bad)
    assert query("checkout", memory=mem)["topics"][0]["salience"] == 1.1
    mem.search("fridays")
    assert json.dumps(mem.store.serialize(), sort_keys=True, default=str) != before
