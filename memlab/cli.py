"""The ``memlab`` command: ``demo``, ``replay``, ``experiment``, ``sweep``, ``tune``, ``eval``,
``bench``, ``serve``, ``mcp``, and ``check`` and ``recover`` for a durable store's file.

Every subcommand drives the library as a user would. Bad input ends with one line on stderr,
``memlab <command>: error: <what>``, and exit code 2.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import textwrap
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser"]

_TRACE_HELP = ("a trace: a JSON Lines file (see memlab.harness.trace), or fixture:<name> for a "
               "repository fixture such as fixture:apollo_demo, or synthetic:<items>:<queries> "
               "for a seeded synthetic trace, or shared:locomo / shared:musique for the shared "
               "datasets (see memlab eval --data)")
_CONFIG_HELP = ("a recipe name (default, seed_compat, bm25; the shipped recipe files "
                "multihop, conversational, dense, dense-conversational, dense-multihop; or "
                "NAME.json in $MEMLAB_RECIPE_PATH) or a JSON file holding "
                "SurfacingConfig.to_dict() output")


def _file_bytes(db: str) -> int:
    """A SQLite database's bytes on disk: the file and its write-ahead log."""
    return sum(p.stat().st_size for p in (Path(db), Path(f"{db}-wal")) if p.is_file())


class _Fail(Exception):
    """A user error: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``memlab <command>: error: …``), exit code 2."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message}\n")


def _load_trace(spec: str, option: str = "trace"):
    """A trace: a JSON Lines file, ``fixture:<name>``, ``synthetic:<items>:<queries>``, or
    ``shared:locomo`` / ``shared:musique`` from the shared datasets (one resolver for every
    command); errors name ``option``."""
    from memlab.harness.trace import Trace

    if spec.startswith("shared:"):
        return _shared_trace(spec, option)
    if spec.startswith("fixture:"):
        from memlab.datasets import load_fixture_trace
        try:
            return load_fixture_trace(spec.split(":", 1)[1])
        except ValueError as exc:
            raise _Fail(f"{option} {spec!r}: {exc}") from None
    if spec.startswith("synthetic:"):
        from memlab.datasets.synthetic import synthetic_trace
        parts = spec.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            items, queries = int(parts[1]), int(parts[2])
        except ValueError:
            raise _Fail(f"{option} {spec!r} must look like synthetic:<items>:<queries>") from None
        try:
            return synthetic_trace(items, queries, seed=0)
        except ValueError as exc:
            raise _Fail(f"{option} {spec!r}: {exc}") from None
    path = Path(spec)
    if not path.is_file():
        raise _Fail(f"{option} {spec!r} is not a file (nor fixture:<name> / synthetic:<n>:<q> / "
                    f"shared:locomo / shared:musique)")
    try:
        return Trace.read_jsonl(path)
    except ValueError as exc:
        raise _Fail(f"{option} {spec!r}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _Fail(f"{option} {spec!r} cannot be read: {exc}") from None


def _load_traces(specs: list[str]):
    """One trace, or several (in the order given) joined into one: the events of each after
    the previous one's, under the first one's header. They must share a workspace."""
    from memlab.harness.trace import Trace

    traces = [_load_trace(spec) for spec in specs]
    if len(traces) == 1:
        return traces[0]
    first = traces[0]
    for spec, trace in zip(specs[1:], traces[1:]):
        if trace.workspace_id != first.workspace_id:
            raise _Fail(f"trace {spec!r} is of workspace {trace.workspace_id!r}, but "
                        f"{specs[0]!r} is of {first.workspace_id!r}: traces replayed as one "
                        f"must share a workspace")
    try:
        return Trace([e for t in traces for e in t.events], name=first.name, start=first.start,
                     workspace_id=first.workspace_id, metadata=dict(first.metadata))
    except ValueError as exc:
        raise _Fail(f"traces {specs} replayed as one: {exc} (give them oldest first)") from None


def _load_config(spec: str, option: str = "--config"):
    """The configuration ``spec`` names (a recipe, a recipe file, a JSON file); every error
    names the flag it was given with (``option``), as the user typed it."""
    from memlab.surfacing.config import RECIPES, SurfacingConfig

    if spec in RECIPES:
        return RECIPES[spec]
    path = Path(spec)
    if path.suffix == ".json" and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise _Fail(f"{option} {spec!r} is not valid JSON: {exc.msg} at line "
                        f"{exc.lineno}") from None
        except RecursionError:
            raise _Fail(f"{option} {spec!r} is not a valid configuration: its JSON is nested "
                        f"too deeply") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise _Fail(f"{option} {spec!r} cannot be read: {exc}") from None
        if not isinstance(data, dict):
            raise _Fail(f"{option} {spec!r} must hold a JSON object (SurfacingConfig.to_dict() "
                        f"output), got a JSON {_json_kind(data)}")
        if "format" in data:  # a recipe file (memlab tune writes them)
            from memlab.surfacing.config import load_recipe_file
            try:
                return load_recipe_file(path)
            except ValueError as exc:
                raise _Fail(f"{option} {spec!r}: {exc}") from None
        try:
            config = SurfacingConfig.from_dict(data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _Fail(f"{option} {spec!r} is not a valid configuration: "
                        f"{exc if isinstance(exc, ValueError) else repr(exc)}") from None
        from memlab.surfacing.config import check_reranker_file
        try:
            check_reranker_file(config, f"{option} {spec!r}")
        except ValueError as exc:
            raise _Fail(str(exc)) from None
        return config
    from memlab.errors import UnknownRecipeError
    from memlab.surfacing.config import get_recipe
    try:  # a recipe file by name, in $MEMLAB_RECIPE_PATH or memlab/recipes
        return get_recipe(spec)
    except UnknownRecipeError:
        pass
    except ValueError as exc:  # the file exists but is bad: show why
        raise _Fail(f"{option} {spec!r}: {exc}") from None
    from memlab.surfacing.config import shipped_recipes
    raise _Fail(f"{option} {spec!r} is neither a recipe ({', '.join(sorted(RECIPES))}; shipped "
                f"recipe files: {', '.join(shipped_recipes())}; or a recipe file's name in "
                f"$MEMLAB_RECIPE_PATH) nor a JSON file")


def _named(exc: Exception, **options: Any) -> _Fail:
    """``exc`` as a CLI failure whose message names each file by the argument it was given
    with (``db``, ``--db``, ``--out``) instead of the library's parameter name (``path
    'x.db'``): ``_named(exc, db=args.db)``; keyword ``dash_db`` stands for ``--db``."""
    message = str(exc)
    for name, value in options.items():
        if value is None:
            continue
        flag = "--" + name[len("dash_"):] if name.startswith("dash_") else name
        for word in ("path", "out"):  # not inside a flag already named (no "----out")
            message = re.sub(rf"(?<![\w-]){word} {re.escape(repr(str(value)))}",
                             lambda _: f"{flag} {str(value)!r}", message)
    return _Fail(message)


def _json_kind(value: Any) -> str:
    return {list: "array", str: "string", bool: "boolean", int: "number", float: "number",
            type(None): "null"}.get(type(value), type(value).__name__)


def _writable_folder(option: str, folder: str, *, keep: bool = False) -> None:
    """Fail now, before any work, unless ``folder`` is (or can be made) a writable folder.

    Folders made for the check are removed again unless ``keep``: a failed command leaves
    nothing behind, and the command's own write makes them (``--out``). ``keep`` is for writers
    that expect the folder to exist (``--record``, ``--json``)."""
    if not folder.strip():
        raise _Fail(f"{option} must name a folder, got {folder!r}")
    path = Path(folder)
    if path.exists() and not path.is_dir():
        raise _Fail(f"{option} {folder!r} is not a writable folder (it is a file)")
    missing = []  # the folders this check makes, innermost first
    parent = path
    while not parent.exists() and parent != parent.parent:
        missing.append(parent)
        parent = parent.parent
    try:
        path.mkdir(parents=True, exist_ok=True)
        handle, probe = tempfile.mkstemp(dir=path, prefix=".memlab-write-check-")
        os.close(handle)
        os.unlink(probe)
    except OSError as exc:
        raise _Fail(f"{option} {folder!r} is not a writable folder "
                    f"({exc.strerror or type(exc).__name__})") from None
    finally:
        for made in [] if keep else missing:
            try:
                made.rmdir()
            except OSError:  # not made here after all, or something else wrote into it
                break


def _writable_file(option: str, file: str) -> None:
    """Fail now unless ``file`` can be written (its folder is writable, it is not a folder)."""
    if not file.strip():
        raise _Fail(f"{option} must name a file, got {file!r}")
    path = Path(file)
    if path.is_dir():
        raise _Fail(f"{option} {file!r} is a folder, not a file")
    _writable_folder(f"{option} {file!r}: its folder", str(path.parent), keep=True)


def _grid(pairs: list[str]) -> dict[str, list[Any]]:
    grid: dict[str, list[Any]] = {}
    for pair in pairs:
        key, _, values = pair.partition("=")
        key = key.strip()
        if not _ or not key or not values.strip():
            raise _Fail(f"--grid entry {pair!r} must look like field=v1,v2,...")
        if key in grid:
            raise _Fail(f"--grid entry {pair!r} repeats the field {key!r}")
        parsed = []
        for value in values.split(","):
            if not value.strip():
                raise _Fail(f"--grid entry {pair!r} has an empty value")
            if value.strip().lower() in ("true", "false"):  # True/FALSE too, as Python says
                parsed.append(value.strip().lower() == "true")
                continue
            try:
                parsed.append(json.loads(value))
            except json.JSONDecodeError:
                parsed.append(value)
            except RecursionError:
                raise _Fail(f"--grid entry {pair!r}: a value is nested too deeply") from None
        grid[key] = parsed
    return grid


def _check_grid(grid: dict[str, list[Any]], base, entries: list[str]) -> None:
    """Every ``--grid`` value applied to the base now, so a bad one fails before any replay,
    named as the user wrote it (``--grid centrality_weight=a,b: …``)."""
    import warnings

    from memlab.harness.sweep import apply_point
    from memlab.surfacing.config import SurfacingConfig, check_reranker_file
    raw = {e.partition("=")[0].strip(): e for e in entries}
    for key, values in grid.items():
        for value in values:
            try:
                config = apply_point(base, {key: value})
                if isinstance(config, SurfacingConfig):  # its ranker must read what it records
                    with warnings.catch_warnings():  # unread groups warn again at the replay
                        warnings.simplefilter("ignore")
                        check_reranker_file(config, "config")
            except (ValueError, TypeError) as exc:
                raise _Fail(f"--grid {raw.get(key, key)}: {exc}") from None


def _measures(names: list[str] | None) -> list[str] | None:
    """``--measures``, parsed now (before any work) so a bad name fails first."""
    if names is None:
        return None
    from memlab.harness.measures import parse_measures
    try:
        parse_measures(names)
    except ValueError as exc:
        raise _Fail(f"--measures: {exc}") from None
    return names


def _executor_options(parser, executor_help: str) -> None:
    """``--executor``, ``--address`` and ``--workers``, as sweep and tune take them."""
    parser.add_argument("--executor", default="serial", choices=["serial", "local", "dask"],
                        help=executor_help)
    parser.add_argument("--address", default=None,
                        help="a Dask scheduler address (dask executor)")
    parser.add_argument("--workers", type=int, default=None, help="processes (local) or "
                        "Dask workers of a LocalCluster (dask without --address); default: 2")


def _dask_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--executor serial|dask``, ``--address`` and ``--workers``, as replay and experiment
    take them (``--workers`` only for a LocalCluster this command starts)."""
    parser.add_argument("--executor", default="serial", choices=["serial", "dask"],
                        help=f"where {what}: this process, or sharded by workspace over Dask "
                        "(a LocalCluster of --workers processes, or the scheduler at "
                        "--address); the frames are the serial ones (default: serial)")
    parser.add_argument("--address", default=None, metavar="HOST:PORT",
                        help="a running Dask scheduler (dask executor; one shard per worker "
                        "it has)")
    parser.add_argument("--workers", type=int, default=None, help="workers of the "
                        "LocalCluster the dask executor starts (default: 2)")


