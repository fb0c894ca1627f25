"""The test client of the HTTP service: Starlette's ``TestClient`` addressed to ``localhost``.

Starlette's client sends ``Host: testserver`` by default, a name the service's production Host
allow-list (:data:`memlab.service.http.LOCAL_HOSTS`) does not hold; every test talks to the app
as a loopback client would. Import it as ``from _service_client import TestClient``.
"""

from fastapi.testclient import TestClient as _StarletteTestClient


class TestClient(_StarletteTestClient):
    """``fastapi.testclient.TestClient`` whose ``base_url`` defaults to ``http://localhost``."""

    __test__ = False  # not a test class, whatever its name

    def __init__(self, app, base_url: str = "http://localhost", **kwargs) -> None:
        super().__init__(app, base_url=base_url, **kwargs)


# one request of every route with a JSON answer, and the errors each kind of check gives
EVERY_ROUTE = [
    ("GET", "/health", {}),
    ("POST", "/v1/items", {"json": {"content": "deploy checklist for the api server",
                                    "item_id": "a1", "metadata": {"n": 1.5, "tags": ["x"]}}}),
    ("POST", "/v1/items", {"json": {"content": "the api server needs a deploy key"}}),
    ("POST", "/v1/items/bulk", {"json": {"items": [
        {"content": f"bulk note {i} about the deploy", "item_id": f"b{i}"} for i in range(4)]}}),
    ("GET", "/v1/items/a1", {}),
    ("GET", "/v1/items/missing", {}),
    ("POST", "/v1/search", {"json": {"query": "deploy server"}}),
    ("POST", "/v1/search", {"json": {"query": "deploy", "top_k": 0}}),
    ("POST", "/v1/search", {"content": b"{not json",
                            "headers": {"content-type": "application/json"}}),
    ("POST", "/v1/search", {"content": b'{"query": "deploy"}',
                            "headers": {"content-type": "text/plain"}}),
    ("POST", "/v1/context", {"json": {"session_id": "s1", "query": "deploy checklist"}}),
    ("POST", "/v1/context", {"json": {"session_id": "s1", "query": "deploy", "k": 3,
                                      "max_tokens": 40}}),
    ("POST", "/v1/edges", {"json": {"src": "a1", "dst": "b1"}}),
    ("GET", "/v1/edges", {"params": {"item_id": "a1"}}),
    ("POST", "/v1/pins", {"json": {"session_id": "s1", "item_id": "a1"}}),
    ("GET", "/v1/pins/s1", {}),
    ("DELETE", "/v1/pins/s1/a1", {}),
    ("DELETE", "/v1/pins", {"params": {"session_id": "s1", "item_id": "a1"}}),
    ("POST", "/v1/ingest", {"json": {"placement": "new_topic", "title": "Deploys",
                                     "fields": {"owner": "ops"}}}),
    ("POST", "/v1/query", {"json": {"q": "deploy", "explain": True}}),
    ("POST", "/v1/cache/set", {"json": {"key": "k1", "value": "v1"}}),
    ("POST", "/v1/cache/peek", {"json": {"key": "k1"}}),
    ("POST", "/v1/resolve", {"json": {"session_id": "s1", "key": "k1"}}),
    ("POST", "/v1/promote", {"json": {"session_id": "s1", "key": "k1", "value": "v1"}}),
    ("GET", "/v1/status", {"params": {"session_id": "s1"}}),
    ("POST", "/v1/cache/flush", {}),
    ("POST", "/v1/graph/nodes", {"json": {"session_id": "s1", "node_type": "concept",
                                          "label": "L", "content": "c"}}),
    ("POST", "/v1/graph/search", {"json": {"session_id": "s1", "query": "L"}}),
    ("POST", "/v1/maintenance", {"json": {"dry_run": True}}),
    ("POST", "/v1/maintenance", {"json": {"dry_run": False}}),
    ("GET", "/health/graph", {}),
    ("POST", "/v1/items", {"json": {"content": "y" * 200_000}}),
    ("POST", "/v1/items", {"json": {"content": "ok", "item_id": "z\x00"}}),
]
