"""`objcount grant-reposync`: the RBAC of one RepoSync's sidecar, written out by hand here."""

from __future__ import annotations

import pytest
import yaml

from autoscaler.cli import main
from autoscaler.core.grants import GrantError, reposync_grant

LABELS = {"app.kubernetes.io/name": "objcount-autoscaler"}
ACCOUNT = "objcount-ns-reconciler-team-a-apps-4"  # for RepoSync team-a/apps (reconciler name + prefix)
SUBJECT = [{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": "config-management-system"}]


def test_a_reposync_grant_reaches_that_reposync_only() -> None:
    objects = reposync_grant("team-a", "apps")
    assert [(o["kind"], o["metadata"]["namespace"], o["metadata"]["name"]) for o in objects] == [
        ("ServiceAccount", "config-management-system", ACCOUNT),
        ("Secret", "config-management-system", f"{ACCOUNT}-token"),
        ("Role", "team-a", "objcount-sidecar-apps"),
        ("RoleBinding", "team-a", "objcount-sidecar-apps"),
        ("RoleBinding", "config-management-system", ACCOUNT),
    ]
    account, secret, role, binding, reconcilers = objects
    assert account["automountServiceAccountToken"] is False
    assert secret["type"] == "kubernetes.io/service-account-token"
    assert secret["metadata"]["annotations"] == {"kubernetes.io/service-account.name": ACCOUNT}
    assert role["rules"] == [
        {
            "apiGroups": ["configsync.gke.io"],
            "resources": ["reposyncs"],
            "resourceNames": ["apps"],
            "verbs": ["get", "list", "watch", "patch", "update"],
        },
        {
            "apiGroups": ["kpt.dev"],
            "resources": ["resourcegroups"],
            "resourceNames": ["apps"],
            "verbs": ["get", "list", "watch"],
        },
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create", "patch"]},
    ]
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": "objcount-sidecar-apps",
    }
    assert reconcilers["roleRef"]["name"] == "objcount-autoscaler"
    assert binding["subjects"] == reconcilers["subjects"] == SUBJECT
    assert all(o["metadata"]["labels"] == LABELS for o in objects)


@pytest.mark.parametrize(("namespace", "name"), [("Team-A", "apps"), ("team-a", "apps/../x"), ("", "apps")])
def test_names_that_are_no_dns_labels_are_refused(namespace: str, name: str) -> None:
    with pytest.raises(GrantError, match="DNS label"):
        reposync_grant(namespace, name)


def test_the_cli_prints_the_grant_as_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["grant-reposync", "team-a", "apps"]) == 0
    assert list(yaml.safe_load_all(capsys.readouterr().out)) == reposync_grant("team-a", "apps")
    assert main(["grant-reposync", "Team-A"]) == 2
    assert "not a DNS label" in capsys.readouterr().err
