"""The real Vertical Pod Autoscaler (v1.8.1, built from its Go module; controlplane.vpa) on the real node,
beside real Config Sync and the real metrics-server: a VerticalPodAutoscaler written as a user would for a
RootSync's reconciler gets a recommendation, and the updater resizes the running reconciler in place
(InPlaceOrRecreate): same Pod, same container, the kubelet reports the new resources. Every component is
the released software, built here (see controlplane.images)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from fractions import Fraction
from typing import Any, cast

import pytest

from autoscaler.core import quantity
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.metrics_server import install_metrics_server
from controlplane.status_checks import synced
from controlplane.vpa import NAMESPACE as VPA_NAMESPACE
from controlplane.vpa import VPA, install_vpa, uninstall_vpa
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import FIGURES, OBSERVED, wait_for
from tests.integration.on_node import configmaps, rsync_of

JSON = dict[str, Any]
MiB = 1024 * 1024
ROOT = RSyncKey("RootSync", NAMESPACE, "vpa")
RECONCILER = "reconciler"
# The kubelet's view of a resize in progress (v1.34): PodResizePending (reason Deferred or Infeasible)
# while it cannot admit it yet, PodResizeInProgress while it applies it; neither once it is done.
RESIZE_CONDITIONS = ("PodResizePending", "PodResizeInProgress")
# The recommender's floor for a Pod's memory (`--pod-recommendation-min-memory-mb`, default 250), shared
# among the containers it recommends for: here the reconciler alone.
POD_MIN_MEMORY = 250 * MiB


@pytest.fixture
def vpa(config_sync_on_node: NodeConfigSync) -> Iterator[None]:
    """metrics-server and the VPA, both with their released defaults (1 min loops, 10 s metrics)."""
    stack = config_sync_on_node.stack
    began = time.monotonic()
    install_metrics_server(stack)
    install_vpa(stack)
    FIGURES.append(("VPA: metrics-server and VPA installed on the running node", time.monotonic() - began))
    yield
    stack.kubectl("delete", "verticalpodautoscalers", "--all", "--all-namespaces", "--ignore-not-found")
    uninstall_vpa(stack)


def vertical_pod_autoscaler(key: RSyncKey) -> JSON:
    """As a user writes one for a Config Sync reconciler: its Deployment as the target, resized in place,
    a single replica allowed (the updater's default is 2: `--min-replicas`), the reconciler's memory
    controlled and nothing else (git-sync's and the otel-agent's sizes are Config Sync's own; CPU, whose
    recommendation follows the first minutes' sync bursts, is left as Config Sync sets it)."""
    deployment = reconciler_name(key)
    return {
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": deployment, "namespace": key.namespace},
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "updatePolicy": {"updateMode": "InPlaceOrRecreate", "minReplicas": 1},
            "resourcePolicy": {
                "containerPolicies": [
                    {"containerName": RECONCILER, "controlledResources": ["memory"]},
                    {"containerName": "*", "mode": "Off"},
                ]
            },
        },
    }


def container(pod: JSON, name: str) -> JSON:
    return next(c for c in pod["spec"]["containers"] if c["name"] == name)


def status_of(pod: JSON, name: str) -> JSON:
    return next(s for s in pod["status"].get("containerStatuses") or [] if s["name"] == name)


def reconciler_pods(cs: NodeConfigSync) -> list[JSON]:
    """The live Pods of the RootSync's reconciler Deployment."""
    return cs.pods(f"configsync.gke.io/deployment-name={reconciler_name(ROOT)}")


def all_running(pod: JSON | None) -> bool:
    statuses = (pod or {}).get("status", {}).get("containerStatuses") or []
    return bool(statuses) and all("running" in s.get("state", {}) for s in statuses)


def resize_conditions(pod: JSON) -> list[JSON]:
    return [c for c in pod["status"].get("conditions") or [] if c["type"] in RESIZE_CONDITIONS]


def numbers(resources: JSON) -> dict[str, dict[str, Fraction]]:
    """Requests and limits as numbers (the API server and the kubelet may spell a quantity differently)."""
    return {
        kind: {name: quantity.parse(value) for name, value in (resources.get(kind) or {}).items()}
        for kind in ("requests", "limits")
    }


@pytest.mark.timeout(900)  # the stack, Config Sync, metrics-server and the VPA built on a cold cache
def test_the_vpa_resizes_the_running_reconciler_in_place_to_its_recommendation(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], vpa: None
) -> None:
    cs = config_sync_on_node
    api = cast(kubeapi.KubeApi, cs.api)
    commit = cs.commit(ROOT, configmaps(10, namespace="vpa-apps"))
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(ROOT))
    rsyncs.append(ROOT)
    wait_for(lambda: synced(rsync_of(api, ROOT), commit), timeout=180, what="the RootSync to sync")
    before = cast(
        JSON, wait_for(lambda: all_running(p := cast(JSON | None, cs.reconciler_pod(ROOT))) and p, timeout=60)
    )
    uid, name = before["metadata"]["uid"], before["metadata"]["name"]
    initial = status_of(before, RECONCILER)
    requested = numbers(container(before, RECONCILER)["resources"])

    api.create(VPA, NAMESPACE, vertical_pod_autoscaler(ROOT))
    created = time.monotonic()

    def recommendation() -> JSON | None:
        status = api.get(VPA, NAMESPACE, reconciler_name(ROOT)).get("status") or {}
        entries = (status.get("recommendation") or {}).get("containerRecommendations") or []
        return next((e for e in entries if e["containerName"] == RECONCILER), None)

    # The recommender's loop runs every minute; it recommends once metrics-server has the Pod's usage.
    recommended: JSON = cast(
        JSON, wait_for(recommendation, timeout=180, interval=1, what="a recommendation for the reconciler")
    )
    FIGURES.append(
        ("VPA: VerticalPodAutoscaler created to its first recommendation", time.monotonic() - created)
    )
    first = time.monotonic()
    target = quantity.parse(recommended["target"]["memory"])
    lower = quantity.parse(recommended["lowerBound"]["memory"])
    # Only the reconciler is recommended for, so it gets the whole Pod floor; the request Config Sync
    # gives it (200Mi) is below the lower bound: outside the recommended range, the updater acts on its
    # next loop (inside the range it would wait until the Pod is 12 h old).
    assert target >= POD_MIN_MEMORY
    assert requested["requests"]["memory"] < lower

    seen: list[list[str]] = []  # the resize conditions the kubelet reported, each change in turn

    def resized() -> JSON | None:
        pods = reconciler_pods(cs)
        pod = next((p for p in pods if p["metadata"]["uid"] == uid), None)
        assert pod is not None, f"the reconciler Pod {name} is gone: {[p['metadata']['name'] for p in pods]}"
        reported = [
            f"{c['type']}={c['status']} {c.get('reason', '')}".strip() for c in resize_conditions(pod)
        ]
        if not seen or seen[-1] != reported:
            seen.append(reported)
        spec = numbers(container(pod, RECONCILER)["resources"])
        applied = numbers(status_of(pod, RECONCILER).get("resources") or {})
        generation = pod["metadata"]["generation"]
        observed = pod["status"].get("observedGeneration", generation) == generation
        done = spec["requests"].get("memory") == target and applied == spec and not reported and observed
        return pod if done else None

    pod: JSON = cast(
        JSON,
        wait_for(resized, timeout=180, interval=0.2, what="the reconciler resized in place to the target"),
    )
    FIGURES.append(("VPA: first recommendation to the reconciler resized in place", time.monotonic() - first))
    now = status_of(pod, RECONCILER)
    OBSERVED.append(
        f"VPA recommendation for {RECONCILER}: target {recommended['target']}, lowerBound"
        f" {recommended['lowerBound']}, upperBound {recommended['upperBound']}; resize conditions seen:"
        f" {seen}; containerID {now['containerID']}; resources now {now.get('resources')}"
    )
    # How the updater decided (its log, at its default verbosity 4), for the record.
    log = cs.stack.kubectl("logs", "-n", VPA_NAMESPACE, "deployment/vpa-updater", check=False).stdout
    OBSERVED.extend(f"vpa-updater: {line[:300]}" for line in log.splitlines() if name in line)
    # The same Pod and container, never restarted: resized, not recreated.
    assert [p["metadata"]["uid"] for p in reconciler_pods(cs)] == [uid]
    assert now["containerID"] == initial["containerID"]
    assert now["restartCount"] == initial["restartCount"]
    assert "running" in now["state"]
    # The updater did it (its annotation), through the resize subresource (the Pod's generation moved; the
    # kubelet has reported on that generation).
    assert pod["metadata"]["annotations"].get("vpaInPlaceUpdated") == "true"
    assert pod["metadata"]["generation"] > before["metadata"]["generation"]
    # Memory only: the CPU the reconciler had is as it was.
    resources = numbers(container(pod, RECONCILER)["resources"])
    assert resources["requests"].get("cpu") == requested["requests"].get("cpu")
    assert resources["limits"].get("cpu") == requested["limits"].get("cpu")
