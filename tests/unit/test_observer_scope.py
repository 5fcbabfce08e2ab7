"""Which RSyncs the observer hands on, without a cluster (its reflectors are built, never started): the
cluster controller every one with the default selector, only those whose inventory its selector matched
when narrowed; a sidecar only its own."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.service.controller import Observer, Scope
from inventory.core.ids import RSyncKey
from inventory.core.inventory_count import InventorySummary
from inventory.kube.watch import Reflector
from inventory.source.source_watch import SourceLayout

NAMESPACE = "config-management-system"
MINE = RSyncKey("RootSync", NAMESPACE, "mine")
OTHER = RSyncKey("RootSync", NAMESPACE, "other")


def inventory(key: RSyncKey) -> InventorySummary:
    labels = {
        "configsync.gke.io/sync-kind": key.kind,
        "configsync.gke.io/sync-namespace": key.namespace,
        "configsync.gke.io/sync-name": key.name,
    }
    return InventorySummary(key.namespace, key.name, "1", labels, 10)


def observer(scope: Scope) -> tuple[Observer, list[RSyncKey]]:
    changed: list[RSyncKey] = []
    return Observer(object(), scope, changed.append), changed  # type: ignore[arg-type]  # never started


def test_the_cluster_controller_hands_on_only_rsyncs_whose_inventory_its_selector_matched() -> None:
    made, changed = observer(Scope.cluster(f"cli-utils.sigs.k8s.io/inventory-id={NAMESPACE}_mine"))
    # Both RSyncs are seen (their watch is unfiltered); only MINE's inventory matched the selector.
    made._on_rsync("RootSync", "ADDED", (NAMESPACE, "other"), {})
    made._on_rsync("RootSync", "ADDED", (NAMESPACE, "mine"), {})
    assert changed == [], "no inventory matched yet: nothing to size"
    made._on_inventory("ADDED", (NAMESPACE, "mine"), inventory(MINE))
    made._on_rsync("RootSync", "MODIFIED", (NAMESPACE, "other"), {})
    made._on_rsync("RootSync", "MODIFIED", (NAMESPACE, "mine"), {})
    assert changed == [MINE, MINE]
    assert (made.manages(MINE), made.manages(OTHER)) == (True, False)
    # Its inventory deleted (the RSync gone, or out of the selection): no longer managed.
    made._on_inventory("DELETED", (NAMESPACE, "mine"), None)
    assert not made.manages(MINE)


def test_a_sidecar_hands_on_its_own_rsync_only() -> None:
    made, changed = observer(Scope.sidecar(MINE))
    made._on_rsync("RootSync", "ADDED", (NAMESPACE, "other"), {})
    made._on_rsync("RootSync", "ADDED", (NAMESPACE, "mine"), {})
    assert changed == [MINE]
    assert (made.manages(MINE), made.manages(OTHER)) == (True, False)


def test_the_cluster_controller_with_the_default_selector_manages_every_rsync_inventory_or_not() -> None:
    made, changed = observer(Scope.cluster())
    made._on_rsync("RootSync", "ADDED", (NAMESPACE, "other"), {})
    assert changed == [OTHER], "before its first inventory too (an OOM kill in its first parse)"
    assert made.manages(MINE)


def test_a_sidecar_is_healthy_from_the_moment_its_watches_can_sync(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Its source watcher starts before the watches: once a watch has synced (the service is ready),
    nothing /healthz checks is still to be started (seen under load: ready, then "source watcher" down).
    Here each watch, as it starts, finds the observer healthy but for the watches themselves."""
    made = Observer(object(), Scope.sidecar(MINE), [].append, source_layout=SourceLayout(tmp_path))  # type: ignore[arg-type]
    seen: list[list[str]] = []
    monkeypatch.setattr(Reflector, "start", lambda self: seen.append(made.unhealthy()))
    try:
        made.start()
    finally:
        made.signal_stop()
    assert seen, "the watches were started"
    assert all(all(part.startswith("watch ") for part in broken) for broken in seen), seen
