"""Durability: the :func:`journaled` decorator every store write wears, replay, group commit,
transactions and compaction (a mixin of :class:`~memlab.store.MemoryStore`)."""

from __future__ import annotations

import contextlib
import functools
import inspect
import threading
from dataclasses import dataclass
from typing import Any

import numpy as np

from memlab.persist import (ConcurrentWriterError, StoreClosedError, Journal, JournalCorruptError,
                            PersistenceError, decode, encode)
from memlab.snapshot import CompactionReport, capture
from memlab.store.workspace import NewItem

__all__ = ["COMPACT_AFTER", "JOURNALED_OPS", "REINFORCE_BATCH", "JournalMixin", "journaled"]

_CLASSES = {"NewItem": NewItem}  # dataclasses that journaled arguments may hold


@dataclass(slots=True)
class _Commit:
    """Rows of one write waiting for the group commit (:meth:`JournalMixin._write_journal`)."""

    ticket: int  # its place in the queue (1, 2, ...: the order the writes applied)
    ops: list[tuple[str, str]]  # its journal rows, buffered reinforcements first
    kept: list[str]  # the buffered reinforcements it carries (buffered again if it fails)
    what: str  # the write, for the error message


def _numbers_below(values: Any, bound: int) -> bool:
    """Whether ``values`` (an int, or a sequence or array of them) are all in ``0..bound-1``."""
    if isinstance(values, (bool, np.bool_)):
        return False
    if isinstance(values, (int, np.integer)):
        return 0 <= values < bound
    if not isinstance(values, (list, tuple, np.ndarray)):
        return False
    if isinstance(values, (list, tuple)) and not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in values):
        return False
    array = np.asarray(values)
    if array.size == 0:
        return True
    return array.dtype.kind in "iu" and int(array.min()) >= 0 and int(array.max()) < bound


JOURNALED_OPS: set[str] = set()  # the store methods a journal row may name (``store.<name>``)
# Writes made by reads (activation reinforcement): group-committed, see MemoryStore.flush.
_GROUP_COMMITTED = frozenset(["record_retrieval"])
REINFORCE_BATCH = 64  # default number of reinforcements per journal row (``reinforce_batch``)
COMPACT_AFTER = 100_000  # default journal rows after the latest snapshot that trigger one


@functools.lru_cache(maxsize=4)
def _retrieval_params(store_class: type) -> tuple[str, ...]:
    """The parameter names of ``store_class.record_retrieval``, in order (its journal payload's
    keys: :meth:`JournalMixin.retrieval_payload`); read from the class, not imported from the
    items module, which imports this one."""
    return tuple(inspect.signature(store_class.record_retrieval).parameters)[1:]


def journaled(method):
    """Make a store write durable: after it applies, its name and arguments go to the journal
    (outermost call only). If the journal cannot be written, the store is rebuilt from disk, so
    a failed write changes nothing, and :class:`~memlab.persist.PersistenceError` is raised.

    Every write computes (and validates) everything that can fail before it changes anything,
    then calls :meth:`MemoryStore._mutating` and applies. The arguments are encoded for the
    journal before the write runs. Should anything still raise once a write has begun to apply
    (an out-of-memory error, a bug), a durable store is rebuilt from disk, which holds exactly
    the acknowledged writes; inside :meth:`MemoryStore.transaction` the transaction does that.
    """
    signature = inspect.signature(method)
    JOURNALED_OPS.add(method.__name__)
    deferred = method.__name__ in _GROUP_COMMITTED

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        self._check_open(method.__name__)
        if self._replaying or (self._journal is None and not self.reinforcements):
            return method(self, *args, **kwargs)
        with self.lock:
            outer = self._depth == 0
            if outer:  # reinforcements that reads queued go first, a bounded slice of them
                self.reinforcements.apply_waiting(self.reinforcements.slice)  # (_reinforce)
            if self._journal is None:
                return method(self, *args, **kwargs)
            if outer:
                bound = signature.bind(self, *args, **kwargs)
                payload = {k: v for k, v in bound.arguments.items() if k != "self"}
                op = (f"store.{method.__name__}", encode(payload))
                self._applying = False
            self._depth += 1
            try:
                result = method(self, *args, **kwargs)
            except BaseException:
                if outer and self._applying and self._batch is None:
                    self._replay()  # began to apply: back to what is on disk
                raise
            finally:
                self._depth -= 1
                if outer:
                    self._applying = False
            if outer:
                if self._batch is not None:
                    self._batch.append(op)  # written with the rest of the transaction
                elif deferred:
                    self._defer(op[1])  # group commit (see MemoryStore.flush)
                else:
                    self._write_journal([op], method.__name__, admit_readers=True)
            return result

    return wrapper