@contextlib.contextmanager
def _scheduler_reached(args: argparse.Namespace):
    """A Dask scheduler that cannot be reached, as one line naming --address."""
    try:
        yield
    except OSError as exc:
        if args.executor != "dask":
            raise
        raise _Fail(f"--address {args.address!r}: cannot reach the Dask scheduler "
                    f"({' '.join(str(exc).split())})") from None


@contextlib.contextmanager
def _config_needs(config: Any):
    """A configuration whose parts need a missing extra (the dense recipe's ONNX embedder), as
    one line naming --config; the Dask extra's own message is left as it is."""
    try:
        yield
    except ImportError as exc:
        if "executor=" in str(exc):
            raise
        shown = config if isinstance(config, str) else " ".join(config)
        raise _Fail(f"--config {shown!r}: {exc}") from None


def _replay_options(parser: argparse.ArgumentParser) -> None:
    """-k and --measures, shared by the subcommands that replay traces."""
    parser.add_argument("-k", type=int, default=20, help="items per context when a query does "
                        "not say, 1..100 (default: 20)")
    parser.add_argument("--measures", nargs="+", default=None, metavar="MEASURE",
                        help="measures such as R@5 nDCG@10 MRR Hit@5 P@5 Tokens Latency "
                        "(default: R@2 R@5 R@10 MRR nDCG@10)")
    _measure_on_option(parser)


def _measure_on_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--measure-on", default="retrieved", choices=["retrieved", "surfaced"],
                        help="the ranking relevance measures read: 'retrieved' leaves the "
                        "session's anchors and pins out, 'surfaced' scores every surfaced item "
                        "(default: retrieved)")


def _measure_on_line(measure_on: str) -> str:
    """The sentence every command that prints measures ends with."""
    if measure_on == "retrieved":
        return ("measures read the retrieved ranking: surfaced items without the session's "
                "anchors and pins (--measure-on retrieved)")
    return ("measures read every surfaced item, anchors and pins included "
            "(--measure-on surfaced)")


def _study_options(parser: argparse.ArgumentParser, *, by_default: str | None = None) -> None:
    """--where, --by and --wide, shared by experiment, sweep and eval (issue 16)."""
    parser.add_argument("--where", action="append", default=[], metavar="FIELD=V1,V2",
                        help="keep only queries whose metadata match, repeatable: category, "
                        "session_id, workspace_id or dataset (e.g. category=1,2); it filters "
                        "the scoring, the whole trace is still replayed (and, with --dense, "
                        "encoded)")
    parser.add_argument("--by", default=by_default, metavar="FIELD",
                        help="also report one table per value of this query metadata, e.g. "
                        f"category (default: {by_default or 'none'})")
    parser.add_argument("--wide", action="store_true", help="print every column in one table "
                        "(default: tables split to fit 100 columns)")


def _stats_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--correction", default="holm", choices=["holm", "bh", "none"],
                        help="multiple-comparison correction across the table's comparisons: "
                        "Holm-Bonferroni, Benjamini-Hochberg, or none (default: holm)")
    parser.add_argument("--test", default="wilcoxon", choices=["wilcoxon", "ttest"],
                        help="the paired test (default: wilcoxon)")


def _where(entries: list[str]) -> dict[str, list[Any]] | None:
    """``--where FIELD=V1,V2`` entries as a filter (numbers parsed as numbers)."""
    if not entries:
        return None
    where: dict[str, list[Any]] = {}
    for entry in entries:
        key, eq, values = entry.partition("=")
        if not eq or not key.strip() or not values:
            raise _Fail(f"--where {entry!r} must look like FIELD=V1,V2 (e.g. category=1,2)")
        parsed = []
        for value in values.split(","):
            try:
                parsed.append(int(value))
            except ValueError:
                parsed.append(value)
        where.setdefault(key.strip(), []).extend(parsed)
    return where


def _recipe_spec(spec: str) -> str:
    """Recipe names case-insensitively (``DEFAULT``, ``BM25``); anything else unchanged."""
    from memlab.surfacing.config import RECIPES
    return spec.lower() if spec.lower() in RECIPES and not Path(spec).exists() else spec


def _print_blocks(frame, keep: list[str], wide: bool) -> None:
    from memlab.evaluation import fit_width
    from memlab.harness.stats import format_table_markdown
    for part in fit_width(frame, keep, None if wide else 100):
        print(format_table_markdown(part))


def _subset_cells(group, measures: list[str], key: str):
    """One subset's rows as text cells: key, n, mean [95% CI] per measure."""
    import pandas as pd

    from memlab.harness.stats import interval_text
    counts = group["n"] if "n" in group else group["queries"]
    cells = pd.DataFrame({key: group[key].to_numpy(), "n": counts.to_numpy()})
    for m in measures:
        cells[m] = [interval_text(v, lo, hi) for v, lo, hi in
                    zip(group[m], group[f"{m} ci_low"], group[f"{m} ci_high"])]
    return cells


_SHOWN_WARNINGS = ("SmallSampleWarning", "InSampleWarning", "MemlabDeprecationWarning")


def _print_warnings(caught) -> None:
    """Small-sample warnings, one line each on stderr (the table marks them with †), and
    memlab's own deprecations, each once (see :func:`_deprecation_line`)."""
    said: set[str] = set()
    for item in caught:
        if item.category.__name__ == "MemlabDeprecationWarning":
            line = _deprecation_line(item.message)
            if line not in said:
                said.add(line)
                print(line, file=sys.stderr)
            continue
        if item.category.__name__ == "InSampleWarning":  # the honest label: whole, one line
            print("warning: " + " ".join(str(item.message).split()), file=sys.stderr)
            continue
        print(textwrap.shorten(f"warning: {item.message}", 100), file=sys.stderr)


def _deprecation_line(message: Any) -> str:
    """One line for a memlab deprecation warning (no source line, no traceback)."""
    return "memlab: deprecated: " + " ".join(str(message).split())


