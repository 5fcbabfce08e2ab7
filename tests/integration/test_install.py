"""The shipped installs as a user runs them: the real `kubectl apply -k` (kubectl and its kustomize) on
the real API server, as a server-side dry run (the API server admits and validates every object,
nothing is kept: the other tests install the same objects their own way, through
`controlplane.configsync.kustomization_objects`, which this checks against kustomize)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest

from controlplane import LocalControlPlane
from controlplane.configsync import CLUSTER_MANIFESTS, NAMESPACE, SIDECAR_MANIFESTS, kustomization_objects
from controlplane.seed import ensure_namespace
from inventory import kubeapi

GUARD = [
    "objcount-guard-deployments",
    "objcount-guard-pods",
    "objcount-guard-reposyncs",
    "objcount-guard-rootsyncs",
]


def kubectl_apply_k(control_plane: LocalControlPlane, directory: Path) -> list[tuple[str, str]]:
    """(kind, name) of what `kubectl apply -k directory` applies, as the API server answered."""
    kubectl = control_plane.bin_dir / "kubectl"  # built from the pinned module (controlplane/build.sh)
    command = ["apply", "-k", str(directory), "--dry-run=server", "-o", "json"]
    result = subprocess.run(
        [kubectl, "--kubeconfig", str(control_plane.kubeconfig), *command],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr.decode()
    answer = orjson.loads(result.stdout)
    items = answer["items"] if answer.get("kind") == "List" else [answer]
    return sorted((i["kind"], i["metadata"]["name"]) for i in items)


@pytest.mark.parametrize("directory", [CLUSTER_MANIFESTS, SIDECAR_MANIFESTS], ids=["cluster", "sidecar"])
def test_kubectl_apply_k_installs_the_guard_and_what_the_tests_install(
    control_plane: LocalControlPlane, admin_api: kubeapi.KubeApi, directory: Path
) -> None:
    ensure_namespace(admin_api, NAMESPACE)
    applied = kubectl_apply_k(control_plane, directory)
    assert applied == sorted((o["kind"], o["metadata"]["name"]) for o in kustomization_objects(directory))
    assert [name for kind, name in applied if kind == "ValidatingAdmissionPolicy"] == GUARD
    assert [name for kind, name in applied if kind == "ValidatingAdmissionPolicyBinding"] == GUARD
