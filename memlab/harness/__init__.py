"""The research harness (SPEC §7): traces, replay into DataFrames, measures, experiments,
counterfactual re-scoring, sweeps, router analysis and plots."""

from memlab.harness.analysis import router_regret
from memlab.harness.counterfactual import rescore
from memlab.harness.experiment import Experiment, ExperimentResult, run_experiment
from memlab.harness.measures import DEFAULT_MEASURES, Measure, parse_measure
from memlab.harness.replay import ReplayError, ReplayResult, replay
from memlab.harness.sweep import SweepResult, sweep
from memlab.harness.trace import Event, Trace, TraceBuilder, TraceFormatError

__all__ = ["Trace", "TraceBuilder", "Event", "TraceFormatError", "replay", "ReplayResult",
           "ReplayError", "Measure", "parse_measure", "DEFAULT_MEASURES", "Experiment",
           "ExperimentResult", "run_experiment", "rescore", "sweep", "SweepResult", "router_regret"]
