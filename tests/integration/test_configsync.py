"""Real Config Sync in the loop: v1.22.0's reconciler-manager and reconcilers, built from the pinned
source, on a control plane with kube-controller-manager and the upstream CRDs unmodified.

The reconciler processes, their memory cgroups and OOM kills are real; the Pod lifecycle around them
(status, restarts, volumes) is played by `controlplane.node`, and the test plays git-sync by writing
commits into the RSync's `repo` volume. Expected counts and sizes are worked out by hand below, never
computed by the code under test.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.annotations import RECOMMENDED_ANNOTATION, SOURCE_ANNOTATION, SYNC_ANNOTATION
from controlplane.configsync import (
    NAMESPACE,
    SIDECAR_CONTAINER,
    ConfigSyncStack,
    build_configsync,
    container_running,
    create_or_replace,
    grant_reposync,
    install_cluster,
    install_sidecar,
    reposync,
    rootsync,
    rsync_gone,
    sidecar_template_text,
    uninstall_webhook,
    webhook_env,
)
from controlplane.launcher import free_port
from controlplane.node import ContainerState, MemoryCgroup
from controlplane.seed import REPO_ROOT, configmaps_yaml, ensure_namespace, manifests_in
from inventory import kubeapi
from inventory.ids import RSyncKey, reconciler_name
from tests.helpers import (
    Service,
    alive,
    kib,
    legacy_count,
    network_namespaces_in_use,
    size_aware_by_hand,
    wait_for,
)

JSON = dict[str, Any]
MiB = 1 << 20
SYNC_TIMEOUT = 240.0
CONFIG_SYNC_FINALIZERS = {"configsync.gke.io/reconciler-manager", "configsync.gke.io/reconciler"}


def _suffix() -> str:
    return uuid.uuid4().hex[:8]


@pytest.fixture
def stack(config_sync: ConfigSyncStack) -> Iterator[ConfigSyncStack]:
    """The shared stack; RSyncs a test creates are deleted after it (Config Sync's finalizers run)."""
    created: list[RSyncKey] = []
    config_sync.created = created  # type: ignore[attr-defined]
    yield config_sync
    api = config_sync.api
    assert api is not None
    for key in created:
        resource = kubeapi.RSYNC_RESOURCES[key.kind]
        with contextlib.suppress(kubeapi.NotFound):
            api.delete(resource, key.namespace, key.name)
    for key in created:
        wait_for(lambda k=key: rsync_gone(api, k), timeout=120, what=f"{key} deleted by Config Sync")


def create(stack: ConfigSyncStack, body: JSON) -> RSyncKey:
    meta = body["metadata"]
    key = RSyncKey(body["kind"], meta["namespace"], meta["name"])
    assert stack.api is not None
    stack.api.create(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, body)
    stack.created.append(key)  # type: ignore[attr-defined]
    return key


def get_rsync(stack: ConfigSyncStack, key: RSyncKey) -> JSON:
    assert stack.api is not None
    return stack.api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)


def sync_completed(stack: ConfigSyncStack, key: RSyncKey, commit: str) -> JSON | None:
    """The RSync once the reconciler reports the sync of `commit` finished without errors."""
    rsync = get_rsync(stack, key)
    return rsync if finished(rsync, commit) else None


def finished(rsync: JSON, commit: str) -> bool:
    """The RSync says its reconciler finished the sync of `commit` without errors (read here from the
    status fields, not with the code under test)."""
    status = rsync.get("status") or {}
    syncing = next((c for c in status.get("conditions") or [] if c["type"] == "Syncing"), {})
    done = (
        (status.get("source") or {}).get("commit") == commit
        and (status.get("sync") or {}).get("commit") == commit
        and syncing.get("status") == "False"
        and syncing.get("message") == "Sync Completed"
        and status.get("lastSyncedCommit") == commit
    )
    return bool(done)


def inventory_entries(stack: ConfigSyncStack, key: RSyncKey) -> list[JSON]:
    assert stack.api is not None
    group = stack.api.get(kubeapi.RESOURCEGROUP, key.namespace, key.name)
    entries: list[JSON] = (group.get("spec") or {}).get("resources") or []
    return entries


def objects_in(text: str) -> int:
    """Objects in a manifest file, counted here with PyYAML (not with the code under test)."""
    return sum(1 for document in yaml.safe_load_all(text) if document)


def sidecar_env(stack: ConfigSyncStack, key: RSyncKey, target: str) -> dict[str, str]:
    """Our service in sidecar mode for one RSync, run on the host next to the stack (admin credentials),
    with the count-only `fitted` preset: the tests using it work each size out by hand from the counts
    (the default, size-aware, is worked out by hand where the shipped install runs it)."""
    return {
        "OBJCOUNT_PRESET": "fitted",
        "OBJCOUNT_KUBECONFIG": str(stack.plane.kubeconfig),
        "OBJCOUNT_MODE": "sidecar",
        "OBJCOUNT_RSYNC_KIND": key.kind,
        "OBJCOUNT_RSYNC_NAME": key.name,
        "OBJCOUNT_RSYNC_NAMESPACE": key.namespace,
        "OBJCOUNT_SOURCE_ROOT": str(stack.repo(key)),
        "OBJCOUNT_TARGET": target,
        "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": "0",
    }


