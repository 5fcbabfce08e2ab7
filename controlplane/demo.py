"""`make run`: our sidecar on real Config Sync, driven through a grow-and-prune cycle.

With no kubeconfig:
1. the local control plane (etcd, kube-apiserver, kube-controller-manager) and Config Sync v1.22.0 as
   released: its reconciler-manager and reconcilers, built from the pinned source, run by the node
   harness (PLAYED BY US: the kubelet; the processes, their memory cgroups and OOM kills are real);
2. our sidecar installed as the README says: the admission webhook (`objcount run` in webhook mode, on
   loopback here) adds it to each reconciler Pod; Config Sync is not changed;
3. a RootSync whose source the demo commits as git-sync would (PLAYED BY US: git-sync), growing and then
   pruned (`PHASES`). The real reconciler applies and prunes the objects; the sidecar in its Pod counts
   them and sizes the reconciler through `spec.override` (target `rsync-override`);
4. a live table, side by side: the counts the sidecar recorded, its recommendation, what the
   reconciler-manager put into the Deployment, the memory limit of the reconciler's cgroup and the
   process's measured memory.

Each phase lasts until the reconciler reports its commit synced and the recommended size runs, then
`HOLD` seconds more. Ctrl-C stops everything. With a kubeconfig (`$KUBECONFIG` or `--kubeconfig`), the
service runs against that cluster instead, with the settings from the environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from types import FrameType
from typing import cast

from rich.console import Console
from rich.live import Live
from rich.table import Table

from autoscaler import quantity, service
from autoscaler.annotations import restored_counts
from autoscaler.quantity import QuantityError
from autoscaler.report import record_of
from autoscaler.settings import SettingsError, load_settings
from controlplane import LocalControlPlane, build_binaries
from controlplane.configsync import (
    NAMESPACE,
    ConfigSyncStack,
    build_configsync,
    install_sidecar,
    rootsync,
    sidecar_template_text,
    synced,
    webhook_env,
)
from controlplane.launcher import free_port
from controlplane.seed import JSON, configmaps_yaml
from inventory import kubeapi
from inventory.ids import RSyncKey, reconciler_name
from inventory.objects import RSync
from inventory.sync_progress import sync_progress

SAMPLE = RSyncKey("RootSync", NAMESPACE, "root-sync")
APPS = "demo"  # the namespace of the ConfigMaps (the reconciler creates it: an implicit Namespace)
# ConfigMaps in each commit: grow, then a prune. Small enough for a cycle under 3 minutes here: the real
# reconciler applies about 19 objects a second on 2 cores (BENCHMARKS.md, "make run").
PHASES = (100, 800, 200)
SCALE_DOWN_DELAY = 10  # seconds; shortened so the demo shows a scale-down (the default is 600)
HOLD = 2.0  # seconds a settled phase stays on screen
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
    deployment: str
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
            self.deployment,
            self.cgroup_limit,
        )


@dataclass
class Demo:
    stack: ConfigSyncStack
    api: kubeapi.KubeApi
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
            self._deployment_resources(),
            limit,
            memory,
        )

    def _reconciler_status(self, rsync: RSync) -> str:
        if not sync_progress(rsync).reported:
            return "starting"
        return "synced" if synced(cast(JSON, rsync), self.commit) else "syncing"

    def _deployment_resources(self) -> str:
        """The reconciler container's requests in the Deployment the reconciler-manager wrote."""
        try:
            deployment = self.api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(SAMPLE))
        except kubeapi.NotFound:
            return "-"
        containers = deployment["spec"]["template"]["spec"]["containers"]
        requests = (
            next(c for c in containers if c["name"] == "reconciler").get("resources", {}).get("requests")
        )
        return f"{requests.get('cpu', '?')}/{requests.get('memory', '?')}" if requests else "-"

    def _process_memory(self) -> tuple[str, str]:
        """The running reconciler's cgroup limit, and its resident memory (peak) from /proc."""
        pod = self.stack.reconciler_pod(SAMPLE)
        state = self.stack.harness.container(pod["metadata"]["name"]) if pod else None
        if state is None:
            return "-", "-"
        try:
            limit = state.cgroup.limit()
            rss, peak = (kib // 1024 for kib in state.resident_kib())
        except OSError:  # between a process's exit and its replacement
            return "-", "-"
        return ("none" if limit is None else f"{limit // MiB}Mi"), f"{rss}Mi ({peak}Mi)"

    @staticmethod
    def settled(row: Row) -> bool:
        """The commit is synced, and the recommended memory is in the Deployment and the running cgroup."""
        wanted = _memory(row.recommended)
        return (
            row.reconciler == "synced"
            and wanted is not None
            and _memory(row.deployment) == wanted
            and (_memory(row.cgroup_limit) == wanted)
        )


def _memory(shown: str) -> Fraction | None:
    """The memory of a shown `cpu/memory` (or a bare memory quantity); None when there is none."""
    try:
        return quantity.parse(shown.rpartition("/")[2])
    except QuantityError:
        return None


def table(rows: list[Row], last: int = 18) -> Table:
    view = Table(
        title=f"{SAMPLE} on Config Sync v1.22.0: object counts and the reconciler's size "
        f"(scale-down delay {SCALE_DOWN_DELAY} s)",
        caption="source, inventory, recommended: what our sidecar recorded on the RootSync; Deployment: "
        "reconciler requests the reconciler-manager wrote; limit and RSS (peak): the running reconciler "
        "process's memory cgroup and /proc (the process is real; its Pod is run by our node harness)",
    )
    for column in (
        "t (s)",
        "commit",
        "reconciler",
        "source",
        "inventory",
        "recommended",
        "Deployment",
        "limit",
        "RSS (peak)",
    ):
        view.add_column(column)
    for row in rows[-last:]:
        view.add_row(f"{row.elapsed:5.1f}", *row.state(), row.memory)
    return view


def drive(demo: Demo, rows: list[Row], stop: threading.Event, once: bool, failed: list[str]) -> None:
    """Commit each phase's objects, and go on once it has settled (the table shows it meanwhile)."""
    while not stop.is_set():
        for objects in PHASES:
            demo.commit = demo.stack.commit(SAMPLE, {"configmaps.yaml": configmaps_yaml(objects, "cm", APPS)})
            demo.phase = f"{objects} objects"
            deadline = time.monotonic() + PHASE_TIMEOUT
            while not (rows and rows[-1].commit == demo.phase and demo.settled(rows[-1])):
                if time.monotonic() > deadline:
                    failed.append(f"{demo.phase}: not settled within {PHASE_TIMEOUT:.0f} s")
                    stop.set()
                if stop.wait(0.5):
                    return
            if stop.wait(HOLD):
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


def start_webhook(stack: ConfigSyncStack, work_dir: Path) -> subprocess.Popen[bytes]:
    """The sidecar installed as the README says, with our sidecar settings for the demo in its template;
    the webhook served by `objcount run` on loopback (PLAYED BY US: its Deployment's Pods). Returns once
    it serves: a reconciler Pod created before that starts without the sidecar (the webhook fails open)."""
    assert stack.api is not None
    port, health_port = free_port(), free_port()
    install_sidecar(stack.api, work_dir / "certs", webhook_url=f"https://127.0.0.1:{port}/mutate")
    template = work_dir / "sidecar.yaml"
    template.write_text(sidecar_template_text({"OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": str(SCALE_DOWN_DELAY)}))
    env = {
        **os.environ,
        **webhook_env(work_dir / "certs", template, port),
        "OBJCOUNT_BIND_ADDRESS": "127.0.0.1",
        "OBJCOUNT_METRICS_PORT": str(free_port()),
        "OBJCOUNT_HEALTH_PORT": str(health_port),
        "OBJCOUNT_LOG_FORMAT": "text",
    }
    log = work_dir / "webhook.log"
    with log.open("wb") as out:
        webhook = subprocess.Popen(
            [sys.executable, "-m", "autoscaler.cli", "run"], env=env, stdout=out, stderr=out
        )
    deadline = time.monotonic() + 30
    while not _serves(f"http://127.0.0.1:{health_port}/readyz"):
        if webhook.poll() is not None or time.monotonic() > deadline:
            webhook.kill()
            raise RuntimeError(f"the webhook did not start; {log}:\n{log.read_text()[-2000:]}")
        time.sleep(0.1)
    return webhook


def _serves(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def run_local(once: bool = False, live: bool = True) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    console = Console()
    began = time.monotonic()
    plane = LocalControlPlane(build_binaries())
    webhook = None
    failed: list[str] = []
    try:
        plane.start()
        console.print(f"local control plane ready in {plane.startup_seconds:.1f} s at {plane.server}")
        with ConfigSyncStack(plane, build_configsync()) as stack:
            assert stack.api is not None
            webhook = start_webhook(stack, plane.work_dir)
            console.print(f"Config Sync {stack.build.root.name} installed; our webhook adds the sidecar")
            console.print(f"  export KUBECONFIG={plane.kubeconfig}   # to look with kubectl; Ctrl-C stops")
            console.print(f"  logs: {plane.work_dir}/webhook.log, {stack.harness.work_dir}/logs/")
            surface = stack.api.api_resource_types()
            console.print(
                f"  the API server serves {surface} resource types (the default sizing counts them)"
            )
            stack.commit(SAMPLE, {"configmaps.yaml": configmaps_yaml(PHASES[0], "cm", APPS)})
            stack.api.create(kubeapi.ROOTSYNC, SAMPLE.namespace, rootsync(SAMPLE.name))
            demo = Demo(stack, stack.api)
            rows: list[Row] = []
            threading.Thread(target=drive, args=(demo, rows, stop, once, failed), daemon=True).start()
            if live:
                with Live(table(rows), console=console, refresh_per_second=4) as view:
                    for shown in _rows(demo, stop, rows):
                        view.update(table(shown))
            else:
                for _ in _rows(demo, stop, rows):
                    pass
                console.print(table(rows, last=len(rows)))
            outcome = "failed: " + "; ".join(failed) if failed else "done"
            console.print(
                f"cycle {outcome}: {time.monotonic() - demo.started:.0f} s from the RootSync's creation, "
                f"{time.monotonic() - began:.0f} s in all"
            )
    finally:
        if webhook is not None:
            webhook.send_signal(signal.SIGTERM)
            console.print(f"objcount webhook exited with {webhook.wait(30)}")
        plane.cleanup()
    return 1 if failed else 0


def run_demo(kubeconfig: str | None = None, once: bool = False, live: bool = True) -> int:
    kubeconfig = kubeconfig or os.environ.get("KUBECONFIG")
    if not kubeconfig:
        return run_local(once=once, live=live)
    os.environ.setdefault("OBJCOUNT_KUBECONFIG", kubeconfig)
    try:
        settings = load_settings()
    except SettingsError as error:
        print(
            f"objcount demo: against {kubeconfig}, the service needs its settings: {error}", file=sys.stderr
        )
        return 2
    return service.run(settings)
