"""RootSync and RepoSync objects for tests, and the RoleBinding a RepoSync's reconciler needs.

The objects name a git repository; on the real node `NodeConfigSync.rsync` (controlplane.configsync_node)
points them at its git server instead.
"""

from __future__ import annotations

import contextlib

from controlplane.configsync_install import NAMESPACE
from controlplane.seed import JSON
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi


def rsync_object(kind: str, namespace: str, name: str, sync_dir: str) -> JSON:
    """A RootSync or RepoSync (`kind`) of an unreachable git repository's `sync_dir`, branch `main`."""
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


def with_git_period(body: JSON, seconds: float | None) -> JSON:
    """`body` (an RSync of a git source) fetching every `seconds` (its `spec.git.period`); None leaves it
    to Config Sync's default, every 15 s."""
    if seconds is not None:
        body["spec"]["git"]["period"] = f"{round(seconds * 1000)}ms"
    return body


def rootsync(name: str, *, sync_dir: str = "config") -> JSON:
    """A RootSync of an unreachable git repository in unstructured format, for an API server where no
    reconciler runs (on the real node, NodeConfigSync.rsync names its git server)."""
    body = rsync_object("RootSync", NAMESPACE, name, sync_dir)
    body["spec"]["sourceFormat"] = "unstructured"
    return body


def reposync(namespace: str, name: str, *, sync_dir: str = "config") -> JSON:
    return rsync_object("RepoSync", namespace, name, sync_dir)


def grant_reposync(api: kubeapi.KubeClient, namespace: str, name: str) -> None:
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