def scaled_kib(stack: ConfigSyncStack, key: RSyncKey, objects: int) -> int:
    """KiB of the RSync's current commit (read here from its files), scaled from its objects to `objects`
    and rounded up, as the size-aware preset sizes them."""
    commit_dir = (stack.repo(key) / "source" / "rev").resolve()
    manifests = [path.read_text() for path in sorted(commit_dir.rglob("*.yaml"))]
    in_source = sum(objects_in(text) for text in manifests)
    return -(-kib(*manifests) * objects // in_source)


def count_annotations(stack: ConfigSyncStack, key: RSyncKey) -> tuple[str | None, str | None]:
    annotations = get_rsync(stack, key)["metadata"].get("annotations") or {}
    return annotations.get(SOURCE_ANNOTATION), annotations.get(SYNC_ANNOTATION)


def assert_config_sync_state_intact(stack: ConfigSyncStack, key: RSyncKey, commit: str) -> None:
    """What Config Sync writes on the RSync is all there, and it reports no error."""

    def reconciled() -> JSON | None:
        # The reconciler-manager reports Reconciling until the Deployment has been available 10 s.
        rsync = get_rsync(stack, key)
        conditions = {c["type"]: c for c in (rsync.get("status") or {}).get("conditions") or []}
        return rsync if conditions.get("Reconciling", {}).get("status") == "False" else None

    rsync = wait_for(reconciled, timeout=60, what="the reconciler-manager to finish reconciling")
    status = rsync["status"]
    assert status["source"]["commit"] == status["sync"]["commit"] == status["lastSyncedCommit"] == commit
    assert not status["source"].get("errors")
    assert not status["sync"].get("errors")
    assert "objectCount" not in status["sync"]
    assert "objectCount" not in status["source"]
    assert set(rsync["metadata"].get("finalizers") or []) >= CONFIG_SYNC_FINALIZERS
    conditions = {c["type"]: c for c in status.get("conditions") or []}
    assert conditions.get("Stalled", {}).get("status", "False") == "False", conditions
    assert not manager_errors_about(stack, key)


def manager_errors_about(stack: ConfigSyncStack, key: RSyncKey) -> list[str]:
    """The reconciler-manager's error lines about this RSync, less its waits for the new Deployment to
    roll out and become available (which it logs as errors on every RSync's start)."""
    logs = "".join(
        stack.harness.log(pod["metadata"]["name"], "reconciler-manager")
        for pod in stack.pods("app=reconciler-manager")
    )
    about = f'sync="{key.namespace}/{key.name}"'
    return [
        line
        for line in logs.splitlines()
        if line.startswith("E") and about in line and "InProgress: " not in line
    ]


def assert_upstream_crds_unmodified(stack: ConfigSyncStack) -> None:
    assert stack.api is not None
    for name in ("rootsync-crd.yaml", "reposync-crd.yaml", "resourcegroup-crd.yaml"):
        (upstream,) = manifests_in(stack.build.manifests / name)
        served = stack.api.get(kubeapi.CRD, None, upstream["metadata"]["name"])
        schemas = [v["schema"] for v in served["spec"]["versions"]]
        assert schemas == [v["schema"] for v in upstream["spec"]["versions"]], name


# ----- counts ------------------------------------------------------------------------------------------------
def test_rootsync_counts_are_what_the_real_reconciler_produced(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    apps = f"apps-{_suffix()}"  # does not exist yet: the reconciler creates it (implicit namespace)
    key = RSyncKey("RootSync", NAMESPACE, f"counts-{_suffix()}")
    manifests = configmaps_yaml(40, namespace=apps)
    commit = stack.commit(key, {"configmaps.yaml": manifests})
    create(stack, rootsync(key.name))
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")

    entries = inventory_entries(stack, key)
    # 40 ConfigMaps and the Namespace the reconciler added for them (implicit namespace strategy).
    assert len(entries) == 41
    assert {"group": "", "kind": "Namespace", "namespace": "", "name": apps} in entries
    assert objects_in(manifests) == 40

    # The size-aware preset with no base and 1 MiB steps, so its object terms show in the recommendation.
    size_aware = {"OBJCOUNT_PRESET": "size-aware", "OBJCOUNT_BASE_MIB": "0", "OBJCOUNT_MIN_MIB": "1"}
    env = sidecar_env(stack, key, "recommend") | size_aware | {"OBJCOUNT_STEP_MIB": "1"}
    assert stack.api is not None
    surface = legacy_count(stack.api)
    services.append(Service(env, tmp_path / "service.log"))
    wait_for(lambda: count_annotations(stack, key) == ("40", "41"), timeout=60, what="counts in annotations")
    source, sync = count_annotations(stack, key)
    assert (source, sync) == (str(objects_in(manifests)), str(len(inventory_entries(stack, key))))
    annotations = get_rsync(stack, key)["metadata"]["annotations"]
    assert annotations["objcount.dev/source-kib"] == str(kib(manifests))
    assert annotations["objcount.dev/source-kinds"] == '{"ConfigMap":40}'
    # 41 objects (the Namespace too): 40 ConfigMaps at 0.0501 MiB, the Namespace at 0.1441 (any other
    # kind), the source's KiB scaled to 41 objects at 0.0082, and 0.5237 per resource type over 73.
    scaled_kib = -(-kib(manifests) * 41 // 40)
    objects_mib = Fraction("0.0501") * 40 + Fraction("0.1441") + Fraction("0.0082") * scaled_kib
    memory = objects_mib + Fraction("0.5237") * max(0, surface - 73)

    def recommended_memory() -> str | None:
        text = get_rsync(stack, key)["metadata"]["annotations"].get(RECOMMENDED_ANNOTATION)
        return None if text is None else str(json.loads(text)["requests"]["memory"])

    wait_for(lambda: recommended_memory() == f"{math.ceil(memory)}Mi", what="the size-aware recommendation")
    assert_config_sync_state_intact(stack, key, commit)
    assert_upstream_crds_unmodified(stack)


def test_reposync_counts_are_what_the_real_reconciler_produced(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    assert stack.api is not None
    team = f"team-{_suffix()}"
    ensure_namespace(stack.api, team)
    key = RSyncKey("RepoSync", team, "repo-sync")
    grant_reposync(stack.api, team, key.name)
    manifests = configmaps_yaml(25, namespace=team)
    commit = stack.commit(key, {"configmaps.yaml": manifests})
    create(stack, reposync(team, key.name))
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")

    assert len(inventory_entries(stack, key)) == 25  # a RepoSync adds no Namespace
    services.append(Service(sidecar_env(stack, key, "recommend"), tmp_path / "service.log"))
    wait_for(lambda: count_annotations(stack, key) == ("25", "25"), timeout=60, what="counts in annotations")
    assert count_annotations(stack, key) == (
        str(objects_in(manifests)),
        str(len(inventory_entries(stack, key))),
    )
    assert_config_sync_state_intact(stack, key, commit)


# ----- sizes reach the process ---------------------------------------------------------------------------
def reconciler_entry(rsync: JSON) -> JSON | None:
    """The reconciler's entry in the RSync's spec.override.resources."""
    entries = ((rsync.get("spec") or {}).get("override") or {}).get("resources") or []
    return next((e for e in entries if e.get("containerName") == "reconciler"), None)


def reconciler_override(stack: ConfigSyncStack, key: RSyncKey) -> JSON | None:
    return reconciler_entry(get_rsync(stack, key))


def override_memory(stack: ConfigSyncStack, key: RSyncKey) -> str | None:
    return memory_limit(get_rsync(stack, key))


def memory_limit(rsync: JSON) -> str | None:
    limit: str | None = (reconciler_entry(rsync) or {}).get("memoryLimit")
    return limit


def reconciler_resources(template_or_pod_spec: JSON) -> JSON:
    containers = template_or_pod_spec["containers"]
    resources: JSON = next(c for c in containers if c["name"] == "reconciler").get("resources") or {}
    return resources


def test_override_reaches_the_reconciler_process_memory_limit(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    assert stack.api is not None
    key = RSyncKey("RootSync", NAMESPACE, f"override-{_suffix()}")
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=f"apps-{_suffix()}")})
    create(stack, rootsync(key.name))
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    services.append(Service(sidecar_env(stack, key, "rsync-override"), tmp_path / "service.log"))

    # Worked by hand for the fitted preset (sidecar_env), Standard: n = max(source 100, inventory
    # 101) = 101; 198 MiB + 0.174 MiB x 101 = 215.6 MiB, rounded up to a 32 MiB step = 224 MiB; CPU
    # 224 x 1000 / 1024 = 218.75, rounded up = 219m; limits equal requests.
    expected = {"memoryLimit": "224Mi", "memoryRequest": "224Mi", "cpuLimit": "219m", "cpuRequest": "219m"}

    wait_for(lambda: override_memory(stack, key) == "224Mi", timeout=60, what="our override")
    assert {
        k: v for k, v in (reconciler_override(stack, key) or {}).items() if k != "containerName"
    } == expected

    def deployment_limit() -> str | None:
        deployment = stack.api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))  # type: ignore[union-attr]
        return reconciler_resources(deployment["spec"]["template"]["spec"]).get("limits", {}).get("memory")

    wait_for(lambda: deployment_limit() == "224Mi", timeout=60, what="the reconciler-manager's Deployment")

    def new_pod() -> JSON | None:
        pod = stack.reconciler_pod(key)
        limit = reconciler_resources(pod["spec"]).get("limits", {}).get("memory") if pod else None
        return pod if pod and limit == "224Mi" and container_running(pod, "reconciler") else None

    pod = wait_for(new_pod, timeout=120, what="a reconciler Pod with the new limit running")
    process = wait_for(
        lambda: stack.harness.container(pod["metadata"]["name"]), timeout=30, what="the process"
    )
    assert process.cgroup.limit() == 224 * MiB
    assert Path(f"/proc/{process.pid}").exists()


