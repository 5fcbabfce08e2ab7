"""The service works with exactly the shipped RBAC (a ServiceAccount token on the real API server),
and that RBAC refuses what the service has no business doing."""

from __future__ import annotations

import copy
import signal
from pathlib import Path
from typing import Any

import pytest
import yaml

from autoscaler.core.annotations import annotation_counts
from autoscaler.core.size_fields import resources_of
from controlplane import LocalControlPlane
from controlplane.autoscaler_install import CLUSTER_MANIFESTS, WEBHOOK_NAME, kustomization_objects
from controlplane.seed import reconciler_deployment, resourcegroup, rsync
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import Service, wait_for

RBAC_PLURALS = {
    "ClusterRole": "clusterroles",
    "Role": "roles",
    "ClusterRoleBinding": "clusterrolebindings",
    "RoleBinding": "rolebindings",
}


def _install_shipped_rbac(api: kubeapi.KubeClient, namespace: str, account: str) -> None:
    """The cluster install's roles (`kubectl apply -k manifests/cluster`) with their rules untouched,
    moved to the test's namespace and account."""
    for manifest in kustomization_objects(CLUSTER_MANIFESTS):
        obj = copy.deepcopy(manifest)
        kind = obj["kind"]
        if kind not in RBAC_PLURALS:
            continue  # the account is the test's; the guard matches ours only (tests/integration/test_guard.py)
        if obj["metadata"]["name"] == WEBHOOK_NAME:
            continue  # the webhook's own rules (tests/integration/test_guard.py), not the controller's
        if kind in ("ClusterRole", "ClusterRoleBinding"):
            obj["metadata"]["name"] = f"objcount-autoscaler-{namespace}"
        else:
            obj["metadata"]["namespace"] = namespace
        if kind.endswith("Binding"):
            obj["subjects"] = [{"kind": "ServiceAccount", "name": account, "namespace": namespace}]
            if obj["roleRef"]["kind"] == "ClusterRole":
                obj["roleRef"]["name"] = f"objcount-autoscaler-{namespace}"
        resource = kubeapi.Resource("rbac.authorization.k8s.io", "v1", RBAC_PLURALS[kind], kind)
        api.create(resource, None if kind.startswith("Cluster") else namespace, obj)


@pytest.fixture
def restricted(
    api: kubeapi.KubeClient, namespace: str, control_plane: LocalControlPlane
) -> tuple[Path, kubeapi.KubeClient]:
    _install_shipped_rbac(api, namespace, "objcount-autoscaler")
    token = control_plane.issue_service_account_token(namespace, "objcount-autoscaler")
    kubeconfig = control_plane.kubeconfig_for_token(token, f"restricted-{namespace}")
    return kubeconfig, kubeapi.KubeClient.connect(str(kubeconfig))


@pytest.mark.parametrize("target", ["deployment", "rsync-override"])
def test_cluster_mode_works_with_exactly_the_shipped_rbac(
    api: kubeapi.KubeClient,
    namespace: str,
    restricted: tuple[Path, kubeapi.KubeClient],
    tmp_path: Path,
    target: str,
) -> None:
    kubeconfig, _ = restricted
    key = RSyncKey("RepoSync", namespace, "repo-sync")
    api.create(kubeapi.REPOSYNC, namespace, rsync(key))
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(key, 100))
    api.create(kubeapi.DEPLOYMENT, namespace, reconciler_deployment(key, namespace))
    service = Service(
        {
            "OBJCOUNT_MODE": "cluster",
            "OBJCOUNT_KUBECONFIG": str(kubeconfig),
            # Other tests' RSyncs share this API server; the service is kept to this test's namespace.
            "OBJCOUNT_WATCH_NAMESPACE": namespace,
            "OBJCOUNT_LEASE_NAMESPACE": namespace,
            "OBJCOUNT_RECONCILER_NAMESPACE": namespace,
            "OBJCOUNT_TARGET": target,
            "OBJCOUNT_PRESET": "fitted",  # count-only: the size worked out by hand from the count
        },
        tmp_path / "service.log",
    )
    try:
        wait_for(lambda: service.get("/readyz")[0] == 200, timeout=60, what="ready")
        api.patch(kubeapi.RESOURCEGROUP, namespace, key.name, resourcegroup(key, 4000))
        expected = 896  # fitted preset, 4,000 objects: 198 + 0.174 x 4000 = 894 -> 896 MiB
        wait_for(lambda: _applied_memory(api, key, target) == expected, what="the scale-up")
        wait_for(
            lambda: annotation_counts(api.get(kubeapi.REPOSYNC, namespace, key.name)).sync == 4000,
            what="the count in the annotations",
        )
        assert service.metric("objcount_apply_errors_total") == 0
        exposed = "".join(service.get(path)[1] for path in ("/metrics", "/healthz", "/readyz"))
        assert service.stop(signal.SIGTERM) == 0
    finally:
        service.stop(signal.SIGKILL)
    # The ServiceAccount token it runs with is never logged nor exposed.
    token = yaml.safe_load(kubeconfig.read_text())["users"][0]["user"]["token"]
    assert token not in service.log.read_text()
    assert token not in exposed
    logged = " ".join(str(line["message"]) for line in service.logs())
    assert "403" not in logged
    assert "Forbidden" not in logged


