"""The real Vertical Pod Autoscaler (v1.8.1, built from its Go module; controlplane.vpa) on the real node,
beside real Config Sync and the real metrics-server. First VPA alone: a VerticalPodAutoscaler written as a
user would for a RootSync's reconciler gets a recommendation, and the updater resizes the running
reconciler in place (InPlaceOrRecreate): same Pod, same container, the kubelet reports the new resources.
Then objcount as VPA's recommender (target `vpa`): our sidecar, installed as the README says, writes the
recommendation of the VPA that names it, and VPA's updater and admission-controller apply it. Every
component is the released software, built here (see controlplane.images)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, cast

import pytest

from autoscaler.core import quantity
from autoscaler.kube.report import RSyncRecord, read_status
from controlplane.autoscaler_install import SIDECAR_CONTAINER, uninstall_webhook
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.metrics_server import MANIFEST as METRICS_SERVER_MANIFEST
from controlplane.metrics_server import install_metrics_server
from controlplane.seed import REPO_ROOT, configmaps_yaml
from controlplane.status_checks import rsync_gone, synced
from controlplane.vpa import NAMESPACE as VPA_NAMESPACE
from controlplane.vpa import VPA, install_vpa, uninstall_vpa
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.core.objects import OUR_FIELD_MANAGER
from inventory.kube import kubeapi
from tests.helpers import FIGURES, OBSERVED, Sampler, wait_for
from tests.integration.on_node import (
    PodHistory,
    configmaps,
    container_status,
    finished,
    main_pid,
    metric,
    rsync_of,
    suffix,
)

# The stack, Config Sync, metrics-server and VPA built on a cold cache, then one RootSync's whole timeline
# in the first test's setup (module fixtures): more than the suite's 600 s per test under load.
pytestmark = pytest.mark.timeout(900)
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


# The updater's loop (`--updater-interval`, 1 min as released) is the latency VPA adds to every size, ours
# included: a user running VPA for objcount's recommendations sets it shorter, as here.
UPDATER_INTERVAL = "5s"


@pytest.fixture(scope="module")
def vpa(config_sync_on_node: NodeConfigSync) -> Iterator[None]:
    """metrics-server and the VPA, with their released defaults (the recommender's 1 min loop, 10 s
    metrics) but the updater's loop, and the shipped RBAC and guard of the `vpa` target (manifests/vpa)."""
    stack = config_sync_on_node.stack
    began = time.monotonic()
    install_metrics_server(stack)
    install_vpa(stack, updater_args=[f"--updater-interval={UPDATER_INTERVAL}"])
    stack.kubectl("apply", "-k", str(VPA_MANIFESTS))  # as README "Install" says
    FIGURES.append(("VPA: metrics-server and VPA installed on the running node", time.monotonic() - began))
    yield
    stack.kubectl("delete", "verticalpodautoscalers", "--all", "--all-namespaces", "--ignore-not-found")
    uninstall_vpa(stack)
    # The other modules' sidecars run without the metrics API (nothing calibrated, no steady state sized).
    stack.kubectl("delete", "--ignore-not-found", "--wait=true", "-f", str(METRICS_SERVER_MANIFEST))


@pytest.fixture(scope="module")
def vpa_alone(config_sync_on_node: NodeConfigSync, vpa: None) -> Iterator[JSON]:
    """VPA alone: a RootSync's reconciler synced, then a VPA as a user writes it (VPA's default
    recommender); its running Pod as it was then. Made first, so that VPA's recommender loop (a minute)
    runs while the RootSync sized through our recommender does, beside ours the whole time."""
    cs = config_sync_on_node
    api = cs.api
    commit = cs.commit(ROOT, configmaps(10, namespace="vpa-apps"))
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(ROOT))
    try:
        wait_for(lambda: synced(rsync_of(api, ROOT), commit), timeout=180, what="the RootSync to sync")
        before = cast(
            JSON,
            wait_for(lambda: all_running(p := cast(JSON | None, cs.reconciler_pod(ROOT))) and p, timeout=60),
        )
        api.create(VPA, NAMESPACE, vertical_pod_autoscaler(ROOT))
        yield before
    finally:
        remove(api, ROOT)


