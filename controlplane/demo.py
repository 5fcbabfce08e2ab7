"""`make run`: our sidecar on real Config Sync, on a real node, driven through a grow-and-prune cycle.

With no kubeconfig:
1. the local stack in namespaces of its own (`controlplane.stack`): etcd, kube-apiserver,
   kube-controller-manager, kube-scheduler, a real kubelet with containerd and runc, kube-proxy;
2. Config Sync as released (v1.25.0; OBJCOUNT_CONFIGSYNC_VERSION names another pinned release),
   its images built from the pinned source, git-sync and the OpenTelemetry Collector from theirs (see
   `controlplane.images`), and a git server on the node's network serves the sample repository;
3. our sidecar installed as the README says: the webhook runs as Pods of our image (built from this
   checkout's Dockerfile) behind its Service and adds the sidecar to each reconciler Pod; Config Sync is
   not changed;
4. a RootSync whose repository the demo commits to with git, growing and then pruned (`PHASES`). The
   real reconciler applies and prunes the objects; the sidecar in its Pod counts them and resizes the
   reconciler in place (the shipped target, `in-place`: no rollout);
5. a live table, side by side: the counts the sidecar recorded, its recommendation, what the kubelet
   reports the running reconciler container requests, and its memory cgroup as the kubelet made it
   (limit, working set, peak).

Each phase lasts until the reconciler reports its commit synced, the sidecar has counted it and applied
the size it recommends, and that size runs, all of it for `HOLD` seconds. Ctrl-C stops everything.
git-sync fetches each commit on its next poll, every 15 s (Config Sync's default; `--git-period` sets the
RootSync's `spec.git.period`); the sidecar scales down after `SCALE_DOWN_DELAY` seconds
(`--scale-down-delay`).
With `--kubeconfig PATH` (`make run CLUSTER=PATH`), and only then, the service runs against that cluster
instead, with the settings from the environment: an exported `$KUBECONFIG` is not taken for a request to
touch the cluster it names (most SREs have one set); the local stack runs, and a line says so.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from fractions import Fraction
from types import FrameType
from typing import cast

from rich.console import Console
from rich.live import Live
from rich.table import Table

from autoscaler.core import quantity
from autoscaler.core.annotations import restored_counts
from autoscaler.core.quantity import QuantityError
from autoscaler.kube.report import record_of
from autoscaler.service import main as service
from autoscaler.service.settings import SettingsError, load_settings
from controlplane.configsync_build import VERSION, build_configsync
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.images import configsync_node_images
from controlplane.kubernetes_build import build_binaries
from controlplane.seed import JSON, configmaps_yaml
from controlplane.stack import NodeStack, node_images
from controlplane.status_checks import synced
from inventory.core.ids import RECONCILER_CONTAINER, RSyncKey
from inventory.core.objects import RSync
from inventory.core.sync_progress import sync_progress
from inventory.kube import kubeapi

SAMPLE = RSyncKey("RootSync", NAMESPACE, "root-sync")
APPS = "demo"  # the namespace of the ConfigMaps (the reconciler creates it: an implicit Namespace)
# ConfigMaps in each commit: grow, then a prune. Small enough for a cycle under 3 minutes here: the real
# reconciler applies about 19 objects a second on 2 cores (BENCHMARKS.md, "make run").
PHASES = (100, 800, 200)
SCALE_DOWN_DELAY = 10  # seconds; shortened so the demo shows a scale-down (the default is 600)
HOLD = 3.0  # seconds a phase's end state must hold (and stays on screen)
PHASE_TIMEOUT = 600.0
MiB = 1 << 20


@dataclass(frozen=True)
class Row:
    elapsed: float
    commit: str
    reconciler: str
    source: str
    inventory: str
    recommended: str
    applied: str
    running: str
    cgroup_limit: str
    memory: str

    def state(self) -> tuple[str, ...]:
        """What makes a new row: everything shown but the time and the memory measured (which is updated
        in the current row instead)."""
        return (
            self.commit,
            self.reconciler,
            self.source,
            self.inventory,
            self.recommended,
            self.applied,
            self.running,
            self.cgroup_limit,
        )


@dataclass
class Demo:
    config_sync: NodeConfigSync
    api: kubeapi.KubeClient
    started: float = field(default_factory=time.monotonic)
    commit: str = ""
    phase: str = "starting"

    def observe(self) -> Row:
        rsync = cast(RSync, self.api.get(kubeapi.ROOTSYNC, SAMPLE.namespace, SAMPLE.name))
        counts, record = restored_counts(rsync), record_of(SAMPLE.kind, rsync)
        limit, memory = self._process_memory()
        return Row(
            time.monotonic() - self.started,
            self.phase,
            self._reconciler_status(rsync),
            "?" if counts.source is None else str(counts.source),
            "?" if counts.sync is None else str(counts.sync),
            record.recommended or "-",
            record.applied or "-",
            self._running_requests(),
            limit,
            memory,
        )

    def _reconciler_status(self, rsync: RSync) -> str:
        if not sync_progress(rsync).reported:
            return "starting"
        return "synced" if synced(cast(JSON, rsync), self.commit) else "syncing"

    def _running_requests(self) -> str:
        """The running reconciler container's requests, as the kubelet reports it runs them."""
        pod = cast(JSON, self.config_sync.reconciler_pod(SAMPLE) or {})
        statuses: list[JSON] = pod.get("status", {}).get("containerStatuses") or []
        reconciler = next((c for c in statuses if c.get("name") == RECONCILER_CONTAINER), {})
        requests = (reconciler.get("resources") or {}).get("requests")
        return f"{requests.get('cpu', '?')}/{requests.get('memory', '?')}" if requests else "-"

    def _process_memory(self) -> tuple[str, str]:
        """The running reconciler container's memory cgroup, as the kubelet made it: its limit, and its
        working set (peak)."""
        pod = cast(JSON, self.config_sync.reconciler_pod(SAMPLE) or {})
        statuses: list[JSON] = pod.get("status", {}).get("containerStatuses") or []
        reconciler = next((c for c in statuses if c.get("name") == RECONCILER_CONTAINER), None)
        if reconciler is None or "running" not in reconciler.get("state", {}):
            return "-", "-"
        try:
            memory = self.config_sync.stack.container_memory(reconciler["containerID"])
        except (OSError, LookupError, KeyError):  # between a container's exit and its replacement
            return "-", "-"
        limit = "none" if memory.limit is None else f"{memory.limit // MiB}Mi"
        return limit, f"{memory.working_set // MiB}Mi ({memory.peak // MiB}Mi)"

    def settled(self, row: Row, now: float) -> bool:
        """The commit is synced and counted, the sidecar applied what it recommends (no scale-down is
        waiting), that memory runs (as the kubelet reports it, its memory cgroup read), and all of it
        has held for `HOLD` seconds: the sidecar writes its counts and then its decision, so a
        recommendation seen just after the counts changed may be the previous one."""
        wanted = _memory(row.recommended)
        return (
            row.commit == self.phase
            and row.reconciler == "synced"
            and row.source == self.phase.split()[0]
            and wanted is not None
            and row.recommended == row.applied
            and _memory(row.running) == wanted
            and row.cgroup_limit != "-"
            and now - row.elapsed >= HOLD
        )


