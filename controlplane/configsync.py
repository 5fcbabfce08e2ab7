"""Config Sync itself on the local stack with a real node: its CRDs and objects as released, its
reconciler-manager and reconcilers built from the pinned source into images the kubelet runs.

What runs is unmodified Config Sync, the release pinned in `configsync-pins` (v1.24.3 by default,
v1.22.0 too: `OBJCOUNT_CONFIGSYNC_VERSION` chooses): the objects of its `manifests/` (CRDs, ClusterRoles,
the reconciler-manager's ServiceAccount and Deployment, `reconciler-manager-cm`) are created as they are,
with the images built here where the release names its images; kube-controller-manager creates the
Pods, kube-scheduler binds them, the kubelet runs them with containerd and runc. git-sync and the
OpenTelemetry Collector (the otel-agent in each reconciler Pod, the otel-collector in
config-management-monitoring) are their pinned releases built here (see controlplane.images); commits come
from a git server on the node's network.
One thing is set the way a user may set it: the reconciler-manager's optional `reconciler-manager`
ConfigMap (its `envFrom`) shortens `RECONCILER_POLLING_PERIOD` so tests do not wait 15 s per commit.
Not installed: the resource-group controller (nothing here reads its output). Off Google Cloud the
reconciler-manager logs an error for the otel collector's ConfigMap every few seconds ("could not find
default credentials"), with or without us: that is Config Sync on any cluster without Google credentials.
"""

from __future__ import annotations

import base64
import contextlib
import os
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import orjson
import yaml

from autoscaler.targets import reconciler_pod
from controlplane import images
from controlplane.git_server import GitServer
from controlplane.images import CONFIGSYNC_REGISTRY, GIT_SYNC_IMAGE, OTEL_IMAGE
from controlplane.launcher import ControlPlaneError, run_build_script
from controlplane.seed import JSON, REPO_ROOT, install_crds, manifests_in
from controlplane.stack import NodeStack, running_node_stack
from inventory import kubeapi
from inventory.ids import RSyncKey, reconciler_name
from inventory.objects import Pod, RSync, block_of
from inventory.sync_progress import sync_progress

BUILD_SCRIPT = Path(__file__).with_name("build_configsync.sh")
GIT_SYNC_BUILD_SCRIPT = Path(__file__).with_name("build_gitsync.sh")
OTELCOL_BUILD_SCRIPT = Path(__file__).with_name("build_otelcol.sh")
PINS = Path(__file__).with_name("configsync-pins")
SIDECAR_CONTAINER = "objcount-autoscaler"  # the name in manifests/sidecar/sidecar-template.yaml
NAMESPACE = "config-management-system"


def pinned_versions(pins: Path = PINS) -> tuple[str, ...]:
    """The Config Sync releases pinned (the first is the default), as build_configsync.sh reads them."""
    lines = (line.split() for line in pins.read_text().splitlines() if line.strip())
    return tuple(fields[0] for fields in lines if not fields[0].startswith("#"))


VERSIONS = pinned_versions()
DEFAULT_VERSION = VERSIONS[0]
# The version this process builds and runs: the default, or another pinned one by name.
VERSION = os.environ.get("OBJCOUNT_CONFIGSYNC_VERSION") or DEFAULT_VERSION
if VERSION not in VERSIONS:
    raise ControlPlaneError(
        f"OBJCOUNT_CONFIGSYNC_VERSION={VERSION} is not pinned in {PINS} (pinned: {', '.join(VERSIONS)})"
    )