def remove(api: kubeapi.KubeClient, key: RSyncKey) -> None:
    """The RootSync deleted (Config Sync's finalizers run: its reconciler goes), then its VPA."""
    with contextlib.suppress(kubeapi.NotFound):
        api.delete(kubeapi.ROOTSYNC, NAMESPACE, key.name)
    wait_for(lambda: rsync_gone(api, key), timeout=120, what=f"{key} deleted by Config Sync")
    with contextlib.suppress(kubeapi.NotFound):
        api.delete(VPA, NAMESPACE, reconciler_name(key))


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


# ----- objcount as VPA's recommender (target `vpa`) --------------------------------------------------------
RECOMMENDER = "objcount"
VPA_MANIFESTS = REPO_ROOT / "manifests" / "vpa"
DELAY_S = 15  # our scale-down delay in these tests
# Our sidecar's settings in these tests (one install for all): 0 MiB + 0.3 MiB x n, up to an 8 MiB step, at
# least 24 MiB, n the larger of the source and inventory counts (the inventory holds the objects and
# their namespace). By hand:
#   100 ConfigMaps: n = 101, 30.3 MiB -> 32 MiB (below what the reconciler uses: harmless as a request
#   without a limit, Config Sync's default on Standard; an OOM kill under a limit of 32Mi);
#   1,500: n = 1,501 (1,500 while only the source has them), 450.3 MiB -> 456 MiB;
#   after an OOM kill at 32 MiB: max(32 x 1.5, 32 + 128) = 160 MiB.
SETTINGS = {
    "base_mib": "0",
    "mib_per_object": "0.3",
    "min_mib": "24",
    "step_mib": "8",
    "cpu_min_m": "10",
    "scale_down_delay_seconds": str(DELAY_S),
    # The model alone: calibration (metrics-server runs here, for VPA) would raise these sizes to the
    # working set the reconciler shows, which is what it is for and not what these tests look at; the
    # side-by-side run calibrates through VPA (BENCHMARKS).
    "calibration_interval_seconds": "0",
}
SMALL_MIB, BIG_MIB, AFTER_OOM_MIB = 32, 456, 160


def ours(key: RSyncKey) -> JSON:
    """The user's VPA of a reconciler, as docs/targets.md tells them to write it: the one above, naming
    our recommender (VPA's default recommender then leaves it alone)."""
    body = vertical_pod_autoscaler(key)
    body["spec"]["recommenders"] = [{"name": RECOMMENDER}]
    return body


def sidecar_env(**settings: str) -> dict[str, str]:
    return {
        "OBJCOUNT_PRESET": "fitted",
        "OBJCOUNT_TARGET": "vpa",
        "OBJCOUNT_RESYNC_INTERVAL_SECONDS": "5",
        **{f"OBJCOUNT_{name.upper()}": value for name, value in settings.items()},
    }


def mib(value: object) -> int | None:
    return None if value is None else int(quantity.parse(value) / MiB)


@dataclass(frozen=True)
class Snapshot:
    """The RootSync, its reconciler Pod and its VPA, read one after the other at one moment."""

    at: float
    rsync: JSON
    pod: JSON | None
    vpa: JSON

    @property
    def target_mib(self) -> int | None:
        """The reconciler's memory target in the VPA's status (what VPA applies)."""
        entries = ((self.vpa.get("status") or {}).get("recommendation") or {}).get("containerRecommendations")
        entry = next((e for e in entries or [] if e["containerName"] == RECONCILER), {})
        return mib((entry.get("target") or {}).get("memory"))

    @property
    def applied_mib(self) -> int | None:
        """The reconciler's memory request as the kubelet reports the running container has it."""
        if self.pod is None:
            return None
        status = (status_of(self.pod, RECONCILER).get("resources") or {}).get("requests") or {}
        return mib(status.get("memory"))

    @property
    def container(self) -> tuple[str, str, int]:
        """The Pod's uid, the reconciler's container id and restart count."""
        assert self.pod is not None
        status = status_of(self.pod, RECONCILER)
        return self.pod["metadata"]["uid"], status["containerID"], status["restartCount"]

    def synced(self, commit: str) -> bool:
        return finished(self.rsync, commit)

    def applying(self, commit: str) -> bool:
        """The reconciler has begun to apply the commit: Config Sync sets `status.sync.commit` when it
        starts syncing it (after it has read and parsed it)."""
        return ((self.rsync.get("status") or {}).get("sync") or {}).get("commit") == commit


