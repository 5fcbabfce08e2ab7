"""Id and label rules (DESIGN.md 2.2-2.4)."""

from __future__ import annotations

import itertools

import pytest

from inventory.core.ids import (
    RSyncKey,
    applyset_id,
    fnv1a_32,
    inventory_id,
    inventory_labels,
    key_from_inventory_labels,
    managed_object_labels,
    own_inventory_selector,
    package_id,
    reconciler_name,
    rsync_labels,
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


@pytest.mark.parametrize(("name", "namespace", "kind", "expected"), PACKAGE_ID_EXAMPLES)
def test_package_id_examples(name: str, namespace: str, kind: str, expected: str) -> None:
    assert package_id(name, namespace, kind) == expected  # type: ignore[arg-type]


def test_package_id_keeps_63_characters_and_shortens_64() -> None:
    namespace = "ns"
    name63 = "n" * (63 - len(".ns.RootSync"))
    assert package_id(name63, namespace, "RootSync") == f"{name63}.ns.RootSync"
    long_id = package_id(name63 + "x", namespace, "RootSync")
    assert len(long_id) == 62
    assert long_id[:53] == f"{name63}x.ns.RootSync"[:53]
    assert long_id[53] == "-"


def test_package_id_hash_is_zero_padded() -> None:
    # Find a long id whose hash has a leading zero nibble, then check it keeps all 8 digits.
    for i in itertools.count():
        name = f"very-long-name-for-a-sync-that-does-not-fit-{i:06d}"
        full = f"{name}.config-management-system.RootSync"
        if fnv1a_32(full.encode()) < 0x10000000:
            break
    shortened = package_id(name, "config-management-system", "RootSync")
    assert shortened.endswith(f"-0{fnv1a_32(full.encode()):07x}")
    assert len(shortened) == 62


def test_fnv1a_32_reference_values() -> None:
    # Published FNV-1a 32-bit test vectors.
    assert fnv1a_32(b"") == 0x811C9DC5
    assert fnv1a_32(b"a") == 0xE40C292C
    assert fnv1a_32(b"foobar") == 0xBF9CF968


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


def test_applyset_id_is_read_not_computed() -> None:
    assert (
        applyset_id({"metadata": {"labels": {"applyset.kubernetes.io/id": "applyset-abc-v1"}}})
        == "applyset-abc-v1"
    )
    assert applyset_id({"metadata": {}}) is None
    assert applyset_id({}) is None


def test_labels_for_watch_filtering_of_managed_objects() -> None:
    key = RSyncKey("RepoSync", "bookstore", "repo-sync")
    assert managed_object_labels(key) == {
        "config.k8s.io/owning-inventory": "bookstore_repo-sync",
        "configsync.gke.io/parent-package-id": "repo-sync.bookstore.RepoSync",
    }
    assert managed_object_labels(key, "applyset-x-v1")["applyset.kubernetes.io/part-of"] == "applyset-x-v1"
    assert rsync_labels(key) == {"configsync.gke.io/package-id": "repo-sync.bookstore.RepoSync"}
