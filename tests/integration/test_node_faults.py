"""Faults of a real node under our sidecar (installed as the README says, shipped settings but a short
scale-down delay) and Config Sync: the kubelet restarted, containerd restarted, our sidecar killed, the
reconciler killed in the middle of an apply, the webhook gone while a reconciler Pod is created, a node
short of CPU for a resize, a kubelet without in-place resize. Each checks that nothing is lost (counts,
sizes, decisions) and records its recovery time (printed at the end of the run; BENCHMARKS.md). Every
container of Config Sync's Pods is the real component (see controlplane.images)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path
from typing import cast

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from autoscaler.core import quantity
from controlplane.autoscaler_install import SIDECAR_CONTAINER, WEBHOOK_CONFIGURATION, WEBHOOK_NAME
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync, running_config_sync_on_node
from controlplane.filler import fill_the_nodes_cpu
from controlplane.resources import RESOURCES
from controlplane.seed import configmaps_yaml
from controlplane.status_checks import pod_ready
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import FIGURES, OBSERVED, Sampler, legacy_count, wait_for
from tests.integration.on_node import (
    JSON,
    PodHistory,
    Size,
    applied,
    applied_memory,
    container_log,
    container_status,
    counts,
    finished,
    generation,
    main_pid,
    metric,
    numbers,
    quantity_bytes,
    quantity_millicores,
    reconciler_memory_limit,
    reconciler_resources,
    resize_condition,
    rsync_of,
    running_container,
    runs_at,
    size_aware_size,
)

SYNC_TIMEOUT = 300.0
WEBHOOK = f"app.kubernetes.io/name={WEBHOOK_NAME}"


def sized_rootsync(cs: NodeConfigSync, rsyncs: list[RSyncKey], configmaps: int) -> tuple[RSyncKey, str, JSON]:
    """A RootSync of `configmaps` ConfigMaps with our sidecar, synced, counted and running at the size
    worked out by hand: its key, the namespace of its objects and its reconciler Pod."""
    api = cs.api
    apps = f"apps-{uuid.uuid4().hex[:8]}"
    key = RSyncKey("RootSync", NAMESPACE, f"fault-{uuid.uuid4().hex[:8]}")
    manifests = configmaps_yaml(configmaps, namespace=apps)
    commit = cs.commit(key, {"configmaps.yaml": manifests})
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
    rsyncs.append(key)
    size = size_aware_size(api, manifests, configmaps, 1)
    wait_for(lambda: finished(rsync_of(api, key), commit), timeout=SYNC_TIMEOUT, what="the sync")
    wait_for(lambda: counts(api, key) == (str(configmaps), str(configmaps + 1)), timeout=120, what="counts")
    wait_for(lambda: applied_memory(api, key) == size[1], timeout=120, what="the size")
    pod = wait_for(lambda: steady_pod(cs, key, size), timeout=SYNC_TIMEOUT, what="the Pod at its size, Ready")
    return key, apps, pod


def steady_pod(cs: NodeConfigSync, key: RSyncKey, size: Size) -> JSON | None:
    """The RSync's reconciler Pod once it runs at `size` (resized in place) with our sidecar, Ready."""
    pod = cast(JSON, cs.reconciler_pod(key) or {})
    containers = {c["name"] for c in (pod.get("spec") or {}).get("containers") or []}
    if SIDECAR_CONTAINER not in containers or not pod_ready(pod):
        return None
    return pod if runs_at(cs, key, size) else None


def containers_of(pod: JSON) -> dict[str, tuple[str, int]]:
    """Each container's (containerID, restartCount)."""
    return {s["name"]: (s["containerID"], s["restartCount"]) for s in pod["status"]["containerStatuses"]}


def live(cs: NodeConfigSync, key: RSyncKey) -> JSON:
    return cast(JSON, cs.reconciler_pod(key))


