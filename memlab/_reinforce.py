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
* **queued** otherwise (other readers or a writer hold the lock, or older reinforcements
  still wait): the read returns without waiting, and the reinforcement is applied, in the
  order the reads queued them, by whichever comes first: the next writes (every journaled
  write applies the oldest :attr:`Reinforcements.slice` of the queue first, in its own
  exclusive section: :func:`memlab.store.journaled`; a bounded slice, so that one write does
  not hold readers back for a long queue), the next reinforcements that find the lock free
  (a slice each, too), a queue of :attr:`MemoryStore.reinforce_batch` entries (the read that fills it
  waits and applies it), :meth:`~memlab.store.MemoryStore.flush`,
  :meth:`~memlab.store.MemoryStore.compact` and :meth:`~memlab.store.MemoryStore.close`; with
  :attr:`Reinforcements.own_reads` on, also the next read of the thread that queued it.

The journal stays exact: a reinforcement is journaled when it is applied, under the exclusive
lock, so the journal's order is the order of application and a reopen rebuilds the same state.
Its payload is encoded by the read that submits it, outside the lock
(:meth:`~memlab.store.MemoryStore.retrieval_payload`), so whoever applies it under the lock only
applies it (:meth:`~memlab.store.MemoryStore.record_encoded`: the same rows as the journaled
call).
Each reinforcement also carries the ids of the items its read returned (not journaled): when it
is applied, under the exclusive lock, an item number that no longer holds that item (a failed
commit undid it after the read, and a later write may have reused the number) is dropped, so a
reinforcement never lands on an item its read did not return.
Until it is applied a queued reinforcement lives only in memory: a crash loses at most
``reinforce_batch - 1`` queued ones on top of the ``reinforce_batch - 1`` applied ones the
group commit still buffers; ``reinforce_batch=1`` applies and writes every one before its read
returns (nothing is lost, reads then wait for the write lock as writes do).

