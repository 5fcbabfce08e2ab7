"""The repositories `profiles.real_repositories` measures, as composed (no cluster): the many-namespace
mixes of issue 63 give every tenant the held-out platform's shape."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from profiles.real_repositories import REPOSITORIES, documents, identity


def test_a_boutique_tenant_holds_its_namespace_quota_binding_and_the_35_objects_released() -> None:
    # The corpus is not read by the mixes without the monitoring stack.
    files = REPOSITORIES["boutique-tenants-26"](Path("/nonexistent"))
    assert len(files) == 26
    objects = [d for text in files.values() for d in documents(text)]
    kinds = Counter(str(d["kind"]) for d in objects)
    # Online Boutique v0.10.6: 12 Deployments, 12 Services, 11 ServiceAccounts; ours: a Namespace, a
    # ResourceQuota and a RoleBinding a tenant.
    assert kinds == {
        "Deployment": 26 * 12,
        "Service": 26 * 12,
        "ServiceAccount": 26 * 11,
        "Namespace": 26,
        "ResourceQuota": 26,
        "RoleBinding": 26,
    }
    assert sum(kinds.values()) == 988
    tenant = documents(files["tenants/tenant-0007.yaml"])
    assert {identity(d)[1] for d in tenant if d["kind"] != "Namespace"} == {"tenant-0007"}
    binding = next(d for d in tenant if d["kind"] == "RoleBinding")
    assert binding["subjects"] == [
        {"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": "tenant-0007-developers"}
    ]


def test_the_boutique_mixes_run_from_about_1000_to_6000_objects_with_and_without_the_monitoring_stack() -> (
    None
):
    names = [name for name in REPOSITORIES if name.startswith("boutique")]
    assert names == [
        f"boutique{stack}-tenants-{n}" for n in (26, 53, 76, 105, 158) for stack in ("", "-monitoring")
    ]
