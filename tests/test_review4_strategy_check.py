"""Outside check of issue 15: a pipeline that cannot serve as a strategy is refused where it is
registered or put in a recipe, not when the first query reaches it."""

import json
import re

import pytest

from memlab.cli import main
from memlab.surfacing.config import DEFAULT
from memlab.surfacing.stages import bm25, budget, composite, mandatory, ppr, signals, spread
from memlab.surfacing.stages.scoring import composite_stage
from memlab.surfacing.strategies import STRATEGIES, register_strategy


@pytest.mark.parametrize("pipeline, fragment", [
    (bm25() >> signals() >> composite(), "lacks a stage of phase 'mandatory', 'select'"),
    (bm25() >> mandatory() >> signals() >> budget(), "lacks a stage of phase 'score'"),
    (bm25() >> mandatory() >> signals() >> composite() >> budget() >> bm25(),
     "runs bm25() (phase 'retrieve') after a later phase"),
])
def test_an_incomplete_or_disordered_pipeline_is_refused(pipeline, fragment):
    with pytest.raises(ValueError, match=re.escape(f"strategy 'partial' {fragment}")):
        register_strategy("partial", pipeline)
    assert "partial" not in STRATEGIES
    with pytest.raises(ValueError, match="the pipeline for 'deep:multi-hop'"):
        DEFAULT.replace(strategies={**dict(DEFAULT.strategies), "deep:multi-hop": pipeline})


def test_a_complete_pipeline_registers():
    register_strategy("whole", bm25() >> mandatory() >> signals() >> composite() >> budget())
    assert STRATEGIES.pop("whole").name == "whole"


def test_the_cli_names_the_recipe_in_one_line(tmp_path, capsys):
    recipe = DEFAULT.to_dict()
    recipe["strategies"]["deep:multi-hop"] = [{"stage": "bm25"}, {"stage": "signals"},
                                             {"stage": "composite"}, {"stage": "budget"}]
    path = tmp_path / "nomand.json"
    path.write_text(json.dumps(recipe))
    assert main(["replay", "fixture:apollo_demo", "--config", str(path), "--out",
                 str(tmp_path / "o")]) != 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "lacks a stage of phase 'mandatory'" in err[0], err


@pytest.mark.parametrize("make, fragment", [
    (lambda: ppr("bogus"), "ppr: config must be None or a PPRConfig, got 'bogus'"),
    (lambda: spread({"depth": 2}), "spread: config must be None or a SpreadConfig"),
    (lambda: composite_stage(0.5), "composite: weights must be None or a CompositeWeights"),
])
def test_a_stage_refuses_a_config_of_the_wrong_kind_when_built(make, fragment):
    with pytest.raises(ValueError, match=re.escape(fragment)):
        make()
