"""`make run`: the service against a local control plane, driven through a grow-and-shrink cycle.

With no kubeconfig: start the local control plane, install the CRDs and a sample RootSync with its
ResourceGroup, reconciler Deployment and a rendered source directory, run `objcount run` against it in
sidecar mode (target `deployment`), and show in a live table how the counts and the reconciler's
resources follow while a driver grows the source and the inventory, then prunes them. Ctrl-C stops
everything. With a kubeconfig (`$KUBECONFIG` or `--kubeconfig`), run the service against that cluster
instead, with the settings from the environment.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import FrameType
from typing import cast

from rich.console import Console
from rich.live import Live
from rich.table import Table

from autoscaler import service
from autoscaler.annotations import RECOMMENDED_ANNOTATION, restored_counts
from autoscaler.codecs import resources_of
from autoscaler.report import record_of
from autoscaler.settings import SettingsError, load_settings
from controlplane import LocalControlPlane, build_binaries
from controlplane.configsync import install_rsync_crds
from controlplane.launcher import free_port
from controlplane.seed import (
    configmaps_yaml,
    ensure_namespace,
    reconciler_deployment,
    resourcegroup,
    rsync,
    write_commit,
)
from inventory import kubeapi
from inventory.ids import ROOT_SYNC_NAMESPACE, RSyncKey, reconciler_name
from inventory.objects import RSync, annotations_of

SAMPLE = RSyncKey("RootSync", ROOT_SYNC_NAMESPACE, "root-sync")
SCALE_DOWN_DELAY = 15  # seconds; shortened so the demo shows a scale-down (the default is 600)
# (source objects, inventory objects, seconds to hold): grow, then a prune (source first, inventory after).
PHASES = [(100, 100, 6), (1000, 1000, 6), (3000, 3000, 6), (5000, 5000, 8), (400, 5000, 6), (400, 400, 30)]


def publish_commit(repo: Path, commit: int, objects: int) -> None:
    """A commit of `objects` ConfigMaps in the sync directory `config`, swapped in as git-sync does."""
    write_commit(repo, f"commit-{commit}", {"configmaps.yaml": configmaps_yaml(objects, "demo")})


def seed_sample(api: kubeapi.KubeApi, repo: Path) -> None:
    install_rsync_crds(api)
    ensure_namespace(api, ROOT_SYNC_NAMESPACE)
    api.create(kubeapi.ROOTSYNC, SAMPLE.namespace, rsync(SAMPLE, sync_dir="config"))
    api.create(kubeapi.RESOURCEGROUP, SAMPLE.namespace, resourcegroup(SAMPLE, PHASES[0][1]))
    api.create(kubeapi.DEPLOYMENT, ROOT_SYNC_NAMESPACE, reconciler_deployment(SAMPLE))
    publish_commit(repo, 0, PHASES[0][0])


@dataclass
class Row:
    elapsed: float
    phase: str
    source: str
    sync: str
    recommended: str
    applied: str


def observe(api: kubeapi.KubeApi, started: float, phase: str) -> Row:
    body = api.get(kubeapi.ROOTSYNC, SAMPLE.namespace, SAMPLE.name)
    counts, record = restored_counts(body), record_of("RootSync", cast(RSync, body))
    containers = api.get(kubeapi.DEPLOYMENT, ROOT_SYNC_NAMESPACE, reconciler_name(SAMPLE))["spec"][
        "template"
    ]["spec"]["containers"]
    applied = resources_of(next(c for c in containers if c["name"] == "reconciler")["resources"])
    recommended = record.recommended if RECOMMENDED_ANNOTATION in annotations_of(body) else None
    return Row(
        time.monotonic() - started,
        phase,
        "?" if counts.source is None else str(counts.source),
        "?" if counts.sync is None else str(counts.sync),
        recommended or "-",
        "-" if applied is None else f"{applied.cpu_request_m}m/{applied.memory_request_mib}Mi",
    )


def table(rows: list[Row]) -> Table:
    view = Table(
        title=f"{SAMPLE}: object counts and the reconciler's size (scale-down delay {SCALE_DOWN_DELAY} s)",
        caption="recommended: RSync annotation; applied: reconciler requests in the Deployment template",
    )
    for column in (
        "t (s)",
        "driver",
        "source (status)",
        "sync (status)",
        "recommended",
        "applied (template)",
    ):
        view.add_column(column)
    for row in rows[-16:]:
        view.add_row(f"{row.elapsed:5.1f}", row.phase, row.source, row.sync, row.recommended, row.applied)
    return view


def drive(api: kubeapi.KubeApi, repo: Path, stop: threading.Event, phase: list[str], once: bool) -> None:
    commit = 0
    while not stop.is_set():
        for source, inventory, hold in PHASES:
            commit += 1
            publish_commit(repo, commit, source)
            api.patch(kubeapi.RESOURCEGROUP, SAMPLE.namespace, SAMPLE.name, resourcegroup(SAMPLE, inventory))
            phase[0] = f"src {source} / inv {inventory}"
            if stop.wait(hold):
                return
        if once:
            stop.set()


def start_service(
    plane: LocalControlPlane, repo: Path, log: Path, key: RSyncKey = SAMPLE
) -> subprocess.Popen[bytes]:
    """`objcount run` in sidecar mode (target deployment) against the local control plane, as a process."""
    env = {
        **os.environ,
        "OBJCOUNT_KUBECONFIG": str(plane.kubeconfig),
        "OBJCOUNT_RSYNC_KIND": key.kind,
        "OBJCOUNT_RSYNC_NAME": key.name,
        "OBJCOUNT_RSYNC_NAMESPACE": key.namespace,
        "OBJCOUNT_TARGET": "deployment",
        "OBJCOUNT_SOURCE_ROOT": str(repo),
        "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": str(SCALE_DOWN_DELAY),
        "OBJCOUNT_BIND_ADDRESS": "127.0.0.1",
        "OBJCOUNT_METRICS_PORT": str(free_port()),
        "OBJCOUNT_HEALTH_PORT": str(free_port()),
        "OBJCOUNT_LOG_FORMAT": "text",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "autoscaler.cli", "run"], env=env, stdout=out, stderr=out
        )


def _rows(api: kubeapi.KubeApi, stop: threading.Event, phase: list[str]) -> Iterator[list[Row]]:
    rows: list[Row] = []
    started = time.monotonic()
    while not stop.is_set():
        row = observe(api, started, phase[0])
        if not rows or (row.source, row.sync, row.recommended, row.applied) != (
            rows[-1].source,
            rows[-1].sync,
            rows[-1].recommended,
            rows[-1].applied,
        ):
            rows.append(row)
        yield rows
        stop.wait(0.5)


def run_local(once: bool = False, live: bool = True) -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    console = Console()
    plane = LocalControlPlane(build_binaries(), controller_manager=False)
    process = None
    try:
        plane.start()
        console.print(f"local control plane ready in {plane.startup_seconds:.1f} s at {plane.server}")
        api = kubeapi.KubeApi.connect(str(plane.kubeconfig))
        repo = plane.work_dir / "repo"
        seed_sample(api, repo)
        log = plane.work_dir / "objcount.log"
        process = start_service(plane, repo, log)
        console.print(f"objcount run (sidecar mode, target deployment), logs in {log}")
        console.print(
            f"  export KUBECONFIG={plane.kubeconfig}   # to look with kubectl; Ctrl-C stops everything"
        )
        phase = ["starting"]
        threading.Thread(target=drive, args=(api, repo, stop, phase, once), daemon=True).start()
        rows: list[Row] = []
        if live:
            with Live(table(rows), console=console, refresh_per_second=4) as view:
                for rows in _rows(api, stop, phase):
                    view.update(table(rows))
        else:
            for latest in _rows(api, stop, phase):
                rows = latest
            console.print(table(rows))
    finally:
        if process is not None:
            process.send_signal(signal.SIGTERM)
            code = process.wait(30)
            console.print(f"objcount run exited with {code}")
        plane.cleanup()
    return 0


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
