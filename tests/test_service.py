"""The service surfaces (SPEC §9): a real uvicorn server on loopback, MCP in-process and over
stdio, one store behind all of them; keys, errors, isolation, fuzzing, durability and load."""

import asyncio
import json
import os
import signal
import socket
import string
import subprocess
import sys
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

fastapi = pytest.importorskip("fastapi")
httpx = pytest.importorskip("httpx")
uvicorn = pytest.importorskip("uvicorn")
pytest.importorskip("mcp")

from _service_client import TestClient  # noqa: E402
from _support import McpStdio  # noqa: E402
from mcp import Client  # noqa: E402
from mcp.client.stdio import StdioServerParameters  # noqa: E402

from memlab import MemoryStore  # noqa: E402
from memlab.harness import Trace, replay  # noqa: E402
from memlab.service import ServiceState, create_app, create_mcp_server  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    """uvicorn serving an app in a thread of this process, on a free loopback port."""

    def __init__(self, app) -> None:
        self.port = free_port()
        self.server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port,
                                                    log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> str:
        self.thread.start()
        deadline = time.time() + 300   # a hang guard, not a performance claim
        while not self.server.started:
            assert time.time() < deadline, "uvicorn did not start"
            time.sleep(0.02)
        return f"http://127.0.0.1:{self.port}"

    def __exit__(self, *exc) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def call_tool(server, name: str, args: dict):
    async def go():
        async with Client(server) as client:
            return await client.call_tool(name, args)
    return asyncio.run(go())


# ---------------------------------------------------------------------------- one store
def test_a_write_through_http_is_visible_through_mcp_and_the_library(tmp_path):
    state = ServiceState(db_path=str(tmp_path / "m.db"))
    mcp_server = create_mcp_server(state)
    with LiveServer(create_app(state)) as url, httpx.Client(base_url=url) as http:
        r = http.post("/v1/items", json={"content": "We picked JWT because sessions did not "
                                                    "scale", "item_id": "jwt"})
        assert r.status_code == 200 and r.json() == {"item_id": "jwt"}
        result = call_tool(mcp_server, "get_working_context",
                           {"session_id": "s1", "query": "why JWT"})
        assert not result.is_error
        items = json.loads(result.content[0].text)["items"]
        assert [i["item_id"] for i in items] == ["jwt"]
        assert state.memory("default").get("jwt")["content"].startswith("We picked JWT")
        call_tool(mcp_server, "set", {"key": "auth", "value": "fresh login flow"})
        assert http.post("/v1/cache/peek", json={"key": "auth"}).json()["value"] == \
            "fresh login flow"
        call_tool(mcp_server, "promote_to_long_term", {"session_id": "s1", "key": "auth flow",
                                                       "value": "passkeys"})
        status = http.get("/v1/status", params={"session_id": "s1"}).json()
        assert status["long_term"]["nodes"] == 1 and status["short_term"]["slots_used"] == 1
        assert http.get("/health").json() == {"status": "ok"}
        graph = http.get("/health/graph").json()
        assert graph["journal"]["ops"] > 0 and graph["workspaces"]["default"]["items"] == 2


