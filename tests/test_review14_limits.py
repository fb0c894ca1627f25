"""Review 14, items 2 and 3: every text argument of every HTTP write route and every MCP tool is
bounded (queries by ``max_query_chars``, contents by ``max_content_chars``, ids and short names
by ``max_id_chars``, JSON by the metadata limits), in one table shared by both surfaces."""

import asyncio

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from _service_client import TestClient  # noqa: E402
from mcp import Client  # noqa: E402

from memlab.service import Limits, ServiceState, create_app, create_mcp_server  # noqa: E402

# small limits, so an oversized value is cheap; BIG is over every one of them
LIMITS = Limits(max_content_chars=200, max_query_chars=100, max_id_chars=50,
                max_metadata_bytes=300)
BIG = "x" * 201
BIG_JSON = {"a": "x" * 400}


def _state():
    return ServiceState(maintenance=False, limits=LIMITS)


# ------------------------------------------------------------------------------------ HTTP
def _write_routes():
    from fastapi.routing import APIRoute
    app = create_app(_state())
    routes = []
    for route in app.routes:
        if not isinstance(route, APIRoute) or not (route.methods & {"POST", "DELETE", "PUT",
                                                                    "PATCH"}):
            continue
        routes.append(route)
    return routes


def _text_fields(route):
    """(where, name, kind) of every argument of ``route`` that is text or JSON."""
    out = []
    for param in route.dependant.path_params:
        out.append(("path", param.name, "str"))
    for param in route.dependant.query_params:
        out.append(("query", param.name, "str"))
    for param in route.dependant.body_params:
        model = param.field_info.annotation
        for name, info in model.model_fields.items():
            text = repr(info.annotation)
            if name == "items":
                out.append(("body", name, "items"))
            elif "dict" in text:
                out.append(("body", name, "json"))
            elif "list" in text:
                out.append(("body", name, "list"))
            elif "str" in text or "Any" in text:
                out.append(("body", name, "str"))
    return out


def _http_cases():
    cases = []
    for route in _write_routes():
        method = sorted(route.methods & {"POST", "DELETE", "PUT", "PATCH"})[0]
        for where, name, kind in _text_fields(route):
            cases.append(pytest.param(method, route.path_format, where, name, kind,
                                      id=f"{method} {route.path_format} {name}"))
    return cases


HTTP_CASES = _http_cases()


def test_review14_every_write_route_is_enumerated():
    paths = {case.values[1] for case in HTTP_CASES}
    assert {"/v1/items", "/v1/items/bulk", "/v1/cache/set", "/v1/promote", "/v1/edges",
            "/v1/graph/nodes", "/v1/ingest", "/v1/pins", "/v1/pins/{session_id}/{item_id}",
            "/v1/context", "/v1/search", "/v1/query", "/v1/graph/search",
            "/v1/cache/flush"} <= paths
    names = {(case.values[1], case.values[3]) for case in HTTP_CASES}
    assert ("/v1/edges", "edge_type") in names and ("/v1/cache/set", "value") in names


@pytest.mark.parametrize("method,path,where,name,kind", HTTP_CASES)
def test_review14_http_oversized_text_argument_is_413(method, path, where, name, kind):
    http = TestClient(create_app(_state()), base_url="http://localhost")
    value = {"items": [{"content": BIG}], "json": BIG_JSON, "list": [BIG]}.get(kind, BIG)
    url = path.replace("{session_id}", "s").replace("{item_id}", "i")
    params, body = {}, {}
    if where == "path":
        url = path.replace("{" + name + "}", BIG).replace("{session_id}", "s") \
            .replace("{item_id}", "i")
    elif where == "query":
        params[name] = value
    else:
        body[name] = value
    r = http.request(method, url, params=params, json=body if method != "DELETE" else None)
    assert r.status_code == 413, (r.status_code, r.text[:300])
    detail = r.json()
    assert detail["limit"].startswith("max_") and detail["got"] > detail["allowed"]
    assert name in detail["detail"] or kind == "items"


def test_review14_http_query_limit_is_a_query_limit_and_content_stays_content():
    http = TestClient(create_app(_state()), base_url="http://localhost")
    r = http.post("/v1/context", json={"session_id": "s", "query": "w " * 60})
    assert r.status_code == 413 and r.json()["limit"] == "max_query_chars"
    r = http.post("/v1/query", json={"q": "w " * 60})
    assert r.status_code == 413 and "q is 120 characters" in r.json()["detail"]
    # a value of 150 characters is free text (max_content_chars), not JSON (metadata bytes)
    assert http.post("/v1/cache/set", json={"key": "k", "value": "v" * 150}).status_code == 200
    r = http.post("/v1/edges", json={"src": "a", "dst": "b", "edge_type": "E" * 51})
    assert r.status_code == 413 and r.json()["limit"] == "max_id_chars"


def test_review14_limits_from_env_reads_the_new_limits():
    limits = Limits.from_env({"MEMLAB_MAX_QUERY_CHARS": "77", "MEMLAB_MAX_ID_CHARS": "9"})
    assert (limits.max_query_chars, limits.max_id_chars) == (77, 9)
    assert Limits().max_query_chars == 10_000 and Limits().max_id_chars == 256


