"""The ``memlab`` command: ``demo``, ``replay``, ``experiment``, ``sweep``, ``eval``, ``bench``,
``serve``, ``mcp``, and ``check`` and ``recover`` for a durable store's file.

Every subcommand drives the library as a user would. Bad input ends with one line on stderr,
``memlab <command>: error: <what>``, and exit code 2.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

__all__ = ["main", "build_parser"]

_TRACE_HELP = ("a trace: a JSON Lines file (see memlab.harness.trace), or fixture:<name> for a "
               "repository fixture such as fixture:apollo_demo, or synthetic:<items>:<queries> "
               "for a seeded synthetic trace")
_CONFIG_HELP = ("a recipe name (default, seed_compat, bm25) or a JSON file holding "
                "SurfacingConfig.to_dict() output")


class _Fail(Exception):
    """A user error: printed as one line, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but a usage error is one line (``memlab <command>: error: …``), exit code 2."""

    def error(self, message: str):  # noqa: D102 - argparse's hook
        self.exit(2, f"{self.prog}: error: {message}\n")


def _load_trace(spec: str):
    from memlab.harness.trace import Trace

    if spec.startswith("fixture:"):
        from memlab.datasets import load_fixture_trace
        try:
            return load_fixture_trace(spec.split(":", 1)[1])
        except ValueError as exc:
            raise _Fail(f"trace {spec!r}: {exc}") from None
    if spec.startswith("synthetic:"):
        from memlab.datasets.synthetic import synthetic_trace
        parts = spec.split(":")
        try:
            if len(parts) != 3:
                raise ValueError
            items, queries = int(parts[1]), int(parts[2])
        except ValueError:
            raise _Fail(f"trace {spec!r} must look like synthetic:<items>:<queries>") from None
        try:
            return synthetic_trace(items, queries, seed=0)
        except ValueError as exc:
            raise _Fail(f"trace {spec!r}: {exc}") from None
    path = Path(spec)
    if not path.is_file():
        raise _Fail(f"trace {spec!r} is not a file (nor fixture:<name> / synthetic:<n>:<q>)")
    try:
        return Trace.read_jsonl(path)
    except ValueError as exc:
        raise _Fail(f"trace {spec!r}: {exc}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise _Fail(f"trace {spec!r} cannot be read: {exc}") from None


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


def _load_config(spec: str):
    from memlab.surfacing.config import RECIPES, SurfacingConfig

    if spec in RECIPES:
        return RECIPES[spec]
    path = Path(spec)
    if path.suffix == ".json" and path.is_file():
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise _Fail(f"config {spec!r} is not valid JSON: {exc.msg} at line "
                        f"{exc.lineno}") from None
        except RecursionError:
            raise _Fail(f"--config {spec!r} is not a valid configuration: its JSON is nested "
                        f"too deeply") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise _Fail(f"config {spec!r} cannot be read: {exc}") from None
        if not isinstance(data, dict):
            raise _Fail(f"config {spec!r} must hold a JSON object (SurfacingConfig.to_dict() "
                        f"output), got a JSON {_json_kind(data)}")
        try:
            return SurfacingConfig.from_dict(data)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise _Fail(f"config {spec!r} is not a valid configuration: "
                        f"{exc if isinstance(exc, ValueError) else repr(exc)}") from None
    raise _Fail(f"config {spec!r} is neither a recipe ({', '.join(sorted(RECIPES))}) nor a "
                f"JSON file")


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
            try:
                parsed.append(json.loads(value))
            except json.JSONDecodeError:
                parsed.append(value)
            except RecursionError:
                raise _Fail(f"--grid entry {pair!r}: a value is nested too deeply") from None
        grid[key] = parsed
    return grid


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


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="memlab", description="memlab: research and run memory surfacing for LLM agents. "
        "Replay traces, compare configurations with significance tests, sweep parameters, "
        "evaluate on public data and benchmark.")
    sub = parser.add_subparsers(dest="command", required=True, metavar="command",
                                parser_class=_Parser)

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

    ex = sub.add_parser("experiment", help="compare configurations on one trace", description=(
        "Replay a trace under several configurations and print one row per configuration: "
        "means, bootstrap 95% intervals, and paired t-test and Wilcoxon p-values against the "
        "baseline."))
    ex.add_argument("trace", help=_TRACE_HELP)
    ex.add_argument("--config", action="append", required=True, metavar="NAME=CONFIG[:MODE]",
                    help="a configuration to compare, repeatable: a name, '=', a recipe or JSON "
                    "file, and optionally ':legacy' or ':router' (e.g. seed=seed_compat:legacy)")
    ex.add_argument("--baseline", default=None, help="the name the others are tested against "
                    "(default: the first)")
    _replay_options(ex)
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
    sw.add_argument("--executor", default="serial", choices=["serial", "local", "dask"],
                    help="where points run: this process, a process pool, or Dask (a "
                    "LocalCluster, or --address) (default: serial)")
    sw.add_argument("--address", default=None, help="a Dask scheduler address (dask executor)")
    sw.add_argument("--workers", type=int, default=2, help="processes or Dask workers "
                    "(default: 2)")
    sw.add_argument("--counterfactual", action="store_true", help="replay once and re-score the "
                    "recorded candidates per point (composite weights only)")
    _replay_options(sw)
    sw.add_argument("--out", default="out/sweep", help="folder for sweep.csv (default: "
                    "out/sweep)")

    ev = sub.add_parser("eval", help="quality on the shared public datasets", description=(
        "Replay LoCoMo and HippoRAG's MuSiQue under memlab's DEFAULT recipe, its no-graph "
        "ablation and BM25 baselines; write one results table."))
    ev.add_argument("--data", default=None, help="folder holding locomo/ and hipporag/ as in "
                    "the shared datasets' README (default: $MEMLAB_SHARED_DATA, else "
                    "../shared/datasets beside the repository)")
    ev.add_argument("--out", default="out/eval", help="folder for results.csv and results.md "
                    "(default: out/eval)")
    ev.add_argument("-k", type=int, default=20, help="items per context, 1..100 (default: 20)")
    ev.add_argument("--dense", action="store_true", help="also run DEFAULT with hybrid dense "
                    "relevance (needs the 'dense' extra)")
    ev.add_argument("--datasets", nargs="+", default=["musique", "locomo"],
                    choices=["musique", "locomo"], help="which datasets (default: both)")
    _measure_on_option(ev)

    serve = sub.add_parser("serve", help="the HTTP service", description=(
        "Serve memlab over HTTP (FastAPI on uvicorn; the 'service' extra). Every route but "
        "/health takes the API key when one is set; the OpenAPI schema is at /docs and "
        "/openapi.json."))
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
    serve.add_argument("--insecure", action="store_true", help="allow a non-loopback --host "
                       "without an API key (anyone who can reach the port reads and writes)")
    serve.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                       help="also accept this Host header (repeatable; '*' accepts any); "
                       "localhost names and the bound host always are")
    serve.add_argument("--record-max-bytes", type=int, default=None, help="rotate the --record "
                       "trace at this size (trace.jsonl.1 … .5 are kept)")
    serve.add_argument("--record-redact", action="store_true", help="record without the "
                       "requests' text (content, queries, values, metadata)")

    mcp = sub.add_parser("mcp", help="the MCP server over stdio", description=(
        "Serve memlab's tools over the Model Context Protocol on stdin/stdout (the official "
        "SDK; the 'service' extra)."))
    mcp.add_argument("--db", default=os.environ.get("MEMLAB_DB"), help="SQLite file of a "
                     "durable store (default: $MEMLAB_DB; in memory when unset)")
    mcp.add_argument("--workspaces", default=os.environ.get("MEMLAB_MCP_WORKSPACES"),
                     help="comma-separated glob patterns of the workspaces the tools may touch, "
                     "e.g. 'team-a-*,shared' (default: $MEMLAB_MCP_WORKSPACES; all when unset)")

    check = sub.add_parser("check", help="verify a durable store's file", description=(
        "Verify a memlab database without changing it: SQLite's integrity check, each journal "
        "row's checksum, the numbering of rows (a deleted row, rows missing at the end), each "
        "payload, and a replay into memory. Exit 0 when sound; else exit 1 and one line per "
        "problem, naming the row (never its content)."))
    check.add_argument("db", help="the SQLite file")

    recover = sub.add_parser("recover", help="salvage a damaged store into a new file",
                             description=(
        "Copy every intact row of a memlab database (checksum matches, payload decodes, the "
        "operation applies after the rows kept before it) into a new database, and list the "
        "rows left out. The damaged file is only read. Exit 0 when every row was kept, 1 when "
        "some were left out."))
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


def _check_k(k: int) -> None:
    if not 1 <= k <= 100:
        raise _Fail(f"k must be in 1..100, got {k}")


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
            if head in _recipes() or head.endswith(".json"):
                raise _Fail(f"--config {entry!r}: the mode after ':' must be 'legacy' or "
                            f"'router', got {tail!r}")
        configs[name] = (mode, _load_config(spec))
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
        config, measures = _load_config(args.config), _measures(args.measures)
        _writable_folder("--out", args.out)
        result = replay(_load_traces(args.trace), config, mode=args.mode,
                        k=args.k, measures=measures, seed=args.seed,
                        measure_on=args.measure_on)
        print(result.summary().to_string(float_format=lambda v: f"{v:.4f}"))
        print(_measure_on_line(args.measure_on))
        result.save(args.out)
        print(f"wrote {args.out} ({len(result.decisions)} queries, "
              f"{len(result.candidates)} candidate rows)")
        return 0
    if args.command == "experiment":
        from memlab.harness import Experiment
        _check_k(args.k)
        configs = _experiment_configs(args.config)
        if args.baseline is not None and args.baseline not in configs:
            raise _Fail(f"--baseline {args.baseline!r} is not one of the --config names "
                        f"{list(configs)}")
        measures = _measures(args.measures)
        _writable_folder("--out", args.out)
        out = Experiment(_load_trace(args.trace), configs, measures, args.baseline,
                         k=args.k, measure_on=args.measure_on)
        print(out.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print(_measure_on_line(args.measure_on))
        Path(args.out).mkdir(parents=True, exist_ok=True)
        out.table.to_csv(Path(args.out) / "experiment.csv", index=False)
        out.per_query.to_csv(Path(args.out) / "per_query.csv", index=False)
        print(f"wrote {args.out}/experiment.csv and per_query.csv")
        return 0
    if args.command == "sweep":
        from memlab.harness import sweep
        _check_k(args.k)
        if args.workers < 1:
            raise _Fail(f"--workers must be at least 1, got {args.workers}")
        if args.address is not None and args.executor != "dask":
            raise _Fail(f"--address {args.address!r} needs --executor dask, got "
                        f"--executor {args.executor}")
        grid, base, measures = _grid(args.grid), _load_config(args.config), \
            _measures(args.measures)
        _writable_folder("--out", args.out)
        out = sweep(_load_trace(args.trace), grid, base=base,
                    k=args.k, measures=measures, executor=args.executor,
                    address=args.address, n_workers=args.workers,
                    counterfactual=args.counterfactual, measure_on=args.measure_on)
        print(out.table.to_string(index=False, float_format=lambda v: f"{v:.4f}"))
        print(_measure_on_line(args.measure_on))
        Path(args.out).mkdir(parents=True, exist_ok=True)
        out.table.to_csv(Path(args.out) / "sweep.csv", index=False)
        print(f"wrote {args.out}/sweep.csv")
        return 0
    if args.command == "serve":
        if not 0 <= args.port <= 65535:
            raise _Fail(f"--port must be in 0..65535, got {args.port}")
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
        state = ServiceState(db_path=args.db, record=args.record,
                             maintenance=not args.no_maintenance, limits=Limits.from_env(),
                             record_max_bytes=args.record_max_bytes,
                             record_redact=args.record_redact)
        hosts = [*LOCAL_HOSTS, args.host, *args.allow_host]
        if warning:
            print(warning, file=sys.stderr)  # loudly, once the store has opened
        uvicorn.run(create_app(state, keys=keys, allowed_hosts=hosts),
                    host=args.host, port=args.port, log_level="warning")
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
        server = create_mcp_server(ServiceState(db_path=args.db), workspaces=workspaces)
        asyncio.run(serve_stdio(server))  # answers requests holding lone surrogates, too
        return 0
    if args.command == "check":
        from memlab.journal_repair import check_journal
        problems = check_journal(args.db)
        for line in problems:
            print(f"{args.db}: {line}")
        if not problems:
            print(f"{args.db}: ok")
        return 1 if problems else 0
    if args.command == "compact":
        from memlab.store import MemoryStore
        if not Path(args.db).is_file():
            raise _Fail(f"db {args.db!r} does not exist (or is not a file)")
        store = MemoryStore(path=args.db, compact_after=None)
        try:
            report = store.compact()
            before = Path(args.db).stat().st_size
            if args.vacuum:
                store.journal.vacuum()
        finally:
            store.close()
        if args.vacuum:
            print(f"{args.db}: vacuumed, {before:,} -> {Path(args.db).stat().st_size:,} bytes")
        if report.upto:
            print(f"{args.db}: compacted rows 1..{report.upto} ({report.rows_removed} journal "
                  f"rows removed; snapshot {report.snapshot_bytes:,} bytes)")
        else:
            print(f"{args.db}: nothing to compact (no journal rows after the latest snapshot)")
        return 0
    if args.command == "recover":
        from memlab.journal_repair import recover_journal
        if Path(args.out).exists():
            raise _Fail(f"--out {args.out!r} already exists; recover never overwrites a file")
        report = recover_journal(args.db, args.out)
        for line in report.problems:
            print(f"{args.db}: {line}")
        print(f"kept {report.kept} of the {report.total} rows found; wrote {args.out}")
        return 0 if report.kept == report.total and not report.problems else 1
    if args.command == "eval":
        from memlab.evaluation import check_data_root, run_eval, to_markdown
        _check_k(args.k)
        if args.data is None:
            from memlab.datasets import shared_data_dir
            args.data = str(shared_data_dir())
        check_data_root(args.data, tuple(args.datasets), option="--data")
        _writable_folder("--out", args.out)
        table = run_eval(args.data, out=args.out, k=args.k, dense=args.dense,
                         datasets=tuple(args.datasets), measure_on=args.measure_on)
        print(to_markdown(table))
        print(_measure_on_line(args.measure_on))
        print(f"wrote {args.out}/results.csv and {args.out}/results.md")
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
    args = parser.parse_args(argv)
    try:
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
