"""Review 14, item 4: reads of a short-term cache never create it (HTTP and MCP), and a cache
written before a restart is still read back."""

import asyncio

import pytest

pytest.importorskip("fastapi")
pytest.importorskip("mcp")

from _service_client import TestClient  # noqa: E402
from mcp import Client  # noqa: E402

from memlab.service import ServiceState, create_app, create_mcp_server  # noqa: E402


def call_tool(server, name, args):
    async def go():
        async with Client(server) as client:
            return await client.call_tool(name, args)
    return asyncio.run(go())


def test_review14_a_thousand_peeks_of_unknown_caches_and_workspaces_create_nothing(tmp_path):
    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False)
    client = TestClient(create_app(state))
    rows = state.store.journal.count()
    for i in range(1000):
        body = {"workspace_id": f"ghost-{i}", "key": "k"} if i % 2 else \
            {"cache": f"c{i}", "key": "k"}
        response = client.post("/v1/cache/peek", json=body)
        assert response.status_code == 200
        assert response.json() == {"hit": False, "value": None, "index": -1}
    assert len(state._caches) == 0
    assert state.store.journal.count() == rows


def test_review14_status_and_resolve_of_unknown_caches_create_nothing(tmp_path):
    state = ServiceState(db_path=str(tmp_path / "m.db"), maintenance=False)
    client = TestClient(create_app(state))
    for i in range(200):
        status = client.get(f"/v1/status?session_id=s&cache=s{i}&workspace_id=w{i % 7}")
        assert status.status_code == 200
        assert status.json()["short_term"]["slots_used"] == 0
        resolved = client.post("/v1/resolve", json={"session_id": "s", "key": "k",
                                                    "cache": f"r{i}"})
        assert resolved.status_code == 200 and resolved.json()["source"] == "miss"
    assert len(state._caches) == 0


def test_review14_mcp_cache_reads_create_nothing():
    state = ServiceState(maintenance=False)
    server = create_mcp_server(state)
    for i in range(20):
        call_tool(server, "peek", {"key": "k", "cache": f"c{i}", "workspace_id": f"w{i}"})
        call_tool(server, "memory_status", {"session_id": "s", "cache": f"s{i}"})
        call_tool(server, "resolve_context", {"session_id": "s", "key": "k", "cache": f"r{i}"})
    assert len(state._caches) == 0
    call_tool(server, "set", {"key": "k", "value": "v", "cache": "real"})
    assert list(state._caches) == [("default", "real")]


def test_review14_a_cache_written_before_a_restart_is_read_back_without_a_write(tmp_path):
    path = str(tmp_path / "m.db")
    first = ServiceState(db_path=path, maintenance=False)
    client = TestClient(create_app(first))
    assert client.post("/v1/cache/set", json={"key": "k", "value": "v", "cache": "team",
                                              "workspace_id": "w"}).status_code == 200
    assert client.post("/v1/cache/set", json={"key": "k", "value": "d"}).status_code == 200
    first.store.flush()
    first.store.journal.close()
    second = ServiceState(db_path=path, maintenance=False)
    client = TestClient(create_app(second))
    peek = client.post("/v1/cache/peek", json={"key": "k", "cache": "team", "workspace_id": "w"})
    assert peek.json() == {"hit": True, "value": "v", "index": 0}
    assert client.post("/v1/cache/peek", json={"key": "k"}).json()["value"] == "d"
    assert client.post("/v1/cache/peek", json={"key": "k", "cache": "team"}).json()["hit"] \
        is False  # the same name in another workspace is another cache
    assert sorted(second._caches) == [("default", "default"), ("w", "team")]
