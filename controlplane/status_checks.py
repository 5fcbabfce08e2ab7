"""Predicates on objects as the API server returns them, which the stack and the tests poll: an RSync
has synced a commit or is gone, a Pod is Ready, a container is running."""

from __future__ import annotations

from typing import cast

from controlplane.seed import JSON
from inventory.core.ids import RSyncKey
from inventory.core.objects import RSync, block_of
from inventory.core.sync_progress import sync_progress
from inventory.kube import kubeapi


def pod_ready(pod: JSON) -> bool:
    """The Pod's Ready condition is True (every container passes its readiness probe)."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def rsync_gone(api: kubeapi.KubeClient, key: RSyncKey) -> bool:
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
    """The Pod's status reports `container` running."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any(s["name"] == container and "running" in (s.get("state") or {}) for s in statuses)


def any_container_running(pods: list[JSON]) -> bool:
    """A container of one of `pods` is running."""
    return any(
        "running" in (s.get("state") or {})
        for pod in pods
        for s in (pod.get("status") or {}).get("containerStatuses") or []
    )


def most_restarts(pods: list[JSON]) -> int:
    """The most restarts the kubelet has made of one container of `pods` (0 without a Pod)."""
    return max(
        (
            s.get("restartCount", 0)
            for pod in pods
            for s in (pod.get("status") or {}).get("containerStatuses") or []
        ),
        default=0,
    )
