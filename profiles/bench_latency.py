"""Reaction time: from a ResourceGroup update that crosses a step to the new size visible on the API server.

    python -m profiles.bench_latency [--trials 200] [--target deployment|rsync-override|in-place]

The real path on the local control plane: watch event -> count -> decide -> apply (server-side apply
of the Deployment template, or the RSync override) -> seen by an independent watch of what was
written. The clock starts when the same independent observer sees the inventory update, so both ends
are measured the same way. The preset steps every 10 objects (2 MiB steps), so each trial adds 10
entries and crosses one step; the arithmetic does not change the path measured.

`in-place` (the default target of the service) runs on the real node (a kubelet and containerd): the
reconciler Pod is one of our Deployment's, its `reconciler` container the pause image (no Config Sync:
the ResourceGroup is this benchmark's to write); the clock stops when the kubelet reports the new size as
the one the container runs with (`status.containerStatuses[].resources`, what it applied to the cgroup).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Callable
from pathlib import Path

import orjson

from autoscaler.core.pods import running_resources
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.size_fields import resources_of, resources_of_override
from autoscaler.core.sizing import STANDARD, Load, Profile, Sizing, size
from autoscaler.kube.targets import DeploymentTarget, InPlaceTarget, RSyncOverrideTarget, Target
from autoscaler.service.controller import Controller, Scope
from controlplane import running_control_plane
from controlplane.configsync_install import install_rsync_crds
from controlplane.images import PAUSE_IMAGE
from controlplane.seed import ensure_namespace, reconciler_deployment, resourcegroup, rsync
from controlplane.stack import running_node_stack
from inventory.core.ids import RECONCILER_CONTAINER, RSyncKey, reconciler_name, reconciler_pods
from inventory.core.inventory_count import InventoryCounter
from inventory.kube import kubeapi

PROFILE = Profile(Sizing("bench", step_mib=2, min_mib=2), STANDARD)
OBJECTS_PER_TRIAL = 10
START = 500  # above what the default 200Mi request covers, so the first size is already ours
NAMESPACE = "bench"


def applied_memory(event: dict[str, object], target: str) -> int | None:
    obj = event["object"]
    assert isinstance(obj, dict)
    if target == "in-place":  # what the kubelet reports the container runs with
        running = running_resources(obj) if not obj["metadata"].get("deletionTimestamp") else None
        return None if running is None else running.memory_request_mib
    if target == "deployment":
        containers = obj["spec"]["template"]["spec"]["containers"]
        resources = resources_of(next(c for c in containers if c["name"] == "reconciler").get("resources"))
    else:
        entries = ((obj.get("spec") or {}).get("override") or {}).get("resources") or []
        resources = resources_of_override(
            next((e for e in entries if e["containerName"] == "reconciler"), None)
        )
    return None if resources is None else resources.memory_request_mib


class Observer:
    """An independent client that records when each inventory size and each applied size first appears."""

    def __init__(self, api: kubeapi.KubeClient, target: str, key: RSyncKey) -> None:
        self.api, self.target, self.key = api, target, key
        self.inventory: dict[int, float] = {}
        self.applied: dict[int, float] = {}
        self.changed = threading.Condition()
        self._counter = InventoryCounter()

    def start(self) -> None:
        applied: tuple[kubeapi.Resource, str, str] = {
            "deployment": (kubeapi.DEPLOYMENT, f"metadata.name={reconciler_name(self.key)}", ""),
            "rsync-override": (kubeapi.ROOTSYNC, f"metadata.name={self.key.name}", ""),
            "in-place": (kubeapi.POD, "", reconciler_pods(self.key)),
        }[self.target]
        for (resource, fields, labels), handle in (
            (applied, self._on_applied),
            ((kubeapi.RESOURCEGROUP, f"metadata.name={self.key.name}", ""), self._on_inventory),
        ):
            threading.Thread(target=self._watch, args=(resource, fields, labels, handle), daemon=True).start()

    def _watch(
        self, resource: kubeapi.Resource, fields: str, labels: str, handle: Callable[[bytes], None]
    ) -> None:
        listed = orjson.loads(self.api.list_page(resource, NAMESPACE, label_selector=labels))
        stream = self.api.watch(
            resource,
            NAMESPACE,
            resource_version=listed["metadata"]["resourceVersion"],
            label_selector=labels,
            field_selector=fields,
            server_timeout=3600,
            inactivity_timeout=3600,
        )
        with contextlib.suppress(kubeapi.Transient):  # the control plane stops at the end
            for line in stream:
                handle(line)

    def _record(self, seen: dict[int, float], value: int | None) -> None:
        if value is not None:
            with self.changed:
                seen.setdefault(value, time.perf_counter())
                self.changed.notify_all()

    def _on_inventory(self, line: bytes) -> None:
        self._record(self.inventory, self._counter.summarize_event(line)[1].count)

    def _on_applied(self, line: bytes) -> None:
        event = orjson.loads(line)
        if event["type"] in ("ADDED", "MODIFIED"):
            self._record(self.applied, applied_memory(event, self.target))

    def wait_applied(self, memory_mib: int, what: str, timeout: float = 30.0) -> float:
        with self.changed:
            if not self.changed.wait_for(lambda: memory_mib in self.applied, timeout=timeout):
                raise TimeoutError(f"{what}: {memory_mib}Mi never appeared")
            return self.applied[memory_mib]


KEY = RSyncKey("RootSync", NAMESPACE, "root-sync")


def run(trials: int, target_name: str) -> dict[str, list[float]]:
    if target_name == "in-place":
        with running_node_stack() as stack:
            return _trials(stack.plane.kubeconfig, trials, target_name)
    with running_control_plane() as plane:
        return _trials(plane.kubeconfig, trials, target_name)


def _reconciler_on_the_node() -> dict[str, object]:
    """The reconciler Deployment with its `reconciler` and `git-sync` containers running the pause image
    (the node has it; nothing is pulled): a Pod the kubelet runs and resizes, with no Config Sync behind it.
    git-sync keeps its request without a limit, as Config Sync's does, so the Pod stays Burstable whatever
    size the reconciler gets (a resize may not change a Pod's QoS class)."""
    deployment = reconciler_deployment(KEY, NAMESPACE)
    template = deployment["spec"]["template"]["spec"]
    kept = [c for c in template["containers"] if c["name"] in (RECONCILER_CONTAINER, "git-sync")]
    template["containers"] = [{**c, "image": PAUSE_IMAGE, "imagePullPolicy": "Never"} for c in kept]
    template["volumes"] = []
    return deployment


def _trials(kubeconfig: Path, trials: int, target_name: str) -> dict[str, list[float]]:
    results: dict[str, list[float]] = {"visible": [], "request": [], "response": []}
    api = kubeapi.KubeClient.connect(str(kubeconfig))
    install_rsync_crds(api)
    ensure_namespace(api, NAMESPACE)
    api.create(kubeapi.ROOTSYNC, NAMESPACE, rsync(KEY))
    api.create(kubeapi.RESOURCEGROUP, NAMESPACE, resourcegroup(KEY, START))
    in_place = target_name == "in-place"
    deployment = _reconciler_on_the_node() if in_place else reconciler_deployment(KEY, NAMESPACE)
    api.create(kubeapi.DEPLOYMENT, NAMESPACE, deployment)
    targets: dict[str, Callable[[], Target]] = {
        "deployment": lambda: DeploymentTarget(api, namespace=NAMESPACE),
        "rsync-override": lambda: RSyncOverrideTarget(api),
        "in-place": lambda: InPlaceTarget(api, RSyncOverrideTarget(api), namespace=NAMESPACE),
    }
    hysteresis = Hysteresis(scale_down_delay_s=600, max_restarts_per_hour=1_000_000)
    controller = Controller(
        api,
        Scope.sidecar(KEY),
        target=targets[target_name](),
        profile=PROFILE,
        hysteresis=hysteresis,
        reconciler_namespace=NAMESPACE,
    )
    observer = Observer(kubeapi.KubeClient.connect(str(kubeconfig)), target_name, KEY)
    observer.start()
    controller.start()
    try:
        # In place the first size waits for the Pod to be scheduled and started on the node.
        observer.wait_applied(size(Load(START), PROFILE).memory_request_mib, "the first size", 180.0)
        for trial in range(1, trials + 1):
            objects = START + trial * OBJECTS_PER_TRIAL
            began = time.perf_counter()
            api.patch(kubeapi.RESOURCEGROUP, NAMESPACE, KEY.name, resourcegroup(KEY, objects))
            responded = time.perf_counter()
            applied = observer.wait_applied(size(Load(objects), PROFILE).memory_request_mib, f"trial {trial}")
            results["visible"].append(applied - observer.inventory[objects])
            results["request"].append(applied - began)
            results["response"].append(applied - responded)
    finally:
        controller.stop()
    return results


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]


LABELS = {
    "visible": "from the inventory update seen by a watch (the figure to read)",
    "request": "from the update request (includes writing the update itself)",
    "response": "from the update request's response",
}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--trials", type=int, default=200)
    parser.add_argument(
        "--target", choices=["deployment", "rsync-override", "in-place"], default="deployment"
    )
    args = parser.parse_args()
    results = run(args.trials, args.target)
    print(f"reaction time over {args.trials} trials, target {args.target}, until a watch sees the new size:")
    for name, values in results.items():
        ms = [value * 1000 for value in values]
        print(
            f"{LABELS[name]}: p50 {percentile(ms, 50):.1f} ms, p90 {percentile(ms, 90):.1f} ms, "
            f"p99 {percentile(ms, 99):.1f} ms, max {max(ms):.1f} ms, mean {statistics.mean(ms):.1f} ms"
        )


if __name__ == "__main__":
    main()
