"""The cache of the reconciler Pods (autoscaler.kube.pod_cache), driven by a scripted stand-in for the
API (tests/unit/test_reflector.py's): what it keeps of a Pod, which changes reconcile which RSync, and
what a reconcile then reads without a list; and the size a Pod counts as while its resize is in flight."""

from __future__ import annotations

import copy
from typing import Any, cast

import orjson

from autoscaler.core.oom import oom_kill_of
from autoscaler.core.pods import others_requests, pod_resources, resize_deferred, resizes_waiting
from autoscaler.core.resources import Resources
from autoscaler.kube.pod_cache import ReconcilerPods, newer, trimmed
from autoscaler.kube.port import KubePort
from autoscaler.kube.targets import TARGETS, TargetOptions
from inventory.core.ids import RSyncKey, reconciler_pods
from inventory.core.objects import Pod, PodView
from inventory.core.tally import Untallied
from inventory.kube.watch import RawObject
from tests.fake_api import FakeApi
from tests.unit.test_reflector import Waits, line, scripted

NAMESPACE = "config-management-system"
RUNNING = {"requests": {"cpu": "50m", "memory": "200Mi"}, "limits": {"memory": "400Mi"}}
BIGGER = {"requests": {"cpu": "50m", "memory": "300Mi"}, "limits": {"memory": "600Mi"}}


def pod(name: str, deployment: str, node: str, rv: str, *, asks: dict[str, Any] = RUNNING) -> dict[str, Any]:
    """A reconciler Pod as the API server sends it: managedFields, env, volumes and all."""
    return {
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "resourceVersion": rv,
            "creationTimestamp": "2026-11-29T10:00:00Z",
            "labels": {"app": "reconciler", "configsync.gke.io/deployment-name": deployment},
            "managedFields": [{"manager": "kube-controller-manager", "fieldsV1": {"f:spec": {}}}],
        },
        "spec": {
            "nodeName": node,
            "volumes": [{"name": "repo", "emptyDir": {}}],
            "containers": [
                {
                    "name": "reconciler",
                    "image": "reconciler:v1.25.0",
                    "env": [{"name": "REPO_ROOT", "value": "/repo"}] * 30,
                    "args": ["--v=0"],
                    "resources": copy.deepcopy(asks),
                },
                {"name": "git-sync", "env": [], "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}},
            ],
        },
        "status": {
            "containerStatuses": [
                {
                    "name": "reconciler",
                    "resources": copy.deepcopy(RUNNING),
                    "allocatedResources": copy.deepcopy(RUNNING["requests"]),
                    "state": {"running": {"startedAt": "2026-11-29T10:00:05Z"}},
                    "lastState": {
                        "terminated": {"reason": "OOMKilled", "finishedAt": "2026-11-29T10:00:04Z"}
                    },
                    "restartCount": 1,
                }
            ],
            "conditions": [],
        },
    }


def deferred(body: dict[str, Any], rv: str) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"]["resourceVersion"] = rv
    body["status"]["conditions"] = [
        {"type": "PodResizePending", "status": "True", "reason": "Deferred", "message": "no room"}
    ]
    return body


def changed(body: dict[str, Any], rv: str, **spec_or_status: Any) -> dict[str, Any]:
    body = copy.deepcopy(body)
    body["metadata"]["resourceVersion"] = rv
    if "asks" in spec_or_status:
        body["spec"]["containers"][0]["resources"] = copy.deepcopy(spec_or_status["asks"])
    if "runs" in spec_or_status:
        body["status"]["containerStatuses"][0]["resources"] = copy.deepcopy(spec_or_status["runs"])
    return body


def cache_after(
    listed: list[dict[str, Any]], events: list[bytes], deployment: str | None = None
) -> tuple[ReconcilerPods, list[tuple[str, str | None]]]:
    """A cache that listed `listed`, then saw `events` on its watch (run on this thread until the script
    ends), and what it told the controller."""
    told: list[tuple[str, str | None]] = []
    stop = Waits()  # the end of the script stops it; a backoff records its wait instead of sleeping
    api = scripted([listed], [(events, None)], stop)
    cache = ReconcilerPods(
        api, lambda name, node: told.append((name, node)), deployment=deployment, tally=Untallied()
    )
    cache.reflector.stopping = stop
    cache.reflector.run()
    return cache, told


ROOT = pod("root-reconciler-a", "root-reconciler", "node-1", "10")
TENANT = pod("ns-reconciler-t-b", "ns-reconciler-t", "node-1", "11")
FAR = pod("ns-reconciler-u-c", "ns-reconciler-u", "node-2", "12")


