"""The ``memlab`` command."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memlab", description="memlab: memory surfacing for "
                                     "LLM agents, as a research toolkit.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="replay the Apollo fixture's trace under the seed's "
                          "behaviour and memlab's default recipe; print the experiment table, "
                          "save the results and a score-breakdown plot")
    demo.add_argument("--out", default="out/demo", help="folder for the saved results, "
                      "experiment.csv and score_breakdown.png (default: out/demo)")
    demo.add_argument("-k", type=int, default=10, help="items per context, 1..100 (default: 10)")
    ev = sub.add_parser("eval", help="replay the shared public datasets (LoCoMo, MuSiQue) under "
                        "memlab's recipe, its no-graph ablation and BM25 baselines; write one "
                        "results table")
    ev.add_argument("--data", default="../shared/datasets", help="folder holding locomo/ and "
                    "hipporag/ as in the shared datasets' README (default: ../shared/datasets)")
    ev.add_argument("--out", default="out/eval", help="folder for results.csv and results.md "
                    "(default: out/eval)")
    ev.add_argument("-k", type=int, default=20, help="items per context, 1..100 (default: 20)")
    ev.add_argument("--dense", action="store_true", help="also run DEFAULT with hybrid dense "
                    "relevance (needs the 'dense' extra)")
    ev.add_argument("--datasets", nargs="+", default=["musique", "locomo"],
                    choices=["musique", "locomo"], help="which datasets (default: both)")
    args = parser.parse_args(argv)
    if args.command == "eval":
        from memlab.evaluation import run_eval, to_markdown

        try:
            table = run_eval(args.data, out=args.out, k=args.k, dense=args.dense,
                             datasets=tuple(args.datasets))
        except (ValueError, ImportError) as exc:
            print(f"memlab eval: error: {exc}", file=sys.stderr)
            return 2
        print(to_markdown(table))
        print(f"wrote {args.out}/results.csv and {args.out}/results.md")
        return 0
    if args.command == "demo":
        from memlab.demo import run_demo

        try:
            run_demo(args.out, k=args.k)
        except ValueError as exc:
            print(f"memlab demo: error: {exc}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