# The objects of Config Sync's `manifests/` a release installs, in order (its base kustomization, less
# the resource-group controller). The otel-collector Deployment (config-management-monitoring) runs the
# same OpenTelemetry Collector as each reconciler Pod's otel-agent, which exports to it.
# The CRDs of what we read and write (RootSync, RepoSync, ResourceGroup), first.
RSYNC_CRD_FILES = ("rootsync-crd.yaml", "reposync-crd.yaml", "resourcegroup-crd.yaml")
CRD_FILES = (
    *RSYNC_CRD_FILES,
    "cluster-selector-crd.yaml",
    "cluster-registry-crd.yaml",
    "hierarchyconfig-crd.yaml",
    "namespace-selector-crd.yaml",
)
OBJECT_FILES = (
    "cs-namespaces.yaml",
    "container-default-limits.yaml",
    "ns-reconciler-cluster-scope-cluster-role.yaml",
    "ns-reconciler-base-cluster-role.yaml",
    "root-reconciler-base-cluster-role.yaml",
    "otel-agent-cm.yaml",
    "otel-agent-reconciler-cm.yaml",
    "reconciler-manager-service-account.yaml",
    "templates/reconciler-manager-configmap.yaml",
    "templates/otel-collector.yaml",
    "templates/reconciler-manager.yaml",
)
_RESOURCES = {
    "Namespace": kubeapi.NAMESPACE,
    "LimitRange": kubeapi.Resource("", "v1", "limitranges", "LimitRange"),
    "ClusterRole": kubeapi.Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole"),
    "ClusterRoleBinding": kubeapi.Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding"
    ),
    "ServiceAccount": kubeapi.Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "ConfigMap": kubeapi.Resource("", "v1", "configmaps", "ConfigMap"),
    "Deployment": kubeapi.DEPLOYMENT,
    "Service": kubeapi.Resource("", "v1", "services", "Service"),
    "Secret": kubeapi.Resource("", "v1", "secrets", "Secret"),
    "Role": kubeapi.Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": kubeapi.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "NetworkPolicy": kubeapi.Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    "MutatingWebhookConfiguration": kubeapi.Resource(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration"
    ),
    "ValidatingAdmissionPolicy": kubeapi.Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
    ),
    "ValidatingAdmissionPolicyBinding": kubeapi.Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
    ),
}
SIDECAR_MANIFESTS = REPO_ROOT / "manifests" / "sidecar"
GUARD_MANIFEST = REPO_ROOT / "manifests" / "rbac" / "guard.yaml"
CLUSTER_MANIFESTS = REPO_ROOT / "manifests" / "cluster"
WEBHOOK_CONFIGURATION = "objcount-sidecar"
WEBHOOK_TLS_SECRET = "objcount-webhook-tls"
WEBHOOK_NAME = "objcount-webhook"  # its Deployment, Service and Pods' app.kubernetes.io/name
RECONCILER_MANAGER_TIMEOUT = 120  # seconds
WEBHOOK_READY_TIMEOUT = 100  # seconds; within kubectl's own 120 s (NodeStack.kubectl)
SIDECAR_TEMPLATE = "objcount-sidecar-template"  # the ConfigMap the webhook reads its template from


@dataclass(frozen=True)
class ConfigSyncBuild:
    """A cache entry of build_configsync.sh: `bin/reconciler`, `bin/reconciler-manager`, `manifests/`,
    and `PIN` (the release it was built from)."""

    root: Path

    @property
    def version(self) -> str:
        pin = dict(line.split(" ", 1) for line in (self.root / "PIN").read_text().splitlines() if " " in line)
        return pin["version"]

    @property
    def reconciler(self) -> Path:
        return self.root / "bin" / "reconciler"

    @property
    def reconciler_manager(self) -> Path:
        return self.root / "bin" / "reconciler-manager"

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"


def build_configsync(version: str = VERSION) -> ConfigSyncBuild:
    """Build or reuse one pinned release's binaries (`OBJCOUNT_CS_DIR` names a ready cache entry to use
    instead, for the release it was built from)."""
    cached = os.environ.get("OBJCOUNT_CS_DIR")
    if cached and ConfigSyncBuild(Path(cached)).version == version:
        return ConfigSyncBuild(Path(cached))
    hint = " The source comes from the archives in OBJCOUNT_CONFIGSYNC_ARCHIVES, else from git."
    return ConfigSyncBuild(run_build_script(BUILD_SCRIPT, f"Config Sync {version}", hint, version))


def build_git_sync() -> Path:
    """Build or reuse the pinned git-sync (`gitsync-pin`); the directory holding `git-sync`."""
    hint = " The source comes from the archive in OBJCOUNT_GITSYNC_ARCHIVES, else from git."
    return run_build_script(GIT_SYNC_BUILD_SCRIPT, "git-sync", hint)


def build_otelcol() -> Path:
    """Build or reuse the OpenTelemetry Collector of Config Sync's Pods; the directory holding
    `otelcontribcol`."""
    return run_build_script(OTELCOL_BUILD_SCRIPT, "the OpenTelemetry Collector")


