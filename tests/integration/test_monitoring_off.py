"""Config Sync v1.25's `spec.monitoring.enabled: false` on the real node: the reconciler-manager leaves the
otel-agent out of the reconciler Pod, and our sizing, which on Autopilot counts the Pod's other containers
against its pod-level rules, reads them as they are: in the sidecar (the webhook injects it into the Pod
without an otel-agent), in cluster mode, and for an RSync switched from one to the other and back.

The RSyncs ask for Autopilot (`objcount.dev/platform`), so the other containers change the size; the node
is a Standard one, so the reconciler-manager gives them Standard defaults (git-sync 10m/16Mi, otel-agent
10m/100Mi; our sidecar's template asks 5m/64Mi). Every expected size is worked out by hand below, with
the `fitted` preset: 40 ConfigMaps and the implicit Namespace the reconciler adds, 41 objects, 198 +
0.174 x 41 = 205.1 MiB, 224Mi on its 32 MiB grid, and 224 x 1000 / 1024 = 218.75, 219m of CPU. Autopilot
raises the pod's total to at least 250m and 512Mi (CPU in steps of 250m) and gives the difference to the
reconciler, its memory kept on the 32 MiB grid; requests equal limits.
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from autoscaler.core.annotations import PLATFORM_ANNOTATION
from controlplane.autoscaler_install import SIDECAR_CONTAINER, uninstall_cluster
from controlplane.configsync_build import VERSION
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.conftest import Install
from tests.helpers import wait_for
from tests.integration.on_node import (
    JSON,
    configmaps,
    override,
    quantity_bytes,
    reconciler_memory_limit,
    reconciler_memory_said,
    suffix,
)

SYNC_TIMEOUT = 300.0
GIT_SYNC = "git-sync"
OTEL_AGENT = "otel-agent"
# The sidecar's settings: the count-only preset whose sizes are worked out above, the RSync's override,
# no scale-down delay (the switch back to monitoring lowers the size).
SIDECAR = {
    "OBJCOUNT_PRESET": "fitted",
    "OBJCOUNT_TARGET": "rsync-override",
    "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": "0",
}
# Sidecar, no otel-agent: others git-sync 10m/16Mi and the sidecar 5m/64Mi, 15m/80Mi; the pod 234m/304Mi
# is raised to 250m/512Mi: CPU +16m (235m), memory +208Mi (432Mi, 448Mi on the grid); the pod 250m/528Mi.
SIDECAR_WITHOUT_OTEL = ("235m", "448Mi")
# Sidecar with the otel-agent (10m/100Mi more): others 25m/180Mi, the pod 244m/404Mi raised to 250m/512Mi:
# CPU +6m (225m), memory +108Mi (332Mi, 352Mi on the grid); the pod 250m/532Mi.
SIDECAR_WITH_OTEL = ("225m", "352Mi")
# Cluster mode, no otel-agent: git-sync alone, 10m/16Mi; the pod 229m/240Mi raised to 250m/512Mi: CPU +21m
# (240m), memory +272Mi (496Mi, 512Mi on the grid); the pod 250m/528Mi.
CLUSTER_WITHOUT_OTEL = ("240m", "512Mi")


def rsync_without_monitoring(cs: NodeConfigSync, key: RSyncKey, monitoring: bool) -> JSON:
    """The RootSync of 40 ConfigMaps in a namespace the reconciler creates, asking for Autopilot sizing,
    with `spec.monitoring.enabled` as given."""
    body = cs.rsync(key)
    body["metadata"]["annotations"] = {PLATFORM_ANNOTATION: "autopilot"}
    body["spec"]["monitoring"] = {"enabled": monitoring}
    return body


def created(cs: NodeConfigSync, rsyncs: list[RSyncKey], prefix: str, *, monitoring: bool) -> RSyncKey:
    key = RSyncKey("RootSync", NAMESPACE, f"{prefix}-{suffix()}")
    cs.commit(key, configmaps(40, namespace=f"{prefix}-apps-{suffix()}"))
    assert cs.api is not None
    stored = cs.api.create(kubeapi.ROOTSYNC, NAMESPACE, rsync_without_monitoring(cs, key, monitoring))
    rsyncs.append(key)
    # An API server prunes a field its CRD does not define: Config Sync before v1.25 has no spec.monitoring.
    assert stored["spec"].get("monitoring") == {"enabled": monitoring}, (
        f"Config Sync {VERSION}'s RootSync CRD"
    )
    return key


def containers(cs: NodeConfigSync, key: RSyncKey) -> list[str]:
    """The containers of the reconciler's live Pod, as the Pod's spec has them."""
    pod = cast(JSON, cs.reconciler_pod(key) or {})
    return sorted(c["name"] for c in pod.get("spec", {}).get("containers", []))


def sized(cs: NodeConfigSync, key: RSyncKey, size: tuple[str, str], pod: list[str]) -> None:
    """Waits for the override of `size` (requests equal limits), the reconciler running in a memory cgroup
    of that size, in a Pod of exactly the containers `pod`."""
    api = cs.api
    cpu, memory = size
    wanted = {"cpuRequest": cpu, "cpuLimit": cpu, "memoryRequest": memory, "memoryLimit": memory}
    wait_for(
        lambda: all(override(api, key).get(field) == value for field, value in wanted.items()),
        timeout=SYNC_TIMEOUT,
        what=f"{key}'s override of {cpu}/{memory}",
        explain=lambda: f"the override: {override(api, key)}\n{cs.reconciler_story(key)}",
    )
    wait_for(
        lambda: reconciler_memory_limit(cs, key) == quantity_bytes(memory) and containers(cs, key) == pod,
        timeout=SYNC_TIMEOUT,
        what=f"{key}'s reconciler in a memory cgroup of {memory}, in a Pod of {pod}",
        explain=lambda: (
            f"the Pod's containers: {containers(cs, key)}\n{reconciler_memory_said(cs, key)}\n"
            f"{cs.reconciler_story(key)}"
        ),
    )


def test_the_sidecar_sizes_a_reconciler_pod_without_the_otel_agent(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    cs = config_sync_on_node
    install_sidecar(SIDECAR)
    key = created(cs, rsyncs, "no-monitoring", monitoring=False)
    sized(cs, key, SIDECAR_WITHOUT_OTEL, sorted([GIT_SYNC, "reconciler", SIDECAR_CONTAINER]))


def test_cluster_mode_sizes_a_reconciler_pod_without_the_otel_agent(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], tmp_path: Path
) -> None:
    cs = config_sync_on_node
    api = cs.api
    cs.install_cluster(tmp_path / "certs", {"OBJCOUNT_PRESET": "fitted", "OBJCOUNT_TARGET": "rsync-override"})
    try:
        key = created(cs, rsyncs, "cluster-no-monitoring", monitoring=False)
        sized(cs, key, CLUSTER_WITHOUT_OTEL, sorted([GIT_SYNC, "reconciler"]))
    finally:
        uninstall_cluster(api)


# Four rollouts of a Recreate Deployment (our first size, Config Sync's switch, our size for the new Pod,
# twice) and a scale-down that waits for the new reconciler to report its sync: over the suite's 600 s on
# a loaded node (seen once in a run with three workers and a benchmark beside them).
@pytest.mark.timeout(1200)
def test_an_rsync_switched_off_monitoring_and_back_is_sized_for_the_pod_it_has_each_time(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    cs = config_sync_on_node
    api = cs.api
    install_sidecar(SIDECAR)
    key = created(cs, rsyncs, "switched", monitoring=True)
    with_otel = sorted([GIT_SYNC, OTEL_AGENT, "reconciler", SIDECAR_CONTAINER])
    sized(cs, key, SIDECAR_WITH_OTEL, with_otel)
    # As a user switches it (kubectl patch): the reconciler-manager drops the otel-agent from the
    # Deployment, the Pod is recreated without it and sized again (up: at once).
    api.patch(kubeapi.ROOTSYNC, NAMESPACE, key.name, {"spec": {"monitoring": {"enabled": False}}})
    sized(cs, key, SIDECAR_WITHOUT_OTEL, sorted([GIT_SYNC, "reconciler", SIDECAR_CONTAINER]))
    # And back: the otel-agent returns, and the size comes down (no delay set) once the new Pod's
    # reconciler reports its sync finished (no scale-down while it may still be pruning).
    api.patch(kubeapi.ROOTSYNC, NAMESPACE, key.name, {"spec": {"monitoring": {"enabled": True}}})
    sized(cs, key, SIDECAR_WITH_OTEL, with_otel)
