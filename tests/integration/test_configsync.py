"""Our service with real Config Sync on the real node: v1.25.0's reconciler-manager and reconcilers (and
every release pinned `subset`'s for the tests marked both_versions; none since 2026-12-03), built from
the pinned source, run by the kubelet with containerd and runc, the upstream CRDs unmodified; our
sidecar and webhook run as Pods of our image (built from the Dockerfile), installed as the README says.
A commit travels through git and git-sync (v4.4.2, built here: see controlplane.images) to the reconciler.

Each test sets the sidecar's settings in the template ConfigMap, as a user does, and the webhook is
restarted to read it. Memory limits are read from the cgroups the kubelet made; our metrics through the
API server's Pod proxy. Expected counts and sizes are worked out by hand below, never computed by the
code under test.
"""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Iterator
from fractions import Fraction
from typing import cast

import pytest
import yaml

from autoscaler.core.annotations import RECOMMENDED_ANNOTATION, SOURCE_ANNOTATION, SYNC_ANNOTATION
from controlplane.autoscaler_install import (
    SIDECAR_CONTAINER,
    WEBHOOK_NAME,
    sidecar_template_text,
)
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.fault_proxy import CONFIG_SYNC_READS, Fault
from controlplane.filler import fill_the_nodes_memory
from controlplane.images import OBJCOUNT_IMAGE
from controlplane.metrics_server import MANIFEST as METRICS_SERVER_MANIFEST
from controlplane.metrics_server import install_metrics_server
from controlplane.rsyncs import grant_reposync
from controlplane.seed import REPO_ROOT, configmaps_yaml, ensure_namespace, manifests_in
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.conftest import Install
from tests.helpers import OBSERVED, Sampler, kib, legacy_count, never_lowered, wait_for
from tests.integration.on_node import (
    HEALTH_PORT,
    JSON,
    PodHistory,
    ReconcilerPeaks,
    assert_sidecar_has_only_its_own_token,
    container_log,
    container_status,
    counts,
    events_on,
    finished,
    fitted,
    inventory_entries,
    json_log,
    main_pid,
    memory_limit_of_pod,
    metric,
    objects_in,
    oom_killed_at,
    our_process,
    override,
    pod_get,
    quantity_bytes,
    reconciler_memory_limit,
    reconciler_resources,
    resize_condition,
    roots_and_repos,
    rsync_of,
    running_container,
    running_size,
    runs_at,
    size_aware_size,
    suffix,
)

MiB = 1 << 20
SYNC_TIMEOUT = 240.0
CONFIG_SYNC_FINALIZERS = {"configsync.gke.io/reconciler-manager", "configsync.gke.io/reconciler"}


@pytest.fixture
def cs(config_sync_on_node: NodeConfigSync) -> NodeConfigSync:
    return config_sync_on_node


@pytest.fixture
def api(cs: NodeConfigSync) -> kubeapi.KubeClient:
    assert cs.api is not None
    return cs.api


def create(cs: NodeConfigSync, rsyncs: list[RSyncKey], body: JSON) -> RSyncKey:
    meta = body["metadata"]
    key = RSyncKey(body["kind"], meta["namespace"], meta["name"])
    assert cs.api is not None
    cs.api.create(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, body)
    rsyncs.append(key)
    return key


def sync_completed(api: kubeapi.KubeClient, key: RSyncKey, commit: str) -> JSON | None:
    rsync = rsync_of(api, key)
    return rsync if finished(rsync, commit) else None


def assert_config_sync_state_intact(cs: NodeConfigSync, key: RSyncKey, commit: str) -> None:
    """What Config Sync writes on the RSync is all there, and it reports no error."""
    assert cs.api is not None
    api = cs.api

    def reconciled() -> JSON | None:
        # The reconciler-manager reports Reconciling until the Deployment has been available 10 s.
        rsync = rsync_of(api, key)
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
    assert not manager_errors_about(cs, key)


def manager_errors_about(cs: NodeConfigSync, key: RSyncKey) -> list[str]:
    """The reconciler-manager's error lines about this RSync, less its waits for the new Deployment to
    roll out and become available (which it logs as errors on every RSync's start)."""
    logs = "".join(
        container_log(cs, pod, "reconciler-manager", tail=0) for pod in cs.pods("app=reconciler-manager")
    )
    about = f'sync="{key.namespace}/{key.name}"'
    return [
        line
        for line in logs.splitlines()
        if line.startswith("E") and about in line and "InProgress: " not in line
    ]


def assert_upstream_crds_unmodified(cs: NodeConfigSync) -> None:
    assert cs.api is not None
    for name in ("rootsync-crd.yaml", "reposync-crd.yaml", "resourcegroup-crd.yaml"):
        (upstream,) = manifests_in(cs.build.manifests / name)
        served = cs.api.get(kubeapi.CRD, None, upstream["metadata"]["name"])
        schemas = [v["schema"] for v in served["spec"]["versions"]]
        assert schemas == [v["schema"] for v in upstream["spec"]["versions"]], name


def sidecar_pod(cs: NodeConfigSync, key: RSyncKey) -> JSON | None:
    """The live reconciler Pod of `key` once our sidecar runs in it."""
    pod = cast(JSON, cs.reconciler_pod(key) or {})
    return pod if "running" in container_status(pod, SIDECAR_CONTAINER).get("state", {}) else None


def sidecar_metric(cs: NodeConfigSync, key: RSyncKey, line_start: str) -> float:
    """A metric of the sidecar in the RSync's live reconciler Pod (-1 while it cannot be read)."""
    pod = sidecar_pod(cs, key)
    assert cs.api is not None
    return -1.0 if pod is None else metric(cs.api, [pod["metadata"]["name"]], line_start)


def sidecar_log(cs: NodeConfigSync, key: RSyncKey) -> str:
    pod = sidecar_pod(cs, key)
    return container_log(cs, pod, SIDECAR_CONTAINER) if pod else "(no sidecar running)"


