"""The HTTP service's own worker threads for sync routes (issue 14, item 9 over HTTP).

FastAPI runs a sync route through ``anyio.to_thread.run_sync``: a capacity limiter taken and
given back on the event loop, a cancel scope, a worker looked up and a result carried back,
each a few event-loop steps per request. With 8 clients on 2 cores every step also waits for
the GIL, and the profile of ``memlab serve`` showed this hand-over among the largest costs that
are not the store's. :class:`Workers` does the same hand-over with one queue put and one
``call_soon_threadsafe``: at most ``max_threads`` threads (40, anyio's default limit), started
as needed and kept (daemon threads: ``memlab serve`` answers every request before it stops);
the caller's context variables are copied into the call, as anyio does.

Cancellation, as anyio's ``run_sync`` without ``abandon_on_cancel``: a call that has not
started when its caller is cancelled never runs; one that has started runs to its end, and the
caller waits for it (shielded, so an anyio cancel scope does not re-deliver its cancellation
at every step), then raises the cancellation it received, which the scope that cancelled
recognises as its own. So a write is never left running behind a request that has already
answered, and never applied after its request was cancelled. A route that calls back into the
event loop with ``anyio.from_thread`` cannot run here (memlab's routes do not).
"""

from __future__ import annotations

import asyncio
import contextvars
import os
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Workers", "MAX_THREADS"]

#: anyio's default ``CapacityLimiter`` for worker threads, which FastAPI used for these routes.
MAX_THREADS = 40

_QUEUED, _RUNNING, _CANCELLED = 0, 1, 2


class _Job:
    __slots__ = ("loop", "done", "context", "function", "args", "kwargs", "state")

    def __init__(self, loop, done, context, function, args, kwargs) -> None:
        self.loop, self.done, self.context = loop, done, context
        self.function, self.args, self.kwargs = function, args, kwargs
        self.state = _QUEUED


class Workers:
    """A pool of daemon threads that runs sync calls for coroutines on an asyncio loop.

    Parameters
    ----------
    max_threads : int
        At most this many threads run calls at once; further calls queue in order.

    Examples
    --------
    >>> import asyncio
    >>> workers = Workers(max_threads=2)
    >>> asyncio.run(workers.run(sum, [1, 2, 3]))
    6
    >>> Workers(max_threads=0)
    Traceback (most recent call last):
    ...
    ValueError: max_threads must be an int >= 1, got 0
    """

    def __init__(self, max_threads: int = MAX_THREADS) -> None:
        if isinstance(max_threads, bool) or not isinstance(max_threads, int) or max_threads < 1:
            raise ValueError(f"max_threads must be an int >= 1, got {max_threads!r}")
        self.max_threads = max_threads
        self._reset()
        self.calls = 0  # calls handed to the pool so far (for tests and reports)
        if hasattr(os, "register_at_fork"):  # a forked child has none of the parent's threads
            this = weakref.ref(self)
            os.register_at_fork(after_in_child=lambda: (w := this()) and w._reset())

    def _reset(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._mutex = threading.Lock()
        self._threads = 0  # threads running (started and not failed to start)
        self._idle = 0  # threads waiting for a job, minus jobs waiting for a thread

    @property
    def threads(self) -> int:
        """How many worker threads run (each started as needed, then kept)."""
        return self._threads

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` in a worker thread, in a copy of the caller's context;
        returns its value or raises its exception. See the module's docstring for
        cancellation."""
        loop = asyncio.get_running_loop()
        job = _Job(loop, loop.create_future(), contextvars.copy_context(), function, args,
                   kwargs)
        self._submit(job)
        try:
            # shield: a cancellation reaches this await, not the future the worker sets
            value, error = await asyncio.shield(job.done)
        except asyncio.CancelledError:
            with self._mutex:
                started = job.state == _RUNNING
                if not started:
                    job.state = _CANCELLED  # the thread that takes it skips it
            if started:
                await _wait_shielded(job.done)
            raise  # the cancellation this caller received, as it was delivered
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no reference cycle through the traceback
        return value

    def _submit(self, job: _Job) -> None:
        with self._mutex:
            self.calls += 1
            if self._idle > 0 or self._threads >= self.max_threads:
                self._idle -= 1  # a waiting thread takes it, or it waits for one
                self._jobs.put(job)
                return
            # a new thread, started before anything is counted or queued: if it cannot be
            # started (the process is out of threads) the call fails and leaves nothing behind
            thread = threading.Thread(target=self._work, args=(job,),
                                      name=f"memlab-worker-{self._threads + 1}", daemon=True)
            thread.start()
            self._threads += 1

    def _work(self, job: _Job | None) -> None:
        jobs = self._jobs
        while True:
            if job is None:
                job = jobs.get()
            with self._mutex:
                skip = job.state == _CANCELLED
                job.state = _RUNNING
            if not skip:
                try:
                    outcome = (job.context.run(job.function, *job.args, **job.kwargs), None)
                except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                    outcome = (None, exc)
            with self._mutex:  # idle before the caller hears: its next call finds this thread
                self._idle += 1
            if not skip:
                try:
                    job.loop.call_soon_threadsafe(_settle, job.done, outcome)
                except RuntimeError:  # the loop has closed: no one awaits the outcome
                    pass
                del outcome
            job = None


async def _wait_shielded(done: asyncio.Future) -> None:
    """Wait for ``done`` whatever cancels the caller meanwhile: inside a shielded anyio scope
    (so anyio does not cancel the task again at every step), and past plain asyncio
    cancellations."""
    try:
        import anyio
        shield = anyio.CancelScope(shield=True)
    except ImportError:  # pragma: no cover - the service extra brings anyio
        import contextlib
        shield = contextlib.nullcontext()
    with shield:
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                continue


def _settle(done: asyncio.Future, outcome: tuple) -> None:
    if not done.done():
        done.set_result(outcome)
