"""Each target on the real API server: grows with the inventory, shrinks only after the (injected) delay,
leaves other containers and fields alone, and survives conflicts."""

from __future__ import annotations

import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import REGISTRY

from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    AUTOSCALE_ANNOTATION,
    HELD_ANNOTATION,
    MANAGE_OVERRIDE_ANNOTATION,
    PLATFORM_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    annotation_counts,
    parse_resources_annotation,
)
from autoscaler.core.observation import Needs, Reading, RSyncView
from autoscaler.core.outcome import Outcome
from autoscaler.core.owners import DECLARED_FIELDS_ANNOTATION
from autoscaler.core.reasons import WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.size_fields import resources_json, resources_of
from autoscaler.core.sizing import PROTOTYPE, STANDARD, Profile
from autoscaler.kube.events import EventWriter
from autoscaler.kube.port import KubePort
from autoscaler.kube.report import read_status
from autoscaler.kube.targets import (
    Applied,
    DeploymentTarget,
    InPlaceTarget,
    RecommendTarget,
    RSyncOverrideTarget,
    Target,
)
from autoscaler.service.controller import Controller, Scope
from controlplane.launcher import LocalControlPlane
from controlplane.seed import configmaps_yaml, reconciler_deployment, resourcegroup, rsync, write_commit
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.core.objects import Pod
from inventory.kube import kubeapi
from inventory.kube.watch import WatchSettings
from inventory.source.source_watch import SourceLayout
from tests.helpers import decisions, wait_for
from tests.integration.on_node import events_on

FAST = WatchSettings(server_timeout=60, inactivity_timeout=20, backoff_initial=0.05, backoff_max=1.0)
PROFILE = Profile(PROTOTYPE, STANDARD)
DELAY = 600.0


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


# Worked by hand for the prototype preset on Standard (DESIGN.md 2.5): memory = ceil((n / 5 + 128) / 32)
# x 32 MiB, CPU = ceil(memory x 1000 / 1024) millicores, limits equal requests. 100: 148 -> 160Mi,
# 156.25 -> 157m; 3000: 728 -> 736Mi, 719m; 5000: 1128 -> 1152Mi, 1125m; 10,000: 2128 -> 2144Mi, 2094m.
SIZES = {
    100: Resources(157, 160, 157, 160),
    3000: Resources(719, 736, 719, 736),
    5000: Resources(1125, 1152, 1125, 1152),
    10_000: Resources(2094, 2144, 2094, 2144),
}


def at(objects: int) -> Resources:
    return SIZES[objects]


DEFAULTS = Resources(50, 200)  # the reconciler's default requests on Standard, no limits


def requests(resources: Resources | None) -> tuple[int, int] | None:
    return None if resources is None else (resources.cpu_request_m, resources.memory_request_mib)


def reconciler_pod(key: RSyncKey, namespace: str) -> dict[str, Any]:
    template = reconciler_deployment(key, namespace)["spec"]["template"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": f"{reconciler_name(key)}-abc12",
            "namespace": namespace,
            "labels": template["metadata"]["labels"],
        },
        "spec": template["spec"],
    }


