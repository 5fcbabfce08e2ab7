"""Object counts: what the source names and what the inventory holds. Pure.

Unknown is not zero: a count is `None` until it has been observed (a synced inventory cache, a parsed
source) or restored (where they are stored on the RSync: autoscaler.annotations). Writing merges what
was observed over what was stored, so missing information never lowers a stored count.
"""

from __future__ import annotations

from dataclasses import dataclass


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
