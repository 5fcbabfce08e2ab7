"""The API surface the service sizes with: resource types from aggregated discovery, on the real API
server, against the legacy discovery documents walked one group at a time."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from prometheus_client import REGISTRY

from autoscaler.cli import main
from autoscaler.core.observation import Needs, RSyncView
from autoscaler.core.plan import DecideConfig
from autoscaler.core.sizing import NodeRoom, Profile
from autoscaler.kube.port import KubePort
from autoscaler.kube.targets import RecommendTarget
from autoscaler.service.controller import Executor
from controlplane import LocalControlPlane
from controlplane.seed import install_crds
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import legacy_count


def crd(kind: str) -> dict[str, object]:
    group = f"{kind.lower()}.surface-test.objcount.dev"
    schema = {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{kind.lower()}s.{group}"},
        "spec": {
            "group": group,
            "names": {"kind": kind, "plural": f"{kind.lower()}s", "singular": kind.lower()},
            "scope": "Namespaced",
            "versions": [{"name": "v1", "served": True, "storage": True, "schema": schema}],
        },
    }


@dataclass
class Clock:
    now: float = 0.0

    def __call__(self) -> float:
        return self.now


def test_resource_types_match_the_legacy_discovery_and_follow_a_new_crd(api: kubeapi.KubeClient) -> None:
    before = api.api_resource_types()
    assert before == legacy_count(api)
    assert before > 50, "a kube-apiserver serves more than 50 built-in resource types"
    install_crds(api, [crd(f"Probe{uuid.uuid4().hex[:8]}")])
    assert api.api_resource_types() == legacy_count(api) == before + 1


KEY = RSyncKey("RootSync", "config-management-system", "root-sync")


def surface(port: KubePort) -> int | None:
    """The API surface one reconcile's read gives."""
    return port.read(KEY, RSyncView.of({"metadata": {"name": KEY.name}}), Needs()).api_resources


def test_the_service_reads_the_surface_at_most_once_per_interval(api: kubeapi.KubeClient) -> None:
    clock = Clock()
    port = KubePort(api, RecommendTarget(api), surface_ttl_s=600, clock=clock)
    first = surface(port)
    assert first == legacy_count(api)
    install_crds(api, [crd(f"Later{uuid.uuid4().hex[:8]}")])
    clock.now = 599.0
    assert surface(port) == first, "read again before the interval"
    clock.now = 600.0
    assert surface(port) == first + 1


def test_an_unreadable_surface_keeps_the_last_value_and_is_counted(
    api: kubeapi.KubeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    clock = Clock()
    port = KubePort(api, RecommendTarget(api), surface_ttl_s=600, clock=clock)
    first = surface(port)
    errors = REGISTRY.get_sample_value("objcount_reconcile_errors_total", {"stage": "discovery"}) or 0.0

    def refused(*args: object, **kwargs: object) -> bytes:
        raise kubeapi.Forbidden("GET /apis: 403")

    monkeypatch.setattr(api, "request", refused)
    clock.now = 600.0
    executor = Executor(
        port, DecideConfig(Profile(), target=port.target.name), clock, lambda key, delay: None
    )
    executor.reconcile(KEY, {"metadata": {"name": KEY.name, "namespace": KEY.namespace}}, ObjectCounts())
    assert surface(port) == first
    assert REGISTRY.get_sample_value("objcount_reconcile_errors_total", {"stage": "discovery"}) == errors + 1


def test_recommend_reads_the_api_surface_from_the_kubeconfigs_cluster(
    api: kubeapi.KubeClient, control_plane: LocalControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    served = legacy_count(api)
    assert main(["recommend", "--objects", "1000", "--kubeconfig", str(control_plane.kubeconfig)]) == 0
    first, *sized = capsys.readouterr().out.splitlines()
    assert first == f"API surface: {served} resource types, from the discovery of {api.server}"
    # The same arithmetic as with the count given by hand.
    assert main(["recommend", "--objects", "1000", "--api-resources", str(served)]) == 0
    assert sized == capsys.readouterr().out.splitlines()


def test_recommend_with_an_unreachable_cluster_says_so_and_assumes(
    tmp_path: Path, control_plane: LocalControlPlane, capsys: pytest.CaptureFixture[str]
) -> None:
    # A kubeconfig naming a server nothing listens on (a closed port on loopback).
    kubeconfig = tmp_path / "kubeconfig"
    text = control_plane.kubeconfig.read_text()
    kubeconfig.write_text(text.replace(control_plane.server, "https://127.0.0.1:9"))
    assert main(["recommend", "--objects", "1000", "--kubeconfig", str(kubeconfig)]) == 0
    captured = capsys.readouterr()
    assert "API surface: cannot read the cluster's discovery" in captured.err
    assert "pass --api-resources N" in captured.err
    assert "x 421 API resources beyond 79 (assumed)" in captured.out


def test_the_port_reads_the_largest_schedulable_node_from_the_api_server(api: kubeapi.KubeClient) -> None:
    """Played by us: Node objects with the allocatable a kubelet would report (tainted NoSchedule, so no
    Pod of another test lands on them; the bare API server has no kubelet). The cordoned one is left
    out; the rest are read in pages (the port lists 500 a page; three Nodes here)."""
    suffix = uuid.uuid4().hex[:8]
    nodes = {f"small-{suffix}": ("4", "8Gi", False), f"big-{suffix}": ("2", "16Gi", False)}
    nodes[f"cordoned-{suffix}"] = ("64", "256Gi", True)
    for name, (cpu, memory, cordoned) in nodes.items():
        taint = {"key": "objcount.dev/test", "effect": "NoSchedule"}
        body = {"metadata": {"name": name}, "spec": {"taints": [taint], "unschedulable": cordoned}}
        api.create(kubeapi.NODE, None, {"apiVersion": "v1", "kind": "Node", **body})
        status = {"status": {"allocatable": {"cpu": cpu, "memory": memory, "pods": "110"}}}
        api.patch(kubeapi.NODE, None, name, status, subresource="status")
    try:
        port = KubePort(api, RecommendTarget(api), clock=Clock())
        view = RSyncView.of({"metadata": {"name": KEY.name}})
        room = port.read(KEY, view, Needs(nodes=True)).node_room
        assert room == NodeRoom(f"big-{suffix}", 2000, 16 * 1024)
    finally:
        for name in nodes:
            api.delete(kubeapi.NODE, None, name)