# ----- counts ------------------------------------------------------------------------------------------------
def test_rootsync_counts_are_what_the_real_reconciler_produced(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    # The size-aware preset with no base and 1 MiB steps, so its object terms show in the recommendation.
    install_sidecar(fitted("recommend", preset="size-aware", base_mib="0", min_mib="1", step_mib="1"))
    apps = f"apps-{suffix()}"  # does not exist yet: the reconciler creates it (implicit namespace)
    key = RSyncKey("RootSync", NAMESPACE, f"counts-{suffix()}")
    manifests = configmaps_yaml(40, namespace=apps)
    commit = cs.commit(key, {"configmaps.yaml": manifests})
    create(cs, rsyncs, cs.rsync(key))
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")

    entries = inventory_entries(api, key)
    # 40 ConfigMaps and the Namespace the reconciler added for them (implicit namespace strategy).
    assert len(entries) == 41
    assert {"group": "", "kind": "Namespace", "namespace": "", "name": apps} in entries
    assert objects_in(manifests) == 40

    surface = legacy_count(api)
    wait_for(
        lambda: counts(api, key) == ("40", "41"),
        timeout=120,
        what="counts in annotations",
        explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, key),
    )
    assert counts(api, key) == (str(objects_in(manifests)), str(len(inventory_entries(api, key))))
    annotations = rsync_of(api, key)["metadata"]["annotations"]
    assert annotations["objcount.dev/source-kib"] == str(kib(manifests))
    assert annotations["objcount.dev/source-kinds"] == '{"ConfigMap":40}'
    # 41 objects (the Namespace too): 40 ConfigMaps at 0.053 MiB, the Namespace at 0.1183 with 360
    # Pod-template path steps at 0.0002928 (an object of no known kind), the source's KiB scaled to 41
    # objects at 0.0082, and 0.5237 per resource type over 79.
    scaled_kib = -(-kib(manifests) * 41 // 40)
    unknown_mib = Fraction("0.1183") + Fraction("0.0002928") * 360
    objects_mib = Fraction("0.053") * 40 + unknown_mib + Fraction("0.0082") * scaled_kib
    memory = objects_mib + Fraction("0.5237") * max(0, surface - 79)

    def recommended_memory() -> str | None:
        text = rsync_of(api, key)["metadata"]["annotations"].get(RECOMMENDED_ANNOTATION)
        return None if text is None else str(json.loads(text)["requests"]["memory"])

    wait_for(lambda: recommended_memory() == f"{math.ceil(memory)}Mi", what="the size-aware recommendation")
    assert override(api, key) == {}, "the recommend target writes no override"
    assert_config_sync_state_intact(cs, key, commit)
    assert_upstream_crds_unmodified(cs)


# ----- sizes reach the process ---------------------------------------------------------------------------
@pytest.mark.both_versions
@pytest.mark.kubernetes_floor
def test_an_oom_killed_reconciler_is_sized_above_its_need_and_stays_there_in_the_next_pod(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """Settings that size far too low put the real reconciler under 24Mi, where the kernel kills it. The
    sidecar reads the kill from the Pod status and raises the size from the limit it was killed at; the
    sidecar of the next Pod (a new process) reads the floor back from the RSync and keeps the size."""
    # By hand: 0 MiB + 0.01 MiB x 101 = 1.01 MiB, raised to the minimum of 24 MiB (8 MiB steps); CPU
    # 24 x 1000 / 1024 -> 24m (minimum 10m): below Config Sync's default, so a scale-down once the sync
    # is done. After a kill at 24 MiB: max(24 x 1.5, 24 + 128) = 152 MiB (on the 8 MiB grid); CPU
    # 152 x 1000 / 1024 = 148.4 -> 149m. The real reconciler needs about 80 MiB for 100 objects.
    install_sidecar(
        fitted(
            "rsync-override",
            base_mib="0",
            mib_per_object="0.01",
            min_mib="24",
            step_mib="8",
            cpu_min_m="10",
            resync_interval_seconds="5",
        )
    )
    key = RSyncKey("RootSync", NAMESPACE, f"oom-floor-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=f"apps-{suffix()}")})

    # Watched, not polled: the sidecar replaces the killed Pod within a second or so, and one CI run's
    # polls never saw it.
    with PodHistory(api, key) as history:
        create(cs, rsyncs, cs.rsync(key))
        wait_for(
            lambda: history.find(oom_killed_at("24Mi")),
            timeout=SYNC_TIMEOUT,
            what="the reconciler OOM-killed under 24Mi",
            explain=lambda: (
                f"the reconciler's states:\n{history.states('reconciler')}\n"
                f"the sidecar's log:\n{sidecar_log(cs, key)}"
            ),
        )
    wait_for(
        lambda: override(api, key).get("memoryLimit") == "152Mi",
        timeout=120,
        what="the size raised after the kill",
        explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, key),
    )
    assert override(api, key).get("cpuRequest") == "149m"
    # The override and the floor's annotation are two writes: a warm run with three workers read between.
    wait_for(
        lambda: "objcount.dev/oom-floor" in (rsync_of(api, key)["metadata"].get("annotations") or {}),
        what="the OOM floor recorded",
    )
    floor = json.loads(rsync_of(api, key)["metadata"]["annotations"]["objcount.dev/oom-floor"])
    assert floor["memory"] == "152Mi"

    def runs_at_152mi() -> JSON | None:
        pod = cast(JSON, cs.reconciler_pod(key) or {})
        ok = pod and memory_limit_of_pod(pod) == "152Mi" and sync_completed(api, key, commit)
        return pod if ok else None

    pod = wait_for(runs_at_152mi, timeout=SYNC_TIMEOUT, what="the reconciler synced under 152Mi")
    wait_for(lambda: reconciler_memory_limit(cs, key) == 152 * MiB, timeout=60, what="a cgroup of 152 MiB")
    # The sidecar of this Pod is a new process: it decides, and keeps the size (the floor came back
    # from the RSync; the kill is not answered twice).
    wait_for(
        lambda: sidecar_metric(cs, key, 'objcount_decisions_total{outcome="unchanged"}') > 0,
        timeout=60,
        what="the next Pod's sidecar keeping the size",
    )
    assert override(api, key).get("memoryLimit") == "152Mi"
    assert sidecar_metric(cs, key, "objcount_oom_floors_total") == 0
    assert container_status(cast(JSON, cs.reconciler_pod(key)), "reconciler")["restartCount"] == 0
    assert cast(JSON, cs.reconciler_pod(key))["metadata"]["uid"] == pod["metadata"]["uid"]


def synced_under_300mi(
    cs: NodeConfigSync, rsyncs: list[RSyncKey], prefix: str, objects: int
) -> tuple[RSyncKey, JSON, str]:
    """A RootSync of `objects` ConfigMaps whose user set the reconciler to 300Mi and handed that entry to
    us (`objcount.dev/manage-override`: in place leaves a user's entry alone otherwise), synced: its key,
    its reconciler Pod and the reconciler's container id (its cgroup limit checked: 300 MiB)."""
    api = cs.api
    assert api is not None
    key = RSyncKey("RootSync", NAMESPACE, f"{prefix}-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(objects, namespace=f"apps-{suffix()}")})
    body = cs.rsync(key)
    body["metadata"]["annotations"] = {"objcount.dev/manage-override": "true"}
    body["spec"]["override"] = {
        "resources": [{"containerName": "reconciler", "memoryRequest": "300Mi", "memoryLimit": "300Mi"}]
    }
    create(cs, rsyncs, body)
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    pod = cast(JSON, cs.reconciler_pod(key))
    container = container_status(pod, "reconciler")["containerID"]
    assert cs.stack.container_memory(container).limit == 300 * MiB
    return key, pod, container


def resize_refusal(api: kubeapi.KubeClient, pod: str) -> str:
    """The kubelet's message when it could not apply a resize (`PodResizeInProgress`, reason Error)."""
    conditions = (api.get(kubeapi.POD, NAMESPACE, pod).get("status") or {}).get("conditions") or []
    resizing = next((c for c in conditions if c["type"] == "PodResizeInProgress"), {})
    return str(resizing.get("message", "")) if resizing.get("reason") == "Error" else ""


def assert_runs_on_unchanged(
    cs: NodeConfigSync, key: RSyncKey, pod: JSON, container: str, limit: int
) -> None:
    """The same reconciler container of the same Pod runs on, never restarted, under this limit."""
    now = cast(JSON, cs.reconciler_pod(key))
    assert now["metadata"]["uid"] == pod["metadata"]["uid"]
    status = container_status(now, "reconciler")
    assert (status["containerID"], status["restartCount"]) == (container, 0)
    assert "running" in status["state"]
    assert cs.stack.container_memory(container).limit == limit


@pytest.mark.kubernetes_floor
def test_the_kubelet_refuses_a_memory_limit_below_the_usage_and_says_so(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey]
) -> None:
    """`pods/resize` to a limit below what the reconciler uses: the real kubelet compares the container's
    usage before lowering its limit, keeps the old one, and says why in the Pod status (what our in-place
    target reads)."""
    key, pod, container = synced_under_300mi(cs, rsyncs, "resize", 10)
    name = pod["metadata"]["name"]
    assert cs.stack.container_memory(container).working_set > 16 * MiB

    tiny = {"requests": {"memory": "16Mi"}, "limits": {"memory": "16Mi"}}
    patch = {"spec": {"containers": [{"name": "reconciler", "resources": tiny}]}}
    api.patch(kubeapi.POD, NAMESPACE, name, patch, patch_type="strategic", subresource="resize")

    message = wait_for(
        lambda: resize_refusal(api, name), timeout=60, what="the refused resize in the Pod status"
    )
    assert "memory limit (16777216) below current usage" in message, message
    assert_runs_on_unchanged(cs, key, pod, container, 300 * MiB)


@pytest.mark.kubernetes_floor
def test_in_place_resizes_the_running_reconciler_and_each_new_pod(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    install_sidecar(fitted("in-place", resync_interval_seconds="5"))
    key = RSyncKey("RootSync", NAMESPACE, f"in-place-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=f"apps-{suffix()}")})
    body = cs.rsync(key)
    # The user's size, from which the Pods start (limits set, so a resize keeps the Pod's QoS class),
    # handed to us (in place leaves a user's entry alone otherwise).
    body["metadata"]["annotations"] = {"objcount.dev/manage-override": "true"}
    users = {
        "containerName": "reconciler",
        "cpuRequest": "300m",
        "cpuLimit": "300m",
        "memoryRequest": "400Mi",
        "memoryLimit": "400Mi",
    }
    body["spec"]["override"] = {"resources": [users]}
    create(cs, rsyncs, body)
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    first = cast(JSON, cs.reconciler_pod(key))
    container = container_status(first, "reconciler")["containerID"]
    pid = main_pid(cs.stack, container)

    # Worked by hand for the fitted preset, Standard: n = max(source 100, inventory 101) = 101; 198 MiB +
    # 0.174 MiB x 101 = 215.6 MiB, rounded up to a 32 MiB step = 224 MiB.
    def resized(pod_uid: str) -> JSON | None:
        pod = cast(JSON, cs.reconciler_pod(key) or {})
        if pod.get("metadata", {}).get("uid") != pod_uid:
            return None
        return pod if reconciler_memory_limit(cs, key) == 224 * MiB else None

    wait_for(
        lambda: resized(first["metadata"]["uid"]),
        timeout=120,
        what="the running Pod resized",
        explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, key),
    )
    # Resized in place: the same container, never restarted, and the same process in it.
    assert_runs_on_unchanged(cs, key, first, container, 224 * MiB)
    assert main_pid(cs.stack, container) == pid
    deployment = api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))
    assert reconciler_resources(deployment["spec"]["template"]["spec"])["limits"]["memory"] == "400Mi"
    assert override(api, key) == users, "the RSync is not written"

    # A new Pod (as after a rollout) starts with the template's 400Mi, and is resized again.
    api.delete(kubeapi.POD, NAMESPACE, first["metadata"]["name"])
    second = wait_for(
        lambda: (
            (pod := cs.reconciler_pod(key)) and pod["metadata"]["uid"] != first["metadata"]["uid"] and pod
        ),
        timeout=60,
        what="the new Pod",
    )
    assert memory_limit_of_pod(cast(JSON, second)) in {"400Mi", "224Mi"}
    wait_for(lambda: resized(cast(JSON, second)["metadata"]["uid"]), timeout=120, what="the new Pod resized")


@pytest.mark.kubernetes_floor
def test_in_place_reports_a_lower_limit_the_kubelet_refuses_and_the_reconciler_runs_on(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """The real kubelet's refusal of a limit below the usage is reported by the sidecar, and the same
    reconciler container runs on under its old limit."""
    # Settings that size far too low, by hand: 0 MiB + 0.01 MiB x 101 = 1.01 MiB, raised to the minimum of
    # 16 MiB (a 16 MiB step); the reconciler holds more than that, so the resize to 16Mi is refused. A
    # scale-down waits for the sync to finish, so the reconciler has loaded what it syncs by then.
    install_sidecar(
        fitted(
            "in-place",
            base_mib="0",
            mib_per_object="0.01",
            min_mib="16",
            step_mib="16",
            resync_interval_seconds="5",
        )
    )
    key, pod, container = synced_under_300mi(cs, rsyncs, "refused", 100)
    refused = 'objcount_apply_errors_total{reason="refused",target="in-place"}'
    wait_for(
        lambda: sidecar_metric(cs, key, refused) >= 1,
        timeout=120,
        what="the refusal reported by the sidecar",
        explain=lambda: "its log:\n" + sidecar_log(cs, key),
    )
    assert "below current usage" in resize_refusal(api, pod["metadata"]["name"])
    assert "a lower limit was refused" in sidecar_log(cs, key)
    # Nothing else was tried: the same container runs on under its old limit, never OOM-killed.
    assert_runs_on_unchanged(cs, key, pod, container, 300 * MiB)


# ----- the four defects of the first version, reproduced on the real stack -----------------------------
@pytest.mark.both_versions
def test_size_comes_down_after_a_real_prune(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """500 -> 50 objects, applied and pruned by the real reconciler. The inventory keeps the implicit
    Namespace the source does not name, so it never equals the source: the scale-down waits for the
    reconciler's report that the prune has finished, and never comes before it."""
    install_sidecar(fitted("rsync-override"))
    apps = f"apps-{suffix()}"
    key = RSyncKey("RootSync", NAMESPACE, f"prune-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(500, namespace=apps)})
    create(cs, rsyncs, cs.rsync(key))
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")

    # 500 objects: n = 501; 198 + 0.174 x 501 = 285.2 MiB -> 288 MiB.
    wait_for(
        lambda: override(api, key).get("memoryLimit") == "288Mi",
        timeout=120,
        what="the size for 500 objects",
        explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, key),
    )
    # The size rolled the reconciler out; the prune starts once the new Pod's reconciler has synced.
    wait_for(lambda: reconciler_memory_limit(cs, key) == 288 * MiB, timeout=SYNC_TIMEOUT, what="288 MiB")
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the sync in the new Pod")
    pruned = cs.commit(key, {"configmaps.yaml": configmaps_yaml(50, namespace=apps)})
    seen: list[JSON] = []

    def prune_finished() -> bool:
        seen.append(rsync_of(api, key))  # one read: the status and the override of the same moment
        return finished(seen[-1], pruned)

    wait_for(prune_finished, timeout=SYNC_TIMEOUT, interval=0.2, what="the real prune")
    assert len(inventory_entries(api, key)) == 51
    assert not finished(seen[0], pruned), "the prune was seen running"
    # The prune is done once the reconciler names the commit its last synced one (it writes that only at
    # the end of a sync without errors, and never takes it back). Polls can miss the moment itself: the
    # scale-down rolls out a new reconciler, which reports itself syncing the same commit again at start.
    early = [
        (override_of(rsync).get("memoryLimit"), status_summary(rsync))
        for rsync in seen
        if override_of(rsync).get("memoryLimit") != "288Mi"
        and (rsync.get("status") or {}).get("lastSyncedCommit") != pruned
    ]
    assert not early, f"the size came down before the reconciler finished the prune: {early}"
    # 50 objects: n = 51 (the Namespace stays); 198 + 0.174 x 51 = 206.9 MiB -> 224 MiB.
    wait_for(
        lambda: override(api, key).get("memoryLimit") == "224Mi", timeout=120, what="the size after the prune"
    )
    wait_for(lambda: reconciler_memory_limit(cs, key) == 224 * MiB, timeout=SYNC_TIMEOUT, what="224 MiB")


def status_summary(rsync: JSON) -> JSON:
    status = rsync.get("status") or {}
    syncing = next((c for c in status.get("conditions") or [] if c["type"] == "Syncing"), {})
    return {
        "source": (status.get("source") or {}).get("commit"),
        "sync": (status.get("sync") or {}).get("commit"),
        "lastSynced": status.get("lastSyncedCommit"),
        "syncing": {k: syncing.get(k) for k in ("status", "reason", "message", "commit")},
    }


def override_of(rsync: JSON) -> JSON:
    entries = ((rsync.get("spec") or {}).get("override") or {}).get("resources") or []
    return cast(JSON, next((e for e in entries if e.get("containerName") == "reconciler"), {}))


# ----- the sidecar install -------------------------------------------------------------------------------
def test_our_webhook_pods_inject_the_sidecar_through_their_service_and_each_sizes_its_own_rsync(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """The shipped sidecar install with its shipped settings (size-aware, in place): the webhook runs as
    Pods of our image behind its Service (the API server dials its endpoint); the sidecar it adds runs
    our image as uid 10001 with a read-only root, reads the `repo` volume git-sync writes under Config
    Sync's Pod security context, and counts and sizes its own RSync's reconciler in its own Pod with its
    own account's token; the reconciler-manager keeps working. Five RSyncs (three RootSyncs, two
    RepoSyncs of other sizes) commit at once: each is counted and sized from its own counts only, by hand
    (issue 61: no count of one RSync sizes another)."""
    install_sidecar({})
    made = roots_and_repos(cs, rsyncs, "sidecar", roots=(40, 150, 300), repos=(25, 90), grant_sidecar=True)
    synced = {key: (commit, text) for key, (_, commit, text) in made.items()}
    # The counts by hand: the ConfigMaps in the source; the inventory has a RootSync's implicit Namespace.
    expected = {k: (str(n), str(n + (k.kind == "RootSync"))) for k, (n, _, _) in made.items()}
    sizes = {k: size_aware_size(api, text, n, int(k.kind == "RootSync")) for k, (n, _, text) in made.items()}
    assert len(set(sizes.values())) >= 3, f"sizes that tell the RSyncs apart: {sizes}"
    for key in made:
        wait_for(lambda k=key: sidecar_pod(cs, k), timeout=SYNC_TIMEOUT, what=f"our sidecar in {key}'s Pod")
        wait_for(
            lambda k=key: counts(api, k) == expected[k],
            timeout=120,
            what=f"{key}'s counts",
            explain=lambda k=key: "the sidecar's log:\n" + sidecar_log(cs, k),
        )
    for key in made:
        # Resized in place: the kubelet reports the size and set it on the reconciler's cgroup; nothing
        # is written into the RSync, and the Pod is the one the sidecar runs in.
        pod = wait_for(lambda k=key: sidecar_pod(cs, k), timeout=120, what=f"the sidecar in {key}'s Pod")
        wait_for(
            lambda k=key: runs_at(cs, k, sizes[k]),
            timeout=SYNC_TIMEOUT,
            what=f"{key}'s reconciler resized in place to {sizes[key]}",
            explain=lambda k=key: (
                f"running: {running_size(cs, k)}; the Pod's conditions: "
                f"{(cast(JSON, cs.reconciler_pod(k) or {}).get('status') or {}).get('conditions')}; "
                f"the sidecar's log:\n{sidecar_log(cs, k)}"
            ),
        )
        assert override(api, key) == {}
        assert cast(JSON, cs.reconciler_pod(key))["metadata"]["uid"] == pod["metadata"]["uid"]
        status = container_status(pod, SIDECAR_CONTAINER)
        assert status["containerID"].startswith("containerd://")
        assert status["image"] == f"docker.io/library/{OBJCOUNT_IMAGE}"
        assert our_process(cs.stack, status["containerID"]) == {"uid": 10001, "root_read_only": True}
        deployment = api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))
        assert SIDECAR_CONTAINER not in [
            c["name"] for c in deployment["spec"]["template"]["spec"]["containers"]
        ]
        assert_config_sync_state_intact(cs, key, synced[key][0])
        account = "objcount-sidecar" if key.kind == "RootSync" else f"objcount-{reconciler_name(key)}"
        assert_sidecar_has_only_its_own_token(cs, pod, main_pid(cs.stack, status["containerID"]), account)
    webhooks = [p["metadata"]["name"] for p in cs.pods(f"app.kubernetes.io/name={WEBHOOK_NAME}")]
    # One Pod each, the first: resized in place, no rollout made a second one.
    assert metric(api, webhooks, 'objcount_webhook_admissions_total{result="injected"}') >= len(made)


def test_a_webhook_with_no_pod_never_stops_config_sync(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """The webhook configuration stays while its Deployment has no Pod (its Service no endpoint): the API
    server's call fails, the Pod is admitted without the sidecar (fail-open), and Config Sync syncs."""
    install_sidecar({})
    cs.stack.kubectl("scale", "-n", NAMESPACE, f"deployment/{WEBHOOK_NAME}", "--replicas=0")
    wait_for(
        lambda: not cs.pods(f"app.kubernetes.io/name={WEBHOOK_NAME}"), timeout=60, what="no webhook Pod left"
    )
    key = RSyncKey("RootSync", NAMESPACE, f"no-webhook-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(5, namespace=f"apps-{suffix()}")})
    create(cs, rsyncs, cs.rsync(key))
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    pod = cs.reconciler_pod(key)
    assert pod is not None
    assert SIDECAR_CONTAINER not in [c["name"] for c in pod["spec"]["containers"]]
    assert_config_sync_state_intact(cs, key, commit)


def test_a_reposync_not_granted_syncs_and_its_sidecar_waits_for_credentials(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """Config Sync's RoleBinding for the reconciler, but not ours for the sidecar: the webhook still adds
    the sidecar (it has no API access to check), whose token Secret does not exist (an optional volume:
    the Pod starts); the sidecar stays up without credentials, so the Pod is ready and the RepoSync syncs."""
    install_sidecar({})
    team = f"team-{suffix()}"
    ensure_namespace(api, team)
    key = RSyncKey("RepoSync", team, "repo-sync")
    grant_reposync(api, team, key.name)
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(5, namespace=team)})
    create(cs, rsyncs, cs.rsync(key))
    wait_for(lambda: sidecar_pod(cs, key), timeout=SYNC_TIMEOUT, what="our sidecar running")
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    assert_config_sync_state_intact(cs, key, commit)
    wait_for(
        lambda: "objcount grant-reposync" in sidecar_log(cs, key), timeout=60, what="the sidecar saying why"
    )
    pod = cast(JSON, sidecar_pod(cs, key))
    assert container_status(pod, SIDECAR_CONTAINER)["restartCount"] == 0, "waits; does not crash-loop"


# ----- never fight an owner --------------------------------------------------------------------------------
@pytest.mark.both_versions
def test_no_shipped_manifest_replaces_a_config_sync_crd(cs: NodeConfigSync, api: kubeapi.KubeClient) -> None:
    upstream = {
        crd["metadata"]["name"]: crd
        for crd in manifests_in(cs.build.manifests)
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


def hand_written_sidecar_pod(key: RSyncKey, name: str, env: dict[str, str]) -> JSON:
    """A Pod of our image running the shipped sidecar container (with `env` set) for `key` on its own:
    what a user who wrote a sidecar by hand from the template, without our webhook, would run."""
    template = yaml.safe_load(sidecar_template_text(env))
    container = template["container"]
    container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] != "repo"]
    container["env"] += [
        {"name": "OBJCOUNT_RSYNC_KIND", "value": key.kind},
        {"name": "OBJCOUNT_RSYNC_NAME", "value": key.name},
        {"name": "OBJCOUNT_RSYNC_NAMESPACE", "value": key.namespace},
    ]
    container["imagePullPolicy"] = "IfNotPresent"
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "serviceAccountName": "objcount-sidecar",
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [container],
            "volumes": template["volumes"],
        },
    }


