"""Round 5's merge and outside-check fixes."""

import subprocess
import sys


def test_eval_embedder_help_names_every_built_in_embedder():
    code = ("import memlab.signals.dense as d, memlab.cli as c, io, contextlib\n"
            "buf = io.StringIO()\n"
            "with contextlib.redirect_stdout(buf):\n"
            "    try: c.main(['eval', '--help'])\n"
            "    except SystemExit: pass\n"
            "text = ' '.join(buf.getvalue().split())\n"
            "print([n for n in sorted(d.EMBEDDERS) if n not in text])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.strip()
    assert out == "[]"
