"""Reconciler resources to and from the JSON Kubernetes and Config Sync hold them in: a container's
`resources` block and an entry of an RSync's `spec.override.resources`. Pure.

Reading is strict: a value that is not what the API documents raises QuantityError (from the objects
that hold the size: ReadError, reason `unreadable`), so "unreadable" is never taken for "nothing set".
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import TypeVar

from autoscaler.core import quantity
from autoscaler.core.reasons import ReadError, Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.sizing import NodeRoom
from inventory.core.ids import RECONCILER_CONTAINER
from inventory.core.objects import Meta, OverrideEntry, PodView, block_of, named

Block = dict[str, dict[str, str]]
P = TypeVar("P", bound=Mapping[str, object])

# Override entry field -> (requests | limits, cpu | memory) of a resources block.
_OVERRIDE_FIELDS = {
    "cpuRequest": ("requests", "cpu"),
    "memoryRequest": ("requests", "memory"),
    "cpuLimit": ("limits", "cpu"),
    "memoryLimit": ("limits", "memory"),
}


def resources_json(resources: Resources) -> Block:
    body: Block = {
        "requests": {
            "cpu": quantity.format_cpu(resources.cpu_request_m),
            "memory": quantity.format_memory(resources.memory_request_mib),
        }
    }
    limits = {}
    if resources.cpu_limit_m is not None:
        limits["cpu"] = quantity.format_cpu(resources.cpu_limit_m)
    if resources.memory_limit_mib is not None:
        limits["memory"] = quantity.format_memory(resources.memory_limit_mib)
    if limits:
        body["limits"] = limits
    return body


def resources_of(block: object) -> Resources | None:
    """Resources from a container's `resources` block (or our annotation of one); None when it sets no
    CPU or memory at all. A request that is not set counts as zero, so a container that sets only memory
    is never sized below that memory. Raises QuantityError when the block is not readable (not a
    mapping, or a quantity that is not one): unknown is never taken for "nothing set"."""
    if block is None:
        return None
    if not isinstance(block, Mapping):
        raise quantity.QuantityError(f"resources are not a mapping: {str(block)[:80]!r}")
    requests, limits = block.get("requests"), block.get("limits")
    requests, limits = {} if requests is None else requests, {} if limits is None else limits
    if not isinstance(requests, Mapping) or not isinstance(limits, Mapping):
        raise quantity.QuantityError(f"requests or limits are not a mapping: {str(block)[:80]!r}")
    if not any(r in part for part in (requests, limits) for r in ("cpu", "memory")):
        return None
    return Resources(
        quantity.millicores(requests["cpu"]) if "cpu" in requests else 0,
        quantity.mebibytes(requests["memory"]) if "memory" in requests else 0,
        quantity.millicores(limits["cpu"]) if "cpu" in limits else None,
        quantity.mebibytes(limits["memory"]) if "memory" in limits else None,
    )


def override_entry(resources: Resources) -> OverrideEntry:
    block = resources_json(resources)
    entry: dict[str, str] = {"containerName": RECONCILER_CONTAINER}
    for field_name, (kind, resource) in _OVERRIDE_FIELDS.items():
        if resource in block.get(kind, {}):
            entry[field_name] = block[kind][resource]
    return entry  # type: ignore[return-value]  # the keys are those of _OVERRIDE_FIELDS


def resources_of_override(entry: object) -> Resources | None:
    """Resources of an override entry; QuantityError when it is not readable."""
    if not entry:
        return None
    if not isinstance(entry, Mapping):
        raise quantity.QuantityError(f"override entry is not a mapping: {str(entry)[:80]!r}")
    block: dict[str, dict[str, object]] = {"requests": {}, "limits": {}}
    for field_name, (kind, resource) in _OVERRIDE_FIELDS.items():
        if field_name in entry:
            block[kind][resource] = entry[field_name]
    return resources_of(block)


# ----- the reconciler's size in the objects that hold it: strict reads (ReadError, never "unset") --------
def readable(block: object, where: str) -> Resources | None:
    return _strictly(resources_of, block, f"{where}: the reconciler's resources are")


def _strictly(read: Callable[[object], Resources | None], block: object, what: str) -> Resources | None:
    """What `read` makes of `block`, where a quantity it cannot read is a ReadError saying `what`."""
    try:
        return read(block)
    except quantity.QuantityError as error:
        raise ReadError(Reason.UNREADABLE, f"{what} unreadable: {error}") from error


def container_resources(containers: object, where: str) -> Resources | None:
    """The reconciler container's resources in a list of containers."""
    container = named(containers, RECONCILER_CONTAINER)
    if not container:
        raise ReadError(Reason.NO_CONTAINER, f"{where} has no {RECONCILER_CONTAINER!r} container")
    return readable(container.get("resources"), where)


