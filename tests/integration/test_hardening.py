"""Inputs and situations that used to crash, mislead or mis-size, on the real API server.

Expected sizes are worked out by hand in each test (fitted preset: 198 MiB + 0.174 MiB per object,
32 MiB steps, CPU = ceil(memory x 1000 / 1024) millicores)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from autoscaler.core.outcome import Outcome
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.size_fields import resources_of
from autoscaler.core.sizing import AUTOPILOT, FITTED, Profile
from autoscaler.kube.targets import DeploymentTarget, RSyncOverrideTarget
from autoscaler.service.controller import Controller, Scope
from autoscaler.service.settings import Settings
from controlplane.seed import rsync
from inventory.core.ids import reconciler_name
from inventory.kube import kubeapi
from inventory.source.source_watch import SourceLayout
from tests.helpers import decisions, wait_for
from tests.integration.test_targets import FAST, Rig


@pytest.fixture
def rig(api: kubeapi.KubeClient, namespace: str, tmp_path: Path) -> Iterator[Rig]:
    made = Rig(api, namespace, tmp_path)
    yield made
    if made.controller is not None:
        made.controller.stop()


def _controller(rig: Rig, target: object, profile: Profile, **kwargs: object) -> Controller:
    rig.controller = Controller(
        rig.api,
        Scope.sidecar(rig.key),
        source_layout=SourceLayout(rig.repo, "config"),
        watch_settings=FAST,
        target=target,  # type: ignore[arg-type]
        profile=profile,
        hysteresis=Hysteresis(600, 100),
        clock=rig.clock,
        **kwargs,  # type: ignore[arg-type]
    ).start()
    return rig.controller


def test_autopilot_sizes_against_the_other_containers_the_pod_really_has(rig: Rig) -> None:
    deployment = rig.deployment()
    containers = deployment["spec"]["template"]["spec"]["containers"]
    containers += [
        {
            "name": "hydration-controller",
            "image": "h",
            "resources": {"requests": {"cpu": "200m", "memory": "256Mi"}},
        },
        {
            "name": "objcount-autoscaler",
            "image": "o",
            "resources": {"requests": {"cpu": "50m", "memory": "64Mi"}},
        },
    ]
    rig.api.replace(kubeapi.DEPLOYMENT, rig.namespace, reconciler_name(rig.key), deployment)
    profile = Settings(rsync_name="x", platform="autopilot", preset="fitted").profile()
    _controller(
        rig,
        DeploymentTarget(rig.api, namespace=rig.namespace),
        profile,
        measure_others=True,
        reconciler_namespace=rig.namespace,
    )
    # 100 objects: 198 + 17.4 = 215.4 -> 224Mi, 219m. Other containers: git-sync 10m/16Mi, otel-agent
    # 10m/100Mi, hydration 200m/256Mi, sidecar 50m/64Mi = 270m/436Mi. Pod 489m/660Mi: Autopilot rounds
    # CPU up to 500m (the 11m go to the reconciler: 230m); 660Mi is over 512Mi and 0.64 GiB per 0.5 vCPU
    # is inside 1..6.5 GiB per vCPU. Assuming git-sync + otel-agent only (30m/96Mi) would have given
    # 220m/416Mi (the pod raised to 512Mi), which Autopilot would then round again.
    wait_for(lambda: rig.template_resources() == Resources(230, 224, 230, 224), what="sized for the real pod")


def test_a_deployment_without_a_reconciler_container_is_refused_not_rewritten(rig: Rig) -> None:
    deployment = rig.deployment()
    for container in deployment["spec"]["template"]["spec"]["containers"]:
        if container["name"] == "reconciler":
            container["name"] = "main"
    written = rig.api.replace(kubeapi.DEPLOYMENT, rig.namespace, reconciler_name(rig.key), deployment)
    errors = (
        REGISTRY.get_sample_value(
            "objcount_apply_errors_total", {"target": "deployment", "reason": "no-container"}
        )
        or 0.0
    )
    controller = _controller(rig, DeploymentTarget(rig.api, namespace=rig.namespace), Profile(FITTED))
    wait_for(lambda: controller.synced and controller.observed(rig.key).source == 100, what="counts")
    assert controller.reconcile(rig.key) == Outcome.FAILED
    after = REGISTRY.get_sample_value(
        "objcount_apply_errors_total", {"target": "deployment", "reason": "no-container"}
    )
    assert after is not None
    assert after > errors  # counted on every refused reconcile (the worker's and ours)
    # Server-side apply would have added a `reconciler` container without an image, refused forever.
    assert rig.deployment()["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


def _reconciler_override(rig: Rig) -> Resources | None:
    body = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
    entries = ((body.get("spec") or {}).get("override") or {}).get("resources") or []
    entry = next((e for e in entries if e["containerName"] == "reconciler"), None)
    if entry is None:
        return None
    return resources_of(
        {
            "requests": {"cpu": entry["cpuRequest"], "memory": entry["memoryRequest"]},
            "limits": {"cpu": entry["cpuLimit"], "memory": entry["memoryLimit"]},
        }
    )


def test_a_deleted_and_recreated_rsync_is_sized_again_and_leaves_no_metric_series(rig: Rig) -> None:
    controller = _controller(rig, RSyncOverrideTarget(rig.api), Profile(FITTED))
    # 100 objects, fitted preset on Standard: 215.4 -> 224Mi, 219m.
    sized = Resources(219, 224, 219, 224)
    wait_for(lambda: _reconciler_override(rig) == sized, what="the first size")
    series = {"rsync": str(rig.key), "count": "sync"}
    assert REGISTRY.get_sample_value("objcount_objects", series) == 100

    rig.api.delete(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
    wait_for(lambda: REGISTRY.get_sample_value("objcount_objects", series) is None, what="series removed")
    assert rig.key not in decisions(controller)
    rig.api.create(kubeapi.ROOTSYNC, rig.namespace, rsync(rig.key))  # a new RSync, no override
    wait_for(lambda: _reconciler_override(rig) == sized, what="the new RSync sized")


def test_healthz_names_a_part_that_stopped(rig: Rig) -> None:
    controller = _controller(
        rig, DeploymentTarget(rig.api, namespace=rig.namespace), Profile(FITTED, AUTOPILOT)
    )
    wait_for(lambda: controller.synced, what="caches")
    assert controller.unhealthy() == []
    assert controller.source_watcher is not None
    controller.source_watcher.stop()
    assert controller.unhealthy() == ["source watcher"]
