"""What one reconcile decides and what is remembered between reconciles: the state kept per RSync, the
service-wide settings of a decision, and the plan (what to write, what to keep once it is written, when
to look again). Data only: `autoscaler.core.decide` makes them, `autoscaler.core.said` renders them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field

from autoscaler.core.calibration import Calibration, Margin, Peak
from autoscaler.core.oom import OomFloor, OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.core.reasons import Reason
from autoscaler.core.resources import Resources
from autoscaler.core.size_decision import Hysteresis, SizeDecision
from autoscaler.core.sizing import Profile
from inventory.core.counts import ObjectCounts


@dataclass(frozen=True)
class RSyncState:
    """What the service remembers about one RSync between reconciles."""

    decision: SizeDecision | None = None  # None: start from what the reconciler has now
    # The RSync's generation after our last write of the size into it, and that size: a later
    # generation declaring another size is another writer's.
    written: tuple[int, Resources] | None = None
    reverts: tuple[float, ...] = ()  # when another writer replaced our size, over the last hour
    hands_off_until: float | None = None
    counts_in_annotations: bool = False  # the CRD prunes the status fields
    # The write that last failed (its reason and the size it wanted): the same failure again is not news.
    failed: tuple[Reason, Resources] | None = None
    # Our own error last told (an unknown platform asked): the same again is not news.
    refused: str | None = None
    # The memory floor after an OOM kill, as last decided (the RSync's annotation may lag behind it).
    oom_floor: OomFloor | None = None
    # The source counts of the commit the reconciler last finished (the annotation may lag behind).
    synced_source: ObjectCounts | None = None
    # What was learned from the reconciler's working set (the annotation may lag behind).
    calibration: Calibration | None = None
    # The reconciler container's largest working set in its current window (calibration).
    peak: Peak | None = None
    # Until when more CPU is not asked (the service's clock): the kubelet deferred a resize for want of room.
    cpu_held_until: float | None = None


@dataclass(frozen=True)
class DecideConfig:
    """The service-wide settings of a decision."""

    profile: Profile
    hysteresis: Hysteresis = field(default_factory=Hysteresis)
    max_reverts_per_hour: int = 3
    measure_others: bool = False  # read the other containers' requests where the platform needs them
    # The size can change behind our back (in-place: a new pod starts with its template's size), so it
    # is read on every reconcile instead of remembered.
    reread_current: bool = False
    # The size is the running Pod's (in place): a size there that is not the one we decided (a Pod
    # started from its template, our webhook down or not yet told) is not ours to hold.
    in_place: bool = False
    margin: Margin = field(default_factory=Margin)  # added to an observed peak (calibration)
    reads_source: bool = False  # the service counts the source itself (a sidecar)
    target: str = ""  # its name: said with every write, published with the applied size (`objcount status`)


@dataclass(frozen=True)
class Plan:
    """The decision and what follows from it."""

    outcome: Outcome
    reason: str
    state: RSyncState  # to keep once the write succeeded
    counts: ObjectCounts  # what the decision used: observed over stored
    apply: Resources | None = None
    publish: Mapping[str, str | None] = field(default_factory=dict)  # annotations the RSync lacks
    recheck_after: float | None = None  # seconds until the held scale-down is due
    reverted_to: Resources | None = None  # another writer's size, found in the RSync
    log_level: int = logging.DEBUG  # said once when a postponement or an error starts
    oom_raised: tuple[OomKill, OomFloor] | None = None  # a new OOM kill, and the floor it raised
    calibrated: tuple[Calibration | None, Calibration] | None = None  # learned now: before, after
    waiting_for_room: Resources | None = None  # the size the kubelet defers, while it does


def failed_before(before: RSyncState, plan: Plan, reason: Reason) -> bool:
    """Whether this failure is the one the state already remembers (said once, counted each time)."""
    return plan.apply is not None and before.failed == (reason, plan.apply)
