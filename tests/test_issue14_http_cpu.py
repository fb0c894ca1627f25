"""Issue 14, item 9 over HTTP: route plans and memlab's own worker threads answer exactly as
FastAPI's handler does (``memlab/service/_plan.py``, ``memlab/service/_workers.py``).

The plans are compared with FastAPI's own handler on the same app (``encoded`` kept), over a
script of plain and awkward requests and over random ones (hypothesis); the workers are tested
with events, never with timings.
"""

import asyncio
import contextvars
import threading
from datetime import datetime, timezone

import pytest

pytest.importorskip("fastapi")

from _service_client import EVERY_ROUTE, TestClient  # noqa: E402
from fastapi.routing import APIRoute  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from memlab import ManualClock  # noqa: E402
from memlab.service import ServiceState, create_app  # noqa: E402
from memlab.service import _plan  # noqa: E402
from memlab.service import http as service_http  # noqa: E402
from memlab.service._workers import Workers  # noqa: E402
from memlab.service.auth import KeyRing  # noqa: E402

T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)
SAFETY_S = 30.0
RING = {"keys": [{"name": "w", "key": "secret-w-1", "write": ["default", "team"]},
                 {"name": "r", "key": "secret-r-1", "read": ["default"]}]}
JSON = {"content-type": "application/json"}
KEY = {"x-api-key": "secret-w-1"}

# plain requests and every way a request can leave the plain case
SCRIPT = [
    ("POST", "/v1/items", {"json": {"content": "deploy checklist", "item_id": "a1"}}),
    ("POST", "/v1/items", {"json": {"content": "api server deploy key", "item_id": "a2",
                                    "workspace_id": "team"}}),
    ("POST", "/v1/items", {"content": b'{"content": "x"}',
                           "headers": {"content-type": "application/json; charset=utf-8"}}),
    ("POST", "/v1/items", {"content": b'{"content": "x"}',
                           "headers": {"content-type": "application/vnd.api+json"}}),
    ("POST", "/v1/items", {"content": b'{"content": "x"}', "headers": {}}),
    ("POST", "/v1/items", {"content": b"", "headers": JSON}),
    ("POST", "/v1/items", {"content": b"[1, 2]", "headers": JSON}),
    ("POST", "/v1/items", {"content": b"null", "headers": JSON}),
    ("POST", "/v1/items", {"content": b'"text"', "headers": JSON}),
    ("POST", "/v1/items", {"json": {"content": "ok", "extra": 1}}),
    ("POST", "/v1/items", {"json": {"content": ""}}),
    ("POST", "/v1/items", {"json": {"content": "ok", "item_id": "n\x00"}}),
    ("POST", "/v1/items", {"json": {"content": "y" * 200_000}}),
    ("POST", "/v1/items/bulk", {"json": {"items": [{"content": "bulk deploy", "item_id": "b1"}]}}),
    ("GET", "/v1/items/a1", {}),
    ("GET", "/v1/items/a1", {"params": {"workspace_id": "team"}}),
    ("GET", "/v1/items/a1", {"params": [("workspace_id", "team"), ("workspace_id", "default")]}),
    ("GET", "/v1/items/a%20b", {}),
    ("GET", "/v1/items/missing", {}),
    ("HEAD", "/v1/items/a1", {}),
    ("POST", "/v1/search", {"json": {"query": "deploy", "top_k": 2}}),
    ("POST", "/v1/search", {"json": {"query": "deploy", "top_k": "2"}}),
    ("POST", "/v1/search", {"json": {"query": "deploy", "top_k": "many"}}),
    ("POST", "/v1/search", {"json": {"query": "deploy", "top_k": 0}}),
    ("POST", "/v1/search", {"json": {"query": "deploy", "workspace_id": "elsewhere"}}),
    ("POST", "/v1/search", {"content": b"{not json", "headers": JSON}),
    ("POST", "/v1/context", {"json": {"session_id": "s1", "query": "deploy", "k": 2}}),
    ("POST", "/v1/context", {"json": {"session_id": "s1"}}),
    ("POST", "/v1/edges", {"json": {"src": "a1", "dst": "b1"}}),
    ("GET", "/v1/edges", {"params": {"item_id": "a1"}}),
    ("GET", "/v1/edges", {"params": {"item_id": ""}}),
    ("POST", "/v1/pins", {"json": {"session_id": "s1", "item_id": "a1"}}),
    ("GET", "/v1/pins/s1", {}),
    ("DELETE", "/v1/pins/s1/a1", {}),
    ("POST", "/v1/query", {"json": {"q": "deploy", "explain": True}}),
    ("POST", "/v1/cache/set", {"json": {"key": "k1", "value": "v1"}}),
    ("POST", "/v1/cache/flush", {"params": {"cache": "default"}}),
    ("GET", "/v1/status", {}),
    ("GET", "/v1/status", {"params": {"session_id": "s1"}}),
    ("POST", "/v1/maintenance", {"json": {"dry_run": True}}),
    ("GET", "/health", {}),
    ("GET", "/health/graph", {}),
]


