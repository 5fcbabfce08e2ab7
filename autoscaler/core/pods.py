"""The reconciler Pod as the kubelet reports it: the size it runs with or is being resized to, the state
of a resize in place (in flight, deferred, infeasible, refused), and which Pods on its node wait for room.
Pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TypeVar

from autoscaler.core.reasons import ReadError
from autoscaler.core.resources import Resources
from autoscaler.core.size_fields import container_resources, readable
from inventory.core.ids import RECONCILER_CONTAINER
from inventory.core.objects import Meta, PodView

P = TypeVar("P", bound=Mapping[str, object])


def newest_live(pods: Iterable[P]) -> P | None:
    """The newest Pod not being deleted (a Deployment's Pod during a rollout); None when there is none."""
    live = [p for p in pods if not Meta.of(p).deleting]
    return max(live, key=lambda p: Meta.of(p).created, default=None)


def pod_name(pod: Mapping[str, object]) -> str:
    return Meta.of(pod).name


def running_resources(pod: Mapping[str, object]) -> Resources | None:
    """What the kubelet reports the reconciler container runs with; None before it reports it."""
    view = PodView.of(pod)
    running = view.status_of(RECONCILER_CONTAINER).resources
    return None if running is None else readable(running, f"pod {view.meta.name} (status)")


def pod_resources(pod: Mapping[str, object]) -> Resources | None:
    """The reconciler's size in a Pod: what it asks for while the kubelet applies it, else as the kubelet
    runs it, else as the Pod asks for it. A resize in flight (accepted, or not answered yet) is that size:
    read between our resize and the kubelet's applying it (a watch event of the Pod comes then), the
    running size would be taken for another's size and sized again."""
    view = PodView.of(pod)
    running = running_resources(pod)
    if running is None:
        return container_resources(view.containers, f"pod {view.meta.name}")
    if not _resize_in_flight(pod):
        return running
    try:
        asked = container_resources(view.containers, f"pod {view.meta.name}")
    except ReadError:
        return running  # what it asks for cannot be read: what runs is what is known
    return asked or running


def _resize_in_flight(pod: Mapping[str, object]) -> bool:
    """Whether the kubelet is applying a resize, or has not answered it yet: a kubelet that resizes (it
    reports what it allocated), with no resize pending (deferred, infeasible) and no refused one of the
    spec as it is (a condition of an older generation speaks of the resize before ours)."""
    view = PodView.of(pod)
    pending = any(c.get("type") == "PodResizePending" for c in view.answered_conditions)
    return view.status_of(RECONCILER_CONTAINER).allocated and not pending and not resize_refused(pod)


def others_requests(containers: object, where: str) -> tuple[int, int]:
    """CPU (millicores) and memory (MiB) requested by the containers other than the reconciler."""
    cpu = memory = 0
    for container in containers if isinstance(containers, list) else []:
        if isinstance(container, dict) and container.get("name") != RECONCILER_CONTAINER:
            resources = readable(container.get("resources"), f"{where}, container {container.get('name')}")
            if resources is not None:
                cpu, memory = cpu + resources.cpu_request_m, memory + resources.memory_request_mib
    return cpu, memory


def resize_refused(pod: Mapping[str, object]) -> str:
    """The kubelet's message when it could not apply the last resize (`PodResizeInProgress`, reason
    `Error`: it refused a memory limit below what the container uses), else empty."""
    for condition in PodView.of(pod).answered_conditions:
        if condition.get("type") == "PodResizeInProgress" and condition.get("reason") == "Error":
            return str(condition.get("message") or "the kubelet could not apply the resize")
    return ""


def resize_deferred(pod: Mapping[str, object]) -> tuple[Resources, str] | None:
    """The size the Pod asks for while the kubelet defers its resize (`PodResizePending`, reason
    `Deferred`: it does not fit the node now; the running container keeps its size), and the kubelet's
    message; None when no resize waits (or what it asks for is unreadable: then it is asked again)."""
    view = PodView.of(pod)
    for condition in view.answered_conditions:
        if condition.get("type") == "PodResizePending" and condition.get("reason") == "Deferred":
            try:
                asked = container_resources(view.containers, f"pod {view.meta.name}")
            except ReadError:
                return None
            message = str(condition.get("message") or "the node has no room for it now")
            return None if asked is None else (asked, message)
    return None


# The reconciler Pods whose resize the kubelet defers: (node, Pod, what it asks) each.
ResizesWaiting = tuple[tuple[str, str, str], ...]


# The kubelet's reason when a resize does not fit for CPU alone (its InsufficientResourceError).
SHORT_OF_CPU_ONLY = "enough resource: cpu,"


def waits_for_memory(pod: Mapping[str, object]) -> bool:
    """Whether the kubelet defers the Pod's resize for want of memory on its node: what a neighbour can
    give back."""
    return _deferred_for_memory(pod) is not None


def _deferred_for_memory(pod: Mapping[str, object]) -> Resources | None:
    """What the Pod asks while the kubelet defers it for want of memory (None: it does not). Deferred for
    CPU alone (the kubelet says so), memory given back would not help; a reason it does not say is taken
    as wanting memory."""
    deferred = resize_deferred(pod)
    return None if deferred is None or SHORT_OF_CPU_ONLY in deferred[1] else deferred[0]


def resizes_waiting(pods: Iterable[Mapping[str, object]]) -> ResizesWaiting:
    """The reconciler Pods whose resize the kubelet defers for want of memory, as (node, Pod, what it
    asks): those being deleted, or not yet on a node, are not waiting for room there."""
    waiting: list[tuple[str, str, str]] = []
    for pod in pods:
        view = PodView.of(pod)
        if view.meta.deleting or not view.node:
            continue
        asked = _deferred_for_memory(pod)
        if asked is not None:
            waiting.append((view.node, view.meta.name, str(asked)))
    return tuple(waiting)


def room_wanted(pod: Mapping[str, object] | None, waiting: ResizesWaiting) -> str | None:
    """Which other reconciler on this reconciler Pod's node waits for room (its resize deferred), said
    with what it asks; None when none does, or this Pod's node is not known."""
    view = PodView.of(pod)
    if pod is None or not view.node:
        return None
    for node, name, asked in waiting:
        if node == view.node and name != view.meta.name:
            return f"Pod {name} waits for room on node {node} (asks {asked})"
    return None


def kubelet_without_resize(pod: Mapping[str, object]) -> str | None:
    """The node of a Pod whose kubelet does not resize in place (None: it does, or it cannot be told yet).
    A kubelet with InPlacePodVerticalScaling on reports the resources of every running container it
    allocated (`resources`, `allocatedResources`); with it off it reports neither and leaves a resize in
    the spec unapplied, so a running reconciler without them tells it."""
    view = PodView.of(pod)
    status = view.status_of(RECONCILER_CONTAINER)
    if not status.runs or status.allocated:
        return None
    return view.node or "its node"


def resize_infeasible(pod: Mapping[str, object]) -> bool:
    return any(
        c.get("type") == "PodResizePending" and c.get("reason") == "Infeasible"
        for c in PodView.of(pod).answered_conditions
    )


def limit_lowered(pod: Mapping[str, object], resources: Resources) -> bool:
    running = running_resources(pod)
    wanted, now = resources.memory_limit_mib, running.memory_limit_mib if running else None
    return wanted is not None and (now is None or wanted < now)
