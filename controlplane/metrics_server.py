"""The real metrics-server (sigs.k8s.io/metrics-server v0.8.0) on the local real node, on request.

metrics-server is built from its Go module (`controlplane/build_metrics_server.sh`, cached like the
control plane's binaries), put in an image under the name upstream's release gives it
(`controlplane.images.metrics_server_image`), and run as a Pod by the kubelet from our manifest
(`controlplane/metrics-server.yaml`). The API server serves what it reports as `metrics.k8s.io/v1beta1`
through its aggregation layer (the front proxy `controlplane.launcher` sets up inside the sandbox), dialling
the Pod at its endpoint (`--enable-aggregator-routing`). metrics-server scrapes the kubelet's
`/metrics/resource` every 10 s, so its numbers are the kubelet's (cAdvisor's working set of each
container's cgroup).

A stack does not run it unless asked:

    with running_node_stack(extra_images=[metrics_server_image()]) as stack:
        install_metrics_server(stack)

or `install_metrics_server(stack)` on any running stack: it imports the image into the node's containerd
itself when the stack was not started with it (well under a second).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from controlplane import images
from controlplane.builds import given_or_built
from controlplane.errors import ControlPlaneError
from controlplane.images import METRICS_SERVER_IMAGE
from controlplane.stack import NodeStack

BUILD_SCRIPT = Path(__file__).with_name("build_metrics_server.sh")
MANIFEST = Path(__file__).with_name("metrics-server.yaml")
NAMESPACE = "kube-system"
NAME = "metrics-server"  # the Deployment, its container, the Service and the ServiceAccount
API_SERVICE = "v1beta1.metrics.k8s.io"
METRICS_API = "/apis/metrics.k8s.io/v1beta1"
# A cold start here: the Pod starts in a few seconds; metrics-server is ready after its first scrape, and
# reports a Pod once it has two samples of it (one `--metric-resolution`, 10 s, apart) to compute CPU.
INSTALL_TIMEOUT = 180.0
CRASHES_BEFORE_FAILING = 2

JSON = dict[str, Any]


def build_metrics_server() -> Path:
    """Build or reuse the pinned metrics-server; return the directory holding `metrics-server`.
    `OBJCOUNT_MS_BIN_DIR` names a directory holding one already (no build)."""
    return given_or_built("OBJCOUNT_MS_BIN_DIR", BUILD_SCRIPT, "metrics-server")


def metrics_server_image() -> images.Image:
    """The metrics-server image, built (binary and image, each cached) if needed."""
    return images.metrics_server_image(build_metrics_server())


def install_metrics_server(
    stack: NodeStack, image: images.Image | None = None, timeout: float = INSTALL_TIMEOUT
) -> None:
    """Run metrics-server on `stack`'s node and return once the API server serves, through metrics.k8s.io,
    the usage of at least one container of a `kube-system` Pod (metrics-server's own, at least).

    The image is imported into the node's containerd unless the stack was started with it. Raises
    ControlPlaneError after `timeout` seconds, with metrics-server's log tail, its Pod's state and the
    APIService's conditions."""
    if not any(i.name == METRICS_SERVER_IMAGE for i in stack.images):
        stack.node.import_images([image or metrics_server_image()])
    stack.kubectl("apply", "-f", str(MANIFEST))
    deadline = time.monotonic() + timeout
    while not pods_with_usage(stack, NAMESPACE):
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"metrics.k8s.io listed no container usage in {NAMESPACE} within {timeout:.0f} s\n"
                + diagnosis(stack)
            )
        # A container that exits at once (a bad flag, a missing permission) only ever gets restarted:
        # say so now rather than at the deadline.
        if restarts(stack) >= CRASHES_BEFORE_FAILING:
            raise ControlPlaneError(f"metrics-server keeps exiting\n{diagnosis(stack)}")
        time.sleep(0.5)


def restarts(stack: NodeStack) -> int:
    """How often the kubelet has restarted metrics-server's container (0 before it has a Pod)."""
    result = stack.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"k8s-app={NAME}", "-o", "json", check=False)
    if result.returncode != 0:
        return 0
    return max(
        (
            status.get("restartCount", 0)
            for pod in json.loads(result.stdout).get("items") or []
            for status in pod.get("status", {}).get("containerStatuses") or []
        ),
        default=0,
    )


def pod_metrics(stack: NodeStack, namespace: str) -> list[JSON] | None:
    """The PodMetrics of `namespace` as the API server serves them (metrics.k8s.io), or None while that
    API is not served (no APIService yet, or metrics-server not reachable)."""
    result = stack.kubectl("get", "--raw", f"{METRICS_API}/namespaces/{namespace}/pods", check=False)
    if result.returncode != 0:
        return None
    items: list[JSON] = json.loads(result.stdout).get("items") or []
    return items


def pods_with_usage(stack: NodeStack, namespace: str) -> list[JSON]:
    """The PodMetrics of `namespace` that report at least one container's usage (none while not served)."""
    return [p for p in pod_metrics(stack, namespace) or [] if any(c.get("usage") for c in p["containers"])]


def diagnosis(stack: NodeStack) -> str:
    """What to read when metrics-server does not serve: its Pod's state, its log tail, the APIService's
    conditions (the aggregator's view: endpoints missing, TLS or auth failures)."""
    pods = stack.kubectl("get", "pods", "-n", NAMESPACE, "-l", f"k8s-app={NAME}", "-o", "wide", check=False)
    logs = stack.kubectl("logs", "-n", NAMESPACE, f"deployment/{NAME}", "-c", NAME, "--tail=40", check=False)
    service = stack.kubectl("get", "apiservice", API_SERVICE, "-o", "json", check=False)
    conditions: object = service.stderr.strip()
    if service.returncode == 0:
        conditions = json.loads(service.stdout).get("status", {}).get("conditions")
    return (
        f"metrics-server Pods:\n{pods.stdout or pods.stderr}\n"
        f"metrics-server log (last 40 lines):\n{logs.stdout or logs.stderr}\n"
        f"APIService {API_SERVICE} conditions: {json.dumps(conditions, indent=2)}"
    )