def _show_deprecations(show):
    """A ``warnings.showwarning`` that prints memlab's deprecations as one line on stderr and
    hands every other warning to ``show`` (Python's own)."""
    from memlab.errors import MemlabDeprecationWarning

    def showwarning(message, category, filename, lineno, file=None, line=None) -> None:
        if issubclass(category, MemlabDeprecationWarning):
            print(_deprecation_line(message), file=sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memlab", description="memlab: research and run memory surfacing for LLM agents. "
        "Replay traces, compare configurations with significance tests, sweep parameters, "
        "evaluate on public data and benchmark.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command",
                                parser_class=_Parser)
    parser.set_defaults(_commands=sub.choices)  # main names the command in a stray-argument error

    demo = sub.add_parser("demo", help="the main job on the built-in data", description=(
        "Replay the Apollo fixture's trace under the seed's behaviour (SEED_COMPAT, legacy and "
        "router mode) and memlab's DEFAULT recipe; print the experiment table; save the results "
        "(Parquet), experiment.csv and score_breakdown.png."))
    demo.add_argument("--out", default="out/demo", help="output folder (default: out/demo)")
    demo.add_argument("-k", type=int, default=10, help="items per context, 1..100 (default: 10)")
    _measure_on_option(demo)

    rp = sub.add_parser("replay", help="replay a trace into DataFrames", description=(
        "Replay a trace under one configuration; print the mean of each measure and save the "
        "decisions, candidates, metrics and log frames (Parquet) with their manifest."))
    rp.add_argument("trace", nargs="+", help=_TRACE_HELP + "; several traces replay in order "
                    "as one (e.g. the rotated files of `serve --record`, oldest first: "
                    "trace.jsonl.5 ... trace.jsonl.1 trace.jsonl)")
    rp.add_argument("--config", default="default", help=_CONFIG_HELP + " (default: default)")
    rp.add_argument("--mode", default="router", choices=["router", "legacy"],
                    help="surfacing mode (default: router)")
    _replay_options(rp)
    rp.add_argument("--out", default="out/replay", help="folder for the saved result "
                    "(default: out/replay)")
    rp.add_argument("--seed", type=int, default=0, help="seed of decision ids (default: 0)")
    _dask_options(rp, "the trace replays")

    ex = sub.add_parser("experiment", help="compare configurations on one trace", description=(
        "Replay a trace under several configurations and print one row per configuration: "
        "means with bootstrap 95% intervals, then paired comparisons against the baseline "
        "(effect with its paired-bootstrap interval, p-values corrected across the table)."))
    ex.add_argument("trace", help=_TRACE_HELP)
    ex.add_argument("--config", action="append", required=True, metavar="NAME=CONFIG[:MODE]",
                    help="a configuration to compare, repeatable: a name, '=', a recipe or JSON "
                    "file, and optionally ':legacy' or ':router' (e.g. seed=seed_compat:legacy)")
    ex.add_argument("--baseline", default=None, help="the name the others are tested against "
                    "(default: the first)")
    _replay_options(ex)
    _stats_options(ex)
    _study_options(ex)
    _dask_options(ex, "every configuration's replay runs")
    ex.add_argument("--out", default="out/experiment", help="folder for experiment.csv and "
                    "per_query.csv (default: out/experiment)")

    sw = sub.add_parser("sweep", help="sweep configuration fields over a grid", description=(
        "Replay a trace at every point of a grid of configuration fields; print one row per "
        "point with the measures' means and bootstrap intervals."))
    sw.add_argument("trace", help=_TRACE_HELP)
    sw.add_argument("--grid", nargs="+", required=True, metavar="FIELD=V1,V2",
                    help="fields and values, e.g. centrality_weight=0,0.5,1 ppr.alpha=0.5,0.85 "
                    "(values are parsed as JSON where they can be)")
    sw.add_argument("--config", default="default", help="the base: " + _CONFIG_HELP)
    _executor_options(sw, "where points run: this process, a process pool, or Dask (a "
                      "LocalCluster, or --address) (default: serial)")
    sw.add_argument("--counterfactual", action="store_true", help="replay once and re-score the "
                    "recorded candidates per point (composite weights only)")
    sw.add_argument("--reference", default="best", help="the point the others are compared "
                    "with, paired: 'best' (per measure) or a point number (default: best)")
    _replay_options(sw)
    _stats_options(sw)
    _study_options(sw)
    sw.add_argument("--out", default="out/sweep", help="folder for sweep.csv (default: "
                    "out/sweep)")

    tn = sub.add_parser("tune", help="choose configuration fields by grouped cross-validation",
                        description=(
        "Search configuration fields with Optuna (TPE, seeded) against one measure, with k-fold "
        "cross-validation grouped by workspace or question: each fold's choice is searched on "
        "the other folds and scored once on it. Composite weights are re-scored on one replay's "
        "candidates; other fields replay. Writes the chosen configuration as a recipe file, the "
        "CV estimate, per-fold scores, the trial history and plots."))
    tn.add_argument("trace", help=_TRACE_HELP)
    tn.add_argument("--space", nargs="+", default=None, metavar="FIELD=LOW:HIGH|V1,V2",
                    help="fields to search: a range (centrality_weight=0:2) or choices "
                    "(ppr.alpha=0.5,0.85); router_rules=permutations searches every rule order "
                    "(default: activation_floor=0:1 centrality_weight=0:2 freshness_weight=0:1)")
    tn.add_argument("--config", default="default", help="the base: " + _CONFIG_HELP)
    tn.add_argument("--compare", default=None, metavar="RECIPE", help="the recipe the tuned "
                    "procedure is paired with on the same folds (default: the base; e.g. "
                    "--config <a dense recipe> --compare default judges a dense search against "
                    "the recipe without dense)")
    tn.add_argument("--measure", default="R@10", help="the relevance measure to maximise "
                    "(default: R@10)")
    tn.add_argument("--folds", type=int, default=5, help="cross-validation folds (default: 5)")
    tn.add_argument("--trials", type=int, default=100, help="trials per search (default: 100)")
    tn.add_argument("--group-by", default="workspace", choices=["workspace", "question"],
                    help="what a fold never splits (default: workspace)")
    tn.add_argument("--categories", nargs="+", default=None, metavar="CATEGORY",
                    help="only questions of these categories (e.g. 1 2 3 4 for LoCoMo)")
    tn.add_argument("--seed", type=int, default=0, help="seeds folds, TPE and intervals "
                    "(default: 0)")
    tn.add_argument("-k", type=int, default=20, help="items per context, 1..100 (default: 20)")
    _executor_options(tn, "where replays run (fields other than composite weights) "
                      "(default: serial)")
    tn.add_argument("--holdout", default=None, metavar="FILE", help="a separate trace scored "
                    "once with the chosen configuration (never searched on)")
    tn.add_argument("--name", default="tuned", help="the recipe's name and file name "
                    "(default: tuned)")
    tn.add_argument("--reuse-replays", action="store_true", help="replay each configuration's "
                    "questions once and reuse the values when the search proposes it again (no "
                    "number changes; pays for spaces of choices)")
    tn.add_argument("--no-progress", action="store_true", help="no progress bar")
    _measure_on_option(tn)
    tn.add_argument("--out", default="out/tune", help="folder for <name>.json (the recipe), "
                    "cv.csv, folds.csv, trials.csv, held_out.csv, importance.csv and plots/ "
                    "(default: out/tune)")
    choose = tn.add_argument_group(
        "choosing a recipe (nested CV)",
        "With --rankers or --grid, tune chooses among fixed candidates instead of searching: "
        "the base and every --grid point, each alone or followed by each --rankers model "
        "(trained on its replay frames). The choice is made by an inner grouped CV on each "
        "outer fold's other folds and scored on that fold (nested, so the estimate is "
        "honest); the shipped recipe is the same choice made on every question, its ranker "
        "trained on every question and written beside it as <name>.ranker.json.")
    choose.add_argument("--rankers", nargs="+", default=None, metavar="KIND[:P=V,...]",
                        help="none, logistic, lambdarank, with optional parameters "
                        "(logistic:C=0.1, lambdarank:num_leaves=7,n_estimators=100)")
    choose.add_argument("--grid", nargs="+", default=None, metavar="FIELD=V1,V2",
                        help="option values to choose among (their cross product); "
                        "strategies.<strategy>=impl,... chooses a strategy's pipeline")
    choose.add_argument("--also", nargs="+", default=[], metavar="MEASURE",
                        help="further relevance measures to report (the choice maximises "
                        "--measure)")
    choose.add_argument("--no-graph-budgets", action="store_true",
                        help="replay with the graph stages' wall-clock budgets off, so that "
                        "the run reproduces under load (the recipe written keeps the base's)")

    ev = sub.add_parser("eval", help="quality on the shared public datasets", description=(
        "Replay LoCoMo and HippoRAG's MuSiQue under memlab's DEFAULT recipe, its no-graph "
        "ablation and BM25 baselines; print every number with its 95% interval (and one table "
        "per LoCoMo category); write one results table."))
    ev.add_argument("--data", default=None, help="folder holding locomo/ and hipporag/ as in "
                    "the shared datasets' README (default: $MEMLAB_SHARED_DATA, else "
                    "../shared/datasets beside the repository)")
    ev.add_argument("--out", default="out/eval", help="folder for results.csv and results.md "
                    "(default: out/eval)")
    ev.add_argument("-k", type=int, default=20, help="items per context, 1..100 (default: 20)")
    ev.add_argument("--dense", action="store_true", help="also run DEFAULT with hybrid dense "
                    "relevance (needs the 'dense' extra)")
    ev.add_argument("--embedder", default=None, metavar="NAME", help="the dense rows' embedder, "
                    "a registered name: minilm (torch), minilm-onnx, minilm-onnx-int8, "
                    "minilm-openvino, minilm-openvino-int8, minilm-onnx-int8-sq, minilm-static, "
                    "hashing (implies "
                    "--dense; default: $MEMLAB_EMBEDDER, else minilm)")
    ev.add_argument("--datasets", nargs="+", default=["musique", "locomo"],
                    choices=["musique", "locomo"], help="which datasets (default: both)")
    _measure_on_option(ev)
    _study_options(ev, by_default="category")
    ev.add_argument("--executor", default="serial", choices=["serial", "dask"],
                    help="where replays run: this process, or sharded by workspace over Dask "
                    "(LoCoMo's conversations; a LocalCluster unless --address)")
    ev.add_argument("--address", default=None, help="a Dask scheduler address (dask executor)")
    ev.add_argument("--workers", type=int, default=None, help="Dask workers of the "
                    "LocalCluster (--executor dask without --address; default: 2)")

    serve = sub.add_parser("serve", help="the HTTP service", description=(
        "Serve memlab over HTTP (FastAPI on uvicorn; the 'service' extra). Every route but "
        "/health takes the API key when one is set; the OpenAPI schema is at /docs and "
        "/openapi.json. With --db, the store compacts its journal into a snapshot by itself "
        "(in the background, writes go on) once --compact-after rows (default 100,000) follow "
        "its latest snapshot; memlab compact does it by hand."))
    serve.add_argument("--host", default="127.0.0.1", help="interface (default: 127.0.0.1)")
    serve.add_argument("--port", type=int, default=8765, help="port (default: 8765)")
    serve.add_argument("--db", default=os.environ.get("MEMLAB_DB"), help="SQLite file of a "
                       "durable store (default: $MEMLAB_DB; in memory when unset)")
    serve.add_argument("--api-key", default=os.environ.get("MEMLAB_API_KEY"), help="require "
                       "this key as X-API-Key or Bearer; it may read and write every workspace "
                       "(default: $MEMLAB_API_KEY)")
    serve.add_argument("--keys-file", default=os.environ.get("MEMLAB_KEYS_FILE"), help="scoped "
                       "API keys, JSON or TOML (see the README; default: $MEMLAB_KEYS_FILE, or "
                       "the JSON in $MEMLAB_KEYS)")
    serve.add_argument("--record", default=os.environ.get("MEMLAB_RECORD"), help="append every "
                       "request to this JSON Lines trace (default: $MEMLAB_RECORD)")
    serve.add_argument("--no-maintenance", action="store_true", help="do not run maintenance "
                       "after ingest and query requests")
    serve.add_argument("--compact-after", type=int, default=100_000, metavar="N",
                       help="with --db: compact the journal into a snapshot once N rows follow "
                       "the latest one (default: 100000; 0: never by itself)")
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback --host "
                       "without an API key (anyone who can reach the port reads and writes)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="also accept this Host header (repeatable; '*' accepts any); "
                       "localhost names and the bound host always are")
    serve.add_argument("--record-max-bytes", type=int, default=None, help="rotate the --record "
                       "trace at this size (trace.jsonl.1 … .5 are kept)")
    serve.add_argument("--record-redact", action="store_true", help="record without the "
                       "requests' text (content, queries, values, metadata)")
    serve.add_argument("--limit-concurrency", type=int, default=256, metavar="N",
                       help="answer 503 beyond N open connections and requests in flight, so "
                       "slow or idle clients cannot use up the server's file descriptors "
                       "(default: 256)")
    serve.add_argument("--timeout-keep-alive", type=float, default=5.0, metavar="SECONDS",
                       help="close an idle keep-alive connection after SECONDS (default: 5)")
    serve.add_argument("--group-commit", action="store_true", help="with --db: write the "
                       "journal (one fsync for every thread's queued rows) after the store's "
                       "lock is released, so reads do not wait for a write's disk I/O "
                       "(MemoryStore(fsync_outside_lock=True); a write still returns only once "
                       "it is on disk)")
    serve.add_argument("--switch-interval", type=float, default=None, metavar="SECONDS",
                       help="the server process's GIL switch interval (sys.setswitchinterval, "
                       "in [1e-06, 1] seconds: Python keeps microseconds; default: "
                       "Python's, 0.005). A smaller one lets a short request run between the "
                       "slices of long ones; see README "
                       "'Where item 9 stands' for what it measured")

    mcp = sub.add_parser("mcp", help="the MCP server over stdio", description=(
        "Serve memlab's tools over the Model Context Protocol on stdin/stdout (the official "
        "SDK; the 'service' extra)."))
    mcp.add_argument("--db", default=os.environ.get("MEMLAB_DB"), help="SQLite file of a "
                     "durable store (default: $MEMLAB_DB; in memory when unset)")
    mcp.add_argument("--workspaces", default=os.environ.get("MEMLAB_MCP_WORKSPACES"),
                     help="comma-separated glob patterns of the workspaces the tools may touch, "
                     "e.g. 'team-a-*,shared' (default: $MEMLAB_MCP_WORKSPACES; all when unset)")

    check = sub.add_parser("check", help="verify a durable store's file", description=(
        "Verify a memlab database without changing it (read-only; a file with no -wal/-shm "
        "beside it is read as immutable, so none are created, even in a read-only folder): "
        "SQLite's integrity check, each journal "
        "row's checksum, the numbering of rows (a deleted row, rows missing at the end), each "
        "payload, and a replay into memory. Exit 0 when sound; else exit 1, one line per "
        "problem naming where it is (the row, the snapshot part, the item; never its content), "
        "and a last line pointing to memlab recover. It reports damage only: what recover "
        "would keep or drop is recover's report."))
    check.add_argument("db", help="the SQLite file")

    recover = sub.add_parser("recover", help="salvage a damaged store into a new file",
                             description=(
        "Copy every intact row of a memlab database (checksum matches, payload decodes, the "
        "operation applies after the rows kept before it) into a new database, and list the "
        "rows left out. A damaged snapshot is salvaged part by part, and where items have "
        "their own checksums (snapshot format 3, rows adding several items) item by item: "
        "an item whose own bytes are damaged is dropped with its edges, each listed. The "
        "damaged file is only read. Exit 0 when it met no damage, 1 otherwise (also when the "
        "damage cost nothing, e.g. a snapshot header rebuilt from its copy)."))
    recover.add_argument("db", help="the damaged SQLite file")
    recover.add_argument("--out", required=True, help="the new file (must not exist)")

    compact = sub.add_parser("compact", help="compact a durable store's journal into a "
                             "snapshot", description=(
        "Write a snapshot of the whole store into its file and delete the journal rows it "
        "covers (one SQLite transaction: a crash leaves the old file or the new one), so that "
        "opening the store loads the snapshot and replays only the rows written after it. A "
        "durable store also compacts by itself once 100,000 rows follow its latest snapshot."))
    compact.add_argument("db", help="the SQLite file (must exist)")
    compact.add_argument("--vacuum", action="store_true", help="then rewrite the file without "
                         "the pages the deleted rows held (SQLite VACUUM), so that it shrinks")

    bench = sub.add_parser("bench", help="run the benchmark suite", description=(
        "Run benchmarks/ with pytest-benchmark (the 'bench' extra), save the JSON and print the "
        "performance table."))
    bench.add_argument("--json", default="benchmarks/results.json", help="where to save the "
                       "pytest-benchmark JSON (default: benchmarks/results.json)")
    bench.add_argument("-k", dest="select", default=None, help="only benchmarks whose name "
                       "matches this pytest -k expression (e.g. 'ppr or spread')")
    return parser