class Rig:
    """An RSync with its inventory, reconciler Deployment, source volume and a controller."""

    def __init__(self, api: kubeapi.KubeClient, namespace: str, repo: Path) -> None:
        self.api, self.namespace, self.repo = api, namespace, repo
        self.key = RSyncKey("RootSync", namespace, "root-sync")
        self.clock = FakeClock()
        self.controller: Controller | None = None
        api.create(kubeapi.ROOTSYNC, namespace, rsync(self.key))
        api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(self.key, 100))
        api.create(kubeapi.DEPLOYMENT, namespace, reconciler_deployment(self.key, namespace))
        self.commit(100)

    def commit(self, objects: int) -> None:
        self._commits = getattr(self, "_commits", 0) + 1
        write_commit(self.repo, f"c{self._commits}", {"all.yaml": configmaps_yaml(objects)})

    def inventory(self, objects: int) -> None:
        self.api.patch(kubeapi.RESOURCEGROUP, self.namespace, self.key.name, resourcegroup(self.key, objects))

    def start(self, target: Target, events: EventWriter | None = None) -> Controller:
        self.controller = Controller(
            self.api,
            Scope.sidecar(self.key),
            source_layout=SourceLayout(self.repo, "config"),
            watch_settings=FAST,
            target=target,
            profile=PROFILE,
            hysteresis=Hysteresis(DELAY, 100),
            clock=self.clock,
            events=None if events is None else events.record,
            reconciler_namespace=self.namespace,
        ).start()
        return self.controller

    def apply_as_config_sync(self, spec: dict[str, Any]) -> None:
        """Played by us: the declaring sync's server-side apply of this RSync (field manager
        configsync.gke.io, as Config Sync's reconcilers apply), Config Sync's admission webhook off (no
        declared-fields annotation)."""
        declared = {
            "apiVersion": "configsync.gke.io/v1beta1",
            "kind": "RootSync",
            "metadata": {"name": self.key.name, "namespace": self.namespace},
            "spec": spec,
        }
        self.api.patch(
            kubeapi.ROOTSYNC,
            self.namespace,
            self.key.name,
            declared,
            patch_type="apply",
            field_manager="configsync.gke.io",
            force=True,
        )

    def held_reason(self) -> str | None:
        metadata = self.api.get(kubeapi.ROOTSYNC, self.namespace, self.key.name)["metadata"]
        return (metadata.get("annotations") or {}).get(HELD_ANNOTATION)

    def read(self, target: Target) -> Reading:
        """What the service's port reads of this RSync's reconciler through `target`."""
        rsync = self.api.get(kubeapi.ROOTSYNC, self.namespace, self.key.name)
        port = KubePort(self.api, target, reconciler_namespace=self.namespace)
        return port.read(self.key, RSyncView.of(rsync), Needs(current=True))

    def pod(self) -> Pod | None:
        """The reconciler Pod as the port lists it (a target writing in place resizes that one)."""
        return self.read(RecommendTarget(self.api)).pod

    def deployment(self) -> dict[str, Any]:
        return self.api.get(kubeapi.DEPLOYMENT, self.namespace, reconciler_name(self.key))

    def template_resources(self, container: str = "reconciler") -> Resources | None:
        containers = self.deployment()["spec"]["template"]["spec"]["containers"]
        return resources_of(next(c for c in containers if c["name"] == container)["resources"])

    def grow_then_shrink(self, read: Any, initial: Resources | None = None) -> None:
        """100 -> 5,000 raises at once; 5,000 -> 100 waits for the delay (injected clock), then lowers.

        The defaults (50m/200Mi, no limits) are raised, never lowered, by a scale-up, so until the first
        scale-down the requests are compared.
        """
        first = initial or at(100).at_least(DEFAULTS)
        wait_for(lambda: requests(read()) == requests(first), what="initial size")
        self.commit(5000)
        self.inventory(5000)
        wait_for(lambda: requests(read()) == requests(at(5000)), what="scale-up to 5,000 objects")
        self.commit(100)
        self.inventory(100)
        assert self.controller is not None
        wait_for(
            lambda: decisions(self.controller)[self.key].lower_since is not None, what="scale-down to wait"
        )
        wait_for(lambda: self.controller.observed(self.key).source == 100, what="source count")
        before = decisions(self.controller)[self.key]
        self.controller.queue.add(self.key)
        # A reconcile ran on the lower counts (a new decision) and held the size: the delay has not passed.
        wait_for(
            lambda: decisions(self.controller)[self.key] is not before, what="a reconcile after the prune"
        )
        assert decisions(self.controller)[self.key].outcome == Outcome.POSTPONED
        assert requests(read()) == requests(at(5000)), "lowered before the delay"
        self.clock.now += DELAY + 1
        self.controller.queue.add(self.key)
        wait_for(lambda: read() == at(100), what="scale-down after the delay")


@pytest.fixture
def rig(api: kubeapi.KubeClient, namespace: str, tmp_path: Path) -> Iterator[Rig]:
    rig = Rig(api, namespace, tmp_path)
    yield rig
    if rig.controller is not None:
        rig.controller.stop()


def test_deployment_target(rig: Rig) -> None:
    before = rig.deployment()
    rig.start(DeploymentTarget(rig.api, namespace=rig.namespace))
    rig.grow_then_shrink(rig.template_resources)
    after = rig.deployment()
    for container in ("git-sync", "otel-agent"):
        old = next(c for c in before["spec"]["template"]["spec"]["containers"] if c["name"] == container)
        new = next(c for c in after["spec"]["template"]["spec"]["containers"] if c["name"] == container)
        assert new == old
    for path in (("spec", "strategy"), ("spec", "selector"), ("metadata", "labels")):
        assert after[path[0]][path[1]] == before[path[0]][path[1]]
    reconciler = next(c for c in after["spec"]["template"]["spec"]["containers"] if c["name"] == "reconciler")
    assert reconciler["image"] == before["spec"]["template"]["spec"]["containers"][0]["image"]
    managers = {m["manager"]: m for m in after["metadata"]["managedFields"]}
    assert "objcount-autoscaler" in managers
    annotations = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"]["annotations"]
    assert parse_resources_annotation(annotations[APPLIED_ANNOTATION]) == at(100)


