"""The RBAC a RepoSync's sidecar needs, for one RepoSync: printed by `objcount grant-reposync`, applied
by whoever creates the RepoSync (as Config Sync asks them to bind its ns-reconciler's account); the
service never creates RBAC itself. Pure.

The sidecar acts as its own ServiceAccount (`inventory.core.ids.sidecar_account`), whose token the webhook
mounts; in the RepoSync's namespace it may read and patch that one RepoSync and read its ResourceGroup
(`resourceNames`: the sidecar lists and watches them by `metadata.name`), and in
config-management-system it has the shipped reconcilers Role (its Pod, the in-place resize). The admission
policy (manifests/rbac/guard.yaml) then limits its writes to the reconciler override entry and our
annotations, like every identity of ours.
"""

from __future__ import annotations

import re
from typing import Any

from inventory.core.ids import RECONCILER_NAMESPACE, RSyncKey, sidecar_account

JSON = dict[str, Any]
LABELS = {"app.kubernetes.io/name": "objcount-autoscaler"}
RECONCILERS_ROLE = "objcount-autoscaler"  # manifests/rbac/role-reconcilers.yaml


class GrantError(ValueError):
    pass


_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def reposync_grant(namespace: str, name: str) -> list[JSON]:
    """The ServiceAccount and its token Secret, the Role on the one RepoSync and its inventory, and the
    two bindings."""
    for what, value in (("namespace", namespace), ("RepoSync name", name)):
        if not _DNS_LABEL.fullmatch(value):
            raise GrantError(f"{what} {value[:80]!r} is not a DNS label (lowercase letters, digits, '-')")
    account = sidecar_account(RSyncKey("RepoSync", namespace, name))
    subject = [{"kind": "ServiceAccount", "name": account, "namespace": RECONCILER_NAMESPACE}]
    role = f"objcount-sidecar-{name}"

    def meta(object_name: str, object_namespace: str, **extra: Any) -> JSON:
        return {"name": object_name, "namespace": object_namespace, "labels": LABELS, **extra}

    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": meta(account, RECONCILER_NAMESPACE),
            "automountServiceAccountToken": False,
        },
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/service-account-token",
            "metadata": meta(
                f"{account}-token",
                RECONCILER_NAMESPACE,
                annotations={"kubernetes.io/service-account.name": account},
            ),
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": meta(role, namespace),
            "rules": [
                {
                    "apiGroups": ["configsync.gke.io"],
                    "resources": ["reposyncs"],
                    "resourceNames": [name],
                    "verbs": ["get", "list", "watch", "patch", "update"],
                },
                {
                    "apiGroups": ["kpt.dev"],
                    "resources": ["resourcegroups"],
                    "resourceNames": [name],
                    "verbs": ["get", "list", "watch"],
                },
                # Events on the RepoSync (the series patches name the Event, not known in advance).
                {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(role, namespace),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role},
            "subjects": subject,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": meta(account, RECONCILER_NAMESPACE),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": RECONCILERS_ROLE},
            "subjects": subject,
        },
    ]
