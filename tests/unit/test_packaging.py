"""What can be checked of the image and the manifests without a container engine."""

from __future__ import annotations

from autoscaler.injection import SidecarTemplate
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
    sidecar = shipped_sidecar_template().container
    for container in (*pod["containers"], sidecar):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "repo", "mountPath": "/repo", "readOnly": True} in sidecar["volumeMounts"]


def shipped_sidecar_template() -> SidecarTemplate:
    (configmap,) = manifests_in(REPO_ROOT / "manifests" / "sidecar" / "sidecar-template.yaml")
    return SidecarTemplate.parse(configmap["data"]["sidecar.yaml"])


def test_the_shipped_sidecar_has_its_own_token_a_liveness_probe_and_no_readiness_probe() -> None:
    sidecar = shipped_sidecar_template().container
    # An unready sidecar would make Config Sync's reconciler Deployment unavailable.
    assert "readinessProbe" not in sidecar
    liveness = sidecar["livenessProbe"]
    assert liveness["failureThreshold"] * liveness["periodSeconds"] >= 300, "five minutes before a restart"
    token = "/var/run/secrets/kubernetes.io/serviceaccount"
    (mount,) = [m for m in sidecar["volumeMounts"] if m["mountPath"] == token]
    (volume,) = [v for v in shipped_sidecar_template().volumes if v["name"] == mount["name"]]
    assert volume["secret"] == {"secretName": "objcount-sidecar-token"}
    accounts = list(manifests_in(REPO_ROOT / "manifests" / "sidecar" / "accounts.yaml"))
    (secret,) = [m for m in accounts if m["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "objcount-sidecar-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "objcount-sidecar"}


def test_the_shipped_webhook_can_never_stop_config_sync() -> None:
    (config,) = manifests_in(REPO_ROOT / "manifests" / "sidecar" / "mutating-webhook.yaml")
    (webhook,) = config["webhooks"]
    assert webhook["failurePolicy"] == "Ignore"
    assert webhook["timeoutSeconds"] <= 5
    assert webhook["sideEffects"] == "None"
    assert webhook["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "config-management-system"}
    }
    (rule,) = webhook["rules"]
    assert rule["operations"] == ["CREATE"]
    assert rule["resources"] == ["pods"]
