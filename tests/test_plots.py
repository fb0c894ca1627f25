"""Plot helpers' figures display inline in Jupyter with no magic, save with ``savefig``, work
headless and leave matplotlib's global state alone (issue 13, item 10)."""

import base64
import io
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from matplotlib.figure import Figure
from matplotlib.image import imread

from memlab.datasets import fixture_trace, load_fixture
from memlab.harness import replay, sweep
from memlab.harness.plots import (InlineFigure, plot_measure_vs_parameter, plot_score_breakdown,
                                  plot_stage_latency, plot_strategy_mix)

ROOT = Path(__file__).resolve().parents[1]
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(scope="module")
def figures():
    trace = fixture_trace(load_fixture("apollo_demo"))
    live = replay(trace, k=10)
    swept = sweep(trace, {"centrality_weight": [0.0, 1.0]}, measures=["MRR"], k=10,
                  counterfactual=True)
    return {"score_breakdown": plot_score_breakdown(live, "q1"),
            "stage_latency": plot_stage_latency(live),
            "strategy_mix": plot_strategy_mix({"memlab": live}),
            "measure_vs_parameter": plot_measure_vs_parameter(swept, "centrality_weight", "MRR")}


def assert_real_png(raw: bytes) -> None:
    assert raw.startswith(PNG_SIGNATURE)
    pixels = imread(io.BytesIO(raw), format="png")
    assert pixels.shape[0] >= 100 and pixels.shape[1] >= 100
    assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10  # not blank


@pytest.mark.parametrize("name", ["score_breakdown", "stage_latency", "strategy_mix",
                                  "measure_vs_parameter"])
def test_every_plot_helper_figure_formats_as_png_for_ipython(figures, name):
    """IPython's own display formatter (no matplotlib integration loaded) finds a PNG."""
    formatters = pytest.importorskip("IPython.core.formatters")
    fig = figures[name]
    assert isinstance(fig, Figure) and isinstance(fig, InlineFigure)
    data, _ = formatters.DisplayFormatter().format(fig)
    assert "image/png" in data and "Figure size " in data["text/plain"]
    assert_real_png(data["image/png"])


@pytest.mark.parametrize("name", ["score_breakdown", "stage_latency"])
def test_plot_helper_figure_saves_with_savefig(figures, name, tmp_path):
    fig = figures[name]
    fig.savefig(tmp_path / "fig.png", dpi=80)
    fig.savefig(tmp_path / "fig.svg")
    assert_real_png((tmp_path / "fig.png").read_bytes())
    assert (tmp_path / "fig.svg").read_text().lstrip().startswith("<?xml")


def test_plot_helpers_leave_matplotlib_global_state_alone():
    """Headless, in a fresh interpreter: making and rendering figures neither imports pyplot nor
    switches the backend nor changes rcParams."""
    script = """
import matplotlib, sys
before = (matplotlib.get_backend(), dict(matplotlib.rcParams))
from memlab.datasets import fixture_trace, load_fixture
from memlab.harness import replay
from memlab.harness.plots import plot_score_breakdown, plot_strategy_mix
live = replay(fixture_trace(load_fixture("apollo_demo")), k=10)
for fig in (plot_score_breakdown(live, "q1"), plot_strategy_mix(live)):
    assert fig._repr_png_().startswith(b"\\x89PNG")
assert "matplotlib.pyplot" not in sys.modules
assert (matplotlib.get_backend(), dict(matplotlib.rcParams)) == before
print("ok")
"""
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env,
                         cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


@pytest.mark.parametrize("setup,backend", [
    ("", None),                                  # a new user's Jupyter: the kernel's default
    ("", "Agg"),                                 # headless CI backend, no inline support
    # pyplot loaded with the inline backend: its Figure formatter and its end-of-cell flush
    ("%matplotlib inline\nimport matplotlib.pyplot as plt", None),
], ids=["default", "agg", "inline-pyplot"])
def test_plot_helper_shows_exactly_one_image_in_a_notebook(setup, backend, monkeypatch):
    """Last expression of a cell: one PNG, whatever else the notebook set up (no duplicate)."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    if backend is None:
        monkeypatch.delenv("MPLBACKEND", raising=False)
    else:
        monkeypatch.setenv("MPLBACKEND", backend)
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    cells = [setup, "from memlab.datasets import fixture_trace, load_fixture\n"
                    "from memlab.harness import replay\n"
                    "from memlab.harness.plots import plot_strategy_mix\n"
                    "live = replay(fixture_trace(load_fixture('apollo_demo')), k=10)",
             "plot_strategy_mix(live)"]
    book = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells if c])
    # the timeout is a hang guard for one cell, not a performance claim
    nbclient.NotebookClient(book, timeout=1800, kernel_name="python3").execute()
    outputs = [o for cell in book.cells for o in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o.data["image/png"] for o in outputs
              if o.output_type in ("execute_result", "display_data") and "image/png" in o.data]
    assert len(images) == 1
    assert_real_png(base64.b64decode(images[0]))
