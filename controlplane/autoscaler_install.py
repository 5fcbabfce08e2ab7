"""Our autoscaler into a cluster the README's way, by the API rather than by kubectl: the sidecar install
(certificate, TLS Secret, `kubectl apply -k manifests/sidecar`, the CA into the webhook configuration),
the cluster-mode install (`manifests/cluster`), the admission guard both include, and their removal.
Everything of ours lives in Config Sync's namespace."""

from __future__ import annotations

import base64
import contextlib
import subprocess
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from controlplane.configsync_install import NAMESPACE
from controlplane.resources import RESOURCES, create_or_replace
from controlplane.seed import JSON, REPO_ROOT, manifests_in
from inventory.kube import kubeapi

SIDECAR_CONTAINER = "objcount-autoscaler"  # the name in manifests/sidecar/base/sidecar-template.yaml
SIDECAR_MANIFESTS = REPO_ROOT / "manifests" / "sidecar"
GUARD_MANIFEST = REPO_ROOT / "manifests" / "rbac" / "guard.yaml"
CLUSTER_MANIFESTS = REPO_ROOT / "manifests" / "cluster"
WEBHOOK_CONFIGURATION = "objcount-sidecar"
WEBHOOK_TLS_SECRET = "objcount-webhook-tls"
WEBHOOK_NAME = "objcount-webhook"  # its Deployment, Service and Pods' app.kubernetes.io/name
SIDECAR_TEMPLATE = "objcount-sidecar-template"  # the ConfigMap the webhook reads its template from


def kustomization_objects(directory: Path) -> Iterator[JSON]:
    """The objects `kubectl apply -k directory` applies (its `resources:` in order; no generators)."""
    kustomization = next(manifests_in(directory / "kustomization.yaml"))
    for entry in kustomization.get("resources") or []:
        path = directory / entry
        yield from kustomization_objects(path) if path.is_dir() else manifests_in(path)


def install_sidecar(
    api: kubeapi.KubeApi,
    cert_dir: Path,
    *,
    sidecar_env: Mapping[str, str] | None = None,
) -> None:
    """The README's sidecar installation, step by step: the certificate (certificate.sh), its TLS Secret,
    `kubectl apply -k manifests/sidecar`, the CA into the webhook configuration. `sidecar_env`: settings
    set in the sidecar template's container (as a user edits that ConfigMap)."""
    subprocess.run(["bash", str(SIDECAR_MANIFESTS / "certificate.sh"), str(cert_dir)], check=True)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": WEBHOOK_TLS_SECRET, "namespace": NAMESPACE},
        "data": {name: _base64_file(cert_dir / name) for name in ("tls.crt", "tls.key")},
    }
    create_or_replace(api, secret)
    for item in kustomization_objects(SIDECAR_MANIFESTS):
        if item["kind"] == "ConfigMap" and item["metadata"]["name"] == SIDECAR_TEMPLATE and sidecar_env:
            item["data"]["sidecar.yaml"] = sidecar_template_text(sidecar_env)
        create_or_replace(api, item)
    ca_bundle = [
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": _base64_file(cert_dir / "ca.crt")}
    ]
    api.patch(
        RESOURCES["MutatingWebhookConfiguration"], None, WEBHOOK_CONFIGURATION, ca_bundle, patch_type="json"
    )


def install_guard(api: kubeapi.KubeApi) -> None:
    """Our admission policy (part of both installs): what our identities may change. It matches only
    them, so Config Sync runs under it as without it."""
    for item in manifests_in(GUARD_MANIFEST):
        create_or_replace(api, item)


def install_cluster(api: kubeapi.KubeApi, env: Mapping[str, str] | None = None) -> None:
    """The README's cluster-mode installation, `kubectl apply -k manifests/cluster` (our roles, their
    bindings to our ServiceAccount, the Deployment), by the API rather than by kubectl; `env`: settings
    set in the Deployment's container (as `kubectl set env` does)."""
    for item in kustomization_objects(CLUSTER_MANIFESTS):
        if item["kind"] == "Deployment" and env:
            (container,) = item["spec"]["template"]["spec"]["containers"]
            container["env"] = with_env(container["env"], env)
        create_or_replace(api, item)


def with_env(entries: list[JSON], env: Mapping[str, str]) -> list[JSON]:
    """A container's `env` with `env`'s settings set (replacing entries of the same name)."""
    return [e for e in entries if e["name"] not in env] + [{"name": n, "value": v} for n, v in env.items()]


def uninstall_cluster(api: kubeapi.KubeApi) -> None:
    """Stop the cluster-mode controller: its Deployment is deleted (its Pods go with it); the RBAC, which
    the sidecar install shares, stays."""
    for item in kustomization_objects(CLUSTER_MANIFESTS):
        if item["kind"] == "Deployment":
            with contextlib.suppress(kubeapi.NotFound):
                api.delete(kubeapi.DEPLOYMENT, item["metadata"]["namespace"], item["metadata"]["name"])


def uninstall_webhook(api: kubeapi.KubeApi) -> None:
    """The README's removal of the webhook: Pods created from now on run without the sidecar."""
    with contextlib.suppress(kubeapi.NotFound):
        api.delete(RESOURCES["MutatingWebhookConfiguration"], None, WEBHOOK_CONFIGURATION)


def sidecar_template_text(env: Mapping[str, str] | None = None) -> str:
    """The sidecar template of the shipped ConfigMap (what the webhook's Pod has mounted), with `env` set
    in the container's environment (as a user edits that ConfigMap to set the sidecar's settings)."""
    (configmap,) = manifests_in(SIDECAR_MANIFESTS / "base" / "sidecar-template.yaml")
    text: str = configmap["data"]["sidecar.yaml"]
    if not env:
        return text
    template = yaml.safe_load(text)
    template["container"]["env"] = with_env(template["container"]["env"], env)
    return yaml.safe_dump(template, sort_keys=False)


def _base64_file(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()