def a_new_commit_is_counted_and_sized(cs: NodeConfigSync, key: RSyncKey, apps: str, configmaps: int) -> None:
    api = cs.api
    manifests = configmaps_yaml(configmaps, namespace=apps)
    commit = cs.commit(key, {"configmaps.yaml": manifests})
    size = size_aware_size(api, manifests, configmaps, 1)
    wait_for(lambda: finished(rsync_of(api, key), commit), timeout=SYNC_TIMEOUT, what="the new commit synced")
    wait_for(
        lambda: counts(api, key) == (str(configmaps), str(configmaps + 1)), timeout=120, what="its counts"
    )
    wait_for(lambda: runs_at(cs, key, size), timeout=120, what="its size, in place")


@pytest.mark.parametrize("component", ["kubelet", "containerd"])
def test_a_restart_of_the_kubelet_or_containerd_keeps_every_container_and_the_sizing_going(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None, component: str
) -> None:
    cs = config_sync_on_node
    key, apps, pod = sized_rootsync(cs, rsyncs, 30)
    before = containers_of(pod)
    began = time.monotonic()
    if component == "kubelet":
        cs.stack.node.restart_kubelet()
    else:
        cs.stack.node.restart_containerd()
    back = time.monotonic() - began
    # The containers were not touched: same ids, no restart (the kubelet reads them back from containerd).
    wait_for(
        lambda: containers_of(live(cs, key)) == before and pod_ready(live(cs, key)),
        timeout=120,
        what="the Pod as before",
    )
    assert live(cs, key)["metadata"]["uid"] == pod["metadata"]["uid"]
    a_new_commit_is_counted_and_sized(cs, key, apps, 60)
    FIGURES.append((f"real node: {component} restarted, back (Node Ready / answering)", back))
    FIGURES.append(
        (f"real node: {component} restarted to a new commit counted and sized", time.monotonic() - began)
    )


def test_our_sidecar_killed_is_restarted_by_the_kubelet_and_keeps_the_size_from_the_rsync(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None
) -> None:
    cs = config_sync_on_node
    api = cs.api
    key, _, pod = sized_rootsync(cs, rsyncs, 30)
    before = containers_of(pod)
    sized, rolled = applied(api, key), generation(api, key)
    killed = time.monotonic()
    os.kill(main_pid(cs.stack, before[SIDECAR_CONTAINER][0]), signal.SIGKILL)

    def restarted() -> JSON | None:
        status = container_status(live(cs, key), SIDECAR_CONTAINER)
        last = (status.get("lastState") or {}).get("terminated") or {}
        return status if status.get("restartCount") == 1 and "running" in status["state"] and last else None

    status = wait_for(restarted, timeout=120, what="the sidecar restarted by the kubelet")
    assert status["lastState"]["terminated"]["exitCode"] == 137
    name = live(cs, key)["metadata"]["name"]
    unchanged = 'objcount_decisions_total{outcome="unchanged"}'
    wait_for(
        lambda: metric(api, [name], unchanged) >= 1, timeout=120, what="the new sidecar's first decision"
    )
    FIGURES.append(("real node: our sidecar SIGKILLed to its next decision", time.monotonic() - killed))
    # Its counts and size came back from the RSync: nothing written again, no rollout, no new Pod.
    assert counts(api, key) == ("30", "31")
    assert (applied(api, key), generation(api, key)) == (sized, rolled)
    assert live(cs, key)["metadata"]["uid"] == pod["metadata"]["uid"]
    assert containers_of(live(cs, key))["reconciler"] == before["reconciler"]


def changed_configmaps(count: int, namespace: str) -> str:
    """The same `count` ConfigMaps with other data of the same length (the same KiB): `count` updates."""
    return configmaps_yaml(count, namespace=namespace).replace("key: value-", "key: other-")


