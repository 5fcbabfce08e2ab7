"""Command line: `objcount run | status | recommend | grant-reposync | clean | version`.

Each command imports what it needs when it runs: `run` loads the service only. The tooling of a source
checkout is not here (the wheel and the image do not hold it): `make run` is `python -m controlplane.demo`,
the stress test `python -m profiles.stress`.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from importlib.metadata import version
from typing import TYPE_CHECKING, TypeVar

from autoscaler.core.sizing import DEFAULT_PRESET, PLATFORMS, PRESETS

if TYPE_CHECKING:
    from autoscaler.core.sizing import Load
    from inventory.kube.kubeapi import KubeApi

T = TypeVar("T")

EXIT_BAD_SETTINGS = 2


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="objcount", description="Object-count autoscaler for Config Sync reconcilers."
    )
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run the service (settings from OBJCOUNT_* variables and --config)")
    run.add_argument("--config", help="YAML file of settings (environment variables win)")
    recommend = commands.add_parser(
        "recommend", help="print the resources for an object count or a source, with the arithmetic"
    )
    what = recommend.add_mutually_exclusive_group(required=True)
    what.add_argument("--objects", type=int, help="max(source, sync) object count")
    what.add_argument(
        "--source", help="a directory of manifests: counted, and sized by their bytes in size-aware presets"
    )
    recommend.add_argument(
        "--profile", choices=sorted(PLATFORMS), default="standard", help="platform profile"
    )
    recommend.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=DEFAULT_PRESET,
        help="sizing preset",
    )
    recommend.add_argument(
        "--api-resources",
        type=int,
        help="resource types the cluster serves (`kubectl api-resources --no-headers | wc -l`); size-aware "
        "presets only; default: read from the cluster's discovery where a kubeconfig is found, else the "
        "preset's assumption",
    )
    recommend.add_argument(
        "--kubeconfig", help="the cluster whose API surface to read (default: $KUBECONFIG, ~/.kube/config)"
    )
    recommend.add_argument("--context", help="kubeconfig context")
    recommend.add_argument(
        "--offline", action="store_true", help="contact no cluster: assume the preset's API surface"
    )
    status = commands.add_parser(
        "status",
        help="list RSyncs with their recorded object counts, sizes, target and whether VPA applied it",
    )
    status.add_argument(
        "--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config, in-cluster)"
    )
    status.add_argument("--context", help="kubeconfig context")
    scope = status.add_mutually_exclusive_group()
    scope.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    scope.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    status.add_argument("-o", "--output", choices=["table", "json", "yaml"], default="table")
    grant = commands.add_parser(
        "grant-reposync",
        help="print the RBAC a RepoSync's sidecar needs (apply it with the RepoSync: kubectl apply -f -)",
    )
    grant.add_argument("namespace", help="the RepoSync's namespace")
    grant.add_argument(
        "name", nargs="?", default="repo-sync", help="the RepoSync's name (default: repo-sync)"
    )
    clean = commands.add_parser(
        "clean",
        help="after an uninstall: remove from each RSync our annotations and the reconciler override entry "
        "we wrote (one someone else set stays); Config Sync rolls a reconciler out once where one goes",
    )
    clean.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, ~/.kube/config)")
    clean.add_argument("--context", help="kubeconfig context")
    where = clean.add_mutually_exclusive_group()
    where.add_argument("-n", "--namespace", help="namespace (default: the context's, else default)")
    where.add_argument("-A", "--all-namespaces", action="store_true", help="every namespace")
    clean.add_argument("--dry-run", action="store_true", help="say what would be removed, remove nothing")
    commands.add_parser("version", help="print the version")
    return parser


def run_status(args: argparse.Namespace) -> int:
    from autoscaler.kube.report import read_status, render

    records = _on_cluster(args, "status", read_status)
    if records is None:
        return 1
    sys.stdout.write(render(records, args.output))
    return 0


def _on_cluster(args: argparse.Namespace, command: str, work: Callable[[KubeApi, str | None], T]) -> T | None:
    """`work` on the cluster of --kubeconfig/--context, in -n (the context's namespace) or -A (None);
    None after saying why it could not be done."""
    from inventory.kube import kubeapi

    try:
        api = kubeapi.KubeClient.connect(args.kubeconfig, context=args.context)
    except kubeapi.ApiError as error:
        print(f"objcount {command}: {error}", file=sys.stderr)
        return None
    namespace = None if args.all_namespaces else (args.namespace or api.default_namespace)
    try:
        return work(api, namespace)
    except kubeapi.ApiError as error:
        print(f"objcount {command}: {error}", file=sys.stderr)
        return None
    finally:
        api.close()


def run_service(args: argparse.Namespace) -> int:
    # Caught before the service's imports (a second or more on a busy node): a container's PID 1 gets
    # only the signals it handles, so a SIGTERM then (a Pod deleted as it starts) was lost, and the
    # kubelet killed the Pod's sidecar at the end of its grace period, 30 s later. The service takes
    # the handlers over and finds the stop already asked.
    stop = threading.Event()
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: stop.set())
    from autoscaler.service import main as service
    from autoscaler.service.settings import SettingsError, load_settings

    try:
        settings = load_settings(args.config)
    except SettingsError as error:
        print(f"objcount run: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    return service.run(settings, stop)


def run_recommend(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from autoscaler.core.sizing import Load, SizingError, explain
    from autoscaler.service.settings import Settings

    if args.objects is not None and args.objects < 0:
        print("objcount recommend: --objects must be 0 or more", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    settings = Settings(mode="cluster", platform=args.profile, preset=args.preset)
    profile = settings.profile()
    surface = args.api_resources
    if surface is None and profile.sizing.mib_per_api_resource and not args.offline:
        surface = _served_api_resources(args.kubeconfig, args.context, profile.sizing.assumed_api_resources)
    try:
        if args.source is None:
            load = Load(args.objects, api_resources=surface)
        else:
            load = replace(_read_source(args.source), api_resources=surface)
        print(explain(load, profile))
    except SourceUnreadable as error:
        print(f"objcount recommend: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    except SizingError as error:
        print(f"objcount recommend: {error}", file=sys.stderr)
        return 1
    return 0


def _served_api_resources(kubeconfig: str | None, context: str | None, assumed: int) -> int | None:
    """The resource types the cluster of the kubeconfig serves, from its discovery (what the service
    reads); None, said on stderr with what to pass instead, when there is no kubeconfig or no answer."""
    import os
    from pathlib import Path

    from inventory.kube import kubeapi

    advice = (
        f"the preset assumes {assumed}; pass --api-resources N (`kubectl api-resources --no-headers | wc -l`)"
    )
    default = Path(os.environ.get("KUBECONFIG", "~/.kube/config").split(os.pathsep)[0]).expanduser()
    in_cluster = "KUBERNETES_SERVICE_HOST" in os.environ
    if kubeconfig is None and not default.is_file() and not in_cluster:
        print(f"API surface: no kubeconfig found ({default}); {advice}", file=sys.stderr)
        return None
    try:
        api = kubeapi.KubeClient.connect(kubeconfig, context=context)
        try:
            served = api.api_resource_types()
        finally:
            api.close()
    except kubeapi.ApiError as error:
        print(f"API surface: cannot read the cluster's discovery ({error}); {advice}", file=sys.stderr)
        return None
    print(f"API surface: {served} resource types, from the discovery of {api.server}")
    return served


class SourceUnreadable(Exception):
    """--source names no readable directory of manifests."""


def _read_source(directory: str) -> Load:
    """What a directory of manifests gives the model (objects, KiB, kinds, path steps), with its objects
    by kind printed."""
    from pathlib import Path

    from autoscaler.core.sizing import Load
    from inventory.core.counts import describe_kinds, kinds_of
    from inventory.source.source_count import SourceError, count_directory, kib_of, rejection

    root = Path(directory)
    if not root.is_dir():
        raise SourceUnreadable(f"--source {directory}: not a directory")
    try:
        count = count_directory(root)
    except (SourceError, OSError) as error:
        raise SourceUnreadable(f"--source {directory}: {error}") from error
    if count.rejected:
        raise SourceUnreadable(
            f"--source {directory}: {rejection(count, listed=10)}; it would sync none of it"
        )
    print(f"source {root}: {count.objects} objects in {count.files} files ({describe_kinds(count.kinds)})")
    for reason in count.unread:
        print(f"not read (its objects are not counted: the count is a lower bound): {reason}")
    return Load(
        count.objects,
        kib_of(count.bytes),
        kinds_of(count.kinds),
        count.crd_path_steps,
        workload_path_steps=count.workload_path_steps,
    )


def run_grant_reposync(args: argparse.Namespace) -> int:
    import yaml

    from autoscaler.core.grants import GrantError, reposync_grant

    try:
        objects = reposync_grant(args.namespace, args.name)
    except GrantError as error:
        print(f"objcount grant-reposync: {error}", file=sys.stderr)
        return EXIT_BAD_SETTINGS
    sys.stdout.write(yaml.safe_dump_all(objects, sort_keys=False))
    return 0


def run_clean(args: argparse.Namespace) -> int:
    from autoscaler.kube.clean import clean

    cleaned = _on_cluster(args, "clean", lambda api, namespace: clean(api, namespace, dry_run=args.dry_run))
    if cleaned is None:
        return 1
    verb = "would remove" if args.dry_run else "removed"
    for each in cleaned:
        for what in each.removed:
            print(f"{each.key}: {'not ' + verb if each.error else verb} {what}")
        for what in each.kept:
            print(f"{each.key}: kept {what}")
        if each.error:
            print(f"{each.key}: refused ({each.error}); run again", file=sys.stderr)
    if not cleaned:
        print("nothing of ours on any RSync")
    return 1 if any(each.error for each in cleaned) else 0


def run_version(args: argparse.Namespace) -> int:
    print(version("object-count-autoscaler"))
    return 0


COMMANDS: dict[str, Callable[[argparse.Namespace], int]] = {
    "run": run_service,
    "status": run_status,
    "recommend": run_recommend,
    "grant-reposync": run_grant_reposync,
    "clean": run_clean,
    "version": run_version,
}


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return COMMANDS[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
