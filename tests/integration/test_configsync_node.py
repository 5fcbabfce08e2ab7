"""Config Sync v1.24.3 (and v1.22.0 for the tests marked both_versions) on the real node: its
reconciler-manager and reconcilers are Pods the kubelet runs from images built here; a commit travels the
real path (git daemon on the node's network, git-sync in the reconciler Pod, the reconciler applies it).
Every container is the real component: Config Sync's own binaries, git-sync v4.4.2 and the OpenTelemetry
Collector, each built from its pinned release (see controlplane.images)."""

from __future__ import annotations

import hashlib
import json
import subprocess
import time
from pathlib import Path
from typing import cast

import pytest
import yaml

from controlplane.autoscaler_install import sidecar_template_text, uninstall_cluster
from controlplane.configsync_build import build_git_sync, build_otelcol
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.fault_proxy import CONFIG_SYNC_READS, Fault
from controlplane.images import OBJCOUNT_IMAGE
from controlplane.seed import manifests_in
from controlplane.stack import NodeStack
from controlplane.status_checks import pod_ready, synced
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import FIGURES, OBSERVED, legacy_count, size_aware_by_hand, wait_for
from tests.integration.on_node import (
    JSON,
    configmaps,
    container_log,
    counts,
    main_pid,
    our_process,
    override,
    roots_and_repos,
    rsync_of,
    runs_at,
    suffix,
)

ROOT = RSyncKey("RootSync", NAMESPACE, "root-sync")


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


# Where the pinned releases differ in a reconciler Pod we add a container to (read from their sources): the
# otel-agent beside the reconciler. v1.22.0's takes OpenCensus on 55678 and is probed for readiness on its
# health check (13133); v1.24.3's and v1.25.0's (the same template) take OTLP on 4317 (gRPC) and 4318
# (HTTP), with no probe. All export metrics on 8888.
OTEL_AGENT = {
    "v1.22.0": ({55678, 8888, 13133}, True),
    "v1.24.3": ({4317, 4318, 8888}, False),
    "v1.25.0": ({4317, 4318, 8888}, False),
}


def sidecar_ports() -> set[int]:
    """The ports our sidecar container listens on, from the shipped template (its own and its probe's)."""
    container = yaml.safe_load(sidecar_template_text())["container"]
    return {p["containerPort"] for p in container["ports"]} | {container["livenessProbe"]["httpGet"]["port"]}


@pytest.mark.both_versions
def test_the_otel_agent_beside_the_reconciler_differs_by_version_and_our_sidecar_takes_none_of_its_ports(
    config_sync_on_node: NodeConfigSync, configsync_version: str
) -> None:
    """A Pod's containers share one network: a port of ours that the otel-agent of either version also
    takes would keep one of the two from starting. Read from the template the reconciler-manager installed
    and runs (its ConfigMap), as released."""
    api = config_sync_on_node.api
    assert api is not None
    configmap = api.get(
        kubeapi.Resource("", "v1", "configmaps", "ConfigMap"), NAMESPACE, "reconciler-manager-cm"
    )
    template = yaml.safe_load(configmap["data"]["deployment.yaml"])
    containers = {c["name"]: c for c in template["spec"]["template"]["spec"]["containers"]}
    otel = containers["otel-agent"]
    ports, probed = OTEL_AGENT[configsync_version]
    assert {p["containerPort"] for p in otel["ports"]} == ports
    assert ("readinessProbe" in otel) is probed
    taken = {port for ports, _ in OTEL_AGENT.values() for port in ports}
    assert sidecar_ports() == {9464, 8081}
    assert not sidecar_ports() & taken