def test_the_reconciler_killed_mid_apply_is_restarted_finishes_and_its_size_holds(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None
) -> None:
    cs = config_sync_on_node
    api = cs.api
    key, apps, pod = sized_rootsync(cs, rsyncs, 1500)
    before = containers_of(pod)
    sized, rolled = applied(api, key), generation(api, key)
    commit = cs.commit(key, {"configmaps.yaml": changed_configmaps(1500, apps)})
    sampler = Sampler(lambda: applied(api, key), interval=0.5, tolerate=(kubeapi.ApiError,))
    try:
        # The reconciler has read the commit and is applying it: kill it there.
        wait_for(
            lambda: (rsync_of(api, key).get("status") or {}).get("source", {}).get("commit") == commit,
            timeout=120,
            interval=0.1,
            what="the reconciler applying the commit",
        )
        assert not finished(rsync_of(api, key), commit), "the apply finished before the kill: nothing tested"
        killed = time.monotonic()
        os.kill(main_pid(cs.stack, before["reconciler"][0]), signal.SIGKILL)
        wait_for(
            lambda: containers_of(live(cs, key))["reconciler"][1] == 1,
            timeout=120,
            what="the reconciler restarted",
        )
        wait_for(
            lambda: finished(rsync_of(api, key), commit), timeout=SYNC_TIMEOUT, what="the apply finished"
        )
        FIGURES.append(
            ("real node: reconciler SIGKILLed mid-apply (1,500 updates) to synced", time.monotonic() - killed)
        )
    finally:
        seen = sampler.stop()
    assert seen
    assert all(entry == sized for entry in seen), "the size changed while the reconciler was down"
    assert counts(api, key) == ("1500", "1501")
    assert (applied(api, key), generation(api, key)) == (sized, rolled)
    assert live(cs, key)["metadata"]["uid"] == pod["metadata"]["uid"], "restarted in its Pod, no new Pod"
    restarted = container_status(live(cs, key), "reconciler")
    assert restarted["lastState"]["terminated"]["exitCode"] == 137


def test_a_reconciler_pod_created_while_the_webhook_has_no_pod_runs_without_the_sidecar_and_gets_it_back(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None
) -> None:
    cs = config_sync_on_node
    api = cs.api
    key, apps, pod = sized_rootsync(cs, rsyncs, 30)
    ours = our_webhooks(cs)
    failed_open = fail_open_count(cs, ours)
    cs.stack.kubectl("scale", "-n", NAMESPACE, f"deployment/{WEBHOOK_NAME}", "--replicas=0")
    # Gone, not only terminating: a terminating Pod can still be among the Service's endpoints the API
    # server dials (seen once in a cold CI on the loaded machine: the next Pod got the sidecar).
    wait_for(
        lambda: (
            not [
                p
                for p in all_pods(api)
                if p["metadata"].get("labels", {}).get("app.kubernetes.io/name") == WEBHOOK_NAME
            ]
        ),
        timeout=90,
        what="the webhook's Pods gone",
    )
    api.delete(kubeapi.POD, NAMESPACE, pod["metadata"]["name"])
    bare = wait_for(
        lambda: (
            (p := cs.reconciler_pod(key))
            and p["metadata"]["uid"] != pod["metadata"]["uid"]
            and pod_ready(p)
            and p
        ),
        timeout=120,
        what="a new reconciler Pod, Ready",
    )
    assert SIDECAR_CONTAINER not in [c["name"] for c in bare["spec"]["containers"]], "fail-open: no sidecar"
    template = api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))["spec"]["template"]["spec"]
    assert reconciler_resources(bare["spec"]) == reconciler_resources(template), (
        "fail-open: the template's size"
    )
    # What ObjcountWebhookFailingOpen (manifests/monitoring/rules.yaml) alerts on: the API server's own count
    # of admissions that went on without our webhook, by the webhook's name in the configuration.
    assert fail_open_count(cs, ours) > failed_open
    a_new_commit_is_counted_by_the_reconciler = cs.commit(
        key, {"configmaps.yaml": configmaps_yaml(35, namespace=apps)}
    )
    wait_for(
        lambda: finished(rsync_of(api, key), a_new_commit_is_counted_by_the_reconciler),
        timeout=SYNC_TIMEOUT,
        what="Config Sync syncing without the sidecar",
    )
    # The webhook back, the next restart of the reconciler Pod gets the sidecar again.
    cs.stack.kubectl("scale", "-n", NAMESPACE, f"deployment/{WEBHOOK_NAME}", "--replicas=2")
    cs.stack.kubectl("rollout", "status", "-n", NAMESPACE, f"deployment/{WEBHOOK_NAME}", "--timeout=100s")
    back = time.monotonic()
    recorded = applied(api, key)
    api.delete(kubeapi.POD, NAMESPACE, bare["metadata"]["name"])
    wait_for(
        lambda: counts(api, key) == ("35", "36"), timeout=SYNC_TIMEOUT, what="the next Pod's sidecar counting"
    )
    assert SIDECAR_CONTAINER in [c["name"] for c in live(cs, key)["spec"]["containers"]]
    # Admission sizing: the next Pod was created at the size recorded on the RSync (its spec's size is
    # what admission gave it; a later resize in place changes the spec too, and the recorded size did not
    # change: 30 then 35 ConfigMaps are on the same 32 MiB step).
    assert numbers(reconciler_resources(live(cs, key)["spec"])) == numbers(recorded)
    webhooks = [p["metadata"]["name"] for p in cs.pods(WEBHOOK)]
    assert metric(api, webhooks, 'objcount_webhook_sizes_total{result="sized"}') >= 1
    FIGURES.append(
        ("real node: reconciler Pod restarted with the webhook back to counted", time.monotonic() - back)
    )


