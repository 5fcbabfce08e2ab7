"""A node whose CPU or memory is mostly requested by others: a Pod of the sandbox's pause image (already on
the node: no pull) requesting all the node's allocatable CPU or memory but what its Pods request and a
margin left free. The pause process uses next to nothing: only the scheduler's and the kubelet's
accounting of requests is filled, which is what decides whether a resize in place fits."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

from autoscaler.core import quantity
from controlplane.images import PAUSE_IMAGE
from inventory.kube import kubeapi

NAMESPACE = "default"
Unit = Callable[[object], int]


def _millicores(value: object) -> int:
    return int(quantity.parse(value) * 1000) if value is not None else 0


def _mib(value: object) -> int:
    return int(quantity.parse(value) / quantity.MIB) if value is not None else 0


def requested(pods: list[dict[str, Any]], node: str, resource: str, unit: Unit) -> int:
    """What the node's live Pods request of `resource` (cpu, memory), in `unit`."""
    total = 0
    for pod in pods:
        spec, status = pod.get("spec") or {}, pod.get("status") or {}
        if spec.get("nodeName") != node or status.get("phase") in ("Succeeded", "Failed"):
            continue
        for container in spec.get("containers") or []:
            total += unit(((container.get("resources") or {}).get("requests") or {}).get(resource))
    return total


UNITS: dict[str, Unit] = {"cpu": _millicores, "memory": _mib}


def fill_the_nodes_cpu(api: kubeapi.KubeClient, *, leave_m: int, timeout_s: float = 60.0) -> str:
    """The filler Pod, Running (its name, in `default`): the node's allocatable CPU less what its Pods
    request and `leave_m` millicores."""
    return _fill(api, "cpu", leave_m, timeout_s)


def fill_the_nodes_memory(api: kubeapi.KubeClient, *, leave_mib: int, timeout_s: float = 60.0) -> str:
    """The filler Pod, Running (its name, in `default`): the node's allocatable memory less what its Pods
    request and `leave_mib` MiB."""
    return _fill(api, "memory", leave_mib, timeout_s)


def _filler_requests(resource: str, amount: int) -> dict[str, str]:
    return (
        {"cpu": f"{amount}m", "memory": "8Mi"}
        if resource == "cpu"
        else {"cpu": "1m", "memory": f"{amount}Mi"}
    )


def _fill(api: kubeapi.KubeClient, resource: str, leave: int, timeout_s: float) -> str:
    unit = UNITS[resource]
    (node,) = api.request_json("GET", "/api/v1/nodes")["items"]
    name = node["metadata"]["name"]
    pods = api.request_json("GET", "/api/v1/pods")["items"]
    free = unit(node["status"]["allocatable"][resource]) - requested(pods, name, resource, unit)
    filler = f"filler-{uuid.uuid4().hex[:8]}"
    container = {
        "name": "filler",
        "image": PAUSE_IMAGE,
        "imagePullPolicy": "Never",
        "resources": {"requests": _filler_requests(resource, max(free - leave, 1))},
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
