"""Review of issues 16/17 (notebooks, statistics, tuning): each test failed before its fix."""

import pytest

from memlab.cli import main
from memlab.datasets.synthetic import synthetic_trace

optuna = pytest.importorskip("optuna")


# 1. a holdout that is the searched trace (or shares questions with it) is refused
def test_tune_refuses_the_searched_trace_as_holdout(tmp_path, capsys):
    code = main(["tune", "synthetic:120:30", "--group-by", "question", "--folds", "2",
                 "--trials", "2", "--holdout", "synthetic:120:30", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("memlab tune: error: --holdout is the trace searched on")
    assert not (tmp_path / "tuned.json").exists()


def test_tune_api_refuses_overlapping_holdout_but_not_a_disjoint_one():
    from memlab.harness.trace import Trace
    from memlab.tuning import check_disjoint_holdout, tune
    dev = synthetic_trace(120, 30, seed=1)
    with pytest.raises(ValueError, match=r"^holdout is the trace searched on"):
        tune(dev, {"centrality_weight": (0.0, 2.0)}, folds=2, n_trials=1,
             group_by="question", holdout=dev)
    # the same questions under another header (a different hash) still overlap
    other = Trace(dev.events[:-1], name="copy")
    with pytest.raises(ValueError, match=r"^holdout shares \d+ questions with the trace"):
        check_disjoint_holdout(dev, other)
    # another seed: the same qids (q0, q1, ...) but other questions -> accepted
    check_disjoint_holdout(dev, synthetic_trace(120, 30, seed=2))


# 3. an unreachable Dask scheduler is one line in tune as in sweep
def test_tune_unreachable_dask_scheduler_is_one_line(tmp_path, capsys):
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code = main(["tune", "synthetic:60:12", "--group-by", "question", "--folds", "2",
                     "--trials", "2", "--space", "ppr.alpha=0.5,0.85", "--executor", "dask",
                     "--address", "tcp://127.0.0.1:9", "--out", str(tmp_path)])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("memlab tune: error: --address 'tcp://127.0.0.1:9': cannot reach "
                          "the Dask scheduler")