@pytest.mark.both_versions
def test_the_deployment_target_refuses_a_deployment_the_reconciler_manager_owns(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """Our webhook refuses a template with the deployment target, so this sidecar is written by hand as a
    Pod of its own, with the shipped sidecar's account: it refuses at start and stays up (an exit would
    crash-loop), unready, the refusal in its metrics and probes, and writes nothing; SIGTERM ends it
    with exit code 1."""
    install_sidecar({})  # the shipped accounts and RBAC
    key = RSyncKey("RootSync", NAMESPACE, f"owned-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(5, namespace=f"apps-{suffix()}")})
    create(cs, rsyncs, cs.rsync(key))
    wait_for(lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the real sync")
    name = f"deployment-target-{suffix()}"
    api.create(kubeapi.POD, NAMESPACE, hand_written_sidecar_pod(key, name, {"OBJCOUNT_TARGET": "deployment"}))
    try:
        owned = 'objcount_apply_errors_total{reason="owned",target="deployment"}'
        wait_for(lambda: metric(api, [name], owned) == 1, timeout=120, what="the refusal in the metrics")
        health, health_body = pod_get(api, name, HEALTH_PORT, "/healthz")
        assert (health, health_body.startswith("alive, refusing: ")) == (200, True)
        ready, ready_body = pod_get(api, name, HEALTH_PORT, "/readyz")
        assert ready == 503
        assert "managed by Config Sync's reconciler-manager" in ready_body
        assert not ours_in_managed_fields(api, key)
        told = [
            line for line in json_log(cs, name, SIDECAR_CONTAINER) if "rsync-override" in str(line["message"])
        ]
        assert [line["level"] for line in told] == ["ERROR"], "said once, as an error"
        assert "in-place" in str(told[0]["message"])
        pod = api.get(kubeapi.POD, NAMESPACE, name)
        status = container_status(pod, SIDECAR_CONTAINER)
        assert status["restartCount"] == 0, "alive, not crash-looping"
        # SIGTERM to its process, as the kubelet sends at a Pod's deletion: the exit code says it never ran.
        os.kill(main_pid(cs.stack, status["containerID"]), signal.SIGTERM)
        last = wait_for(
            lambda: (
                container_status(api.get(kubeapi.POD, NAMESPACE, name), SIDECAR_CONTAINER).get("lastState")
                or {}
            ).get("terminated"),
            timeout=120,  # its shutdown, the kubelet's next relist and the restart, on a loaded node
            what="the container's exit in the Pod status",
        )
        assert last["exitCode"] == 1
        assert not ours_in_managed_fields(api, key)
    finally:
        api.delete(kubeapi.POD, NAMESPACE, name)


def ours_in_managed_fields(api: kubeapi.KubeClient, key: RSyncKey) -> bool:
    deployment = api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))
    return any(
        m.get("manager") == "objcount-autoscaler" for m in deployment["metadata"].get("managedFields") or []
    )


# ----- calibration on the cluster ---------------------------------------------------------------------------
@pytest.fixture
def metrics_api(cs: NodeConfigSync) -> Iterator[None]:
    """The real metrics-server serving metrics.k8s.io on the node for this test only; removed after it, so
    that the other tests' sidecars run on a cluster without the metrics API (nothing calibrated)."""
    install_metrics_server(cs.stack)
    yield
    cs.stack.kubectl("delete", "--ignore-not-found", "--wait=true", "-f", str(METRICS_SERVER_MANIFEST))


def test_in_place_an_overpriced_reconciler_is_lowered_to_its_steady_need_and_a_new_pod_starts_at_a_whole_sync(
    cs: NodeConfigSync,
    api: kubeapi.KubeClient,
    rsyncs: list[RSyncKey],
    install_sidecar: Install,
    metrics_api: None,
) -> None:
    """The model overprices on purpose: 160 MiB + 0.001 MiB per object (101 objects: 160.1 -> 192 MiB)
    for a reconciler the kernel sees peak near 40 MiB. metrics-server (real, on the node) reports the
    reconciler's working set. Once the reconciler reports its commit synced, the sidecar sizes the running
    container (in place: the same container, never restarted) to what it then uses: at least its working
    set, within 1.5 x the kernel's peak + one 32 MiB step. A new Pod, which syncs its commit from the start,
    is admitted by our webhook at the published size of a whole sync (the model, or the model x a factor
    where one was learned from a transition the sidecar saw), not at the steady size."""
    install_sidecar(
        fitted(
            "in-place",
            base_mib="160",
            mib_per_object="0.001",
            min_mib="32",
            calibration_interval_seconds="2",
            resync_interval_seconds="5",
        )
    )
    key = RSyncKey("RootSync", NAMESPACE, f"calibrated-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=f"apps-{suffix()}")})
    with ReconcilerPeaks(cs, key) as kernel:
        create(cs, rsyncs, cs.rsync(key))

        def lowered() -> tuple[str, int] | None:
            status = running_container(cs, key, "reconciler")
            limit = reconciler_memory_limit(cs, key)
            if status is None or limit is None or limit >= 192 * MiB or not sync_completed(api, key, commit):
                return None
            return status["containerID"], limit // MiB

        container, steady_mib = cast(
            tuple[str, int],
            wait_for(
                lowered,
                timeout=2 * SYNC_TIMEOUT,
                what="the running reconciler lowered in place to its steady need",
                explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, key),
            ),
        )
        working_set_mib = cs.stack.container_memory(container).working_set / MiB
        peaks = dict(kernel.peaks)
    peak_mib = max(peaks.values(), default=0) / MiB
    assert peak_mib > 0, "the kernel's peaks of the reconcilers before the lowered size were read"
    assert working_set_mib <= steady_mib <= 1.5 * peak_mib + 32, (working_set_mib, steady_mib, peak_mib)
    first = cast(JSON, cs.reconciler_pod(key))
    assert container_status(first, "reconciler")["containerID"] == container, "resized in place"
    assert container_status(first, "reconciler")["restartCount"] == 0
    annotations = rsync_of(api, key)["metadata"]["annotations"]
    # A whole sync's size, by hand: the model (160.1 MiB), times the factor where one was learned (under
    # the prediction it was learned at, 161 MiB: by its ratio), rounded up to the 32 MiB step.
    learned = json.loads(annotations.get("objcount.dev/calibration") or '{"factor": "1"}')
    whole = max(math.ceil(Fraction("160.1") * Fraction(learned["factor"]) / 32) * 32, 32)
    start = json.loads(annotations["objcount.dev/start-resources"])
    assert quantity_bytes(start["requests"]["memory"]) >= max(whole, steady_mib) * MiB, (start, learned)
    OBSERVED.append(
        f"in place, steady state (real node, metrics-server): 101 objects, model 192 MiB; kernel peak "
        f"{peak_mib:.1f} MiB, steady {steady_mib} MiB (working set {working_set_mib:.1f}), factor "
        f"{learned['factor']}, a new Pod's start {start['requests']['memory']}"
    )

    # A new Pod (as after a rollout or a drain) is admitted at a whole sync's size and syncs under it.
    api.delete(kubeapi.POD, NAMESPACE, first["metadata"]["name"])

    def admitted() -> JSON | None:
        pod = cast(JSON, cs.reconciler_pod(key) or {})
        new = pod and pod["metadata"]["uid"] != first["metadata"]["uid"]
        return pod if new and sync_completed(api, key, commit) else None

    second = cast(JSON, wait_for(admitted, timeout=SYNC_TIMEOUT, what="a new Pod synced"))
    admitted_at = quantity_bytes(reconciler_resources(second["spec"])["requests"]["memory"])
    assert admitted_at >= whole * MiB, (admitted_at, whole, steady_mib)


def test_on_a_full_node_an_idle_reconciler_gives_the_room_it_holds_above_its_need_to_one_that_waits(
    cs: NodeConfigSync,
    api: kubeapi.KubeClient,
    rsyncs: list[RSyncKey],
    install_sidecar: Install,
    metrics_api: None,
) -> None:
    """docs/sizing.md, "Room on the node", on the real node. The model overprices (160 MiB + 0.4 MiB per
    object: 501 objects, 360.4 -> 384 MiB; 11, 164.4 -> 192 MiB), and a lower size waits 600 s. `idle`
    syncs 500 ConfigMaps and, once synced, holds 384 MiB where its steady need (recommended) is less;
    `busy` syncs 10. A filler Pod then takes all the node's memory but 16 MiB, and `busy` commits 500
    ConfigMaps: its size rises by more than 16 MiB, so the kubelet defers the resize. The wait is
    said on `busy`; `idle`, in its steady state, gives back what it holds above its need at once (its
    ScaledDown says the room is wanted: not its 600 s delay); the kubelet then applies `busy`'s size to
    the same container, which syncs the commit. Neither reconciler restarts."""
    install_sidecar(
        fitted(
            "in-place",
            base_mib="160",
            mib_per_object="0.4",
            min_mib="32",
            calibration_interval_seconds="2",
            resync_interval_seconds="5",
            scale_down_delay_seconds="600",
            in_place_scale_down_delay_seconds="600",
            steady_scale_down_delay_seconds="600",
        )
    )
    idle = RSyncKey("RootSync", NAMESPACE, f"idle-{suffix()}")
    busy = RSyncKey("RootSync", NAMESPACE, f"busy-{suffix()}")
    busy_apps = f"apps-{suffix()}"
    commits = {
        idle: cs.commit(idle, {"configmaps.yaml": configmaps_yaml(500, namespace=f"apps-{suffix()}")}),
        busy: cs.commit(busy, {"configmaps.yaml": configmaps_yaml(10, namespace=busy_apps)}),
    }
    for key in commits:
        create(cs, rsyncs, cs.rsync(key))

    def holding() -> tuple[int, int] | None:
        """`idle` synced and in its steady state: the size it runs, above the one it recommends."""
        annotations = rsync_of(api, idle)["metadata"].get("annotations") or {}
        recommended = json.loads(annotations.get(RECOMMENDED_ANNOTATION) or "{}").get("requests", {})
        runs = running_size(cs, idle)
        if runs is None or "memory" not in recommended or not sync_completed(api, idle, commits[idle]):
            return None
        memory = quantity_bytes(recommended["memory"])
        return (runs[1], memory) if memory < runs[1] else None

    wait_for(
        lambda: all(sync_completed(api, k, c) for k, c in commits.items()),
        timeout=SYNC_TIMEOUT,
        what="both synced",
    )
    held, steady = cast(
        tuple[int, int],
        wait_for(
            holding,
            timeout=SYNC_TIMEOUT,
            what="idle's size held above its steady need",
            explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, idle),
        ),
    )
    before = cast(JSON, cs.reconciler_pod(busy))
    busy_container = container_status(before, "reconciler")["containerID"]
    busy_memory = cast(tuple[int, int, int | None, int | None], running_size(cs, busy))[1]
    filler = fill_the_nodes_memory(api, leave_mib=16)
    try:
        with PodHistory(api, busy) as history:
            commit = cs.commit(busy, {"configmaps.yaml": configmaps_yaml(500, namespace=busy_apps)})

            def grown() -> JSON | None:
                runs = running_size(cs, busy)
                done = runs is not None and runs[1] > busy_memory + 16 * MiB
                return sync_completed(api, busy, commit) if done else None

            wait_for(
                grown,
                timeout=2 * SYNC_TIMEOUT,
                what="busy's larger size applied and its commit synced",
                explain=lambda: (
                    "busy's sidecar:\n" + sidecar_log(cs, busy) + "\nidle's:\n" + sidecar_log(cs, idle)
                ),
            )
            deferred = history.find(lambda p: resize_condition(p) == "Deferred")
    finally:
        api.delete(kubeapi.POD, "default", filler)
    assert deferred is not None, "the kubelet deferred busy's resize"
    idle_uid = rsync_of(api, idle)["metadata"]["uid"]
    given = [e for e in events_on(api, NAMESPACE, idle_uid) if e["reason"] == "ScaledDown"]
    assert any("room wanted" in e["note"] for e in given), given
    busy_events = events_on(api, NAMESPACE, rsync_of(api, busy)["metadata"]["uid"])
    # The wait is told: ResizeDeferred once it lasts, or the memory-first ScaledUp that answered it.
    assert any("deferred" in e["note"] for e in busy_events), busy_events
    after = cast(JSON, cs.reconciler_pod(busy))
    assert container_status(after, "reconciler")["containerID"] == busy_container, "resized in place"
    for key in commits:
        assert container_status(cast(JSON, cs.reconciler_pod(key)), "reconciler")["restartCount"] == 0, key
    grown_to = cast(tuple[int, int, int | None, int | None], running_size(cs, busy))[1]
    OBSERVED.append(
        f"room on the node (real node, metrics-server): idle held {held // MiB} MiB, its steady need "
        f"{steady // MiB}; busy from {busy_memory // MiB} to {grown_to // MiB} MiB; busy's Events "
        f"{[e['reason'] for e in busy_events]}"
    )


