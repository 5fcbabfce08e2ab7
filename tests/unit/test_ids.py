"""Id and label rules (DESIGN.md 2.2-2.4)."""

from __future__ import annotations

import pytest

from inventory.core.ids import (
    RSyncKey,
    inventory_id,
    inventory_labels,
    key_from_inventory_labels,
    own_inventory_selector,
    reconciler_name,
)

# From ../shared/data/package-id-examples.md (worked examples of Config Sync's rule).
PACKAGE_ID_EXAMPLES = [
    ("root-sync", "config-management-system", "RootSync", "root-sync.config-management-system.RootSync"),
    ("repo-sync", "bookstore", "RepoSync", "repo-sync.bookstore.RepoSync"),
    (
        "a-rather-long-rootsync-name-for-platform",
        "config-management-system",
        "RootSync",
        "a-rather-long-rootsync-name-for-platform.config-manag-2304113b",
    ),
    (
        "payments-team-sync",
        "payments-production-europe-west1-namespace",
        "RepoSync",
        "payments-team-sync.payments-production-europe-west1-n-c4b24bd2",
    ),
]


def test_inventory_labels_and_selector() -> None:
    key = RSyncKey("RepoSync", "bookstore", "repo-sync")
    labels = inventory_labels(key)
    assert (
        labels["cli-utils.sigs.k8s.io/inventory-id"]
        == inventory_id("bookstore", "repo-sync")
        == "bookstore_repo-sync"
    )
    assert labels["app.kubernetes.io/managed-by"] == "configmanagement.gke.io"
    assert labels["configsync.gke.io/sync-kind"] == "RepoSync"
    assert own_inventory_selector(key) == "cli-utils.sigs.k8s.io/inventory-id=bookstore_repo-sync"
    assert key_from_inventory_labels(labels, "bookstore", "repo-sync") == key


def test_key_from_unlabelled_inventory_falls_back_to_its_location() -> None:
    assert key_from_inventory_labels({}, "config-management-system", "root-sync").kind == "RootSync"
    assert key_from_inventory_labels({}, "shop", "repo-sync") == RSyncKey("RepoSync", "shop", "repo-sync")


@pytest.mark.parametrize(
    ("key", "expected"),
    [
        (RSyncKey("RootSync", "config-management-system", "root-sync"), "root-reconciler"),
        (RSyncKey("RootSync", "config-management-system", "platform"), "root-reconciler-platform"),
        (RSyncKey("RepoSync", "shop", "repo-sync"), "ns-reconciler-shop"),
        (RSyncKey("RepoSync", "shop", "payments"), "ns-reconciler-shop-payments-8"),
    ],
)
def test_reconciler_deployment_names(key: RSyncKey, expected: str) -> None:
    assert reconciler_name(key) == expected