def template_containers(deployment: Mapping[str, object]) -> object:
    return block_of(block_of(block_of(deployment, "spec"), "template"), "spec").get("containers") or []


def override_entries(rsync: Mapping[str, object]) -> list[OverrideEntry]:
    override = block_of(rsync, "spec").get("override") or {}
    entries = override.get("resources") or [] if isinstance(override, Mapping) else None
    if not isinstance(entries, list):
        raise ReadError(Reason.UNREADABLE, f"spec.override.resources is not a list: {str(entries)[:80]!r}")
    return entries


def monitoring_enabled(rsync: Mapping[str, object]) -> bool:
    """Whether the reconciler Pod has Config Sync's otel-agent: all but an RSync whose
    `spec.monitoring.enabled` is false (Config Sync v1.25; default true, and no such field before)."""
    return block_of(block_of(rsync, "spec"), "monitoring").get("enabled") is not False


def is_reconciler_entry(entry: object) -> bool:
    return isinstance(entry, Mapping) and entry.get("containerName") == RECONCILER_CONTAINER


def reconciler_override(rsync: Mapping[str, object]) -> Resources | None:
    """The size the RSync's `spec.override.resources` gives the reconciler (None: no entry)."""
    entry = next((e for e in override_entries(rsync) if is_reconciler_entry(e)), None)
    return _strictly(resources_of_override, entry, "the reconciler's override entry is")


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


def accepted(containers: object, wanted: Resources, where: str) -> Resources:
    """What the server stored; a mutating webhook that changed it is reported, not fought."""
    try:
        stored = container_resources(containers, where)
    except ReadError as error:
        raise WriteError(error.reason, str(error)) from error
    if stored != wanted:
        raise WriteError(
            Reason.REJECTED,
            f"{where}: stored {stored} instead of {wanted} (mutated by an admission webhook?)",
        )
    return stored


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


def resizes_waiting(pods: Iterable[Mapping[str, object]]) -> ResizesWaiting:
    """The reconciler Pods whose resize the kubelet defers, as (node, Pod, what it asks): those being
    deleted, or not yet on a node, are not waiting for room there."""
    waiting = []
    for pod in pods:
        view = PodView.of(pod)
        if view.meta.deleting or not view.node:
            continue
        deferred = resize_deferred(pod)
        if deferred is not None:
            waiting.append((view.node, view.meta.name, str(deferred[0])))
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


def largest_node(nodes: object) -> NodeRoom | None:
    """The schedulable node with the most allocatable memory (then CPU) of a list of Nodes, rounded down;
    None when none is readable. A cordoned node (`spec.unschedulable`) takes no new Pod; a node whose
    allocatable cannot be read is left out."""
    best: NodeRoom | None = None
    for node in nodes if isinstance(nodes, list) else []:
        if not isinstance(node, Mapping) or block_of(node, "spec").get("unschedulable"):
            continue
        allocatable = block_of(block_of(node, "status"), "allocatable")
        try:
            cpu, memory = quantity.parse(allocatable.get("cpu")), quantity.parse(allocatable.get("memory"))
        except quantity.QuantityError:
            continue
        name = Meta.of(node).name or "?"
        best = largest_node_of([best, NodeRoom(name, int(cpu * 1000), int(memory / quantity.MIB))])
    return best


def largest_node_of(rooms: Iterable[NodeRoom | None]) -> NodeRoom | None:
    """The node with the most memory, then CPU, of these (None where there is none)."""
    return max((r for r in rooms if r is not None), key=lambda r: (r.memory_mib, r.cpu_m), default=None)
