"""Round 7 review fixes that are not in a branch's own test file."""
from __future__ import annotations

from dataclasses import replace

import pytest

from memlab.datasets.synthetic import synthetic_longmemeval
from memlab.harness.replay import replay
from memlab.surfacing.config import DEFAULT

UNTIMED = DEFAULT.replace(ppr=replace(DEFAULT.ppr, budget_ms=None),
                          spreading=replace(DEFAULT.spreading, budget_ms=None))


@pytest.mark.slow
def test_a_cluster_with_more_workers_than_asked_is_named_by_the_shards_it_ran():
    """replay(n_workers=2) on a 3-worker scheduler re-shards into 3; the manifest said "2"."""
    pytest.importorskip("distributed")
    from memlab.harness.replay import dask_address
    trace = synthetic_longmemeval(9, 3, seed=0)
    with dask_address("dask", None, 3) as address:
        sharded = replay(trace, UNTIMED, progress=False, executor="dask", address=address,
                         n_workers=2)
    assert sharded.manifest["executor"] == "dask (3 shards by workspace)"


def test_the_http_proc_client_sees_a_server_that_exited_as_gone_at_once():
    """An exited, unreaped server is a zombie: /proc/PID stays, so the client used to wait
    the whole ready timeout (120 s) for /health before saying why."""
    import importlib.util
    import os
    import subprocess
    import sys
    import time
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "concurrent_reads", Path(__file__).parents[1] / "benchmarks" / "concurrent_reads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    try:
        while Path(f"/proc/{child.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
            time.sleep(0.01)  # until it has exited (not yet waited for)
        assert Path(f"/proc/{child.pid}").exists()
        assert not module._running(child.pid)
        with pytest.raises(RuntimeError, match="exited before it answered"):
            module.http_clients("http://127.0.0.1:9", child.pid, "reads", 1, 1, 0, 10, 0,
                                ready_timeout=60.0)
    finally:
        child.wait()
    assert module._running(os.getpid())


def _concurrent_reads():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location(
        "concurrent_reads_r7", Path(__file__).parents[1] / "benchmarks" / "concurrent_reads.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("suffix", ["", "+group-commit", "+h11", "+bogus", "+group-comit"])
def test_a_tree_that_is_no_memlab_source_is_refused_not_measured(tmp_path, suffix, capsys):
    """PYTHONPATH=PATH with no memlab there imports the installed one: the run printed a table
    for another tree under this one's name."""
    from pathlib import Path
    bench = _concurrent_reads()
    here = str(Path(__file__).parents[1])
    for tree in (str(tmp_path / "nonexistent") + suffix, here + "+bogus", here + "+h1"):
        with pytest.raises(SystemExit) as exit_:
            bench.main(["--trees", tree, "--modes", "http-proc", "--rounds", "1"])
        assert exit_.value.code == 2
        assert "no memlab source tree there" in capsys.readouterr().err
    assert bench._tree_spec(here + "+group-commit")[:2] == (here, True)


def test_two_trees_with_one_name_are_refused(tmp_path, capsys):
    from pathlib import Path
    bench = _concurrent_reads()
    here = Path(__file__).parents[1]
    twin = tmp_path / here.name
    twin.mkdir()
    (twin / "memlab").symlink_to(here / "memlab")
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--trees", str(here), str(twin), "--modes", "threads", "--rounds", "1"])
    assert exit_.value.code == 2
    assert "two trees share a name" in capsys.readouterr().err


@pytest.mark.parametrize("content, message", [
    (None, "cannot read it"), ("not json", "not JSON"), ("[]", "non-empty list of runs"),
    ('{"a": 1}', "non-empty list of runs"),
    ('[{"tree": "t", "mix": "reads", "round": 0, "seconds": 1, "cpu_ms": {}, "ms": {}}]',
     "run 0 is not one this benchmark writes"),
    ('[{"tree": "t", "mode": "threads", "mix": "reads", "round": 0, "seconds": 1, '
     '"cpu_ms": {"process": 1}, "ms": {"get": {"p50": "1", "p99": 2, "n": 3}}}]',
     "run 0 is not one this benchmark writes"),
    ('[{"tree": "t", "mode": "http-proc", "mix": "reads", "round": 0, "seconds": 1, '
     '"cpu_ms": {"process": 1}, "ms": {"get": {"p50": 1, "p99": 2, "n": 3}}}]',
     "run 0 is not one this benchmark writes")])
def test_combine_refuses_what_is_not_a_saved_run_by_name(tmp_path, content, message, capsys):
    """--combine used to answer these with raw tracebacks (KeyError, IndexError, format)."""
    bench = _concurrent_reads()
    saved = tmp_path / "run.json"
    if content is not None:
        saved.write_text(content)
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--combine", str(saved)])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert f"--combine {str(saved)!r}: " in err and message in err


def test_combine_refuses_one_file_named_twice(tmp_path, capsys):
    """Its rounds counted twice ("ahead in 2 of 2" from a one-round file)."""
    bench = _concurrent_reads()
    saved = tmp_path / "run.json"
    saved.write_text('[{"tree": "t", "mode": "threads", "mix": "reads", "round": 0, '
                     '"seconds": 1, "cpu_ms": {"process": 1}, '
                     '"ms": {"get": {"p50": 1, "p99": 2, "n": 3}}}]')
    bench.main(["--combine", str(saved)])  # once: a table
    assert "1 runs from 1 file(s)" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        bench.main(["--combine", str(saved), str(tmp_path / "." / "run.json")])
    assert exit_.value.code == 2
    assert "named twice" in capsys.readouterr().err


def test_a_cached_embedder_encodes_no_texts_in_its_own_dimension(tmp_path):
    """get_embedder(...).encode([]) was (0, 0) where the bare model gives (0, dim)."""
    from memlab.signals.dense import EMBEDDERS, DenseConfig, get_embedder
    embedder = get_embedder(DenseConfig(embedder="hashing", cache_dir=str(tmp_path)))
    assert embedder.cache is not None
    assert embedder.encode([]).shape == EMBEDDERS["hashing"]().encode([]).shape == (0, 256)
    assert embedder.encode(["a b"]).shape == (1, 256)


def test_grid_booleans_are_read_as_python_spells_them_too():
    """`--grid second_hop_features=False` was refused while the error listed False as valid."""
    from memlab.cli import _grid
    assert _grid(["second_hop_features=False,TRUE,false,prf"]) == {
        "second_hop_features": [False, True, False, "prf"]}


def test_a_grid_value_its_recipes_ranker_cannot_read_is_blamed_on_the_grid(tmp_path, capsys):
    """It used to fail at the trace's first event ("event 0 (line 2, add): …")."""
    import json
    from pathlib import Path

    from memlab.cli import main
    ranker = Path(__file__).parents[1] / "memlab" / "recipes" / "dense-multihop.ranker.json"
    recipe = tmp_path / "prf.json"  # records prf, as its ranker reads (no dense extra needed)
    recipe.write_text(json.dumps(DEFAULT.replace(second_hop_features="prf",
                                                 reranker=str(ranker)).to_dict()))
    code = main(["tune", "fixture:locomo_sample", "--config", str(recipe), "--folds", "3",
                 "--group-by", "question", "--grid", "second_hop_features=false"])
    err = capsys.readouterr().err
    assert code == 2
    assert "--grid second_hop_features=false: config: its reranker" in err
    assert "event" not in err