def test_the_kubelets_changes_reconcile_a_pods_rsync_and_a_wait_for_room_its_nodes_neighbours() -> None:
    """Listed: each Pod's RSync once. Our resize, until the kubelet answers it: nothing. The kubelet
    applied it: its RSync. It defers the next one: its RSync, and the node it waits on (the controller
    reconciles every RSync with a Pod there). A later change while it still waits: its RSync only. A Pod
    deleted: its RSync, by the Deployment last seen."""
    resized = changed(ROOT, "20", asks=BIGGER)
    applied = changed(resized, "21", runs=BIGGER)
    waits = deferred(changed(applied, "22", asks=RUNNING), "22")
    still = copy.deepcopy(waits)
    still["metadata"]["resourceVersion"] = "23"
    still["status"]["conditions"][0]["message"] = "still no room"
    events = [
        line("MODIFIED", resized),
        line("MODIFIED", applied),
        line("MODIFIED", waits),
        line("MODIFIED", still),
        line("DELETED", TENANT),
    ]
    cache, told = cache_after([ROOT, TENANT, FAR], events)
    assert told == [
        ("root-reconciler", None),
        ("ns-reconciler-t", None),
        ("ns-reconciler-u", None),
        ("root-reconciler", None),
        ("root-reconciler", "node-1"),
        ("root-reconciler", None),
        ("ns-reconciler-t", None),
    ]
    assert cache.on_node("node-1") == ["root-reconciler"]
    assert cache.on_node("node-2") == ["ns-reconciler-u"]
    assert [PodView.of(p).meta.name for p in cache.every() or []] == [
        "root-reconciler-a",
        "ns-reconciler-u-c",
    ]


def test_a_pod_is_kept_trimmed_and_read_as_the_whole_pod_is() -> None:
    """No env, volumes or managedFields kept; the reconciler's size, the other containers' requests, the
    OOM kill, the node, the deferral and the metadata read the same from the trimmed Pod."""
    whole = deferred(ROOT, "30")
    kept = trimmed(whole).body
    text = orjson.dumps(kept).decode()
    for dropped in ("REPO_ROOT", "managedFields", "emptyDir"):
        assert dropped not in text
    for read in (pod_resources, resize_deferred, oom_kill_of):
        assert read(cast(Pod, kept)) == read(cast(Pod, whole))
    assert oom_kill_of(cast(Pod, kept)) is not None
    assert resize_deferred(kept) is not None
    assert others_requests(PodView.of(kept).containers, "p") == (10, 16)
    assert others_requests(PodView.of(whole).containers, "p") == (10, 16)
    for view in (PodView.of(kept), PodView.of(whole)):
        meta = view.meta
        assert (view.node, meta.name, meta.namespace, meta.created, meta.deleting) == (
            "node-1",
            "root-reconciler-a",
            NAMESPACE,
            "2026-11-29T10:00:00Z",
            False,
        )
    assert whole["metadata"]["managedFields"], "the Pod it was given is left as it was"


def test_our_own_write_is_read_before_its_watch_event_and_an_older_event_does_not_replace_it() -> None:
    cache, _ = cache_after([ROOT], [])
    resized = changed(ROOT, "40", asks=BIGGER)
    cache.wrote(cast(Pod, resized))
    (mine,) = cache.of("root-reconciler") or []
    assert cast(dict[str, Any], mine)["spec"]["containers"][0]["resources"] == BIGGER
    older = RawObject(NAMESPACE, "root-reconciler-a", "39", {})
    assert newer(trimmed(resized), older).resource_version == "40"
    assert newer(older, trimmed(resized)).resource_version == "40"
    gone, _ = cache_after([], [])
    gone.wrote(cast(Pod, resized))
    assert gone.every() == [], "a Pod the cache does not hold (deleted since) is not brought back"


def test_until_the_cache_has_listed_a_reconcile_lists_and_then_it_reads_the_cache() -> None:
    """The port reads the cache once it synced (no list of its own, the room too), and lists before."""
    cache, _ = cache_after([ROOT, deferred(TENANT, "50")], [])
    api = cache.reflector.api
    assert isinstance(api, FakeApi)
    key = RSyncKey("RootSync", NAMESPACE, "root-sync")
    target = TARGETS["in-place"].build(cache.reflector.api, TargetOptions())
    port = KubePort(cache.reflector.api, target, pods=cache)
    calls = list(api.log)
    assert port._reconciler_pods(key) == cache.of("root-reconciler")
    assert port._room(0.0) == (
        (("node-1", "ns-reconciler-t-b", "requests 50m/200Mi, limits none/400Mi"),),
        None,
    )
    assert api.log == calls, "no list of its own"
    assert target.on_resized == cache.wrote  # type: ignore[attr-defined]
    unsynced = ReconcilerPods(cache.reflector.api, lambda name, node: None, tally=Untallied())
    assert unsynced.of("root-reconciler") is None
    assert unsynced.every() is None
    api.lists.append([ROOT])
    listed = KubePort(cache.reflector.api, target, pods=unsynced)._reconciler_pods(key)
    assert [PodView.of(p).meta.name for p in listed] == ["root-reconciler-a"]
    assert api.log[-1] == f"list pods {reconciler_pods(key)}"


