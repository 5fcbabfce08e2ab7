"""Inventory on the real API server: scoped watches, counts recorded on the RSync, restarts, races."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

import pytest
from prometheus_client import REGISTRY

from autoscaler.core.annotations import annotation_counts, restored_counts, status_counts
from autoscaler.core.observation import RSyncView
from autoscaler.core.written import CountsWritten
from autoscaler.kube.port import KubePort
from autoscaler.kube.targets import RecommendTarget
from autoscaler.service.controller import Controller, Scope
from autoscaler.service.metrics import TALLY
from controlplane.seed import configmaps_yaml, resourcegroup, rsync, write_commit
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey, own_inventory_selector
from inventory.core.objects import RSync, annotations_of
from inventory.kube import kubeapi
from inventory.kube.watch import InventoryCodec, Reflector, WatchSettings
from inventory.source.source_watch import SourceLayout
from tests.helpers import Sampler, kib, wait_for

FAST = WatchSettings(server_timeout=60, inactivity_timeout=20, backoff_initial=0.05, backoff_max=1.0)


def read_counts(api: kubeapi.KubeClient, key: RSyncKey) -> ObjectCounts:
    """The counts a restarted service restores for one RSync (status, else annotations)."""
    return restored_counts(api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name))


def _recorded_counts(api: kubeapi.KubeClient, key: RSyncKey) -> ObjectCounts:
    """The recorded object counts (the source's KiB, kinds, CRDs and Pod templates are checked where a test
    is about them)."""
    return replace(
        _recorded(api, key),
        source_kib=None,
        source_kinds=None,
        source_crd_path_steps=None,
        source_workload_path_steps=None,
    )


def _recorded(api: kubeapi.KubeClient, key: RSyncKey) -> ObjectCounts:
    return annotation_counts(api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name))


C1 = {"a.yaml": configmaps_yaml(30), "sub/b.yml": configmaps_yaml(12)}
C1_COUNTS = ObjectCounts(
    42, 100, kib(*C1.values()), (("ConfigMap", 42),), source_crd_path_steps=0, source_workload_path_steps=0
)


def _metric(name: str, **labels: str) -> float:
    return REGISTRY.get_sample_value(name, labels) or 0.0


@pytest.fixture
def sidecar(
    api: kubeapi.KubeClient, namespace: str, tmp_path: Path
) -> Iterator[tuple[RSyncKey, Path, list[Controller]]]:
    """An RSync with an inventory and a source volume; controllers started by the test are stopped."""
    key = RSyncKey("RootSync", namespace, "root-sync")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key))
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(key, 100))
    write_commit(tmp_path, "c1", C1)
    controllers: list[Controller] = []
    yield key, tmp_path, controllers
    for controller in controllers:
        controller.stop()


def _start(
    api: kubeapi.KubeClient,
    key: RSyncKey,
    repo: Path,
    controllers: list[Controller],
    *,
    counts_in_status: bool = False,
) -> Controller:
    controller = Controller(
        api,
        Scope.sidecar(key),
        source_layout=SourceLayout(repo, "config"),
        watch_settings=FAST,
        counts_in_status=counts_in_status,
    ).start()
    controllers.append(controller)
    return controller


def test_sidecar_watch_never_receives_another_inventory(api: kubeapi.KubeClient, namespace: str) -> None:
    mine = RSyncKey("RootSync", namespace, "mine")
    seen: list[tuple[str, str]] = []
    reflector = Reflector(
        api,
        kubeapi.RESOURCEGROUP,
        InventoryCodec(TALLY),
        lambda change, key, obj: seen.append((change, key[1])),
        tally=TALLY,
        namespace=namespace,
        label_selector=own_inventory_selector(mine),
        settings=FAST,
    ).start()
    try:
        wait_for(reflector.synced.is_set, what="first list")
        for i in range(5):
            other = RSyncKey("RootSync", namespace, f"other-{i}")
            api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(other, i + 1))
        api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(mine, 1))
        for i in range(5):
            api.patch(kubeapi.RESOURCEGROUP, namespace, f"other-{i}", {"spec": {"resources": []}})
        # Events arrive in resourceVersion order: once this last one is seen, every earlier one was too.
        api.patch(kubeapi.RESOURCEGROUP, namespace, "mine", {"spec": {"resources": []}})
        wait_for(lambda: ("MODIFIED", "mine") in seen, what="my inventory's update")
        assert {name for _, name in seen} == {"mine"}
        assert reflector.store[(namespace, "mine")].count == 0
    finally:
        reflector.stop()


def test_counts_are_recorded_after_inventory_and_source_changes(
    api: kubeapi.KubeClient, sidecar: tuple[RSyncKey, Path, list[Controller]]
) -> None:
    key, repo, controllers = sidecar
    _start(api, key, repo, controllers)
    wait_for(lambda: _recorded_counts(api, key) == ObjectCounts(42, 100), what="initial counts")

    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 250))
    wait_for(lambda: _recorded_counts(api, key) == ObjectCounts(42, 250), what="sync count update")

    files = {"a.yaml": configmaps_yaml(70), ".hidden/x.yaml": configmaps_yaml(5, prefix="h")}
    write_commit(repo, "c2", files)
    # Hidden files are read, as the reconciler reads them (only `.git` folders are skipped).
    wait_for(lambda: _recorded_counts(api, key) == ObjectCounts(75, 250), what="source count update")
    # The source's KiB goes with its count.
    kib_of_files = kib("".join(files.values()))
    assert _recorded(api, key) == ObjectCounts(
        75, 250, kib_of_files, (("ConfigMap", 75),), source_crd_path_steps=0, source_workload_path_steps=0
    )


def _record_counts(api: kubeapi.KubeClient, key: RSyncKey) -> Sampler[ObjectCounts]:
    """Poll the stored counts in the background, to check they never go down."""
    # The API server may be restarting: its Transient errors are expected; anything else fails the test.
    return Sampler(lambda: _recorded_counts(api, key), tolerate=(kubeapi.Transient,))


def _never_lower(seen: list[ObjectCounts], floor: ObjectCounts) -> None:
    assert seen, "no status was observed"
    assert floor.source is not None
    assert floor.sync is not None
    for counts in seen:
        assert counts.source is not None, counts
        assert counts.sync is not None, counts
        assert counts.source >= floor.source, (counts, floor)
        assert counts.sync >= floor.sync, (counts, floor)


def test_restarting_the_watcher_never_lowers_a_count(
    api: kubeapi.KubeClient, sidecar: tuple[RSyncKey, Path, list[Controller]]
) -> None:
    key, repo, controllers = sidecar
    first = _start(api, key, repo, controllers)
    wait_for(lambda: _recorded_counts(api, key) == ObjectCounts(42, 100), what="initial counts")
    sampler = _record_counts(api, key)
    first.stop()
    second = _start(api, key, repo, controllers)
    wait_for(lambda: second.synced, what="restarted caches to sync")
    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 180))
    wait_for(
        lambda: _recorded_counts(api, key) == ObjectCounts(42, 180),
        what="recovery: counts caught up after the watcher restarted",
    )
    _never_lower(sampler.stop(), ObjectCounts(42, 100))


def test_concurrent_status_writer_loses_nothing(api: kubeapi.KubeClient, namespace: str) -> None:
    """Config Sync's reconciler updates the status while we write the counts: neither loses a write."""
    key = RSyncKey("RepoSync", namespace, "repo-sync")
    api.create(kubeapi.REPOSYNC, namespace, rsync(key))
    rounds = 300
    errors: list[BaseException] = []

    def other_writer() -> None:
        """Config Sync's way: read, modify the status, update with the resourceVersion; retry conflicts."""
        try:
            for i in range(1, rounds + 1):
                while True:
                    body: dict[str, Any] = api.get(kubeapi.REPOSYNC, namespace, key.name)
                    status = body.setdefault("status", {})
                    status.setdefault("sync", {})["commit"] = f"commit-{i}"
                    status["conditions"] = [{"type": "Syncing", "status": "True", "message": f"round {i}"}]
                    try:
                        api.replace(kubeapi.REPOSYNC, namespace, key.name, body, subresource="status")
                        break
                    except kubeapi.Conflict:
                        continue
        except BaseException as error:  # surfaced in the main thread
            errors.append(error)

    thread = threading.Thread(target=other_writer)
    thread.start()
    port = KubePort(api, RecommendTarget(api))
    for i in range(1, rounds + 1):
        view = RSyncView.of(cast(RSync, api.get(kubeapi.REPOSYNC, namespace, key.name)))
        assert port.write_counts(
            key, view, ObjectCounts(source=i, sync=2 * i), in_annotations=False
        ) == CountsWritten(("annotations",))
    thread.join()
    assert not errors
    final = api.get(kubeapi.REPOSYNC, namespace, key.name)["status"]
    assert final["sync"]["commit"] == f"commit-{rounds}"
    assert final["conditions"][0]["message"] == f"round {rounds}"
    assert annotation_counts(api.get(kubeapi.REPOSYNC, namespace, key.name)) == ObjectCounts(
        rounds, 2 * rounds
    )


