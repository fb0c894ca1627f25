"""Activation reinforcements from reads, applied without making reads wait for each other.

An explicit retrieval (:meth:`memlab.memory.Memory.search`, :meth:`~memlab.memory.Memory.get`,
:meth:`~memlab.memory.Memory.search_many`) reinforces the activation of what it returns: a
write (:meth:`memlab.store.MemoryStore.record_retrieval`), so it needs the store's lock
exclusively. The retrieval itself runs under the shared lock, beside other readers; then the
reinforcement goes through the store's :class:`Reinforcements`:

* **at once** when the exclusive lock is free at that moment
  (:meth:`memlab._rwlock.RWLock.try_acquire`): applied, and journaled (group-committed, see
  :meth:`memlab.store.MemoryStore.flush`), before the read returns. One thread alone always
  takes this path, so a single caller sees exactly what it saw when reads took the lock
  exclusively: same order, same activation, same history, same journal rows.
* **queued** otherwise (other readers or a writer hold the lock): the read returns without
  waiting, and the reinforcement is applied, in the order the reads queued them, by whichever
  comes first: the next write (every journaled write applies the queue first, in its own
  exclusive section: :func:`memlab.store.journaled`), the next reinforcement that finds the
  lock free, the store's **applier**, :meth:`~memlab.store.MemoryStore.flush`,
  :meth:`~memlab.store.MemoryStore.compact` and :meth:`~memlab.store.MemoryStore.close`; with
  :attr:`Reinforcements.own_reads` on, also the next read of the thread that queued it.

The applier is one daemon thread per store, started by the first read that fills the queue to
:attr:`MemoryStore.reinforce_batch` entries (that read signals it and returns: before, it waited
for the exclusive lock, behind every running read, and the writer preference then held back
every new read behind it too, a convoy that raised search and get p99 several-fold). The
applier takes the lock exclusively once no one holds it, *without* counting as a waiting
writer (:meth:`memlab._rwlock.RWLock.acquire_when_free`), so it never makes a read wait; it
applies and journals the whole queue, oldest first, and waits for the next signal (it ends
after :data:`APPLIER_IDLE_S` idle; :meth:`Reinforcements.stop`, called by ``close()``, stops it
and applies the rest). Under an unbroken stream of overlapping readers it may not get in, so
the queue has a hard bound, :attr:`Reinforcements.bound` (:data:`QUEUE_BOUND_FACTOR` ×
``reinforce_batch``, 256 by default): the read that queues onto it **does wait** for the
exclusive lock and applies the queue itself, as every read did before. ``reinforce_batch=1``
keeps no queue at all: each read that finds the lock taken waits and applies (nothing lost).
A read inside its own thread's shared section never waits (it may not write): its
reinforcement stays queued past the bound until the applier or the next write gets in.

The journal stays exact: a reinforcement is journaled when it is applied, under the exclusive
lock, so the journal's order is the order of application (the submission order, whoever
applies) and a reopen rebuilds the same state. Until it is applied a queued reinforcement lives
only in memory: a crash loses at most ``bound - 1`` queued ones (255 by default) on top of the
``reinforce_batch - 1`` applied ones the group commit still buffers; ``reinforce_batch=1``
applies and writes every one before its read returns (nothing is lost, reads then wait for the
write lock as writes do). A clean ``close()`` loses none.

Visibility: a queued reinforcement is seen late (by every thread, its own included unless
:attr:`Reinforcements.own_reads` is on), at the latest after the next write, the next flush, or
once the applier gets the lock after the queue fills (``bound`` reinforcements at most); never out of order, and never by half (it is applied
under the exclusive lock, so no context sees part of it). A read that queued its reinforcement
has returned what it retrieved; only activation and the item's history wait.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

__all__ = ["Reinforcements", "QUEUE_BOUND_FACTOR"]

#: The queue's hard bound, in multiples of the store's ``reinforce_batch``.
QUEUE_BOUND_FACTOR = 4
#: Seconds the applier thread waits for work before it ends (a later full queue starts one
#: again); it keeps the store alive only while reads keep it busy.
APPLIER_IDLE_S = 5.0


class Reinforcements:
    """The queue of one :class:`~memlab.store.MemoryStore`'s read reinforcements.

    Parameters
    ----------
    store : MemoryStore
        The store whose :meth:`~memlab.store.MemoryStore.record_retrieval` applies them; its
        ``reinforce_batch`` bounds the queue.

    Examples
    --------
    >>> from memlab import Memory
    >>> mem = Memory(); _ = mem.add("deploys run on fridays")
    >>> with mem.store.lock.shared():  # a reader holds the lock: the search's reinforcement waits
    ...     hits = mem.search("deploys")
    ...     len(mem.store.reinforcements), mem.store.reinforcements.applied
    (1, 0)
    >>> mem.store.flush(); len(mem.store.reinforcements), mem.store.reinforcements.applied
    (0, 1)
    """

    def __init__(self, store: Any) -> None:
        self._store = store
        self._mutex = threading.Lock()  # guards the queue and the counters
        self._waiting: deque[tuple[int, dict[str, Any]]] = deque()  # (sequence number, call)
        self._submitted = 0  # sequence number of the last reinforcement submitted
        self._applied_upto = 0  # every reinforcement up to this number is applied (or failed)
        self._mine = threading.local()  # .last: this thread's last queued sequence number
        #: When True, a thread's read waits for that thread's own queued reinforcements
        #: (:meth:`settle`): read-your-own-writes per thread, at the price of an exclusive
        #: section in that read. Off by default: measured, it brings back the waits this
        #: module removes (benchmarks/concurrent_reads.py).
        self.own_reads = False
        self.applied = 0  # reinforcements applied (at once or from the queue)
        self.queued = 0  # reinforcements that had to wait in the queue
        #: Hard bound on the queue: a read that queues its reinforcement onto this many waits
        #: for the exclusive lock and applies the queue itself (the memory bound when the
        #: applier cannot get the lock, under an unbroken stream of overlapping readers).
        self.bound = QUEUE_BOUND_FACTOR * store.reinforce_batch
        self.waited = 0  # reads that waited for the exclusive lock to apply the queue
        self.background = 0  # times the applier applied the queue
        self.errors: list[BaseException] = []  # what the applier's applications raised
        self._wake = threading.Condition(self._mutex)  # the applier waits on it for a signal
        self._signalled = False
        self._stopped = False  # set by stop(): no applier any more, full queues apply inline
        self._cancel = threading.Event()  # makes a waiting applier give up the lock (stop())
        self._thread: threading.Thread | None = None
        #: How the applier waits for the exclusive lock. False (the default): as a writer
        #: does, so new readers wait behind it (writer preference) but it always gets in.
        #: True: without holding back new readers; measured, with 8 clients the lock is then
        #: almost never free, the queue reaches :attr:`bound` and reads wait again.
        self.polite = False

    def __len__(self) -> int:
        """How many reinforcements wait in the queue now."""
        return len(self._waiting)

    def __repr__(self) -> str:
        return (f"Reinforcements(waiting={len(self)}, applied={self.applied}, "
                f"queued={self.queued}, background={self.background}, waited={self.waited})")

    # ------------------------------------------------------------------ submitting
    def submit(self, calls: list[dict[str, Any]], then: Callable[[], Any] | None = None) -> Any:
        """Reinforce: apply ``calls`` (keyword arguments of ``record_retrieval``) at once if the
        store's lock is free, else queue them.

        Returns ``then()`` when the calls were applied, run under the exclusive lock right after
        them (so it sees them: :meth:`~memlab.memory.Memory.get` reads the item again, with its
        new history event); None when they were queued, or without ``then``.
        """
        if not calls:
            return None
        lock = self._store.lock
        if not lock.try_acquire():
            with self._mutex:
                for call in calls:
                    self._submitted += 1
                    self._waiting.append((self._submitted, call))
                self._mine.last = self._submitted
                self.queued += len(calls)
                batch = self._store.reinforce_batch
                if len(self._waiting) < batch:
                    return None
                reader = lock.held_shared()  # a reader may not take the write side
                if batch > 1 and not self._stopped and (reader or len(self._waiting) < self.bound):
                    self._signal()  # a full queue: the applier applies it, this read returns
                    return None
                if reader:
                    return None
            # reinforce_batch=1, the hard bound, or a closed store: this read waits, and
            # applies the queue (its own calls with it)
            lock.acquire()
            self.waited += 1
            calls = []
        try:
            self.apply_waiting()
            for call in calls:
                self._store.record_retrieval(**call)
                self.applied += 1
            return None if then is None else then()
        finally:
            lock.release()

    # ------------------------------------------------------------------ applying
    def apply_waiting(self) -> None:
        """Apply every queued reinforcement, oldest first (the caller holds the store's lock
        exclusively). Nothing happens inside a nested write, an open
        :meth:`~memlab.store.MemoryStore.transaction` or a replay: they wait for the next
        outermost write, so a failed transaction never takes acknowledged reinforcements
        with it.

        Raises
        ------
        memlab.persist.PersistenceError
            A reinforcement could not be written (the group commit's write failed); it is
            dropped, as it is when applied at once, and the ones after it stay queued.
        """
        store = self._store
        if not self._waiting or store._batch is not None or store._replaying or store._depth:
            return
        with self._mutex:
            waiting = list(self._waiting)
            self._waiting.clear()
        for pos, (seq, call) in enumerate(waiting):
            try:
                store.record_retrieval(**call)
            except BaseException:
                with self._mutex:
                    self._waiting.extendleft(reversed(waiting[pos + 1:]))
                    self._applied_upto = seq
                raise
            self.applied += 1
            self._applied_upto = seq

    def settle(self) -> None:
        """Before a read, with :attr:`own_reads` on: wait until the calling thread's own queued
        reinforcements are applied (apply the queue if they are not), so that a thread always
        reads its own reinforcements. Free when it has none waiting; skipped inside the
        thread's own shared section (a reader may not write). Does nothing with
        :attr:`own_reads` off (the default).
        """
        if not self.own_reads or getattr(self._mine, "last", 0) <= self._applied_upto:
            return
        lock = self._store.lock
        if lock.held_shared():
            return
        with lock:
            self.apply_waiting()

    def drain(self) -> None:
        """Apply every queued reinforcement now (takes the store's lock exclusively)."""
        if self._waiting:
            with self._store.lock:
                self.apply_waiting()

    # ------------------------------------------------------------------ the applier
    def _signal(self) -> None:
        """Wake the applier, starting it if none runs (the caller holds ``self._mutex``)."""
        self._signalled = True
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="memlab-reinforcements",
                                            daemon=True)
            self._thread.start()
        else:
            self._wake.notify()

    def _run(self) -> None:
        """The applier: on each signal, take the store's lock exclusively once no one holds it
        (:meth:`~memlab._rwlock.RWLock.acquire_when_free`: it never makes a read wait), apply
        the queue in submission order (journaled as any application), release. Ends on
        :meth:`stop`, or after :data:`APPLIER_IDLE_S` without a signal."""
        lock = self._store.lock
        while True:
            with self._wake:
                while not self._signalled and not self._stopped:
                    if not self._wake.wait(APPLIER_IDLE_S) and not self._signalled:
                        self._thread = None  # idle: a later signal starts another
                        return
                if self._stopped:
                    return
                self._signalled = False
            if not lock.acquire_when_free(self._cancel, polite=self.polite):
                return  # stop() while waiting: the rest is applied by the caller of stop()
            try:
                self.apply_waiting()
                self.background += 1
            except Exception as exc:  # noqa: BLE001 - kept for the store's owner, as a read
                # applying at once would have raised it; the failed one is dropped, the ones
                # after it stay queued (apply_waiting)
                self.errors.append(exc)
            finally:
                lock.release()

    def stop(self) -> None:
        """Stop the applier thread (waits for it) and apply what is still queued, in order.
        From then on a full queue is applied by the read that fills it.
        :meth:`~memlab.store.MemoryStore.close` calls it."""
        with self._wake:
            self._stopped = True
            thread = self._thread
            self._thread = None
            self._wake.notify_all()
        self._cancel.set()
        self._store.lock.wake()
        if thread is not None and thread is not threading.current_thread():
            thread.join()
        self.drain()
