"""`objcount clean`: remove what the service left on the RSyncs (`autoscaler.core.clean_patch`), with the
caller's own credentials, after the service is uninstalled."""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast

from autoscaler.core.clean_patch import cleanup
from autoscaler.kube.report import all_of
from inventory.core.ids import RSyncKey, RSyncKind
from inventory.core.objects import Meta
from inventory.kube import kubeapi


@dataclass(frozen=True)
class Cleaned:
    key: RSyncKey
    removed: list[str]
    kept: list[str]
    error: str | None = None  # the patch was refused (the RSync changed since it was read: run again)


def clean(api: kubeapi.KubeApi, namespace: str | None, *, dry_run: bool) -> list[Cleaned]:
    """Every RootSync and RepoSync of `namespace` (None: all) with something of ours on it, cleaned (or
    only said, with `dry_run`)."""
    cleaned: list[Cleaned] = []
    for kind, resource in kubeapi.RSYNC_RESOURCES.items():
        for rsync in all_of(api, resource, namespace):
            meta = Meta.of(rsync)
            key = RSyncKey(cast(RSyncKind, kind), meta.namespace, meta.name)
            plan = cleanup(rsync)
            if not plan.patch and not plan.kept:
                continue
            error = None
            if plan.patch and not dry_run:
                try:
                    api.patch(resource, key.namespace, key.name, plan.patch, patch_type="json")
                except kubeapi.ApiError as failure:
                    error = str(failure)
            cleaned.append(Cleaned(key, plan.removed, plan.kept, error))
    return cleaned
