"""Install CRDs (Config Sync's released ones: we ship none) and sample Config Sync objects into a cluster
(the local one, or any other), and write commits as git-sync would.

Used by the test fixtures, `make run` and the profiles. The sample objects look like what Config Sync
creates: an RSync, its inventory ResourceGroup with the real labels, and its reconciler Deployment with
the default containers and resources (DESIGN.md 2.4).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from inventory.core.ids import (
    RECONCILER_CONTAINER,
    RECONCILER_NAMESPACE,
    RSyncKey,
    inventory_labels,
    reconciler_name,
)
from inventory.kube import kubeapi

REPO_ROOT = Path(__file__).resolve().parent.parent

JSON = dict[str, Any]


def manifests_in(path: Path) -> Iterator[JSON]:
    """Every object in the YAML files under `path`, with `List` kinds expanded."""
    files = (
        sorted(p for p in path.glob("*.yaml") if p.name != "kustomization.yaml") if path.is_dir() else [path]
    )
    for file in files:
        for document in yaml.safe_load_all(file.read_text()):
            if not document:
                continue
            if document.get("kind") == "List":
                yield from document.get("items", [])
            else:
                yield document


def install_crds(api: kubeapi.KubeClient, crds: Iterable[JSON], timeout: float = 60.0) -> None:
    """Create or replace the CRDs and wait until each is Established and served with its new schema."""
    for crd in crds:
        name = crd["metadata"]["name"]
        try:
            api.create(kubeapi.CRD, None, crd)
        except kubeapi.Conflict:
            current = api.get(kubeapi.CRD, None, name)
            crd["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            api.replace(kubeapi.CRD, None, name, crd)
        _wait_established(api, name, time.monotonic() + timeout)


def _wait_established(api: kubeapi.KubeClient, name: str, deadline: float) -> None:
    while True:
        crd = api.get(kubeapi.CRD, None, name)
        conditions = (crd.get("status") or {}).get("conditions") or []
        if any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions):
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"CRD {name} not Established: {conditions}")
        time.sleep(0.1)


def ensure_namespace(api: kubeapi.KubeClient, name: str) -> None:
    namespace = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    with contextlib.suppress(kubeapi.Conflict):
        api.create(kubeapi.NAMESPACE, None, namespace)


def rsync(key: RSyncKey, *, sync_dir: str = "config", labels: dict[str, str] | None = None) -> JSON:
    return {
        "apiVersion": kubeapi.ROOTSYNC.api_version,
        "kind": key.kind,
        "metadata": {"name": key.name, "namespace": key.namespace, "labels": labels or {}},
        "spec": {
            "sourceType": "git",
            "sourceFormat": "unstructured",
            "git": {
                "repo": "https://example.invalid/platform/config.git",
                "branch": "main",
                "dir": sync_dir,
                "auth": "none",
            },
        },
    }


def inventory_entries(count: int, *, kind: str = "ConfigMap", namespace: str = "apps") -> list[JSON]:
    return [{"group": "", "kind": kind, "namespace": namespace, "name": f"obj-{i}"} for i in range(count)]


def resourcegroup(
    key: RSyncKey, entries: int | list[JSON] = 0, *, labels: dict[str, str] | None = None
) -> JSON:
    resources = inventory_entries(entries) if isinstance(entries, int) else entries
    return {
        "apiVersion": kubeapi.RESOURCEGROUP.api_version,
        "kind": "ResourceGroup",
        "metadata": {
            "name": key.name,
            "namespace": key.namespace,
            "labels": inventory_labels(key) if labels is None else labels,
        },
        "spec": {"resources": resources},
    }


def _container(name: str, cpu: str, memory: str, limits: dict[str, str] | None = None) -> JSON:
    resources: JSON = {"requests": {"cpu": cpu, "memory": memory}}
    if limits:
        resources["limits"] = limits
    return {"name": name, "image": f"gcr.io/config-management-release/{name}:v1.19.0", "resources": resources}


def reconciler_deployment(key: RSyncKey, namespace: str = RECONCILER_NAMESPACE) -> JSON:
    """A reconciler Deployment as the reconciler manager writes it on GKE Standard (defaults of 2.4)."""
    name = reconciler_name(key)
    labels = {"app": "reconciler", "configsync.gke.io/deployment-name": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels, "annotations": {"configsync.gke.io/generation": "1"}},
                "spec": {
                    "containers": [
                        _container(RECONCILER_CONTAINER, "50m", "200Mi"),
                        _container("git-sync", "10m", "16Mi"),
                        _container("otel-agent", "10m", "100Mi", {"cpu": "1", "memory": "1Gi"}),
                    ],
                    "volumes": [{"name": "repo", "emptyDir": {}}],
                },
            },
        },
    }


def configmaps_yaml(count: int, prefix: str = "cm", namespace: str = "apps") -> str:
    """A multi-document YAML file of `count` ConfigMaps."""
    return "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {prefix}-{i}\n  namespace: {namespace}\n"
        f"data:\n  key: value-{i}\n"
        for i in range(count)
    )


def write_commit(repo_root: Path, commit: str, files: dict[str, str], *, sync_dir: str = "config") -> Path:
    """Write <repo>/source/<commit>/<sync_dir>/... and swap the `rev` link to it atomically (as git-sync)."""
    commit_dir = repo_root / "source" / commit
    for relative, text in files.items():
        path = commit_dir / sync_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    temporary = repo_root / "source" / f".rev-{commit}"
    # Relative, as git-sync writes it: the link resolves wherever the volume is mounted.
    temporary.symlink_to(commit)
    os.replace(temporary, repo_root / "source" / "rev")
    return commit_dir