def test_deployment_target_never_writes_a_deployment_of_the_reconciler_manager(rig: Rig) -> None:
    """Played by us: an apply under Config Sync's field manager, as its reconciler-manager does (the real
    reconciler-manager refusing a sidecar at start-up is in test_configsync). Cluster mode checks at
    each apply, so the template and its managers stay as they were."""
    name = reconciler_name(rig.key)
    rig.api.patch(
        kubeapi.DEPLOYMENT,
        rig.namespace,
        name,
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": rig.namespace, "labels": {"app": "reconciler"}},
        },
        patch_type="apply",
        field_manager="reconciler-manager",
        force=True,
    )
    before = rig.deployment()
    with pytest.raises(WriteError) as refused:
        DeploymentTarget(rig.api, namespace=rig.namespace).apply(rig.key, Resources(500, 512, 500, 512), None)
    assert refused.value.reason == "owned"
    assert "rsync-override" in str(refused.value)
    assert "in-place" in str(refused.value)
    after = rig.deployment()
    assert after["spec"]["template"] == before["spec"]["template"]
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_rsync_override_target_preserves_other_entries_and_retries_conflicts(rig: Rig) -> None:
    git_sync = {"containerName": "git-sync", "memoryLimit": "64Mi"}
    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"spec": {"override": {"resources": [git_sync], "gitSyncDepth": 5}}},
    )
    target = RSyncOverrideTarget(rig.api)

    stop = threading.Event()

    def other_writer() -> None:  # keeps bumping the resourceVersion with unrelated changes
        for i in range(100_000):
            if stop.wait(0.02):
                return
            rig.api.patch(
                kubeapi.ROOTSYNC,
                rig.namespace,
                rig.key.name,
                {"metadata": {"labels": {"writer-round": str(i)}}},
            )

    writer = threading.Thread(target=other_writer, daemon=True)
    writer.start()
    try:
        rig.start(target)
        # The RSync has no reconciler override yet: the first decision sets the recommendation as is.
        rig.grow_then_shrink(lambda: rig.read(target).current, initial=at(100))
    finally:
        stop.set()
        writer.join()
    spec = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["spec"]
    assert spec["override"]["gitSyncDepth"] == 5
    assert spec["override"]["resources"][0] == git_sync
    assert [e["containerName"] for e in spec["override"]["resources"]] == ["git-sync", "reconciler"]


class RacingApi(kubeapi.KubeClient):
    """The real API, with another writer changing the RSync right after each of our first reads."""

    def __init__(self, api: kubeapi.KubeClient, races: int) -> None:
        super().__init__(api._client)
        self.races = races

    def get(
        self, resource: kubeapi.Resource, namespace: str | None, name: str, subresource: str | None = None
    ) -> Any:
        body = super().get(resource, namespace, name, subresource)
        if self.races > 0:
            self.races -= 1
            self.patch(resource, namespace, name, {"metadata": {"labels": {"raced": str(self.races)}}})
        return body


def test_rsync_override_retries_conflicts_with_the_resource_version(rig: Rig) -> None:
    racing = RacingApi(rig.api, races=3)
    applied = RSyncOverrideTarget(racing).apply(rig.key, at(3000), None)
    assert (applied.resources, applied.restarted) == (at(3000), True)
    assert racing.races == 0, "three writes conflicted with the other writer, and were retried"
    labels = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"]["labels"]
    assert labels["raced"] == "0", "the other writer's change survived"


def test_an_override_declared_by_another_is_left_to_that_sync(rig: Rig) -> None:
    """Played by us: the declared-fields annotation as Config Sync writes it on an RSync that another
    RSync syncs from git. While it covers spec.override we only recommend; once it does not, we write."""
    declared = '{"f:metadata":{"f:annotations":{}},"f:spec":{"f:override":{"f:resources":{}}}}'
    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"metadata": {"annotations": {DECLARED_FIELDS_ANNOTATION: declared}}},
    )
    target = RSyncOverrideTarget(rig.api)
    controller = rig.start(target)

    def recommended() -> Resources | None:
        annotations = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"]["annotations"]
        return parse_resources_annotation(annotations.get(RECOMMENDED_ANNOTATION, ""))

    wait_for(lambda: recommended() == at(100), what="the recommendation for 100 objects")
    rig.commit(5000)
    rig.inventory(5000)
    wait_for(lambda: recommended() == at(5000), what="the recommendation for 5,000 objects")
    assert decisions(controller)[rig.key].outcome == Outcome.HELD_BY_OWNER
    assert rig.read(target).current is None  # never written
    # The reason is published too, and `objcount status` shows it.
    (record,) = [r for r in read_status(rig.api, rig.namespace) if r.name == rig.key.name]
    assert (
        record.held_by_owner
        == "spec.override is declared in git (configsync.gke.io/declared-fields): change it there"
    )
    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"metadata": {"annotations": {DECLARED_FIELDS_ANNOTATION: '{"f:spec":{"f:git":{"f:repo":{}}}}'}}},
    )
    wait_for(lambda: rig.read(target).current == at(5000), what="the override written once it is ours")
    wait_for(
        lambda: (
            HELD_ANNOTATION
            not in rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"]["annotations"]
        ),
        what="the held reason removed",
    )