def install_rsync_crds(api: kubeapi.KubeApi, build: ConfigSyncBuild | None = None) -> None:
    """Config Sync's own RootSync, RepoSync and ResourceGroup CRDs, as released (we ship none): for an
    API server that runs none of Config Sync (the service's tests, benchmarks and profiling)."""
    build = build or build_configsync()
    for name in RSYNC_CRD_FILES:
        install_crds(api, manifests_in(build.manifests / name))


def release_images(version: str) -> dict[str, str]:
    """The images the release's manifests name, by the placeholder its build replaces (as its Makefile's
    `sed` does): Config Sync's own from the pinned source, and our stand-ins (see controlplane.images)."""
    return {
        "RECONCILER_MANAGER_IMAGE_NAME": f"{CONFIGSYNC_REGISTRY}/reconciler-manager:{version}",
        "RECONCILER_IMAGE_NAME": f"{CONFIGSYNC_REGISTRY}/reconciler:{version}",
        "GIT_SYNC_IMAGE_NAME": GIT_SYNC_IMAGE,
        "OTELCONTRIBCOL_IMAGE_NAME": OTEL_IMAGE,
    }


def released_objects(path: Path, images: Mapping[str, str]) -> Iterator[JSON]:
    """The objects of one of Config Sync's manifests with its image placeholders replaced."""
    text = path.read_text()
    for placeholder, image in images.items():
        text = text.replace(placeholder, image)
    for document in yaml.safe_load_all(text):
        if document and document.get("kind") == "List":
            yield from document.get("items", [])
        elif document:
            yield document


def install_config_sync(
    api: kubeapi.KubeApi,
    build: ConfigSyncBuild,
    *,
    polling_period: str,
    images: Mapping[str, str] | None = None,
) -> None:
    """Create Config Sync's CRDs and objects as released (existing ones are left as they are), naming
    `images` where the release names its images (placeholders are left where no node runs them)."""
    for name in CRD_FILES:
        install_crds(api, manifests_in(build.manifests / name))
    for name in OBJECT_FILES:
        for item in released_objects(build.manifests / name, images or {}):
            resource = _RESOURCES[item["kind"]]
            with contextlib.suppress(kubeapi.Conflict):
                api.create(resource, item["metadata"].get("namespace"), item)
    settings = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "reconciler-manager", "namespace": NAMESPACE},
        "data": {"RECONCILER_POLLING_PERIOD": polling_period},
    }
    with contextlib.suppress(kubeapi.Conflict):
        api.create(_RESOURCES["ConfigMap"], NAMESPACE, settings)


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
        _RESOURCES["MutatingWebhookConfiguration"], None, WEBHOOK_CONFIGURATION, ca_bundle, patch_type="json"
    )


def install_guard(api: kubeapi.KubeApi) -> None:
    """Our admission policy (part of both installs): what our identities may change. It matches only
    them, so Config Sync runs under it as without it."""
    for item in manifests_in(GUARD_MANIFEST):
        create_or_replace(api, item)


def install_cluster(api: kubeapi.KubeApi) -> None:
    """The README's cluster-mode installation, `kubectl apply -k manifests/cluster` (our roles, their
    bindings to our ServiceAccount, the Deployment), by the API rather than by kubectl."""
    for item in kustomization_objects(CLUSTER_MANIFESTS):
        create_or_replace(api, item)


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
        api.delete(_RESOURCES["MutatingWebhookConfiguration"], None, WEBHOOK_CONFIGURATION)


def sidecar_template_text(env: Mapping[str, str] | None = None) -> str:
    """The sidecar template of the shipped ConfigMap (what the webhook's Pod has mounted), with `env` set
    in the container's environment (as a user edits that ConfigMap to set the sidecar's settings)."""
    (configmap,) = manifests_in(SIDECAR_MANIFESTS / "sidecar-template.yaml")
    text: str = configmap["data"]["sidecar.yaml"]
    if not env:
        return text
    template = yaml.safe_load(text)
    kept = [e for e in template["container"]["env"] if e["name"] not in env]
    template["container"]["env"] = kept + [{"name": name, "value": value} for name, value in env.items()]
    return yaml.safe_dump(template, sort_keys=False)