def _applied_memory(api: kubeapi.KubeClient, key: RSyncKey, target: str) -> int | None:
    if target == "deployment":
        containers = api.get(kubeapi.DEPLOYMENT, key.namespace, reconciler_name(key))["spec"]["template"][
            "spec"
        ]["containers"]
        resources = resources_of(next(c for c in containers if c["name"] == "reconciler")["resources"])
    else:
        entries: list[dict[str, Any]] = (
            api.get(kubeapi.REPOSYNC, key.namespace, key.name)["spec"].get("override") or {}
        ).get("resources") or []
        entry = next((e for e in entries if e["containerName"] == "reconciler"), None)
        resources = (
            None
            if entry is None
            else resources_of({"requests": {"cpu": entry["cpuRequest"], "memory": entry["memoryRequest"]}})
        )
    return None if resources is None else resources.memory_request_mib


def test_shipped_rbac_refuses_what_the_service_does_not_own(
    api: kubeapi.KubeClient, namespace: str, restricted: tuple[Path, kubeapi.KubeClient]
) -> None:
    _, limited = restricted
    elsewhere = f"{namespace}-other"
    api.create(
        kubeapi.NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": elsewhere}}
    )
    key = RSyncKey("RepoSync", elsewhere, "repo-sync")
    api.create(kubeapi.DEPLOYMENT, elsewhere, reconciler_deployment(key, elsewhere))
    patch = {"metadata": {"annotations": {"x": "y"}}}
    # A Deployment outside the reconcilers' namespace: refused.
    with pytest.raises(kubeapi.Forbidden):
        limited.patch(kubeapi.DEPLOYMENT, elsewhere, reconciler_name(key), patch)
    # What the service never needs, anywhere.
    for call in (
        lambda: limited.delete(kubeapi.DEPLOYMENT, namespace, "anything"),
        lambda: limited.create(kubeapi.DEPLOYMENT, namespace, reconciler_deployment(key, namespace)),
        lambda: limited.list_page(kubeapi.Resource("", "v1", "secrets", "Secret"), namespace),
        lambda: limited.get(kubeapi.Resource("", "v1", "secrets", "Secret"), namespace, "any"),
        lambda: limited.list_page(kubeapi.Resource("", "v1", "configmaps", "ConfigMap"), namespace),
        lambda: limited.get(kubeapi.Resource("", "v1", "configmaps", "ConfigMap"), namespace, "any"),
        lambda: limited.list_page(kubeapi.Resource("", "v1", "configmaps", "ConfigMap"), None),
        lambda: limited.patch(kubeapi.RESOURCEGROUP, namespace, "any", patch),
        lambda: limited.delete(kubeapi.REPOSYNC, namespace, "any"),
        # Leader election reaches its own Lease only (another controller's is not ours to take).
        lambda: limited.get(kubeapi.LEASE, namespace, "another-controller"),
        lambda: limited.create(
            kubeapi.POD, namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "x"}}
        ),
        # Events: written and patched, never read back, deleted or listed.
        lambda: limited.list_page(kubeapi.EVENT, namespace),
        lambda: limited.delete(kubeapi.EVENT, namespace, "any"),
        lambda: limited.get(kubeapi.EVENT, namespace, "any"),
        # The Nodes: listed (the largest caps a size), never read one by one, watched or changed.
        lambda: limited.get(kubeapi.NODE, None, "any"),
        lambda: limited.patch(kubeapi.NODE, None, "any", patch),
    ):
        with pytest.raises(kubeapi.Forbidden):
            call()
    # And what it does need is allowed (the call reaches the object: NotFound, not Forbidden).
    with pytest.raises(kubeapi.NotFound):
        limited.get(kubeapi.DEPLOYMENT, namespace, "no-such-reconciler")
    with pytest.raises(kubeapi.NotFound):
        limited.patch(kubeapi.EVENT, elsewhere, "no-such-event", {"series": {"count": 2}})
    for resource in (
        kubeapi.ROOTSYNC,
        kubeapi.REPOSYNC,
        kubeapi.RESOURCEGROUP,
        kubeapi.NODE,
    ):  # cluster mode lists everywhere
        limited.list_page(resource, None)
    # The API surface comes from discovery, which Kubernetes lets every authenticated user read.
    assert limited.api_resource_types() == api.api_resource_types()