def test_an_override_config_sync_applies_from_git_is_left_to_that_sync(rig: Rig) -> None:
    """Played by us: the declaring sync's server-side apply of the RSync (field manager configsync.gke.io,
    as Config Sync's reconcilers apply), with Config Sync's admission webhook off, so no declared-fields
    annotation. The override it declares (here git-sync's entry) is its own: we only recommend."""
    entries = [{"containerName": "git-sync", "memoryLimit": "64Mi"}]
    rig.apply_as_config_sync({"override": {"resources": entries}})
    controller = rig.start(RSyncOverrideTarget(rig.api))
    reason = wait_for(rig.held_reason, what="the held reason published")
    assert reason == "spec.override is applied from git by Config Sync (its managed fields): change it there"
    # The reason is published during the reconcile, the decision kept at its end.
    decision = wait_for(lambda: decisions(controller).get(rig.key), what="the decision kept")
    assert decision.outcome == Outcome.HELD_BY_OWNER
    body = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
    assert body["spec"]["override"]["resources"] == entries, "never written"


def test_an_override_config_sync_wrote_back_whole_is_still_left_to_the_declaring_sync(rig: Rig) -> None:
    """Played by us: the declaring sync's server-side apply of the RSync's reconciler entry (as above),
    then Config Sync v1.25.0's reconciler-manager adding its finalizer by an update of the whole RSync
    (`reconciler_base.go`, field manager configsync.gke.io/reconciler-manager; played as a merge patch of
    what its typed object writes back: the entry with its unset CPU limit as "0"). The API server moves
    the atomic list to that update's managed fields, out of the apply's, until the declaring sync's next
    apply: the override is still git's, not someone else's (the real node's intermittent 'set by someone
    else' of test_gitops_node)."""
    entry = {
        "containerName": "reconciler",
        "cpuRequest": "100m",
        "memoryRequest": "300Mi",
        "memoryLimit": "300Mi",
    }
    # As git declares an RSync: its source too (an apply that owns nothing else loses its entry).
    rig.apply_as_config_sync({"sourceFormat": "unstructured", "override": {"resources": [entry]}})
    finalizer = "configsync.gke.io/reconciler-manager"
    written_back = {
        "metadata": {"finalizers": [finalizer]},
        "spec": {"override": {"resources": [{**entry, "cpuLimit": "0"}]}},
    }
    rig.api.patch(kubeapi.ROOTSYNC, rig.namespace, rig.key.name, written_back, field_manager=finalizer)
    try:
        managed = {
            (m["manager"], m["operation"]): m["fieldsV1"]
            for m in rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"]["managedFields"]
        }
        assert managed[("configsync.gke.io", "Apply")]["f:spec"] == {"f:sourceFormat": {}}, "moved out"
        assert managed[(finalizer, "Update")]["f:spec"]["f:override"] == {"f:resources": {}}, "moved here"
        controller = rig.start(RSyncOverrideTarget(rig.api))
        reason = wait_for(rig.held_reason, what="the held reason published")
        assert (
            reason == "spec.override is applied from git by Config Sync (its managed fields): change it there"
        )
        decision = wait_for(lambda: decisions(controller).get(rig.key), what="the decision kept")
        assert decision.outcome == Outcome.HELD_BY_OWNER
        body = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
        assert body["spec"]["override"]["resources"] == [{**entry, "cpuLimit": "0"}], "never written"
    finally:  # no reconciler-manager here to remove its finalizer
        rig.api.patch(kubeapi.ROOTSYNC, rig.namespace, rig.key.name, {"metadata": {"finalizers": None}})