def test_a_commit_travels_through_git_sync_to_the_real_reconciler_whose_containers_are_containerds(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey]
) -> None:
    """A commit written with git reaches the real reconciler through git daemon and git-sync; every
    container of the reconciler Pod is containerd's, and the reconciler's process runs in the memory
    cgroup the kubelet made for it (no module of ours plays the kubelet or git-sync)."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    commit = cs.commit(ROOT, configmaps(20))
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(ROOT))
    rsyncs.append(ROOT)
    FIGURES.append(
        (
            "real node: a reconciler Pod from first seen to all its containers running",
            pod_start_seconds(cs, ROOT),
        )
    )
    rsync = wait_for(
        lambda: synced(r := rsync_of(api, ROOT), commit) and r, timeout=180, what="the RootSync to sync"
    )
    assert rsync["status"]["source"]["commit"] == commit
    configmaps_in_apps = json.loads(
        api.list_page(kubeapi.Resource("", "v1", "configmaps", "ConfigMap"), "apps")
    )
    assert {f"cm-{i}" for i in range(20)} <= {c["metadata"]["name"] for c in configmaps_in_apps["items"]}

    pod = cast(JSON, cs.reconciler_pod(ROOT))
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    assert set(statuses) == {"reconciler", "git-sync", "otel-agent"}
    assert all(s["containerID"].startswith("containerd://") for s in statuses.values())
    stack: NodeStack = cs.stack
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
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey]
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
    rsyncs.append(key)

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
    # Let it recover, so that its finalizer can run when the RootSync is deleted after the test.
    api.patch(kubeapi.ROOTSYNC, NAMESPACE, key.name, {"spec": {"override": None}})


def test_our_cluster_mode_deployment_runs_as_pods_of_our_image_and_sizes_rootsyncs_and_reposyncs(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], tmp_path: Path
) -> None:
    """`kubectl apply -k manifests/cluster` on the real node: two Pods of our image, both Ready, one holds
    the Lease; with the shipped RBAC only, it counts the inventories of three RootSyncs and two RepoSyncs
    that commit at once and resizes each reconciler in place, from its own inventory only, which the
    kubelet puts into the containers' cgroups (nothing written into the RSyncs)."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    cs.install_cluster(tmp_path / "certs")
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
        # Five RSyncs (three RootSyncs, two RepoSyncs) commit at once; each is sized from its own
        # inventory only (issue 61: no count of one RSync sizes another).
        made = roots_and_repos(
            cs, rsyncs, "cluster", roots=(300, 40, 150), repos=(25, 90), grant_sidecar=False
        )
        # The shipped default (size-aware) with no source in cluster mode: an inventory of n entries (a
        # RootSync's: its ConfigMaps and the implicit Namespace, a kind without a cost of its own), priced
        # by the kinds they name, 2 KiB assumed per entry. For 301: 96 + 0.0533 x 300 + 0.0556 + 0.0082 x
        # 602 = 117.0 MiB and the API surface's term, 128Mi, where every entry priced as the dearest kind
        # gave 144.3 MiB and that term, 160Mi.
        surface = legacy_count(api)
        sizes = {}
        for key, (configmaps, commit, _) in made.items():
            namespaces = int(key.kind == "RootSync")
            entries = configmaps + namespaces
            sizes[key] = size_aware_by_hand(
                configmaps=configmaps, others=0, named=namespaces, kib=2 * entries, api_resources=surface
            )
            wait_for(lambda k=key, c=commit: synced(rsync_of(api, k), c), timeout=240, what=f"{key} synced")
            wait_for(
                lambda k=key, e=entries: counts(api, k) == (None, str(e)),
                timeout=60,
                what=f"{key}'s inventory counted",
                explain=lambda k=key: (
                    f"its counts: {counts(api, k)}; our Pods' logs:\n{leader_log(cs, ours)}"
                ),
            )
        assert len(set(sizes.values())) >= 3, f"sizes that tell the RSyncs apart: {sizes}"
        for key, size in sizes.items():
            wait_for(
                lambda k=key, z=size: runs_at(cs, k, z),
                timeout=240,
                what=f"{key}'s reconciler resized in place to {size}",
            )
            assert override(api, key) == {}, "nothing written into the RSync"
        for budget in ("objcount-autoscaler", "objcount-webhook"):
            a_drain_takes_one_pod_at_a_time(cs, budget)
    finally:
        uninstall_cluster(api)


