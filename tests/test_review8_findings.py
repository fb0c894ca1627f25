"""Round 8 code review (route plans, memlab's workers, reads_during_fsync): one test per defect.

Each test fails on a33b195 and states the behaviour FastAPI / anyio / the previous lock has.
Events, not timings; the timeouts only turn a hang into a failure.
"""

from __future__ import annotations

import asyncio
import threading
from datetime import datetime, timezone
from typing import Any

import pytest

pytest.importorskip("fastapi")

import anyio  # noqa: E402
from fastapi import APIRouter, Depends, FastAPI, HTTPException  # noqa: E402
from fastapi.routing import APIRoute  # noqa: E402

from _service_client import TestClient  # noqa: E402
from memlab import ManualClock, Memory, MemoryStore  # noqa: E402
from memlab.service import ServiceState, create_app  # noqa: E402
from memlab.service import http as service_http  # noqa: E402
from memlab.service._plan import PlannedRoute  # noqa: E402
from memlab.service._workers import Workers  # noqa: E402
from memlab.session import PMMemoryStore  # noqa: E402

from _support import SlowCommit, start_thread, until, waiting_in  # noqa: E402

SAFETY_S = 10.0
T0 = datetime(2024, 3, 1, 9, tzinfo=timezone.utc)


# ------------------------------------------------------------------ workers
def test_review8_workers_cancelled_by_an_anyio_scope_neither_spin_nor_escape_it(monkeypatch):
    """anyio's ``to_thread.run_sync`` shields the wait: one cancellation, caught by the scope.
    ``Workers.run`` re-awaits after each CancelledError, so anyio re-delivers the cancellation
    on every loop iteration (the loop spins while the call runs), and the bare CancelledError
    it raises at the end carries no anyio cancel message: it escapes ``move_on_after``."""
    workers = Workers(max_threads=1)
    entered, release = threading.Event(), threading.Event()
    shields = []
    real_shield = asyncio.shield
    monkeypatch.setattr(asyncio, "shield", lambda f: shields.append(1) or real_shield(f))

    def hold() -> None:
        entered.set()
        assert release.wait(SAFETY_S)

    async def main() -> bool:
        async def release_later() -> None:
            while not entered.is_set():
                await asyncio.sleep(0.001)
            scope.cancel()
            for _ in range(200):  # 200 loop iterations while the call still runs
                await asyncio.sleep(0)
            release.set()

        with anyio.CancelScope() as scope:
            helper = asyncio.ensure_future(release_later())
            await workers.run(hold)
        await helper
        return scope.cancelled_caught

    try:
        caught = asyncio.run(main())
    except asyncio.CancelledError:
        caught = "escaped"
    # anyio's run_sync returns the call's value (False: nothing to catch); either way the
    # scope's own cancellation must not leave it
    assert caught in (True, False), caught
    assert len(shields) <= 3, f"{len(shields)} re-waits: the loop spun while the call ran"


def test_review8_a_worker_thread_that_fails_to_start_runs_nothing_later_and_leaks_no_slot(
        monkeypatch):
    """``_submit`` counts the thread and queues the job before ``Thread.start``; when start
    raises, the caller gets the error but its job stays queued (it runs later, behind an
    answered request) and the slot is gone for good (with max_threads=1 every later call
    hangs)."""
    workers = Workers(max_threads=1)
    ran: list[str] = []
    real_start = threading.Thread.start
    failed = []

    def start(self):
        if self.name.startswith("memlab-worker") and not failed:
            failed.append(1)
            raise RuntimeError("can't start new thread")
        return real_start(self)

    monkeypatch.setattr(threading.Thread, "start", start)

    async def main() -> str:
        with pytest.raises(RuntimeError, match="start new thread"):
            await workers.run(ran.append, "first (answered with an error)")
        return await workers.run(lambda: "second")

    # in a thread of its own: a hung run cannot even be cancelled (Workers.run waits for a
    # queued call that no thread will ever take)
    runner, out = start_thread(asyncio.run, main())
    runner.join(SAFETY_S)
    second = out.get("value", "hung: the phantom thread holds the only slot")
    assert second == "second"
    assert ran == []  # the call whose caller saw an error never runs


# ------------------------------------------------------------------ route plans
def _app(planned: bool):
    original = service_http._route_class
    if not planned:
        service_http._route_class = lambda: APIRoute
    try:
        return create_app(ServiceState(clock=ManualClock(T0), maintenance=False))
    finally:
        service_http._route_class = original