def test_override_of_a_missing_rsync_is_reported(rig: Rig) -> None:
    rig.api.delete(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
    with pytest.raises(WriteError) as error:
        RSyncOverrideTarget(rig.api).apply(rig.key, at(100), None)
    assert error.value.reason == "not_found"


def test_in_place_target_resizes_the_pod_without_touching_the_template(rig: Rig) -> None:
    rig.api.create(kubeapi.POD, rig.namespace, reconciler_pod(rig.key, rig.namespace))
    before = rig.deployment()
    target = InPlaceTarget(
        rig.api, DeploymentTarget(rig.api, namespace=rig.namespace), namespace=rig.namespace
    )
    restarts = _metric("objcount_restarts_caused_total")
    rig.start(target)
    # The Pod runs its template's size, not ours: in place sizes it at once, down as well as up.
    rig.grow_then_shrink(lambda: rig.read(target).current, initial=at(100))
    after = rig.deployment()
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"], "never written"
    assert _metric("objcount_restarts_caused_total") == restarts, "no resize fell back to a restart"


def test_in_place_does_not_send_again_a_lower_limit_the_kubelet_refused(rig: Rig) -> None:
    """Played by us: the kubelet's report of a resize refused for a limit below the usage (as the real
    kubelet v1.34 writes it, see test_configsync's refused-resize tests). A lower limit is not sent again; a
    higher one is."""
    pod = rig.api.create(kubeapi.POD, rig.namespace, reconciler_pod(rig.key, rig.namespace))
    name = pod["metadata"]["name"]
    running = resources_json(at(3000))
    refusal = {
        "type": "PodResizeInProgress",
        "status": "True",
        "reason": "Error",
        "message": 'attempting to set container "reconciler" memory limit (167772160) below current usage (300000000)',
    }
    status = {"conditions": [refusal], "containerStatuses": [_status("reconciler", running)]}
    rig.api.patch(kubeapi.POD, rig.namespace, name, {"status": status}, subresource="status")
    target = InPlaceTarget(
        rig.api, DeploymentTarget(rig.api, namespace=rig.namespace), namespace=rig.namespace
    )
    assert rig.read(target).current == at(3000), "what runs, from the kubelet's report"
    spec_before = rig.api.get(kubeapi.POD, rig.namespace, name)["spec"]
    with pytest.raises(WriteError) as error:
        target.apply(rig.key, at(100), rig.pod())
    assert error.value.reason == "refused"
    assert "below current usage" in str(error.value)
    assert rig.api.get(kubeapi.POD, rig.namespace, name)["spec"] == spec_before, "nothing sent"
    assert target.apply(rig.key, at(10_000), rig.pod()) == Applied(at(10_000), restarted=False)


def _status(container: str, resources: dict[str, Any]) -> dict[str, Any]:
    return {
        "name": container,
        "image": container,
        "imageID": "",
        "ready": True,
        "restartCount": 0,
        "state": {"running": {}},
        "resources": resources,
    }


def test_in_place_falls_back_to_the_template_when_the_resize_is_infeasible(rig: Rig) -> None:
    pod = rig.api.create(kubeapi.POD, rig.namespace, reconciler_pod(rig.key, rig.namespace))
    # What the kubelet reports when the node cannot fit the new size.
    condition = {
        "type": "PodResizePending",
        "status": "True",
        "reason": "Infeasible",
        "message": "Node didn't have enough capacity",
    }
    rig.api.patch(
        kubeapi.POD,
        rig.namespace,
        pod["metadata"]["name"],
        {"status": {"conditions": [condition]}},
        subresource="status",
    )
    target = InPlaceTarget(
        rig.api, DeploymentTarget(rig.api, namespace=rig.namespace), namespace=rig.namespace
    )
    applied = target.apply(rig.key, at(5000), rig.pod())
    assert (applied.resources, applied.restarted) == (at(5000), True)
    assert applied.fell_back is not None
    assert "infeasible" in applied.fell_back
    assert rig.template_resources() == at(5000)


def test_in_place_falls_back_when_the_api_server_refuses_a_resize_beyond_the_node(rig: Rig) -> None:
    """From Kubernetes 1.36 the API server itself refuses a resize larger than the Pod's node's allocatable
    (its PodResizeValidator admission plugin: 403, cause NodeCapacity), where the kubelet of 1.34 accepted
    it and reported it Infeasible. The Node and the kubelet's status are played by us (a Node object with
    512Mi allocatable, the Pod bound to it, its reconciler reported running): the refusal is the real API
    server's. The size goes through the fallback, said, and the Pod keeps the size it had."""
    node_name = f"small-{rig.namespace}"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": node_name}}
    rig.api.create(kubeapi.NODE, None, node)
    try:
        allocatable = {"cpu": "1", "memory": "512Mi", "pods": "10"}
        status = {"capacity": allocatable, "allocatable": allocatable}
        rig.api.patch(kubeapi.NODE, None, node_name, {"status": status}, subresource="status")
        pod = reconciler_pod(rig.key, rig.namespace)
        pod["spec"]["nodeName"] = node_name
        name = rig.api.create(kubeapi.POD, rig.namespace, pod)["metadata"]["name"]
        running = _status("reconciler", resources_json(at(100)))
        statuses = {"phase": "Running", "containerStatuses": [running]}
        rig.api.patch(kubeapi.POD, rig.namespace, name, {"status": statuses}, subresource="status")
        spec_before = rig.api.get(kubeapi.POD, rig.namespace, name)["spec"]
        target = InPlaceTarget(
            rig.api, DeploymentTarget(rig.api, namespace=rig.namespace), namespace=rig.namespace
        )
        assert at(5000).memory_request_mib > 512, "the test's size must not fit the node"
        applied = target.apply(rig.key, at(5000), rig.pod())
        assert (applied.resources, applied.restarted) == (at(5000), True)
        assert applied.fell_back is not None
        assert "more than its node's allocatable" in applied.fell_back
        assert "node didn't have enough allocatable resources" in applied.fell_back, "the server's words"
        assert rig.template_resources() == at(5000)
        assert rig.api.get(kubeapi.POD, rig.namespace, name)["spec"] == spec_before, "no resize"
    finally:
        rig.api.delete(kubeapi.NODE, None, node_name)


def test_in_place_falls_back_where_the_kubelet_reports_no_resources_of_the_running_container(
    rig: Rig,
) -> None:
    """Played by us: the status a kubelet with InPlacePodVerticalScaling off writes (the container running,
    no `resources`, no `allocatedResources`; the real one is tested in test_node_faults). A resize there
    would stay in the spec: the size goes through the fallback, said."""
    pod = rig.api.create(kubeapi.POD, rig.namespace, reconciler_pod(rig.key, rig.namespace))
    status = _status("reconciler", {})
    del status["resources"]
    rig.api.patch(
        kubeapi.POD,
        rig.namespace,
        pod["metadata"]["name"],
        {"status": {"containerStatuses": [status]}},
        subresource="status",
    )
    target = InPlaceTarget(
        rig.api, DeploymentTarget(rig.api, namespace=rig.namespace), namespace=rig.namespace
    )
    spec_before = rig.api.get(kubeapi.POD, rig.namespace, pod["metadata"]["name"])["spec"]
    applied = target.apply(rig.key, at(5000), rig.pod())
    assert (applied.resources, applied.restarted) == (at(5000), True)
    assert applied.fell_back is not None
    assert "InPlacePodVerticalScaling off" in applied.fell_back
    assert rig.template_resources() == at(5000)
    assert rig.api.get(kubeapi.POD, rig.namespace, pod["metadata"]["name"])["spec"] == spec_before, (
        "no resize"
    )


def test_in_place_without_a_pod_writes_nothing_the_next_pod_gets_it_at_admission(rig: Rig) -> None:
    """Between two Pods of a rollout (or before the first is made) no Pod can be resized and nothing is
    rolled out: the size is only published (our webhook gives it to the next Pod)."""
    before = rig.deployment()
    target = InPlaceTarget(
        rig.api, DeploymentTarget(rig.api, namespace=rig.namespace), namespace=rig.namespace
    )
    assert target.apply(rig.key, at(5000), None) == Applied(at(5000), restarted=False)
    assert rig.deployment()["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]


def test_a_resize_the_kubelet_defers_is_read_with_the_size_it_asks(rig: Rig) -> None:
    """Played by us: the kubelet's report of a deferred resize (`PodResizePending`, reason `Deferred`),
    on a Pod whose spec asks for the size for 5,000 objects while it runs the size for 100."""
    pod = rig.api.create(kubeapi.POD, rig.namespace, reconciler_pod(rig.key, rig.namespace))
    name = pod["metadata"]["name"]
    patch = {"spec": {"containers": [{"name": "reconciler", "resources": resources_json(at(5000))}]}}
    rig.api.patch(kubeapi.POD, rig.namespace, name, patch, patch_type="strategic", subresource="resize")
    deferred = {
        "type": "PodResizePending",
        "status": "True",
        "reason": "Deferred",
        "message": "Node didn't have enough capacity: memory, requested: 1207959552, capacity: 1073741824",
    }
    status = {"conditions": [deferred], "containerStatuses": [_status("reconciler", resources_json(at(100)))]}
    rig.api.patch(kubeapi.POD, rig.namespace, name, {"status": status}, subresource="status")
    target = InPlaceTarget(
        rig.api, DeploymentTarget(rig.api, namespace=rig.namespace), namespace=rig.namespace
    )
    reading = rig.read(target)
    assert reading.current == at(100), "what runs"
    assert reading.deferred == (at(5000), deferred["message"])


def test_the_real_api_server_serves_pods_resize_in_discovery(api: kubeapi.KubeClient) -> None:
    assert api.serves_pod_resize() is True


def test_pods_resize_is_served_by_the_real_api_server(api: kubeapi.KubeClient, namespace: str) -> None:
    key = RSyncKey("RootSync", namespace, "root-sync")
    pod = api.create(kubeapi.POD, namespace, reconciler_pod(key, namespace))
    patch = {
        "spec": {
            "containers": [{"name": "reconciler", "resources": resources_json(Resources(300, 400, 300, 400))}]
        }
    }
    written = api.patch(
        kubeapi.POD, namespace, pod["metadata"]["name"], patch, patch_type="strategic", subresource="resize"
    )
    container = next(c for c in written["spec"]["containers"] if c["name"] == "reconciler")
    assert resources_of(container["resources"]) == Resources(300, 400, 300, 400)
    # A resources change through a plain pod update is refused: they are immutable outside resize.
    other = {
        "spec": {
            "containers": [{"name": "reconciler", "resources": resources_json(Resources(500, 600, 500, 600))}]
        }
    }
    with pytest.raises(kubeapi.Invalid):
        api.patch(kubeapi.POD, namespace, pod["metadata"]["name"], other, patch_type="strategic")


def test_recommend_target_applies_nothing(rig: Rig) -> None:
    template_before = rig.deployment()["spec"]["template"]
    target = RecommendTarget(rig.api)
    rig.start(target)
    wait_for(lambda: rig.read(target).current == at(100), what="first recommendation")
    rig.commit(5000)
    rig.inventory(5000)
    wait_for(lambda: rig.read(target).current == at(5000), what="recommendation")
    annotations = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"]["annotations"]
    assert parse_resources_annotation(annotations[RECOMMENDED_ANNOTATION]) == at(5000)
    assert rig.deployment()["spec"]["template"] == template_before


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


def test_a_reconciler_entry_someone_else_set_is_theirs_until_they_hand_it_to_us(rig: Rig) -> None:
    theirs = {"containerName": "reconciler", "memoryRequest": "64Mi", "memoryLimit": "64Mi"}
    rig.api.patch(
        kubeapi.ROOTSYNC, rig.namespace, rig.key.name, {"spec": {"override": {"resources": [theirs]}}}
    )
    target = RSyncOverrideTarget(rig.api)
    controller = rig.start(target)
    wait_for(
        lambda: (
            decisions(controller).get(rig.key)
            and decisions(controller)[rig.key].outcome == Outcome.HELD_BY_OWNER
        ),
        what="the user's entry held",
    )
    # The decision is taken before its annotations are written: wait for the write, not the decision.
    wait_for(
        lambda: (
            HELD_ANNOTATION
            in rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"].get("annotations", {})
        ),
        what="why it is held, published",
    )
    body = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
    assert body["spec"]["override"]["resources"] == [theirs], "their entry is untouched"
    assert "set by someone else" in body["metadata"]["annotations"][HELD_ANNOTATION]
    assert parse_resources_annotation(body["metadata"]["annotations"][RECOMMENDED_ANNOTATION]) == at(100)
    # Handed to us: written as usual from then on (a scale-up from their 64Mi: at once).
    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"metadata": {"annotations": {MANAGE_OVERRIDE_ANNOTATION: "true"}}},
    )
    wait_for(lambda: rig.read(target).current == at(100), what="our size once the entry is handed to us")