def test_our_cluster_mode_rides_out_an_api_server_in_trouble_on_the_real_node(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], tmp_path: Path
) -> None:
    """The README's cluster install, its controller Pods reaching the API server through the fault proxy
    (their `KUBERNETES_SERVICE_HOST` and `_PORT` name its listener in the node's network; it serves the API
    server's own certificate). A RootSync of 20 ConfigMaps counted; for 20 s every read of Config Sync's
    objects through the proxy is answered 500, its watches cut, while real Config Sync syncs a commit of
    60. The leader reads each resource at most 5 times in the 20 s (the standby reads nothing until it
    leads), no Pod of ours restarts or logs a traceback, and once the fault clears the inventory's 61
    entries are counted."""
    cs = config_sync_on_node
    api = cs.api
    proxy = cs.fault_proxy()
    cs.install_cluster(tmp_path / "certs", proxy.in_cluster_env)
    try:

        def proxied_pods_lead() -> bool:
            """Only Pods of this install run, both Ready, one of them leading (a previous install's
            Pods, gone with its Deployment, may linger for a while)."""
            pods = cs.pods(CONTROLLER)
            proxied = [p for p in pods if pod_ready(p) and through_proxy_env <= env_of(p)]
            try:  # no Lease until one of them first leads
                holder = api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")["spec"].get(
                    "holderIdentity"
                )
            except kubeapi.NotFound:
                return False
            return len(pods) == len(proxied) == 2 and holder in {p["metadata"]["name"] for p in pods}

        through_proxy_env = set(proxy.in_cluster_env.items())
        wait_for(
            proxied_pods_lead, timeout=180, what="both controller Pods of this install Ready, one leading"
        )
        apps = f"apps-{suffix()}"
        key = RSyncKey("RootSync", NAMESPACE, f"cluster-faults-{suffix()}")
        cs.commit(key, configmaps(20, namespace=apps))
        api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
        rsyncs.append(key)
        wait_for(lambda: counts(api, key) == (None, "21"), timeout=240, what="the inventory counted")
        began = proxy.begin(Fault(CONFIG_SYNC_READS, 500, "InternalError"))
        commit = cs.commit(key, configmaps(60, namespace=apps))
        wait_for(
            lambda: proxy.read_since(began + FAULT_S), timeout=FAULT_S * 4, what="20 s of 500, then a read"
        )
        asked = {
            plural: proxy.reads(plural, began, FAULT_S)
            for plural in ("rootsyncs", "reposyncs", "resourcegroups")
        }
        OBSERVED.append(f"API faults on the node: cluster mode's reads in 20 s of 500: {asked}")
        assert all(1 <= n <= 5 for n in asked.values()), asked
        proxy.clear()
        wait_for(lambda: synced(rsync_of(api, key), commit), timeout=240, what="the commit of 60 synced")
        wait_for(lambda: counts(api, key) == (None, "61"), timeout=120, what="the counts caught up")
        ours = cs.pods(CONTROLLER)
        assert len(ours) == 2
        for pod in ours:
            (status,) = pod["status"]["containerStatuses"]
            assert status["restartCount"] == 0, pod["metadata"]["name"]
            assert "Traceback" not in container_log(cs, pod, "autoscaler", tail=0)
    finally:
        uninstall_cluster(api)
        proxy.close()


def env_of(pod: JSON) -> set[tuple[str, str]]:
    (container,) = pod["spec"]["containers"]
    return {(e["name"], e.get("value", "")) for e in container.get("env", [])}


FAULT_S = 20.0
CONTROLLER = "app.kubernetes.io/name=objcount-autoscaler"
DISRUPTION_BUDGET = kubeapi.Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget")


def a_drain_takes_one_pod_at_a_time(cs: NodeConfigSync, budget: str) -> None:
    """Our PodDisruptionBudget `budget`, through the eviction API as `kubectl drain` asks: of the two Ready
    Pods it covers, the first is evicted, the second refused (429) while the first is away."""
    api = cs.api
    selector = f"app.kubernetes.io/name={budget}"
    wait_for(
        lambda: (
            (api.get(DISRUPTION_BUDGET, NAMESPACE, budget).get("status") or {}).get("disruptionsAllowed") == 1
        ),
        timeout=120,
        what=f"{budget}: one disruption allowed (both Pods Ready, seen by the disruption controller)",
    )
    first, second = [p for p in cs.pods(selector) if pod_ready(p)]
    evict(api, first)
    with pytest.raises(kubeapi.ApiError) as refused:
        evict(api, second)
    assert refused.value.status == 429, refused.value
    assert "disruption budget" in str(refused.value), refused.value