def _check_executor(args) -> None:
    """Refuse ``--workers`` and ``--address`` where the executor would ignore them (naming
    both flags), then give ``--workers`` its default (2). ``--workers`` sizes a process pool
    (``local``) or the Dask ``LocalCluster`` started when no ``--address`` is given."""
    from memlab.harness.replay import check_address, max_workers
    if args.workers is not None:
        if args.workers < 1:
            raise _Fail(f"--workers must be at least 1, got {args.workers}")
        if args.workers > max_workers():
            raise _Fail(f"--workers {args.workers} is more than the limit {max_workers()} "
                        f"(max(2, 4 x the CPUs))")
        if args.executor == "serial":
            raise _Fail(f"--workers {args.workers} has no effect with --executor serial (it "
                        f"replays in this process); use --executor "
                        f"{'local or dask' if args.command in ('sweep', 'tune') else 'dask'}, or drop "
                        f"--workers")
        if args.address is not None:
            raise _Fail(f"--workers {args.workers} has no effect with --address "
                        f"{args.address!r} (that scheduler's cluster has its own workers); "
                        f"drop one of them")
    if args.address is not None and args.executor != "dask":
        raise _Fail(f"--address {args.address!r} needs --executor dask, got "
                    f"--executor {args.executor}")
    try:
        check_address(args.address, "--address")
    except ValueError as exc:
        raise _Fail(str(exc)) from None
    args.workers = 2 if args.workers is None else args.workers