# ------------------------------------------------------------------------------------- MCP
def _call(server, name, args):
    async def go():
        async with Client(server) as client:
            return await client.call_tool(name, args)
    return asyncio.run(go())


def _mcp_cases():
    server = create_mcp_server(_state())
    cases = []
    for tool in server._tool_manager.list_tools():  # noqa: SLF001 - the test enumerates them
        props = tool.parameters.get("properties", {})
        required = set(tool.parameters.get("required", []))
        for name, schema in props.items():
            kinds = {s.get("type") for s in schema.get("anyOf", [schema])}
            if "string" in kinds or "object" in kinds:
                cases.append(pytest.param(tool.name, name, "json" if "string" not in kinds
                                          else "str", sorted(required), id=f"{tool.name} {name}"))
    return cases


MCP_CASES = _mcp_cases()


def test_review14_every_mcp_tool_is_enumerated():
    from memlab.service.mcp import TOOLS
    assert {case.values[0] for case in MCP_CASES} == set(TOOLS)


@pytest.mark.parametrize("tool,name,kind,required", MCP_CASES)
def test_review14_mcp_oversized_text_argument_is_a_tool_error(tool, name, kind, required):
    server = create_mcp_server(_state())
    args = {arg: "x" for arg in required}
    args[name] = BIG_JSON if kind == "json" else BIG
    out = _call(server, tool, args)
    assert out.is_error
    text = out.content[0].text
    assert "the limit max_" in text and name in text, text


# ----------------------------------------------------------------------- Host allow-list
def test_review14_testserver_is_not_a_production_host():
    from fastapi.testclient import TestClient as Plain

    from memlab.service.http import LOCAL_HOSTS
    assert "testserver" not in LOCAL_HOSTS
    r = Plain(create_app(_state())).get("/health")  # Host: testserver
    assert r.status_code == 400
    allowed = Plain(create_app(_state(), allowed_hosts=[*LOCAL_HOSTS, "testserver"]))
    assert allowed.get("/health").status_code == 200
    assert TestClient(create_app(_state())).get("/health").status_code == 200


# ------------------------------------------------------- NUL ids, surrogates ingest ignores
def test_review14_nul_in_an_item_id_is_400_single_and_bulk():
    http = TestClient(create_app(_state()))
    one = http.post("/v1/items", json={"content": "x", "item_id": "a\x00b"})
    bulk = http.post("/v1/items/bulk", json={"items": [{"content": "x", "item_id": "a\x00b"}]})
    assert one.status_code == bulk.status_code == 400, (one.text, bulk.text)
    assert "item_id must not contain NUL" in one.json()["detail"]
    assert "items[0]: item_id must not contain NUL" in bulk.json()["detail"]


@pytest.mark.parametrize("name", ["provenance", "value", "field", "ref", "why_changed",
                                  "valid_from"])
def test_review14_ingest_new_topic_refuses_surrogates_in_arguments_it_ignores(name):
    import json
    http = TestClient(create_app(_state()))
    body = {"placement": "new_topic", "title": "checkout", name: "bad \udc80 text"}
    r = http.post("/v1/ingest", content=json.dumps(body),
                  headers={"content-type": "application/json"})
    assert r.status_code == 400, r.text
    assert name in r.json()["detail"] and "lone surrogate" in r.json()["detail"]
    assert http.post("/v1/search", json={"query": "checkout"}).json() == []


# ------------------------------------------------------------------------------- recorder
def test_review14_rotated_trace_files_replay_in_order_as_one(tmp_path, capsys):
    from memlab.cli import main
    path = tmp_path / "rec.jsonl"
    state = ServiceState(record=str(path), maintenance=False, record_max_bytes=1024)
    http = TestClient(create_app(state))
    for n in range(8):
        assert http.post("/v1/items", json={"content": f"deploy note {n}",
                                            "item_id": f"i{n}"}).status_code == 200
    assert http.post("/v1/pins", json={"session_id": "s", "item_id": "i0"}).status_code == 200
    assert http.post("/v1/context", json={"session_id": "s", "query": "deploy"}) \
        .status_code == 200
    rotated = sorted(tmp_path.glob("rec.jsonl.*"), key=lambda p: -int(p.suffix[1:]))
    assert rotated, "the recorder rotated"
    files = [str(p) for p in [*rotated, path]]  # oldest first
    assert main(["replay", *files, "--out", str(tmp_path / "out")]) == 0
    capsys.readouterr()
    # out of order, the pin of an item added later fails, and the error says to order them
    if len(files) > 1:
        assert main(["replay", *files[::-1], "--out", str(tmp_path / "out2")]) != 0


def test_review14_serve_refuses_to_record_into_its_own_database(tmp_path, monkeypatch, capsys):
    import uvicorn

    from memlab.cli import main
    monkeypatch.setattr(uvicorn, "run", lambda app, **kw: None)
    db = tmp_path / "same.db"
    monkeypatch.setenv("MEMLAB_DB", str(db))
    assert main(["serve", "--record", str(db)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is the database" in err[0], err
    assert not db.exists()
