"""Our autoscaler into a cluster the README's way, by the API rather than by kubectl: the webhook's
certificate (certificate.sh, the TLS Secret), the objects of `kubectl apply -k manifests/sidecar` or
`manifests/cluster` as the real kustomize builds them, the CA into the webhook configuration; the
admission guard both include, and their removal. Everything of ours lives in Config Sync's namespace."""

from __future__ import annotations

import base64
import contextlib
import copy
import functools
import subprocess
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path

import yaml

from controlplane.configsync_install import NAMESPACE
from controlplane.kubernetes_build import build_binaries
from controlplane.resources import RESOURCES, create_or_replace
from controlplane.seed import JSON, REPO_ROOT, manifests_in
from inventory.kube import kubeapi

SIDECAR_CONTAINER = "objcount-autoscaler"  # the name in manifests/sidecar/base/sidecar-template.yaml
SIDECAR_MANIFESTS = REPO_ROOT / "manifests" / "sidecar"
WEBHOOK_MANIFESTS = REPO_ROOT / "manifests" / "webhook"
CERTIFICATE_SCRIPT = WEBHOOK_MANIFESTS / "certificate.sh"
GUARD_MANIFEST = REPO_ROOT / "manifests" / "rbac" / "guard.yaml"
CLUSTER_MANIFESTS = REPO_ROOT / "manifests" / "cluster"
WEBHOOK_CONFIGURATION = "objcount-webhook"
WEBHOOK_TLS_SECRET = "objcount-webhook-tls"
WEBHOOK_NAME = "objcount-webhook"  # its Deployment, Service and Pods' app.kubernetes.io/name
CONTROLLER = "objcount-autoscaler"  # the cluster-mode controller's Deployment
SIDECAR_TEMPLATE = "objcount-sidecar-template"  # the ConfigMap the webhook reads its template from


class KustomizeError(RuntimeError):
    pass


def kubectl_kustomize(directory: Path) -> list[JSON]:
    """What the real kustomize builds of `directory` (`kubectl kustomize`, the pinned kubectl the control
    plane is built with): the objects `kubectl apply -k directory` applies, patches and components applied."""
    kubectl = build_binaries() / "kubectl"
    rendered = subprocess.run(
        [str(kubectl), "kustomize", str(directory)], capture_output=True, text=True, check=False, timeout=120
    )
    if rendered.returncode != 0:
        raise KustomizeError(f"kubectl kustomize {directory} failed:\n{rendered.stderr}")
    return [o for o in yaml.safe_load_all(rendered.stdout) if o]


@functools.cache
def _built(directory: Path) -> tuple[JSON, ...]:
    return tuple(kubectl_kustomize(directory))


def kustomization_objects(directory: Path) -> Iterator[JSON]:
    """The objects `kubectl apply -k directory` applies (built once per directory and run; each caller
    gets copies it may change)."""
    for item in _built(directory):
        yield copy.deepcopy(item)


def install_sidecar(
    api: kubeapi.KubeClient,
    cert_dir: Path,
    *,
    sidecar_env: Mapping[str, str] | None = None,
    extra_names: Sequence[str] = (),
) -> None:
    """The README's sidecar installation, step by step: the certificate (certificate.sh), its TLS Secret,
    `kubectl apply -k manifests/sidecar`, the CA into the webhook configuration. `sidecar_env`: settings
    set in the sidecar template's container (as a user edits that ConfigMap); `extra_names`: more
    subjectAltName entries of the certificate (certificate.sh's arguments)."""
    webhook_certificate(api, cert_dir, extra_names)
    for item in kustomization_objects(SIDECAR_MANIFESTS):
        if item["kind"] == "ConfigMap" and item["metadata"]["name"] == SIDECAR_TEMPLATE and sidecar_env:
            item["data"]["sidecar.yaml"] = sidecar_template_text(sidecar_env)
        create_or_replace(api, item)
    trust_webhook(api, cert_dir)


def webhook_certificate(api: kubeapi.KubeClient, cert_dir: Path, extra_names: Sequence[str] = ()) -> None:
    """The README's first steps of either install: a CA and the webhook's certificate by certificate.sh,
    and the TLS Secret the webhook mounts."""
    script = ["bash", str(CERTIFICATE_SCRIPT), str(cert_dir), *extra_names]
    subprocess.run(script, check=True, capture_output=True)
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "kubernetes.io/tls",
        "metadata": {"name": WEBHOOK_TLS_SECRET, "namespace": NAMESPACE},
        "data": {name: _base64_file(cert_dir / name) for name in ("tls.crt", "tls.key")},
    }
    create_or_replace(api, secret)


def trust_webhook(
    api: kubeapi.KubeClient, cert_dir: Path, configuration: str = WEBHOOK_CONFIGURATION
) -> None:
    """The README's last step of either install: the CA into the webhook configuration (`caBundle`)."""
    ca_bundle = [
        {"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": _base64_file(cert_dir / "ca.crt")}
    ]
    api.patch(RESOURCES["MutatingWebhookConfiguration"], None, configuration, ca_bundle, patch_type="json")


def install_guard(api: kubeapi.KubeClient) -> None:
    """Our admission policy (part of both installs): what our identities may change. It matches only
    them, so Config Sync runs under it as without it."""
    for item in manifests_in(GUARD_MANIFEST):
        create_or_replace(api, item)


def install_cluster(api: kubeapi.KubeClient, cert_dir: Path, env: Mapping[str, str] | None = None) -> None:
    """The README's cluster-mode installation: the webhook's certificate, `kubectl apply -k
    manifests/cluster` (our roles, their bindings to our ServiceAccounts, the controller, the webhook),
    the CA into the webhook configuration; by the API rather than by kubectl. `env`: settings set in the
    controller's container (as `kubectl set env` does)."""
    webhook_certificate(api, cert_dir)
    for item in kustomization_objects(CLUSTER_MANIFESTS):
        if item["kind"] == "Deployment" and item["metadata"]["name"] == CONTROLLER and env:
            (container,) = item["spec"]["template"]["spec"]["containers"]
            container["env"] = with_env(container["env"], env)
        create_or_replace(api, item)
    trust_webhook(api, cert_dir)


def with_env(entries: list[JSON], env: Mapping[str, str]) -> list[JSON]:
    """A container's `env` with `env`'s settings set (replacing entries of the same name)."""
    return [e for e in entries if e["name"] not in env] + [{"name": n, "value": v} for n, v in env.items()]


def uninstall_cluster(api: kubeapi.KubeClient) -> None:
    """Stop the cluster-mode install: the webhook configuration goes first (Pods are created as their
    template says from then on), then the controller's and the webhook's Deployments (their Pods go with
    them); the RBAC, which the sidecar install shares, stays."""
    uninstall_webhook(api)
    for name in (CONTROLLER, WEBHOOK_NAME):
        with contextlib.suppress(kubeapi.NotFound):
            api.delete(kubeapi.DEPLOYMENT, NAMESPACE, name)


def uninstall_webhook(api: kubeapi.KubeClient) -> None:
    """The README's removal of the webhook: Pods created from now on run without the sidecar and at
    their template's size."""
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
