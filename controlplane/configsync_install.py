"""Config Sync's CRDs and objects into a cluster, as a release's `manifests/` has them.

What is created is unmodified Config Sync, the release of a `ConfigSyncBuild` (controlplane.configsync_build):
the objects of its `manifests/` (CRDs, ClusterRoles, the reconciler-manager's ServiceAccount and
Deployment, `reconciler-manager-cm`) are created as they are, with the images built here where the release
names its images (see controlplane.images). One thing is set the way a user may set it: the
reconciler-manager's optional `reconciler-manager` ConfigMap (its `envFrom`) shortens
`RECONCILER_POLLING_PERIOD` so tests do not wait 15 s per commit. Not installed: the resource-group
controller (nothing here reads its output).

For an API server that runs none of Config Sync (the service's tests, benchmarks and profiling),
`install_rsync_crds` creates only its RootSync, RepoSync and ResourceGroup CRDs.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from pathlib import Path

import yaml

from controlplane.configsync_build import ConfigSyncBuild, build_configsync
from controlplane.images import CONFIGSYNC_REGISTRY, GIT_SYNC_IMAGE, OTEL_IMAGE
from controlplane.resources import RESOURCES
from controlplane.seed import JSON, install_crds, manifests_in
from inventory.kube import kubeapi

NAMESPACE = "config-management-system"
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


def install_rsync_crds(api: kubeapi.KubeClient, build: ConfigSyncBuild | None = None) -> None:
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
    api: kubeapi.KubeClient,
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
            resource = RESOURCES[item["kind"]]
            with contextlib.suppress(kubeapi.Conflict):
                api.create(resource, item["metadata"].get("namespace"), item)
    settings = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "reconciler-manager", "namespace": NAMESPACE},
        "data": {"RECONCILER_POLLING_PERIOD": polling_period},
    }
    with contextlib.suppress(kubeapi.Conflict):
        api.create(RESOURCES["ConfigMap"], NAMESPACE, settings)
