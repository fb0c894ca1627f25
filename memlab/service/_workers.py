"""The HTTP service's own worker threads for sync routes (issue 14, item 9 over HTTP).

FastAPI runs a sync route through ``anyio.to_thread.run_sync``: a capacity limiter taken and
given back on the event loop, a cancel scope, a worker looked up and a result carried back,
each a few event-loop steps per request. With 8 clients on 2 cores every step also waits for
the GIL, and the profile of ``memlab serve`` showed this hand-over among the largest costs that
are not the store's. :class:`Workers` does the same hand-over with one queue put and one
``call_soon_threadsafe``: at most ``max_threads`` threads (40, anyio's default limit), started
as needed and kept; the caller's context variables are copied into the call, as anyio does; and
a cancelled caller waits for its call to finish before it sees the cancellation, as anyio does
for calls it may not abandon, so a write is never left running behind a request that has
already answered.
"""

from __future__ import annotations

import asyncio
import contextvars
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")

__all__ = ["Workers", "MAX_THREADS"]

#: anyio's default ``CapacityLimiter`` for worker threads, which FastAPI used for these routes.
MAX_THREADS = 40


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
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._mutex = threading.Lock()
        self._threads = 0
        self._idle = 0
        self.calls = 0  # calls handed to the pool so far (for tests and reports)

    @property
    def threads(self) -> int:
        """How many worker threads have been started."""
        return self._threads

    async def run(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` in a worker thread, in a copy of the caller's context;
        returns its value or raises its exception. Cancelling the caller waits for the call to
        end, then raises :class:`asyncio.CancelledError`."""
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        context = contextvars.copy_context()
        self._submit((loop, done, context, function, args, kwargs))
        cancelled = False
        while True:
            try:
                # shield: a cancellation reaches this await, not the future the worker sets
                value, error = await asyncio.shield(done)
                break
            except asyncio.CancelledError:
                if done.done():  # the call ended as the cancellation came
                    value, error = done.result()
                    cancelled = True
                    break
                cancelled = True  # the call still runs: wait for it, then cancel
        if cancelled:
            raise asyncio.CancelledError
        if error is not None:
            try:
                raise error
            finally:
                error = None  # no reference cycle through the traceback
        return value

    def _submit(self, job: tuple) -> None:
        with self._mutex:
            self.calls += 1
            start = self._idle <= 0 and self._threads < self.max_threads
            if start:
                self._threads += 1
            else:
                self._idle -= 1  # a waiting thread takes it (or the queue holds it)
            self._jobs.put(job)
        if start:
            threading.Thread(target=self._work, name=f"memlab-worker-{self._threads}",
                             daemon=True).start()

    def _work(self) -> None:
        jobs = self._jobs
        while True:
            loop, done, context, function, args, kwargs = jobs.get()
            try:
                outcome = (context.run(function, *args, **kwargs), None)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting coroutine
                outcome = (None, exc)
            with self._mutex:  # idle before the caller hears: its next call finds this thread
                self._idle += 1
            try:
                loop.call_soon_threadsafe(_settle, done, outcome)
            except RuntimeError:  # the loop has closed: no one awaits the outcome
                pass
            del loop, done, context, function, args, kwargs, outcome


def _settle(done: asyncio.Future, outcome: tuple) -> None:
    if not done.done():
        done.set_result(outcome)
