"""Who owns what we might write: the rules that keep the service from fighting Config Sync."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core.owners import (
    DECLARED_FIELDS_ANNOTATION,
    override_declared_by_another,
    reconciler_manager_owns,
)
from inventory.core.objects import RSync


@pytest.mark.parametrize(
    ("metadata", "owned"),
    [
        ({"name": "root-reconciler"}, False),
        ({"labels": {"app": "reconciler"}, "managedFields": [{"manager": "kubectl"}]}, False),
        ({"labels": {"configsync.gke.io/sync-kind": "RootSync"}}, True),
        ({"managedFields": [{"manager": "objcount-autoscaler"}, {"manager": "reconciler-manager"}]}, True),
        ({"labels": None, "managedFields": None}, False),
    ],
    ids=["bare", "someone-else", "labelled-by-config-sync", "applied-by-reconciler-manager", "nulls"],
)
def test_a_deployment_of_the_reconciler_manager_is_recognised(metadata: dict[str, Any], owned: bool) -> None:
    assert reconciler_manager_owns({"metadata": metadata}) is owned  # type: ignore[typeddict-item]


@pytest.mark.parametrize(
    ("declared", "held"),
    [
        (None, False),
        ('{"f:spec":{"f:git":{"f:repo":{}}}}', False),
        ('{"f:metadata":{"f:labels":{}},"f:spec":{"f:sourceType":{}}}', False),
        ('{"f:spec":{"f:override":{"f:resources":{}}}}', True),
        ('{"f:spec":{"f:override":{".":{},"f:gitSyncDepth":{}}}}', True),
        ("{not json", True),
        ('["f:spec"]', True),
    ],
    ids=[
        "not-declared",
        "git-only",
        "metadata-and-source-type",
        "override-resources",
        "override-other-field",
        "unreadable",
        "not-an-object",
    ],
)
def test_an_override_declared_by_another_belongs_to_that_sync(declared: str | None, held: bool) -> None:
    annotations = {} if declared is None else {DECLARED_FIELDS_ANNOTATION: declared}
    rsync: RSync = {"metadata": {"name": "team-a", "annotations": annotations}}
    assert (override_declared_by_another(rsync) is not None) is held


def _applied(manager: str, operation: str, fields: object) -> dict[str, Any]:
    return {"manager": manager, "operation": operation, "fieldsV1": fields}


@pytest.mark.parametrize(
    ("managed", "held"),
    [
        ([], False),
        ([_applied("configsync.gke.io", "Apply", {"f:spec": {"f:git": {"f:repo": {}}}})], False),
        ([_applied("configsync.gke.io", "Apply", {"f:spec": {"f:override": {"f:logLevels": {}}}})], True),
        ([_applied("configsync.gke.io", "Apply", {"f:spec": {"f:override": {"f:resources": {}}}})], True),
        ([_applied("objcount-autoscaler", "Update", {"f:spec": {"f:override": {"f:resources": {}}}})], False),
        ([_applied("configsync.gke.io", "Update", {"f:spec": {"f:override": {}}})], False),
        ([_applied("configsync.gke.io", "Apply", "not an object")], False),
        ("not a list", False),
        ([_applied("kubectl", "Apply", {"f:spec": {"f:override": {"f:resources": {}}}})], True),
        ([_applied("kubectl", "Apply", {"f:spec": {"f:override": {"f:roleRefs": {}}}})], False),
        ([_applied("objcount-autoscaler", "Apply", {"f:spec": {"f:override": {"f:resources": {}}}})], False),
    ],
    ids=[
        "none",
        "declares-git-only",
        "declares-override-log-levels",
        "declares-override-resources",
        "our-own-update",
        "config-sync-update-not-apply",
        "unreadable-fields",
        "unreadable-list",
        "a-users-apply-of-the-resources",
        "a-users-apply-of-other-override-fields",
        "our-own-apply",
    ],
)
def test_an_override_an_applier_declares_belongs_to_that_applier(managed: object, held: bool) -> None:
    """Without Config Sync's admission webhook there is no declared-fields annotation: the declaring
    sync's server-side apply (field manager configsync.gke.io) says what it declares."""
    rsync: RSync = {"metadata": {"name": "team-a", "managedFields": managed}}  # type: ignore[typeddict-item]
    assert (override_declared_by_another(rsync) is not None) is held


GIT_ENTRY = {
    "containerName": "reconciler",
    "cpuRequest": "100m",
    "memoryRequest": "300Mi",
    "memoryLimit": "300Mi",
}
# Config Sync v1.25.0's typed Update (adding a finalizer) writes the entry back with its unset quantity.
WRITTEN_BACK = {**GIT_ENTRY, "cpuLimit": "0"}
APPLY_WITHOUT_OVERRIDE = _applied("configsync.gke.io", "Apply", {"f:spec": {"f:git": {"f:repo": {}}}})
OVERRIDE_FIELDS = {"f:metadata": {"f:finalizers": {}}, "f:spec": {"f:override": {"f:resources": {}}}}


@pytest.mark.parametrize(
    ("managed", "annotations", "reason"),
    [
        (
            [
                APPLY_WITHOUT_OVERRIDE,
                _applied("configsync.gke.io/reconciler-manager", "Update", OVERRIDE_FIELDS),
            ],
            {},
            "spec.override is applied from git by Config Sync (its managed fields): change it there",
        ),
        (
            [APPLY_WITHOUT_OVERRIDE, _applied("configsync.gke.io", "Update", OVERRIDE_FIELDS)],
            {},
            "spec.override is applied from git by Config Sync (its managed fields): change it there",
        ),
        ([_applied("configsync.gke.io/reconciler-manager", "Update", OVERRIDE_FIELDS)], {}, None),
        (
            [
                APPLY_WITHOUT_OVERRIDE,
                _applied("configsync.gke.io/reconciler-manager", "Update", OVERRIDE_FIELDS),
            ],
            {
                "objcount.dev/override-written": (
                    '{"requests":{"cpu":"100m","memory":"300Mi"},"limits":{"memory":"300Mi"}}'
                )
            },
            None,
        ),
        (
            [APPLY_WITHOUT_OVERRIDE, _applied("kubectl-edit", "Update", OVERRIDE_FIELDS)],
            {},
            None,
        ),
    ],
    ids=[
        "reconciler-manager-wrote-back-a-declared-rsync",
        "its-reconciler-wrote-back-a-declared-rsync",
        "written-back-on-an-rsync-made-by-hand",
        "written-back-our-own-override",
        "a-hand-edit-of-a-declared-rsync",
    ],
)
def test_an_override_config_sync_wrote_back_whole_is_still_declared_in_git(
    managed: list[dict[str, Any]], annotations: dict[str, str], reason: str | None
) -> None:
    """Config Sync's reconciler-manager and an RSync's own reconciler add their finalizers to a new RSync
    by an Update of the whole object: the atomic `spec.override.resources` then moves from the declaring
    apply's managed fields to that update's until the next apply takes it back (seen on the real node as
    a declared override called someone else's). On an RSync Config Sync applies from git, an override not
    ours held so is still git's; on one made by hand, or ours, the update says nothing of who declares it
    (the rule of a user's own override decides)."""
    rsync: RSync = {  # type: ignore[typeddict-item]
        "metadata": {"name": "declared-held", "managedFields": managed, "annotations": annotations},
        "spec": {"override": {"resources": [WRITTEN_BACK]}},
    }
    assert override_declared_by_another(rsync) == reason