OOM_FLOOR = "objcount.dev/oom-floor"


def seen_by_then(s: Snapshot, commit: str) -> str:
    """What a wait that timed out saw last: the target, what runs, the sync, the reconciler's states."""
    status = container_status(s.pod or {}, RECONCILER)
    return (
        f"target {s.target_mib} MiB, applied {s.applied_mib} MiB, synced {s.synced(commit)}, "
        f"floor {annotations_of(s.rsync).get(OOM_FLOOR)}, reconciler state {status.get('state')}, "
        f"last state {status.get('lastState')}, restarts {status.get('restartCount')}"
    )


def annotations_of(obj: JSON) -> dict[str, str]:
    return cast(dict[str, str], obj["metadata"].get("annotations") or {})


def snapshot(cs: NodeConfigSync, key: RSyncKey) -> Snapshot:
    api = cs.api
    pod = cast(JSON | None, cs.reconciler_pod(key))
    return Snapshot(time.monotonic(), rsync_of(api, key), pod, api.get(VPA, NAMESPACE, reconciler_name(key)))


def first(samples: list[Snapshot], wanted: Callable[[Snapshot], bool]) -> int:
    """The index of the first sample of which `wanted` holds."""
    found = next((i for i, s in enumerate(samples) if wanted(s)), None)
    assert found is not None, "never seen in the samples"
    return found


@dataclass
class Timeline:
    """One RootSync sized through its VPA from creation to a restart of our sidecar: what each named test
    below looks at (one run of the real stack, several behaviours)."""

    key: RSyncKey
    sized: Snapshot  # the first size applied, the first commit synced
    grow_commit: str
    grow: list[Snapshot]
    prune_commit: str
    prune: list[Snapshot]
    before_restart: Snapshot
    after_restart: Snapshot
    status: list[RSyncRecord]  # `objcount status` after the restart
    control: JSON  # the recommendation of VPA alone's VPA (the default recommender's), made meanwhile


@pytest.fixture(scope="module")
def ours_sidecar(
    config_sync_on_node: NodeConfigSync, vpa: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[None]:
    """Our sidecar installed as the README says, target `vpa`, the settings above."""
    cs = config_sync_on_node
    cs.install_sidecar(tmp_path_factory.mktemp("certs"), sidecar_env(**SETTINGS))
    yield
    uninstall_webhook(cs.api)


@pytest.fixture(scope="module")
def timeline(config_sync_on_node: NodeConfigSync, vpa_alone: JSON, ours_sidecar: None) -> Iterator[Timeline]:
    cs = config_sync_on_node
    api = cs.api
    key = RSyncKey("RootSync", NAMESPACE, f"vpa-ours-{suffix()}")
    apps = f"apps-{suffix()}"
    api.create(VPA, NAMESPACE, ours(key))
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=apps)})
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
    began = time.monotonic()
    try:
        sized = cast(
            Snapshot,
            wait_for(
                lambda: (s := snapshot(cs, key)).synced(commit) and s.applied_mib == SMALL_MIB and s,
                timeout=300,
                interval=0.5,
                what="the first commit synced and its size applied by VPA",
            ),
        )
        FIGURES.append(
            ("VPA + objcount: RootSync created to its size applied by VPA", time.monotonic() - began)
        )
        grow_commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(1500, namespace=apps)})
        grow = sampled(
            cs, key, lambda s: s.synced(grow_commit) and s.applied_mib == BIG_MIB, "the grow commit synced"
        )
        prune_commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=apps)})
        prune = sampled(
            cs,
            key,
            lambda s: s.synced(prune_commit) and s.target_mib == SMALL_MIB and s.applied_mib == SMALL_MIB,
            "the prune synced and the lower size applied after the delay",
        )
        before, after = restarted_sidecar(cs, key)
        control = wait_for(
            lambda: (api.get(VPA, NAMESPACE, reconciler_name(ROOT)).get("status") or {}).get(
                "recommendation"
            ),
            timeout=180,
            what="the default recommender's recommendation for VPA alone's RootSync",
        )
        yield Timeline(
            key, sized, grow_commit, grow, prune_commit, prune, before, after, read_status(api), control
        )
    finally:
        remove(api, key)


