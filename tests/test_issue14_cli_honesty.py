"""Issue 14 leftovers: the CLI says what it does. ``memlab check`` lists damage and points to
``memlab recover`` (it does not print what recover would do); ``--workers`` is refused where
the executor ignores it (naming both flags); memlab's own deprecation warnings reach stderr as
one line each, and other libraries' do not."""

from __future__ import annotations

import json
import sqlite3
import warnings

import pytest

from memlab import Memory, cli
from memlab.surfacing.strategies import deprecated_strategy_name


def test_check_lists_damage_and_points_to_recover(tmp_path, capsys):
    path = tmp_path / "m.db"
    mem = Memory(path=str(path))
    mem.add_many([f"note {i} about the deploy" for i in range(4)])
    mem.store.compact()
    mem.add("after the snapshot")
    mem.store.close()
    assert cli.main(["check", str(path)]) == 0
    assert capsys.readouterr().out == f"{path}: ok\n"
    with sqlite3.connect(path) as conn:  # the metadata part: recover would rebuild it
        header = json.loads(conn.execute("SELECT header FROM snapshots").fetchone()[0])
        number = [e[0] for e in header["index"]].index("0.metadata") + 1
        conn.execute("UPDATE snapshot_parts SET crc = crc + 1 WHERE part = ?", (number,))
    assert cli.main(["check", str(path)]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"{path}: snapshot 1 (of rows 1..") and \
        lines[0].endswith(f"is damaged: part {number} ('0.metadata') fails its checksum")
    # no line of what recovery would keep, lose or rebuild: that is recover's report
    assert not any("kept" in line or "rebuilt" in line or "lost" in line for line in lines)
    assert lines[-1] == (f"{path}: damaged (1 problem); nothing was changed. `memlab recover "
                         f"{path} --out NEW` copies what is intact into a new file")
    assert cli.main(["recover", str(path), "--out", str(tmp_path / "new.db")]) == 1
    assert any("kept its 4 items; lost its metadata" in line
               for line in capsys.readouterr().out.splitlines())


WORKERS = [
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,0.1", "--workers", "3"],
     "--workers 3 has no effect with --executor serial (it replays in this process); use "
     "--executor local or dask, or drop --workers"),
    (["tune", "fixture:apollo_demo", "--workers", "4"],
     "--workers 4 has no effect with --executor serial"),
    (["eval", "--workers", "2"], "--workers 2 has no effect with --executor serial (it replays "
     "in this process); use --executor dask, or drop --workers"),
    (["eval", "--executor", "dask", "--address", "tcp://127.0.0.1:1", "--workers", "2"],
     "--workers 2 has no effect with --address 'tcp://127.0.0.1:1' (that scheduler's cluster "
     "has its own workers); drop one of them"),
    (["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0", "--executor", "local",
      "--workers", "0"], "--workers must be at least 1, got 0"),
]


@pytest.mark.parametrize("argv,message", WORKERS, ids=[" ".join(a[:1] + a[-2:]) for a, _ in
                                                        WORKERS])
def test_workers_is_refused_where_the_executor_ignores_it(argv, message, capsys):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"memlab {argv[0]}: error: ") and message in err


@pytest.mark.filterwarnings("ignore:a third-party library's deprecation")
def test_memlabs_deprecations_are_one_line_each_and_others_stay_hidden(monkeypatch, capsys):
    def run(args):
        warnings.warn("a third-party library's deprecation", DeprecationWarning)
        for _ in range(3):  # said once, however often the old name is met
            deprecated_strategy_name("relevance")
        return 0

    monkeypatch.setattr(cli, "_run", run)
    show = warnings.showwarning
    assert cli.main(["check", "x.db"]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == ["memlab: deprecated: the strategy implementation 'relevance' is now called "
                   "'plain' ('relevance' is also the name of a signal); the old name goes in "
                   "the next release"]
    assert warnings.showwarning is show  # the CLI's hook and filters end with its run
