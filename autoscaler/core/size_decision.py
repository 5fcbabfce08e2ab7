"""When the reconciler's size changes: the hysteresis around the estimator. Pure: no I/O, no clock.

`decide_size(counts, profile, last, now=...)`, called by the reconcile's `decide` (autoscaler.core.decide):
scale up at once; scale down only after the lower target has held for a delay counted from the inventory's
last change, never while a count is unknown or a prune may be running (the reconciler reports its sync of
the fetched commit unfinished or failed; when it reports nothing, an inventory larger than the source), and
never beyond a cap of restarts per hour (the restarts are recorded from what an apply really did).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from autoscaler.core.outcome import Outcome
from autoscaler.core.resources import Resources
from autoscaler.core.sizing import Load, Profile, SizingError, fitted, size
from inventory.core.counts import ObjectCounts
from inventory.core.sync_progress import UNREPORTED, SyncProgress

HOUR = 3600.0  # the restart cap's window, and the hands-off time after our size was reverted


@dataclass(frozen=True)
class Hysteresis:
    scale_down_delay_s: float = 600.0
    max_restarts_per_hour: int = 6
    oom_quiet_s: float = 7 * 86400.0  # an OOM floor is dropped after this long without a new kill
    # In place a scale-down restarts nothing, and once the reconciler's commit is synced the size follows
    # its recent working set (autoscaler.core.calibration): the delay only waits out a lower count seen
    # for a moment, and the memory an apply leaves for the Go runtime to return.
    in_place_delay_s: float = 120.0
    # In the steady state (in place, the commit synced, the size following the working set's largest of
    # the last two minutes past the sync's tail) neither is left to wait out: counted from its start.
    steady_delay_s: float = 0.0

    def delay(self, steady: bool) -> float:
        """How long a lower target must hold: the steady state's delay there, else the target's."""
        return self.steady_delay_s if steady else self.scale_down_delay_s

    def of_target(self, in_place: bool) -> Hysteresis:
        """The hysteresis of a target: in place, its own delay where that is shorter."""
        if not in_place:
            return self
        return replace(self, scale_down_delay_s=min(self.scale_down_delay_s, self.in_place_delay_s))


@dataclass(frozen=True)
class SizeDecision:
    """What the reconciler should have, why, and the state the next decision needs."""

    outcome: Outcome
    resources: Resources | None
    recommended: Resources | None = None
    target_objects: int | None = None
    reason: str = ""
    # A scale-down waiting: since when (the inventory's last change), at which inventory size, and the
    # largest target seen since then.
    lower_since: float | None = None
    lower_sync: int | None = None
    lower_peak: Resources | None = None
    lower_steady: bool = False  # the wait began in the reconciler's steady state (its commit synced)
    restarts: tuple[float, ...] = field(default=())
    capped: str | None = None  # how the recommendation was capped to the largest node (None: it fits)

    @property
    def changes(self) -> bool:
        return self.outcome in (Outcome.SCALED_UP, Outcome.SCALED_DOWN)


def initial(applied: Resources | None) -> SizeDecision:
    """The state before the first decision: what the reconciler has now, as read from the cluster."""
    return SizeDecision(Outcome.UNCHANGED, applied, reason="current resources")


def decide_size(
    counts: ObjectCounts,
    profile: Profile,
    last: SizeDecision,
    *,
    now: float,
    hysteresis: Hysteresis = Hysteresis(),
    progress: SyncProgress = UNREPORTED,
    api_resources: int | None = None,
    room_wanted: str | None = None,
    steady_since: float | None = None,
) -> SizeDecision:
    """The next decision. `last.resources` is what the reconciler has (None when not known). A change
    restarts the reconciler or not depending on how it is applied (an in-place resize does not), so the
    restarts the cap counts are recorded after the apply (`autoscaler.core.decide.settled`), not here.
    `room_wanted`: another reconciler on this one's node waits for room (why, said): a reconciler in its
    steady state gives back what it holds above its need at once, without the delay. `steady_since`: when
    the reconciler's steady state began (its first sample after the commit synced): there the delay
    counts from then, not from when a lower target was first seen."""
    restarts = tuple(t for t in last.restarts if now - t < HOUR)
    keep = replace(last, restarts=restarts, recommended=last.recommended)
    load = Load.of(counts, api_resources)
    if load is None:
        return replace(keep, outcome=Outcome.POSTPONED, reason="both counts unknown")
    target = load.objects
    try:
        recommended = size(load, profile)
    except SizingError as error:
        return replace(keep, outcome=Outcome.ERROR, reason=str(error), target_objects=target)
    recommended, capped = fitted(recommended, profile)
    current = last.resources
    recommended = recommended.keeping_limits_of(current, profile.sizing.step_mib)
    base = SizeDecision(Outcome.UNCHANGED, current, recommended, target, restarts=restarts, capped=capped)
    need = f"{target} objects need {recommended}" if capped is None else f"{target} objects: {capped}"
    if current == recommended:
        return replace(base, reason=f"{target} objects: already sized")
    if current is None or not current.covers(recommended):
        resources = recommended if current is None else recommended.at_least(current)
        if resources != recommended:  # the log line and the Event name what is written, not only the need
            need += f"; it keeps what it has above that: {resources}"
        return replace(base, outcome=Outcome.SCALED_UP, resources=resources, reason=need)
    steady = profile.sizing.steady_mib is not None
    return _scale_down(
        base,
        counts,
        last,
        now=now,
        hysteresis=hysteresis,
        progress=progress,
        steady=steady,
        room_wanted=room_wanted,
        steady_since=steady_since,
    )


def _source_not_trusted(counts: ObjectCounts) -> str | None:
    """Why the source count must not lower a size: Config Sync rejects the newest commit (it syncs
    nothing of it, and what it will sync next is not known), or some of its files were not read (the
    count is a lower bound)."""
    if counts.source_rejected is not None:
        return counts.source_rejected
    if counts.source_partial:
        return "some source files were not read (their objects are not counted)"
    return None


def _prune_pending(counts: ObjectCounts, progress: SyncProgress) -> str | None:
    """Why a prune may still be running. The reconciler's own report decides; only when it has written
    none (no Config Sync status on the RSync) does an inventory larger than the source stand for one."""
    if progress.reported:
        return progress.pending
    assert counts.sync is not None
    assert counts.source is not None
    return f"inventory {counts.sync} > source {counts.source}" if counts.sync > counts.source else None


def _window(
    last: SizeDecision,
    counts: ObjectCounts,
    recommended: Resources,
    now: float,
    *,
    steady: bool,
    steady_since: float | None,
) -> tuple[float, Resources]:
    """When the scale-down's wait began and the largest target seen since. The delay counts from the
    inventory's last change (the reconciler is still applying or pruning around a change, and its memory
    follows what it holds), so an inventory of another size starts the window again, and a target seen
    before that change no longer holds the scale-down up; so does the reconciler's steady state beginning
    (what a transition needed no longer holds what remains up). Within a window the largest target is
    kept: a source count that went up and down again, the inventory unchanged, is not scaled below. In
    the steady state the target already follows the working set's recent peak, so no older target holds
    it up, and the wait began with the steady state (`steady_since`, where known): each step down it takes
    as the Go runtime returns memory would otherwise wait the delay again."""
    fresh = last.lower_sync != counts.sync or last.lower_steady != steady
    if last.lower_since is None or last.lower_peak is None or fresh:
        since, peak = now, recommended
    elif steady:
        since, peak = last.lower_since, recommended
    else:
        return last.lower_since, last.lower_peak.at_least(recommended)
    if steady and steady_since is not None:
        since = min(since, steady_since)
    return since, peak


def _scale_down(
    base: SizeDecision,
    counts: ObjectCounts,
    last: SizeDecision,
    *,
    now: float,
    hysteresis: Hysteresis,
    progress: SyncProgress,
    steady: bool,
    room_wanted: str | None,
    steady_since: float | None,
) -> SizeDecision:
    assert base.recommended is not None
    distrust = _source_not_trusted(counts)
    if distrust is not None:
        return replace(base, outcome=Outcome.POSTPONED, reason=f"{distrust}: no scale-down")
    # In the steady state the size follows the working set of what the reconciler reports synced: the
    # counts are not what it is sized from (cluster mode, which never reads the source, can lower it).
    if not counts.known and not steady:
        return replace(base, outcome=Outcome.POSTPONED, reason="a count is unknown: no scale-down")
    pending = _prune_pending(counts, progress)
    if pending is not None:
        return replace(base, outcome=Outcome.POSTPONED, reason=f"prune pending ({pending}): no scale-down")
    since, peak = _window(last, counts, base.recommended, now, steady=steady, steady_since=steady_since)
    waiting = replace(
        base,
        outcome=Outcome.POSTPONED,
        lower_since=since,
        lower_sync=counts.sync,
        lower_peak=peak,
        lower_steady=steady,
    )
    held = now - since
    # The delay waits out a lower count seen for a moment and memory the Go runtime has yet to return; in
    # the steady state the target follows the working set already, and a neighbour that must parse a
    # commit needs that room more (docs/sizing.md, "Room on the node").
    gives_room = room_wanted is not None and steady
    delay = hysteresis.delay(steady)
    if held < delay and not gives_room:
        return replace(waiting, reason=f"lower target held {held:.0f}s of {delay:.0f}s")
    # `restarts` holds only changes that restarted the reconciler, so targets that never restart it
    # never reach the cap.
    if len(base.restarts) >= hysteresis.max_restarts_per_hour:
        return replace(waiting, reason=f"restart cap reached ({len(base.restarts)} in the last hour)")
    reason = f"{base.target_objects} objects for {held:.0f}s: down to {peak}"
    if held < delay:
        reason = f"{base.target_objects} objects, synced: down to {peak} now, its room wanted: {room_wanted}"
    return replace(base, outcome=Outcome.SCALED_DOWN, resources=peak, reason=reason)
