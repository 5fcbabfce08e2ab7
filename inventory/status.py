"""Write object counts to an RSync: its status subresource, or annotations where the CRD prunes them.

Only `status.source.objectCount` and `status.sync.objectCount` are ever sent (a merge patch on the status
subresource), so no other writer's fields are touched. A write that the server drops (a structural
schema without those fields) is detected from the response, reported once, and from then on that RSync's
counts go to annotations.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from inventory import kubeapi
from inventory.counts import (
    ObjectCounts,
    annotation_counts,
    annotation_patch,
    restored_counts,
    status_counts,
    status_patch,
)
from inventory.ids import RSyncKey
from inventory.metrics import PRUNED_STATUS_FALLBACKS, STATUS_WRITE_ERRORS, STATUS_WRITES

log = logging.getLogger(__name__)

WriteOutcome = Literal["unchanged", "status", "annotations", "gone"]


@dataclass
class CountWriter:
    api: kubeapi.KubeApi
    attempts: int = 5
    sleep: Callable[[float], None] = time.sleep
    _annotation_mode: set[RSyncKey] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def uses_annotations(self, key: RSyncKey) -> bool:
        with self._lock:
            return key in self._annotation_mode

    def write(self, key: RSyncKey, rsync: Mapping[str, Any], desired: ObjectCounts) -> WriteOutcome:
        """Make the RSync hold `desired` (its known counts); `rsync` is its latest cached body."""
        if self.uses_annotations(key):
            return self._write_annotations(key, rsync, desired)
        if not desired.differs_where_known(status_counts(rsync)):
            return "unchanged"
        written = self._patch(key, status_patch(desired), subresource="status")
        if written is None:
            return "gone"
        if desired.differs_where_known(status_counts(written)):
            self._fall_back_to_annotations(key)
            return self._write_annotations(key, written, desired)
        STATUS_WRITES.labels("status").inc()
        log.info("%s: counts written to status: source=%s sync=%s", key, desired.source, desired.sync)
        return "status"

    def _fall_back_to_annotations(self, key: RSyncKey) -> None:
        with self._lock:
            self._annotation_mode.add(key)
        PRUNED_STATUS_FALLBACKS.inc()
        log.warning(
            "%s: the API server pruned status.*.objectCount (its CRD does not define them); "
            "keeping the counts in the %s annotations instead. Install the CRDs from manifests/crds "
            "to store them in the status.",
            key,
            "objcount.dev/*-object-count",
        )

    def _write_annotations(
        self, key: RSyncKey, rsync: Mapping[str, Any], desired: ObjectCounts
    ) -> WriteOutcome:
        if not desired.differs_where_known(annotation_counts(rsync)):
            return "unchanged"
        if self._patch(key, annotation_patch(desired)) is None:
            return "gone"
        STATUS_WRITES.labels("annotations").inc()
        log.info("%s: counts written to annotations: source=%s sync=%s", key, desired.source, desired.sync)
        return "annotations"

    def _patch(
        self, key: RSyncKey, body: dict[str, Any], subresource: str | None = None
    ) -> dict[str, Any] | None:
        """Merge-patch with retries on conflicts and transient errors; None when the RSync is gone."""
        resource = kubeapi.RSYNC_RESOURCES[key.kind]
        for attempt in range(self.attempts):
            try:
                return self.api.patch(resource, key.namespace, key.name, body, subresource=subresource)
            except kubeapi.NotFound:
                return None
            except (kubeapi.Conflict, kubeapi.Transient) as error:
                STATUS_WRITE_ERRORS.labels(type(error).__name__.lower()).inc()
                if attempt + 1 == self.attempts:
                    raise
                self.sleep(min(0.05 * 2**attempt, 2.0))
            except kubeapi.ApiError as error:
                STATUS_WRITE_ERRORS.labels(type(error).__name__.lower()).inc()
                raise
        raise AssertionError("unreachable")


def read_counts(api: kubeapi.KubeApi, key: RSyncKey) -> ObjectCounts:
    """The counts a restarted service restores for one RSync (status, else annotations)."""
    return restored_counts(api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name))