def _app(monkeypatch, *, planned: bool, keys=None):
    with monkeypatch.context() as patch:
        if not planned:  # every route answered by FastAPI's own handler
            patch.setattr(service_http, "_route_class", lambda: APIRoute)
        return create_app(ServiceState(clock=ManualClock(T0), maintenance=False),
                          keys=None if keys is None else KeyRing.from_mapping(keys))


def _answer(http, method, path, kwargs, headers) -> tuple:
    kwargs = dict(kwargs)
    kwargs["headers"] = {**headers, **kwargs.get("headers", {})}
    r = http.request(method, path, **kwargs)
    return (method, path, r.status_code,
            sorted((k, v) for k, v in r.headers.items() if k != "date"), r.content)


@pytest.mark.parametrize("headers", [KEY, {"x-api-key": "secret-r-1"},
                                     {"authorization": "Bearer secret-w-1"}, {},
                                     {"x-api-key": "wrong"}], ids=["write", "read", "bearer",
                                                                   "none", "wrong"])
def test_issue14_planned_routes_answer_byte_for_byte_as_fastapi(monkeypatch, headers):
    answers = []
    for planned in (True, False):
        with TestClient(_app(monkeypatch, planned=planned, keys=RING),
                        raise_server_exceptions=False) as http:
            answers.append([_answer(http, m, p, kw, headers) for m, p, kw in SCRIPT])
    ours, theirs = answers
    assert [a[:3] for a in ours] == [a[:3] for a in theirs]
    assert ours == theirs
    if headers is KEY:  # the script reaches the plain case and each kind of hand-over
        assert {a[2] for a in ours} >= {200, 400, 403, 413, 422}


def test_issue14_every_route_answers_as_fastapi_with_its_plan(monkeypatch):
    answers = []
    for planned in (True, False):
        with TestClient(_app(monkeypatch, planned=planned),
                        raise_server_exceptions=False) as http:
            answers.append([_answer(http, m, p, kw, {}) for m, p, kw in EVERY_ROUTE])
    assert answers[0] == answers[1]
    assert {a[1] for a in answers[0] if a[2] == 200} >= {
        "/v1/ingest", "/v1/query", "/v1/resolve", "/v1/promote", "/v1/cache/peek",
        "/v1/graph/nodes", "/v1/graph/search", "/v1/pins", "/v1/status"}


def test_issue14_every_encoded_route_has_a_plan(monkeypatch):
    app = _app(monkeypatch, planned=True)
    routes = {r.path_format + " " + ",".join(sorted(r.methods)): r for r in app.routes
              if isinstance(r, APIRoute)}
    planned = {name for name, r in routes.items() if r.plan is not None}
    encoded = {name for name, r in routes.items()
               if getattr(r.endpoint, "__memlab_encoded__", False)}
    assert planned == encoded
    assert {"/v1/search POST", "/v1/context POST", "/v1/items/{item_id} GET",
            "/v1/items POST"} <= planned
    assert "/health GET" not in planned and "/v1/maintenance POST" not in planned


def test_issue14_a_dependency_override_goes_through_fastapi(monkeypatch):
    app = _app(monkeypatch, planned=True)
    http = TestClient(app)
    assert http.post("/v1/items", json={"content": "deploy", "item_id": "a"}).status_code == 200
    caller = next(r for r in app.routes if getattr(r, "path", "") == "/v1/search") \
        .dependant.dependencies[0].call
    seen = []

    async def admin():
        seen.append(1)
        from memlab.service.auth import OPEN
        return OPEN
    app.dependency_overrides[caller] = admin
    assert http.post("/v1/search", json={"query": "deploy"}).json()[0]["item_id"] == "a"
    assert seen == [1]  # FastAPI's handler applied the override


def test_issue14_background_tasks_run_after_a_planned_answer(monkeypatch):
    state = ServiceState(clock=ManualClock(T0))
    calls = []
    state.after = lambda workspace_id, event: calls.append((workspace_id, event))
    app = create_app(state)
    assert next(r for r in app.routes if getattr(r, "path", "") == "/v1/query").plan
    http = TestClient(app)
    assert http.post("/v1/items", json={"content": "deploy notes"}).status_code == 200
    assert http.post("/v1/query", json={"q": "deploy"}).status_code == 200
    assert calls == [("default", "query")]


_ROUTES = st.sampled_from([
    ("POST", "/v1/search", "query"), ("POST", "/v1/context", "query"),
    ("POST", "/v1/items", "content"), ("GET", "/v1/items/a1", None),
    ("GET", "/v1/edges", None), ("GET", "/v1/pins/s1", None)])
_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-3, 200), st.text(max_size=8),
                    st.lists(st.integers(0, 3), max_size=2))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                  HealthCheck.function_scoped_fixture])