async def _disconnected_post(app) -> tuple[list, str | None]:
    """POST /v1/items whose client goes away before its (declared) body arrives."""
    scope = {"type": "http", "method": "POST", "path": "/v1/items", "raw_path": b"/v1/items",
             "query_string": b"", "root_path": "", "scheme": "http", "http_version": "1.1",
             "server": ("localhost", 80), "client": ("127.0.0.1", 1),
             "headers": [(b"host", b"localhost"), (b"content-type", b"application/json"),
                         (b"content-length", b"40")]}
    sent = []

    async def receive():
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append((message.get("status"), message.get("body")))

    try:
        await app(scope, receive, send)
    except Exception as exc:  # noqa: BLE001
        return sent, type(exc).__name__
    return sent, None


def test_review8_a_client_gone_before_its_body_is_answered_as_fastapi_does():
    """FastAPI reads the body inside its try: a ClientDisconnect becomes its 400 ("There was
    an error parsing the body"). The plan awaits ``request.body()`` outside any try, so the
    exception reaches ServerErrorMiddleware: a 500, re-raised to the server (an
    "Exception in ASGI application" traceback in uvicorn's log for every client that goes
    away mid-upload)."""
    theirs = asyncio.run(_disconnected_post(_app(planned=False)))
    ours = asyncio.run(_disconnected_post(_app(planned=True)))
    assert theirs[0][0][0] == 400 and theirs[1] is None
    assert ours == theirs


def test_review8_a_planned_route_keeps_the_dependencies_its_router_was_included_with():
    """FastAPI builds an included route's handler from the include's effective context (its
    ``dependencies=``, prefix, overrides provider). ``RoutePlan.of(self, ...)`` reads the
    route's own dependant, so a dependency added at ``include_router`` (an auth check, say)
    is skipped on the planned path."""
    def build(route_class):
        router = APIRouter(route_class=route_class)

        async def key() -> str:
            return "k"
        key.__memlab_pure__ = True

        @router.get("/x")
        @service_http.encoded
        def x(k: str = Depends(key)) -> dict[str, Any]:
            return {"ok": True}

        def deny() -> None:
            raise HTTPException(status_code=403, detail="denied")

        app = FastAPI()
        app.include_router(router, prefix="/p", dependencies=[Depends(deny)])
        return app

    theirs = TestClient(build(APIRoute)).get("/p/x")
    ours = TestClient(build(PlannedRoute)).get("/p/x")
    assert theirs.status_code == 403
    assert (ours.status_code, ours.content) == (theirs.status_code, theirs.content)


# ------------------------------------------------------------------ reads_during_fsync
@pytest.mark.parametrize("on", [False, True], ids=["off", "on"])
def test_review8_a_shared_section_that_writes_a_durable_cache_never_deadlocks(tmp_path, on):
    """A durable cache (``PMMemoryStore(durable=store)``) writes the store's own journal. A
    thread inside ``with store.lock.shared():`` that sets a cache value is admitted beside a
    writer in its COMMIT; the writer then holds the journal's lock while it waits for that
    reader, and the reader waits for the journal's lock. Off, the reader simply waits for the
    write (the first parametrization passes)."""
    store = MemoryStore(path=tmp_path / "m.db", compact_after=None, reads_during_fsync=on)
    mem = Memory(store=store, workspace_id="ws", clock=ManualClock(T0))
    mem.add("deploys run on fridays", item_id="a")
    cache = PMMemoryStore(durable=store, name="c")
    slow = SlowCommit(store.journal)
    store.journal.around_commit = slow
    writer, w_out = start_thread(mem.add, "the release train leaves on fridays", "semantic",
                                 None, "w")
    assert slow.entered.wait(SAFETY_S)

    def read_then_cache() -> None:
        with store.lock.shared():
            hits = mem.search("fridays")
            cache.set("fridays", hits[0]["item_id"])

    reader, r_out = start_thread(read_then_cache)
    # on: admitted, it waits for the journal's lock; off: it waits for the shared side
    assert until(lambda: waiting_in(reader, "append_many") or store.lock.waiting()[0] == 1)
    slow.release.set()
    writer.join(SAFETY_S)
    reader.join(SAFETY_S)
    stuck = [name for name, t in (("writer", writer), ("reader", reader)) if t.is_alive()]
    assert not stuck, f"deadlock: {stuck} still waiting"
    assert w_out.get("value") == "w" and r_out.get("done"), (w_out, r_out)