def sampled(cs: NodeConfigSync, key: RSyncKey, done: Callable[[Snapshot], bool], what: str) -> list[Snapshot]:
    """Snapshots every 0.25 s until `done` holds of one."""
    sampler = Sampler(lambda: snapshot(cs, key), interval=0.25, tolerate=(kubeapi.ApiError,))
    try:
        wait_for(lambda: any(done(s) for s in sampler.values[-3:]), timeout=300, what=what)
    finally:
        samples = sampler.stop()
    return samples


def restarted_sidecar(cs: NodeConfigSync, key: RSyncKey) -> tuple[Snapshot, Snapshot]:
    """Our sidecar SIGKILLed, restarted by the kubelet, until its first decision: before and after."""
    api = cs.api
    before = snapshot(cs, key)
    assert before.pod is not None
    os.kill(main_pid(cs.stack, status_of(before.pod, SIDECAR_CONTAINER)["containerID"]), signal.SIGKILL)

    def back() -> bool:
        status = status_of(cast(JSON, cs.reconciler_pod(key)), SIDECAR_CONTAINER)
        return status.get("restartCount") == 1 and "running" in status["state"]

    wait_for(back, timeout=120, what="our sidecar restarted by the kubelet")
    name = before.pod["metadata"]["name"]
    decided = 'objcount_decisions_total{outcome="unchanged"}'
    wait_for(lambda: metric(api, [name], decided) >= 1, timeout=120, what="the restarted sidecar's decision")
    return before, snapshot(cs, key)


def test_objcount_recommends_through_the_vpa_naming_it_and_vpa_applies_it_in_place(
    timeline: Timeline,
) -> None:
    sized = timeline.sized
    assert sized.target_mib == SMALL_MIB
    (entry,) = sized.vpa["status"]["recommendation"]["containerRecommendations"]
    assert entry["lowerBound"] == entry["upperBound"] == entry["target"] == {"memory": f"{SMALL_MIB}Mi"}
    conditions = {c["type"]: c for c in sized.vpa["status"]["conditions"]}
    assert conditions["RecommendationProvided"]["status"] == "True"
    assert sized.pod is not None
    assert sized.pod["metadata"]["annotations"].get("vpaInPlaceUpdated") == "true"
    # `objcount status` says which target and that VPA applied it.
    (record,) = [r for r in timeline.status if r.name == timeline.key.name]
    assert (record.target, record.vpa_applied) == ("vpa", "yes")


def test_a_grow_commit_is_applied_in_place_before_the_reconciler_has_synced_it(timeline: Timeline) -> None:
    grow, commit = timeline.grow, timeline.grow_commit
    recommended = first(grow, lambda s: s.target_mib == BIG_MIB)
    resized = first(grow, lambda s: s.applied_mib == BIG_MIB)
    applying = first(grow, lambda s: s.applying(commit))
    synced = first(grow, lambda s: s.synced(commit))
    OBSERVED.append(
        f"VPA + objcount, grow to 1,500 ConfigMaps (updater every {UPDATER_INTERVAL}), seconds after the "
        f"commit's first sample: recommended {grow[recommended].at - grow[0].at:.1f}, resized in place "
        f"{grow[resized].at - grow[0].at:.1f}, the reconciler began applying "
        f"{grow[applying].at - grow[0].at:.1f}, synced {grow[synced].at - grow[0].at:.1f}"
    )
    assert recommended <= resized < synced, "VPA applied the larger size only once the sync was over"
    assert not grow[resized].synced(commit)
    # In place: the same Pod and reconciler container, never restarted.
    assert {s.container for s in grow} == {timeline.sized.container}


