"""The cluster's largest node, from a list of Nodes: what no size may exceed. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from autoscaler.core import quantity
from autoscaler.core.sizing import NodeRoom
from inventory.core.objects import Meta, block_of


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
