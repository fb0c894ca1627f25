"""The notebooks run end to end on small data (CI), show every figure, and are committed without
outputs."""

import ast
import base64
import io
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
# every figure the executed notebooks show, saved for a person to open (not committed)
FIGURES_DIR = ROOT / "out" / "notebook-figures"
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# A hang guard for one cell (nbclient raises past it), not a performance claim: on a loaded
# machine a small-data cell may take minutes; none should take half an hour.
CELL_HANG_GUARD_S = 1800


def test_there_are_five_notebooks():
    assert [p.name[:2] for p in NOTEBOOKS] == ["01", "02", "03", "04", "05"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stripped(path):
    nbformat = pytest.importorskip("nbformat")
    book = nbformat.read(path, as_version=4)
    for cell in book.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, path.name


def calls_plot_helper(source: str) -> bool:
    """Whether a code cell calls a ``plot_*`` function (an import of one is not a call)."""
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
            if name.startswith("plot_"):
                return True
    return False


def test_calls_plot_helper_finds_calls_not_imports():
    assert calls_plot_helper("plot_score_breakdown(result, 'q1')")
    assert calls_plot_helper("fig = plots.plot_strategy_mix(r)\nfig")
    assert not calls_plot_helper("from memlab.harness.plots import plot_score_breakdown")
    assert not calls_plot_helper("plot = 1\nprint(plot)")


def png_pixels(data: str) -> np.ndarray:
    """Decode a notebook's base64 ``image/png`` payload into an RGBA pixel array."""
    from matplotlib.image import imread

    raw = base64.b64decode(data)
    assert raw.startswith(PNG_SIGNATURE)
    return imread(io.BytesIO(raw), format="png")


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_on_small_data_and_shows_every_figure(path, monkeypatch):
    """Executed the way a new user's Jupyter runs it: the kernel's default matplotlib backend, no
    magic; every cell calling a ``plot_`` helper shows exactly one non-blank PNG image."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("MEMLAB_NOTEBOOK_SMALL", "1")
    monkeypatch.delenv("MPLBACKEND", raising=False)   # the kernel's default (inline) backend
    book = nbformat.read(path, as_version=4)
    nbclient.NotebookClient(book, timeout=CELL_HANG_GUARD_S, kernel_name="python3",
                            resources={"metadata": {"path": str(path.parent)}}).execute()
    code = [cell for cell in book.cells if cell.cell_type == "code"]
    errors = [o for cell in code for o in cell.outputs if o.output_type == "error"]
    assert not errors
    plot_cells = [cell for cell in code if calls_plot_helper(cell.source)]
    if path.name[:2] in ("01", "02", "03", "04"):
        assert plot_cells, f"{path.name} should have plot cells"
    FIGURES_DIR.mkdir(parents=True, exist_ok=True)
    for n, cell in enumerate(plot_cells, start=1):
        images = [o.data["image/png"] for o in cell.outputs
                  if o.output_type in ("execute_result", "display_data")
                  and "image/png" in o.data]
        assert len(images) == 1, (path.name, cell.source, cell.outputs)
        (FIGURES_DIR / f"{path.stem}-{n}.png").write_bytes(base64.b64decode(images[0]))
        pixels = png_pixels(images[0])
        assert pixels.shape[0] >= 100 and pixels.shape[1] >= 100, pixels.shape
        # a real figure: many distinct colours, not a blank canvas
        assert len(np.unique(pixels.reshape(-1, pixels.shape[-1]), axis=0)) > 10
    # every notebook ends with a conclusion computed from its numbers (Markdown output)
    last = code[-1]
    assert any("text/markdown" in o.get("data", {}) for o in last.outputs), path.name