def _memory(shown: str) -> Fraction | None:
    """The memory of a shown `cpu/memory` (or a bare memory quantity); None when there is none."""
    try:
        return quantity.parse(shown.rpartition("/")[2])
    except QuantityError:
        return None


def table(rows: list[Row], last: int = 18, scale_down_delay: float = SCALE_DOWN_DELAY) -> Table:
    view = Table(
        title=f"{SAMPLE} on Config Sync {VERSION}: object counts and the reconciler's size "
        f"(scale-down delay {scale_down_delay:g} s)",
        caption="source, inventory, recommended: what our sidecar recorded on the RootSync; running: the "
        "requests the kubelet reports the reconciler runs with (resized in place); limit and working set "
        "(peak): the running reconciler container's memory cgroup, made by the kubelet",
    )
    for column in (
        "t (s)",
        "commit",
        "reconciler",
        "source",
        "inventory",
        "recommended",
        "running",
        "limit",
        "working set (peak)",
    ):
        view.add_column(column)
    for row in rows[-last:]:
        view.add_row(
            f"{row.elapsed:5.1f}",
            row.commit,
            row.reconciler,
            row.source,
            row.inventory,
            row.recommended,
            row.running,
            row.cgroup_limit,
            row.memory,
        )
    return view


def row_line(row: Row) -> str:
    """A row as one line of progress, for output that is not a terminal."""
    return (
        f"{row.elapsed:6.1f} s  commit {row.commit}  reconciler {row.reconciler}  source {row.source}  "
        f"inventory {row.inventory}  recommended {row.recommended}  running {row.running}  "
        f"limit {row.cgroup_limit}  working set (peak) {row.memory}"
    )


