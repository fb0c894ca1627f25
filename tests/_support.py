"""Helpers shared by test files (importable as ``from _support import ...``, like
``_service_client``): running the CLI in process, its one-line error contract, and journals as
older memlab versions wrote them."""

import sqlite3

from memlab.cli import main


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
