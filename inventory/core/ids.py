"""Names, ids and labels that tie an RSync to its inventory, its reconciler and its managed objects.

Pure functions of their arguments; the rules are Config Sync's and cli-utils' (DESIGN.md 2.2-2.4).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

RSyncKind = Literal["RootSync", "RepoSync"]

ROOT_SYNC_NAMESPACE = "config-management-system"
ROOT_SYNC_DEFAULT_NAME = "root-sync"
REPO_SYNC_DEFAULT_NAME = "repo-sync"
RECONCILER_NAMESPACE = "config-management-system"
RECONCILER_CONTAINER = "reconciler"
# The labels of a reconciler Pod: every one, and the one of its Deployment.
RECONCILER_APP = "app=reconciler"
DEPLOYMENT_NAME_LABEL = "configsync.gke.io/deployment-name"

INVENTORY_ID_LABEL = "cli-utils.sigs.k8s.io/inventory-id"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
MANAGED_BY_CONFIG_SYNC = "configmanagement.gke.io"
SYNC_NAME_LABEL = "configsync.gke.io/sync-name"
SYNC_NAMESPACE_LABEL = "configsync.gke.io/sync-namespace"
SYNC_KIND_LABEL = "configsync.gke.io/sync-kind"


@dataclass(frozen=True, order=True)
class RSyncKey:
    """Identifies one RootSync or RepoSync; the unit of work everywhere in the service."""

    kind: RSyncKind
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}"


def inventory_id(namespace: str, name: str) -> str:
    """cli-utils inventory id of an RSync's ResourceGroup (same name and namespace as the RSync)."""
    return f"{namespace}_{name}"


def inventory_labels(key: RSyncKey) -> dict[str, str]:
    """The labels Config Sync puts on an RSync's inventory ResourceGroup."""
    return {
        INVENTORY_ID_LABEL: inventory_id(key.namespace, key.name),
        MANAGED_BY_LABEL: MANAGED_BY_CONFIG_SYNC,
        SYNC_NAME_LABEL: key.name,
        SYNC_NAMESPACE_LABEL: key.namespace,
        SYNC_KIND_LABEL: key.kind,
    }


def own_inventory_selector(key: RSyncKey) -> str:
    """Label selector that matches exactly one RSync's inventory (sidecar mode)."""
    return f"{INVENTORY_ID_LABEL}={inventory_id(key.namespace, key.name)}"


def managed_by_config_sync_selector() -> str:
    """Label selector that matches every Config Sync inventory (cluster mode)."""
    return f"{MANAGED_BY_LABEL}={MANAGED_BY_CONFIG_SYNC}"


def key_from_inventory_labels(labels: Mapping[str, str], namespace: str, name: str) -> RSyncKey:
    """The RSync an inventory belongs to: from its sync-* labels, else from its own name and namespace."""
    kind = labels.get(SYNC_KIND_LABEL)
    if kind not in ("RootSync", "RepoSync"):
        kind = "RootSync" if namespace == ROOT_SYNC_NAMESPACE else "RepoSync"
    return RSyncKey(
        kind,  # type: ignore[arg-type]
        labels.get(SYNC_NAMESPACE_LABEL, namespace),
        labels.get(SYNC_NAME_LABEL, name),
    )


ROOT_SIDECAR_ACCOUNT = "objcount-sidecar"


def sidecar_account(key: RSyncKey) -> str:
    """The ServiceAccount (in config-management-system) a sidecar serving `key` acts as: one for every
    RootSync sidecar (RootSyncs are the platform's), one per RepoSync (its namespace's tenant's), whose
    Role reaches its own RepoSync only. Its token is in the Secret `<account>-token`."""
    return ROOT_SIDECAR_ACCOUNT if key.kind == "RootSync" else f"objcount-{reconciler_name(key)}"


def reconciler_pods(key: RSyncKey | None = None) -> str:
    """Label selector of the reconciler Pods: of one RSync, else every one."""
    return (
        RECONCILER_APP if key is None else f"{RECONCILER_APP},{DEPLOYMENT_NAME_LABEL}={reconciler_name(key)}"
    )


def reconciler_name(key: RSyncKey) -> str:
    """Name of the reconciler Deployment Config Sync's reconciler manager creates for an RSync."""
    if key.kind == "RootSync":
        if key.name == ROOT_SYNC_DEFAULT_NAME:
            return "root-reconciler"
        return f"root-reconciler-{key.name}"
    if key.name == REPO_SYNC_DEFAULT_NAME:
        return f"ns-reconciler-{key.namespace}"
    return f"ns-reconciler-{key.namespace}-{key.name}-{len(key.name)}"
