"""Object counts: what the source names and what the inventory holds. Pure.

Unknown is not zero: a count is `None` until it has been observed (a synced inventory cache, a parsed
source) or restored (where they are stored on the RSync: autoscaler.core.annotations). Writing merges what
was observed over what was stored, so missing information never lowers a stored count.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, replace

# Objects by kind, as sorted (kind, count) pairs (hashable, one order).
Kinds = tuple[tuple[str, int], ...]
MAX_KINDS = 50  # kinds kept (and recorded); objects of the others are sized at the cost of any kind
MAX_KIND_LENGTH = 253  # a longer name is no Kubernetes kind
# Kinds that hold a Pod template (a Deployment's ReplicaSets copy it): what they cost follows the template's
# fields (counted by the source counter as path steps), not only their kind.
POD_TEMPLATE_KINDS = ("CronJob", "DaemonSet", "Job", "Pod", "PodTemplate", "ReplicaSet", "StatefulSet")
WORKLOAD_KINDS = frozenset({"Deployment", *POD_TEMPLATE_KINDS})


def kinds_of(counts: Mapping[str, int]) -> Kinds:
    """The MAX_KINDS most common kinds whose names a Kubernetes kind could have: what is sized from
    and what is recorded are the same, so a restored record equals what the next count observes."""
    named = [(kind, n) for kind, n in counts.items() if 0 < len(kind) <= MAX_KIND_LENGTH]
    return tuple(sorted(sorted(named, key=lambda kind: (-kind[1], kind[0]))[:MAX_KINDS]))


def describe_kinds(counts: Mapping[str, int], most: int | None = None) -> str:
    """`Kind n, ...`, the most common first (names cut at 64 characters: the source is untrusted)."""
    ordered = sorted(counts.items(), key=lambda kind: (-kind[1], kind[0]))
    shown = ", ".join(f"{kind[:64]} {n}" for kind, n in ordered[:most])
    return (shown + (", ..." if most is not None and len(ordered) > most else "")) or "none"


@dataclass(frozen=True)
class ObjectCounts:
    source: int | None = None
    sync: int | None = None
    # The source's manifests (read with its count, so of the same commit): the size-aware inputs.
    source_kib: int | None = None
    source_kinds: Kinds | None = None
    source_commit: str | None = None  # the commit those were read from (None: restored, or not read)
    # Why Config Sync will sync nothing of the newest source commit (a file it rejects); the source
    # counts above are then the last good commit's: nothing is sized for the rejected one.
    source_rejected: str | None = None
    # Files of the source we could not read (Config Sync may): its count is a lower bound.
    source_partial: bool = False
    source_crd_path_steps: int | None = None  # its CRDs' fields, each at its depth (size-aware)
    # A newer commit the source links while it is being counted (None: none), this observation's: the
    # reconciler may already be parsing it, so the counts above no longer tell what it will hold.
    source_reading: str | None = None
    # How many of each kind the inventory holds (with its count): what prices the objects where the source
    # was not read (cluster mode), so no object known by its kind is priced as the dearest kind.
    sync_kinds: Kinds | None = None
    source_workload_path_steps: int | None = None  # its objects with a Pod template: their fields' steps

    def over(self, stored: ObjectCounts) -> ObjectCounts:
        """These counts where known, the stored ones where not (the source's KiB, kinds, commit and
        partiality go with its count; a rejection of the newest commit, and a commit being read, are
        this observation's)."""
        source = self if self.source is not None else stored
        return ObjectCounts(
            source.source,
            self.sync if self.sync is not None else stored.sync,
            source.source_kib,
            source.source_kinds,
            source.source_commit,
            self.source_rejected,
            source.source_partial,
            source.source_crd_path_steps,
            self.source_reading,
            self.sync_kinds if self.sync is not None else stored.sync_kinds,
            source.source_workload_path_steps,
        )

    def covering(self, synced: ObjectCounts | None) -> ObjectCounts:
        """While the reconciler moves from the last synced commit to this source, it holds objects of
        both (the prune deletes the old ones last): the source counts that cover both, the larger count
        and KiB and each kind at its larger count. Unchanged when the synced commit is not known."""
        if synced is None or synced.source is None or self.source is None:
            return self
        kinds = None
        if self.source_kinds is not None and synced.source_kinds is not None:
            merged = dict(synced.source_kinds)
            for kind, n in self.source_kinds:
                merged[kind] = max(merged.get(kind, 0), n)
            kinds = kinds_of(merged)
        kib = None
        if self.source_kib is not None and synced.source_kib is not None:
            kib = max(self.source_kib, synced.source_kib)
        return replace(
            self,
            source=max(self.source, synced.source),
            source_kib=kib,
            source_kinds=kinds,
            source_crd_path_steps=_larger(self.source_crd_path_steps, synced.source_crd_path_steps),
            source_workload_path_steps=_larger(
                self.source_workload_path_steps, synced.source_workload_path_steps
            ),
        )

    @property
    def known(self) -> bool:
        return self.source is not None and self.sync is not None

    def unknown_to(self, reads_source: bool) -> bool:
        """Whether a count the service reads is unknown: the inventory's, or the source's where the
        service reads it (a sidecar; cluster mode reads no source, so its unknown source is expected)."""
        return self.sync is None or (reads_source and self.source is None)

    @property
    def target(self) -> int | None:
        """max(source, sync) over the known counts; None when neither is known."""
        values = [v for v in (self.source, self.sync) if v is not None]
        return max(values) if values else None

    @property
    def target_kib(self) -> int | None:
        """KiB of the target's manifests: the source's, scaled by its mean object size when the inventory
        holds more objects (implicit Namespaces, objects still to prune); None when not known."""
        target = self.target
        if self.source_kib is None or self.source is None or target is None:
            return None
        if self.source == 0:
            return 0 if target == 0 else None  # no object to take a mean size from
        return math.ceil(self.source_kib * target / self.source)

    def differs_where_known(self, other: ObjectCounts) -> bool:
        """True when a known count (or the source's KiB) of ours is not what `other` has."""
        return (
            (self.source is not None and self.source != other.source)
            or (self.sync is not None and self.sync != other.sync)
            or (self.source_kib is not None and self.source_kib != other.source_kib)
            or (self.source_kinds is not None and self.source_kinds != other.source_kinds)
            or (
                self.source_crd_path_steps is not None
                and self.source_crd_path_steps != other.source_crd_path_steps
            )
            or (
                self.source_workload_path_steps is not None
                and self.source_workload_path_steps != other.source_workload_path_steps
            )
        )


def _larger(mine: int | None, synced: int | None) -> int | None:
    """The larger of two commits' figures; None unless both are known."""
    return None if mine is None or synced is None else max(mine, synced)
