"""Helpers shared by test files (importable as ``from _support import ...``, like
``_service_client``): running the CLI in process, its one-line error contract, and journals as
older memlab versions wrote them; a reader holding a store's lock; the CLI and the MCP server
in child processes."""

import contextlib
import json
import os
import queue
import sqlite3
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from memlab.cli import main

REPO = Path(__file__).resolve().parents[1]


def cli(capsys, *args: str) -> tuple[int, list[str]]:
    """Run ``memlab *args`` in this process: (exit code, stderr lines). An uncaught exception
    (a traceback for a user) propagates and fails the test."""
    try:
        code = main(list(args))
    except SystemExit as exc:  # argparse's own errors
        code = exc.code
    return code, capsys.readouterr().err.strip().splitlines()


def assert_one_line_error(code, lines, command, *fragments):
    """The CLI's contract for bad input: exit 2 and one line ``memlab <command>: error: …``
    holding every fragment."""
    assert code == 2, (code, lines)
    assert len(lines) == 1, lines
    assert lines[0].startswith(f"memlab {command}: error: "), lines[0]
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])


def legacy_file(path, rows, version=2):
    """A journal as memlab wrote schema ``version`` (1 or 2): no checksum column."""
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT)")
    conn.execute("CREATE TABLE ops (seq INTEGER PRIMARY KEY AUTOINCREMENT, op TEXT NOT NULL, "
                 "payload TEXT NOT NULL)")
    conn.execute("INSERT INTO meta VALUES ('schema_version', ?)", (str(version),))
    conn.executemany("INSERT INTO ops (op, payload) VALUES (?, ?)", rows)
    conn.commit()
    conn.close()


@contextlib.contextmanager
def holding_shared(lock, timeout: float):
    """A thread that holds ``lock`` (a :class:`memlab._rwlock.RWLock`) shared for the whole
    block: a reader that stays inside while the test starts other readers and writers. On
    exit it leaves the lock and is joined (``timeout``: a hang guard only)."""
    inside, release = threading.Event(), threading.Event()

    def hold() -> None:
        with lock.shared():
            inside.set()
            release.wait(timeout)

    holder = threading.Thread(target=hold, daemon=True)
    holder.start()
    assert inside.wait(timeout), "the holding reader never got the lock"
    try:
        yield holder
    finally:
        release.set()
        holder.join(timeout)


def run_memlab(*args: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    """``python -m memlab *args`` in a child process running this checkout (text output
    captured)."""
    env = dict(os.environ, PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "memlab", *args], capture_output=True,
                          text=True, env=env, timeout=timeout, **kwargs)


