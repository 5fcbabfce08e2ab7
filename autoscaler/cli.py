"""Command line: `objcount demo | status | version`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import version

from autoscaler.demo import run_demo


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="objcount", description="Object-count autoscaler for Config Sync reconcilers."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run against a local control plane with a sample RootSync")
    commands.add_parser("version", help="print the version")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(version("object-count-autoscaler"))
        return 0
    if args.command == "demo":
        return run_demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
