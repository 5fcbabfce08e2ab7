"""Read once, write once: the real port (autoscaler.kube.port) on an in-memory API that counts its calls.
Each reconcile lists the reconciler's Pod once and parses the RSync once, whatever the target and whether
the platform needs the other containers' requests; the in-place target resizes the Pod it listed."""

from __future__ import annotations

from collections import Counter
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY

from autoscaler.core import observation
from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    CALIBRATION_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    RECOMMENDED_ANNOTATION,
)
from autoscaler.core.observation import Needs, Reading, RSyncView
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig
from autoscaler.core.pods import resizes_waiting, room_wanted
from autoscaler.core.reasons import WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.sizing import AUTOPILOT, PROTOTYPE, STANDARD, Platform, Profile
from autoscaler.kube.events import Occurrence
from autoscaler.kube.port import KubePort, Periodic
from autoscaler.kube.targets import TARGETS, InPlaceTarget, RecommendTarget, TargetOptions
from autoscaler.service.controller import Executor
from inventory.core.counts import ObjectCounts
from inventory.core.ids import DEPLOYMENT_NAME_LABEL, RSyncKey, reconciler_pods
from inventory.core.objects import Pod, RSync
from inventory.kube import kubeapi
from tests.fake_api import FakeApi

KEY = RSyncKey("RootSync", "config-management-system", "root-sync")
NAMESPACE = "config-management-system"


def container(name: str, cpu: str, memory: str) -> dict[str, Any]:
    return {"name": name, "resources": {"requests": {"cpu": cpu, "memory": memory}}}


CONTAINERS = [container("reconciler", "50m", "200Mi"), container("git-sync", "10m", "16Mi")]
POD = {
    "metadata": {
        "name": "root-reconciler-abc",
        "namespace": NAMESPACE,
        "creationTimestamp": "2026-11-26T00:00:00Z",
        "labels": {"app": "reconciler", DEPLOYMENT_NAME_LABEL: "root-reconciler"},
    },
    "spec": {"containers": CONTAINERS},
    "status": {"containerStatuses": [{"name": "reconciler", "resources": CONTAINERS[0]["resources"]}]},
}
RSYNC: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "generation": 1}}
# A user's VPA of the reconciler, naming our recommender (the `vpa` target's).
VPA = {
    "metadata": {"name": "root-reconciler", "namespace": NAMESPACE},
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "root-reconciler"},
        "recommenders": [{"name": "objcount"}],
    },
}
DEPLOYMENT = {
    "metadata": {"name": "root-reconciler", "namespace": NAMESPACE},
    "spec": {"template": {"spec": {"containers": CONTAINERS}}},
}
ONE_POD = f"list pods {reconciler_pods(KEY)}"  # the calls of the fake API a test counts
EVERY_POD = f"list pods {reconciler_pods()}"


def cluster(pods: list[dict[str, Any]] | None = None, vpa: dict[str, Any] = VPA) -> FakeApi:
    """The API a port talks to: one reconciler Pod (or `pods`), its Deployment, its VPA, the RSync."""
    return FakeApi.holding(
        *[(kubeapi.POD, pod) for pod in ([POD] if pods is None else pods)],
        (kubeapi.DEPLOYMENT, DEPLOYMENT),
        (kubeapi.VPA, vpa),
        (kubeapi.RSYNC_RESOURCES[KEY.kind], RSYNC),
    )


