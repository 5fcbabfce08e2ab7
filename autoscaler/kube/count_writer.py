"""Write object counts to an RSync: our annotations, or (opt-in) its status subresource.

Annotations by default: Config Sync (v1.22.0 and before) defines no count fields in the RSync status and
its reconciler writes the status with typed updates, which would erase them even where a CRD defined
them. `counts_in_status` is for a future Config Sync that defines `status.source.objectCount` and
`status.sync.objectCount`: only those two are then sent (a merge patch on the status subresource), so no
other writer's fields are touched. A write the server drops (a CRD without those fields) is detected from
the response and reported as fallen back: the counts went to annotations, and the caller keeps writing
them there for that RSync.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import cast

from autoscaler.core.annotations import (
    annotation_counts,
    annotation_patch,
    count_annotations,
    status_counts,
    status_patch,
)
from autoscaler.core.written import CountsWritten
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from inventory.core.objects import RSync
from inventory.kube import kubeapi


@dataclass
class CountWriter:
    api: kubeapi.KubeApi
    in_status: bool = False

    def write(
        self,
        key: RSyncKey,
        held: tuple[ObjectCounts, ObjectCounts],
        desired: ObjectCounts,
        *,
        in_annotations: bool = False,
    ) -> CountsWritten:
        """Make the RSync hold `desired` (its known counts); `held`: what its latest cached body holds, in
        its status and in our annotations. What became of it is said by the executor
        (`said.of_counts_written`)."""
        in_status, annotated = held
        if in_annotations or not self.in_status:
            return CountsWritten(self._write_annotations(key, annotated, desired))
        # The status has no field for the source's KiB and kinds: they stay in annotations either way.
        counts = replace(desired, source_kib=None, source_kinds=None, source_crd_path_steps=None)
        kib_only = ObjectCounts(
            source_kib=desired.source_kib,
            source_kinds=desired.source_kinds,
            source_crd_path_steps=desired.source_crd_path_steps,
        )
        if not counts.differs_where_known(in_status):
            return CountsWritten(self._write_annotations(key, annotated, kib_only))
        written = self._patch(key, status_patch(counts), subresource="status")
        if written is None:
            return CountsWritten()
        if counts.differs_where_known(status_counts(written)):  # pruned: the CRD lacks the fields
            return CountsWritten(
                self._write_annotations(key, annotation_counts(written), desired), fell_back=True
            )
        return CountsWritten(("status", *self._write_annotations(key, annotation_counts(written), kib_only)))

    def _write_annotations(self, key: RSyncKey, held: ObjectCounts, desired: ObjectCounts) -> tuple[str, ...]:
        if not desired.differs_where_known(held):
            return ()
        if self._patch(key, annotation_patch(count_annotations(desired))) is None:
            return ()
        return ("annotations",)

    def _patch(
        self, key: RSyncKey, body: Mapping[str, object], subresource: str | None = None
    ) -> RSync | None:
        """One merge patch (no resourceVersion: it never conflicts); None when the RSync is gone. A
        failure is raised: the reconcile ends `failed` and the work queue writes again after its
        backoff (no worker waits in between)."""
        resource = kubeapi.RSYNC_RESOURCES[key.kind]
        try:
            written = self.api.patch(resource, key.namespace, key.name, body, subresource=subresource)
        except kubeapi.NotFound:
            return None
        return cast(RSync, written)