def test_a_prune_does_not_lower_the_vpa_target_until_the_delay(timeline: Timeline) -> None:
    prune, commit = timeline.prune, timeline.prune_commit
    synced = first(prune, lambda s: s.synced(commit))
    lowered = first(prune, lambda s: s.target_mib == SMALL_MIB)
    assert all(s.target_mib == BIG_MIB for s in prune[: synced + 1]), "lowered during the prune"
    assert all(s.applied_mib == BIG_MIB for s in prune[: synced + 1])
    assert lowered > synced
    FIGURES.append(
        (
            f"VPA + objcount: prune synced to the target lowered (delay {DELAY_S} s)",
            prune[lowered].at - prune[synced].at,
        )
    )
    assert prune[-1].applied_mib == SMALL_MIB
    assert {s.container for s in prune} == {timeline.sized.container}, "lowered in place"


def test_a_restart_of_our_service_loses_nothing(timeline: Timeline) -> None:
    before, after = timeline.before_restart, timeline.after_restart
    # Nothing written again: the VPA, its recommendation, the RSync's annotations are as they were.
    assert after.vpa["metadata"]["resourceVersion"] == before.vpa["metadata"]["resourceVersion"]
    assert after.target_mib == before.target_mib == SMALL_MIB

    def ours_annotations(snap: Snapshot) -> dict[str, str]:
        annotations = snap.rsync["metadata"].get("annotations") or {}
        return {k: v for k, v in annotations.items() if k.startswith("objcount.dev/")}

    assert ours_annotations(after) == ours_annotations(before)
    assert ours_annotations(after)["objcount.dev/target"] == "vpa"
    assert after.container == before.container


def test_vpas_default_recommender_never_touches_our_vpa(timeline: Timeline) -> None:
    # It ran beside ours the whole time: it recommended for VPA alone's RootSync meanwhile.
    assert timeline.control["containerRecommendations"]
    # Every version of our VPA seen had only our recommendation (the requests we asked for), and its
    # status was only ever written by us.
    for snap in [timeline.sized, *timeline.grow, *timeline.prune, timeline.after_restart]:
        (entry,) = snap.vpa["status"]["recommendation"]["containerRecommendations"]
        assert set(entry) == {"containerName", "target", "lowerBound", "upperBound", "uncappedTarget"}
        assert entry["target"] == entry["lowerBound"] == entry["upperBound"]
        reasons = {c.get("reason") for c in snap.vpa["status"]["conditions"]}
        assert reasons == {"ObjectCount"}
        writers = {
            m["manager"] for m in snap.vpa["metadata"]["managedFields"] if m.get("subresource") == "status"
        }
        assert writers == {OUR_FIELD_MANAGER}


def test_the_vpa_resizes_the_running_reconciler_in_place_to_its_recommendation(
    config_sync_on_node: NodeConfigSync, vpa_alone: JSON, timeline: Timeline
) -> None:
    """(After the tests of the timeline, which ran while VPA's recommender looped for this one.)"""
    cs = config_sync_on_node
    api = cs.api
    before = vpa_alone
    uid, name = before["metadata"]["uid"], before["metadata"]["name"]
    initial = status_of(before, RECONCILER)
    requested = numbers(container(before, RECONCILER)["resources"])

    def recommendation() -> JSON | None:
        status = api.get(VPA, NAMESPACE, reconciler_name(ROOT)).get("status") or {}
        entries = (status.get("recommendation") or {}).get("containerRecommendations") or []
        return next((e for e in entries if e["containerName"] == RECONCILER), None)

    # The recommender's loop runs every minute; it recommends once metrics-server has the Pod's usage.
    recommended: JSON = cast(
        JSON, wait_for(recommendation, timeout=180, interval=1, what="a recommendation for the reconciler")
    )
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