def test_the_routes_do_what_they_say():
    app = create_app(ServiceState(maintenance=False))
    http = TestClient(app)
    ids = http.post("/v1/items/bulk", json={"items": [
        {"content": "Checkout runs on Postgres", "item_id": "a"},
        {"content": "The orders database is Postgres 16", "item_id": "b"}]}).json()["item_ids"]
    assert ids == ["a", "b"]
    assert http.post("/v1/edges", json={"src": "a", "dst": "b"}).status_code == 200
    assert http.get("/v1/edges").json()[0]["dst"] == "b"
    assert http.post("/v1/pins", json={"session_id": "s1", "item_id": "b"}).json() == \
        {"pins": {"b": 1.0}}
    ctx = http.post("/v1/context", json={"session_id": "s1", "query": "checkout database",
                                         "k": 5}).json()
    assert {i["item_id"] for i in ctx["items"]} == {"a", "b"}
    assert http.delete("/v1/pins/s1/b").json() == {"pins": {}}
    topic = http.post("/v1/ingest", json={"placement": "new_topic", "title": "Checkout",
                                          "fields": {"owner": "Lena"}}).json()
    found = http.post("/v1/query", json={"q": "checkout owner", "explain": True}).json()
    assert found["topics"][0]["topic_id"] == topic["topic_id"]
    node = http.post("/v1/graph/nodes", json={"session_id": "s1", "node_type": "concept",
                                             "label": "auth", "content": "login flow"}).json()
    hits = http.post("/v1/graph/search", json={"session_id": "s1", "query": "auth"}).json()
    assert hits[0]["node_id"] == node["node_id"]
    assert http.post("/v1/resolve", json={"session_id": "s1", "key": "auth"}).json()[
        "source"] == "long_term"
    assert http.get("/v1/items/a").json()["item_id"] == "a"
    assert http.post("/v1/search", json={"query": "postgres"}).json()[0]["item_id"] in ("a", "b")
    dry = http.post("/v1/maintenance", json={"dry_run": True}).json()
    assert dry["dry_run"] is True and isinstance(dry["actions"], list)
    assert http.post("/v1/maintenance", json={"dry_run": False}).status_code == 202


def test_errors_are_400_422_and_503():
    state = ServiceState()
    http = TestClient(create_app(state))
    bad = http.post("/v1/items", json={"content": ""})
    assert bad.status_code == 400 and "content must be a non-empty string" in bad.json()["detail"]
    assert http.post("/v1/items", json={"content": "x", "colour": "red"}).status_code == 422
    assert http.post("/v1/items", content=b"{not json", headers={
        "content-type": "application/json"}).status_code == 422
    assert http.post("/v1/context", json={"session_id": "s1", "query": "x", "k": 0}).status_code \
        == 422  # k in 1..100 is in the schema (issue 14)
    assert http.post("/v1/edges", json={"src": "ghost", "dst": "other"}).status_code == 400
    state.store._workspaces = None  # the store can no longer be read
    broken = http.get("/health/graph")
    assert broken.status_code == 503
    assert set(broken.json()) == {"detail", "path", "hint"}
    assert http.get("/health").status_code == 200


def test_maintenance_failure_after_the_response_never_reaches_the_client():
    state = ServiceState()
    http = TestClient(create_app(state))
    reasoner = state.reasoner("default")

    def explode(*args, **kwargs):
        raise RuntimeError("disk on fire")

    reasoner._plan_decay_sweep = explode
    r = http.post("/v1/ingest", json={"placement": "new_topic", "title": "Alpha"})
    assert r.status_code == 200 and r.json()["topic_id"]
    assert http.post("/v1/maintenance", json={"dry_run": False}).status_code == 202
    assert [f["error"] for f in reasoner.failures] == ["RuntimeError: disk on fire"] * 2


# ---------------------------------------------------------------------------- security
def test_every_route_but_health_refuses_a_missing_or_wrong_key():
    app = create_app(ServiceState(), api_key="s3cret")
    http = TestClient(app)
    routes = [(method, path) for path, ops in app.openapi()["paths"].items()
              for method in ops]
    assert len(routes) > 15
    for method, path in routes:
        url = path.replace("{item_id}", "x").replace("{session_id}", "s1")
        for headers in ({}, {"X-API-Key": "wrong"}, {"Authorization": "Bearer wrong"}):
            status = http.request(method.upper(), url, headers=headers, json={}).status_code
            if path == "/health":
                assert status == 200
            else:
                assert status == 401, (method, path, headers)
    assert http.get("/v1/edges", headers={"X-API-Key": "s3cret"}).status_code == 200
    assert http.get("/v1/edges", headers={"Authorization": "Bearer s3cret"}).status_code == 200


request_ops = st.lists(st.tuples(
    st.sampled_from(["add", "edge", "pin", "context", "search", "promote", "ingest"]),
    st.sampled_from(["ws-a", "ws-b"]), st.integers(0, 5)), min_size=1, max_size=25)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(request_ops)