def test_counts_in_status_where_the_crd_defines_the_fields(
    api: kubeapi.KubeClient, sidecar: tuple[RSyncKey, Path, list[Controller]], status_count_crds: None
) -> None:
    key, repo, controllers = sidecar
    _start(api, key, repo, controllers, counts_in_status=True)
    wait_for(
        lambda: status_counts(api.get(kubeapi.ROOTSYNC, key.namespace, key.name)) == ObjectCounts(42, 100),
        what="counts in the status",
    )
    # The status has no field for the source's KiB: only that is in the annotations, written after the
    # status (two writes: a cold CI run read between them).
    in_annotations = ObjectCounts(
        source_kib=C1_COUNTS.source_kib,
        source_kinds=C1_COUNTS.source_kinds,
        source_crd_path_steps=0,
        source_workload_path_steps=0,
    )
    wait_for(
        lambda: annotation_counts(api.get(kubeapi.ROOTSYNC, key.namespace, key.name)) == in_annotations,
        what="the source's KiB, kinds and path steps in the annotations",
    )
    assert read_counts(api, key) == C1_COUNTS, "a restarted service restores the counts and the KiB"


def test_counts_in_status_on_the_released_crd_go_to_annotations_and_are_restored(
    api: kubeapi.KubeClient, sidecar: tuple[RSyncKey, Path, list[Controller]]
) -> None:
    key, repo, controllers = sidecar
    fallbacks = _metric("objcount_pruned_status_fallbacks_total")
    first = _start(api, key, repo, controllers, counts_in_status=True)
    wait_for(lambda: read_counts(api, key) == C1_COUNTS, what="counts in annotations")
    body = api.get(kubeapi.ROOTSYNC, key.namespace, key.name)
    assert annotation_counts(body) == C1_COUNTS
    assert status_counts(body) == ObjectCounts()
    assert _metric("objcount_pruned_status_fallbacks_total") == fallbacks + 1

    # Restart with the inventory gone: the sync count is unknown now, which must not read as zero.
    first.stop()
    api.delete(kubeapi.RESOURCEGROUP, key.namespace, key.name)
    second = _start(api, key, repo, controllers, counts_in_status=True)
    wait_for(lambda: second.synced, what="caches to sync")
    second.reconcile(key)
    assert read_counts(api, key) == C1_COUNTS