class McpStdio:
    """``memlab mcp --db DB`` over real stdio, as a context manager: :meth:`send` writes one
    JSON-RPC message, :meth:`next_answer` reads the next one (60 s: a hang guard only),
    :meth:`answer` the one with a given id; on exit its stdin is closed and it is waited for."""

    def __init__(self, db) -> None:
        self.db = db

    def __enter__(self) -> "McpStdio":
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "memlab", "mcp", "--db", str(self.db)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.lines: queue.Queue = queue.Queue()
        threading.Thread(target=lambda: [self.lines.put(x) for x in
                                         iter(self.proc.stdout.readline, b"")],
                         daemon=True).start()
        return self

    def send(self, message) -> None:  # json.dumps writes a lone surrogate as the escape \udc00
        self.proc.stdin.write((json.dumps(message) + "\n").encode("ascii"))
        self.proc.stdin.flush()

    def next_answer(self) -> dict:
        try:
            return json.loads(self.lines.get(timeout=60).decode("utf-8"))
        except queue.Empty:
            pytest.fail("no answer from memlab mcp")

    def answer(self, request_id) -> dict:
        while True:
            message = self.next_answer()
            if message.get("id") == request_id:
                return message

    def call(self, request_id, tool: str, arguments: dict) -> dict:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": "tools/call",
                   "params": {"name": tool, "arguments": arguments}})
        return self.answer(request_id)

    def initialize(self) -> None:
        self.send({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"}}})
        assert "result" in self.answer(0)
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def __exit__(self, *exc) -> None:
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# ---------------------------------------------------------------- threads in concurrency tests
SAFETY_S = 30.0  # a thread-test's wait that only a regression ever reaches


def until(condition) -> bool:
    """Poll ``condition`` every 2 ms until it holds (True) or :data:`SAFETY_S` passes (False)."""
    pause = threading.Event()
    for _ in range(int(SAFETY_S / 0.002)):
        if condition():
            return True
        pause.wait(0.002)
    return False


def start_thread(target, *args, name: str | None = None) -> tuple[threading.Thread, dict]:
    """Run ``target(*args)`` in a daemon thread; the dict gets ``value`` or ``error``, then
    ``done``."""
    out: dict = {}

    def run():
        try:
            out["value"] = target(*args)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            out["error"] = exc
        finally:
            out["done"] = True

    thread = threading.Thread(target=run, daemon=True, name=name)
    thread.start()
    return thread, out


class SlowDisk:
    """Replaces a journal's ``append_many``: the first call announces itself (``entered``) and
    waits for ``release`` (then writes, or raises ``fail``); later calls go straight through.
    With ``lock``, each call records ``(lock.epoch % 2, lock.held_exclusively())`` in ``seen``."""

    def __init__(self, journal, lock=None, fail: BaseException | None = None) -> None:
        self.journal, self.real, self.lock = journal, journal.append_many, lock
        self.entered, self.release = threading.Event(), threading.Event()
        self.fail, self.calls, self.seen = fail, 0, []

    def __call__(self, ops):
        self.calls += 1
        if self.lock is not None:
            self.seen.append((self.lock.epoch % 2, self.lock.held_exclusively()))
        if self.calls == 1:
            self.entered.set()
            assert self.release.wait(SAFETY_S)
            if self.fail is not None:
                raise self.fail
        return self.real(ops)


class SlowCommit:
    """Replaces a journal's ``around_commit`` (the context around the ``COMMIT`` alone, inside
    ``append_many``, after the rows are inserted): the first commit enters the journal's own
    context (the store's: it admits readers when the commit may), records what it yielded in
    ``admits``, announces itself (``entered``) and waits for ``release``; then it commits, or
    raises ``fail`` (rolled back), and sets ``committed`` before the journal's own context
    ends (where a commit that admitted readers waits for them). Later commits go straight
    through. Unlike :class:`SlowDisk` it holds a writer *inside* its commit."""

    def __init__(self, journal, fail: BaseException | None = None) -> None:
        self.real = journal.around_commit
        self.entered, self.release = threading.Event(), threading.Event()
        self.committed = threading.Event()
        self.fail, self.calls, self.admits = fail, 0, None

    @contextlib.contextmanager
    def __call__(self):
        self.calls += 1
        first = self.calls == 1
        with self.real() as admits:
            if first:
                self.admits = admits
                self.entered.set()
                assert self.release.wait(SAFETY_S)
                if self.fail is not None:
                    self.committed.set()
                    raise self.fail
            try:
                yield admits
            finally:
                if first:
                    self.committed.set()


def waiting_in(thread: threading.Thread, function: str) -> bool:
    """Whether ``thread`` is now running inside a function named ``function`` (for a test to
    know that a thread reached a wait, without timing it)."""
    frame = sys._current_frames().get(thread.ident)
    while frame is not None:
        if frame.f_code.co_name == function:
            return True
        frame = frame.f_back
    return False


# ---------------------------------------------------------------- learned rankers
def assert_live_ranks_as_the_frame(trace, live, kind: str, folder, option: str,
                                   features: list, columns, value=True) -> Path:
    """A ``kind`` model fitted on ``live`` (reading exactly ``features``) ranks a replay under
    ``DEFAULT`` with ``option=value`` and the model as its reranker exactly as it ranks
    ``live``'s recorded frame, and the live stage records the same ``columns``; returns the
    saved model's path."""
    import numpy as np

    from memlab.harness.replay import replay
    from memlab.learn import fit_ranker, frame_features
    from memlab.surfacing.config import DEFAULT
    from memlab.tuning.evaluate import rank_frame
    model = fit_ranker(live, kind=kind, seed=3)
    assert model.features == list(features)
    path = model.save(Path(folder) / f"{kind}.json")
    scores = model.predict(frame_features(live)[0])
    with pytest.warns(Warning, match="in-sample"):
        staged = replay(trace, DEFAULT.replace(**{option: value}, reranker=str(path)),
                        measures=["R@10", "MRR"])
    for measure in ("R@10", "MRR"):
        offline = rank_frame(live.candidates, live.decisions, scores, measure)
        online = staged.metrics[staged.metrics["measure"] == measure].set_index("qid")["value"]
        assert offline.index.tolist() == online.index.tolist()
        np.testing.assert_array_equal(offline.to_numpy(), online.to_numpy())
    key = ["qid", "item_id"]
    recorded = live.candidates.set_index(key)[list(columns)].sort_index()
    assert recorded.equals(staged.candidates.set_index(key)[list(columns)].sort_index())
    return path


#: the second-hop tests' question and passages: a painter's birthplace and its river, a
#: homonym footballer, noise
SECOND_HOP_QUERY = "Which river flows through the birthplace of Anna Weber the painter?"
SECOND_HOP_PASSAGES = (
    ("anna", "Anna Weber", "Anna Weber was a painter, the painter was born in Lindau."),
    ("lindau", "Lindau", "Lindau is a town on Lake Constance where the Rhine flows."),
    ("homonym", "Anna Weber (footballer)", "Anna Weber is a footballer from Bremen."),
    ("other", "Rhine", "The Rhine is a river in Europe."),
    ("noise", "Bremen", "Bremen hosts a painter festival."),
)


def second_hop_memory(second_hop_features=True, **options):
    """A router ``Memory`` under ``DEFAULT`` with ``second_hop_features`` (and ``options``)
    holding :data:`SECOND_HOP_PASSAGES`, each titled."""
    from memlab import Memory
    from memlab.surfacing.config import DEFAULT
    mem = Memory(surfacing_mode="router",
                 config=DEFAULT.replace(second_hop_features=second_hop_features, **options))
    for item_id, title, text in SECOND_HOP_PASSAGES:
        mem.add(f"{title}\n{text}", item_id=item_id, metadata={"title": title})
    return mem
