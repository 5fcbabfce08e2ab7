"""What can be checked of the image and the manifests without a container engine."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from autoscaler.core.injection import SidecarTemplate
from autoscaler.service.settings import CONFIG_FILE_ENV, Settings, load_settings
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
    deployments = [
        m
        for directory in ("cluster/base", "webhook")
        for m in manifests_in(REPO_ROOT / "manifests" / directory)
        if m["kind"] == "Deployment"
    ]
    assert [d["metadata"]["name"] for d in deployments] == ["objcount-autoscaler", "objcount-webhook"]
    pods = [d["spec"]["template"]["spec"] for d in deployments]
    assert all(pod["securityContext"]["runAsNonRoot"] is True for pod in pods)
    sidecar = shipped_sidecar_template().container
    for container in (*(c for pod in pods for c in pod["containers"]), sidecar):
        assert container["securityContext"]["readOnlyRootFilesystem"] is True
        assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert {"name": "repo", "mountPath": "/repo", "readOnly": True} in sidecar["volumeMounts"]


def shipped_sidecar_template() -> SidecarTemplate:
    (configmap,) = manifests_in(REPO_ROOT / "manifests" / "sidecar" / "base" / "sidecar-template.yaml")
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
    accounts = list(manifests_in(REPO_ROOT / "manifests" / "sidecar" / "base" / "accounts.yaml"))
    (secret,) = [m for m in accounts if m["kind"] == "Secret"]
    assert secret["metadata"]["name"] == "objcount-sidecar-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": "objcount-sidecar"}


def test_the_shipped_sidecar_runs_on_autopilot_without_bursting_at_50m_and_128mi_requested_and_limited() -> (
    None
):
    # Its own 5m and 64Mi would be its limits there; 128Mi is its Standard limit.
    resources = shipped_sidecar_template().container_for("autopilot")["resources"]
    assert resources == {
        "requests": {"cpu": "50m", "memory": "128Mi"},
        "limits": {"cpu": "50m", "memory": "128Mi"},
    }


def test_the_shipped_webhook_can_never_stop_config_sync() -> None:
    (config,) = manifests_in(REPO_ROOT / "manifests" / "webhook" / "mutating-webhook.yaml")
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


# ----- the webhook the tests run is the webhook we ship ----------------------------------------------------
def _shipped(kind: str, file: str) -> dict[str, Any]:
    (item,) = [m for m in manifests_in(REPO_ROOT / "manifests" / file) if m["kind"] == kind]
    return item


def _settings_from(env: dict[str, str], monkeypatch: pytest.MonkeyPatch) -> Settings:
    """The settings `objcount run` reads from exactly these variables (the test's own cleared)."""
    for name in [n for n in os.environ if n.startswith("OBJCOUNT_")]:
        monkeypatch.delenv(name)
    monkeypatch.delenv(CONFIG_FILE_ENV, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    return load_settings()


def test_the_shipped_webhook_deployment_serves_on_the_ports_and_paths_its_manifests_name(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The webhook Deployment's settings (its variables and our defaults) open the ports its probes and
    Service name, and read its certificate where its volume is mounted; as both installs ship it, it
    sizes only. The sidecar install's patch turns injection on and mounts the template where the
    settings read it (the merge itself is kustomize's: tests/integration/test_install.py)."""
    pod = _shipped("Deployment", "webhook/webhook.yaml")["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    assert container["args"] == ["run"]
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env == {"OBJCOUNT_MODE": "webhook", "OBJCOUNT_WEBHOOK_SIDECAR": "false"}
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports == {"webhook": 9443, "metrics": 9464, "health": 8081}
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    assert mounts == {"tls": "/etc/objcount/tls"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"] == {"secretName": "objcount-webhook-tls"}
    shipped = _settings_from(env, monkeypatch)
    assert (
        shipped.webhook_port,
        shipped.metrics_port,
        shipped.health_port,
        shipped.webhook_cert_dir,
        shipped.webhook_sidecar,
        shipped.webhook_sizing,
    ) == (9443, 9464, 8081, Path("/etc/objcount/tls"), False, True)

    patch = _shipped("Deployment", "sidecar/base/webhook-injects.yaml")["spec"]["template"]["spec"]
    (injecting,) = patch["containers"]
    assert injecting["name"] == container["name"]
    assert {m["name"]: m["mountPath"] for m in injecting["volumeMounts"]} == {
        "sidecar-template": "/etc/objcount/sidecar"
    }
    assert patch["volumes"] == [
        {"name": "sidecar-template", "configMap": {"name": "objcount-sidecar-template"}}
    ]
    template = _shipped("ConfigMap", "sidecar/base/sidecar-template.yaml")
    assert template["metadata"]["name"] == "objcount-sidecar-template"
    assert set(template["data"]) == {"sidecar.yaml"}  # so the file is /etc/objcount/sidecar/sidecar.yaml
    sidecar_install = _settings_from(
        {**env, **{e["name"]: e["value"] for e in injecting["env"]}}, monkeypatch
    )
    assert sidecar_install.webhook_sidecar is True
    assert sidecar_install.sidecar_template == Path("/etc/objcount/sidecar/sidecar.yaml")
    # The probes and the Service reach the ports the settings open.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
    service = _shipped("Service", "webhook/webhook.yaml")
    assert service["spec"]["ports"] == [{"name": "webhook", "port": 443, "targetPort": "webhook"}]


def test_the_shipped_webhook_injects_only_into_config_sync_reconciler_pods() -> None:
    (webhook,) = _shipped("MutatingWebhookConfiguration", "webhook/mutating-webhook.yaml")["webhooks"]
    assert webhook["namespaceSelector"] == {
        "matchLabels": {"kubernetes.io/metadata.name": "config-management-system"}
    }
    assert webhook["objectSelector"] == {
        "matchExpressions": [
            {"key": "app", "operator": "In", "values": ["reconciler"]},
            {"key": "configsync.gke.io/sync-kind", "operator": "In", "values": ["RootSync", "RepoSync"]},
        ]
    }
    assert webhook["rules"] == [
        {
            "operations": ["CREATE"],
            "apiGroups": [""],
            "apiVersions": ["v1"],
            "resources": ["pods"],
            "scope": "Namespaced",
        }
    ]
    assert webhook["clientConfig"]["service"] == {
        "name": "objcount-injector",
        "namespace": "config-management-system",
        "path": "/mutate",
        "port": 443,
    }


def service_link_variables(service: dict[str, Any]) -> set[str]:
    """The variables the kubelet gives every Pod of a Service's namespace (enableServiceLinks, on by
    default), as Kubernetes documents them: NAME_SERVICE_HOST, NAME_SERVICE_PORT[_PORTNAME], NAME_PORT and
    NAME_PORT_<port>_<PROTOCOL>[_PROTO|_PORT|_ADDR]."""
    name = service["metadata"]["name"].upper().replace("-", "_")
    names = {f"{name}_SERVICE_HOST", f"{name}_SERVICE_PORT", f"{name}_PORT"}
    for port in service["spec"]["ports"]:
        protocol = port.get("protocol", "TCP")
        if "name" in port:
            names.add(f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}")
        base = f"{name}_PORT_{port['port']}_{protocol}"
        names |= {base, f"{base}_PROTO", f"{base}_PORT", f"{base}_ADDR"}
    return names


def test_no_variable_of_our_services_is_read_as_a_setting() -> None:
    """Our sidecar runs in Config Sync's Pods, which keep Service links on: a Service of ours named
    objcount-webhook gave them OBJCOUNT_WEBHOOK_PORT=tcp://10.0.0.253:443, and `objcount run` refused it
    as its webhook port (seen on the real kubelet)."""
    services = [
        item
        for path in (REPO_ROOT / "manifests").rglob("*.yaml")
        for item in manifests_in(path)
        if item.get("kind") == "Service"
    ]
    assert services
    settings = {f"OBJCOUNT_{name.upper()}" for name in Settings.model_fields}
    assert "OBJCOUNT_WEBHOOK_PORT" in settings
    for service in services:
        assert not service_link_variables(service) & settings, service["metadata"]["name"]


def test_our_own_pods_take_no_service_links() -> None:
    for path in ("cluster/base/deployment.yaml", "webhook/webhook.yaml"):
        (deployment,) = [i for i in manifests_in(REPO_ROOT / "manifests" / path) if i["kind"] == "Deployment"]
        assert deployment["spec"]["template"]["spec"]["enableServiceLinks"] is False, path


@pytest.mark.parametrize(("install", "allowed"), [("cluster/base", {9464}), ("webhook", {9443, 9464})])
def test_each_install_has_a_network_policy_for_its_own_pods_on_their_own_ports(
    install: str, allowed: set[int]
) -> None:
    """Read here from the manifests: the policy selects exactly the Deployment's Pods (never Config Sync's),
    lets in only these ports, and each is a port the Pods' container declares."""
    objects = list(manifests_in(REPO_ROOT / "manifests" / install))
    kustomization = (REPO_ROOT / "manifests" / install / "kustomization.yaml").read_text()
    assert "- network-policy.yaml" in kustomization
    (policy,) = [o for o in objects if o["kind"] == "NetworkPolicy"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert "app" not in selector, "never a selector that could match Config Sync's reconciler Pods"
    assert policy["spec"]["policyTypes"] == ["Ingress"]
    ports = {p["port"] for rule in policy["spec"]["ingress"] for p in rule["ports"]}
    declared = {
        p["containerPort"] for c in deployment["spec"]["template"]["spec"]["containers"] for p in c["ports"]
    }
    assert ports == allowed
    assert ports <= declared


@pytest.mark.parametrize("install", ["cluster/base", "webhook"])
def test_each_of_our_deployments_has_a_disruption_budget_and_spreads_its_two_replicas(install: str) -> None:
    """Read here from the manifests (the eviction itself: test_configsync_node): a drain takes at most one
    of the two Pods at a time, and the scheduler prefers them on different nodes; both select exactly the
    Deployment's Pods."""
    objects = list(manifests_in(REPO_ROOT / "manifests" / install))
    assert "- disruption.yaml" in (REPO_ROOT / "manifests" / install / "kustomization.yaml").read_text()
    (budget,) = [o for o in objects if o["kind"] == "PodDisruptionBudget"]
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    pod_labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert deployment["spec"]["replicas"] == 2
    assert budget["spec"]["maxUnavailable"] == 1
    assert budget["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    assert budget["metadata"]["namespace"] == deployment["metadata"]["namespace"]
    (term,) = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"
    ]
    assert term["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"
    assert term["podAffinityTerm"]["labelSelector"]["matchLabels"].items() <= pod_labels.items()