def test_a_reconciler_below_its_need_is_oom_killed_and_restarted(stack: ConfigSyncStack) -> None:
    key = RSyncKey("RootSync", NAMESPACE, f"oom-{_suffix()}")
    stack.commit(key, {"configmaps.yaml": configmaps_yaml(10, namespace=f"apps-{_suffix()}")})
    body = rootsync(key.name)
    # Set as a user would; the reconciler's resident memory at start is about 80 MiB.
    body["spec"]["override"] = {
        "resources": [{"containerName": "reconciler", "memoryRequest": "24Mi", "memoryLimit": "24Mi"}]
    }
    create(stack, body)

    def oom_killed_and_restarted() -> JSON | None:
        pod = stack.reconciler_pod(key)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        status = next((s for s in statuses if s["name"] == "reconciler"), {})
        terminated = (status.get("lastState") or {}).get("terminated") or {}
        return pod if terminated.get("reason") == "OOMKilled" and status.get("restartCount", 0) >= 1 else None

    pod = wait_for(oom_killed_and_restarted, timeout=180, what="an OOM kill and a restart in the Pod status")
    process = stack.harness.container(pod["metadata"]["name"])
    assert process is not None
    assert process.cgroup.limit() == 24 * MiB
    assert process.cgroup.oom_kills() >= 1  # the kernel's own count
    # Let it recover, so that its finalizer can run when the test deletes the RootSync.
    assert stack.api is not None
    stack.api.patch(kubeapi.ROOTSYNC, NAMESPACE, key.name, {"spec": {"override": None}})