def our_webhooks(cs: NodeConfigSync) -> set[str]:
    """The names of the webhooks of our configuration (`manifests/webhook/mutating-webhook.yaml`), as
    installed."""
    configuration = cs.api.get(RESOURCES["MutatingWebhookConfiguration"], None, WEBHOOK_CONFIGURATION)
    return {webhook["name"] for webhook in configuration.get("webhooks", [])}


def fail_open_count(cs: NodeConfigSync, webhooks: set[str]) -> float:
    """The API server's `apiserver_admission_webhook_fail_open_count` summed over these webhooks (its
    `/metrics`, read with the admin's kubeconfig)."""
    assert webhooks, "no webhook configuration calls our webhook's Service"
    text = cs.stack.kubectl("get", "--raw", "/metrics").stdout
    return sum(
        sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
        if sample.name.startswith("apiserver_admission_webhook_fail_open_count")
        and sample.labels.get("name") in webhooks
    )


@pytest.mark.timeout(900)  # a stack of its own, then one eviction after another
def test_under_memory_pressure_the_kubelet_evicts_every_pod_in_an_order_reported_here(tmp_path: Path) -> None:
    """Node memory pressure, forced on a stack of its own: the kubelet's hard eviction threshold raised
    above what the machine has free (soft, `memory.available<99%`, no grace period), so the pressure never ends and the kubelet
    evicts the Pods one after the other (the taint keeps their replacements Pending). Reported, not
    tuned: the order, each Pod's QoS class and memory request, and where the reconciler our sidecar sized
    comes. Checked: the Node reports MemoryPressure, every eviction is the kubelet's, for memory, and the
    reconciler outlasts our own Pods (the webhook's two)."""
    with running_config_sync_on_node() as cs:
        api = cs.api
        cs.install_sidecar(tmp_path / "certs", {"OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": "10"})
        _, _, sized = sized_rootsync(cs, [], 100)
        running_before = {
            p["metadata"]["name"]: p
            for p in all_pods(api)
            if p["status"].get("phase") == "Running" and not p["metadata"].get("deletionTimestamp")
        }
        pressed = time.monotonic()
        # A soft threshold: a hard one is also taken off the node's allocatable memory, and the restarted
        # kubelet then refuses to re-admit the running Pods (OutOfmemory) before it evicts any.
        cs.stack.node.restart_kubelet(
            config={
                "evictionSoft": {"memory.available": "99%"},
                "evictionSoftGracePeriod": {"memory.available": "0s"},
                "evictionMaxPodGracePeriod": 30,
            }
        )
        wait_for(lambda: node_condition(api, "MemoryPressure") == "True", timeout=120, what="MemoryPressure")
        evicted: dict[str, float] = {}

        def all_evicted() -> bool:
            pods = {p["metadata"]["name"]: p for p in all_pods(api)}
            for name, pod in pods.items():
                if name in running_before and name not in evicted and (reason := evicted_for(pod)):
                    evicted[name] = time.monotonic() - pressed
                    assert "low on resource: memory" in reason, reason
            # A Pod deleted meanwhile (an old reconciler Pod of a finishing rollout) was not evicted.
            return all(name in evicted or name not in pods for name in running_before)

        wait_for(all_evicted, timeout=600, interval=0.5, what="every running Pod evicted")
    order = sorted(evicted, key=evicted.__getitem__)
    OBSERVED.extend(
        f"memory pressure: not evicted, deleted meanwhile: {n}" for n in running_before if n not in evicted
    )
    for rank, name in enumerate(order, 1):
        pod = running_before[name]
        requests = sum(
            quantity.parse(c.get("resources", {}).get("requests", {}).get("memory", "0"))
            for c in pod["spec"]["containers"]
        )
        ours = " (the reconciler our sidecar sized)" if name == sized["metadata"]["name"] else ""
        OBSERVED.append(
            f"memory pressure: evicted #{rank} at {evicted[name]:.0f} s: {pod['metadata']['namespace']}/{name}"
            f" ({pod['status'].get('qosClass')}, requests {float(requests) / (1 << 20):.0f} MiB){ours}"
        )
    reconciler = sized["metadata"]["name"]
    assert reconciler in evicted
    # Kept and asserted: our own Pods (the webhook's, using little of what they request) go first, the
    # reconciler we sized outlasts them.
    ours = [n for n in evicted if n.startswith(("objcount-webhook-", "objcount-autoscaler-"))]
    assert len(ours) == 2, order
    assert all(evicted[n] < evicted[reconciler] for n in ours), order


