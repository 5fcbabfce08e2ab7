"""The size capped to the cluster's largest node: the Nodes read (`largest_node`), the cap
(`fitted`), worked out by hand."""

from __future__ import annotations

from autoscaler.core.nodes import largest_node
from autoscaler.core.resources import Resources
from autoscaler.core.sizing import AUTOPILOT, PROTOTYPE, STANDARD, Load, NodeRoom, Profile, fitted, size


def node(name: str, cpu: object, memory: object, *, cordoned: bool = False) -> dict[str, object]:
    return {
        "metadata": {"name": name},
        "spec": {"unschedulable": True} if cordoned else {},
        "status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}},
    }


def test_the_largest_node_is_the_schedulable_one_with_the_most_memory_rounded_down() -> None:
    nodes = [
        node("small", "8", "4Gi"),
        node("cordoned", "64", "256Gi", cordoned=True),
        node("big", "1930m", "7912124Ki"),  # 7726.68 MiB: 7726 MiB
        node("broken", "lots", "8Gi"),
        "not a node",
    ]
    assert largest_node(nodes) == NodeRoom("big", 1930, 7726)


def test_no_readable_node_is_none_not_zero() -> None:
    assert largest_node([node("broken", "2", None)]) is None
    assert largest_node("not a list") is None
    assert largest_node([]) is None


SMALL_NODE = NodeRoom("small", 2000, 2048)


def test_a_size_above_the_largest_node_is_capped_to_what_it_holds_beside_the_other_containers() -> None:
    """Prototype on Standard, 10,000 objects: 2094m/2144Mi, limits the same (DESIGN.md 2.5). The node holds
    2000m/2048Mi; the other containers are assumed at 20m/116Mi (git-sync and the otel-agent): 1980m and
    1932 MiB, 1920 on the 32 MiB grid; the limits are the node's whole allocatable at most: 2000m, 2048Mi."""
    profile = Profile(PROTOTYPE, STANDARD, node_room=SMALL_NODE)
    assert size(Load(10_000), profile) == Resources(2094, 2144, 2094, 2144)
    capped, why = fitted(size(Load(10_000), profile), profile)
    assert capped == Resources(1980, 1920, 2000, 2048)
    assert why is not None
    assert "node small" in why


def test_a_size_the_node_holds_is_left_alone() -> None:
    profile = Profile(PROTOTYPE, STANDARD, node_room=SMALL_NODE)
    assert fitted(Resources(1125, 1152, 1125, 1152), profile) == (Resources(1125, 1152, 1125, 1152), None)


def test_the_other_containers_as_read_count_instead_of_the_assumed_ones() -> None:
    """Read: 500m/1000Mi besides the reconciler: 1500m and 1048 MiB, 1024 on the grid."""
    profile = Profile(PROTOTYPE, STANDARD, others_cpu_m=500, others_memory_mib=1000, node_room=SMALL_NODE)
    capped, _ = fitted(Resources(1125, 1152, None, None), profile)
    assert capped == Resources(1125, 1024, None, None)


def test_no_cap_on_autopilot_nor_without_a_node_read() -> None:
    big = Resources(4000, 8192, 4000, 8192)
    assert fitted(big, Profile(PROTOTYPE, AUTOPILOT, node_room=SMALL_NODE)) == (big, None)
    assert fitted(big, Profile(PROTOTYPE, STANDARD)) == (big, None)