def test_an_oom_killed_reconciler_is_sized_above_its_need_and_stays_there_after_a_restart(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    """Settings that size far too low put the real reconciler under 24Mi, where the kernel kills it. The
    sidecar reads the kill from the Pod status and raises the size from the limit it was killed at."""
    key = RSyncKey("RootSync", NAMESPACE, f"oom-floor-{_suffix()}")
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=f"apps-{_suffix()}")})
    create(stack, rootsync(key.name))
    # By hand: 0 MiB + 0.01 MiB x 101 = 1.01 MiB, raised to the minimum of 24 MiB (8 MiB steps); CPU
    # 24 x 1000 / 1024 -> 24m (minimum 10m): below Config Sync's default 50m/200Mi, so a scale-down once
    # the sync is done. After a kill at 24 MiB: max(24 x 1.5, 24 + 128) = 152 MiB (on the 8 MiB grid);
    # CPU 152 x 1000 / 1024 = 148.4 -> 149m. The real reconciler needs about 80 MiB for 100 objects.
    env = {
        **sidecar_env(stack, key, "rsync-override"),
        "OBJCOUNT_BASE_MIB": "0",
        "OBJCOUNT_MIB_PER_OBJECT": "0.01",
        "OBJCOUNT_MIN_MIB": "24",
        "OBJCOUNT_STEP_MIB": "8",
        "OBJCOUNT_CPU_MIN_M": "10",
        "OBJCOUNT_RESYNC_INTERVAL_SECONDS": "5",
    }
    service = Service(env, tmp_path / "service.log")
    services.append(service)

    def killed() -> JSON | None:
        pod = stack.reconciler_pod(key)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        status = next((s for s in statuses if s["name"] == "reconciler"), {})
        last = (status.get("lastState") or {}).get("terminated") or {}
        return pod if last.get("reason") == "OOMKilled" and memory_limit_of_pod(pod or {}) == "24Mi" else None

    undersized = wait_for(killed, timeout=SYNC_TIMEOUT, what="the reconciler OOM-killed under 24Mi")
    # The kernel's kills in the undersized Pod's memory cgroup (the harness keeps one per Pod).
    killed_in = stack.harness.container(undersized["metadata"]["name"])
    assert killed_in is not None
    assert killed_in.cgroup.oom_kills() == 1
    wait_for(
        lambda: override_memory(stack, key) == "152Mi", timeout=120, what="the size raised after the kill"
    )
    # Killed once: no other kill before the raise (the cgroup is gone once the rollout removed the Pod).
    with contextlib.suppress(OSError):
        assert killed_in.cgroup.oom_kills() == 1
    assert (reconciler_override(stack, key) or {}).get("cpuRequest") == "149m"
    floor = json.loads(get_rsync(stack, key)["metadata"]["annotations"]["objcount.dev/oom-floor"])
    assert floor["memory"] == "152Mi"
    assert service.metric("objcount_oom_floors_total") == 1

    def runs_at_152mi() -> JSON | None:
        pod = stack.reconciler_pod(key)
        ok = pod and memory_limit_of_pod(pod) == "152Mi" and sync_completed(stack, key, commit)
        return pod if ok else None

    pod = wait_for(runs_at_152mi, timeout=SYNC_TIMEOUT, what="the reconciler synced under 152Mi")
    process = stack.harness.container(pod["metadata"]["name"])
    assert process is not None
    assert process.cgroup.oom_kills() == 0

    # A restart of the service: the floor comes back from the RSync, and the size stays.
    service.stop()
    again = Service(env, tmp_path / "service-again.log")
    services.append(again)
    wait_for(
        lambda: again.metric("objcount_decisions_total") > 0,
        timeout=60,
        what="the restarted service deciding",
    )
    wait_for(
        lambda: again.metric('objcount_decisions_total{outcome="unchanged"}') > 0,
        timeout=60,
        what="the restarted service keeping the size",
    )
    assert override_memory(stack, key) == "152Mi"
    assert again.metric("objcount_oom_floors_total") == 0, "the same kill is not answered twice"
    assert process.cgroup.oom_kills() == 0


def synced_under_300mi(
    stack: ConfigSyncStack, prefix: str, objects: int
) -> tuple[RSyncKey, JSON, ContainerState]:
    """A RootSync of `objects` ConfigMaps whose user set the reconciler to 300Mi, synced: its key, its
    reconciler Pod and the running process."""
    key = RSyncKey("RootSync", NAMESPACE, f"{prefix}-{_suffix()}")
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(objects, namespace=f"apps-{_suffix()}")})
    body = rootsync(key.name)
    body["spec"]["override"] = {
        "resources": [{"containerName": "reconciler", "memoryRequest": "300Mi", "memoryLimit": "300Mi"}]
    }
    create(stack, body)
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    pod = stack.reconciler_pod(key)
    assert pod is not None
    process = stack.harness.container(pod["metadata"]["name"])
    assert process is not None
    assert process.cgroup.limit() == 300 * MiB
    return key, dict(pod), process


def test_a_lower_memory_limit_below_the_usage_is_refused_and_reported_not_applied(
    stack: ConfigSyncStack,
) -> None:
    """`pods/resize` to a limit below what the reconciler uses: the kubelet's refusal (played by our node
    harness, which compares the container's memory usage before lowering its limit, as the kubelet does):
    the limit stays, the Pod says why."""
    api = stack.api
    assert api is not None
    _, pod, process = synced_under_300mi(stack, "resize", 10)
    name = pod["metadata"]["name"]
    assert process.cgroup.usage() > 16 * MiB

    tiny = {"requests": {"memory": "16Mi"}, "limits": {"memory": "16Mi"}}
    patch = {"spec": {"containers": [{"name": "reconciler", "resources": tiny}]}}
    api.patch(kubeapi.POD, NAMESPACE, name, patch, patch_type="strategic", subresource="resize")

    def refusal() -> str:
        conditions = (api.get(kubeapi.POD, NAMESPACE, name).get("status") or {}).get("conditions") or []
        resizing = next((c for c in conditions if c["type"] == "PodResizeInProgress"), {})
        return str(resizing.get("message", "")) if resizing.get("reason") == "Error" else ""

    message = wait_for(refusal, timeout=30, what="the refused resize in the Pod status")
    assert "below the current usage" in message
    assert process.cgroup.limit() == 300 * MiB
    after = stack.harness.container(name)
    assert after is not None
    assert after.pid == process.pid, "the process from before the resize runs on"
    assert alive(process.pid)


