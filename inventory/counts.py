"""Object counts and where they live on an RSync. Pure: plain data in, plain data out.

Unknown is not zero: a count is `None` until it has been observed (a synced inventory cache, a parsed
source) or restored (from the RSync's status or, where the CRD prunes the status fields, from its
annotations). Writing merges what was observed over what was stored, so missing information never
lowers a stored count.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

SOURCE_ANNOTATION = "objcount.dev/source-object-count"
SYNC_ANNOTATION = "objcount.dev/sync-object-count"
# Published by the autoscaler for people and scripts (JSON of a container `resources` block).
RECOMMENDED_ANNOTATION = "objcount.dev/recommended-resources"
APPLIED_ANNOTATION = "objcount.dev/applied-resources"


@dataclass(frozen=True)
class ObjectCounts:
    source: int | None = None
    sync: int | None = None

    def over(self, stored: ObjectCounts) -> ObjectCounts:
        """These counts where known, the stored ones where not."""
        return ObjectCounts(
            self.source if self.source is not None else stored.source,
            self.sync if self.sync is not None else stored.sync,
        )

    @property
    def known(self) -> bool:
        return self.source is not None and self.sync is not None

    @property
    def target(self) -> int | None:
        """max(source, sync) over the known counts; None when neither is known."""
        values = [v for v in (self.source, self.sync) if v is not None]
        return max(values) if values else None

    def differs_where_known(self, other: ObjectCounts) -> bool:
        """True when a known count of ours is not what `other` has."""
        return (self.source is not None and self.source != other.source) or (
            self.sync is not None and self.sync != other.sync
        )


# A stored count is a decimal string of ASCII digits in annotations (`str.isdigit` also accepts "²" and
# other digits `int` refuses); more than 12 digits is no real inventory and is refused as unreadable.
_COUNT_TEXT = re.compile(r"[0-9]{1,12}")
_MAX_COUNT = 10**12 - 1


def _count(value: Any) -> int | None:
    """A stored count: a non-negative integer (annotations hold it as a decimal string); None when the
    value is not one (unknown, never zero)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and _COUNT_TEXT.fullmatch(value):
        return int(value)
    if isinstance(value, int) and 0 <= value <= _MAX_COUNT:
        return value
    return None


def _block(mapping: Mapping[str, Any] | None, name: str) -> Mapping[str, Any]:
    value = (mapping or {}).get(name)
    return value if isinstance(value, Mapping) else {}


def status_counts(rsync: Mapping[str, Any]) -> ObjectCounts:
    status = _block(rsync, "status")
    return ObjectCounts(
        _count(_block(status, "source").get("objectCount")), _count(_block(status, "sync").get("objectCount"))
    )


def annotation_counts(rsync: Mapping[str, Any]) -> ObjectCounts:
    annotations = _block(_block(rsync, "metadata"), "annotations")
    return ObjectCounts(_count(annotations.get(SOURCE_ANNOTATION)), _count(annotations.get(SYNC_ANNOTATION)))


def restored_counts(rsync: Mapping[str, Any]) -> ObjectCounts:
    """What a restarted service starts from: the status counts, else the annotation fallback."""
    return status_counts(rsync).over(annotation_counts(rsync))


def status_patch(counts: ObjectCounts) -> dict[str, Any]:
    """A merge patch for the status subresource that sets only the known objectCount fields."""
    status: dict[str, Any] = {}
    if counts.source is not None:
        status["source"] = {"objectCount": counts.source}
    if counts.sync is not None:
        status["sync"] = {"objectCount": counts.sync}
    return {"status": status}


def annotation_patch(counts: ObjectCounts) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if counts.source is not None:
        annotations[SOURCE_ANNOTATION] = str(counts.source)
    if counts.sync is not None:
        annotations[SYNC_ANNOTATION] = str(counts.sync)
    return {"metadata": {"annotations": annotations}}