def test_workspaces_stay_isolated_through_every_route(ops):
    http = TestClient(create_app(ServiceState(maintenance=False)))
    owned = {"ws-a": set(), "ws-b": set()}
    for op, ws, n in ops:
        item = f"{ws}-item-{n}"
        if op == "add" and item not in owned[ws]:
            http.post("/v1/items", json={"workspace_id": ws, "item_id": item,
                                         "content": f"shared words alpha beta {n}"})
            owned[ws].add(item)
        elif op == "edge" and len(owned[ws]) >= 2:
            a, b = sorted(owned[ws])[:2]
            http.post("/v1/edges", json={"workspace_id": ws, "src": a, "dst": b})
        elif op == "pin" and owned[ws]:
            http.post("/v1/pins", json={"workspace_id": ws, "session_id": f"{ws}-s",
                                        "item_id": sorted(owned[ws])[0]})
        elif op == "promote":
            http.post("/v1/promote", json={"workspace_id": ws, "session_id": "s",
                                           "key": f"{ws} key {n}", "value": "alpha beta"})
        elif op == "ingest":
            http.post("/v1/ingest", json={"workspace_id": ws, "placement": "new_topic",
                                          "title": f"alpha topic {n}"})
        other = "ws-b" if ws == "ws-a" else "ws-a"
        ctx = http.post("/v1/context", json={"workspace_id": other, "session_id": f"{other}-s",
                                             "query": "alpha beta shared", "k": 50}).json()
        assert not any(i["item_id"] in owned[ws] for i in ctx["items"])
        found = http.post("/v1/search", json={"workspace_id": other, "query": "alpha"}).json()
        assert not any(i["item_id"] in owned[ws] for i in found)
        edges = http.get("/v1/edges", params={"workspace_id": other}).json()
        assert not any(e["src"] in owned[ws] for e in edges)


json_values = st.recursive(st.none() | st.booleans() | st.integers(-5, 5) | st.floats(
    allow_nan=False, allow_infinity=False) | st.text(max_size=8), lambda inner: st.lists(inner, max_size=3) |
    st.dictionaries(st.text(max_size=6), inner, max_size=3), max_leaves=6)


def test_fuzzing_every_route_from_the_openapi_schema_finds_no_5xx():
    app = create_app(ServiceState(maintenance=False))
    http = TestClient(app, raise_server_exceptions=False)
    schema = app.openapi()
    routes = [(m, p, op) for p, ops in schema["paths"].items() for m, op in ops.items()]

    def body_for(op) -> st.SearchStrategy:
        ref = op.get("requestBody", {}).get("content", {}).get("application/json", {}).get(
            "schema", {}).get("$ref")
        if ref is None:
            return st.none()
        props = schema["components"]["schemas"][ref.rsplit("/", 1)[1]].get("properties", {})
        return st.fixed_dictionaries({}, optional={name: json_values | st.text(max_size=12)
                                                   for name in props}) | json_values

    for method, path, op in routes:
        @settings(max_examples=40, deadline=None,
                  suppress_health_check=[HealthCheck.too_slow,
                                         HealthCheck.function_scoped_fixture])
        @given(body=body_for(op), segment=st.text(
            alphabet=string.ascii_letters + string.digits + "-_.~%", min_size=1, max_size=6))
        def check(body, segment):
            url = path.replace("{item_id}", segment).replace("{session_id}", segment)
            status = http.request(method.upper(), url, json=body).status_code
            assert status < 500, (method, path, body, status)

        check()


# ---------------------------------------------------------------------------- recorder
def test_the_recorder_writes_a_replayable_trace(tmp_path):
    path = tmp_path / "recorded.jsonl"
    http = TestClient(create_app(ServiceState(record=str(path), maintenance=False)))
    http.post("/v1/items", json={"content": "JWT for auth", "item_id": "a"})
    http.post("/v1/items", json={"content": "Lunch is pizza", "item_id": "b"})
    http.post("/v1/edges", json={"src": "a", "dst": "b"})
    http.post("/v1/context", json={"session_id": "s1", "query": "why JWT"})
    trace = Trace.read_jsonl(path)
    assert [e.type for e in trace] == ["add", "add", "add_edge", "query"]
    result = replay(trace)
    assert result.decisions.loc[0, "query"] == "why JWT"


