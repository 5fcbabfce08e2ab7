"""A node whose CPU is mostly requested by others: a Pod of the sandbox's pause image (already on the node:
no pull) requesting all the node's allocatable CPU but what its Pods request and a margin left free."""

from __future__ import annotations

import time
import uuid
from typing import Any

from autoscaler.core import quantity
from controlplane.images import PAUSE_IMAGE
from inventory.kube import kubeapi

NAMESPACE = "default"


def _millicores(value: object) -> int:
    return int(quantity.parse(value) * 1000) if value is not None else 0


def requested_cpu_m(pods: list[dict[str, Any]], node: str) -> int:
    """What the node's live Pods request of its CPU, millicores."""
    total = 0
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") != node or status.get("phase") in ("Succeeded", "Failed"):
            continue
        for container in spec.get("containers") or []:
            total += _millicores(((container.get("resources") or {}).get("requests") or {}).get("cpu"))
    return total


def fill_the_nodes_cpu(api: kubeapi.KubeApi, *, leave_m: int, timeout_s: float = 60.0) -> str:
    """The filler Pod, Running (its name, in `default`): the node's allocatable CPU less what its Pods
    request and `leave_m` millicores."""
    (node,) = api.request_json("GET", "/api/v1/nodes")["items"]
    name = node["metadata"]["name"]
    pods = api.request_json("GET", "/api/v1/pods")["items"]
    free = _millicores(node["status"]["allocatable"]["cpu"]) - requested_cpu_m(pods, name)
    filler = f"filler-{uuid.uuid4().hex[:8]}"
    container = {
        "name": "filler",
        "image": PAUSE_IMAGE,
        "imagePullPolicy": "Never",
        "resources": {"requests": {"cpu": f"{max(free - leave_m, 1)}m", "memory": "8Mi"}},
    }
    spec = {"nodeName": name, "automountServiceAccountToken": False, "containers": [container]}
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": filler}, "spec": spec}
    api.create(kubeapi.POD, NAMESPACE, body)
    deadline = time.monotonic() + timeout_s
    while api.get(kubeapi.POD, NAMESPACE, filler)["status"].get("phase") != "Running":
        if time.monotonic() > deadline:
            raise TimeoutError(f"the filler Pod {filler} is not Running after {timeout_s:.0f} s")
        time.sleep(0.5)
    return filler
