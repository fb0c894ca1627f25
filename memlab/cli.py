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
    args = parser.parse_args(argv)
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