# ---------------------------------------------------------------------------- MCP over stdio
def test_a_real_mcp_client_over_stdio(tmp_path):
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "memlab", "mcp", "--db", str(tmp_path / "m.db")])

    async def go():
        async with Client(params) as client:
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"get_working_context", "resolve_context", "promote_to_long_term",
                    "memory_status", "peek", "set", "flush", "search_memory_graph",
                    "upsert_memory_node", "pin_item", "unpin_item"} <= names
            await client.call_tool("add_memory", {"content": "Deploys happen on Fridays",
                                                  "item_id": "d"})
            ctx = await client.call_tool("get_working_context",
                                         {"session_id": "s", "query": "when do deploys happen"})
            assert json.loads(ctx.content[0].text)["items"][0]["item_id"] == "d"
            assert (await client.call_tool("set", {"key": "k", "value": "v"})).is_error is False
            peeked = await client.call_tool("peek", {"key": "k"})
            assert json.loads(peeked.content[0].text)["hit"] is True
            bad = await client.call_tool("pin_item", {"session_id": "s", "item_id": "ghost"})
            assert bad.is_error and "ghost" in bad.content[0].text

    asyncio.run(go())
    assert "d" in MemoryStore(path=tmp_path / "m.db").workspace("default").index_of


def test_review14_mcp_stdio_answers_lone_surrogates(tmp_path):
    """Review 14: over real stdio, a call whose JSON holds a lone surrogate escape (valid JSON
    text the SDK's parser refuses) got no answer at all. Each now gets memlab's own error,
    naming the argument, and the server goes on answering."""
    with McpStdio(tmp_path / "m.db") as mcp:
        mcp.initialize()
        s = "\udc00"
        refused = [
            ("add_memory", {"content": f"deploy {s} checklist"},
             "content contains a lone surrogate at 7"),
            ("add_memory", {"content": "deploy", "metadata": {"tags": ["a", s]}},
             "metadata['tags'][1] contains a lone surrogate at 0"),
            ("get_working_context", {"session_id": f"s{s}", "query": "deploy"},
             "session_id contains a lone surrogate at 1"),
            ("get_working_context", {"session_id": "s", "query": f"deploy {s}"},
             "query contains a lone surrogate at 7"),
            ("set", {"key": "k", "value": f"v{s}"}, "value contains a lone surrogate at 1"),
            ("pin_item", {"session_id": "s", "item_id": f"{s}i"},
             "item_id contains a lone surrogate at 0"),
        ]
        for i, (tool, arguments, expected) in enumerate(refused, 1):
            result = mcp.call(i, tool, arguments)["result"]
            assert result["isError"] is True, (tool, result)
            assert expected in result["content"][0]["text"], (tool, result)
        # a request other than a tool call is answered too, with a JSON-RPC error
        mcp.send({"jsonrpc": "2.0", "id": 50, "method": "tools/list", "params": {"cursor": s}})
        assert "cursor contains a lone surrogate at 0" in mcp.answer(50)["error"]["message"]
        # and the server still serves normal calls
        added = mcp.call(100, "add_memory", {"content": "Deploys happen on Fridays",
                                             "item_id": "d"})
        assert added["result"].get("isError") is not True, added
        ctx = mcp.call(101, "get_working_context", {"session_id": "s", "query": "deploys"})
        assert json.loads(ctx["result"]["content"][0]["text"])["items"][0]["item_id"] == "d"