@pytest.mark.parametrize(
    "platform", [STANDARD, AUTOPILOT], ids=["standard", "autopilot (other containers read)"]
)
@pytest.mark.parametrize("target_name", list(TARGETS))
def test_each_reconcile_lists_the_pod_once_and_parses_the_rsync_once(
    target_name: str, platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    api = cluster()
    target = TARGETS[target_name].build(api, TargetOptions(NAMESPACE))
    port = KubePort(api, target, NAMESPACE, clock=lambda: 1000.0)
    config = DecideConfig(
        Profile(PROTOTYPE, platform),
        Hysteresis(600, 100),
        measure_others=True,
        reread_current=target.rereads_current,
    )
    executor = Executor(port, config, lambda: 1000.0, lambda key, delay: None)
    parses: Counter[str] = Counter()
    original = RSyncView.of.__func__  # type: ignore[attr-defined]

    def counted(cls: type[RSyncView], rsync: RSync) -> RSyncView:
        parses["view"] += 1
        return cast(RSyncView, original(cls, rsync))

    monkeypatch.setattr(RSyncView, "of", classmethod(counted))
    read_status = observation.sync_progress
    monkeypatch.setattr(
        observation, "sync_progress", lambda rsync: parses.update(["status"]) or read_status(rsync)
    )

    node_lists = waiting_lists = 0
    for counts in (ObjectCounts(5000, 5000), ObjectCounts(5000, 5000), ObjectCounts(100, 100)):
        node_lists += api.calls["list nodes"]
        waiting_lists += api.calls[EVERY_POD]
        api.log.clear()
        parses.clear()
        outcome = executor.reconcile(KEY, RSYNC, counts)
        assert outcome in (Outcome.SCALED_UP, Outcome.UNCHANGED, Outcome.POSTPONED), outcome
        assert api.calls[ONE_POD] == 1, api.calls
        assert parses == {"view": 1, "status": 1}, "the RSync is parsed once, its status once"
        assert api.calls["discovery"] <= 1
        assert api.calls["pods/resize in discovery"] <= 1  # once per target, not per reconcile
        if target_name == "vpa":
            assert api.calls["list verticalpodautoscalers"] == 1, "read and written from one list"
    if target.in_place:
        assert api.calls["get deployments"] == 0, "the in-place target reads the size from the Pod listed"
    node_lists += api.calls["list nodes"]
    assert node_lists == (0 if platform.has_pod_rules else 1), "the Nodes once per interval, not on Autopilot"
    waiting_lists += api.calls[EVERY_POD]
    # In place, the Pods waiting for room: one list for every RSync per interval, none for other targets.
    assert waiting_lists == (1 if target.in_place else 0)


@pytest.mark.parametrize(
    ("pods", "going"),
    [
        ([{**POD, "metadata": {**POD["metadata"], "deletionTimestamp": "2026-11-26T00:01:00Z"}}], True),
        ([], False),  # no Pod at all (an API server without nodes): nothing says a rollout is under way
        ([POD], False),
    ],
    ids=["every pod deleting", "no pod", "a live pod"],
)
def test_a_reading_says_when_every_reconciler_pod_is_being_deleted(
    pods: list[dict[str, Any]], going: bool
) -> None:
    api = cluster(pods)
    port = KubePort(api, TARGETS["in-place"].build(api, TargetOptions(NAMESPACE)), NAMESPACE)
    reading = port.read(KEY, RSyncView.of(RSYNC), Needs(others=True))
    assert (reading.pods_going, reading.pod is None) == (going, not pods or going)


def test_a_read_that_keeps_failing_is_told_once_and_tried_again_each_interval() -> None:
    calls: list[float] = []
    answers: list[int | Exception] = [kubeapi.Forbidden("nodes is forbidden", status=403)] * 2 + [7]

    def read() -> int:
        calls.append(1)
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    periodic = Periodic(read, 600.0)
    value, error = periodic.get(0.0)
    assert (value, str(error)) == (None, "nodes is forbidden")
    assert periodic.get(599.0) == (None, None), "not read again within the interval"
    assert periodic.get(600.0) == (None, None), "read again, failed the same way: not news"
    assert periodic.get(1200.0) == (7, None)
    assert len(calls) == 3


def test_the_in_place_target_resizes_the_pod_it_listed() -> None:
    api = cluster()
    target = TARGETS["in-place"].build(api, TargetOptions(NAMESPACE))
    port = KubePort(api, target, NAMESPACE)
    config = DecideConfig(Profile(PROTOTYPE, STANDARD), Hysteresis(600, 100), reread_current=True)
    executor = Executor(port, config, lambda: 1000.0, lambda key, delay: None)
    assert executor.reconcile(KEY, RSYNC, ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert api.calls[ONE_POD] == 1
    assert api.calls["patch pods/resize"] == 1
    assert executor.states[KEY].decision is not None
    assert executor.states[KEY].decision.resources == Resources(1125, 1152, 1125, 1152)


def test_a_size_the_vpas_policy_caps_is_written_capped_and_said_so() -> None:
    capped = {
        **VPA,
        "spec": {
            **VPA["spec"],
            "resourcePolicy": {
                "containerPolicies": [{"containerName": "reconciler", "maxAllowed": {"memory": "100Mi"}}]
            },
        },
    }
    api = cluster(vpa=capped)
    target = TARGETS["vpa"].build(api, TargetOptions(NAMESPACE))
    events: list[Occurrence] = []
    executor = Executor(
        KubePort(api, target, NAMESPACE),
        DecideConfig(Profile(PROTOTYPE, STANDARD), Hysteresis(600, 100), target="vpa"),
        lambda: 1000.0,
        lambda key, delay: None,
        events=events.append,
    )
    before = REGISTRY.get_sample_value("objcount_capped_total", {"target": "vpa"}) or 0.0
    # The prototype preset: 128 MiB + 0.2 MiB x 5,000 objects, far above the VPA's 100Mi.
    rsync: RSync = {"metadata": {**RSYNC["metadata"], "uid": "u-1"}}  # an Event needs the uid
    assert executor.reconcile(KEY, rsync, ObjectCounts(5000, 5000)) == Outcome.SCALED_UP
    assert api.calls["patch verticalpodautoscalers/status"] == 1
    (occurrence,) = [e for e in events if e.reason == "Capped"]
    assert occurrence.type == "Warning"
    assert (
        f"VerticalPodAutoscaler {NAMESPACE}/root-reconciler: memory lowered to maxAllowed" in occurrence.note
    )
    assert REGISTRY.get_sample_value("objcount_capped_total", {"target": "vpa"}) == before + 1


def test_a_size_that_cannot_be_written_leaves_what_was_learned_on_the_rsync() -> None:
    """The OOM floor and the calibration are published before the size, so a restart of ours after a
    failed write still knows them; what describes the size (recommended, applied) waits for the size."""
    api = cluster()
    # The in-place target on an API server that answers its every call 503 (the port's own calls pass).
    down = FakeApi(failure=kubeapi.Transient("injected: the API server answered 503", status=503))
    port = KubePort(api, InPlaceTarget(down, fallback=RecommendTarget(down)), NAMESPACE)
    publish = {
        OOM_FLOOR_ANNOTATION: '{"memory": "512Mi"}',
        CALIBRATION_ANNOTATION: '{"factor": "1.2"}',
        RECOMMENDED_ANNOTATION: '{"requests": {"memory": "512Mi"}}',
        APPLIED_ANNOTATION: '{"requests": {"memory": "512Mi"}}',
    }
    with pytest.raises(WriteError):
        port.write(
            KEY,
            Reading(pod=cast(Pod, reconciler_pod("root-reconciler-x", "node-a", deferred=False))),
            Resources(100, 512),
            publish,
        )
    assert api.log.count("patch rootsyncs") == 1
    assert api.stored(kubeapi.ROOTSYNC, KEY.namespace, KEY.name)["metadata"]["annotations"] == {
        OOM_FLOOR_ANNOTATION: '{"memory": "512Mi"}',
        CALIBRATION_ANNOTATION: '{"factor": "1.2"}',
    }


def reconciler_pod(name: str, node: str | None, *, deferred: bool, deleting: bool = False) -> dict[str, Any]:
    """A reconciler Pod on `node` (None: not scheduled) whose resize to 200Mi the kubelet defers, or not."""
    metadata: dict[str, Any] = {"name": name, "namespace": NAMESPACE}
    if deleting:
        metadata["deletionTimestamp"] = "2026-11-29T14:00:00Z"
    pending = {"type": "PodResizePending", "status": "True", "reason": "Deferred", "message": "no room"}
    return {
        "metadata": metadata,
        "spec": {"containers": CONTAINERS, **({"nodeName": node} if node else {})},
        "status": {"conditions": [pending] if deferred else []},
    }


def test_a_reconciler_learns_which_other_reconciler_on_its_node_waits_for_room() -> None:
    """Waiting: a deferred resize of a live, scheduled Pod. This reconciler's own Pod, other nodes' Pods,
    Pods being deleted and Pods on no node yet take no room from it."""
    own = reconciler_pod("root-reconciler-a", "node-1", deferred=False)
    pods = [
        own,
        reconciler_pod("ns-reconciler-far", "node-2", deferred=True),
        reconciler_pod("ns-reconciler-going", "node-1", deferred=True, deleting=True),
        reconciler_pod("ns-reconciler-unscheduled", None, deferred=True),
        reconciler_pod("ns-reconciler-idle", "node-1", deferred=False),
    ]
    waiting = resizes_waiting(pods)
    assert [(node, name) for node, name, _ in waiting] == [("node-2", "ns-reconciler-far")]
    assert room_wanted(own, waiting) is None
    pods.append(reconciler_pod("ns-reconciler-near", "node-1", deferred=True))
    waiting = resizes_waiting(pods)
    said = room_wanted(own, waiting)
    assert (
        said
        == "Pod ns-reconciler-near waits for room on node node-1 (asks requests 50m/200Mi, limits none/none)"
    )
    near = reconciler_pod("ns-reconciler-near", "node-1", deferred=True)
    assert room_wanted(near, waiting) is None, "its own wait is not a neighbour's"
    assert room_wanted(None, waiting) is None
    assert room_wanted(reconciler_pod("root-reconciler-b", None, deferred=False), waiting) is None


def test_a_sidecar_knows_when_its_own_pod_is_being_deleted_and_no_other_pod_is_taken_for_it() -> None:
    """Its Pod being deleted, a replacement created meanwhile: going. Another Pod of its reconciler being
    deleted, its own live: not going. Its name unknown (cluster mode): never."""
    mine = {**POD, "metadata": {**POD["metadata"], "deletionTimestamp": "2026-11-29T21:00:00Z"}}
    replacement = {**POD, "metadata": {**POD["metadata"], "name": "root-reconciler-def"}}
    for pods, own_pod, going in (
        ([mine, replacement], "root-reconciler-abc", True),
        ([mine, replacement], "root-reconciler-def", False),
        ([mine, replacement], None, False),
        ([replacement], "root-reconciler-def", False),
    ):
        api = cluster(pods)
        port = KubePort(
            api, TARGETS["in-place"].build(api, TargetOptions(NAMESPACE)), NAMESPACE, own_pod=own_pod
        )
        reading = port.read(KEY, RSyncView.of(RSYNC), Needs(current=True))
        assert reading.own_pod_going == going, (own_pod, [p["metadata"]["name"] for p in pods])
        assert reading.pod is not None
        assert reading.pod["metadata"]["name"] == "root-reconciler-def", "the live Pod is the one read"
