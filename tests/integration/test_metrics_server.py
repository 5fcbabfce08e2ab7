"""The real metrics-server (v0.8.0, built from its Go module) on the real node, served by the API server's
aggregation layer as metrics.k8s.io: what it reports for a container is the kubelet's working set of that
container's cgroup, the number our own reader of the cgroup gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest

from autoscaler.core import quantity
from controlplane.kubelet import NODE_NAME
from controlplane.metrics_server import NAME, NAMESPACE, install_metrics_server, metrics_server_image
from controlplane.stack import NodeStack, running_node_stack
from tests.helpers import FIGURES, NODE_STARTUP, OBSERVED, wait_for

JSON = dict[str, Any]
MiB = 1024 * 1024


@pytest.fixture(scope="module")
def stack() -> Iterator[NodeStack]:
    # Built before the stack starts (a cold build takes about 2 minutes), imported with the node's images.
    image = metrics_server_image()
    with running_node_stack(extra_images=[image]) as node:
        FIGURES.append((NODE_STARTUP, node.startup_seconds or 0.0))
        install_metrics_server(node)
        yield node


def metrics_server_container(stack: NodeStack) -> tuple[str, str]:
    """The running metrics-server Pod's name and its container's ID."""
    pods = json.loads(
        stack.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"k8s-app={NAME}", "-o", "json").stdout
    )["items"]
    (pod,) = [p for p in pods if p["status"].get("phase") == "Running"]
    (status,) = [s for s in pod["status"]["containerStatuses"] if s["name"] == NAME]
    return pod["metadata"]["name"], status["containerID"]


def reported_working_set(stack: NodeStack, pod_name: str) -> Fraction | None:
    """The memory metrics.k8s.io reports for metrics-server's container in `pod_name`, if any yet."""
    result = stack.kubectl(
        "get", "--raw", f"/apis/metrics.k8s.io/v1beta1/namespaces/{NAMESPACE}/pods/{pod_name}", check=False
    )
    if result.returncode != 0:
        return None
    containers = json.loads(result.stdout).get("containers") or []
    usage = next((c.get("usage") or {} for c in containers if c["name"] == NAME), {})
    return quantity.parse(usage["memory"]) if "memory" in usage else None


@pytest.mark.timeout(600)  # a stack of its own, metrics-server built on a cold cache
def test_metrics_server_reports_the_working_set_the_container_cgroup_holds(stack: NodeStack) -> None:
    pod_name, container_id = metrics_server_container(stack)
    reported = wait_for(
        lambda: reported_working_set(stack, pod_name),
        timeout=60,
        interval=0.5,
        what="metrics.k8s.io to report metrics-server's own container",
    )
    assert reported is not None  # wait_for returns only a truthy value
    # Read right after: metrics-server's figure is at most one scrape (10 s) old, the cgroup's is now.
    ours = stack.container_memory(container_id).working_set
    OBSERVED.append(
        f"metrics-server working set: metrics.k8s.io {float(reported) / MiB:.1f} MiB,"
        f" its cgroup {ours / MiB:.1f} MiB"
    )
    assert reported > 0
    assert ours > 0
    # The same quantity (cAdvisor's usage less inactive file pages, of the same cgroup) sampled a few
    # seconds apart: a Go process's heap moves between samples, not by a factor of two.
    assert Fraction(1, 2) <= reported / ours <= 2, (reported, ours)


def node_metrics(stack: NodeStack) -> list[JSON]:
    """The NodeMetrics metrics.k8s.io serves (none while it is not served)."""
    result = stack.kubectl("get", "--raw", "/apis/metrics.k8s.io/v1beta1/nodes", check=False)
    if result.returncode != 0:
        return []
    items: list[JSON] = json.loads(result.stdout).get("items") or []
    return items


def test_metrics_server_reports_the_node(stack: NodeStack) -> None:
    nodes = wait_for(
        lambda: node_metrics(stack), timeout=60, interval=0.5, what="metrics.k8s.io to report the node"
    )
    (node,) = nodes
    assert node["metadata"]["name"] == NODE_NAME
    assert quantity.parse(node["usage"]["memory"]) > 0