def drive(demo: Demo, rows: list[Row], stop: threading.Event, once: bool, failed: list[str]) -> None:
    """Commit each phase's objects, and go on once it has settled (the table shows it meanwhile)."""
    while not stop.is_set():
        for objects in PHASES:
            demo.commit = demo.config_sync.commit(
                SAMPLE, {"configmaps.yaml": configmaps_yaml(objects, "cm", APPS)}
            )
            demo.phase = f"{objects} objects"
            deadline = time.monotonic() + PHASE_TIMEOUT
            while not (rows and demo.settled(rows[-1], time.monotonic() - demo.started)):
                if time.monotonic() > deadline:
                    failed.append(f"{demo.phase}: not settled within {PHASE_TIMEOUT:.0f} s")
                    stop.set()
                if stop.wait(0.5):
                    return
        if once:
            stop.set()


def _rows(demo: Demo, stop: threading.Event, rows: list[Row]) -> Iterator[list[Row]]:
    while not stop.is_set():
        row = demo.observe()
        if rows and row.state() == rows[-1].state():
            rows[-1] = replace(rows[-1], memory=row.memory)
        else:
            rows.append(row)
        yield rows
        stop.wait(0.5)


def start_sample(config_sync: NodeConfigSync, api: kubeapi.KubeClient, git_period: float | None) -> None:
    """The sample repository's first commit, and its RootSync, fetching every `git_period` seconds (None:
    Config Sync's default)."""
    config_sync.commit(SAMPLE, {"configmaps.yaml": configmaps_yaml(PHASES[0], "cm", APPS)})
    api.create(kubeapi.ROOTSYNC, SAMPLE.namespace, config_sync.rsync(SAMPLE, git_period_s=git_period))


