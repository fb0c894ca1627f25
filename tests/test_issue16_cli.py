"""Issue 16 at the command line: intervals for every number, per-subset tables, paired
comparisons with the correction named, small-n warnings on stderr, output within 100 columns."""

import re

import pytest

from memlab.cli import main


def widest(text: str) -> int:
    """The widest line, paths aside (the closing "wrote <tmp path>" line is as long as the
    temporary folder's name)."""
    return max(len(line) for line in text.splitlines() if not line.startswith("wrote "))




def test_eval_prints_intervals_and_per_category_tables_within_100_columns(data_root, tmp_path,
                                                                           capsys):
    from memlab.evaluation import run_eval
    assert main(["eval", "--data", str(data_root), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr().out
    assert widest(out) <= 100
    table = run_eval(data_root, by="category")
    # every number printed with its interval; the point estimates are the table's
    row = table.set_index(["dataset", "subset", "config"]).loc[
        ("locomo", "categories 1-4", "memlab DEFAULT")]
    expected = f"{row['R@2']:.1f} [{row['R@2 ci_low']:.1f}, {row['R@2 ci_high']:.1f}]"
    assert expected in out
    cells = re.findall(r"\| (\d+\.\d) \[(\d+\.\d), (\d+\.\d)\]", out)
    assert cells and all(float(lo) <= float(v) <= float(hi) for v, lo, hi in cells)
    # one block per LoCoMo category present in the data
    categories = sorted(table.loc[table["subset"].str.startswith("category="), "subset"].unique())
    assert categories and all(f"locomo, {c} (" in out for c in categories)
    assert "musique, category=" not in out  # MuSiQue's questions carry no category
    written = (tmp_path / "out" / "results.md").read_text()
    assert "| dataset | subset | config |" in written and expected in written
    # marks against BM25 (Porter), named with the test and correction; LaTeX as well
    assert "paired Wilcoxon signed-rank against BM25 (Porter), Holm–Bonferroni" in \
        " ".join(out.split())
    assert set(table["R@2 mark"]) <= {"", "*", "**", "***", "†", "*†", "**†", "***†"}
    assert (table.loc[table["config"] == "BM25 (Porter)", "R@2 mark"] == "").all()
    assert "†" in out  # a handful of fixture questions: too few for Wilcoxon
    latex = (tmp_path / "out" / "results.tex").read_text()
    assert latex.count("\\begin{table}") == table.groupby(["dataset", "subset"]).ngroups


def test_eval_point_estimates_do_not_move_with_intervals(data_root):
    from memlab.evaluation import run_eval
    plain = run_eval(data_root)
    with_subsets = run_eval(data_root, by="category")
    main_rows = with_subsets[~with_subsets["subset"].str.startswith("category=")]
    columns = ["dataset", "subset", "config", "R@2", "R@5", "R@10", "MRR", "queries"]
    assert main_rows[columns].reset_index(drop=True).equals(plain[columns])


def test_eval_where_filters_and_names_bad_metadata(data_root, tmp_path, capsys):
    code = main(["eval", "--data", str(data_root), "--out", str(tmp_path / "o"), "--where",
                 "colour=red"])
    err = capsys.readouterr().err
    assert code == 2 and "--where names unknown query metadata 'colour'" in err
    assert len(err.strip().splitlines()) == 1


def test_experiment_cli_subsets_comparisons_and_small_n_warning(tmp_path, capsys):
    code = main(["experiment", "fixture:locomo_sample", "--config", "a=DEFAULT", "--config",
                 "b=BM25", "--by", "category", "--correction", "bh", "--out",
                 str(tmp_path / "ex")])
    captured = capsys.readouterr()
    assert code == 0 and widest(captured.out) <= 100
    assert "| name | vs | measure | n | delta [CI] | d_z | p | p (bh) |" in captured.out
    assert "Benjamini–Hochberg" in " ".join(captured.out.split())
    assert "category=" in captured.out
    # n is far too small for Wilcoxon: marked in the table and warned on stderr
    assert "†" in captured.out
    assert "warning: b vs a on R@2: Wilcoxon signed-rank needs >= 6 non-zero differences" \
        in captured.err
    for name in ("experiment.csv", "comparisons.csv", "subsets.csv", "experiment.md",
                 "experiment.tex"):
        assert (tmp_path / "ex" / name).is_file(), name


def test_sweep_cli_reference_point_and_wide(tmp_path, capsys):
    assert main(["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,1",
                 "--counterfactual", "--reference", "1", "--out", str(tmp_path / "sw")]) == 0
    out = capsys.readouterr().out
    assert widest(out) <= 100
    assert "| 0 (centrality_weight=0.0) | 1 (centrality_weight=1.0) | R@2 |" in out
    assert main(["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,1",
                 "--counterfactual", "--reference", "7", "--out", str(tmp_path / "sw")]) == 2
    assert "--reference 7 is not a point (0..1)" in capsys.readouterr().err
    assert main(["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,1",
                 "--counterfactual", "--wide", "--out", str(tmp_path / "sw")]) == 0
    assert "R@2 ci_low" in capsys.readouterr().out  # every column, one table


def test_api_a_user_can_guess():
    import memlab
    from memlab import BM25_ONLY, hybrid_recipe
    from memlab.harness import Experiment, run_experiment
    assert BM25_ONLY.name == "bm25" and callable(hybrid_recipe)
    assert Experiment is run_experiment and "factory" in run_experiment.__doc__
    assert {"BM25_ONLY", "hybrid_recipe"} <= set(memlab.__all__)


def test_unreachable_dask_scheduler_is_one_line(tmp_path, capsys):
    dask = pytest.importorskip("dask")
    pytest.importorskip("distributed")
    with dask.config.set({"distributed.comm.timeouts.connect": "1s"}):
        code = main(["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,1",
                     "--executor", "dask", "--address", "tcp://127.0.0.1:9", "--out",
                     str(tmp_path / "sw")])
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1
    assert err.startswith("memlab sweep: error: --address 'tcp://127.0.0.1:9': cannot reach "
                          "the Dask scheduler")
