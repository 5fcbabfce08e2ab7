"""What a reconcile's writes did, as the Kubernetes side reports it back: the size applied (or why it went
another way), the annotations not published, where the counts went. Pure data: `decide` keeps its state
from it (`autoscaler.core.decide.after_write`), `autoscaler.core.said` says it.
"""

from __future__ import annotations

from dataclasses import dataclass

from autoscaler.core.resources import Resources


@dataclass(frozen=True)
class Applied:
    """What a write did: the size the API server stored, whether it restarts the reconciler (a
    template or override change rolls its pod out), the RSync's generation when the size was
    written into the RSync (to tell a later foreign write from our own), and how another's policy
    capped what was asked (a VPA's `resourcePolicy`: its applier applies the capped size)."""

    resources: Resources
    restarted: bool
    rsync_generation: int | None = None
    capped: str | None = None
    fell_back: str | None = None  # why the size went through the target's fallback (a rollout)


@dataclass(frozen=True)
class Written:
    """What a write did: the size applied (None: none was due), and the annotations that could not be
    published (they are published again on the next reconcile)."""

    applied: Applied | None = None
    unpublished: str | None = None


@dataclass(frozen=True)
class CountsWritten:
    """What became of a write of the counts on the RSync: where they went ("status", "annotations";
    nothing where the RSync already held them or is gone), and whether the API server pruned the status
    fields (its CRD lacks them: the counts are kept in annotations from then on)."""

    destinations: tuple[str, ...] = ()
    fell_back: bool = False