def test_override_reverted_by_another_writer_is_reported_and_not_fought_forever(rig: Rig) -> None:
    # The entry is handed to us, and something else keeps changing it (a webhook, another controller).
    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"metadata": {"annotations": {MANAGE_OVERRIDE_ANNOTATION: "true"}}},
    )
    target = RSyncOverrideTarget(rig.api)
    controller = rig.start(target)
    wait_for(lambda: rig.read(target).current == at(100), what="first size")
    reverted = _metric("objcount_apply_errors_total", target="rsync-override", reason="reverted")
    theirs = Resources(10, 64, 10, 64)

    def revert_once() -> bool:
        body = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
        body["spec"]["override"]["resources"] = [
            {
                "containerName": "reconciler",
                "cpuRequest": "10m",
                "memoryRequest": "64Mi",
                "cpuLimit": "10m",
                "memoryLimit": "64Mi",
            }
        ]
        try:
            rig.api.replace(kubeapi.ROOTSYNC, rig.namespace, rig.key.name, body)
        except (
            kubeapi.Conflict
        ):  # the service wrote in between (its annotations): read again, as a controller would
            return False
        return True

    def revert() -> None:
        wait_for(revert_once, what="the other writer's update")

    for round_ in range(1, controller.max_reverts_per_hour + 1):
        revert()
        expected = reverted + round_
        wait_for(
            lambda expected=expected: (
                _metric("objcount_apply_errors_total", target="rsync-override", reason="reverted") >= expected
            ),
            what=f"revert {round_} noticed",
        )
        wait_for(lambda: rig.read(target).current == at(100), what=f"re-applied after revert {round_}")
    revert()  # one too many within the hour: the service stops fighting and says so
    wait_for(
        lambda: (
            _metric("objcount_apply_errors_total", target="rsync-override", reason="reverted")
            > reverted + controller.max_reverts_per_hour
        ),
        what="last revert noticed",
    )
    controller.queue.add(rig.key)
    wait_for(lambda: decisions(controller)[rig.key].resources == theirs, what="their size accepted")
    assert rig.read(target).current == theirs