def evicted_for(pod: JSON) -> str:
    """Why the kubelet evicted the Pod ("" if it did not). Seen on v1.34: the Pod's `DisruptionTarget`
    condition says so (reason `TerminationByKubelet`); its phase is Succeeded when its containers exit 0 on
    the SIGTERM, with no `status.reason`, so `kubectl get pods` shows it as Completed, not Evicted."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    target = next((c for c in conditions if c.get("type") == "DisruptionTarget"), {})
    return str(target.get("message", "")) if target.get("reason") == "TerminationByKubelet" else ""


def all_pods(api: kubeapi.KubeClient) -> list[JSON]:
    return cast(list[JSON], api.request_json("GET", "/api/v1/pods")["items"])


def node_condition(api: kubeapi.KubeClient, kind: str) -> str | None:
    (node,) = api.request_json("GET", "/api/v1/nodes")["items"]
    return next((c["status"] for c in node["status"]["conditions"] if c["type"] == kind), None)


def test_on_a_node_short_of_cpu_a_scale_up_keeps_the_reconciler_running_and_the_commit_syncs(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None
) -> None:
    """A filler Pod requests all the node's CPU but 20m; a commit of 1,000 ConfigMaps needs more CPU than
    that. The kubelet defers the resize (its report, seen here); the memory is asked for alone and
    applied, the same Pod syncs the commit without a restart; once the filler is gone, the CPU follows."""
    cs = config_sync_on_node
    api = cs.api
    key, apps, pod = sized_rootsync(cs, rsyncs, 30)
    small = size_aware_size(api, configmaps_yaml(30, namespace=apps), 30, 1)
    manifests = configmaps_yaml(1000, namespace=apps)
    big = size_aware_size(api, manifests, 1000, 1)
    assert quantity_millicores(big[0]) - quantity_millicores(small[0]) > 20, "the worked sizes need more CPU"
    filler = fill_the_nodes_cpu(api, leave_m=20)
    try:
        with PodHistory(api, key) as history:
            commit = cs.commit(key, {"configmaps.yaml": manifests})
            wait_for(
                lambda: runs_at(cs, key, (small[0], big[1])),
                timeout=SYNC_TIMEOUT,
                what="the memory for 1,000 objects with the CPU for 30, in place",
            )
            wait_for(lambda: finished(rsync_of(api, key), commit), timeout=SYNC_TIMEOUT, what="the sync")
            deferred = history.find(lambda p: resize_condition(p) == "Deferred")
        assert deferred is not None, "the kubelet reported the resize deferred"
        assert live(cs, key)["metadata"]["uid"] == pod["metadata"]["uid"], "the same Pod throughout"
        assert container_status(live(cs, key), "reconciler")["restartCount"] == 0
    finally:
        api.delete(kubeapi.POD, "default", filler)
    wait_for(lambda: runs_at(cs, key, big), timeout=120, what="the CPU for 1,000 objects once there is room")


@pytest.mark.kubernetes_floor(only=True)
def test_a_kubelet_without_in_place_resize_gets_the_fallback_said(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], node_sidecar: None
) -> None:
    """On the floor release only (from 1.35 the gate is GA and locked on: a kubelet refuses to start with
    it off). The kubelet restarted with InPlacePodVerticalScaling off (the API server still serves
    `pods/resize`): it reports no resources of running containers and would leave a resize in the spec.
    A new commit's size goes through the fallback (the RSync override: Config Sync rolls the reconciler
    out), said on the RSync (its annotation, an Event); the new Pod runs the size in its cgroup."""
    cs = config_sync_on_node
    api = cs.api
    key, apps, pod = sized_rootsync(cs, rsyncs, 30)
    cs.stack.node.restart_kubelet(config={"featureGates": {"InPlacePodVerticalScaling": False}})
    try:
        wait_for(
            lambda: "resources" not in container_status(live(cs, key), "reconciler"),
            timeout=60,
            what="the kubelet reporting no resources of the running reconciler",
        )
        manifests = configmaps_yaml(600, namespace=apps)
        size = size_aware_size(api, manifests, 600, 1)
        commit = cs.commit(key, {"configmaps.yaml": manifests})
        said = wait_for(
            lambda: (rsync_of(api, key)["metadata"].get("annotations") or {}).get("objcount.dev/fallback"),
            timeout=SYNC_TIMEOUT,
            what="the fallback said on the RSync",
        )
        assert "InPlacePodVerticalScaling off" in said
        entry = next(
            e
            for e in rsync_of(api, key)["spec"]["override"]["resources"]
            if e["containerName"] == "reconciler"
        )
        assert quantity_bytes(entry["memoryRequest"]) == quantity_bytes(size[1]), (
            f"{entry} for {size} (by hand with {legacy_count(api)} resource types served now); the RSync's "
            f"annotations: {rsync_of(api, key)['metadata'].get('annotations')}; our sidecar's log: "
            f"{container_log(cs, live(cs, key), SIDECAR_CONTAINER)}"
        )
        assert "memoryLimit" not in entry, "the shipped preset sets no memory limit on Standard"

        def rolled_out() -> JSON | None:
            new = cs.reconciler_pod(key)
            if new is None or new["metadata"]["uid"] == pod["metadata"]["uid"]:
                return None
            asked = (reconciler_resources(new["spec"]).get("requests") or {}).get("memory")
            sized = asked is not None and quantity_bytes(asked) == quantity_bytes(size[1])
            running = running_container(cs, key, "reconciler") is not None
            return new if sized and running and reconciler_memory_limit(cs, key) is None else None

        wait_for(
            rolled_out, timeout=SYNC_TIMEOUT, what="a new Pod running the size, its cgroup without a limit"
        )
        wait_for(lambda: finished(rsync_of(api, key), commit), timeout=SYNC_TIMEOUT, what="the commit synced")
        events = orjson.loads(api.list_page(kubeapi.EVENT, NAMESPACE)).get("items") or []
        reasons = [e.get("reason") for e in events if (e.get("regarding") or {}).get("name") == key.name]
        assert "FellBack" in reasons
    finally:
        cs.stack.node.restart_kubelet(config={"featureGates": {}})
