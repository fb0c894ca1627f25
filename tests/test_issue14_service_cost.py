"""Issue 14, item 9 over HTTP: the service's own work per request, with unchanged answers.

Each route takes one trip to a worker thread (its own work, with the answer encoded there;
memlab's own workers since the route plans, ``tests/test_issue14_http_cpu.py``), its key and
limits are checked by one async dependency on the event loop, and ``/health`` stays on the
event loop. These tests pin the answers (status, headers, bytes) to those of the same app with
FastAPI's own encoding, the order of the checks (401, then 413 / 400, then 422), and the
number of worker trips; they assert nothing about time.
"""

import json
from datetime import datetime, timezone
from typing import Any

import pytest

pytest.importorskip("fastapi")

import fastapi.dependencies.utils as fastapi_dependencies  # noqa: E402
import fastapi.routing as fastapi_routing  # noqa: E402
from _service_client import EVERY_ROUTE, TestClient  # noqa: E402
from starlette.responses import Response  # noqa: E402

from memlab import ManualClock  # noqa: E402
from memlab.service import Limits, ServiceState, create_app  # noqa: E402
from memlab.service import http as service_http  # noqa: E402
from memlab.service.auth import KeyRing  # noqa: E402

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)

def _answers(app, script) -> list[tuple]:
    out = []
    with TestClient(app, raise_server_exceptions=False) as http:
        for method, path, kwargs in script:
            r = http.request(method, path, **kwargs)
            headers = sorted((k, v) for k, v in r.headers.items() if k != "date")
            out.append((method, path, r.status_code, headers, r.content))
    return out


def _app(monkeypatch, *, fastapi_encoding: bool, **options):
    with monkeypatch.context() as patch:
        if fastapi_encoding:  # the routes as they were: FastAPI validates and encodes
            patch.setattr(service_http, "encoded", lambda endpoint: endpoint)
        return create_app(ServiceState(clock=ManualClock(T0), maintenance=False), **options)


def test_issue14_answers_are_byte_identical_to_fastapis_own_encoding(monkeypatch):
    ours = _answers(_app(monkeypatch, fastapi_encoding=False), EVERY_ROUTE)
    theirs = _answers(_app(monkeypatch, fastapi_encoding=True), EVERY_ROUTE)
    assert [a[:3] for a in ours] == [a[:3] for a in theirs]
    assert ours == theirs
    assert {a[2] for a in ours} >= {200, 202, 400, 413, 422}  # the script reaches every kind


def test_issue14_the_openapi_schema_is_unchanged_by_the_encoding(monkeypatch):
    ours = _app(monkeypatch, fastapi_encoding=False).openapi()
    theirs = _app(monkeypatch, fastapi_encoding=True).openapi()
    assert json.dumps(ours, sort_keys=True) == json.dumps(theirs, sort_keys=True)
    search = ours["paths"]["/v1/search"]["post"]
    assert search["responses"]["200"]["content"]["application/json"]["schema"]["type"] == "array"
    headers = {p["name"] for p in ours["paths"]["/v1/items/{item_id}"]["get"]["parameters"]
               if p["in"] == "header"}
    assert headers == {"x-api-key", "authorization"}


def test_issue14_checks_run_in_order_key_then_limits_then_the_body(monkeypatch):
    ring = KeyRing.from_mapping({"keys": [{"name": "a", "key": "secret-a-1",
                                           "write": ["team-a"]}]})
    http = TestClient(_app(monkeypatch, fastapi_encoding=False, keys=ring))
    key = {"x-api-key": "secret-a-1"}
    huge = {"content": "x" * 200_000, "workspace_id": "team-a"}
    assert http.post("/v1/items", json=huge).status_code == 401  # no key: before the limits
    assert http.post("/v1/items", json=huge, headers={"x-api-key": "wrong"}).status_code == 401
    assert http.post("/v1/items", json=huge, headers=key).status_code == 413
    nul = {"content": "ok", "item_id": "a\x00", "workspace_id": "team-a"}
    assert http.post("/v1/items", json=nul, headers=key).status_code == 400
    bad = {"content": "ok", "workspace_id": "team-a", "unknown": 1}
    assert http.post("/v1/items", json=bad, headers=key).status_code == 422
    assert http.post("/v1/items", json={"content": "x", "workspace_id": "team-b"},
                     headers=key).status_code == 403
    bearer = {"authorization": "Bearer secret-a-1"}
    ok = http.post("/v1/items", json={"content": "ok", "workspace_id": "team-a"},
                   headers=bearer)
    assert ok.status_code == 200 and ok.json()["item_id"]


