"""Config Sync v1.22.0 on the real node: its reconciler-manager and reconcilers are Pods the kubelet runs
from images built here; a commit travels the real path (git daemon on the node's network, git-sync in the
reconciler Pod, the reconciler applies it). git-sync and the otel collector are stand-ins (see
controlplane.images); everything else is Config Sync's."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import pytest

from autoscaler.annotations import SOURCE_ANNOTATION, SYNC_ANNOTATION
from controlplane.configsync import (
    NAMESPACE,
    SIDECAR_CONTAINER,
    NodeConfigSync,
    build_configsync,
    configsync_node_images,
    grant_reposync,
    install_cluster,
    pod_ready,
    synced,
    uninstall_cluster,
    uninstall_webhook,
)
from controlplane.images import OBJCOUNT_IMAGE
from controlplane.seed import configmaps_yaml, ensure_namespace
from controlplane.stack import NodeStack, running_node_stack
from inventory import kubeapi
from inventory.ids import RSyncKey
from tests.helpers import FIGURES, NODE_STARTUP, kib, legacy_count, size_aware_by_hand, wait_for

JSON = dict[str, Any]
ROOT = RSyncKey("RootSync", NAMESPACE, "root-sync")


@pytest.fixture(scope="module")
def config_sync_on_node() -> Iterator[NodeConfigSync]:
    build = build_configsync()
    with running_node_stack(configsync_node_images(build)) as stack:
        FIGURES.append((NODE_STARTUP, stack.startup_seconds or 0.0))
        config_sync = NodeConfigSync(stack, build).start()
        try:
            wait_for(
                config_sync.reconciler_manager_running, timeout=120, what="the reconciler-manager Pod to run"
            )
            yield config_sync
        finally:
            config_sync.stop()


def configmaps(count: int, namespace: str = "apps") -> dict[str, str]:
    return {
        f"cm-{i}.yaml": json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i}", "namespace": namespace},
                "data": {"i": str(i)},
            }
        )
        for i in range(count)
    }


def pod_start_seconds(cs: NodeConfigSync, key: RSyncKey) -> float:
    """From the moment a reconciler Pod of `key` is first seen (polled every 20 ms) until every container
    of that same Pod runs; a Pod replaced before it runs is measured anew."""
    first_seen: dict[str, float] = {}

    def started() -> float | None:
        pod = cast(JSON, cs.reconciler_pod(key) or {})
        if not pod:
            return None
        name = pod["metadata"]["name"]
        seen = first_seen.setdefault(name, time.monotonic())
        statuses = pod.get("status", {}).get("containerStatuses") or []
        running = statuses and all("running" in s.get("state", {}) for s in statuses)
        return time.monotonic() - seen if running else None

    return wait_for(started, timeout=180, interval=0.02, what=f"{key}'s reconciler Pod running")


def sandbox_pid(host_pid: int) -> int:
    status = Path(f"/proc/{host_pid}/status").read_text()
    return int(next(line for line in status.splitlines() if line.startswith("NSpid:")).split()[2])


def test_a_commit_travels_through_git_sync_to_the_real_reconciler(
    config_sync_on_node: NodeConfigSync,
) -> None:
    cs = config_sync_on_node
    assert cs.api is not None
    commit = cs.commit(ROOT, configmaps(20))
    cs.api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(ROOT))
    FIGURES.append(
        (
            "real node: a reconciler Pod from first seen to all its containers running",
            pod_start_seconds(cs, ROOT),
        )
    )
    rsync = wait_for(
        lambda: synced(r := cs.api.get(kubeapi.ROOTSYNC, NAMESPACE, ROOT.name), commit) and r,  # type: ignore[union-attr]
        timeout=180,
        what="the RootSync to sync the commit",
    )
    assert rsync["status"]["source"]["commit"] == commit
    assert (
        len(
            json.loads(cs.api.list_page(kubeapi.Resource("", "v1", "configmaps", "ConfigMap"), "apps"))[
                "items"
            ]
        )
        >= 20
    )


def test_every_container_of_the_reconciler_pod_is_containerds_in_the_kubelets_cgroup(
    config_sync_on_node: NodeConfigSync,
) -> None:
    cs = config_sync_on_node
    stack: NodeStack = cs.stack
    pods = wait_for(lambda: cs.pods("app=reconciler"), timeout=120, what="a reconciler Pod")
    pod = pods[0]
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert set(statuses) == {"reconciler", "git-sync", "otel-agent"}
    assert all(s["containerID"].startswith("containerd://") for s in statuses.values())
    tasks = {
        row.split()[0]: int(row.split()[1]) for row in stack.node.ctr("tasks", "ls").stdout.splitlines()[1:]
    }
    reconciler = statuses["reconciler"]["containerID"].removeprefix("containerd://")
    cgroup = stack.container_cgroup(reconciler)
    assert f"pod{pod['metadata']['uid']}" in str(cgroup)
    inside = [sandbox_pid(int(p)) for p in (cgroup / "cgroup.procs").read_text().split()]
    assert tasks[reconciler] in inside
    # The reconciler's own binary runs there (its command line, read from /proc).
    host_pids = (cgroup / "cgroup.procs").read_text().split()
    assert any(Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0] == b"/reconciler" for p in host_pids)


def test_an_undersized_reconciler_is_oom_killed_by_the_kernel_and_the_kubelet_reports_it(
    config_sync_on_node: NodeConfigSync,
) -> None:
    """Config Sync's reconciler under a 16Mi limit (set through the RootSync's override, as our sizing
    sets it): the kernel kills it in the memory cgroup the kubelet made, and the kubelet reports
    `OOMKilled` in the Pod status and restarts it in place (same Pod, restartCount up)."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    key = RSyncKey("RootSync", NAMESPACE, "undersized")
    cs.commit(key, configmaps(300, namespace="undersized-apps"))
    body = cs.rsync(key)
    body["spec"]["override"] = {
        "resources": [{"containerName": "reconciler", "memoryRequest": "16Mi", "memoryLimit": "16Mi"}]
    }
    api.create(kubeapi.ROOTSYNC, NAMESPACE, body)
    try:

        def oom_killed() -> JSON | None:
            pod = cast(JSON, cs.reconciler_pod(key) or {})
            statuses = pod.get("status", {}).get("containerStatuses") or []
            reconciler = next((s for s in statuses if s["name"] == "reconciler"), {})
            last = reconciler.get("lastState", {}).get("terminated") or {}
            return reconciler if last.get("reason") == "OOMKilled" else None

        reconciler = wait_for(oom_killed, timeout=240, what="the reconciler OOMKilled in its Pod's status")
        assert reconciler["restartCount"] >= 1
        assert reconciler["lastState"]["terminated"]["exitCode"] == 137
        assert reconciler["containerID"].startswith("containerd://")
        # The limit the kernel enforced is the override's, which the reconciler-manager put into the Pod.
        pod = cast(JSON, cs.reconciler_pod(key))
        (container,) = [c for c in pod["spec"]["containers"] if c["name"] == "reconciler"]
        assert container["resources"]["limits"]["memory"] == "16Mi"
    finally:
        api.delete(kubeapi.ROOTSYNC, NAMESPACE, key.name)