# ----- the API server in trouble --------------------------------------------------------------------------
FAULT_S = 20.0


def test_the_sidecar_rides_out_an_api_server_in_trouble_and_counts_what_changed_meanwhile(
    cs: NodeConfigSync, api: kubeapi.KubeClient, rsyncs: list[RSyncKey], install_sidecar: Install
) -> None:
    """Our sidecar in the real reconciler Pod reaches the API server through the fault proxy (its
    `KUBERNETES_SERVICE_HOST` and `_PORT` name the proxy's listener in the node's network; the proxy
    serves the API server's own certificate, so the in-cluster credentials trust it; every other
    container reaches the real API server). For 20 s every read of Config Sync's objects through it is
    answered 504 `Timeout`, its watches cut, while a commit of 60 ConfigMaps is synced by the reconciler.
    The sidecar stays up (no restart, no traceback), reads each of its resources at most 5 times in the
    20 s (its backoff: inventory/core/backoff.py), and once the fault clears its counts reach the commit's;
    every count it recorded is a real one, its recommendation never lowered."""
    proxy = cs.fault_proxy()
    try:
        install_sidecar({**fitted("recommend"), **proxy.in_cluster_env})
        apps = f"apps-{suffix()}"
        key = RSyncKey("RootSync", NAMESPACE, f"faults-{suffix()}")
        cs.commit(key, {"configmaps.yaml": configmaps_yaml(20, namespace=apps)})
        create(cs, rsyncs, cs.rsync(key))
        wait_for(
            lambda: counts(api, key) == ("20", "21"),
            timeout=SYNC_TIMEOUT,
            what="the first commit counted through the proxy",
            explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, key),
        )
        pod = cast(JSON, sidecar_pod(cs, key))
        history = Sampler(lambda: recorded(api, key), interval=0.1)
        began = proxy.begin(Fault(CONFIG_SYNC_READS, 504, "Timeout"))
        commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(60, namespace=apps)})
        wait_for(
            lambda: proxy.read_since(began + FAULT_S),
            timeout=FAULT_S * 4,
            what="20 s of faults, then a request of the sidecar",
        )
        asked = {plural: proxy.reads(plural, began, FAULT_S) for plural in ("rootsyncs", "resourcegroups")}
        OBSERVED.append(f"API faults on the node: the sidecar's reads in 20 s of 504: {asked}")
        assert all(1 <= n <= 5 for n in asked.values()), asked
        proxy.clear()
        wait_for(
            lambda: sync_completed(api, key, commit), timeout=SYNC_TIMEOUT, what="the second commit synced"
        )
        wait_for(
            lambda: counts(api, key) == ("60", "61"),
            timeout=120,
            what="the counts caught up once the fault cleared",
            explain=lambda: "the sidecar's log:\n" + sidecar_log(cs, key),
        )
        seen = history.stop()
        now = cast(JSON, sidecar_pod(cs, key))
        assert now["metadata"]["uid"] == pod["metadata"]["uid"], "the same Pod"
        assert container_status(now, SIDECAR_CONTAINER)["restartCount"] == 0
        assert "Traceback" not in container_log(cs, now, SIDECAR_CONTAINER, tail=0)
    finally:
        proxy.close()
    # Only real counts (the commits' 20 and 60 objects, the inventories' 21 and 61), never going back.
    for real, counted in (({"20", "60"}, [c[0] for c, _ in seen]), ({"21", "61"}, [c[1] for c, _ in seen])):
        assert set(counted) <= real, seen
        assert counted == sorted(counted, key=lambda n: int(n or 0)), seen
    never_lowered([mib for _, mib in seen])


def recorded(api: kubeapi.KubeClient, key: RSyncKey) -> tuple[tuple[str | None, str | None], int | None]:
    """The counts and the recommended memory (MiB) on the RSync, read once straight from the API server."""
    annotations = rsync_of(api, key)["metadata"].get("annotations") or {}
    text = annotations.get(RECOMMENDED_ANNOTATION)
    memory = None if text is None else quantity_bytes(json.loads(text)["requests"]["memory"]) // MiB
    return (annotations.get(SOURCE_ANNOTATION), annotations.get(SYNC_ANNOTATION)), memory