def test_issue14_a_route_takes_one_trip_to_a_worker_thread(monkeypatch):
    """Each route runs once in memlab's own workers and never in anyio's thread pool (its
    plan solves the key, the limits and the values on the event loop)."""
    from memlab.service import _plan
    anyio_trips: list[str] = []

    def counting(module):
        original = module.run_in_threadpool

        async def run_in_threadpool(func, *args, **kwargs):
            anyio_trips.append(getattr(func, "__name__", repr(func)))
            return await original(func, *args, **kwargs)
        monkeypatch.setattr(module, "run_in_threadpool", run_in_threadpool)

    counting(fastapi_routing)
    counting(fastapi_dependencies)
    ran: list[str] = []
    original_run = _plan.WORKERS.run

    async def run(function, *args, **kwargs):
        ran.append(function.__name__)
        return await original_run(function, *args, **kwargs)
    monkeypatch.setattr(_plan.WORKERS, "run", run)
    http = TestClient(_app(monkeypatch, fastapi_encoding=False))
    assert http.post("/v1/items", json={"content": "deploy notes", "item_id": "a"}) \
        .status_code == 200
    for method, path, body, route in [
            ("POST", "/v1/search", {"query": "deploy"}, "search"),
            ("POST", "/v1/context", {"session_id": "s", "query": "deploy"}, "context"),
            ("GET", "/v1/items/a", None, "get_item"),
            ("POST", "/v1/items", {"content": "more deploy notes"}, "add_item")]:
        ran.clear(), anyio_trips.clear()
        r = http.request(method, path, json=body)
        assert r.status_code == 200
        assert (ran, anyio_trips) == ([route], []), path  # was three trips through anyio
    # a request the plan does not answer itself (a body that does not validate) goes to
    # FastAPI's handler, which answers its 422 without running the route
    ran.clear()
    assert http.post("/v1/search", json={"query": "deploy", "top_k": "many"}).status_code == 422
    assert ran == []
    assert http.get("/health").json() == {"status": "ok"}
    assert anyio_trips == [] and ran == []  # on the event loop


def test_issue14_encoded_hands_back_what_it_cannot_encode():
    @service_http.encoded
    def fine() -> dict[str, Any]:
        return {"n": 1, "when": datetime(2024, 1, 1, tzinfo=timezone.utc), "x": float("nan")}

    @service_http.encoded
    def wrong_keys() -> dict[str, Any]:
        return {1: "a"}

    thing = object()

    @service_http.encoded
    def unencodable() -> dict[str, Any]:
        return {"x": thing}

    @service_http.encoded
    def own() -> dict[str, Any]:
        return Response(b"raw", status_code=202)

    answer = fine()
    assert isinstance(answer, Response) and answer.media_type == "application/json"
    assert json.loads(answer.body) == {"n": 1, "when": "2024-01-01T00:00:00Z", "x": None}
    assert wrong_keys() == {1: "a"}  # FastAPI's own validation answers it (500), as before
    assert unencodable() == {"x": thing}
    assert own().status_code == 202 and own().body == b"raw"
    with pytest.raises(ValueError, match="return annotation"):
        service_http.encoded(lambda: None)


def test_issue14_an_unencodable_answer_is_still_answered_by_fastapi(monkeypatch):
    state = ServiceState(clock=ManualClock(T0), maintenance=False, limits=Limits())
    http = TestClient(create_app(state), raise_server_exceptions=False)
    assert http.post("/v1/items", json={"content": "deploy", "item_id": "a"}).status_code == 200
    mem = state.memory("default")
    monkeypatch.setattr(type(mem), "get", lambda self, item_id, reinforce=True: {1: "a"})
    assert http.get("/v1/items/a").status_code == 500  # FastAPI's response validation


def test_issue14_background_work_still_runs_after_an_encoded_answer():
    state = ServiceState(clock=ManualClock(T0))
    calls: list[tuple[str, str]] = []
    state.after = lambda workspace_id, event: calls.append((workspace_id, event))
    http = TestClient(create_app(state))
    assert http.post("/v1/items", json={"content": "deploy notes"}).status_code == 200
    assert http.post("/v1/query", json={"q": "deploy"}).status_code == 200
    assert http.post("/v1/ingest", json={"placement": "new_topic", "title": "T"}).status_code \
        == 200
    assert calls == [("default", "query"), ("default", "ingest")]