def test_in_place_resizes_the_running_reconciler_and_each_new_pod(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    api = stack.api
    assert api is not None
    key = RSyncKey("RootSync", NAMESPACE, f"in-place-{_suffix()}")
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=f"apps-{_suffix()}")})
    body = rootsync(key.name)
    # The user's size, from which the Pods start (limits set, so a resize keeps the Pod's QoS class).
    body["spec"]["override"] = {
        "resources": [
            {
                "containerName": "reconciler",
                "cpuRequest": "300m",
                "cpuLimit": "300m",
                "memoryRequest": "400Mi",
                "memoryLimit": "400Mi",
            }
        ]
    }
    create(stack, body)
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    first = stack.reconciler_pod(key)
    assert first is not None
    # The reconciler process before any resize: a resize in place must leave this very process running.
    before = stack.harness.container(first["metadata"]["name"])
    assert before is not None
    assert alive(before.pid)
    assert before.cgroup.limit() == 400 * MiB
    env = {**sidecar_env(stack, key, "in-place"), "OBJCOUNT_RESYNC_INTERVAL_SECONDS": "5"}
    services.append(Service(env, tmp_path / "service.log"))

    # 101 objects: 198 + 0.174 x 101 = 215.6 MiB -> 224 MiB (as in the override test above).
    def resized(pod_uid: str) -> ContainerState | None:
        pod = stack.reconciler_pod(key)
        if pod is None or pod["metadata"]["uid"] != pod_uid:
            return None
        process = stack.harness.container(pod["metadata"]["name"])
        return process if process is not None and process.cgroup.limit() == 224 * MiB else None

    process = wait_for(lambda: resized(first["metadata"]["uid"]), timeout=90, what="the running Pod resized")
    assert process.pid == before.pid, "resized in place: the same process runs on"
    assert alive(before.pid)
    assert (
        reconciler_resources(
            api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))["spec"]["template"]["spec"]
        )["limits"]["memory"]
        == "400Mi"
    )
    assert reconciler_override(stack, key) == body["spec"]["override"]["resources"][0], (
        "the RSync is not written"
    )

    # A new Pod (as after a rollout) starts with the template's 400Mi, and is resized again.
    api.delete(kubeapi.POD, NAMESPACE, first["metadata"]["name"])
    second = wait_for(
        lambda: (
            (pod := stack.reconciler_pod(key)) and pod["metadata"]["uid"] != first["metadata"]["uid"] and pod
        ),
        timeout=60,
        what="the new Pod",
    )
    wait_for(lambda: resized(second["metadata"]["uid"]), timeout=90, what="the new Pod resized")


def test_in_place_reports_a_lower_limit_the_kubelet_refuses_and_the_reconciler_runs_on(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    """The kubelet's refusal of a limit below the usage (played by our node harness, which compares the
    container's memory usage before lowering its limit, as the kubelet does) is reported by the service,
    and the same reconciler process runs on under its old limit."""
    api = stack.api
    assert api is not None
    # The process before the service starts, so before any resize is sent.
    key, pod, process = synced_under_300mi(stack, "refused", 100)
    # Settings that size far too low, by hand: 0 MiB + 0.01 MiB x 101 = 1.01 MiB, raised to the minimum of
    # 16 MiB (a 16 MiB step); the reconciler holds more than that, so the resize to 16Mi is refused.
    env = {
        **sidecar_env(stack, key, "in-place"),
        "OBJCOUNT_BASE_MIB": "0",
        "OBJCOUNT_MIB_PER_OBJECT": "0.01",
        "OBJCOUNT_MIN_MIB": "16",
        "OBJCOUNT_STEP_MIB": "16",
        "OBJCOUNT_RESYNC_INTERVAL_SECONDS": "5",
    }
    service = Service(env, tmp_path / "service.log")
    services.append(service)
    refused = 'objcount_apply_errors_total{reason="refused",target="in-place"}'
    wait_for(lambda: service.metric(refused) >= 1, timeout=90, what="the refusal reported by the service")
    resize = next(
        c
        for c in api.get(kubeapi.POD, NAMESPACE, pod["metadata"]["name"])["status"]["conditions"]
        if c["type"] == "PodResizeInProgress"
    )
    assert resize["reason"] == "Error"
    assert "below the current usage" in resize["message"]
    assert "a lower limit was refused" in service.log.read_text()
    # Nothing else was tried: the same process runs on under its old limit, never OOM-killed.
    after = stack.harness.container(pod["metadata"]["name"])
    assert after is not None
    assert after.pid == process.pid
    assert alive(process.pid)
    assert process.cgroup.limit() == 300 * MiB
    assert process.cgroup.oom_kills() == 0
    assert stack.reconciler_pod(key)["metadata"]["uid"] == pod["metadata"]["uid"]  # type: ignore[index]


# ----- the four defects of the first version, reproduced on the real stack -----------------------------
def test_size_comes_down_after_a_real_prune(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    """1,000 -> 100 objects, applied and pruned by the real reconciler. The inventory keeps the implicit
    Namespace the source does not name, so it never equals the source: the scale-down waits for the
    reconciler's report that the prune has finished, and never comes before it."""
    apps = f"apps-{_suffix()}"
    key = RSyncKey("RootSync", NAMESPACE, f"prune-{_suffix()}")
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(1000, namespace=apps)})
    create(stack, rootsync(key.name))
    services.append(Service(sidecar_env(stack, key, "rsync-override"), tmp_path / "service.log"))
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")

    # 1,000 objects: n = 1,001; 198 + 0.174 x 1001 = 372.2 MiB -> 384 MiB.
    wait_for(lambda: override_memory(stack, key) == "384Mi", timeout=60, what="the size for 1,000 objects")
    committed = time.monotonic()
    pruned = stack.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=apps)})
    seen: list[JSON] = []

    def prune_finished() -> bool:
        seen.append(get_rsync(stack, key))  # one read: the status and the override of the same moment
        return finished(seen[-1], pruned)

    wait_for(prune_finished, timeout=SYNC_TIMEOUT, interval=0.2, what="the real prune")
    prune_seconds = time.monotonic() - committed
    assert len(inventory_entries(stack, key)) == 101
    during = [memory_limit(rsync) for rsync in seen if not finished(rsync, pruned)]
    assert during
    assert set(during) == {"384Mi"}, "the size came down before the reconciler finished the prune"
    # 100 objects: n = 101 (the Namespace stays); 198 + 0.174 x 101 = 215.6 MiB -> 224 MiB.
    wait_for(lambda: override_memory(stack, key) == "224Mi", timeout=60, what="the size after the prune")
    print(  # figures for BENCHMARKS.md (pytest -s), not assertions
        f"\nprune 1,000 -> 100: finished {prune_seconds:.1f} s after the commit (seen every 0.2 s), "
        f"size down {time.monotonic() - committed:.1f} s after the commit"
    )