def evict(api: kubeapi.KubeClient, pod: JSON) -> None:
    name = pod["metadata"]["name"]
    eviction = {
        "apiVersion": "policy/v1",
        "kind": "Eviction",
        "metadata": {"name": name, "namespace": NAMESPACE},
    }
    api.request_json("POST", f"/api/v1/namespaces/{NAMESPACE}/pods/{name}/eviction", body=eviction)


def leader_log(cs: NodeConfigSync, pods: list[JSON]) -> str:
    return "\n".join(container_log(cs, pod, "autoscaler") for pod in pods)


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def collector_metric(pid: int, receiver: str) -> float:
    """The metric points the collector running as `pid` has accepted on `receiver`, from its own metrics
    (served on the Pod's loopback, port 8888: read inside the Pod's network namespace)."""
    script = "import urllib.request; print(urllib.request.urlopen('http://127.0.0.1:8888/metrics').read().decode())"
    text = subprocess.run(
        ["nsenter", f"--net=/proc/{pid}/ns/net", "python3", "-c", script],
        capture_output=True,
        text=True,
        check=False,
        timeout=30,
    ).stdout
    prefix = "otelcol_receiver_accepted_metric_points"
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(prefix) and f'receiver="{receiver}"' in line
    )


@pytest.mark.both_versions
def test_every_container_of_the_reconciler_pod_is_the_real_component_of_its_pinned_release(
    config_sync_on_node: NodeConfigSync, configsync_version: str, rsyncs: list[RSyncKey]
) -> None:
    """git-sync is v4.4.2 built from ../shared/gitsync (the binary the container runs is the one
    build_gitsync.sh built from the checked archive); the otel-agent is the OpenTelemetry Collector built
    from its modules, reading Config Sync's own ConfigMap unchanged and accepting the metrics the reconciler
    exports to it; its `gcp` resource detector's request to the metadata server has no route out of the
    suite's network namespace, so it fails there and goes nowhere."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    key = RSyncKey("RootSync", NAMESPACE, "real-parts")
    commit = cs.commit(key, configmaps(5, namespace="real-parts-apps"))
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
    rsyncs.append(key)
    wait_for(lambda: synced(rsync_of(api, key), commit), timeout=180, what="the RootSync to sync")
    pod = cast(JSON, cs.reconciler_pod(key))
    statuses = {s["name"]: s for s in pod["status"]["containerStatuses"]}
    git_sync = main_pid(cs.stack, statuses["git-sync"]["containerID"])
    otel = main_pid(cs.stack, statuses["otel-agent"]["containerID"])

    assert sha256_of(Path(f"/proc/{git_sync}/exe")) == sha256_of(build_git_sync() / "git-sync")
    assert '"msg":"starting up","version":"v4.4.2"' in container_log(cs, pod, "git-sync", tail=0)

    assert sha256_of(Path(f"/proc/{otel}/exe")) == sha256_of(build_otelcol() / "otelcontribcol")
    argv = Path(f"/proc/{otel}/cmdline").read_bytes().decode().split("\0")
    assert argv[:2] == ["/otelcontribcol", "--config=/conf/otel-agent-reconciler-config.yaml"]
    (released,) = manifests_in(cs.build.manifests / "otel-agent-reconciler-cm.yaml")
    read = Path(f"/proc/{otel}/root/conf/otel-agent-reconciler-config.yaml").read_text()
    assert read == released["data"]["otel-agent-reconciler-config.yaml"]
    receiver = "opencensus" if configsync_version == "v1.22.0" else "otlp"
    # The reconciler exports every 60 s (its periodic reader's default).
    wait_for(
        lambda: collector_metric(otel, receiver) > 0, timeout=180, what="the reconciler's metrics accepted"
    )

    log = container_log(cs, pod, "otel-agent", tail=0)
    assert "detected resource information" in log
    route = cs.stack.sandbox.run(["ip", "route", "get", "169.254.169.254"], check=False)
    assert route.returncode != 0
    assert "unreachable" in route.stderr.lower()
