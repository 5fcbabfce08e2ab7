"""Command line: `objcount demo | status | version`."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from importlib.metadata import version

from autoscaler.demo import run_demo
from inventory import kubeapi
from inventory.reader import read_status, render


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="objcount", description="Object-count autoscaler for Config Sync reconcilers."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("demo", help="run against a local control plane with a sample RootSync")
    status = commands.add_parser("status", help="list RSyncs with their recorded object counts")
    status.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    status.add_argument("--context", help="kubeconfig context")
    scope = status.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    commands.add_parser("version", help="print the version")
    return parser


def run_status(args: argparse.Namespace) -> int:
    try:
        api = kubeapi.KubeApi.connect(args.kubeconfig, context=args.context)
    except Exception as error:
        print(f"objcount status: cannot load cluster credentials: {error}", file=sys.stderr)
        return 1
    namespace = None if args.all_namespaces else (args.namespace or api.default_namespace)
    try:
        records = read_status(api, namespace)
    except kubeapi.ApiError as error:
        print(f"objcount status: {error}", file=sys.stderr)
        return 1
    finally:
        api.close()
    sys.stdout.write(render(records, args.output))
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "version":
        print(version("object-count-autoscaler"))
        return 0
    if args.command == "status":
        return run_status(args)
    if args.command == "demo":
        return run_demo()
    return 2


if __name__ == "__main__":
    sys.exit(main())