@given(requests=st.lists(st.tuples(
    _ROUTES, st.dictionaries(st.sampled_from(["query", "content", "top_k", "k", "session_id",
                                              "workspace_id", "item_id", "strategy",
                                              "max_tokens", "memory_type"]),
                             _VALUES, max_size=4),
    st.sampled_from(["application/json", "text/plain", ""])), min_size=1, max_size=6))
def test_issue14_plans_match_fastapi_on_random_requests(monkeypatch, requests):
    answers = []
    for planned in (True, False):
        with TestClient(_app(monkeypatch, planned=planned),
                        raise_server_exceptions=False) as http:
            http.post("/v1/items", json={"content": "deploy checklist", "item_id": "a1"})
            out = []
            for (method, path, text_field), fields, content_type in requests:
                if method == "GET":
                    params = {k: v for k, v in fields.items() if isinstance(v, str)}
                    out.append(_answer(http, method, path, {"params": params}, {}))
                    continue
                import json
                kwargs = {"content": json.dumps(fields).encode(),
                          "headers": {"content-type": content_type} if content_type else {}}
                out.append(_answer(http, method, path, kwargs, {}))
            answers.append(out)
    assert answers[0] == answers[1]


# ---------------------------------------------------------------- the worker threads
def test_issue14_workers_return_values_raise_errors_and_copy_the_context():
    workers = Workers(max_threads=2)
    where = contextvars.ContextVar("where", default="unset")

    async def main():
        where.set("caller")
        assert await workers.run(lambda a, b=0: a + b, 2, b=3) == 5
        assert await workers.run(where.get) == "caller"
        with pytest.raises(KeyError, match="gone"):
            await workers.run({}.__getitem__, "gone")
        return await workers.run(threading.current_thread)
    thread = asyncio.run(main())
    assert thread is not threading.current_thread() and thread.name.startswith("memlab-worker")
    assert workers.threads == 1 and workers.calls == 4  # one thread, reused


def test_issue14_workers_run_at_most_max_threads_at_once():
    workers = Workers(max_threads=2)
    release = threading.Event()
    inside: list[int] = []
    two_in = threading.Event()

    def hold(n: int) -> int:
        inside.append(n)
        if len(inside) == 2:
            two_in.set()
        assert release.wait(SAFETY_S)
        return n

    async def main():
        tasks = [asyncio.ensure_future(workers.run(hold, n)) for n in range(3)]
        while not two_in.is_set():
            await asyncio.sleep(0.001)
        for _ in range(50):
            await asyncio.sleep(0)
        started = list(inside)  # the third call queues behind the two running ones
        release.set()
        return started, await asyncio.gather(*tasks)
    started, results = asyncio.run(main())
    assert len(started) == 2 and results == [0, 1, 2] and workers.threads == 2


def test_issue14_a_cancelled_caller_waits_for_its_call_to_end():
    workers = Workers(max_threads=1)
    entered, release = threading.Event(), threading.Event()
    ended = []

    def slow():
        entered.set()
        assert release.wait(SAFETY_S)
        ended.append(True)

    async def main():
        task = asyncio.ensure_future(workers.run(slow))
        while not entered.is_set():
            await asyncio.sleep(0.001)
        task.cancel()
        for _ in range(20):
            await asyncio.sleep(0)
        assert not task.done()  # cancelled, but its call still runs: the task waits
        release.set()
        with pytest.raises(asyncio.CancelledError):
            await task
        return list(ended)
    assert asyncio.run(main()) == [True]


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "4", None])
def test_issue14_workers_refuse_a_bad_max_threads(bad):
    with pytest.raises(ValueError, match="max_threads"):
        Workers(max_threads=bad)


def test_issue14_the_service_uses_the_shared_workers(monkeypatch):
    ran = []
    original = _plan.WORKERS.run

    async def run(function, *args, **kwargs):
        ran.append(threading.current_thread().name)
        return await original(function, *args, **kwargs)
    monkeypatch.setattr(_plan.WORKERS, "run", run)
    http = TestClient(_app(monkeypatch, planned=True))
    assert http.post("/v1/items", json={"content": "deploy"}).status_code == 200
    assert len(ran) == 1


def test_issue14_a_call_cancelled_before_it_starts_never_runs():
    workers = Workers(max_threads=1)
    entered, release = threading.Event(), threading.Event()
    ran: list[str] = []

    def hold() -> str:
        entered.set()
        assert release.wait(SAFETY_S)
        return "first"

    async def main():
        first = asyncio.ensure_future(workers.run(hold))
        while not entered.is_set():
            await asyncio.sleep(0.001)
        queued = asyncio.ensure_future(workers.run(ran.append, "queued"))
        for _ in range(5):
            await asyncio.sleep(0)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued  # at once: its call had not started
        release.set()
        value = await first
        return value, await workers.run(lambda: "after")
    assert asyncio.run(main()) == ("first", "after")
    assert ran == [] and workers.threads == 1  # the thread skipped it and stays usable