def test_per_rsync_opt_out_and_platform_annotations(rig: Rig) -> None:
    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"metadata": {"annotations": {AUTOSCALE_ANNOTATION: "false"}}},
    )
    template_before = rig.deployment()["spec"]["template"]
    controller = rig.start(DeploymentTarget(rig.api, namespace=rig.namespace))
    rig.inventory(5000)
    wait_for(
        lambda: annotation_counts(rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)).sync == 5000,
        what="counts still recorded",
    )
    assert controller.reconcile(rig.key) == Outcome.OPTED_OUT
    assert rig.deployment()["spec"]["template"] == template_before

    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"metadata": {"annotations": {AUTOSCALE_ANNOTATION: None, PLATFORM_ANNOTATION: "mainframe"}}},
    )
    wait_for(lambda: controller.reconcile(rig.key) == Outcome.ERROR, what="unknown platform refused")
    assert rig.deployment()["spec"]["template"] == template_before

    rig.api.patch(
        kubeapi.ROOTSYNC,
        rig.namespace,
        rig.key.name,
        {"metadata": {"annotations": {PLATFORM_ANNOTATION: "autopilot"}}},
    )
    # 5,000 objects: 1125m / 1152Mi on Standard; Autopilot rounds CPU up to 1250m, then 1.125 GiB is
    # under 1 GiB per vCPU, so memory rises to 1.25 GiB = 1280Mi (limits equal requests).
    expected = Resources(1250, 1280, 1250, 1280)
    wait_for(lambda: requests(rig.template_resources()) == requests(expected), what="sized for Autopilot")