def test_our_webhook_pod_injects_the_sidecar_through_its_service_and_the_sidecar_counts_the_repo(
    config_sync_on_node: NodeConfigSync, tmp_path: Path
) -> None:
    """The sidecar install on the real node: the webhook runs as Pods of our image behind its Service (the
    API server dials its endpoint), and the sidecar it adds runs our image as uid 10001 with a read-only
    root, reads the `repo` volume git-sync writes under Config Sync's Pod security context, and counts
    and sizes its own RSync with its own account's token."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    cs.install_sidecar(tmp_path / "certs")  # returns once both webhook Pods pass their readiness probe
    try:
        key = RSyncKey("RootSync", NAMESPACE, "sidecar-sync")
        manifests = configmaps_yaml(30, namespace="sidecar-apps")
        commit = cs.commit(key, {"configmaps.yaml": manifests})
        api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))

        def sidecar_running() -> JSON | None:
            for pod in cs.pods(f"configsync.gke.io/sync-name={key.name}"):
                statuses = {s["name"]: s for s in pod["status"].get("containerStatuses") or []}
                sidecar = statuses.get(SIDECAR_CONTAINER)
                if sidecar and "running" in sidecar.get("state", {}):
                    return pod
            return None

        pod = wait_for(sidecar_running, timeout=180, what="our sidecar running in the reconciler Pod")
        sidecar = next(s for s in pod["status"]["containerStatuses"] if s["name"] == SIDECAR_CONTAINER)
        assert sidecar["containerID"].startswith("containerd://")
        assert sidecar["image"] == f"docker.io/library/{OBJCOUNT_IMAGE}"
        wait_for(
            lambda: synced(r := api.get(kubeapi.ROOTSYNC, NAMESPACE, key.name), commit) and r,
            timeout=180,
            what="the RootSync to sync",
        )
        # 30 ConfigMaps in the source (read from the repo volume) and 31 in the inventory (the implicit
        # Namespace), written by the sidecar on its own RSync.
        wait_for(
            lambda: counts(api, key) == ("30", "31"),
            timeout=120,
            what="the sidecar's counts; its log:\n" + container_log(cs, pod, SIDECAR_CONTAINER),
        )
        # The shipped default (size-aware, rsync-override) by hand: 30 ConfigMaps and the implicit
        # Namespace, the source's KiB scaled to the 31 objects; the reconciler-manager rolls it out and the
        # kubelet sets it on the new reconciler container's cgroup (the new Pod gets the sidecar again).
        cpu, memory = size_aware_by_hand(
            configmaps=30, others=1, kib=-(-kib(manifests) * 31 // 30), api_resources=legacy_count(api)
        )
        wait_for(lambda: override(api, key).get("memoryLimit") == memory, timeout=60, what="the override")
        assert override(api, key).get("cpuRequest") == cpu
        wait_for(
            lambda: reconciler_memory_limit(cs, key) == quantity_bytes(memory),
            timeout=240,
            what=f"the reconciler running in a memory cgroup of {memory}",
        )
        pod = cast(JSON, cs.reconciler_pod(key))
        assert SIDECAR_CONTAINER in {c["name"] for c in pod["spec"]["containers"]}
        # Read from the Pod now running: the first one, whose sidecar did the counting, was replaced by
        # the rollout of the new size (CI once read the gone container's cgroup).
        process = wait_for(
            lambda: running_process(cs, key, SIDECAR_CONTAINER), timeout=60, what="the sidecar running"
        )
        assert process == {"uid": 10001, "root_read_only": True}
    finally:
        uninstall_webhook(api)


def test_our_cluster_mode_deployment_runs_as_pods_of_our_image_and_sizes_a_rootsync_and_a_reposync(
    config_sync_on_node: NodeConfigSync,
) -> None:
    """`kubectl apply -k manifests/cluster` on the real node: two Pods of our image, both Ready, one holds
    the Lease; with the shipped RBAC only, it counts a RootSync's and a RepoSync's inventories and sizes
    both reconcilers through their overrides, which the reconciler-manager puts into the Deployments and
    the kubelet into the containers' cgroups."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    install_cluster(api)
    try:
        ours = wait_for(
            lambda: ready if len(ready := [p for p in cs.pods(CONTROLLER) if pod_ready(p)]) == 2 else None,
            timeout=120,
            what="both controller Pods Ready",
        )
        lease = api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")
        assert lease["spec"]["holderIdentity"] in {p["metadata"]["name"] for p in ours}
        for pod in ours:
            (status,) = pod["status"]["containerStatuses"]
            assert status["image"] == f"docker.io/library/{OBJCOUNT_IMAGE}"
            assert our_process(cs.stack, status["containerID"]) == {"uid": 10001, "root_read_only": True}
        team = "team-cluster"
        root, repo = RSyncKey("RootSync", NAMESPACE, "cluster-root"), RSyncKey("RepoSync", team, "repo-sync")
        ensure_namespace(api, team)
        grant_reposync(api, team, repo.name)  # Config Sync's RoleBinding for the RepoSync's reconciler
        commits = {
            root: cs.commit(root, configmaps(40, namespace="cluster-apps")),
            repo: cs.commit(repo, configmaps(25, namespace=team)),
        }
        for key in commits:
            api.create(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, cs.rsync(key))
        # The shipped default (size-aware) with no source in cluster mode: inventories of 41 (40 and the
        # implicit Namespace) and 25 entries, every entry of unknown kind and 2 KiB assumed per entry.
        surface = legacy_count(api)
        for key, entries in ((root, 41), (repo, 25)):
            cpu, memory = size_aware_by_hand(
                configmaps=0, others=entries, kib=2 * entries, api_resources=surface
            )
            wait_for(lambda k=key: synced(rsync_of(api, k), commits[k]), timeout=240, what=f"{key} synced")
            wait_for(
                lambda k=key, e=entries: counts(api, k) == (None, str(e)),
                timeout=60,
                what=f"{key}'s inventory counted; the leader's log:\n" + leader_log(cs, ours),
            )
            wait_for(
                lambda k=key, m=memory: override(api, k).get("memoryLimit") == m, timeout=60, what="override"
            )
            assert override(api, key).get("cpuRequest") == cpu
            wait_for(
                lambda k=key, m=memory: reconciler_memory_limit(cs, k) == quantity_bytes(m),
                timeout=240,
                what=f"{key}'s reconciler running in a memory cgroup of {memory}",
            )
    finally:
        uninstall_cluster(api)


