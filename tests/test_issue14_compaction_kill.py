"""Kill -9 against compaction and group commit (issue 14, item 7; slow tier).

A child process writes, reads and compacts a durable store and prints each acknowledgement; the
test kills it with SIGKILL at a random moment (seeded per round) and checks the file: it opens,
``memlab check`` finds nothing, every acknowledged write is there, and of the acknowledged reads
at most ``reinforce_batch - 1`` reinforcements are lost (the documented window), never more.
"""

import os
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time

import pytest

from memlab import MemoryStore
from memlab.journal_repair import check_journal

pytestmark = pytest.mark.slow

BATCH = 4

# argv: path, reinforce_batch, compact_after ("none" or an int), explicit compaction (0/1),
# reads per write, items written in bulk before the loop
CHILD = textwrap.dedent("""
    import sys
    from memlab import Memory, MemoryStore
    path, batch, after, explicit, reads, bulk = sys.argv[1:7]
    store = MemoryStore(path=path, reinforce_batch=int(batch),
                        compact_after=None if after == "none" else int(after))
    mem = Memory(store=store)
    if int(bulk):
        mem.add_many([{"content": f"bulk note {i} on deploys and keys", "item_id": f"b{i}"}
                      for i in range(int(bulk))])
    print("ready", 0, flush=True)
    n = 0
    while True:
        if int(explicit) and n % 5 == 0:
            print("compacting", n, flush=True)
            store.compact()
            print("compacted", n, flush=True)
        item = mem.add(f"note {n} about deploys", item_id=f"n{n}")
        print("w", n, flush=True)            # acknowledged write
        for _ in range(int(reads)):
            mem.get(item)
            print("r", n, flush=True)        # acknowledged read (its reinforcement buffered)
        n += 1
""")


def _kill_at_random(args: list[str], seed: int, window: float, compactions: int = 0
                    ) -> tuple[int, int, int]:
    """Run the child, kill -9 it ``uniform(0, window)`` seconds after it is ready (after it
    began its ``compactions``-th compaction, when given); returns (last acknowledged write,
    acknowledged reads, compactions begun)."""
    proc = subprocess.Popen([sys.executable, "-c", CHILD, *args], stdout=subprocess.PIPE,
                            text=True)
    state = {"w": -1, "r": 0, "compacting": 0, "ready": False}

    def read() -> None:
        for line in proc.stdout:
            if not line.endswith("\n"):  # cut short by the kill: not acknowledged
                break
            kind, n = line.split()
            if kind == "w":
                state["w"] = int(n)
            elif kind == "r":
                state["r"] += 1
            elif kind == "compacting":
                state["compacting"] += 1
            elif kind == "ready":
                state["ready"] = True

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    deadline = time.monotonic() + 120
    while not state["ready"] and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.01)
    assert state["ready"], "the child did not start"
    while state["compacting"] < compactions and proc.poll() is None \
            and time.monotonic() < deadline:
        time.sleep(0.001)
    time.sleep(random.Random(seed).uniform(0.0 if compactions else 0.05, window))
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    reader.join(timeout=10)
    return state["w"], state["r"], state["compacting"]


def _check_after_kill(path, writes: int, reads: int, bulk: int) -> None:
    assert check_journal(path) == []
    store = MemoryStore(path=path, compact_after=None)
    ws = store.workspace("default")
    assert all(f"b{i}" in ws.index_of for i in range(bulk))
    assert all(f"n{i}" in ws.index_of for i in range(writes + 1))  # no acknowledged write lost
    assert len(ws) <= bulk + writes + 2  # at most the one write in flight besides
    on_disk = sum(e["kind"] == "reinforced" for item in ws.items for e in item.history)
    assert reads - (BATCH - 1) <= on_disk <= reads + 1
    assert store.journal.integrity_check() == "ok"
    store.close()


@pytest.mark.parametrize("round_", range(12))
def test_kill_9_during_explicit_compaction(tmp_path, round_):
    """Compactions of a 3,000-item store back to back, with writes and reads between; even
    rounds kill at a random moment, odd ones within 0.3 s of a compaction's start."""
    path, bulk = tmp_path / "m.db", 3000
    writes, reads, compactions = _kill_at_random(
        [str(path), str(BATCH), "none", "1", "3", str(bulk)], round_,
        4.0 if round_ % 2 == 0 else 0.3, compactions=0 if round_ % 2 == 0 else 1 + round_ // 4)
    assert compactions >= 1
    _check_after_kill(path, writes, reads, bulk)


@pytest.mark.parametrize("round_", range(12))
def test_kill_9_during_background_compaction_and_group_commit(tmp_path, round_):
    """Automatic compaction every 6 rows in a background thread; 10 reads per write, so the
    reinforcement buffer fills and is written on its own between writes."""
    path = tmp_path / "m.db"
    writes, reads, _ = _kill_at_random([str(path), str(BATCH), "6", "0", "10", "0"],
                                       100 + round_, 3.0)
    assert writes >= 0
    _check_after_kill(path, writes, reads, 0)
