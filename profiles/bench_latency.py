"""Reaction time: from a ResourceGroup update that crosses a step to the new size visible on the API server.

    python -m profiles.bench_latency [--trials 200] [--target deployment|rsync-override]

The real path on the local control plane: watch event -> count -> decide -> apply (server-side apply
of the Deployment template, or the RSync override) -> seen by an independent watch of what was
written. The clock starts when the same independent observer sees the inventory update, so both ends
are measured the same way. The preset steps every 10 objects (2 MiB steps), so each trial adds 10
entries and crosses one step; the arithmetic does not change the path measured.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import threading
import time
from collections.abc import Callable

import orjson

from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.size_fields import resources_of, resources_of_override
from autoscaler.core.sizing import STANDARD, Load, Profile, Sizing, size
from autoscaler.kube.targets import DeploymentTarget, RSyncOverrideTarget, Target
from autoscaler.service.controller import Controller, Scope
from controlplane import running_control_plane
from controlplane.configsync_install import install_rsync_crds
from controlplane.seed import ensure_namespace, reconciler_deployment, resourcegroup, rsync
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.core.inventory_count import InventoryCounter
from inventory.kube import kubeapi

PROFILE = Profile(Sizing("bench", step_mib=2, min_mib=2), STANDARD)
OBJECTS_PER_TRIAL = 10
START = 500  # above what the default 200Mi request covers, so the first size is already ours
NAMESPACE = "bench"


def applied_memory(event: dict[str, object], target: str) -> int | None:
    obj = event["object"]
    assert isinstance(obj, dict)
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
        applied_resource, applied_name = (
            (kubeapi.DEPLOYMENT, reconciler_name(self.key))
            if self.target == "deployment"
            else (kubeapi.ROOTSYNC, self.key.name)
        )
        for resource, name, handle in (
            (applied_resource, applied_name, self._on_applied),
            (kubeapi.RESOURCEGROUP, self.key.name, self._on_inventory),
        ):
            threading.Thread(target=self._watch, args=(resource, name, handle), daemon=True).start()

    def _watch(self, resource: kubeapi.Resource, name: str, handle: Callable[[bytes], None]) -> None:
        listed = orjson.loads(self.api.list_page(resource, NAMESPACE))
        stream = self.api.watch(
            resource,
            NAMESPACE,
            resource_version=listed["metadata"]["resourceVersion"],
            field_selector=f"metadata.name={name}",
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

    def wait_applied(self, memory_mib: int, what: str) -> float:
        with self.changed:
            if not self.changed.wait_for(lambda: memory_mib in self.applied, timeout=30):
                raise TimeoutError(f"{what}: {memory_mib}Mi never appeared")
            return self.applied[memory_mib]


def run(trials: int, target_name: str) -> dict[str, list[float]]:
    key = RSyncKey("RootSync", NAMESPACE, "root-sync")
    results: dict[str, list[float]] = {"visible": [], "request": [], "response": []}
    with running_control_plane() as plane:
        api = kubeapi.KubeClient.connect(str(plane.kubeconfig))
        install_rsync_crds(api)
        ensure_namespace(api, NAMESPACE)
        api.create(kubeapi.ROOTSYNC, NAMESPACE, rsync(key))
        api.create(kubeapi.RESOURCEGROUP, NAMESPACE, resourcegroup(key, START))
        api.create(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_deployment(key, NAMESPACE))
        target: Target = (
            DeploymentTarget(api, namespace=NAMESPACE)
            if target_name == "deployment"
            else RSyncOverrideTarget(api)
        )
        hysteresis = Hysteresis(scale_down_delay_s=600, max_restarts_per_hour=1_000_000)
        controller = Controller(
            api, Scope.sidecar(key), target=target, profile=PROFILE, hysteresis=hysteresis
        )
        observer = Observer(kubeapi.KubeClient.connect(str(plane.kubeconfig)), target_name, key)
        observer.start()
        controller.start()
        try:
            observer.wait_applied(size(Load(START), PROFILE).memory_request_mib, "the first size")
            for trial in range(1, trials + 1):
                objects = START + trial * OBJECTS_PER_TRIAL
                began = time.perf_counter()
                api.patch(kubeapi.RESOURCEGROUP, NAMESPACE, key.name, resourcegroup(key, objects))
                responded = time.perf_counter()
                applied = observer.wait_applied(
                    size(Load(objects), PROFILE).memory_request_mib, f"trial {trial}"
                )
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
    parser.add_argument("--target", choices=["deployment", "rsync-override"], default="deployment")
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