class JournalMixin:
    """The journal of :class:`~memlab.store.MemoryStore`: replay, group commit, transactions,
    compaction, flush and close."""

    def _replay(self) -> None:
        """Rebuild the in-memory state from the journal (see :mod:`memlab.persist`), then
        re-apply the buffered reinforcements (see :meth:`flush`): they were acknowledged reads,
        so a failed write that rebuilds the store keeps them (still buffered)."""
        with self.lock:
            # rows other writes queued (applied, not yet on disk) belong on disk first, or the
            # rebuild would drop them from memory and still write them
            self._commit_queued()
            self._reset_state()
            pending, self._pending = self._pending, []
            self._replaying = True
            try:
                # snapshot and rows read at one moment of the file (another process may be
                # writing or compacting it)
                info, parts, rows = self._journal.load(prefix="store.")
                if info is not None:  # the state of rows 1..upto, then only the rows after it
                    self.load_snapshot(info, parts)
                del parts
                tail = 0
                for seq, op, payload in rows:
                    self._apply(seq, op, payload)
                    tail += 1
                self._tail_rows = tail
                self._foreign_writer = False  # every row of the file is applied now
                for payload in pending:
                    try:  # applied once already; fails only for an item a failed group
                        # commit undid (a read saw it while its write was being written)
                        self._apply(0, "store.record_retrieval", payload)
                    except JournalCorruptError:
                        continue
                    self._pending.append(payload)
            finally:
                self._replaying = False

    def _apply(self, seq: int, op: str, payload: str, path: Any = None) -> None:
        """Apply journal row ``seq`` (the message of a failure names the row, not its data).

        Item and edge numbers are checked first: the journaled methods trust them (they were
        validated when first written), so a damaged row must not reach them."""
        path = self._journal.path if path is None else path
        name = op.removeprefix("store.")
        if name not in JOURNALED_OPS:
            raise JournalCorruptError(path, seq, "an unknown operation")
        try:
            args = decode(payload, _CLASSES)
        except ValueError as exc:
            raise JournalCorruptError(path, seq, f"{op} has a malformed payload: {exc}") from None
        problem = self._row_problem(name, args)
        if problem:
            raise JournalCorruptError(path, seq, f"{op} {problem}")
        try:
            getattr(self, name)(**args)
        except Exception as exc:  # noqa: BLE001 - whatever it is, the row cannot be applied
            raise JournalCorruptError(path, seq, f"{op} cannot be applied "
                                      f"({type(exc).__name__})") from None

    def _row_problem(self, name: str, args: dict) -> str | None:
        """Why a journal row's item or edge numbers cannot be applied to this store, or None."""
        if name == "record_retrievals":
            calls = args.get("calls")
            if not isinstance(calls, list) or not calls or not all(
                    isinstance(c, dict) for c in calls):
                return "holds no calls"
            for call in calls:
                problem = self._row_problem("record_retrieval", call)
                if problem:
                    return problem
            return None
        workspace_id = args.get("workspace_id")
        if not isinstance(workspace_id, str):
            return "names no workspace"
        ws = self._workspaces.get(workspace_id)
        items = len(ws) if ws is not None else 0
        for key in ("idx", "src", "dst"):
            if key in args and not _numbers_below(args[key], items):
                return "names an item that does not exist"
        if name == "add_edges":
            edges = args.get("edges")
            if not isinstance(edges, list) or not all(
                    isinstance(e, list) and len(e) == 4 and _numbers_below(e[:2], items)
                    for e in edges):
                return "names an item that does not exist"
        if name == "remove_edges":
            rows = len(ws.graph.table.weight.view()) if ws is not None else 0
            if not _numbers_below(args.get("rows"), rows):
                return "names an edge that does not exist"
        return None

    # ------------------------------------------------------------ group commit
    def _init_commits(self) -> None:
        """The group commit's state (see :meth:`_write_journal`); hooks the store's lock."""
        self._commit_cond = threading.Condition(threading.Lock())  # guards the fields below
        self._commit_queue: list[_Commit] = []  # applied in memory, not yet on disk, in order
        self._commit_issued = 0  # the last ticket given out
        self._durable_upto = 0  # every ticket up to this one is on disk
        self._committing = False  # a thread is writing a batch (the leader)
        self._commit_failure: tuple[list[_Commit], BaseException] | None = None  # to undo
        self._commit_errors: dict[int, PersistenceError] = {}  # failed ticket -> its error
        self._undoing = False  # a thread is undoing a failed batch (holds the store's lock)
        self._owed = threading.local()  # .ticket: this thread's last write not yet waited for
        self._window_depth = 1  # the lock depth whose commit may open an io window (single_write)
        self._admit_at_commit = 0  # thread whose commit admits readers (reads_during_fsync)
        self.lock.after_release = self._after_release

    def _write_journal(self, ops: list[tuple[str, str]], what: str,
                       reinforcement: str | None = None, admit_readers: bool = False) -> None:
        """Queue ``ops`` for the journal, after the buffered reinforcements (and
        ``reinforcement``, the one being made) as one ``store.record_retrievals`` row; the
        caller holds the store's lock exclusively and has applied them in memory.

        Group commit: the rows are written (one SQLite transaction, one fsync, together with
        whatever other threads queued meanwhile) when the calling thread's outermost exclusive
        section ends, *after* the lock is free (:attr:`memlab._rwlock.RWLock.after_release`,
        :meth:`_after_release`), and the write returns only once they are on disk. Readers
        therefore never wait for a write's disk I/O, while a write that returned is still
        durable. Rows are queued under the exclusive lock, so the journal's order is the order
        in which the writes applied. If the rows cannot be written, every write queued from the
        failed batch on is undone (the store is rebuilt from disk: :meth:`_undo_failed_commit`)
        and each of them raises :class:`~memlab.persist.PersistenceError`.

        ``admit_readers``: the caller is the outermost write (or transaction), whose section
        ends with this commit; with ``reads_during_fsync`` its commit under the lock may admit
        shared readers during the fsync (:meth:`_lead_commit`).
        """
        kept = self._pending
        calls = kept + ([] if reinforcement is None else [reinforcement])
        if calls:
            ops = [("store.record_retrievals", '{"calls": [' + ", ".join(calls) + "]}")] + ops
        self._pending = []
        with self._commit_cond:
            self._commit_issued += 1
            ticket = self._commit_issued
            self._commit_queue.append(_Commit(ticket, ops, kept, what))
        self._owed.ticket = ticket
        if not self.fsync_outside_lock:
            # on disk before the lock is released (readers wait, but for gets, and with
            # reads_during_fsync for every reader when the section ends with this commit)
            self._commit_all(admit_readers=admit_readers)

    def _after_release(self) -> None:
        """The store's lock's :attr:`~memlab._rwlock.RWLock.after_release`: wait until this
        thread's queued rows are on disk (write them, with everyone's, if no one is)."""
        ticket = getattr(self._owed, "ticket", 0)
        if ticket:
            self._owed.ticket = 0
            self._await_commit(ticket, own=True)

    def _commit_queued(self, window: bool = False, admit_readers: bool = False) -> None:
        """Write every queued row now and wait for a write under way (the caller holds the
        store's lock exclusively, so nothing can be queued meanwhile). Raises nothing: a
        failed write's error goes to the thread that made it (:meth:`_commit_all`).

        ``window``: the caller's state is complete (a write that applied whole, at the end of
        its section), so gets may read during the fsync (:meth:`_lead_commit`). False for
        :meth:`_replay`, which calls it before it rebuilds (an error path: the state may be
        half-applied). ``admit_readers``: shared readers too may go in during the fsync
        (:meth:`_lead_commit`)."""
        cond = self._commit_cond
        while True:
            with cond:
                if self._undoing:  # called by the undo's own rebuild: nothing may be written
                    return
                while True:
                    if self._commit_failure is not None:
                        batch = None
                        break
                    if not self._committing:
                        if not self._commit_queue:
                            return
                        batch, self._commit_queue = self._commit_queue, []
                        self._committing = True
                        break
                    cond.wait()
            if batch is None:
                self._undo_failed_commit()
            else:
                self._lead_commit(batch, window, admit_readers)

    def _commit_all(self, admit_readers: bool = False) -> None:
        """:meth:`_commit_queued`, then raise this thread's own write's error if it failed
        (the caller's write applied whole: the commit may open an io window, and with
        ``admit_readers`` admit shared readers in it)."""
        self._commit_queued(window=True, admit_readers=admit_readers)
        self._after_release()

    def _await_commit(self, ticket: int, *, own: bool) -> None:
        """Return once ``ticket`` is on disk; raise its error if it failed (``own``: the
        caller's ticket, whose error is reported once). Whoever finds no write under way
        writes the whole queue (the leader)."""
        cond = self._commit_cond
        while True:
            with cond:
                while True:
                    if ticket in self._commit_errors:
                        error = self._commit_errors.pop(ticket) if own else None
                        if error is not None:
                            raise error
                        return
                    if ticket <= self._durable_upto:
                        return
                    if self._commit_failure is not None:
                        batch = None  # undo the failed batch first (any thread may)
                        break
                    if not self._committing and self._commit_queue:
                        batch, self._commit_queue = self._commit_queue, []
                        self._committing = True
                        break
                    if not self._committing:  # nothing queued, nothing writing: a bug
                        raise RuntimeError(f"journal ticket {ticket} is neither queued, "
                                           f"written nor failed")
                    cond.wait()
            if batch is None:
                self._undo_failed_commit()
            else:
                self._lead_commit(batch)

    def _lead_commit(self, batch: list[_Commit], window: bool = False,
                     admit_readers: bool = False) -> None:
        """Write ``batch`` (the whole queue when it was taken) in one transaction.

        With ``window`` (and the conditions of :meth:`_may_open_window`) gets read during the
        fsync although it runs under the exclusive lock. With ``admit_readers`` too and
        ``reads_during_fsync`` on, shared readers (searches, contexts) go in during the
        transaction's ``COMMIT`` (:meth:`_around_commit`), and the commit returns once they
        have left (so does a failed one, before its undo)."""
        ops = [op for commit in batch for op in commit.ops]
        try:
            # every write of the batch has applied: optimistic reads (RWLock.optimistic) go
            # on during the commit even when it runs under the exclusive lock, unless a
            # caller's section goes on after it, or this is an error path
            window = window and self._may_open_window()
            io = self.lock.io_window() if window else contextlib.nullcontext()
            admit = window and admit_readers and self.reads_during_fsync
            with io:
                self._admit_at_commit = threading.get_ident() if admit else 0
                try:
                    self._journal.append_many(ops)
                finally:
                    self._admit_at_commit = 0
        except Exception as exc:  # noqa: BLE001 - every write of the batch gets it
            with self._commit_cond:
                self._commit_failure = (batch, exc)
                self._committing = False
                self._commit_cond.notify_all()
            self._undo_failed_commit()
            return
        with self._commit_cond:
            self._durable_upto = batch[-1].ticket
            self._tail_rows += len(ops)
            self._committing = False
            self._commit_cond.notify_all()
            compact = (self.compact_after is not None and self._tail_rows >= self.compact_after
                       and not self._foreign_writer)
        if compact:
            self._start_compaction()

    def _around_commit(self):
        """The journal's :attr:`~memlab.persist.Journal.around_commit`: around the ``COMMIT``
        of a commit that may admit readers (:meth:`_lead_commit`), the store's lock admits
        shared readers (:meth:`~memlab._rwlock.RWLock.admitting`); otherwise nothing.

        The block only opens and closes the admission; the writer waits for the readers it
        admitted when its io_window ends, after ``append_many`` has released the journal's
        own lock, so an admitted reader that writes the journal (a durable cache in the same
        shared section) waits for that lock, not for a writer that waits for it."""
        if self._admit_at_commit and self._admit_at_commit == threading.get_ident():
            return self.lock.admitting()
        return contextlib.nullcontext()

    def _may_open_window(self) -> bool:
        """Whether a commit under the exclusive lock may let gets read during its fsync: the
        state is complete (no write is applying, no transaction is open, no replay or undo is
        under way) and the commit ends the outermost exclusive section, so nothing changes
        after it before the lock is released (a caller's ``with store.lock:`` around several
        writes stays atomic for gets; :meth:`single_write` marks a section of one write)."""
        return (not self._applying and self._batch is None and not self._replaying
                and not self._undoing and self.lock.depth() <= self._window_depth)

    @contextlib.contextmanager
    def single_write(self):
        """``with store.lock:`` around exactly ONE write (with the reads that prepare it): the
        write's journal commit then still opens its io window (gets read during the fsync), as
        it does with no section around it. Nested in a caller's own exclusive section it is a
        plain ``with store.lock:`` (that section decides)."""
        with self.lock:
            outermost = self.lock.depth() == 1
            if outermost:
                self._window_depth = 2
            try:
                yield
            finally:
                if outermost:
                    self._window_depth = 1

    def _undo_failed_commit(self) -> None:
        """After a failed group commit: rebuild the store from disk (the failed writes and
        every write queued after them, which applied on top of them, are gone) and give each
        its :class:`~memlab.persist.PersistenceError`. Buffered reinforcements that rode in a
        failed batch are buffered again (acknowledged reads, re-applied by the rebuild); the
        reinforcement whose write failed is dropped (see :meth:`flush`). Idempotent: only the
        first thread to get here does it."""
        with self.lock:  # no write can be queued while this runs
            with self._commit_cond:
                if self._commit_failure is None or self._undoing:
                    return
                batch, exc = self._commit_failure
                failed = batch + self._commit_queue
                self._commit_queue = []
                self._undoing = True  # failure stays set: waiters come here, wait for the lock
            try:
                self._pending = [p for commit in failed for p in commit.kept] + self._pending
                self._replay()  # back to what is on disk: a failed write changes nothing
                # reads that ran while the failed rows were being written saw the undone
                # items: their queued reinforcements must not reach whatever is added next
                self.reinforcements.discard_missing()
            finally:
                with self._commit_cond:
                    for commit in failed:
                        error = PersistenceError(f"{commit.what} could not be written to "
                                                 f"{self._journal.path}: {exc}")
                        error.__cause__ = exc
                        self._commit_errors[commit.ticket] = error
                    self._commit_failure, self._undoing = None, False
                    self._commit_cond.notify_all()

    def _start_compaction(self) -> None:
        """Compact in a background thread (one at a time; not once :meth:`close` began)."""
        if self._closing or (self._compactor is not None and self._compactor.is_alive()):
            return

        def run() -> None:
            try:
                self.compact()
            except Exception as exc:  # noqa: BLE001 - kept for the caller; the journal is intact
                self.last_compaction_error = exc

        self._compactor = threading.Thread(target=run, name="memlab-compact", daemon=True)
        self._compactor.start()

    def compact(self):
        """Write a snapshot of the whole store into its file and drop the journal rows it
        covers, so that a reopen loads the snapshot and replays only the rows after it.

        Buffered reinforcements are written first (see :meth:`flush`), under the store's lock
        held exclusively; then the lock is downgraded to shared (atomically: no write gets in
        between) and the state is captured while readers go on (reads, contexts and searches,
        whose reinforcements queue meanwhile; writes wait, and a waiting write holds back new
        readers), then written in one SQLite transaction together with deleting the covered rows: a crash at
        any moment leaves either the old file or the compacted one, never a partial snapshot.
        A durable store also compacts by itself, in a background thread, once
        ``compact_after`` rows (default :data:`COMPACT_AFTER`) follow its latest snapshot;
        ``compact_after=None`` turns that off. See :mod:`memlab.snapshot` for what a snapshot
        holds.

        Returns
        -------
        memlab.snapshot.CompactionReport
            The rows covered and removed, and the snapshot's size.

        Raises
        ------
        ValueError
            The store is not durable (no ``path``), or the call is inside :meth:`transaction`.
        PersistenceError
            The snapshot could not be written (the file is unchanged).
        memlab.persist.StoreClosedError
            (a PersistenceError) The store was closed.
        memlab.persist.ConcurrentWriterError
            (a PersistenceError) Another process wrote rows into the file that this store never
            applied, among the rows the snapshot would cover, or compacted rows this store never
            applied: nothing is written (a snapshot of this store would lose those rows). Reopen the
            store and compact again. Rows another process wrote *after* this store's last one
            are no obstacle: the snapshot covers only the rows this store applied, and those
            rows stay. After this error the store no longer compacts by itself.

        Examples
        --------
        >>> import tempfile, pathlib
        >>> from datetime import datetime
        >>> from memlab.store import MemoryStore
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "m.db"
        >>> store = MemoryStore(path=path)
        >>> _ = store.add_items("ws", [store.prepare_item("deploy on fridays")],
        ...                     datetime(2024, 1, 1))
        >>> report = store.compact(); (report.upto, report.rows_removed)
        (1, 1)
        >>> store.close(); len(MemoryStore(path=path).workspace("ws"))
        1
        """

        if self._journal is None:
            raise ValueError("compact needs a durable store (MemoryStore(path=...)); this one "
                             "is in memory")
        self._check_open("compact")
        nested = self.lock.held_exclusively()  # inside a write: capture under it as it is
        self.lock.acquire()
        try:
            if self._batch is not None:
                raise ValueError("compact cannot run inside MemoryStore.transaction()")
            self.flush()
            # the rows this store applied, not the file's last row: another process may have
            # written rows since (they stay; see Journal.write_snapshot)
            upto, tail = self._journal.applied_upto(), self._tail_rows
            if tail == 0:
                return CompactionReport(0, 0, 0)
            if not nested:
                # capture beside readers: no write (nor reinforcement, which reads queue
                # meanwhile) can change the state or the journal between flush and capture
                self.lock.downgrade()
                try:
                    header, parts = capture(self)
                finally:
                    self.lock.release_shared()
            else:
                header, parts = capture(self)
        finally:
            if nested or self.lock.held_exclusively():
                self.lock.release()
        # written outside the store's lock (reads and writes go on); the store's lock is never
        # taken while _compact_lock is held, so the two cannot deadlock. Of two compactions the
        # one covering fewer rows writes nothing (Journal.write_snapshot).
        with self._compact_lock:
            try:
                removed = self._journal.write_snapshot(upto, header, parts)
            except ConcurrentWriterError:
                self._foreign_writer = True  # no more automatic attempts: reopen to compact
                raise
            except Exception as exc:
                raise PersistenceError(f"compaction could not be written to "
                                       f"{self._journal.path}: {exc}") from exc
        if removed is None:
            return CompactionReport(0, 0, 0)
        with self._commit_cond:  # group commits count rows outside the store's lock
            self._tail_rows = max(0, self._tail_rows - tail)
        return CompactionReport(upto, removed, sum(len(p) for p in parts))

    @contextlib.contextmanager
    def transaction(self):
        """Group several writes so that they reach the disk together or not at all.

        In memory they apply one by one as usual; the journal receives them in one SQLite
        transaction when the block ends (nothing if it raises, and the store is rebuilt from
        disk, so a failed group changes nothing)."""
        with self.lock:
            if self._journal is None or self._batch is not None or self._replaying:
                yield
                return
            self.reinforcements.apply_waiting()  # queued before the transaction: not in it
            self._batch = []
            try:
                yield
            except BaseException:
                self._batch = None
                self._replay()
                raise
            ops, self._batch = self._batch, None
            if ops:
                self._write_journal(ops, "transaction", admit_readers=True)

    def _check_open(self, what: str) -> None:
        """StoreClosedError for a write after :meth:`close`, before it changes anything (its
        journal write would fail, and a rebuild from the closed file would empty the store)."""
        if self._closed:
            raise StoreClosedError(f"store {str(self.path)!r} is closed: {what} changed "
                                   f"nothing (reopen it to write)")

    def retrieval_payload(self, call: dict[str, Any]) -> str | None:
        """The journal payload of ``record_retrieval(**call)``, exactly as :func:`journaled`
        would encode it (None for a store without a journal). A read computes it before it
        queues its reinforcement, outside the lock, so that whoever applies the reinforcement
        under the exclusive lock (:meth:`record_encoded`) does not encode it there."""
        if self._journal is None:
            return None
        return encode({name: call[name] for name in _retrieval_params(type(self))
                       if name in call})

    def record_encoded(self, call: dict[str, Any], payload: str | None,
                       ids: list[str] | None = None) -> bool:
        """``record_retrieval(**call)`` with its journal payload already encoded
        (:meth:`retrieval_payload`); the caller holds the store's lock exclusively. The same
        state, the same journal rows and the same failure handling as the journaled call.

        ``ids``: the ids of the items ``call["idx"]`` names, as the read that retrieved them
        saw them. An item number whose item is no longer that one (a failed commit undid the
        item, and a later write may have given its number to another) is dropped, the payload
        re-encoded without it; a call left with no item is skipped. Returns whether it applied.
        This is the one place queued and immediate reinforcements are applied: the check runs
        under the exclusive lock, so a reinforcement never lands on an item its read did not
        return."""
        self._check_open("record_retrieval")
        if ids is not None:
            ws = self._workspaces.get(call["workspace_id"])
            known = [] if ws is None else ws.item_ids
            idx = list(call["idx"])
            kept = [i for i, item_id in zip(idx, ids)
                    if 0 <= i < len(known) and known[i] == item_id]
            if len(kept) != len(idx):
                if not kept:
                    return False
                call = {**call, "idx": kept}
                payload = self.retrieval_payload(call)
        if payload is None or self._journal is None or self._replaying or self._depth \
                or self._batch is not None:
            self.record_retrieval(**call)
            return True
        self._depth += 1
        self._applying = False
        try:
            type(self).record_retrieval.__wrapped__(self, **call)
        except BaseException:
            if self._applying:
                self._replay()  # began to apply: back to what is on disk
            raise
        finally:
            self._depth -= 1
            self._applying = False
        self._defer(payload)
        return True

    def _defer(self, payload: str) -> None:
        """Buffer one reinforcement (an encoded :meth:`record_retrieval` call); write the
        buffer when it holds :attr:`reinforce_batch` of them."""
        if len(self._pending) + 1 >= self.reinforce_batch:
            self._write_journal([], "record_retrieval", payload)  # on failure, not buffered
            # written under the lock (the other readers wait one fsync, once per batch): a
            # read pays for this write, and outside the lock, with every other thread
            # running, its commit waits for the GIL at each SQLite call (measured: it set
            # the reads' p99, benchmarks/concurrent_reads.py)
            self._commit_all()
        else:
            self._pending.append(payload)

    def flush(self) -> None:
        """Write the buffered activation reinforcements to disk now (one row, one fsync).

        Reads (:meth:`~memlab.memory.Memory.search`, :meth:`~memlab.memory.Memory.get`, topic
        queries) reinforce activation through :meth:`record_retrieval`; on a durable store these
        writes are group-committed: buffered in memory and written as one journal row when
        :attr:`reinforce_batch` of them are buffered, before the next other write (in its
        transaction, ahead of it), and on :meth:`flush`, :meth:`compact` and :meth:`close`.
        A crash therefore loses at most the last ``reinforce_batch - 1`` reinforcements, never a
        write that returned. ``reinforce_batch=1`` journals each one as it happens.

        A reinforcement whose read found the lock taken waits in :attr:`reinforcements` (see
        :mod:`memlab._reinforce`; up to ``reinforce_batch - 1`` more can be lost that way);
        this method applies those first.
        """
        with self.lock:
            self.reinforcements.apply_waiting()  # queued ones too (memlab._reinforce)
            if self._journal is not None and self._batch is None:
                if self._pending:
                    self._write_journal([], "record_retrieval")
                self._commit_all()  # on disk before it returns, every other write's rows too

    def close(self) -> None:
        """Write buffered reinforcements (see :meth:`flush`) and close the database file (an
        in-memory store has nothing to close)."""
        if self._journal is not None:
            try:
                self.flush()
            finally:
                self._closing = True  # no new background compaction; wait for a running one
                if self._compactor is not None:
                    self._compactor.join()
                self._journal.close()
                self._closed = True

    @property
    def journal(self) -> Journal | None:
        """The SQLite journal when the store is durable, else None."""
        return self._journal