@pytest.fixture
def webhook(stack: ConfigSyncStack, tmp_path: Path) -> Iterator[Service]:
    """The sidecar installed as the README says, its webhook served by our service in webhook mode on
    loopback (PLAYED BY US: the webhook Deployment's Pods, which nothing runs here). Removed after the
    test, so that other tests' reconciler Pods run without the sidecar."""
    api = stack.api
    assert api is not None
    template = tmp_path / "sidecar.yaml"
    template.write_text(sidecar_template_text())
    port = free_port()
    install_sidecar(api, tmp_path / "certs", webhook_url=f"https://127.0.0.1:{port}/mutate")
    # Started once its certificate exists, as the kubelet starts the webhook's Pod once its Secret does.
    service = Service(webhook_env(tmp_path / "certs", template, port), tmp_path / "webhook.log")
    try:
        wait_for(lambda: service.get("/readyz")[0] == 200, timeout=30, what="the webhook to serve")
        yield service
    finally:
        uninstall_webhook(api)
        service.stop()


def sidecar_process(stack: ConfigSyncStack, key: RSyncKey) -> tuple[JSON, int] | None:
    """The reconciler Pod of `key` with our sidecar in its spec and running as a process (its pid)."""
    pod = stack.reconciler_pod(key)
    if pod is None or SIDECAR_CONTAINER not in [c["name"] for c in pod["spec"]["containers"]]:
        return None
    state = stack.harness.container(pod["metadata"]["name"], SIDECAR_CONTAINER)
    return (pod, state.pid) if state is not None and alive(state.pid) else None


def root_and_repo_syncs(stack: ConfigSyncStack, prefix: str) -> dict[RSyncKey, str]:
    """A RootSync of 40 ConfigMaps (in a namespace it creates) and a RepoSync of 25 in a new namespace,
    created, each with the commit it syncs (the RootSync first). The RepoSync is granted as the README
    says: Config Sync's RoleBinding for its reconciler, and ours for its sidecar
    (`objcount grant-reposync`)."""
    assert stack.api is not None
    team = f"team-{_suffix()}"
    ensure_namespace(stack.api, team)
    root = RSyncKey("RootSync", NAMESPACE, f"{prefix}-{_suffix()}")
    repo = RSyncKey("RepoSync", team, "repo-sync")
    grant_reposync(stack.api, team, repo.name)
    granted = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "grant-reposync", team, repo.name],
        capture_output=True,
        text=True,
        check=True,
    )
    for item in yaml.safe_load_all(granted.stdout):
        create_or_replace(stack.api, item)
    commits = {
        root: stack.commit(root, {"configmaps.yaml": configmaps_yaml(40, namespace=f"apps-{_suffix()}")}),
        repo: stack.commit(repo, {"configmaps.yaml": configmaps_yaml(25, namespace=team)}),
    }
    create(stack, rootsync(root.name))
    create(stack, reposync(team, repo.name))
    return commits


def test_the_webhook_adds_our_sidecar_and_the_reconciler_manager_keeps_working(
    stack: ConfigSyncStack, webhook: Service
) -> None:
    api = stack.api
    assert api is not None
    commits = root_and_repo_syncs(stack, "sidecar")
    root, repo = commits

    # Each sidecar, with its own token and the shipped RBAC (and the shipped default, size-aware),
    # counts and sizes its own RSync: 40 ConfigMaps and the implicit Namespace, and 25 ConfigMaps.
    expected = {root: ("40", "41"), repo: ("25", "25")}
    surface = legacy_count(api)
    sizes = {
        root: size_aware_by_hand(
            configmaps=40, others=1, kib=scaled_kib(stack, root, 41), api_resources=surface
        ),
        repo: size_aware_by_hand(
            configmaps=25, others=0, kib=scaled_kib(stack, repo, 25), api_resources=surface
        ),
    }
    for key in (root, repo):
        wait_for(
            lambda k=key: sidecar_process(stack, k), timeout=SYNC_TIMEOUT, what=f"our sidecar in {key}'s Pod"
        )
        try:
            wait_for(lambda k=key: count_annotations(stack, k) == expected[k], timeout=120, what="counts")
        except AssertionError as error:
            found = sidecar_process(stack, key)
            log = stack.harness.log(found[0]["metadata"]["name"], SIDECAR_CONTAINER) if found else ""
            raise AssertionError(f"{key}: {error}; the sidecar's log ends with:\n{log[-3000:]}") from None
        wait_for(lambda k=key: override_memory(stack, k) == sizes[k][1], timeout=60, what=f"{key}'s override")
        assert (reconciler_override(stack, key) or {}).get("cpuRequest") == sizes[key][0]
    for key in (root, repo):
        # The override rolled the reconciler out: the new Pod got the sidecar again.
        pod, pid = wait_for(
            lambda k=key: (
                (found := sidecar_process(stack, k))
                and memory_limit_of_pod(found[0]) == sizes[k][1]
                and found
            ),
            timeout=SYNC_TIMEOUT,
            what=f"{key}'s new Pod with the sidecar",
        )
        deployment = api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))
        assert SIDECAR_CONTAINER not in [
            c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]
        ]
        assert_config_sync_state_intact(stack, key, commits[key])
        account = "objcount-sidecar" if key.kind == "RootSync" else f"objcount-{reconciler_name(key)}"
        assert_sidecar_has_only_its_own_token(stack, pod, pid, account)
    assert webhook.metric('objcount_webhook_admissions_total{result="injected"}') >= 4


