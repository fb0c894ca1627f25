"""A re-entrant readers-writer lock: many readers at once, or one writer.

The store's lock (:attr:`memlab.store.MemoryStore.lock`) is one of these. ``with lock:`` takes it
exclusively, as the plain re-entrant lock it replaces did; ``with lock.shared():`` takes it
shared, for reads that change nothing. Turns are fair both ways. Once a writer waits, readers
that arrive wait behind it (a thread already reading may re-enter), so a stream of reads cannot
starve a write. A reader that has waited while :attr:`RWLock.reader_turn` writers' turns ended
(default 3) goes in before the writers still waiting, so a stream of writes cannot starve reads
either. Writers go in the order they came. (The lock used to prefer writers outright: with 8
threads and one request in four a write, a search waited behind 20-40 writes in a row at p99,
45-80 ms, measured with ``benchmarks/read_waits.py``.)

Two more operations serve reads that have a side effect and long captures:
:meth:`RWLock.try_acquire` takes the exclusive side only if it is free *now* (a read applies
its activation reinforcement at once when no one else holds the lock, and queues it
otherwise, see :mod:`memlab._reinforce`), and :meth:`RWLock.downgrade` turns an exclusive
holding into a shared one without letting a writer in between (compaction: flush under the
exclusive side, then capture the state while other readers go on).

Short reads need not take the lock at all: :meth:`RWLock.optimistic` runs a read without it and
keeps the result only if no exclusive section that may change state overlapped it (a sequence
lock: :attr:`RWLock.epoch` is odd while one may), else runs it again under the shared side. A
writer whose state is complete and that only waits for its disk I/O opens
:meth:`RWLock.io_window`, so that such reads go on during its fsync. Inside that window it may
also open :meth:`RWLock.admitting`, so that shared readers (searches, contexts) go in beside
it; it waits for them before it changes anything again.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections import deque
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

__all__ = ["RWLock"]

#: Default :attr:`RWLock.reader_turn`, chosen by measurement (``benchmarks/read_waits.py``, 8
#: threads, 2 cores): 1 cut search p99 most but doubled add p99; 3 kept adds near writers-first
#: and searches near the exclusive-lock base; writers-first starved searches (p99 45-60 ms).
READER_TURN = 3

_MISSED = object()  # an optimistic read that raised or overlapped a change


class RWLock:
    """Re-entrant readers-writer lock.

    A thread holding the exclusive side may also take either side again (nested). A thread
    holding only the shared side may take the shared side again, but asking for the exclusive
    side then raises :class:`RuntimeError`: two readers upgrading at once would wait for each
    other forever, so an upgrade is a bug to report, not to wait on.

    Examples
    --------
    >>> lock = RWLock()
    >>> with lock.shared(), lock.shared():
    ...     lock.readers
    1
    >>> with lock:
    ...     with lock.shared():
    ...         lock.held_exclusively()
    True
    >>> with lock.shared():
    ...     lock.acquire()
    Traceback (most recent call last):
    ...
    RuntimeError: cannot take the lock exclusively while holding it shared (a read may not write)
    """

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._writer: int | None = None  # thread id of the exclusive holder
        self._writer_depth = 0
        self._writers_waiting = 0
        self._readers_waiting = 0
        self._readers: dict[int, int] = {}  # thread id -> shared depth
        # phase-fair turns: a writer phase ends at each outermost release (or downgrade); the
        # readers waiting then are admitted, and writers wait until they are all in
        self._tickets = 0  # writers' tickets given out (writers go in ticket order)
        self._writer_queue: deque[int] = deque()  # tickets of the waiting writers, in order
        self._phase = 0  # number of writer phases ended so far
        self._admitted = 0  # readers admitted by the last phase's end, not yet inside
        self._waiting_since: dict[int, int] = {}  # phase a reader began to wait -> readers
        self._reader_turn = READER_TURN
        #: Sequence lock for :meth:`optimistic`: odd while a thread holds the lock exclusively
        #: outside an :meth:`io_window` (it may be changing state), even otherwise; every
        #: change of holder or window moves it on, so an unchanged even value means no
        #: exclusive section that may change state began or ended in between.
        self.epoch = 0
        self._io = False  # the exclusive holder is inside an io_window
        self._admit = False  # the holder admits shared readers beside it (admitting)
        self.optimistic_hits = 0  # optimistic reads kept without the lock (for tests, reports)
        self._shared = _Shared(self)
        #: Called (no arguments) by a thread right after its outermost exclusive holding ends,
        #: with the lock already free; not after :meth:`downgrade`. What it raises propagates
        #: out of the release (the ``with lock:`` block).
        self.after_release: Callable[[], None] | None = None

    # ------------------------------------------------------------------ exclusive
    def acquire(self) -> None:
        """Take the lock exclusively (blocks until no one else holds it)."""
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._reenter()
                return
            if me in self._readers:
                raise RuntimeError("cannot take the lock exclusively while holding it shared "
                                   "(a read may not write)")
            self._writers_waiting += 1
            self._tickets += 1
            ticket = self._tickets
            self._writer_queue.append(ticket)
            try:
                # writers go in the order they came (a writer that arrives later never
                # overtakes one that waits), each after the readers admitted before it
                while self._writer is not None or self._readers or self._admitted \
                        or self._writer_queue[0] != ticket:
                    self._cond.wait()
            finally:
                self._writers_waiting -= 1
                if self._writer_queue[0] == ticket:
                    self._writer_queue.popleft()
                else:  # interrupted while waiting: leave the queue
                    self._writer_queue.remove(ticket)
                    self._cond.notify_all()
            self._writer, self._writer_depth = me, 1
            self.epoch += 1  # odd: a writer may change state

    def _reenter(self) -> None:
        """The exclusive holder takes the lock again (the caller holds ``_cond``). Inside an
        :meth:`io_window` that closes the window: a nested section may change state, so the
        epoch goes odd again (the window's own end then does nothing). Readers it admitted
        (:meth:`admitting`) are waited for first: none may see the nested section's changes."""
        self._close_admission()
        self._writer_depth += 1
        if self._io:
            self._io = False
            self.epoch += 1

    def _close_admission(self) -> None:
        """Admit no more readers beside the exclusive holder, and wait until those admitted
        (every thread holding the shared side while a writer holds the exclusive one) have
        left (the caller holds ``_cond`` and the exclusive side)."""
        self._admit = False
        while self._readers:
            self._cond.wait()

    def depth(self) -> int:
        """How many times the calling thread holds the lock exclusively (0: not at all)."""
        return self._writer_depth if self._writer == threading.get_ident() else 0

    @property
    def reader_turn(self) -> int:
        """How many writers' turns a reader that waits lets go first; then it is admitted
        ahead of the writers still waiting (1: phase-fair; a huge number: writers preferred
        outright, as this lock used to be). An int >= 1; set it before the lock is used.

        Examples
        --------
        >>> RWLock().reader_turn = 0
        Traceback (most recent call last):
        ...
        ValueError: reader_turn must be an int >= 1, got 0
        """
        return self._reader_turn

    @reader_turn.setter
    def reader_turn(self, value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"reader_turn must be an int >= 1, got {value!r}")
        self._reader_turn = value

    def try_acquire(self) -> bool:
        """Take the lock exclusively only if that needs no wait; return whether it was taken.

        True when the calling thread already holds it exclusively (nested), or when no thread
        holds it, no writer waits (a waiting writer keeps its turn) and no reader admitted at
        the end of the last writer's turn is still on its way in. False when the calling
        thread holds it shared (no upgrade) or anyone else holds it. Never blocks.

        Examples
        --------
        >>> lock = RWLock()
        >>> lock.try_acquire(), lock.held_exclusively()
        (True, True)
        >>> lock.release()
        >>> with lock.shared():
        ...     lock.try_acquire()
        False
        """
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._reenter()
                return True
            if self._writer is not None or self._readers or self._writers_waiting \
                    or self._admitted:
                return False
            self._writer, self._writer_depth = me, 1
            self.epoch += 1
            return True

    def downgrade(self) -> None:
        """Turn the calling thread's exclusive holding into a shared one, atomically: no
        writer gets the lock in between, waiting readers get in at once. Release it with
        :meth:`release_shared` (or leave a ``with lock.shared():`` block taken after it).

        Raises
        ------
        RuntimeError
            The calling thread does not hold the lock exclusively, or holds it nested (a
            caller further out still counts on the exclusive side).

        Examples
        --------
        >>> lock = RWLock(); lock.acquire(); lock.downgrade()
        >>> lock.held_exclusively(), lock.held_shared()
        (False, True)
        >>> lock.release_shared(); lock.readers
        0
        """
        me = threading.get_ident()
        with self._cond:
            if self._writer != me or self._writer_depth != 1:
                raise RuntimeError("downgrade needs the lock held exclusively, once, by the "
                                   "calling thread")
            self._writer, self._writer_depth = None, 0
            self._readers[me] = 1
            self._end_phase()

    def release(self) -> None:
        """Release one level of exclusive holding (then run :attr:`after_release` if that was
        the outermost one)."""
        with self._cond:
            if self._writer != threading.get_ident():
                raise RuntimeError("release of the store's lock by a thread not holding it")
            self._writer_depth -= 1
            freed = self._writer_depth == 0
            if freed:
                self._writer = None
                self._end_phase()
        if freed and self.after_release is not None:
            self.after_release()

    def _end_phase(self) -> None:
        """A writer's turn ends (the caller holds ``_cond``): admit every reader waiting now,
        ahead of any waiting writer, and wake everyone."""
        self.epoch += 1 + ((self.epoch & 1) == 0)  # even again (odd + 1, or even + 2 in a window)
        self._io = False
        self._admit = False
        self._phase += 1
        self._admitted += self._waiting_since.pop(self._phase - self.reader_turn, 0)
        self._cond.notify_all()

    def __enter__(self) -> RWLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    @contextlib.contextmanager
    def io_window(self):
        """For the exclusive holder whose state is complete and that only waits for I/O (a
        journal commit): while the block runs, :meth:`optimistic` reads go on beside it. The
        holder must change nothing inside the block. Does nothing for a thread that does not
        hold the lock exclusively, or inside another window. Taking the lock again inside the
        block (a nested section) closes the window.

        Examples
        --------
        >>> lock = RWLock()
        >>> with lock:
        ...     inside = lock.epoch % 2
        ...     with lock.io_window():
        ...         during = lock.epoch % 2
        >>> inside, during, lock.epoch % 2
        (1, 0, 0)
        """
        with self._cond:
            opened = self._writer == threading.get_ident() and not self._io
            if opened:
                self._io = True
                self.epoch += 1  # even: no change while the window is open
        try:
            yield
        finally:
            if opened:
                with self._cond:
                    if self._writer == threading.get_ident():
                        self._close_admission()  # the readers admitted inside it
                    if self._io:
                        self._io = False
                        self.epoch += 1  # odd again: the holder may change state

    @contextlib.contextmanager
    def admitting(self):
        """For the exclusive holder inside its :meth:`io_window` (its state complete, waiting
        only for I/O): while the block runs, other threads' :meth:`acquire_shared` succeeds
        beside it, so shared reads (searches, contexts) go on during its fsync, not only
        :meth:`optimistic` ones. The block's end stops the admission without waiting (the
        holder may still hold what its I/O needed, which an admitted reader may need too).
        When the io_window ends, or when the holder takes the lock again (a nested section,
        e.g. the undo of a failed commit), the holder first waits until every reader admitted
        meanwhile has left: no reader sees a change the holder makes afterwards. The holder
        keeps the exclusive side throughout, so no other writer gets in and writers keep their
        order. Yields whether it admits (False, doing nothing, for a thread that does not hold
        the lock exclusively or outside an open io_window).

        The cost falls on the holder: its io_window ends only once the readers it admitted
        are done.

        Examples
        --------
        >>> lock = RWLock(); seen = []
        >>> def read():
        ...     with lock.shared():
        ...         seen.append(lock.readers)
        >>> with lock, lock.io_window(), lock.admitting() as admits:
        ...     reader = threading.Thread(target=read)
        ...     reader.start(); reader.join()  # without admitting: it would wait forever
        >>> admits, seen
        (True, [1])
        >>> with lock, lock.admitting() as admits:  # no io_window: nothing admitted
        ...     pass
        >>> admits
        False
        """
        with self._cond:
            opened = self._writer == threading.get_ident() and self._io and not self._admit
            if opened:
                self._admit = True
                self._cond.notify_all()  # readers waiting now may go in
        try:
            yield opened
        finally:
            if opened:
                with self._cond:  # admit no more (the wait for them is io_window's)
                    self._admit = False

    def optimistic(self, read: Callable[[], T]) -> T:
        """``read()``, without the lock if possible: run it unlocked and keep its value (or
        raise its error) when :attr:`epoch` was even and is unchanged (no exclusive section that
        may change state overlapped it: no writer waits for it, and it waits for no writer's
        I/O); otherwise run it again under the shared side and return (or raise) that.

        ``read`` must only read: it may run against state a writer is changing, so it must not
        fill caches or change anything; what it raises then is discarded. Without the GIL
        (free-threaded Python, ``sys._is_gil_enabled()`` false) it always runs under the shared
        side: the check relies on the GIL ordering the reads.

        Examples
        --------
        >>> lock = RWLock(); data = {"x": 1}
        >>> lock.optimistic(lambda: data["x"])
        1
        """
        # inside its own write: read under it; without the GIL: always under the shared side
        if self._writer != threading.get_ident() and _gil_enabled():
            start = self.epoch
            if not start & 1:
                try:
                    value = read()
                except Exception:
                    if self.epoch == start:
                        raise  # nothing overlapped it: the read's own error
                    value = _MISSED  # a torn read: the locked run decides
                if value is not _MISSED and self.epoch == start:
                    self.optimistic_hits += 1
                    return value
        with self.shared():
            return read()

    def held_exclusively(self) -> bool:
        """Whether the calling thread holds the lock exclusively."""
        return self._writer == threading.get_ident()

    def held_shared(self) -> bool:
        """Whether the calling thread holds the lock shared (and not exclusively)."""
        return threading.get_ident() in self._readers

    # ------------------------------------------------------------------ shared
    def acquire_shared(self) -> None:
        """Take the lock shared (with other readers). Blocks while a writer holds it (unless it
        is :meth:`admitting` readers), and while a writer waits, until a writer's turn ends
        after this reader began to wait."""
        me = threading.get_ident()
        with self._cond:
            if self._writer == me:
                self._reenter()  # inside its own write a thread reads exclusively
                return
            depth = self._readers.get(me)
            if depth:
                self._readers[me] = depth + 1  # re-entry never waits (a writer would wait on it)
                return
            if self._admit or (self._writer is None and not self._writers_waiting):
                self._readers[me] = 1  # (self._admit: beside a writer waiting for its fsync)
                return
            arrived = self._phase
            self._readers_waiting += 1
            self._waiting_since[arrived] = self._waiting_since.get(arrived, 0) + 1
            try:
                # in once no writer holds the lock, and either none waits or a writer's turn
                # has ended since this reader arrived (it was admitted: phase-fair)
                while not self._admit and (self._writer is not None or (
                        self._writers_waiting and self._phase - arrived < self.reader_turn)):
                    self._cond.wait()
            finally:
                self._readers_waiting -= 1
                if self._phase - arrived < self.reader_turn:  # not admitted: still counted
                    left = self._waiting_since[arrived] - 1
                    if left:
                        self._waiting_since[arrived] = left
                    else:
                        del self._waiting_since[arrived]
                elif self._admitted:
                    self._admitted -= 1  # one admitted reader is in (or gave up)
                    if not self._admitted:
                        self._cond.notify_all()  # writers may go once it leaves
            self._readers[me] = 1

    def release_shared(self) -> None:
        """Release one level of shared holding."""
        me = threading.get_ident()
        with self._cond:
            freed = False
            if self._writer == me:
                self._writer_depth -= 1
                freed = self._writer_depth == 0
                if freed:
                    self._writer = None
                    self._end_phase()
            else:
                self._release_reader(me)
        if freed and self.after_release is not None:
            self.after_release()

    def _release_reader(self, me: int) -> None:
        """Release one level of ``me``'s shared holding (the caller holds ``_cond``)."""
        depth = self._readers.get(me)
        if not depth:
            raise RuntimeError("release of the store's lock by a thread not holding it")
        if depth == 1:
            del self._readers[me]
            if not self._readers:
                self._cond.notify_all()
        else:
            self._readers[me] = depth - 1

    def shared(self) -> _Shared:
        """The shared side as a reusable context manager: ``with lock.shared():``."""
        return self._shared

    @property
    def readers(self) -> int:
        """How many threads hold the lock shared now (for tests and reports)."""
        return len(self._readers)

    def waiting(self) -> tuple[int, int]:
        """``(readers, writers)``: how many threads wait for the lock now (for tests)."""
        return self._readers_waiting, self._writers_waiting


def _gil_enabled() -> bool:
    """Whether the GIL is on (always, before Python 3.13; a free-threaded build may run
    without it, or turn it on when an extension asks)."""
    return getattr(sys, "_is_gil_enabled", _gil_always_on)()


def _gil_always_on() -> bool:  # Python before 3.13
    return True


class _Shared:
    """``with``-able shared side of an :class:`RWLock` (what :meth:`RWLock.shared` returns)."""

    __slots__ = ("_lock",)

    def __init__(self, lock: RWLock) -> None:
        self._lock = lock

    def __enter__(self) -> _Shared:
        self._lock.acquire_shared()
        return self

    def __exit__(self, *exc) -> None:
        self._lock.release_shared()
