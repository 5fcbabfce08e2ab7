"""What the service sees: the RSyncs in scope, the entry counts of their inventories, and (sidecar) the
object count of the source, each cached once. Every change calls `on_change(key)` with the RSync it
concerns; the reconcile then reads `rsync(key)` and `observed(key)`.

A malformed inventory keeps its last good count (unknown is not zero, and one bad version is no reason
to forget a good one); a deleted inventory's count is forgotten.
"""

from __future__ import annotations

import functools
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Literal, cast

from autoscaler.service.metrics import TALLY
from inventory.core.counts import ObjectCounts, describe_kinds, kinds_of
from inventory.core.ids import (
    RSyncKey,
    key_from_inventory_labels,
    managed_by_config_sync_selector,
    own_inventory_selector,
)
from inventory.core.inventory_count import InventorySummary
from inventory.core.objects import RSync
from inventory.kube import kubeapi
from inventory.kube.watch import InventoryCodec, Key, ObjectCodec, RawObject, Reflector, WatchSettings
from inventory.source.source_count import SourceCount, kib_of, rejection
from inventory.source.source_watch import SourceLayout, SourceWatcher

log = logging.getLogger(__name__)

Mode = Literal["sidecar", "cluster"]


@dataclass(frozen=True)
class Scope:
    """What the service manages: its own RSync (sidecar) or every RSync it can see (cluster)."""

    mode: Mode
    rsync: RSyncKey | None = None
    inventory_selector: str = ""
    namespace: str | None = None

    @classmethod
    def sidecar(cls, key: RSyncKey) -> Scope:
        return cls("sidecar", key, own_inventory_selector(key), key.namespace)

    @classmethod
    def cluster(cls, selector: str = "", namespace: str | None = None) -> Scope:
        return cls("cluster", None, selector or managed_by_config_sync_selector(), namespace)


def keep_last_good_count(cached: InventorySummary | None, new: InventorySummary) -> InventorySummary:
    if new.count is None and cached is not None and cached.count is not None:
        return replace(new, count=cached.count, kinds=cached.kinds)
    return new


