"""The shipped installs as a user runs them: the real `kubectl apply -k` (kubectl and its kustomize) on
the real API server, as a server-side dry run (the API server admits and validates every object,
nothing is kept: the other tests install the same objects their own way, through
`controlplane.autoscaler_install.kustomization_objects`, which this checks against kustomize)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import orjson
import pytest
import yaml

from controlplane import LocalControlPlane
from controlplane.autoscaler_install import (
    CLUSTER_MANIFESTS,
    SIDECAR_MANIFESTS,
    kubectl_kustomize,
    kustomization_objects,
)
from controlplane.configsync_install import NAMESPACE
from controlplane.seed import ensure_namespace
from inventory.kube import kubeapi

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
    control_plane: LocalControlPlane, admin_api: kubeapi.KubeClient, directory: Path
) -> None:
    ensure_namespace(admin_api, NAMESPACE)
    applied = kubectl_apply_k(control_plane, directory)
    assert applied == sorted((o["kind"], o["metadata"]["name"]) for o in kustomization_objects(directory))
    assert [name for kind, name in applied if kind == "ValidatingAdmissionPolicy"] == GUARD
    assert [name for kind, name in applied if kind == "ValidatingAdmissionPolicyBinding"] == GUARD


# docs/install.md's kustomization that pins our image by digest (building from a checkout), as printed there.
DOCS_DIGEST_KUSTOMIZATION = """resources: [manifests/sidecar]
images:
- {name: objcount-autoscaler, newName: REGISTRY/objcount-autoscaler, digest: "sha256:DIGEST"}
"""


def test_the_docs_digest_kustomization_pins_the_deployments_and_not_the_sidecar_template(
    control_plane: LocalControlPlane, tmp_path: Path
) -> None:
    """Filled in as a user would (a registry, a digest), next to a copy of `manifests/`, rendered by the
    real kubectl's kustomize: the webhook's Deployment runs the image by digest, while the sidecar's image,
    text inside a ConfigMap, is left as docs/install.md warns (`make release` sets both)."""
    docs = (Path(__file__).resolve().parents[2] / "docs" / "install.md").read_text()
    assert f"```yaml\n{DOCS_DIGEST_KUSTOMIZATION}```" in docs, (
        "docs/install.md's example changed: follow it here"
    )
    digest = "sha256:" + "0123456789abcdef" * 4
    filled = DOCS_DIGEST_KUSTOMIZATION.replace("REGISTRY", "registry.example/team").replace(
        "sha256:DIGEST", digest
    )
    shutil.copytree(CLUSTER_MANIFESTS.parent, tmp_path / "manifests")
    (tmp_path / "kustomization.yaml").write_text(filled)
    result = subprocess.run(
        [control_plane.bin_dir / "kubectl", "kustomize", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rendered = {(o["kind"], o["metadata"]["name"]): o for o in yaml.safe_load_all(result.stdout)}
    webhook = rendered[("Deployment", "objcount-webhook")]["spec"]["template"]["spec"]["containers"]
    assert [c["image"] for c in webhook] == [f"registry.example/team/objcount-autoscaler@{digest}"]
    template = rendered[("ConfigMap", "objcount-sidecar-template")]["data"]["sidecar.yaml"]
    assert "image: objcount-autoscaler:0.1.0" in template


def test_every_kustomization_we_ship_builds_with_the_real_kustomize() -> None:
    """Each directory a user may `kubectl apply -k` (an overlay inside its base is refused by kustomize:
    "cycle detected"), and each component, built by the pinned kubectl."""
    manifests = CLUSTER_MANIFESTS.parent
    directories = sorted(p.parent for p in manifests.rglob("kustomization.yaml"))
    assert {manifests / d for d in ("cluster", "sidecar", "vpa/create", "webhook/cert-manager")} <= set(
        directories
    )
    for directory in directories:
        if "kind: Component" in (directory / "kustomization.yaml").read_text():
            continue  # built inside the overlays that name it (cluster/cert-manager, sidecar/cert-manager)
        assert kubectl_kustomize(directory), directory.relative_to(manifests)  # raises with kustomize's error