def test_deployment_target_with_a_concurrent_writer_on_the_deployment(rig: Rig) -> None:
    """Another manager updating the Deployment (read-modify-write, like the reconciler manager) while we
    apply: our server-side apply never conflicts, and neither side's fields are lost."""
    target = DeploymentTarget(rig.api, namespace=rig.namespace)
    name = reconciler_name(rig.key)
    stop = threading.Event()
    rounds = [0]

    def other_manager() -> None:
        while not stop.is_set():
            body = rig.api.get(kubeapi.DEPLOYMENT, rig.namespace, name)
            body["metadata"].setdefault("labels", {})["other-round"] = str(rounds[0])
            git_sync = next(
                c for c in body["spec"]["template"]["spec"]["containers"] if c["name"] == "git-sync"
            )
            git_sync["args"] = [f"--round={rounds[0]}"]
            try:
                rig.api.replace(kubeapi.DEPLOYMENT, rig.namespace, name, body)
                rounds[0] += 1
            except kubeapi.Conflict:
                continue

    writer = threading.Thread(target=other_manager)
    writer.start()
    try:
        for step in range(1, 21):  # 20 applies racing the other manager
            wanted = Resources(100 * step, 128 * step, 100 * step, 128 * step)
            assert target.apply(rig.key, wanted, rig.pod()).resources == wanted
    finally:
        stop.set()
        writer.join()
    deployment = rig.deployment()
    containers = {c["name"]: c for c in deployment["spec"]["template"]["spec"]["containers"]}
    assert resources_of(containers["reconciler"]["resources"]) == Resources(2000, 2560, 2000, 2560)
    assert containers["git-sync"]["args"] == [f"--round={rounds[0] - 1}"]
    assert deployment["metadata"]["labels"]["other-round"] == str(rounds[0] - 1)
    assert rounds[0] > 0


# ----- Events -----------------------------------------------------------------------------------------------
def test_decisions_are_events_on_the_rsync_kubectl_describe_shows_and_a_burst_writes_few(
    rig: Rig, control_plane: LocalControlPlane
) -> None:
    """A scale-up and a held scale-down are Events on the RootSync (`kubectl describe` lists them); then
    1,000 reconciles that hold the same scale-down write no new Event: the one Event becomes a series."""
    uid = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)["metadata"]["uid"]
    writer = EventWriter(rig.api, "test-replica").start()
    controller = rig.start(DeploymentTarget(rig.api, namespace=rig.namespace), writer)
    rig.commit(5000)
    rig.inventory(5000)
    wait_for(
        lambda: requests(rig.template_resources()) == requests(at(5000)), what="scale-up to 5,000 objects"
    )
    rig.commit(100)
    rig.inventory(100)
    wait_for(lambda: decisions(controller)[rig.key].lower_since is not None, what="the scale-down held")
    wait_for(lambda: controller.observed(rig.key).source == 100, what="source count")
    controller.stop()  # from here on, the only reconciles are the burst's
    rsync_now = rig.api.get(kubeapi.ROOTSYNC, rig.namespace, rig.key.name)
    for _ in range(1000):
        assert controller.executor.reconcile(rig.key, rsync_now, ObjectCounts(100, 100)) == Outcome.POSTPONED
    writer.stop()
    reasons = sorted(e["reason"] for e in events_on(rig.api, rig.namespace, uid))
    # Two scale-ups (the defaults to 100 objects' size, then 5,000's): one Event each; one held scale-down.
    assert reasons == ["ScaleDownPostponed", "ScaledUp", "ScaledUp"], reasons
    (held,) = [e for e in events_on(rig.api, rig.namespace, uid) if e["reason"] == "ScaleDownPostponed"]
    assert held["type"] == "Normal"
    assert held["series"]["count"] >= 2, "the repeats made it a series"
    described = subprocess.run(
        [
            str(control_plane.bin_dir / "kubectl"),
            f"--kubeconfig={control_plane.kubeconfig}",
            "describe",
            "rootsync",
            rig.key.name,
            "-n",
            rig.namespace,
        ],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    events = described[described.index("Events:") :]
    assert "ScaledUp" in events
    assert "ScaleDownPostponed" in events
    assert "objcount.dev/autoscaler" in events