def test_issue14_mcp_stdio_refuses_request_ids_with_surrogates_or_nul(tmp_path):
    """Issue 14 (items 3, 10): over real stdio (``memlab mcp``), a request whose JSON-RPC id
    holds a lone surrogate got no answer at all, and one whose id held NUL was served. Each now
    gets a JSON-RPC ``invalid request`` error naming the id's problem (``id`` null when the id
    cannot be written back), whatever the method and arguments, and nothing is written; the
    server goes on answering."""
    with McpStdio(tmp_path / "m.db") as mcp:
        mcp.initialize()
        add = ("tools/call", {"name": "add_memory", "arguments": {"content": "ghost write",
                                                                  "item_id": "ghost"}})
        cases = [
            ("\udc00", add, None, "id contains a lone surrogate at 0"),
            ("x\ud800y", ("tools/list", {}), None, "id contains a lone surrogate at 1"),
            ("a\x00b", add, "a\x00b", "id must not contain NUL (at 1)"),
            ("\x00", ("tools/list", {}), "\x00", "id must not contain NUL (at 0)"),
            # the id is checked first, even when the arguments hold a surrogate too
            ("a\x00b", ("tools/call", {"name": "add_memory", "arguments": {
                "content": "x\udc00"}}), "a\x00b", "id must not contain NUL (at 1)"),
            ("\udfff", ("tools/call", {"name": "add_memory", "arguments": {
                "content": "x\udc00"}}), None, "id contains a lone surrogate at 0"),
        ]
        for request_id, (method, params), answered_id, problem in cases:
            mcp.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
            answer = mcp.next_answer()   # one answer per request, in order: nothing else is sent
            assert answer == {"jsonrpc": "2.0", "id": answered_id, "error": {
                "code": -32600, "message": f"Invalid request: {problem}"}}, (request_id, answer)
        # a notification with such an id field is not a request: never answered
        mcp.send({"jsonrpc": "2.0", "method": "notifications/initialized", "x": "\udc00"})
        mcp.send({"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {
            "name": "get_working_context", "arguments": {"session_id": "s", "query": "ghost"}}})
        answer = mcp.next_answer()
        assert answer["id"] == 7 and answer["result"].get("isError") is not True, answer
        assert json.loads(answer["result"]["content"][0]["text"])["items"] == []
    assert "ghost" not in MemoryStore(path=tmp_path / "m.db").workspace("default").index_of


# ---------------------------------------------------------------------------- durability, load
def _start_server(db, port):
    log = open(f"{db}.{port}.log", "ab")   # a file, not a pipe: a full pipe would block it
    try:
        return subprocess.Popen([sys.executable, "-m", "memlab", "serve", "--db", str(db),
                                 "--port", str(port), "--no-maintenance"],
                                stdout=subprocess.DEVNULL, stderr=log)
    finally:
        log.close()


def _wait_up(url, server=None):
    deadline = time.time() + 300   # a hang guard: a loaded machine may take long to import
    while time.time() < deadline:
        if server is not None and server.poll() is not None:
            raise AssertionError(f"server exited with {server.returncode}")
        try:
            if httpx.get(url + "/health").status_code == 200:
                return
        except httpx.HTTPError:
            time.sleep(0.05)
    raise AssertionError("server did not start")


