"""Issue 16, item 8: every Python block of the README and of datasets/README.md runs, so the front
page cannot rot. Blocks run in order in one namespace per file (a later block may use an earlier
one's names), as ``__main__`` (so a block's ``if __name__ == "__main__":`` body runs too), in a
temporary folder; blocks that read the shared data run in the integration tier, from the
repository root (their paths are relative to it)."""

import contextlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FILES = [ROOT / "README.md", ROOT / "datasets" / "README.md"]
SHARED_MARK = "../shared/datasets"


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """``(line, code)`` of every fenced ``python`` block (indented ones included)."""
    text = path.read_text(encoding="utf-8")
    blocks = []
    for match in re.finditer(r"^( *)```python\n(.*?)^\1```", text, re.S | re.M):
        indent = len(match.group(1))
        code = "\n".join(line[indent:] for line in match.group(2).splitlines())
        blocks.append((text[:match.start()].count("\n") + 1, code))
    return blocks


def run(blocks, path):
    namespace = {"__name__": "__main__"}
    with restored_registries():
        for line, code in blocks:
            exec(compile(code, f"{path.name}, block at line {line}", "exec"), namespace)


@contextlib.contextmanager
def restored_registries():
    """memlab's registries as they were: a README block registers a stage and a strategy (as a
    user would, once), and a registry refuses a name already registered, so another test
    registering the same example must not find it left over."""
    from memlab.surfacing.stages import STAGES
    from memlab.surfacing.strategies import STRATEGIES
    saved = [(registry, dict(registry)) for registry in (STAGES, STRATEGIES)]
    try:
        yield
    finally:
        for registry, entries in saved:
            registry.clear()
            registry.update(entries)


def test_the_readme_has_python_blocks():
    assert len(python_blocks(FILES[0])) >= 5


@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_python_blocks_run(path, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    run([b for b in python_blocks(path) if SHARED_MARK not in b[1]], path)


@pytest.mark.integration
@pytest.mark.parametrize("path", FILES, ids=lambda p: str(p.relative_to(ROOT)))
def test_shared_data_python_blocks_run(path, monkeypatch):
    blocks = [b for b in python_blocks(path) if SHARED_MARK in b[1]]
    if not blocks:
        pytest.skip(f"{path.name} has no block reading the shared data")
    if not (ROOT.parent / "shared" / "datasets" / "locomo").is_dir():
        pytest.skip("the shared datasets are not beside the checkout (../shared/datasets)")
    monkeypatch.chdir(ROOT)
    run(blocks, path)