class Observer:
    def __init__(
        self,
        api: kubeapi.KubeApi,
        scope: Scope,
        on_change: Callable[[RSyncKey], None],
        *,
        source_layout: SourceLayout | None = None,
        watch_settings: WatchSettings | None = None,
    ) -> None:
        self.scope = scope
        self._on_change = on_change
        settings = watch_settings or WatchSettings()
        self._lock = threading.Lock()
        self._source: ObjectCounts | None = None  # the source's count, KiB and kinds, once counted
        # Which inventory belongs to which RSync (the counts stay in the reflector's store only).
        self._inventory_of: dict[RSyncKey, Key] = {}
        self.inventories: Reflector[InventorySummary] = Reflector(
            api,
            kubeapi.RESOURCEGROUP,
            InventoryCodec(TALLY),
            self._on_inventory,
            tally=TALLY,
            namespace=scope.namespace,
            label_selector=scope.inventory_selector,
            # Config Sync names the inventory after its RSync; a Role limited to it by `resourceNames`
            # allows a list or watch only with this selector.
            field_selector=f"metadata.name={scope.rsync.name}" if scope.rsync else "",
            settings=settings,
            keep=keep_last_good_count,
        )
        kinds = [scope.rsync.kind] if scope.rsync else list(kubeapi.RSYNC_RESOURCES)
        self.rsyncs: dict[str, Reflector[RawObject]] = {
            kind: Reflector(
                api,
                kubeapi.RSYNC_RESOURCES[kind],
                ObjectCodec(),
                functools.partial(self._on_rsync, kind),
                tally=TALLY,
                namespace=scope.namespace,
                field_selector=f"metadata.name={scope.rsync.name}" if scope.rsync else "",
                settings=settings,
            )
            for kind in kinds
        }
        self.source_watcher = (
            SourceWatcher(source_layout, self._on_source, on_linked=self._on_linked, tally=TALLY)
            if source_layout is not None and scope.rsync is not None
            else None
        )

    # ----- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        # The source watcher first: once the watches have synced the service is ready, and /healthz must
        # not find a part it checks not started yet (seen under load: ready, then "source watcher" down).
        if self.source_watcher is not None:
            self.source_watcher.start()
        for reflector in self._reflectors():
            reflector.start()

    def signal_stop(self) -> None:
        if self.source_watcher is not None:
            self.source_watcher.stop()
        for reflector in self._reflectors():
            reflector.signal_stop()

    def stop(self) -> None:
        for reflector in self._reflectors():
            reflector.stop()

    @property
    def synced(self) -> bool:
        return all(r.synced.is_set() for r in self._reflectors())

    def unhealthy(self) -> list[str]:
        broken = [f"watch {r.resource.plural}" for r in self._reflectors() if not r.alive]
        if self.source_watcher is not None and not self.source_watcher.alive:
            broken.append("source watcher")
        return broken

    def problems(self) -> list[str]:
        """Why a watched resource cannot be read, where that is no passing fault."""
        return [r.problem for r in self._reflectors() if r.problem is not None]

    def _reflectors(self) -> list[Reflector[Any]]:
        return [self.inventories, *self.rsyncs.values()]

    # ----- what is seen --------------------------------------------------------------------------------
    def rsync(self, key: RSyncKey) -> RSync | None:
        reflector = self.rsyncs.get(key.kind)
        cached = reflector.store.get((key.namespace, key.name)) if reflector else None
        return cast(RSync, cached.body) if cached else None

    def observed(self, key: RSyncKey) -> ObjectCounts:
        """The counts seen this run (None where not seen yet or never valid)."""
        with self._lock:
            inventory = self._inventory_of.get(key)
            source = self._source if key == self.scope.rsync else None
        summary = self.inventories.store.get(inventory) if inventory else None
        if summary is None:
            return replace(source or ObjectCounts(), sync=None)
        return replace(source or ObjectCounts(), sync=summary.count, sync_kinds=summary.kinds)

    def rsync_keys(self) -> list[RSyncKey]:
        """Every RSync in the caches that this service manages."""
        keys = [
            RSyncKey(kind, namespace, name)  # type: ignore[arg-type]
            for kind, reflector in self.rsyncs.items()
            for namespace, name in list(reflector.store)
        ]
        return [key for key in keys if self.manages(key)]

    def manages(self, key: RSyncKey) -> bool:
        """A sidecar manages its own RSync. The cluster controller with the default selector manages
        every RSync (one whose reconciler has not yet written an inventory too: an OOM kill in its first
        parse is seen); narrowed by `inventory_selector`, only an RSync whose inventory the selector
        matched (the RSyncs are watched unfiltered: an RSync has no label of its inventory's). Before
        this, a narrowed controller sized every RSync it saw, from the counts others had written on them
        (seen in the side-by-side run)."""
        if self.scope.rsync is not None:
            return key == self.scope.rsync
        if self.scope.inventory_selector == managed_by_config_sync_selector():
            return True
        with self._lock:
            return key in self._inventory_of

    # ----- changes -------------------------------------------------------------------------------------
    def _on_inventory(self, change: str, key: Key, summary: InventorySummary | None) -> None:
        with self._lock:
            if summary is None:
                rsync_key = self._rsync_of_deleted_inventory(key)
                self._inventory_of.pop(rsync_key, None)
            else:
                rsync_key = key_from_inventory_labels(summary.labels, summary.namespace, summary.name)
                self._inventory_of[rsync_key] = key
        self._on_change(rsync_key)

    def _rsync_of_deleted_inventory(self, key: Key) -> RSyncKey:
        if self.scope.rsync is not None:
            return self.scope.rsync
        known = next((rsync for rsync, inventory in self._inventory_of.items() if inventory == key), None)
        return known or key_from_inventory_labels({}, *key)

    def _on_rsync(self, kind: str, change: str, key: Key, obj: object) -> None:
        rsync_key = RSyncKey(kind, *key)  # type: ignore[arg-type]
        if self.manages(rsync_key):
            self._on_change(rsync_key)

    def _on_source(self, count: SourceCount) -> None:
        assert self.scope.rsync is not None
        if count.rejected:
            self._on_rejected_source(count)
            return
        source = ObjectCounts(
            count.objects,
            source_kib=kib_of(count.bytes),
            source_kinds=kinds_of(count.kinds),
            source_commit=count.commit or None,
            source_partial=bool(count.unread),
            source_crd_path_steps=count.crd_path_steps,
        )
        with self._lock:
            self._source = source
        log.info(
            "%s: source has %d objects in %d files, %d KiB; by kind: %s",
            self.scope.rsync,
            count.objects,
            count.files,
            source.source_kib,
            describe_kinds(count.kinds, most=10),
        )
        self._on_change(self.scope.rsync)

    def _on_rejected_source(self, count: SourceCount) -> None:
        """Config Sync syncs nothing of this commit: the last good source count stands, marked with why."""
        assert self.scope.rsync is not None
        reason = rejection(count)
        with self._lock:
            self._source = replace(
                self._source or ObjectCounts(), source_rejected=reason, source_reading=None
            )
        self._on_change(self.scope.rsync)

    def _on_linked(self, commit: str) -> None:
        """A commit is linked and being counted: the counts of the last one no longer say what the
        reconciler will hold (it may parse the new commit before we have counted it)."""
        assert self.scope.rsync is not None
        with self._lock:
            last = self._source or ObjectCounts()
            if last.source_commit == commit:
                return
            self._source = replace(last, source_reading=commit)
        self._on_change(self.scope.rsync)
