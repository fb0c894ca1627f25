"""The ``memlab`` command: help for every subcommand, one-line errors and exit codes."""

import subprocess
import sys

import pytest

from memlab.cli import build_parser, main

SUBCOMMANDS = ["demo", "replay", "experiment", "sweep", "eval", "bench", "serve", "mcp"]


def run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "memlab", *args], capture_output=True,
                          text=True)


def test_top_level_help_lists_every_subcommand():
    out = run("--help")
    assert out.returncode == 0
    for name in SUBCOMMANDS:
        assert name in out.stdout


@pytest.mark.parametrize("name", SUBCOMMANDS)
def test_every_subcommand_explains_every_option(name, capsys):
    with pytest.raises(SystemExit) as code:
        main([name, "--help"])
    assert code.value.code == 0
    text = capsys.readouterr().out
    sub = build_parser()._subparsers._group_actions[0].choices[name]
    for action in sub._actions:
        if action.help == "==SUPPRESS==" or not action.option_strings and not action.dest:
            continue
        assert action.help, f"{name} {action.dest} has no help"
        for flag in action.option_strings:
            assert flag in text


@pytest.mark.parametrize("args, message", [
    (["replay", "missing.jsonl"], "memlab replay: error: trace 'missing.jsonl' is not a file"),
    (["replay", "fixture:apollo_demo", "--config", "turbo"], "memlab replay: error: --config "
                                                             "'turbo' is neither a recipe"),
    (["replay", "fixture:apollo_demo", "-k", "0"], "memlab replay: error: -k must be in 1..100"),
    (["replay", "fixture:apollo_demo", "--measures", "R@"], "memlab replay: error: --measures: "
                                                              "measure "),
    (["replay", "synthetic:ten:5"], "memlab replay: error: trace 'synthetic:ten:5' must look"),
    (["experiment", "fixture:apollo_demo", "--config", "oops"], "memlab experiment: error: "
                                                                "--config 'oops' must look like"),
    (["sweep", "fixture:apollo_demo", "--grid", "colour=1"], "memlab sweep: error: --grid "
                                                             "colour=1: unknown configuration "
                                                             "field"),
    (["sweep", "fixture:apollo_demo", "--grid", "nonsense"], "memlab sweep: error: --grid entry"),
    (["eval", "--data", "/nonexistent"], "memlab eval: error: --data '/nonexistent' has no"),
    (["demo", "-k", "500"], "memlab demo: error: -k must be in 1..100"),
    (["replay"], "memlab replay: error: the following arguments are required: trace"),
    (["frobnicate"], "memlab: error: argument command: invalid choice"),
])
def test_bad_input_gives_one_error_line_and_exit_code_2(args, message, tmp_path):
    out = run(*args, *(["--out", str(tmp_path)] if args[0] in ("replay", "experiment")
                       and len(args) > 1 else []))
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert lines[0].startswith(message), lines[0]


def test_replay_experiment_and_sweep_write_their_outputs(tmp_path):
    assert main(["replay", "fixture:apollo_demo", "--out", str(tmp_path / "r")]) == 0
    assert (tmp_path / "r" / "manifest.json").is_file()
    assert main(["experiment", "fixture:apollo_demo", "--config", "seed=seed_compat:legacy",
                 "--config", "memlab=default", "--measures", "R@5", "MRR",
                 "--out", str(tmp_path / "e")]) == 0
    assert (tmp_path / "e" / "experiment.csv").read_text().startswith("name,mode,recipe")
    assert main(["sweep", "fixture:apollo_demo", "--grid", "centrality_weight=0,1",
                 "--counterfactual", "--measures", "MRR", "--out", str(tmp_path / "s")]) == 0
    assert len((tmp_path / "s" / "sweep.csv").read_text().splitlines()) == 3