@pytest.mark.slow
@pytest.mark.parametrize("round_", range(6))
def test_kill_9_the_server_while_clients_write(tmp_path, round_):
    """kill -9 mid-stream: four clients (two single, two bulk) write until the server dies under
    them. Restarted on the same journal, it has every acknowledged write, whole, and of the
    unacknowledged ones (in flight at the kill) each item and each batch is all there or absent."""
    db, port = tmp_path / "m.db", free_port()
    server = _start_server(db, port)
    url = f"http://127.0.0.1:{port}"
    lock = threading.Lock()
    acknowledged: set[str] = set()
    attempted: dict[str, tuple[str, dict]] = {}   # item id -> (content, metadata) as sent
    batches: list[list[str]] = []
    sending: dict[int, list[str]] = {}            # client -> ids of its request in flight
    dead = threading.Event()

    def client(n: int) -> None:
        with httpx.Client(base_url=url, timeout=60) as http:   # timeout: a hang guard only
            for i in range(1_000_000):
                if dead.is_set():
                    return
                size = 1 if n < 2 else 3
                ids = [f"c{n}-{i}-{j}" for j in range(size)]
                items = [{"content": f"client {n} write {i} part {j} " + "x" * (i % 50),
                          "item_id": item_id, "metadata": {"client": n, "write": i, "part": j}}
                         for j, item_id in enumerate(ids)]
                with lock:
                    attempted.update({it["item_id"]: (it["content"], it["metadata"])
                                      for it in items})
                    if size > 1:
                        batches.append(ids)
                    sending[n] = ids
                try:
                    if size == 1:
                        r = http.post("/v1/items", json=items[0])
                    else:
                        r = http.post("/v1/items/bulk", json={"items": items})
                except httpx.HTTPError:
                    continue   # not acknowledged; the server is (being) killed
                finally:
                    with lock:
                        sending.pop(n, None)
                if r.status_code == 200:
                    with lock:
                        acknowledged.update(ids)

    threads = [threading.Thread(target=client, args=(n,), daemon=True) for n in range(4)]
    try:
        _wait_up(url, server)
        for t in threads:
            t.start()
        target = 40 + 25 * round_   # a point in the stream, counted in writes, not seconds
        while True:
            with lock:
                if len(acknowledged) >= target and sending:
                    in_flight_at_kill = sorted(sum(sending.values(), []))
                    os.kill(server.pid, signal.SIGKILL)   # while those requests are in flight
                    break
            time.sleep(0.001)
        server.wait()
        dead.set()
        for t in threads:
            t.join(120)   # a hang guard: with the server gone every request fails at once
        assert not any(t.is_alive() for t in threads), "a client hung"
        assert in_flight_at_kill and len(acknowledged) >= target
        assert len(attempted) > len(acknowledged)   # some writes were never acknowledged

        port = free_port()
        url = f"http://127.0.0.1:{port}"
        server = _start_server(db, port)   # restart on the same journal
        _wait_up(url, server)
        with httpx.Client(base_url=url, timeout=60) as http:
            for item_id in sorted(acknowledged):
                r = http.get(f"/v1/items/{item_id}")
                assert r.status_code == 200, (item_id, r.text)
                content, metadata = attempted[item_id]
                assert (r.json()["content"], r.json()["metadata"]) == (content, metadata)
        server.terminate()
        server.wait()
        store = MemoryStore(path=db)
        assert store.journal.integrity_check() == "ok"
        ws = store.workspace("default")
        present = set(ws.index_of)
        assert acknowledged <= present <= set(attempted)
        for item_id in present - acknowledged:   # written, its acknowledgement lost: whole
            item = ws.items[ws.index_of[item_id]]
            assert (item.content, item.metadata) == attempted[item_id]
        for ids in batches:   # a bulk write is all there or absent
            assert len(set(ids) & present) in (0, len(ids)), ids
    finally:
        dead.set()
        if server.poll() is None:
            server.kill()
            server.wait()


@pytest.mark.slow
def test_load_eight_clients_two_thousand_mixed_requests_each(tmp_path):
    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False)
    latencies: list[float] = []
    errors: list[str] = []
    written: list[set] = [set() for _ in range(8)]
    with LiveServer(create_app(state)) as url:
        def client(n: int) -> None:
            with httpx.Client(base_url=url, timeout=30) as http:
                for i in range(2000):
                    kind = i % 4
                    if kind == 0:
                        r = http.post("/v1/items", json={"content": f"client {n} note {i} about "
                                                                    f"topic {i % 17}",
                                                         "item_id": f"c{n}-{i}"})
                        if r.status_code == 200:
                            written[n].add(f"c{n}-{i}")
                    elif kind == 1:
                        started = time.perf_counter()
                        r = http.post("/v1/context", json={"session_id": f"s{n}",
                                                           "query": f"topic {i % 17} note"})
                        latencies.append((time.perf_counter() - started) * 1e3)
                    elif kind == 2:
                        r = http.post("/v1/cache/set", json={"key": f"k{n}-{i}", "value": "v"})
                    else:
                        r = http.post("/v1/search", json={"query": f"client {n}"})
                    if r.status_code >= 500:
                        errors.append(f"{r.status_code} {r.text[:80]}")

        threads = [threading.Thread(target=client, args=(n,)) for n in range(8)]
        started = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        elapsed = time.perf_counter() - started
    assert not errors, errors[:3]
    stored = set(state.store.workspace("default").index_of)
    assert set().union(*written) <= stored and len(stored) == 8 * 500
    latencies.sort()
    report = {"requests": 16000, "seconds": round(elapsed, 1),
              "context_p50_ms": round(latencies[len(latencies) // 2], 2),
              "context_p99_ms": round(latencies[int(len(latencies) * 0.99)], 2)}
    print(json.dumps(report))
    (tmp_path / "load.json").write_text(json.dumps(report))
