"""Who owns what we might write: the rules that keep the service from fighting Config Sync."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.targets import reconciler_manager_owns


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