def memory_limit_of_pod(pod: JSON) -> str | None:
    return reconciler_resources(pod["spec"]).get("limits", {}).get("memory")


def assert_sidecar_has_only_its_own_token(stack: ConfigSyncStack, pod: JSON, pid: int, account: str) -> None:
    """The sidecar's token is its account's (objcount-sidecar for every RootSync, one per RepoSync), and
    the Pod's own token is mounted nowhere in it."""
    token = Path(f"/proc/{pid}/root/var/run/secrets/kubernetes.io/serviceaccount/token").read_text()
    as_sidecar = kubeapi.KubeApi.connect(str(stack.plane.kubeconfig_for_token(token, f"sidecar-{pid}")))
    review = as_sidecar.request_json(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    as_sidecar.close()
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{NAMESPACE}:{account}"
    pod_token_volumes = [v["name"] for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access")]
    assert pod_token_volumes, "the Pod has its own token volume (for Config Sync's containers)"
    mounts = Path(f"/proc/{pid}/mountinfo").read_text()
    assert not [name for name in pod_token_volumes if name in mounts]


def test_a_webhook_that_does_not_answer_never_stops_config_sync(
    stack: ConfigSyncStack, webhook: Service
) -> None:
    webhook.stop()  # the configuration stays, pointing at a port nobody serves
    key = RSyncKey("RootSync", NAMESPACE, f"no-webhook-{_suffix()}")
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(5, namespace=f"apps-{_suffix()}")})
    create(stack, rootsync(key.name))
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    pod = stack.reconciler_pod(key)
    assert pod is not None
    assert SIDECAR_CONTAINER not in [c["name"] for c in pod["spec"]["containers"]]
    assert_config_sync_state_intact(stack, key, commit)


def test_a_reposync_not_granted_syncs_and_its_sidecar_waits_for_credentials(
    stack: ConfigSyncStack, webhook: Service
) -> None:
    """Config Sync's RoleBinding for the reconciler, but not ours for the sidecar: the webhook still adds
    the sidecar (it has no API access to check), whose token Secret does not exist (an optional volume:
    the Pod starts); the sidecar stays up without credentials, so the Pod is ready and the RepoSync syncs."""
    assert stack.api is not None
    team = f"team-{_suffix()}"
    ensure_namespace(stack.api, team)
    key = RSyncKey("RepoSync", team, "repo-sync")
    grant_reposync(stack.api, team, key.name)
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(5, namespace=team)})
    create(stack, reposync(team, key.name))
    pod, _ = wait_for(lambda: sidecar_process(stack, key), timeout=SYNC_TIMEOUT, what="our sidecar running")
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    assert_config_sync_state_intact(stack, key, commit)
    log = stack.harness.log(pod["metadata"]["name"], SIDECAR_CONTAINER)
    assert "objcount grant-reposync" in log, log[-2000:]
    assert sidecar_process(stack, key), "the sidecar is still running"


def test_cluster_mode_installed_as_the_readme_says_sizes_every_rsync(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    """`kubectl apply -k manifests/cluster`, then the service with its Deployment's environment and its
    ServiceAccount's own token (PLAYED BY US: the Deployment's Pod, run here as a process). With no sidecar
    the source is unknown, so each RSync is sized from its inventory."""
    api = stack.api
    assert api is not None
    install_cluster(api)
    (deployment,) = [
        m
        for m in manifests_in(REPO_ROOT / "manifests" / "cluster" / "deployment.yaml")
        if m["kind"] == "Deployment"
    ]
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e["value"] for e in container["env"] if "value" in e}
    account = deployment["spec"]["template"]["spec"]["serviceAccountName"]
    token = stack.plane.issue_service_account_token(NAMESPACE, account)
    commits = root_and_repo_syncs(stack, "cluster")
    root, repo = commits
    services.append(
        Service(
            {
                **env,
                "OBJCOUNT_IDENTITY": "objcount-autoscaler-test",
                "OBJCOUNT_KUBECONFIG": str(stack.plane.kubeconfig_for_token(token, account)),
            },
            tmp_path / "service.log",
        )
    )
    # The shipped default (size-aware) with no source: inventories of 41 (40 and the implicit Namespace)
    # and 25 entries, every entry of unknown kind and 2 KiB assumed per entry.
    surface = legacy_count(api)
    sizes = {
        key: size_aware_by_hand(configmaps=0, others=n, kib=2 * n, api_resources=surface)
        for key, n in ((root, 41), (repo, 25))
    }
    for key, entries in ((root, "41"), (repo, "25")):
        wait_for(
            lambda k=key: sync_completed(stack, k, commits[k]), timeout=SYNC_TIMEOUT, what=f"{key} synced"
        )
        wait_for(lambda k=key, e=entries: count_annotations(stack, k) == (None, e), timeout=60, what="counts")
        wait_for(lambda k=key: override_memory(stack, k) == sizes[k][1], timeout=60, what=f"{key}'s override")
        assert (reconciler_override(stack, key) or {}).get("cpuRequest") == sizes[key][0]
    for key in (root, repo):
        wait_for(
            lambda k=key: (
                (pod := stack.reconciler_pod(k))
                and memory_limit_of_pod(pod) == sizes[k][1]
                and container_running(pod, "reconciler")
            ),
            timeout=SYNC_TIMEOUT,
            what=f"{key}'s reconciler running with the new limit",
        )
        assert_config_sync_state_intact(stack, key, commits[key])


def _exists(api: kubeapi.KubeApi, resource: kubeapi.Resource, namespace: str, name: str) -> bool:
    try:
        api.get(resource, namespace, name)
    except kubeapi.NotFound:
        return False
    return True


