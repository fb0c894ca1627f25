"""Round 6's outside checks: each test failed before its fix."""

import pytest

from memlab.surfacing.stages.ranker_features import query_entities


# a name in possessive form ("Melanie's pup") is the name, for rf_speaker and rf_entities
@pytest.mark.parametrize("query, expected", [
    ("What is Melanie's pup called?", ["melanie"]),
    ("Where is Jon\u2019s dance studio?", ["jon"]),
    ("Did James' car break down after Caroline's trip?", ["james", "caroline"]),
    ("When did Caroline go to the LGBTQ support group?", ["caroline", "lgbtq"]),
])
def test_query_entities_drop_the_possessive(query, expected):
    assert query_entities(query) == expected


def test_rf_speaker_names_the_speaker_of_a_possessive_question():
    from memlab import Memory
    from memlab.surfacing.config import DEFAULT
    mem = Memory(surfacing_mode="router", config=DEFAULT.replace(ranker_features=True))
    mem.add("Melanie: I adopted a pup last week, his name is Oscar", item_id="m1",
            metadata={"speaker": "Melanie"})
    mem.add("Caroline: I adopted a pup in spring", item_id="c1", metadata={"speaker": "Caroline"})
    mem.get_working_context("s", "What is Melanie's pup called?")
    cands = mem.last_context_record.candidates
    speaker = dict(zip(cands["item_id"], cands["rf_speaker"]))
    entities = dict(zip(cands["item_id"], cands["rf_entities"]))
    assert speaker == {"m1": 1.0, "c1": 0.0}
    assert entities == {"m1": 1.0, "c1": 0.0}


# --address that is not a Dask scheduler: one line, no hang (an HTTP server; a silent peer)
def test_an_address_that_is_not_a_dask_scheduler_is_refused_in_one_line(tmp_path, capsys):
    pytest.importorskip("distributed")
    import http.server
    import socket
    import threading

    import importlib

    from memlab.cli import main
    from memlab.harness.trace import TraceBuilder
    replay_module = importlib.import_module("memlab.harness.replay")
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    builder = TraceBuilder("two", start="2024-01-01T00:00:00+00:00")
    for ws in ("w1", "w2"):
        builder.current_workspace = ws
        builder.add("deploys run on fridays", item_id=f"{ws}-a")
        builder.query(f"{ws}-q", "when do deploys run", gold=[f"{ws}-a"])
    path = builder.build().write_jsonl(tmp_path / "two.jsonl")
    try:
        for port in (server.server_address[1], silent.getsockname()[1]):
            with pytest.MonkeyPatch.context() as patch:
                patch.setattr(replay_module, "_SCHEDULER_TIMEOUT_S", 1.0)
                code = main(["replay", str(path), "--executor", "dask", "--address",
                             f"tcp://127.0.0.1:{port}"])
            err = capsys.readouterr().err.strip().splitlines()
            assert code == 2 and len(err) == 1
            assert err[0].endswith("cannot reach the Dask scheduler (nothing answered as a "
                                   "Dask scheduler within 1 s)")
    finally:
        server.shutdown()
        silent.close()


# the WAL of another process can vanish between a check and a stat (a flaky CI failure)
def test_a_wal_deleted_between_exists_and_stat_is_an_empty_wal(tmp_path, monkeypatch):
    from pathlib import Path

    from memlab import persist
    from memlab.store import MemoryStore
    path = tmp_path / "m.db"
    MemoryStore(path=path, compact_after=None).close()
    wal = Path(f"{path}-wal")
    wal.write_bytes(b"")
    real_stat = Path.stat

    def vanishing(self, *args, **kwargs):
        if self == wal:
            raise FileNotFoundError(2, "No such file or directory", str(self))
        return real_stat(self, *args, **kwargs)
    real_exists = Path.exists
    monkeypatch.setattr(Path, "exists",  # it is there when looked for, gone when stat'ed
                        lambda self, *a, **k: True if self == wal else real_exists(self, *a, **k))
    monkeypatch.setattr(Path, "stat", vanishing)
    head = path.read_bytes()[:100]
    assert persist._truncation(path, head, real_stat(path).st_size) is None
