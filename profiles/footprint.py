"""Our containers' footprint as the kubelet reports it: the sidecar, the webhook and the controller.

    python -m profiles.footprint [--objects 1000] [--cycles 2] [--idle-seconds 60] [--admissions-per-second 5]
                                 [--rsyncs 1000] [--inventory 100] [--big 3] [--big-inventory 30000]
                                 [--rate 100] [--seconds 60]

On the local stack with a real node (Config Sync v1.22.0's Pods and ours run by the kubelet with
containerd, ours from the image built from this checkout; PLAYED BY US: the image's `python:3.11-slim`
base, see controlplane.images). Every 2 s the kubelet's summary API
(`/api/v1/nodes/NODE/proxy/stats/summary`, through the API server) gives each of our containers' working
set and CPU; at the end of each phase the peak is read from the memory cgroup the kubelet made for the
container (v1 `memory.max_usage_in_bytes`, v2 `memory.peak`: its largest usage since it started, page cache
included, so the peak of a later phase covers the earlier ones too; the summary API has no peak). The
controller's two replicas are reported apart: the one holding the Lease does the work. **start** is from the
install
to the first full count (the sidecar's first sync, the controller's first reconcile of every RSync).

1. Sidecar install, as the README says, with the shipped settings; one RootSync whose git source has
   `--objects` ConfigMaps. **idle**: `--idle-seconds` once it is synced and sized. **loaded**: `--cycles`
   times, a commit doubling the objects and one pruning them back, each synced by the real reconciler
   and counted by our sidecar, while Pods our webhook mutates are created with `dryRun=All` at
   `--admissions-per-second` (the API server calls the webhook through its Service for each).
2. The webhook and the RootSync removed; the cluster-mode install (`manifests/cluster`, two replicas),
   set to target `recommend`. The reconciler-manager is scaled to 0 first: the load is the one of
   `profiles.bench_load` (`--rsyncs` RepoSyncs with `--inventory`-entry ResourceGroups and `--big` with
   `--big-inventory`), which would otherwise start a thousand reconcilers on a 2-core machine. **idle**:
   `--idle-seconds` after every RSync has its recommendation. **loaded**: inventories changed at `--rate`
   per second for `--seconds`.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from controlplane.autoscaler_install import install_cluster, uninstall_webhook
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync, running_config_sync_on_node
from controlplane.seed import configmaps_yaml
from controlplane.status_checks import synced
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from profiles.bench_load import StatusWatch, drive, seed

JSON = dict[str, Any]
MiB = 1 << 20
SAMPLE_SECONDS = 2.0
NODE = kubeapi.Resource("", "v1", "nodes", "Node")
# Our containers, by Pod name prefix and container name (the shipped manifests).
SIDECAR_CONTAINER = "objcount-autoscaler"
CONTROLLER = "objcount-autoscaler"
OURS = {
    ("root-reconciler-", SIDECAR_CONTAINER): "sidecar",
    ("objcount-webhook-", "webhook"): "webhook",
    (f"{CONTROLLER}-", "autoscaler"): "controller",
}


def component_of(pod: str, container: str) -> str | None:
    return next(
        (name for (prefix, c), name in OURS.items() if pod.startswith(prefix) and c == container), None
    )


@dataclass
class Samples:
    """Working set (MiB) and CPU (millicores) of each of our containers, per phase, from the summary API."""

    working_set: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    cpu: dict[tuple[str, str], list[float]] = field(default_factory=lambda: defaultdict(list))
    peak: dict[tuple[str, str], float] = field(default_factory=dict)


def leader(api: kubeapi.KubeClient) -> str:
    """The cluster-mode replica holding the Lease ("" when there is none)."""
    try:
        lease = api.get(kubeapi.LEASE, NAMESPACE, CONTROLLER)
    except kubeapi.NotFound:
        return ""
    return str((lease.get("spec") or {}).get("holderIdentity") or "")


def label(pod: str, container: str, holder: str) -> str | None:
    """What a container is: ours by name, and for the controller which replica (they differ a lot)."""
    component = component_of(pod, container)
    if component == "controller":
        return "controller, leader" if pod == holder else "controller, standby"
    return component


def summary(api: kubeapi.KubeClient, node: str) -> JSON:
    result: JSON = api.request_json("GET", f"/api/v1/nodes/{node}/proxy/stats/summary")
    return result


def record(samples: Samples, phase: str, stats: JSON, holder: str) -> None:
    for pod in stats.get("pods") or []:
        if pod["podRef"]["namespace"] != NAMESPACE:
            continue
        for container in pod.get("containers") or []:
            component = label(pod["podRef"]["name"], container["name"], holder)
            memory = (container.get("memory") or {}).get("workingSetBytes")
            if component is None or memory is None:
                continue
            samples.working_set[(component, phase)].append(memory / MiB)
            nanocores = (container.get("cpu") or {}).get("usageNanoCores")
            if nanocores is not None:
                samples.cpu[(component, phase)].append(nanocores / 1e6)


def record_peaks(cs: NodeConfigSync, samples: Samples, phase: str) -> None:
    """The largest cgroup peak of each component's containers (the kubelet's cgroups, read on the node)."""
    assert cs.api is not None
    pods = orjson.loads(cs.api.list_page(kubeapi.POD, NAMESPACE))["items"]
    holder = leader(cs.api)
    for pod in pods:
        for status in (pod.get("status") or {}).get("containerStatuses") or []:
            component = label(pod["metadata"]["name"], status["name"], holder)
            if (
                component is None
                or not status.get("containerID")
                or "running" not in (status.get("state") or {})
            ):
                continue
            try:
                peak = cs.stack.container_memory(status["containerID"]).peak / MiB
            except (OSError, LookupError):
                continue  # gone between the list and the read
            samples.peak[(component, phase)] = max(peak, samples.peak.get((component, phase), 0.0))


class Sampler:
    """Samples the summary API every SAMPLE_SECONDS into the current phase, in a thread."""

    def __init__(self, api: kubeapi.KubeClient, node: str, samples: Samples) -> None:
        self.api, self.node, self.samples = api, node, samples
        self.phase = "start"
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stopping.wait(SAMPLE_SECONDS):
            try:
                record(self.samples, self.phase, summary(self.api, self.node), leader(self.api))
            except kubeapi.ApiError as error:  # a missed sample, said, not a stopped run
                print(f"summary API: {error}")

    def __enter__(self) -> Sampler:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stopping.set()
        self.thread.join()


def wait(condition: Callable[[], object], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: not after {timeout:.0f} s")
        time.sleep(1)


def idle(cs: NodeConfigSync, sampler: Sampler, seconds: float) -> None:
    sampler.phase = "idle"
    time.sleep(seconds)  # a benchmark's window, not a wait for a condition
    record_peaks(cs, sampler.samples, "idle")


@contextlib.contextmanager
def admissions(api: kubeapi.KubeClient, key: RSyncKey, per_second: float) -> Iterator[list[int]]:
    """Dry-run creations of the RSync's reconciler Pod at `per_second`, in a thread: the API server calls
    our webhook for each (through its Service) and stores nothing. Yields [Pods returned with our sidecar]."""
    template = api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))["spec"]["template"]
    metadata = {**template["metadata"], "generateName": "footprint-"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}
    mutated = [0]
    stopping = threading.Event()

    def run() -> None:
        while not stopping.wait(1 / per_second):
            try:
                created = api.request_json(
                    "POST", kubeapi.POD.path(NAMESPACE), query={"dryRun": "All"}, body=pod
                )
            except kubeapi.ApiError as error:
                print(f"dry-run Pod: {error}")
                continue
            names = {c["name"] for c in created["spec"]["containers"]}
            mutated[0] += SIDECAR_CONTAINER in names

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    try:
        yield mutated
    finally:
        stopping.set()
        thread.join()


def sidecar_phases(cs: NodeConfigSync, sampler: Sampler, args: argparse.Namespace) -> None:
    assert cs.api is not None
    api = cs.api
    with tempfile.TemporaryDirectory() as certs:
        cs.install_sidecar(Path(certs))
    key = RSyncKey("RootSync", NAMESPACE, "footprint")
    apps = "footprint-apps"

    def commit(count: int) -> str:
        return cs.commit(key, {"configmaps.yaml": configmaps_yaml(count, namespace=apps)})

    def synced_and_sized(commit: str) -> bool:
        body = api.get(kubeapi.ROOTSYNC, NAMESPACE, key.name)
        return synced(body, commit) and bool((body["spec"].get("override") or {}).get("resources"))

    def sync(count: int) -> None:
        made = commit(count)
        wait(lambda: synced_and_sized(made), 1800, f"{count} objects synced and sized")

    first = commit(args.objects)
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
    wait(lambda: synced_and_sized(first), 1800, f"{args.objects} objects synced and sized")
    idle(cs, sampler, args.idle_seconds)
    sampler.phase = "loaded"
    with admissions(api, key, args.admissions_per_second) as mutated:
        for _ in range(args.cycles):
            sync(2 * args.objects)
            sync(args.objects)
    record_peaks(cs, sampler.samples, "loaded")
    sampler.phase = "between"  # the sidecar's removal and the cluster-mode load's creation
    print(
        f"sidecar loaded: {args.cycles} x ({args.objects} -> {2 * args.objects} -> {args.objects} objects); "
        f"{mutated[0]} dry-run reconciler Pods returned with our sidecar"
    )
    uninstall_webhook(api)
    cs.stack.kubectl("delete", "-n", NAMESPACE, "deployment/objcount-webhook", "rootsync/footprint")


def cluster_phases(cs: NodeConfigSync, sampler: Sampler, args: argparse.Namespace) -> None:
    assert cs.api is not None
    api = cs.api
    cs.stack.kubectl("scale", "-n", NAMESPACE, "deployment/reconciler-manager", "--replicas=0")
    keys = seed(api, args.rsyncs, args.inventory, args.big, args.big_inventory)
    watch = StatusWatch(kubeapi.KubeClient.connect(str(cs.stack.plane.kubeconfig)))
    sampler.phase = "start"  # the first full reconcile
    with tempfile.TemporaryDirectory() as certs:
        install_cluster(api, Path(certs))
    cs.stack.kubectl("set", "env", "-n", NAMESPACE, f"deployment/{CONTROLLER}", "OBJCOUNT_TARGET=recommend")
    cs.stack.kubectl("rollout", "status", "-n", NAMESPACE, f"deployment/{CONTROLLER}", "--timeout=300s")
    names = {f"{k.namespace}/{k.name}" for k in keys}
    began = time.monotonic()
    wait(
        lambda: names <= watch.counted and names <= watch.recommended,
        1800,
        "every RSync counted and recommended",
    )
    print(f"cluster mode: all counted and recommended {time.monotonic() - began:.0f} s after the rollout")
    idle(cs, sampler, args.idle_seconds)
    sampler.phase = "loaded"
    load = argparse.Namespace(rate=args.rate, seconds=args.seconds, writers=4, objects=args.inventory)
    lags, sent = drive(api, keys[: args.rsyncs], watch, load)
    record_peaks(cs, sampler.samples, "loaded")
    print(f"cluster loaded: {sent} inventory changes in {args.seconds:.0f} s, {len(lags)} seen counted")


def report(samples: Samples) -> None:
    print(
        "| container | phase | working set, median | largest sample | cgroup peak | CPU, median / largest |"
    )
    print("|---|---|---|---|---|---|")
    for component in ("sidecar", "webhook", "controller, leader", "controller, standby"):
        for phase in ("start", "idle", "loaded"):
            ws = samples.working_set.get((component, phase)) or []
            cpu = samples.cpu.get((component, phase)) or [float("nan")]
            peak = samples.peak.get((component, phase))
            if not ws:
                continue
            print(
                f"| {component} | {phase} | {statistics.median(ws):.1f} MiB | {max(ws):.1f} MiB "
                f"| {'-' if peak is None else f'{peak:.1f} MiB'} "
                f"| {statistics.median(cpu):.1f} / {max(cpu):.1f} millicores |"
            )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--objects", type=int, default=1000)
    parser.add_argument("--cycles", type=int, default=2)
    parser.add_argument("--idle-seconds", type=float, default=60)
    parser.add_argument("--admissions-per-second", type=float, default=5)
    parser.add_argument("--rsyncs", type=int, default=1000)
    parser.add_argument("--inventory", type=int, default=100)
    parser.add_argument("--big", type=int, default=3)
    parser.add_argument("--big-inventory", type=int, default=30_000)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    args = parser.parse_args()
    samples = Samples()
    with running_config_sync_on_node() as cs:
        assert cs.api is not None
        node = orjson.loads(cs.api.list_page(NODE, None))["items"][0]["metadata"]["name"]
        with Sampler(cs.api, node, samples) as sampler:
            sidecar_phases(cs, sampler, args)
            cluster_phases(cs, sampler, args)
    report(samples)


if __name__ == "__main__":
    main()