def test_an_oom_kill_of_the_reconciler_raises_its_vpa_target(
    config_sync_on_node: NodeConfigSync, rsyncs: list[RSyncKey], ours_sidecar: None
) -> None:
    """Our settings size 100 ConfigMaps at 32 MiB, less than the reconciler uses, and the user's size has
    its limit at its request (300Mi): VPA keeps that ratio, so a new Pod VPA's admission-controller sizes
    gets 32Mi of limit, where the kernel kills the reconciler. Our sidecar reads the kill and raises the
    target to 160 MiB (by hand, above), and VPA's updater applies it."""
    cs = config_sync_on_node
    api = cs.api
    key = RSyncKey("RootSync", NAMESPACE, f"vpa-oom-{suffix()}")
    commit = cs.commit(key, {"configmaps.yaml": configmaps_yaml(100, namespace=f"apps-{suffix()}")})
    body = cs.rsync(key)
    users = {"containerName": RECONCILER, "memoryRequest": "300Mi", "memoryLimit": "300Mi"}
    body["spec"]["override"] = {"resources": [users]}
    api.create(VPA, NAMESPACE, ours(key))

    def killed_under_32mi(pod: JSON) -> bool:
        last = (container_status(pod, RECONCILER).get("lastState") or {}).get("terminated") or {}
        limits = container(pod, RECONCILER)["resources"].get("limits") or {}
        return last.get("reason") == "OOMKilled" and mib(limits.get("memory")) == SMALL_MIB

    with PodHistory(api, key) as history:
        api.create(kubeapi.ROOTSYNC, NAMESPACE, body)
        rsyncs.append(key)
        wait_for(lambda: snapshot(cs, key).target_mib == SMALL_MIB, timeout=300, what="our target of 32 MiB")
        # The running Pod keeps the 300Mi the kubelet will not lower below its usage (VPA's updater may
        # already have asked for 32Mi in its spec: what the kubelet reports running decides); the next Pod
        # (as after a node drain or a rollout) is given the target by VPA's admission-controller.
        pod = cast(JSON, cs.reconciler_pod(key))
        running = (container_status(pod, RECONCILER).get("resources") or {}).get("limits") or {}
        if mib(running.get("memory")) != SMALL_MIB:
            api.delete(kubeapi.POD, NAMESPACE, pod["metadata"]["name"])
        wait_for(
            lambda: history.find(killed_under_32mi),
            timeout=300,
            what="the reconciler OOM-killed under the 32Mi VPA gave it",
            explain=lambda: history.states(RECONCILER),
        )
    # The target (on the VPA) and the floor (on the RootSync) are two writes, and a snapshot reads the
    # RootSync first: one snapshot can hold the new target beside the RootSync read before its floor.
    raised = wait_for(
        lambda: (
            (s := snapshot(cs, key)).target_mib == AFTER_OOM_MIB
            and OOM_FLOOR in annotations_of(s.rsync)
            and s
        ),
        timeout=120,
        what="our target raised after the kill, and its floor recorded",
    )
    floor = json.loads(annotations_of(cast(Snapshot, raised).rsync)[OOM_FLOOR])
    assert floor["memory"] == f"{AFTER_OOM_MIB}Mi"
    synced_after = wait_for(
        lambda: (s := snapshot(cs, key)).synced(commit) and s.applied_mib == AFTER_OOM_MIB and s,
        timeout=300,
        what="the reconciler at 160Mi, VPA's, and the commit synced",
        explain=lambda: seen_by_then(snapshot(cs, key), commit),
    )
    pod = cast(Snapshot, synced_after).pod
    assert pod is not None
    limit = container(pod, RECONCILER)["resources"]["limits"]["memory"]
    assert mib(limit) == AFTER_OOM_MIB, "VPA kept the limit's ratio to the request"
