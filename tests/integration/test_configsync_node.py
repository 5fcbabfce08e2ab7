"""Config Sync v1.25.0 (and every release pinned `subset` for the tests marked both_versions) on the real
node: its reconciler-manager and reconcilers are Pods the kubelet runs from images built here; a commit
travels the real path (git daemon on the node's network, git-sync in the reconciler Pod, the reconciler
applies it). Every container is the real component: Config Sync's own binaries, git-sync v4.4.2 and the
OpenTelemetry Collector, each built from its pinned release (see controlplane.images)."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import cast

import pytest
import yaml

from controlplane.autoscaler_install import CONTROLLER as CONTROLLER_DEPLOYMENT
from controlplane.autoscaler_install import sidecar_template_text, uninstall_cluster
from controlplane.configsync_build import build_git_sync, build_otelcol
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.fault_proxy import CONFIG_SYNC_READS, Fault
from controlplane.images import OBJCOUNT_IMAGE
from controlplane.seed import configmaps_yaml, manifests_in
from controlplane.stack import NodeStack
from controlplane.status_checks import pod_ready, synced
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import FIGURES, OBSERVED, Sampler, legacy_count, size_aware_by_hand, wait_for
from tests.integration.on_node import (
    JSON,
    PodHistory,
    configmaps,
    container_log,
    container_status,
    counts,
    fitted,
    main_pid,
    memory_limit_of_pod,
    metric,
    numbers,
    oom_killed_at,
    our_process,
    override,
    reconciler_memory_limit,
    reconciler_resources,
    roots_and_repos,
    rsync_of,
    runs_at,
    suffix,
)

ROOT = RSyncKey("RootSync", NAMESPACE, "root-sync")
MiB = 1 << 20


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
        # by the kinds they name, 2 KiB assumed per entry. For 301: 96 + 0.053 x 300 + 0.0667 + 0.0082 x
        # 602 = 116.9 MiB and the API surface's term, 128Mi, where every entry priced as the dearest kind
        # with the template assumed gave 170.2 MiB and that term, 192Mi.
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


# How many RSyncs the failover test runs (a quarter of them RootSyncs): 5 in CI; the figures in BENCHMARKS
# ("Leader failover under load") are of a run with OBJCOUNT_FAILOVER_RSYNCS=20.
FAILOVER_RSYNCS = int(os.environ.get("OBJCOUNT_FAILOVER_RSYNCS", "5"))


@pytest.mark.timeout(1800)
def test_a_leader_killed_under_load_is_replaced_and_no_count_or_size_is_lost(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], tmp_path: Path
) -> None:
    """Leader failover under load (issue 64), the README's cluster install with shipped settings: RSyncs
    synced and sized in place; then each commits twice as many ConfigMaps at once, and the leading
    replica's process is SIGKILLed right after and its Pod deleted (so another replica must take the Lease:
    the standby, or the Pod that replaces the leader's). Every RSync's new inventory count is written and
    its reconciler runs at the size worked out by hand for it, and no reconciler's memory request is
    lowered meanwhile (sampled every half second). The seconds from the kill to another replica holding
    the Lease (at most its 15 s after the last renewal), to the first new count written and to the last
    RSync sized are printed (BENCHMARKS.md)."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    cs.install_cluster(tmp_path / "certs")
    try:
        wait_for(
            lambda: len([p for p in cs.pods(CONTROLLER) if pod_ready(p)]) == 2, timeout=120, what="ours Ready"
        )
        roots = max(1, FAILOVER_RSYNCS // 4)
        made = roots_and_repos(
            cs,
            rsyncs,
            "failover",
            roots=(40,) * roots,
            repos=(30,) * (FAILOVER_RSYNCS - roots),
            grant_sidecar=False,
        )
        surface = legacy_count(api)

        def entries(key: RSyncKey, configmaps: int) -> int:
            return configmaps + int(key.kind == "RootSync")  # a RootSync's inventory has its Namespace

        def by_hand(key: RSyncKey, configmaps: int) -> tuple[str, str]:
            n = entries(key, configmaps)
            named = int(key.kind == "RootSync")
            return size_aware_by_hand(
                configmaps=configmaps, others=0, named=named, kib=2 * n, api_resources=surface
            )

        for key, (configmaps, commit, _) in made.items():
            synced_counted_and_sized(cs, key, commit, entries(key, configmaps), by_hand(key, configmaps))

        sampler = Sampler(
            lambda: {k: memory_request(cs, k) for k in made}, interval=0.5, tolerate=(kubeapi.Transient,)
        )
        grown = {}
        for key, (configmaps, _, text) in made.items():
            namespace = next(yaml.safe_load_all(text))["metadata"]["namespace"]
            grown[key] = (
                2 * configmaps,
                cs.commit(key, {"configmaps.yaml": configmaps_yaml(2 * configmaps, namespace=namespace)}),
            )
        lease = api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")
        leader = api.get(kubeapi.POD, NAMESPACE, lease["spec"]["holderIdentity"])
        (status,) = leader["status"]["containerStatuses"]
        gone = leader["metadata"]["name"]
        (standby,) = {p["metadata"]["name"] for p in cs.pods(CONTROLLER) if pod_ready(p)} - {gone}
        killed = time.monotonic()
        # The leader's process killed, and its Pod deleted at once so that the kubelet cannot restart it in
        # place (a restarted container keeps its Pod's name, and so the Lease): the standby must act.
        os.kill(main_pid(cs.stack, status["containerID"]), signal.SIGKILL)
        cs.stack.kubectl("delete", "pod", "-n", NAMESPACE, gone, "--grace-period=0", "--force")
        holder = wait_for(
            lambda: lease_held_by_other_than(api, gone),
            timeout=120,
            what="the Lease taken by another replica",
        )
        taken = time.monotonic() - killed
        # How many RSyncs Config Sync had synced their new commit for while no replica of ours acted.
        in_the_gap = sum(synced(rsync_of(api, k), commit) for k, (_, commit) in grown.items())
        # Another replica of ours: the standby Ready before the kill, or the Pod that replaces the leader's,
        # which also waits out the Lease and may take it first (seen here, 2026-12-07). Not "a Ready Pod
        # now": a new leader's /readyz says 503 until its caches sync, which CI saw once (2026-12-04).
        ours = {p["metadata"]["name"] for p in cs.pods(CONTROLLER)}
        assert holder in ours - {gone}, (holder, standby, ours)
        wait_for(
            lambda: any(counts(api, k) == (None, str(entries(k, n))) for k, (n, _) in grown.items()),
            timeout=300,
            what="a new count written",
        )
        first = time.monotonic() - killed
        for key, (configmaps, commit) in grown.items():
            synced_counted_and_sized(cs, key, commit, entries(key, configmaps), by_hand(key, configmaps))
        last = time.monotonic() - killed
        samples = sampler.stop()
        for key in made:
            seen = [sample[key] for sample in samples if sample.get(key) is not None]
            assert seen == sorted(seen), f"{key}: a memory request lowered: {seen}"
        what = f"leader failover under load, {FAILOVER_RSYNCS} RSyncs: seconds from the SIGKILL to"
        gap = f"another replica holding the Lease ({in_the_gap} RSyncs synced their new commit meanwhile)"
        FIGURES.append((f"{what} {gap}", taken))
        FIGURES.append((f"{what} the first new count written", first))
        FIGURES.append((f"{what} the last RSync sized", last))
    finally:
        uninstall_cluster(api)


def synced_counted_and_sized(
    cs: NodeConfigSync, key: RSyncKey, commit: str, entries: int, size: tuple[str, str]
) -> None:
    api = cs.api
    assert api is not None
    wait_for(lambda: synced(rsync_of(api, key), commit), timeout=600, what=f"{key} synced")
    wait_for(
        lambda: counts(api, key) == (None, str(entries)),
        timeout=300,
        what=f"{key}'s inventory counted",
        explain=lambda: (
            f"its counts: {counts(api, key)}; our Pods' logs:\n{leader_log(cs, cs.pods(CONTROLLER))}"
        ),
    )
    wait_for(
        lambda: runs_at(cs, key, size), timeout=300, what=f"{key}'s reconciler resized in place to {size}"
    )


def memory_request(cs: NodeConfigSync, key: RSyncKey) -> int | None:
    """What the RSync's reconciler Pod asks for (its spec, as written in place), in bytes."""
    pod = cs.reconciler_pod(key)
    asked = numbers(reconciler_resources(cast(JSON, pod)["spec"])) if pod else None
    return None if asked is None else asked[1]


def lease_held_by_other_than(api: kubeapi.KubeClient, gone: str) -> str | None:
    holder = api.get(kubeapi.LEASE, NAMESPACE, "objcount-autoscaler")["spec"].get("holderIdentity")
    return holder if holder and holder != gone else None


# Settings that size far too low, so that a commit gets the reconciler OOM-killed: the count-only `fitted`
# preset (limit = request), 0 MiB + 0.01 MiB per object, at least 96 MiB (8 MiB steps), each change written
# as the RSync's override entry (the reconciler-manager rolls the Pod out at that size).
FLOOR_SETTINGS = fitted(
    "rsync-override",
    base_mib="0",
    mib_per_object="0.01",
    min_mib="96",
    step_mib="8",
    resync_interval_seconds="5",
)


def test_an_oom_kill_while_our_controller_is_down_gets_its_floor_once_it_is_back(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], tmp_path: Path
) -> None:
    """The OOM floor through a restart of ours (issue 64), end to end in cluster mode: our controller sizes
    a RootSync of 20 ConfigMaps at 96Mi and is then scaled to no Pod; a commit of 1,500 ConfigMaps gets the
    reconciler OOM-killed at 96Mi while none of ours runs, so no process of ours saw the kill before the
    restart (a restart between the kill and its write, at its worst). Back, ours reads the kill from the
    Pod's status and applies the floor. By hand: max(96 x 1.5, 96 + 128) = 224Mi, above the count's
    0.01 x 1,501 = 15 MiB, raised to 96; it stays once the commit is synced."""
    cs = config_sync_on_node
    api = cs.api
    assert api is not None
    cs.install_cluster(tmp_path / "certs", FLOOR_SETTINGS)
    try:
        wait_for(
            lambda: len([p for p in cs.pods(CONTROLLER) if pod_ready(p)]) == 2, timeout=120, what="ours Ready"
        )
        key = RSyncKey("RootSync", NAMESPACE, f"floor-{suffix()}")
        apps = f"apps-{suffix()}"
        first = cs.commit(key, configmaps(20, namespace=apps))
        api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
        rsyncs.append(key)
        wait_for(lambda: override(api, key).get("memoryLimit") == "96Mi", timeout=120, what="sized at 96Mi")
        # The Pod that ran the sync, as read then: a rollout may start a newer one, with no status yet.
        pod = wait_for(lambda: runs_synced_at(cs, key, first, "96Mi"), timeout=300, what="synced at 96Mi")
        assert container_status(pod, "reconciler")["restartCount"] == 0, "96Mi holds 20 ConfigMaps"

        cs.stack.kubectl("scale", "-n", NAMESPACE, f"deployment/{CONTROLLER_DEPLOYMENT}", "--replicas=0")
        wait_for(lambda: cs.pods(CONTROLLER) == [], timeout=120, what="no Pod of ours")
        with PodHistory(api, key) as history:
            big = cs.commit(key, configmaps(1500, namespace=apps))
            wait_for(
                lambda: history.find(oom_killed_at("96Mi")),
                timeout=300,
                what="the reconciler OOM-killed at 96Mi while ours is down",
                explain=lambda: history.states("reconciler"),
            )
        annotations = rsync_of(api, key)["metadata"].get("annotations") or {}
        assert "objcount.dev/oom-floor" not in annotations, "nothing of ours ran since the kill"
        assert override(api, key).get("memoryLimit") == "96Mi"

        cs.stack.kubectl("scale", "-n", NAMESPACE, f"deployment/{CONTROLLER_DEPLOYMENT}", "--replicas=2")
        wait_for(
            lambda: override(api, key).get("memoryLimit") == "224Mi",
            timeout=180,
            what="the floor applied by ours, back",
            explain=lambda: leader_log(cs, cs.pods(CONTROLLER)),
        )
        floor = json.loads(rsync_of(api, key)["metadata"]["annotations"]["objcount.dev/oom-floor"])
        assert floor["memory"] == "224Mi"
        wait_for(
            lambda: runs_synced_at(cs, key, big, "224Mi"), timeout=300, what="the big commit synced at 224Mi"
        )
        wait_for(
            lambda: reconciler_memory_limit(cs, key) == 224 * MiB, timeout=60, what="a cgroup of 224 MiB"
        )
        # Held after the sync: a decision of ours since keeps it (the count alone gives 96Mi).
        ours = [p["metadata"]["name"] for p in cs.pods(CONTROLLER)]
        decided = metric(api, ours, "objcount_decisions_total")
        wait_for(
            lambda: metric(api, ours, "objcount_decisions_total") > decided, timeout=60, what="a decision"
        )
        assert override(api, key).get("memoryLimit") == "224Mi"
    finally:
        uninstall_cluster(api)


def runs_synced_at(cs: NodeConfigSync, key: RSyncKey, commit: str, limit: str) -> JSON | None:
    """The reconciler Pod, once the newest one has this limit, its reconciler runs (the kubelet reported
    it: a restart count to read) and the RSync has synced `commit`; None before."""
    pod = cast("JSON | None", cs.reconciler_pod(key))
    assert cs.api is not None
    running = pod is not None and "running" in (container_status(pod, "reconciler").get("state") or {})
    if pod is None or not running or memory_limit_of_pod(pod) != limit:
        return None
    return pod if synced(rsync_of(cs.api, key), commit) else None


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