def test_no_shipped_manifest_replaces_a_config_sync_crd(stack: ConfigSyncStack) -> None:
    api = stack.api
    assert api is not None
    upstream = {
        crd["metadata"]["name"]: crd
        for crd in manifests_in(stack.build.manifests)
        if crd.get("kind") == "CustomResourceDefinition"
    }
    # An empty build would make the check below pass on nothing: the CRDs we rely on must be there.
    assert {"rootsyncs.configsync.gke.io", "reposyncs.configsync.gke.io", "resourcegroups.kpt.dev"} <= set(
        upstream
    ), f"the Config Sync build lacks CRDs we rely on: {sorted(upstream)}"
    replaced = []
    for path in sorted((REPO_ROOT / "manifests").rglob("*.yaml")):
        for item in manifests_in(path):
            name = (item.get("metadata") or {}).get("name")
            if item.get("kind") != "CustomResourceDefinition" or name not in upstream:
                continue
            # What applying it would store, asked of the API server without storing it.
            current = api.get(kubeapi.CRD, None, name)
            body = {
                **item,
                "metadata": {**item["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
            }
            stored = api.request_json("PUT", kubeapi.CRD.path(None, name), query={"dryRun": "All"}, body=body)
            if [v["schema"] for v in stored["spec"]["versions"]] != [
                v["schema"] for v in upstream[name]["spec"]["versions"]
            ]:
                replaced.append(f"{path.relative_to(REPO_ROOT)}: {name}")
    assert not replaced, f"applying these would replace Config Sync's CRDs: {replaced}"


def test_the_deployment_target_refuses_a_deployment_the_reconciler_manager_owns(
    stack: ConfigSyncStack, services: list[Service], tmp_path: Path
) -> None:
    api = stack.api
    assert api is not None
    key = RSyncKey("RootSync", NAMESPACE, f"owned-{_suffix()}")
    commit = stack.commit(key, {"configmaps.yaml": configmaps_yaml(5, namespace=f"apps-{_suffix()}")})
    create(stack, rootsync(key.name))
    wait_for(lambda: sync_completed(stack, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    service = Service(sidecar_env(stack, key, "deployment"), tmp_path / "service.log")
    services.append(service)

    def ours_in_managed_fields() -> bool:
        deployment = api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))
        return any(
            m.get("manager") == "objcount-autoscaler"
            for m in deployment["metadata"].get("managedFields") or []
        )

    # It refuses at start and stays up, so the refusal can be scraped (an exit would crash-loop).
    owned = 'objcount_apply_errors_total{reason="owned",target="deployment"}'
    wait_for(lambda: service.metric(owned) == 1, timeout=60, what="the refusal in the metrics")
    assert service.process.poll() is None, "alive, not crash-looping"
    health, health_body = service.get("/healthz")
    assert (health, health_body.startswith("alive, refusing: ")) == (200, True)
    ready, ready_body = service.get("/readyz")
    assert ready == 503
    assert "managed by Config Sync's reconciler-manager" in ready_body
    assert not ours_in_managed_fields()
    told = [line for line in service.logs() if "rsync-override" in str(line["message"])]
    assert [line["level"] for line in told] == ["ERROR"], "said once, as an error"
    assert "in-place" in str(told[0]["message"])
    assert service.stop() == 1, "a refused target exits non-zero on SIGTERM"
    assert not ours_in_managed_fields()


# ----- the harness cleans up after itself --------------------------------------------------------------
def _descendants(pid: int) -> set[int]:
    found: set[int] = set()
    pending = [pid]
    while pending:
        current = pending.pop()
        for children in Path(f"/proc/{current}/task").glob("*/children"):
            with contextlib.suppress(OSError):
                for child in children.read_text().split():
                    found.add(int(child))
                    pending.append(int(child))
    return found


def test_a_killed_parent_takes_the_whole_stack_down(control_plane_bin_dir: Path, tmp_path: Path) -> None:
    """SIGKILL the process that started Config Sync: every process, network namespace, mount and cgroup
    the control plane and the node harness made is gone."""
    build = build_configsync()
    script = textwrap.dedent(
        f"""
        import json, signal
        from pathlib import Path
        from controlplane import LocalControlPlane
        from controlplane.configsync import ConfigSyncBuild, ConfigSyncStack
        from tests.helpers import wait_for
        plane = LocalControlPlane(Path({str(control_plane_bin_dir)!r}), work_dir=Path({str(tmp_path)!r}))
        plane.start()
        stack = ConfigSyncStack(plane, ConfigSyncBuild(Path({str(build.root)!r}))).start()
        wait_for(stack.reconciler_manager_running, timeout=120, what="the reconciler-manager")
        print(json.dumps({{"plane": plane.pids(), "node": list(stack.harness.pids())}}), flush=True)
        signal.pause()  # until the test kills this process
        """
    )
    namespaces_before = network_namespaces_in_use()
    parent = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO_ROOT,
        env={**os.environ, "PYTHONPATH": "."},
    )
    assert parent.stdout is not None
    started = json.loads(parent.stdout.readline())
    (supervisor,) = started["node"]
    pids = set(started["plane"]) | {supervisor} | _descendants(supervisor)
    assert len(_descendants(supervisor)) >= 2, "a sandbox and the reconciler-manager run under the harness"
    cgroup_parent, _ = MemoryCgroup.parent_of_this_process()
    cgroups = cgroup_parent / f"objcount-node-{supervisor}"
    assert any(cgroups.iterdir()), "the reconciler-manager's memory cgroup exists"
    namespaces_of_pods = network_namespaces_in_use() - namespaces_before
    assert namespaces_of_pods, "the Pod has a network namespace of its own"

    parent.send_signal(signal.SIGKILL)
    parent.wait()
    wait_for(lambda: not any(alive(pid) for pid in pids), timeout=60, what="every process to exit")
    assert not cgroups.exists()
    assert not namespaces_of_pods & network_namespaces_in_use()
    assert str(tmp_path) not in Path("/proc/self/mountinfo").read_text()
