"""The reconciler's size in the JSON Kubernetes and Config Sync hold it in: a container's `resources`
block and an entry of an RSync's `spec.override.resources`, to and from `Resources`. Pure.

Reading is strict: a value that is not what the API documents raises QuantityError (from the objects
that hold the size: ReadError, reason `unreadable`), so "unreadable" is never taken for "nothing set".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from autoscaler.core import quantity
from autoscaler.core.reasons import ReadError, Reason, WriteError
from autoscaler.core.resources import Resources
from inventory.core.ids import RECONCILER_CONTAINER
from inventory.core.objects import OverrideEntry, block_of, named

Block = dict[str, dict[str, str]]

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
    """Resources of an override entry; QuantityError when it is not readable. A zero quantity is not set:
    Config Sync reads it so (its reconciler-manager takes the template's default for it), and its typed
    updates of an RSync write every unset quantity of the entry back as "0"."""
    if not entry:
        return None
    if not isinstance(entry, Mapping):
        raise quantity.QuantityError(f"override entry is not a mapping: {str(entry)[:80]!r}")
    block: dict[str, dict[str, object]] = {"requests": {}, "limits": {}}
    for field_name, (kind, resource) in _OVERRIDE_FIELDS.items():
        if field_name in entry and quantity.parse(entry[field_name]) != 0:
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
