"""The ``pipepool`` command line."""

from __future__ import annotations

import argparse
import sys


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="pipepool", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    bench = sub.add_parser("bench", help="race pipepool against the standard library's pools")
    bench.add_argument("--tasks", type=int, default=20000, help="no-op tasks per round")
    bench.add_argument("-j", "--jobs", type=int, default=None, help="workers (default: cores)")
    bench.add_argument("--rounds", type=int, default=3, help="interleaved rounds (median)")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "bench":
        from ._bench import race

        race(args.tasks, args.jobs, args.rounds)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main())