Visibility: a queued reinforcement is seen late (by every thread, its own included unless
:attr:`Reinforcements.own_reads` is on), at the latest after the next write, the next flush or
``reinforce_batch`` later reinforcements; never out of order, and never by half (it is applied
under the exclusive lock, so no context sees part of it). A read that queued its reinforcement
has returned what it retrieved; only activation and the item's history wait.
"""

from __future__ import annotations

import threading
from collections import deque
from typing import Any, Callable

__all__ = ["Reinforcements"]


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
        # (sequence number, record_retrieval's keyword arguments, their journal payload, the
        # ids of the items named, as the read saw them)
        self._waiting: deque[tuple[int, dict[str, Any], str | None, list[str] | None]] = deque()
        self._submitted = 0  # sequence number of the last reinforcement submitted
        self._applied_upto = 0  # every reinforcement up to this number is applied (or failed)
        self._mine = threading.local()  # .last: this thread's last queued sequence number
        #: When True, a thread's read waits for that thread's own queued reinforcements
        #: (:meth:`settle`): read-your-own-writes per thread, at the price of an exclusive
        #: section in that read. Off by default: measured, it brings back the waits this
        #: module removes (benchmarks/concurrent_reads.py).
        self.own_reads = False
        #: How many queued reinforcements a write (or a read that finds the lock free)
        #: applies before its own work: bounded slices, so that one write never holds the
        #: exclusive lock for a long queue (see :meth:`apply_waiting`).
        self.slice = 16
        self._applying = False  # apply_waiting is running (under the exclusive lock)
        self.applied = 0  # reinforcements applied (at once or from the queue)
        self.queued = 0  # reinforcements that had to wait in the queue

    def __len__(self) -> int:
        """How many reinforcements wait in the queue now."""
        return len(self._waiting)

    def __repr__(self) -> str:
        return f"Reinforcements(waiting={len(self)}, applied={self.applied}, queued={self.queued})"

    # ------------------------------------------------------------------ submitting
    def submit(self, calls: list[dict[str, Any]], then: Callable[[], Any] | None = None,
               ids: list[list[str]] | None = None) -> Any:
        """Reinforce: apply ``calls`` (keyword arguments of ``record_retrieval``) at once if the
        store's lock is free, else queue them.

        ``ids``: for each call, the ids of the items its ``idx`` names, as the read saw them;
        when applied, an item number that no longer holds that item is dropped
        (:meth:`~memlab.store.MemoryStore.record_encoded`).

        Returns ``then()`` when the calls were applied, run under the exclusive lock right after
        them (so it sees them: :meth:`~memlab.memory.Memory.get` reads the item again, with its
        new history event); None when they were queued, or without ``then``.
        """
        if not calls:
            return None
        store = self._store
        # encoded here, outside the lock: whoever applies them under it only applies them
        ids = [None] * len(calls) if ids is None else ids
        calls = [(call, store.retrieval_payload(call), named) for call, named in zip(calls, ids)]
        lock = store.lock
        if lock.try_acquire():
            try:
                if not self.apply_waiting(self.slice):
                    for call, payload, named in calls:
                        store.record_encoded(call, payload, named)
                        self.applied += 1
                    return None if then is None else then()
            finally:
                lock.release()
            # older reinforcements still wait (the slice did not reach them): this read's go
            # behind them, so that they apply in order
        return self._enqueue(calls, then)

    def _enqueue(self, calls: list[tuple[dict[str, Any], str | None, list[str] | None]],
                 then: Callable[[], Any] | None) -> Any:
        """Queue ``calls`` (each with its encoded journal payload and its items' ids); the read
        that fills the queue waits and applies all of it."""
        lock = self._store.lock
        with self._mutex:
            for call, payload, named in calls:
                self._submitted += 1
                self._waiting.append((self._submitted, call, payload, named))
            self._mine.last = self._submitted
            self.queued += len(calls)
            full = len(self._waiting) >= self._store.reinforce_batch
        if not full or lock.held_shared():  # a reader may not take the write side
            return None
        with lock:  # the queue is full: wait, and apply it (this read's calls with it)
            self.apply_waiting()
            return None if then is None else then()

    # ------------------------------------------------------------------ applying
    def apply_waiting(self, limit: int | None = None) -> bool:
        """Apply the queued reinforcements, oldest first: all of them, or the oldest ``limit``
        (the caller holds the store's lock exclusively). Nothing happens inside a nested
        write, an open :meth:`~memlab.store.MemoryStore.transaction` or a replay: they wait for
        the next outermost write, so a failed transaction never takes acknowledged
        reinforcements with it.

        A write applies at most :attr:`slice` of them (bounded slices: one write never pays for
        a long queue while readers wait behind it); :meth:`drain`, ``flush``, ``compact``,
        ``close``, a transaction and a read that fills the queue apply all of them. Returns
        whether some were applied and older ones still wait.

        Raises
        ------
        Exception
            Whatever applying one raised (a bug, out of memory); it is dropped, and the ones
            after it stay queued. (Their journal rows are written by the group commit when the
            applying thread releases the lock: a failed write raises there.)
        """
        store = self._store
        if not self._waiting or store._batch is not None or store._replaying or store._depth \
                or self._applying:  # each reinforcement applied is itself a journaled write
            return False
        with self._mutex:
            if limit is None or limit >= len(self._waiting):
                waiting = list(self._waiting)
                self._waiting.clear()
            else:
                waiting = [self._waiting.popleft() for _ in range(limit)]
        self._applying = True
        try:
            return self._apply(waiting)
        finally:
            self._applying = False

    def _apply(self, waiting: list[tuple[int, dict[str, Any], str | None, list[str] | None]]
               ) -> bool:
        store = self._store
        for pos, (seq, call, payload, named) in enumerate(waiting):
            try:
                store.record_encoded(call, payload, named)
            except BaseException:
                with self._mutex:
                    self._waiting.extendleft(reversed(waiting[pos + 1:]))
                    self._applied_upto = seq
                raise
            self.applied += 1
            self._applied_upto = seq
        return bool(self._waiting)

    def discard_missing(self) -> int:
        """Drop queued reinforcements naming an item the store does not hold (the caller holds
        the store's lock exclusively, after a failed group commit undid writes whose items a
        read had already retrieved); returns how many were dropped. This only frees the queue
        early: an undo makes item numbers shrink, and the next add reuses them, so a
        reinforcement queued (or submitted) later may still name a number that now holds
        another item; :meth:`~memlab.store.MemoryStore.record_encoded` drops such numbers when
        it applies the reinforcement, by the item ids it carries."""
        workspaces = self._store._workspaces
        with self._mutex:
            kept = deque(entry for entry in self._waiting
                         if _exists(workspaces, entry[1], entry[3]))
            dropped = len(self._waiting) - len(kept)
            self._waiting = kept
            if not kept:  # settle: nothing of any thread's is left to wait for
                self._applied_upto = self._submitted
        return dropped

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


def _exists(workspaces: dict, call: dict[str, Any], ids: list[str] | None = None) -> bool:
    """Whether every item a ``record_retrieval`` call names is in its workspace (and, with
    ``ids``, is still the item of that id)."""
    ws = workspaces.get(call["workspace_id"])
    size = 0 if ws is None else len(ws)
    if ids is None:
        return all(0 <= i < size for i in call["idx"])
    return ws is not None and all(ws.row_of(item_id) == i for i, item_id in zip(call["idx"], ids))