CONTROLLER = "app.kubernetes.io/name=objcount-autoscaler"


def rsync_of(api: kubeapi.KubeApi, key: RSyncKey) -> JSON:
    return api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)


def counts(api: kubeapi.KubeApi, key: RSyncKey) -> tuple[str | None, str | None]:
    annotations = rsync_of(api, key)["metadata"].get("annotations") or {}
    return annotations.get(SOURCE_ANNOTATION), annotations.get(SYNC_ANNOTATION)


def override(api: kubeapi.KubeApi, key: RSyncKey) -> JSON:
    """The reconciler container's entry of the RSync's spec.override.resources ({} when there is none)."""
    entries = (rsync_of(api, key)["spec"].get("override") or {}).get("resources") or []
    return next((e for e in entries if e.get("containerName") == "reconciler"), {})


def container_log(cs: NodeConfigSync, pod: JSON, container: str) -> str:
    name = pod["metadata"]["name"]
    return cs.stack.kubectl("logs", "-n", NAMESPACE, name, "-c", container, check=False).stdout[-3000:]


def leader_log(cs: NodeConfigSync, pods: list[JSON]) -> str:
    return "\n".join(container_log(cs, pod, "autoscaler") for pod in pods)


def reconciler_memory_limit(cs: NodeConfigSync, key: RSyncKey) -> int | None:
    """The memory limit of the RSync's running reconciler container, read from its cgroup."""
    status = running_container(cs, key, "reconciler")
    try:
        return None if status is None else cs.stack.container_memory(status["containerID"]).limit
    except (OSError, LookupError):  # the container went away between the two reads
        return None