def _counted(problems: list[str]) -> str:
    """``3 problems`` for check's list (its last line may be ``... and N more problems``)."""
    more = problems[-1].startswith("... and ") and problems[-1].endswith(" more problems")
    total = len(problems) - 1 + int(problems[-1].split()[2]) if more else len(problems)
    return f"{total} problem{'s' if total != 1 else ''}"


def _check_k(k: int) -> None:
    if not 1 <= k <= 100:
        raise _Fail(f"-k must be in 1..100, got {k}")


def _recipes() -> dict:
    from memlab.surfacing.config import RECIPES
    return RECIPES


def _experiment_configs(entries: list[str]) -> dict[str, tuple[str, Any]]:
    """``--config NAME=CONFIG[:MODE]`` entries, each name once."""
    configs: dict[str, tuple[str, Any]] = {}
    for entry in entries:
        name, eq, spec = entry.partition("=")
        name = name.strip()
        if not eq or not name or not spec:
            raise _Fail(f"--config {entry!r} must look like NAME=CONFIG[:MODE]")
        if name in configs:
            raise _Fail(f"--config {entry!r} repeats the name {name!r} (each configuration "
                        f"needs its own name)")
        mode = "router"
        if spec.endswith((":legacy", ":router")):
            spec, mode = spec.rsplit(":", 1)
        elif ":" in spec and not Path(spec).is_file() and spec.rsplit(":", 1)[0] != "":
            head, tail = spec.rsplit(":", 1)
            if head.lower() in _recipes() or head.endswith(".json"):
                raise _Fail(f"--config {entry!r}: the mode after ':' must be 'legacy' or "
                            f"'router', got {tail!r}")
        configs[name] = (mode, _load_config(_recipe_spec(spec)))
    return configs


