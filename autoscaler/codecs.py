"""Reconciler resources to and from the JSON Kubernetes and Config Sync hold them in: a container's
`resources` block and an entry of an RSync's `spec.override.resources`. Pure.

Reading is strict: a value that is not what the API documents raises QuantityError, so "unreadable" is
never taken for "nothing set".
"""

from __future__ import annotations

from collections.abc import Mapping

from autoscaler import quantity
from autoscaler.policy import Resources
from inventory.ids import RECONCILER_CONTAINER
from inventory.objects import OverrideEntry

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