def _base64_file(path: Path) -> str:
    return base64.b64encode(path.read_bytes()).decode()


def create_or_replace(api: kubeapi.KubeApi, item: JSON) -> None:
    """As `kubectl apply` for objects only we write: create, else replace the stored one."""
    resource = _RESOURCES[item["kind"]]
    namespace, name = item["metadata"].get("namespace"), item["metadata"]["name"]
    try:
        api.create(resource, namespace, item)
    except kubeapi.Conflict:
        current = api.get(resource, namespace, name)
        api.replace(
            resource,
            namespace,
            name,
            {
                **item,
                "metadata": {**item["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]},
            },
        )


def configsync_node_images(build: ConfigSyncBuild) -> list[images.Image]:
    """Config Sync's images for the real node: its own from the pinned source, git-sync and the
    OpenTelemetry Collector each from its pinned release (see controlplane.images)."""
    return [
        *images.configsync_images(build.root / "bin", build.version),
        images.git_sync_image(build_git_sync()),
        images.otel_image(build_otelcol()),
    ]


@dataclass
class NodeConfigSync:
    """Config Sync on the real node: every Pod run by the kubelet from the images above, and a git server
    on the node's network that each RSync's git-sync fetches from. Tests write commits with git."""

    stack: NodeStack
    build: ConfigSyncBuild
    polling_period: str = "2s"
    api: kubeapi.KubeApi | None = None
    git: GitServer | None = None

    def start(self) -> NodeConfigSync:
        self.api = kubeapi.KubeApi.connect(str(self.stack.plane.kubeconfig))
        try:
            self.git = GitServer(self.stack.sandbox, self.stack.sandbox.work_dir / "git").start()
            install_config_sync(
                self.api,
                self.build,
                polling_period=self.polling_period,
                images=release_images(self.build.version),
            )
            install_guard(self.api)  # as a user who installed us has it: Config Sync must run under it
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.git is not None:
            self.git.stop()
        if self.api is not None:
            self.api.close()

    def repository(self, key: RSyncKey) -> str:
        return f"{key.kind.lower()}-{key.namespace}-{key.name}"

    def rsync(self, key: RSyncKey, *, sync_dir: str = "config") -> JSON:
        """A RootSync or RepoSync of its own repository on the node's git server (unstructured for a
        RootSync, as the tests' objects are)."""
        assert self.git is not None
        body = _rsync(key.kind, key.namespace, key.name, sync_dir)
        body["spec"]["git"]["repo"] = self.git.url(self.repository(key))
        if key.kind == "RootSync":
            body["spec"]["sourceFormat"] = "unstructured"
        return body

    def commit(self, key: RSyncKey, files: Mapping[str, str | None], *, sync_dir: str = "config") -> str:
        """Commit `files` (names relative to the sync directory; None removes one) with git; its hash."""
        assert self.git is not None
        return self.git.commit(
            self.repository(key), {f"{sync_dir}/{name}": text for name, text in files.items()}
        )

    def pods(self, selector: str) -> list[JSON]:
        assert self.api is not None
        pods = orjson.loads(self.api.list_page(kubeapi.POD, NAMESPACE, label_selector=selector))["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def reconciler_pod(self, key: RSyncKey) -> Pod | None:
        """The reconciler Pod of an RSync (None while there is none)."""
        assert self.api is not None
        return reconciler_pod(self.api, NAMESPACE, key)

    def reconciler_manager_running(self) -> bool:
        return any(container_running(p, "reconciler-manager") for p in self.pods("app=reconciler-manager"))

    def install_sidecar(self, cert_dir: Path, sidecar_env: Mapping[str, str] | None = None) -> None:
        """The README's sidecar install, the webhook served by its own Pods behind its Service; returns
        once its rollout is complete (both Pods pass their readiness probe, run by the kubelet). The
        webhook reads the sidecar template when it starts, so a webhook installed before is restarted,
        as a user does after editing the template. A reconciler Pod created before the install starts
        without the sidecar (the webhook fails open)."""
        assert self.api is not None
        installed_before = bool(self.pods(f"app.kubernetes.io/name={WEBHOOK_NAME}"))
        install_sidecar(self.api, cert_dir, sidecar_env=sidecar_env)
        deployment = f"deployment/{WEBHOOK_NAME}"
        if installed_before:
            self.stack.kubectl("rollout", "restart", "-n", NAMESPACE, deployment)
        rollout = self.stack.kubectl(
            "rollout",
            "status",
            "-n",
            NAMESPACE,
            deployment,
            f"--timeout={WEBHOOK_READY_TIMEOUT}s",
            check=False,
        )
        if rollout.returncode != 0:
            described = self.stack.kubectl(
                "describe",
                "pods",
                "-n",
                NAMESPACE,
                "-l",
                f"app.kubernetes.io/name={WEBHOOK_NAME}",
                check=False,
            )
            raise TimeoutError(
                f"the webhook's rollout did not complete: {rollout.stderr}\n{described.stdout[-3000:]}"
            )


def pod_ready(pod: JSON) -> bool:
    """The Pod's Ready condition is True (every container passes its readiness probe)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def rsync_gone(api: kubeapi.KubeApi, key: RSyncKey) -> bool:
    """The RSync is deleted (Config Sync's finalizers, if any, have run)."""
    try:
        api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)
    except kubeapi.NotFound:
        return True
    return False


def synced(rsync: JSON, commit: str) -> bool:
    """The RSync's reconciler reports `commit` synced: fetched, applied and pruned, without errors."""
    progress = sync_progress(cast(RSync, rsync))
    done = block_of(block_of(rsync, "status"), "sync").get("commit") == commit
    return progress.reported and progress.pending is None and done


def container_running(pod: JSON, container: str) -> bool:
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s["name"] == container and "running" in (s.get("state") or {}) for s in statuses)


def rootsync(name: str, *, sync_dir: str = "config") -> JSON:
    """A RootSync of an unreachable git repository in unstructured format, for an API server where no
    reconciler runs (on the real node, NodeConfigSync.rsync names its git server)."""
    body = _rsync("RootSync", NAMESPACE, name, sync_dir)
    body["spec"]["sourceFormat"] = "unstructured"
    return body


def reposync(namespace: str, name: str, *, sync_dir: str = "config") -> JSON:
    return _rsync("RepoSync", namespace, name, sync_dir)


def grant_reposync(api: kubeapi.KubeApi, namespace: str, name: str) -> None:
    """The RoleBinding Config Sync's documentation has a user create so that a RepoSync's reconciler may
    manage objects in its namespace (the reconciler-manager grants it only what it needs for itself)."""
    binding = {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "syncs-repo", "namespace": namespace},
        "subjects": [
            {
                "kind": "ServiceAccount",
                "name": reconciler_name(RSyncKey("RepoSync", namespace, name)),
                "namespace": NAMESPACE,
            }
        ],
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "admin"},
    }
    resource = kubeapi.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding")
    with contextlib.suppress(kubeapi.Conflict):
        api.create(resource, namespace, binding)


def _rsync(kind: str, namespace: str, name: str, sync_dir: str) -> JSON:
    return {
        "apiVersion": "configsync.gke.io/v1beta1",
        "kind": kind,
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "sourceType": "git",
            "git": {
                "repo": "https://git.example.invalid/config.git",
                "branch": "main",
                "dir": sync_dir,
                "auth": "none",
            },
        },
    }


@contextlib.contextmanager
def running_config_sync_on_node(version: str = VERSION) -> Iterator[NodeConfigSync]:
    """Build what is missing, start the stack with a real node and Config Sync `version` on it (its
    reconciler-manager running), stop and remove it all on exit."""
    build = build_configsync(version)
    with running_node_stack(configsync_node_images(build)) as stack:
        config_sync = NodeConfigSync(stack, build).start()
        try:
            deadline = time.monotonic() + RECONCILER_MANAGER_TIMEOUT
            while not config_sync.reconciler_manager_running():
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"the reconciler-manager Pod is not running after {RECONCILER_MANAGER_TIMEOUT} s:\n"
                        + stack.kubectl("describe", "pods", "-n", NAMESPACE, check=False).stdout[-3000:]
                    )
                time.sleep(0.2)
            yield config_sync
        finally:
            config_sync.stop()