def _run(args: argparse.Namespace) -> int:
    if args.command == "demo":
        from memlab.demo import run_demo
        _check_k(args.k)
        _writable_folder("--out", args.out)
        run_demo(args.out, k=args.k, measure_on=args.measure_on)
        return 0
    if args.command == "replay":
        from memlab.harness import replay
        _check_k(args.k)
        _check_executor(args)
        n_workers = args.workers
        config, measures = _load_config(args.config), _measures(args.measures)
        _writable_folder("--out", args.out)
        import warnings
        with warnings.catch_warnings(record=True) as caught, _scheduler_reached(args), \
                _config_needs(args.config):
            warnings.simplefilter("always")
            result = replay(_load_traces(args.trace), config, mode=args.mode,
                            k=args.k, measures=measures, seed=args.seed,
                            measure_on=args.measure_on, executor=args.executor,
                            address=args.address, n_workers=n_workers)
        _print_warnings([c for c in caught if c.category.__name__ in _SHOWN_WARNINGS])
        summary = result.summary()
        print(summary.to_string(float_format=lambda v: f"{v:.4f}") if len(summary)
              else "no judged queries: no measures to report")
        if result.manifest.get("in_sample"):  # the table's scores are in-sample: say so there
            print(textwrap.fill(f"note: {result.manifest['in_sample']}", 100))
        print(_measure_on_line(args.measure_on))
        result.save(args.out)
        print(f"wrote {args.out} ({len(result.decisions)} queries, "
              f"{len(result.candidates)} candidate rows"
              + ("" if args.executor == "serial" else f"; ran {result.manifest['executor']}")
              + ")")
        return 0
    if args.command == "experiment":
        import warnings

        from memlab.harness import Experiment
        from memlab.harness.display import experiment_printable
        _check_k(args.k)
        _check_executor(args)
        n_workers = args.workers
        configs = _experiment_configs(args.config)
        if args.baseline is not None and args.baseline not in configs:
            raise _Fail(f"--baseline {args.baseline!r} is not one of the --config names "
                        f"{list(configs)}")
        measures = _measures(args.measures)
        where = _where(args.where)
        _writable_folder("--out", args.out)
        with warnings.catch_warnings(record=True) as caught, _scheduler_reached(args), \
                _config_needs(args.config):
            warnings.simplefilter("always")
            try:
                out = Experiment(_load_trace(args.trace), configs, measures, args.baseline,
                                 k=args.k, measure_on=args.measure_on, where=where, by=args.by,
                                 correction=args.correction, test=args.test,
                                 progress=sys.stderr.isatty(), executor=args.executor,
                                 address=args.address, n_workers=n_workers)
            except ValueError as exc:
                if not str(exc).startswith(("where", "by ")):
                    raise
                raise _Fail(f"--{exc}") from None
        if args.wide:
            print(out.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        else:
            frame, note = experiment_printable(out)
            _print_blocks(frame, ["name", "n"], False)
            print(textwrap.fill(note, 100))
        if out.comparisons is not None:
            print()
            _print_blocks(out.comparisons._printable(3), ["name", "vs", "measure"], args.wide)
            print(textwrap.fill(out.comparisons.footnote(), 100))
        if out.subsets is not None:
            from memlab.harness.display import subset_printable
            for label, cells, marks in subset_printable(out):  # sorted, each with its marks
                print(f"\n{label}\n")
                _print_blocks(cells, ["name", "n"], args.wide)
                print(textwrap.fill(marks, 100))
        print(textwrap.fill(_measure_on_line(args.measure_on), 100))
        _print_warnings([c for c in caught if c.category.__name__ in _SHOWN_WARNINGS])
        Path(args.out).mkdir(parents=True, exist_ok=True)
        out.table.to_csv(Path(args.out) / "experiment.csv", index=False)
        out.per_query.to_csv(Path(args.out) / "per_query.csv", index=False)
        written = "experiment.csv and per_query.csv"
        if out.comparisons is not None:
            out.comparisons.table.to_csv(Path(args.out) / "comparisons.csv", index=False)
            written = "experiment.csv, per_query.csv and comparisons.csv"
        if out.subsets is not None:
            out.subsets.to_csv(Path(args.out) / "subsets.csv", index=False)
            written = written.replace(" and ", ", ") + " and subsets.csv"
        (Path(args.out) / "experiment.md").write_text(out.to_markdown())
        (Path(args.out) / "experiment.tex").write_text(out.to_latex())
        ran = sorted({r.manifest.get("executor", "serial") for r in out.results.values()})
        print(f"wrote {args.out}/{written} (and experiment.md, experiment.tex"
              + ("" if args.executor == "serial" else f"; ran {', '.join(ran)}") + ")")
        return 0
    if args.command == "sweep":
        import warnings

        from memlab.harness import sweep
        from memlab.harness.display import sweep_printable
        _check_k(args.k)
        _check_executor(args)
        reference: Any = args.reference
        if reference != "best":
            try:
                reference = int(reference)
            except ValueError:
                raise _Fail(f"--reference must be 'best' or a point number, got "
                            f"{args.reference!r}") from None
        grid, base, measures = _grid(args.grid), _load_config(_recipe_spec(args.config)), \
            _measures(args.measures)
        where = _where(args.where)
        _writable_folder("--out", args.out)
        _check_grid(grid, base, args.grid)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                out = sweep(_load_trace(args.trace), grid, base=base,
                            k=args.k, measures=measures, executor=args.executor,
                            address=args.address, n_workers=args.workers,
                            counterfactual=args.counterfactual, measure_on=args.measure_on,
                            where=where, by=args.by, progress=sys.stderr.isatty())
            except ValueError as exc:
                if not str(exc).startswith(("where", "by ")):
                    raise
                raise _Fail(f"--{exc}") from None
            except OSError as exc:  # a Dask scheduler that cannot be reached
                raise _Fail(f"--address {args.address!r}: cannot reach the Dask scheduler "
                            f"({exc})") from None
            if reference != "best" and reference not in set(out.table["point"]):
                raise _Fail(f"--reference {reference} is not a point (0..{len(out.table) - 1})")
            comparisons = out.compare(reference, correction=args.correction, test=args.test) \
                if len(out.table) > 1 else None
        if args.wide:
            print(out.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        else:
            frame, note = sweep_printable(out, comparisons=comparisons)
            keep = [c for c in frame.columns if c not in out.measures]
            _print_blocks(frame, keep, False)
            print(textwrap.fill(note, 100))
        if comparisons is not None:
            from memlab.harness.display import point_label
            print()
            named = comparisons._printable(3)
            for column in ("name", "vs"):  # points named by their parameter values
                named[column] = [f"{p} ({point_label(out.table, int(p))})"
                                 for p in named[column]]
            _print_blocks(named, ["name", "vs", "measure"], args.wide)
            print(textwrap.fill(comparisons.footnote(), 100))
        if out.subsets is not None:
            for label, group in out.subsets.groupby("subset", sort=False):
                print(f"\n{label}\n")
                cells = _subset_cells(group, out.measures, "point")
                _print_blocks(cells, ["point", "n"], args.wide)
        print(textwrap.fill(_measure_on_line(args.measure_on), 100))
        _print_warnings([c for c in caught if c.category.__name__ in _SHOWN_WARNINGS])
        Path(args.out).mkdir(parents=True, exist_ok=True)
        out.table.to_csv(Path(args.out) / "sweep.csv", index=False)
        if comparisons is not None:
            comparisons.table.to_csv(Path(args.out) / "comparisons.csv", index=False)
        print(f"wrote {args.out}/sweep.csv" + (" and comparisons.csv" if comparisons is not None
                                                else ""))
        return 0
    if args.command == "tune":
        return _tune(args)
    if args.command == "serve":
        if not 0 <= args.port <= 65535:
            raise _Fail(f"--port must be in 0..65535, got {args.port}")
        if args.limit_concurrency < 1:
            raise _Fail(f"--limit-concurrency must be >= 1, got {args.limit_concurrency}")
        if not 0 < args.timeout_keep_alive <= 3600:
            raise _Fail(f"--timeout-keep-alive must be in (0, 3600] seconds, got "
                        f"{args.timeout_keep_alive}")
        if args.compact_after < 0:
            raise _Fail(f"--compact-after must be >= 0 (0: never by itself), got "
                        f"{args.compact_after}")
        if args.switch_interval is not None and not 1e-6 <= args.switch_interval <= 1:
            raise _Fail(f"--switch-interval must be in [1e-06, 1] seconds, got "
                        f"{args.switch_interval}")
        if args.group_commit and not args.db:  # an in-memory store has no journal to commit
            raise _Fail("--group-commit needs --db (or MEMLAB_DB): without one the store is "
                        "in memory and has no journal to commit")
        if args.record:
            _writable_file("--record", args.record)
            if args.db and Path(args.record).resolve() == Path(args.db).resolve():
                raise _Fail(f"--record {args.record!r} is the database (--db / MEMLAB_DB); "
                            f"record the trace to another file")
        from memlab.service import Limits, ServiceState, create_app
        from memlab.service.auth import KeyRing
        from memlab.service.http import LOCAL_HOSTS
        try:
            import uvicorn
        except ImportError:
            raise _Fail("serve needs the service extra: pip install -e '.[service]'") from None
        try:
            keys = KeyRing.from_file(args.keys_file) if args.keys_file else \
                KeyRing.from_env({"MEMLAB_KEYS": os.environ.get("MEMLAB_KEYS", "")})
            keys = keys.with_admin_secret(args.api_key or None)
        except ValueError as exc:
            raise _Fail(f"--keys-file: {exc}" if args.keys_file else str(exc)) from None
        warning = _check_bind(args.host, None if keys.open else "keys", args.insecure)
        try:
            state = ServiceState(db_path=args.db, record=args.record,
                                 maintenance=not args.no_maintenance, limits=Limits.from_env(),
                                 record_max_bytes=args.record_max_bytes,
                                 record_redact=args.record_redact,
                                 compact_after=args.compact_after or None,
                                 fsync_outside_lock=args.group_commit)
        except ValueError as exc:
            raise _named(exc, dash_db=args.db) from None
        hosts = [*LOCAL_HOSTS, args.host, *args.allow_host]
        if warning:
            print(warning, file=sys.stderr)  # loudly, once the store has opened
        # loop/http "auto" are uvicorn's defaults (uvloop and httptools when installed, else
        # asyncio and h11): the gain measured in README "Concurrency" comes from installing
        # uvloop and httptools (the service extra), not from these arguments
        interval = sys.getswitchinterval()
        if args.switch_interval is not None:  # this process only, while it serves
            sys.setswitchinterval(args.switch_interval)
        # printed before uvicorn binds the port: not a readiness signal (GET /health is)
        print(f"memlab serve: starting on http://{args.host}:{args.port} (store: "
              f"{args.db or 'in memory'}; {'open, no key' if keys.open else 'keys required'})",
              file=sys.stderr)
        try:
            uvicorn.run(create_app(state, keys=keys, allowed_hosts=hosts),
                        host=args.host, port=args.port, log_level="warning", loop="auto",
                        http="auto", limit_concurrency=args.limit_concurrency,
                        timeout_keep_alive=args.timeout_keep_alive)
        except SystemExit as exc:  # uvicorn exits 3 when it cannot start (port in use)
            raise _Fail(f"--host {args.host!r} --port {args.port}: the server could not "
                        f"start on {args.host}:{args.port} (uvicorn stopped with code "
                        f"{exc.code}; its reason is above)") from None
        finally:
            sys.setswitchinterval(interval)
        return 0
    if args.command == "mcp":
        import asyncio

        from memlab.service import ServiceState, create_mcp_server
        from memlab.service.auth import parse_patterns
        from memlab.service.mcp import serve_stdio
        try:
            workspaces = parse_patterns(args.workspaces, "--workspaces")
        except ValueError as exc:
            raise _Fail(str(exc)) from None
        try:
            state = ServiceState(db_path=args.db)
        except ValueError as exc:
            raise _named(exc, dash_db=args.db) from None
        server = create_mcp_server(state, workspaces=workspaces)
        asyncio.run(serve_stdio(server))  # answers requests holding lone surrogates, too
        return 0
    if args.command == "check":
        from memlab.journal_repair import check_journal
        try:
            problems = check_journal(args.db)
        except ValueError as exc:
            raise _named(exc, db=args.db) from None
        # the damage and where it is, nothing else: what recover would make of it is
        # recover's to say (it reports what it kept and dropped)
        for line in problems:
            print(f"{args.db}: {line}")
        if not problems:
            print(f"{args.db}: ok")
            return 0
        print(f"{args.db}: damaged ({_counted(problems)}); nothing was changed. "
              f"`memlab recover {args.db} --out NEW` copies what is intact into a new file")
        return 1
    if args.command == "compact":
        from memlab.persist import ConcurrentWriterError, PersistenceError
        from memlab.store import MemoryStore
        if not Path(args.db).is_file():
            raise _Fail(f"db {args.db!r} does not exist (or is not a file)")
        try:
            store = MemoryStore(path=args.db, compact_after=None)
        except ValueError as exc:
            raise _named(exc, db=args.db) from None
        before = _file_bytes(args.db)  # the database and its write-ahead log, before anything
        try:
            report = store.compact()
            if args.vacuum:
                store.journal.vacuum()
        except ConcurrentWriterError as exc:
            raise _Fail(str(exc)) from None  # names the db, says to reopen and retry
        except PersistenceError as exc:  # e.g. a read-only or immutable file: one line
            raise _Fail(f"db {args.db!r} cannot be compacted: "
                        f"{exc.__cause__ or exc}") from None
        finally:
            store.close()
        if report.upto:
            print(f"{args.db}: compacted rows 1..{report.upto} ({report.rows_removed} journal "
                  f"rows removed; snapshot {report.snapshot_bytes:,} bytes)")
        else:
            print(f"{args.db}: nothing to compact (no journal rows after the latest snapshot)")
        # after close: SQLite has folded its write-ahead log back into the file
        print(f"{args.db}: {'vacuumed; ' if args.vacuum else ''}file {before:,} -> "
              f"{_file_bytes(args.db):,} bytes (database and write-ahead log)")
        if not args.vacuum:
            print("  (compaction frees pages for reuse; --vacuum returns them to the disk)")
        return 0
    if args.command == "recover":
        from memlab.journal_repair import recover_journal
        if not args.out.strip():
            raise _Fail(f"--out must name a new file, got {args.out!r} (empty)")
        if Path(args.out).exists():
            raise _Fail(f"--out {args.out!r} already exists; recover never overwrites a file")
        try:
            report = recover_journal(args.db, args.out)
        except ValueError as exc:
            raise _named(exc, db=args.db, dash_out=args.out) from None
        for line in report.problems:
            print(f"{args.db}: {line}")
        print(report.summary(args.out))
        return 0 if report.kept == report.total and not report.problems \
            and not report.lost_snapshot else 1
    if args.command == "eval":
        from memlab.evaluation import check_data_root, interval_markdown, run_eval
        _check_k(args.k)
        _check_executor(args)  # the flags first: no data is read for a refused command
        if args.data is None:
            from memlab.datasets import shared_data_dir
            args.data = str(shared_data_dir())
        check_data_root(args.data, tuple(args.datasets), option="--data")
        if args.embedder is not None:
            from memlab.signals.dense import DenseConfig
            try:
                DenseConfig(embedder=args.embedder)  # the registry's own check, before any work
            except ValueError as exc:
                raise _Fail(f"--{exc}") from None
        where = _where(args.where)
        _writable_folder("--out", args.out)
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                table = run_eval(args.data, out=args.out, k=args.k, dense=args.dense,
                                 embedder=args.embedder,
                                 datasets=tuple(args.datasets), measure_on=args.measure_on,
                                 where=where, by=args.by, progress=sys.stderr.isatty(),
                                 executor=args.executor, address=args.address,
                                 n_workers=args.workers)
            except ValueError as exc:
                if not str(exc).startswith(("where", "by ")):
                    raise
                raise _Fail(f"--{exc}") from None
            except OSError as exc:  # a Dask scheduler that cannot be reached
                if args.executor != "dask":
                    raise
                raise _Fail(f"--address {args.address!r}: cannot reach the Dask scheduler "
                            f"({' '.join(str(exc).split())})") from None
        print(interval_markdown(table, None if args.wide else 100))
        print(textwrap.fill(_measure_on_line(args.measure_on), 100))
        _print_warnings([c for c in caught if c.category.__name__ in _SHOWN_WARNINGS])
        print(f"wrote {args.out}/results.csv, results.md and results.tex")
        return 0
    # bench
    if not Path("benchmarks").is_dir():
        raise _Fail("bench runs from the repository root (no benchmarks/ folder here)")
    _writable_file("--json", args.json)
    try:
        import pytest_benchmark  # noqa: F401
    except ImportError:
        raise _Fail("bench needs the bench extra: pip install -e '.[bench]'") from None
    command = [sys.executable, "-m", "pytest", "benchmarks", "-q", "--benchmark-only",
               f"--benchmark-json={args.json}", "-p", "no:cacheprovider", "-o", "addopts="]
    if args.select:
        command += ["-k", args.select]
    code = subprocess.call(command)
    if code == 0:
        subprocess.call([sys.executable, "benchmarks/report.py", args.json])
    return code


def _shared_trace(spec: str, option: str = "trace"):
    """``shared:locomo`` / ``shared:musique`` from the shared datasets."""
    from memlab.datasets import shared_data_dir
    from memlab.datasets.loaders import load_hipporag, load_locomo
    from memlab.evaluation import DATASET_FILES, check_data_root
    which = spec.split(":", 1)[1]
    if which not in DATASET_FILES:
        raise _Fail(f"{option} {spec!r}: shared datasets are {sorted(DATASET_FILES)}")
    root = check_data_root(shared_data_dir(), (which,), option=option)
    files = [root / rel for rel in DATASET_FILES[which]]
    return load_locomo(files[0]) if which == "locomo" else load_hipporag(*files)


def _space(entries: list[str] | None) -> dict[str, Any] | None:
    """``--space FIELD=LOW:HIGH`` (a range) or ``FIELD=V1,V2`` (choices), parsed now."""
    if entries is None:
        return None
    space: dict[str, Any] = {}
    for entry in entries:
        key, sep, values = entry.partition("=")
        key = key.strip()
        if not sep or not key or not values.strip():
            raise _Fail(f"--space entry {entry!r} must look like field=low:high or "
                        f"field=v1,v2")
        if key in space:
            raise _Fail(f"--space entry {entry!r} repeats the field {key!r}")
        if values == "permutations":
            space[key] = values
        elif ":" in values and "," not in values:
            low, _, high = values.partition(":")
            try:
                space[key] = (json.loads(low), json.loads(high))
            except json.JSONDecodeError:
                raise _Fail(f"--space entry {entry!r}: low and high must be numbers") from None
        else:
            space[key] = list(_grid([f"{key}={values}"])[key])
    return space


def _tune(args) -> int:
    from memlab.harness.measures import parse_measure
    if args.rankers is not None or args.grid is not None:
        return _tune_nested(args)
    if args.also or args.no_graph_budgets:
        raise _Fail("--also and --no-graph-budgets need --rankers or --grid (a nested choice)")
    _check_k(args.k)
    for option, value, least in (("--folds", args.folds, 2), ("--trials", args.trials, 1)):
        if value < least:
            raise _Fail(f"{option} must be at least {least}, got {value}")
    _check_executor(args)
    try:
        if not parse_measure(args.measure).needs_gold:
            raise ValueError(f"{args.measure!r} is not a relevance measure (tune maximises "
                             f"one of R@k, P@k, nDCG@k, MRR, Hit@k)")
    except ValueError as exc:
        raise _Fail(f"--measure {args.measure}: {exc}") from None
    if args.seed < 0:
        raise _Fail(f"--seed must be a non-negative integer, got {args.seed}")
    if not args.name or Path(args.name).name != args.name:
        raise _Fail(f"--name must be a plain file name, got {args.name!r}")
    try:
        import optuna  # noqa: F401
    except ImportError:
        raise _Fail("tune needs the tune extra: pip install -e '.[tune]'") from None
    from memlab.tuning import save_plots, tune
    space, base = _space(args.space), _load_config(args.config)
    compare = None if args.compare is None else _load_config(args.compare, "--compare")
    if space is not None:
        from memlab.tuning import parse_space
        for entry, (key, spec) in zip(args.space, space.items()):
            try:  # every entry checked against the base recipe now, before the trace loads
                parse_space({key: spec}, base)
            except ValueError as exc:
                reason = str(exc).removeprefix(f"space[{key!r}]").lstrip(": ")
                raise _Fail(f"--space entry {entry!r}: {reason}") from None
    categories = None if args.categories is None else [
        int(c) if c.lstrip("-").isdigit() else c for c in args.categories]
    _writable_folder("--out", args.out)
    trace = _load_trace(args.trace)
    if categories is not None:
        present = {q.get("category") for q in trace.queries if q.get("gold")}
        if not present & set(categories):
            shown = sorted((c for c in present if c is not None), key=str)
            raise _Fail(f"--categories {' '.join(args.categories)}: the trace has no judged "
                        f"question in these categories (its categories: "
                        f"{', '.join(map(str, shown)) or 'none'})")
    holdout = None if args.holdout is None else _load_trace(args.holdout, "--holdout")
    if holdout is not None:
        from memlab.tuning import check_disjoint_holdout
        try:
            check_disjoint_holdout(trace, holdout)
        except ValueError as exc:
            raise _Fail(f"--{exc}") from None
    try:
        out = tune(trace, space, base=base, measure=args.measure, folds=args.folds,
                   n_trials=args.trials, group_by=args.group_by, seed=args.seed, k=args.k,
                   categories=categories, measure_on=args.measure_on,
                   executor=args.executor, n_workers=args.workers, address=args.address,
                   name=args.name, holdout=holdout, compare=compare,
                   reuse_replays=args.reuse_replays,
                   progress=not args.no_progress and sys.stderr.isatty())
    except OSError as exc:  # a Dask scheduler that cannot be reached
        if args.executor != "dask":
            raise
        raise _Fail(f"--address {args.address!r}: cannot reach the Dask scheduler "
                    f"({' '.join(str(exc).split())})") from None
    folder = Path(args.out)
    # the recipe's provenance says how to make it again
    out.manifest["command"] = "memlab " + " ".join(shlex.quote(a) for a in args.argv)
    recipe = out.save_recipe(folder / f"{args.name}.json")
    out.cv.to_csv(folder / "cv.csv", index=False)
    out.folds.to_csv(folder / "folds.csv", index=False)
    out.trials.to_csv(folder / "trials.csv", index=False)
    out.held_out.to_csv(folder / "held_out.csv", index=False)
    out.importance.rename_axis("param").to_csv(folder / "importance.csv")
    save_plots(out, folder / "plots")
    cv = out.cv.iloc[0]
    print(f"{cv['measure']} grouped {cv['folds']}-fold CV estimate (by {cv['group_by']}): "
          f"{cv['cv_mean']:.4f} [95% t-interval over folds {cv['ci_low']:.4f}, "
          f"{cv['ci_high']:.4f} (clipped to the measure's range [0, 1]); bootstrap over "
          f"{cv['questions']} held-out questions {cv['boot_low']:.4f}, {cv['boot_high']:.4f}]")
    print(f"base {out.manifest['compare']!r} on the same folds: {cv['base_cv_mean']:.4f}; tuned "
          f"- base, paired by fold: {cv['diff_mean']:+.4f} [95% t-interval "
          f"{cv['diff_ci_low']:+.4f}, {cv['diff_ci_high']:+.4f}]")
    print(out.folds.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print(f"chosen configuration (searched on every question; in-sample {cv['measure']} "
          f"{cv['in_sample']:.4f} vs base {cv['base_in_sample']:.4f}, not an estimate): "
          + ", ".join(f"{k}={v}" for k, v in out.best_params.items()))
    print("note: the CV estimate weights every fold equally (a mean of fold means); the "
          "in-sample score pools the questions (a mean over questions)")
    if not cv["diff_mean"] > 0:
        print(f"warning: the tuned procedure is not better than the base {out.manifest['compare']!r}"
              f" on held-out folds ({cv['diff_mean']:+.4f}); keep the base", file=sys.stderr)
    print("importance: " + ", ".join(f"{k} {v:.3f}" for k, v in out.importance.items()))
    if out.holdout is not None:
        h = out.holdout.iloc[0]
        print(f"holdout {h['trace']}: {h['measure']} {h['mean']:.4f} [bootstrap "
              f"{h['boot_low']:.4f}, {h['boot_high']:.4f}] over {h['questions']} questions "
              f"(scored once)")
        out.holdout.to_csv(folder / "holdout.csv", index=False)
    print(f"took {out.manifest['seconds']} s ({out.manifest['path']})")
    print(_measure_on_line(args.measure_on))
    print(f"wrote {recipe} (use it as --config {recipe}) and cv.csv, folds.csv, trials.csv, "
          f"held_out.csv, importance.csv, plots/ in {args.out}")
    return 0


def _tune_nested(args) -> int:
    """``memlab tune --rankers/--grid``: a nested grouped-CV choice of the recipe to ship."""
    import dataclasses
    import shlex
    import time

    from memlab.harness.measures import parse_measure
    _check_k(args.k)
    if args.folds < 3:
        raise _Fail(f"--folds must be at least 3 for a nested choice, got {args.folds}")
    for option, given in (("--space", args.space is not None),
                          ("--holdout", args.holdout is not None)):
        if given:
            raise _Fail(f"{option} cannot be combined with --rankers/--grid (a nested choice "
                        f"among fixed candidates)")
    measures = [args.measure, *args.also]
    for m in measures:
        try:
            if not parse_measure(m).needs_gold:
                raise ValueError(f"{m!r} is not a relevance measure")
        except ValueError as exc:
            raise _Fail(f"--measure/--also {m}: {exc}") from None
    if len(set(measures)) != len(measures):
        raise _Fail(f"--also repeats a measure: {' '.join(measures)}")
    if args.seed < 0:
        raise _Fail(f"--seed must be a non-negative integer, got {args.seed}")
    if not args.name or Path(args.name).name != args.name:
        raise _Fail(f"--name must be a plain file name, got {args.name!r}")
    try:
        from memlab.learn.nested import (Candidate, grid_configs, nested_choose,
                                          parse_ranker_spec)
        if args.rankers and any(r.lower() != "none" for r in args.rankers):
            import sklearn  # noqa: F401
    except ImportError:
        raise _Fail("a ranker needs the learn extra: pip install -e '.[learn]'") from None
    rankers = []
    for spec in args.rankers or ["none"]:
        try:
            rankers.append((spec, *parse_ranker_spec(spec)))
        except ValueError as exc:
            raise _Fail(f"--rankers {spec}: {exc}") from None
    if ("none", None, {}) not in [(s.lower(), k, p) for s, k, p in rankers]:
        rankers.insert(0, ("none", None, {}))  # the base alone is always a candidate
    base = _load_config(args.config)
    grid = _grid(args.grid) if args.grid else {}
    replay_base = base
    if args.no_graph_budgets:
        replay_base = base.replace(**{stage: dataclasses.replace(getattr(base, stage),
                                                                 budget_ms=None)
                                      for stage in ("ppr", "spreading")
                                      if getattr(base, stage) is not None})
    if grid:
        _check_grid(grid, replay_base, args.grid)  # each value named as written, before work
    try:
        points = grid_configs(replay_base, grid)
    except (ValueError, TypeError) as exc:
        raise _Fail(f"--grid: {exc}") from None
    candidates, origin = [], {}
    for point, config in points:
        for spec, kind, params in rankers:
            label = config.name if kind is None else f"{config.name}+{spec}"
            candidates.append(Candidate(label, config, kind, params))
            origin[label] = point
    categories = None if args.categories is None else [
        int(c) if c.lstrip("-").isdigit() else c for c in args.categories]
    _writable_folder("--out", args.out)
    trace = _load_trace(args.trace)
    started = time.perf_counter()
    out = nested_choose(trace, candidates, measures=measures, folds=args.folds,
                        group_by=args.group_by, seed=args.seed, k=args.k,
                        categories=categories, measure_on=args.measure_on,
                        progress=not args.no_progress and sys.stderr.isatty())
    seconds = round(time.perf_counter() - started, 1)
    folder = Path(args.out)
    folder.mkdir(parents=True, exist_ok=True)
    chosen = out.chosen
    point = origin[chosen.label]
    shipped = grid_configs(base, {k: [v] for k, v in point.items()})[-1][1] if point else base
    shipped = shipped.replace(name=args.name)
    written = [f"{args.name}.json"]
    if out.model is not None:
        ranker_file = f"{args.name}.ranker.json"
        out.model.save(folder / ranker_file)
        shipped = shipped.replace(reranker=ranker_file)
        written.append(ranker_file)
    command = "memlab tune " + " ".join(shlex.quote(a) for a in sys.argv[2:]) \
        if len(sys.argv) > 1 and sys.argv[1] == "tune" else None
    recipe = {"format": "memlab-recipe/1", "name": args.name, "config": shipped.to_dict(),
              "provenance": {
                  "procedure": "nested grouped CV choice (memlab.learn.nested_choose)",
                  "command": command, "base_recipe": args.config, **out.manifest,
                  "chosen": {"label": chosen.label, "point": point, "ranker": chosen.ranker,
                             "params": dict(chosen.params)},
                  "graph_budgets_off_in_replays": bool(args.no_graph_budgets),
                  "cv": out.table.to_dict(orient="records"),
                  "fold_choices": out.folds["chosen"].tolist(),
                  "candidates_cv": out.candidates.to_dict(orient="records"),
                  "seconds": seconds}}
    (folder / f"{args.name}.json").write_text(json.dumps(recipe, indent=2, sort_keys=True,
                                                         default=str) + "\n")
    out.table.to_csv(folder / "nested.csv", index=False)
    out.folds.to_csv(folder / "folds.csv", index=False)
    out.candidates.to_csv(folder / "candidates.csv", index=False)
    out.inner.to_csv(folder / "inner.csv", index=False)
    print(f"nested grouped {args.folds}-fold CV (by {args.group_by}) of choosing among "
          f"{len(candidates)} candidates on {args.measure}, base {candidates[0].label!r}:")
    for r in out.table.itertuples():
        print(f"  {r.measure}: {r.cv_mean:.4f} [95% t over folds {r.ci_low:.4f}, "
              f"{r.ci_high:.4f}]; base {r.base_cv_mean:.4f} [{r.base_ci_low:.4f}, "
              f"{r.base_ci_high:.4f}]; chosen - base {r.diff_mean:+.4f} [{r.diff_ci_low:+.4f}, "
              f"{r.diff_ci_high:+.4f}], folds better/worse {r.folds_better}/{r.folds_worse}")
    print(out.folds.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
    print("each candidate's own grouped-CV estimate on the outer folds (what the shipped "
          "choice reads; not nested):")
    print(out.candidates.drop(columns=["fold_scores"]).to_string(
        index=False, float_format=lambda v: f"{v:.4f}"))
    ins = ", ".join(f"{r.measure} {r.in_sample:.4f}" for r in out.table.itertuples())
    print(f"shipped: {chosen.label} (chosen on every question; trained and scored on every "
          f"question: in-sample {ins}, not an estimate)")
    if not out.table.iloc[0]["diff_mean"] > 0:
        print(f"warning: the nested choice is not better than the base {candidates[0].label!r}"
              f" on held-out folds; keep the base", file=sys.stderr)
    print(f"took {seconds} s")
    print(_measure_on_line(args.measure_on))
    print(f"wrote {', '.join(written)} (use it as --config {folder / written[0]}), nested.csv, "
          f"folds.csv, candidates.csv, inner.csv in {args.out}")
    return 0


_LOOPBACK = ("127.0.0.1", "localhost", "::1", "[::1]")


def _check_bind(host: str, api_key: str | None, insecure: bool) -> str | None:
    """Refuse to serve without any API key beyond loopback (unless ``--insecure``); the warning
    to print when there is no key at all, else None. ``api_key`` is any configured key (the
    admin key or a keys file)."""
    if api_key:
        return None
    loopback = host in _LOOPBACK or host.startswith("127.")
    if not loopback and not insecure:
        raise _Fail(f"refusing to serve on --host {host} without an API key: set "
                    f"MEMLAB_API_KEY (or --api-key), bind 127.0.0.1, or pass --insecure")
    return ("memlab serve: WARNING: no API key is set (MEMLAB_API_KEY / --api-key): every "
            f"route is open to anyone who can reach {host}" + ("" if loopback else
                                                              " (--insecure)"))


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args, stray = parser.parse_known_args(argv)
    if stray:  # as parse_args would, but as "memlab <command>: error:" like every other error
        args._commands[args.command].error(f"unrecognized arguments: {' '.join(stray)}")
    del args._commands
    args.argv = list(sys.argv[1:] if argv is None else argv)  # what a recipe's provenance quotes
    try:
        import warnings

        from memlab.errors import MemlabDeprecationWarning
        with warnings.catch_warnings():  # restored on return (main is also called in-process)
            # a deprecated name the user passed is said once, on stderr, in one line; other
            # libraries' deprecations stay hidden, as Python hides them by default
            warnings.simplefilter("default", MemlabDeprecationWarning)
            warnings.showwarning = _show_deprecations(warnings.showwarning)
            return _run(args)
    except (_Fail, ValueError, ImportError) as exc:
        message = " ".join(str(exc).split())
    except RecursionError:  # input nested past Python's recursion limit
        message = "the input is nested too deeply to read"
    except MemoryError:
        message = "out of memory: the input asks for more than this machine has"
    print(f"memlab {args.command}: error: {message}", file=sys.stderr)
    return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