def run_local(
    once: bool = False,
    live: bool = True,
    *,
    git_period: float | None = None,
    scale_down_delay: float = SCALE_DOWN_DELAY,
) -> int:
    """The demo on the local stack: the RootSync fetching every `git_period` seconds (None: Config Sync's
    default), the sidecar scaling down after `scale_down_delay` seconds."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    # During set-up a signal unwinds through `finally`, which removes the stack; once the cycle runs, it
    # ends the cycle, and the table is printed before the stack is removed.
    signal.signal(signal.SIGTERM, interrupt)
    console = Console()
    # Piped (CI, `| tee`), a live view shows nothing until the end: print each step and row as a line.
    live = live and console.is_terminal
    began = time.monotonic()
    console.print(
        "building or reusing Config Sync, the Kubernetes binaries and the node's images (cold: minutes)"
    )
    build = build_configsync()
    stack = NodeStack(build_binaries(), [*node_images(), *configsync_node_images(build)])
    console.print(
        f"built or reused in {time.monotonic() - began:.0f} s; starting the local stack with a real node"
    )
    failed: list[str] = []
    config_sync: NodeConfigSync | None = None
    stack.start()
    try:
        console.print(f"local stack with a real node ready in {stack.startup_seconds:.1f} s")
        config_sync = NodeConfigSync(stack, build).start()
        api = config_sync.api
        assert api is not None
        config_sync.install_sidecar(
            stack.sandbox.work_dir / "certs", {"OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": f"{scale_down_delay:g}"}
        )
        console.print(f"Config Sync {VERSION} installed; our webhook's Pods add the sidecar")
        console.print(f"  export KUBECONFIG={stack.plane.kubeconfig}   # to look; Ctrl-C stops")
        console.print(f"  {stack.bin_dir / 'kubectl'} get pods -A   # kubectl, built with the stack")
        surface = api.api_resource_types()
        console.print(f"  the API server serves {surface} resource types (the default sizing counts them)")
        start_sample(config_sync, api, git_period)
        demo = Demo(config_sync, api)
        rows: list[Row] = []
        signal.signal(signal.SIGTERM, on_signal)
        signal.signal(signal.SIGINT, on_signal)
        threading.Thread(target=drive, args=(demo, rows, stop, once, failed), daemon=True).start()
        if live:
            with Live(
                table(rows, scale_down_delay=scale_down_delay), console=console, refresh_per_second=4
            ) as view:
                for shown in _rows(demo, stop, rows):
                    view.update(table(shown, scale_down_delay=scale_down_delay))
        else:
            printed = 0
            for shown in _rows(demo, stop, rows):
                for row in shown[printed:]:
                    console.print(row_line(row), highlight=False)
                printed = len(shown)
            console.print(table(rows, last=len(rows), scale_down_delay=scale_down_delay))
        outcome = "failed: " + "; ".join(failed) if failed else "done"
        console.print(
            f"cycle {outcome}: {time.monotonic() - demo.started:.0f} s from the RootSync's creation, "
            f"{time.monotonic() - began:.0f} s in all"
        )
    finally:
        if config_sync is not None:
            config_sync.stop()
        stack.stop()
        console.print("local stack stopped and removed")
    return 1 if failed else 0


def run_demo(
    kubeconfig: str | None = None,
    once: bool = False,
    live: bool = True,
    *,
    git_period: float | None = None,
    scale_down_delay: float = SCALE_DOWN_DELAY,
) -> int:
    if not kubeconfig:
        if os.environ.get("KUBECONFIG"):
            print(
                f"KUBECONFIG is set ({os.environ['KUBECONFIG']}): not used; this runs the local stack "
                "(`make run CLUSTER=PATH` runs the service against PATH's cluster)",
                flush=True,
            )
        return run_local(once=once, live=live, git_period=git_period, scale_down_delay=scale_down_delay)
    os.environ.setdefault("OBJCOUNT_KUBECONFIG", kubeconfig)
    try:
        settings = load_settings()
    except SettingsError as error:
        print(f"the demo: against {kubeconfig}, the service needs its settings: {error}", file=sys.stderr)
        return 2
    return service.run(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m controlplane.demo",
        description="`make run`: a local control plane with a sample RootSync, driven by the service.",
    )
    parser.add_argument(
        "--kubeconfig",
        help="run the service against this cluster instead of the local stack ($KUBECONFIG is not used)",
    )
    parser.add_argument("--once", action="store_true", help="stop after one grow-and-prune cycle")
    parser.add_argument("--no-live", action="store_true", help="print the table at the end instead of live")
    local = parser.add_argument_group("on the local stack (without a kubeconfig)")
    local.add_argument(
        "--git-period",
        type=float,
        metavar="SECONDS",
        help="seconds between git-sync's fetches of the sample repository (the RootSync's spec.git.period; "
        "default: Config Sync's 15): each commit waits for the next fetch",
    )
    local.add_argument(
        "--scale-down-delay",
        type=float,
        default=SCALE_DOWN_DELAY,
        metavar="SECONDS",
        help="seconds a lower size must hold before the sidecar scales down (default: "
        f"{SCALE_DOWN_DELAY:g}; the service's own default is 600)",
    )
    args = parser.parse_args(argv)
    if args.git_period is not None and args.git_period <= 0:
        parser.error("--git-period must be positive")
    if args.scale_down_delay < 0:
        parser.error("--scale-down-delay must not be negative")
    return run_demo(
        args.kubeconfig,
        once=args.once,
        live=not args.no_live,
        git_period=args.git_period,
        scale_down_delay=args.scale_down_delay,
    )


if __name__ == "__main__":
    sys.exit(main())
