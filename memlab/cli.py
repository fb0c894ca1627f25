"""The ``memlab`` command."""

from __future__ import annotations

import argparse
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="memlab", description="memlab: memory surfacing for "
                                     "LLM agents, as a research toolkit.")
    sub = parser.add_subparsers(dest="command", required=True)
    demo = sub.add_parser("demo", help="build the Apollo fixture memory, ask its queries in both "
                          "modes and print the score breakdowns")
    demo.add_argument("--out", default="out/demo", help="folder for candidates.csv and the plot "
                      "(default: out/demo)")
    demo.add_argument("-k", type=int, default=5, help="items per context, 1..100 (default: 5)")
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