def test_a_resize_in_flight_counts_as_the_size_asked_and_one_the_kubelet_holds_back_as_the_size_run() -> None:
    """Asked and not answered yet, or accepted and being applied: what it asks. Deferred, infeasible or
    refused: what runs. Nothing reported running (a kubelet that does not resize): what it asks, as before."""
    asked = Resources(50, 300, None, 600)
    runs = Resources(50, 200, None, 400)
    in_flight = changed(ROOT, "60", asks=BIGGER)
    assert pod_resources(in_flight) == asked
    accepted = copy.deepcopy(in_flight)
    accepted["status"]["conditions"] = [{"type": "PodResizeInProgress", "status": "True"}]
    assert pod_resources(accepted) == asked
    assert pod_resources(deferred(in_flight, "61")) == runs
    for condition in (
        {"type": "PodResizePending", "status": "True", "reason": "Infeasible"},
        {"type": "PodResizeInProgress", "status": "True", "reason": "Error", "message": "limit below usage"},
    ):
        held = copy.deepcopy(in_flight)
        held["status"]["conditions"] = [condition]
        assert pod_resources(held) == runs
    no_resize = copy.deepcopy(in_flight)
    del no_resize["status"]["containerStatuses"][0]["allocatedResources"]
    del no_resize["status"]["containerStatuses"][0]["resources"]
    assert pod_resources(no_resize) == asked
    assert pod_resources(ROOT) == runs


def test_a_resize_condition_of_an_older_generation_is_not_the_kubelets_answer_to_the_newest_resize() -> None:
    """Read right after our resize, the Pod still carries the `Deferred` the kubelet wrote of the size
    before (its observedGeneration one behind): the new size is in flight, not deferred, and no neighbour
    is told this Pod waits for room. Once the kubelet writes a condition of this generation, it is its
    answer."""
    before = deferred(ROOT, "61")
    before["metadata"]["generation"] = 3
    before["status"]["conditions"][0]["observedGeneration"] = 3
    assert resize_deferred(before) is not None
    resized = changed(before, "62", asks=BIGGER)
    resized["metadata"]["generation"] = 4
    assert resize_deferred(resized) is None
    assert pod_resources(resized) == Resources(50, 300, None, 600), "the size asked, in flight"
    answered = copy.deepcopy(resized)
    answered["status"]["conditions"][0]["observedGeneration"] = 4
    asked = resize_deferred(answered)
    assert asked is not None
    assert asked[0] == Resources(50, 300, None, 600)
    assert pod_resources(answered) == Resources(50, 200, None, 400), "deferred: the size run"


def test_the_kubelet_looking_again_at_a_deferred_resize_is_not_news() -> None:
    """On a full node the kubelet looks at every deferred resize again whenever a resize elsewhere ends,
    writing the condition's probe time each time: that alone reconciles nothing; a new message does."""
    waits = deferred(ROOT, "70")
    waits["status"]["conditions"][0]["lastProbeTime"] = "2026-11-29T21:00:00Z"
    again = copy.deepcopy(waits)
    again["metadata"]["resourceVersion"] = "71"
    again["status"]["conditions"][0]["lastProbeTime"] = "2026-11-29T21:00:05Z"
    news = copy.deepcopy(again)
    news["metadata"]["resourceVersion"] = "72"
    news["status"]["conditions"][0]["message"] = "still no room"
    _, told = cache_after([waits], [line("MODIFIED", again), line("MODIFIED", news)])
    assert told == [("root-reconciler", "node-1"), ("root-reconciler", None)]


def test_a_resize_deferred_for_cpu_alone_asks_no_neighbour_for_memory() -> None:
    """The kubelet says what the node lacks: for CPU alone, a neighbour giving back memory would not help,
    so no neighbour is woken or told that room is wanted; for memory (or a reason it does not say), both."""
    short = {
        "cpu": "Node didn't have enough resource: cpu, requested: 73, used: 1948, capacity: 2000",
        "memory": "Node didn't have enough resource: memory, requested: 557842432, used: 24747442176, "
        "capacity: 25171644416",
        "unsaid": "no room",
    }
    for lacking, message in short.items():
        waits = deferred(TENANT, "80")
        waits["status"]["conditions"][0]["message"] = message
        expected = [] if lacking == "cpu" else [("node-1", "ns-reconciler-t-b")]
        assert [(node, name) for node, name, _ in resizes_waiting([waits])] == expected, lacking
        _, told = cache_after([ROOT, TENANT], [line("MODIFIED", waits)])
        assert told[-1] == ("ns-reconciler-t", None if lacking == "cpu" else "node-1"), lacking
