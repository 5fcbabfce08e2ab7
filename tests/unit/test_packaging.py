"""What can be checked of the image and the manifests without a container engine."""

from __future__ import annotations

from pathlib import Path

import yaml

from autoscaler.inject import inject
from controlplane.seed import REPO_ROOT, manifests_in

DOCKERFILE = (REPO_ROOT / "Dockerfile").read_text()


def _final_stage() -> str:
    return DOCKERFILE.split("\nFROM ")[-1]


def test_image_is_multi_stage_non_root_without_build_tools_and_has_a_health_check() -> None:
    assert DOCKERFILE.count("\nFROM ") + DOCKERFILE.startswith("FROM ") >= 2
    final = _final_stage()
    assert "USER 10001" in final
    assert "HEALTHCHECK" in final
    assert "/healthz" in final
    assert "PYTHONDONTWRITEBYTECODE=1" in final, "no .pyc writes: the root filesystem can be read-only"
    for tool in ("gcc", "build-essential", "apt-get install"):
        assert tool not in final


def test_workloads_run_as_non_root_on_a_read_only_root_filesystem() -> None:
    deployment = next(
        m for m in manifests_in(REPO_ROOT / "manifests" / "cluster") if m["kind"] == "Deployment"
    )
    pod = deployment["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    sidecar = yaml.safe_load((REPO_ROOT / "manifests" / "sidecar" / "container.yaml").read_text())
    for container in (*pod["containers"], sidecar):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "repo", "mountPath": "/repo", "readOnly": True} in sidecar["volumeMounts"]


def test_inject_sidecar_adds_the_container_once_and_keeps_the_rest(tmp_path: Path) -> None:
    template = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {
            "template": {
                "spec": {
                    "containers": [{"name": "reconciler", "image": "r"}, {"name": "git-sync", "image": "g"}]
                }
            }
        },
    }
    configmap = yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "reconciler-manager-cm", "resourceVersion": "7"},
            "data": {"deployment.yaml": yaml.safe_dump(template), "other": "kept"},
        }
    )
    once = inject(configmap, image="example/objcount:1")
    twice = inject(once, image="example/objcount:1")
    assert once == twice
    result = yaml.safe_load(once)
    containers = yaml.safe_load(result["data"]["deployment.yaml"])["spec"]["template"]["spec"]["containers"]
    assert [c["name"] for c in containers] == ["reconciler", "git-sync", "objcount-autoscaler"]
    assert containers[-1]["image"] == "example/objcount:1"
    assert result["data"]["other"] == "kept"
    assert "resourceVersion" not in result["metadata"]