def test_malformed_inventory_and_a_rejected_commit_keep_the_last_good_counts(
    api: kubeapi.KubeClient, sidecar: tuple[RSyncKey, Path, list[Controller]]
) -> None:
    key, repo, controllers = sidecar
    controller = _start(api, key, repo, controllers)
    wait_for(lambda: _recorded_counts(api, key) == ObjectCounts(42, 100), what="initial counts")
    malformed = _metric("objcount_malformed_inventories_total")
    rejected = _metric("objcount_source_errors_total", reason="rejected")

    entries = [{"group": "", "kind": "", "namespace": "apps", "name": "no-kind"}] * 3
    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, {"spec": {"resources": entries}})
    wait_for(lambda: _metric("objcount_malformed_inventories_total") > malformed, what="malformed metric")
    write_commit(repo, "c2", {"a.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: [unclosed\n"})
    wait_for(
        lambda: _metric("objcount_source_errors_total", reason="rejected") > rejected, what="rejected metric"
    )
    controller.reconcile(key)
    assert _recorded_counts(api, key) == ObjectCounts(42, 100)
    why = annotations_of(api.get(kubeapi.ROOTSYNC, key.namespace, key.name)).get(
        "objcount.dev/source-rejected"
    )
    assert why is not None
    assert (
        why
        == "Config Sync rejects commit c2: KNV2001 config/a.yaml: yaml: line 4: did not find expected ',' or ']'"
    )

    api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, 7))
    write_commit(repo, "c3", {"a.yaml": configmaps_yaml(9)})
    wait_for(
        lambda: _recorded_counts(api, key) == ObjectCounts(9, 7),
        what="recovery: good counts again after malformed input",
    )