def running_process(cs: NodeConfigSync, key: RSyncKey, container: str) -> JSON | None:
    """our_process() of a container of the RSync's live reconciler Pod (None while it is not running)."""
    status = running_container(cs, key, container)
    try:
        return None if status is None else our_process(cs.stack, status["containerID"])
    except (OSError, LookupError):  # the container went away between the two reads
        return None


def running_container(cs: NodeConfigSync, key: RSyncKey, container: str) -> JSON | None:
    """The status of a running container of the RSync's live reconciler Pod (None when there is none)."""
    pod = cast(JSON, cs.reconciler_pod(key) or {})
    statuses = pod.get("status", {}).get("containerStatuses") or []
    return next((s for s in statuses if s["name"] == container and "running" in s["state"]), None)


def quantity_bytes(memory: str) -> int:
    """A memory quantity in Mi or Gi (what the sizing writes) in bytes."""
    number, unit = int(memory[:-2]), memory[-2:]
    return number << {"Mi": 20, "Gi": 30}[unit]


def our_process(stack: NodeStack, container_id: str) -> JSON:
    """A container's main process as the host sees it: its uid, and whether its root is mounted read-only."""
    cgroup = stack.container_cgroup(container_id)
    pid = (cgroup / "cgroup.procs").read_text().split()[0]
    status = Path(f"/proc/{pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    root = next(
        line for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if line.split()[4] == "/"
    )
    return {"uid": uid, "root_read_only": "ro" in root.split()[5].split(",")}
