"""What a reconcile says about itself: the log lines, Kubernetes Events and counted metrics that follow
from a plan and from what became of its write. Pure: the executor only delivers them (`Said` by `Said`),
so every reconcile is told the same way in the log, in `kubectl describe` and on /metrics.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from enum import StrEnum

from autoscaler.core.calibration import Calibration
from autoscaler.core.observation import Unread
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import Plan, RSyncState, failed_before
from autoscaler.core.reasons import Reason, WriteError
from autoscaler.core.size_decision import Hysteresis
from autoscaler.core.written import CountsWritten, Written
from inventory.core.counts import ObjectCounts


class Counted(StrEnum):
    """The counters a reconcile increments (the executor maps each to its Prometheus metric)."""

    APPLY_ERRORS = "objcount_apply_errors_total"  # labels: target, reason
    RECONCILE_ERRORS = "objcount_reconcile_errors_total"  # label: stage
    RESTARTS_CAUSED = "objcount_restarts_caused_total"
    OOM_FLOORS = "objcount_oom_floors_total"
    CALIBRATIONS = "objcount_calibrations_total"  # label: direction
    CAPPED = "objcount_capped_total"  # label: target
    FALLBACKS = "objcount_fallbacks_total"  # label: target
    RESIZES_DEFERRED = "objcount_resizes_deferred_total"
    STATUS_WRITES = "objcount_status_writes_total"  # label: destination
    STATUS_WRITE_ERRORS = "objcount_status_write_errors_total"  # label: reason
    PRUNED_STATUS_FALLBACKS = "objcount_pruned_status_fallbacks_total"


class Shown(StrEnum):
    """The gauges a reconcile sets for its RSync (the executor maps each to its Prometheus metric); each
    is labelled by the RSync first."""

    OBJECTS = "objcount_objects"  # label: count (source, sync)
    COUNT_UNKNOWN = "objcount_count_unknown"
    SOURCE_REJECTED = "objcount_source_rejected"
    WAITING_FOR_ROOM = "objcount_waiting_for_room"
    CALIBRATION_FACTOR = "objcount_calibration_factor"
    RECOMMENDED = "objcount_recommended"  # label: resource (cpu_millicores, memory_mib)
    APPLIED = "objcount_applied"  # label: resource


# A gauge's value for one RSync: the gauge, its labels after the RSync's, the value.
Gauged = tuple[Shown, tuple[str, ...], float]
_COUNTS = ("source", "sync")
_RESOURCES = ("cpu_millicores", "memory_mib")
# Every series a reconcile may set for an RSync, by its labels after the RSync's (removed when it goes).
SHOWN_SERIES: dict[Shown, tuple[tuple[str, ...], ...]] = {
    **{gauge: ((),) for gauge in Shown},
    Shown.OBJECTS: tuple((name,) for name in _COUNTS),
    Shown.RECOMMENDED: tuple((name,) for name in _RESOURCES),
    Shown.APPLIED: tuple((name,) for name in _RESOURCES),
}


@dataclass(frozen=True)
class Said:
    """One thing that happened: a log line (None: none), an Event on the RSync (its reason; the note is
    the log line unless given), and a counter to increment."""

    level: int = logging.DEBUG
    message: str | None = None
    event: str | None = None
    note: str | None = None
    counted: tuple[Counted, tuple[str, ...]] | None = None


_HOLDS = {Outcome.HELD_BY_OWNER: "HeldByOwner", Outcome.HANDS_OFF: "HandsOff"}
_LOGGED = (Outcome.POSTPONED, Outcome.ERROR, Outcome.HANDS_OFF, Outcome.HELD_BY_OWNER)


def of_plan(plan: Plan, target: str, hysteresis: Hysteresis, unread: tuple[Unread, ...] = ()) -> list[Said]:
    """What a plan says before its write: the reads it was made without (`unread`), the decisions that
    hold a size (the ones that change it are told once written), another writer's size found, a new OOM
    floor, a rejected source, a calibration."""
    said = [each for read in unread for each in of_unread(read)]
    decision = plan.state.decision
    if plan.outcome == Outcome.POSTPONED and decision is not None and decision.lower_since is not None:
        said.append(Said(event="ScaleDownPostponed", note=plan.reason))
    elif plan.outcome in _HOLDS:
        said.append(Said(event=_HOLDS[plan.outcome], note=plan.reason))
    if plan.oom_raised is not None:
        kill, floor = plan.oom_raised
        note = f"OOM-killed at its {kill.limit_mib} MiB limit ({kill.finished_at})"
        note += f": at least {floor.memory_mib} MiB from now on"
        said.append(Said(event="OomFloorRaised", note=note, counted=(Counted.OOM_FLOORS, ())))
        said.append(
            Said(
                logging.WARNING,
                f"the reconciler was OOM-killed at its {kill.limit_mib} MiB limit ({kill.finished_at}); it "
                f"gets at least {floor.memory_mib} MiB until {hysteresis.oom_quiet_s:.0f} s pass without "
                "another kill",
            )
        )
    if plan.counts.source_rejected is not None:
        said.append(Said(event="SourceRejected", note=plan.counts.source_rejected))
    if plan.waiting_for_room is not None and plan.log_level > logging.DEBUG:  # the wait begins
        said.append(Said(event="ResizeDeferred", note=plan.reason, counted=(Counted.RESIZES_DEFERRED, ())))
    if plan.calibrated is not None:
        said += _calibrated(*plan.calibrated)
    if plan.reverted_to is not None:
        message = None
        if plan.outcome != Outcome.HANDS_OFF:
            message = (
                f"another writer replaced the reconciler's size with {plan.reverted_to}; applying ours again"
            )
        said.append(Said(logging.WARNING, message, counted=(Counted.APPLY_ERRORS, (target, Reason.REVERTED))))
    if plan.outcome == Outcome.ERROR:
        said.append(Said(counted=(Counted.RECONCILE_ERRORS, ("decide",))))
    if plan.outcome in _LOGGED:
        said.append(Said(plan.log_level, f"{plan.outcome}: {plan.reason}"))
    return said


def _calibrated(before: Calibration | None, after: Calibration) -> list[Said]:
    direction = "first" if before is None else "lowered" if after.factor < before.factor else "raised"
    was = "1" if before is None else f"{float(before.factor):.4f}"
    note = (
        f"working set peaked at {after.peak_mib} MiB syncing {after.window.commit[:12]}, the model "
        f"predicts {after.predicted_mib} MiB: its factor x{float(after.factor):.4f} (was x{was})"
    )
    message = (
        f"calibrated: the reconciler's working set peaked at {after.peak_mib} MiB syncing "
        f"{after.window.commit[:12]} where the model predicts {after.predicted_mib} MiB; its size is now the "
        f"model x {float(after.factor):.4f} (was x {was}) for what remains once synced"
    )
    return [
        Said(event="Calibrated", note=note),
        Said(logging.INFO, message, counted=(Counted.CALIBRATIONS, (direction,))),
    ]


def of_write(plan: Plan, target: str, restarted: bool) -> list[Said]:
    """A size written: an Event, a log line, and the restart it caused."""
    restarts = " (restarts the reconciler)" if restarted else ""
    said = [
        Said(
            logging.INFO,
            f"{plan.outcome} via {target}{restarts}: {plan.reason}",
            event="ScaledUp" if plan.outcome == Outcome.SCALED_UP else "ScaledDown",
            note=f"{plan.reason}; applied via {target}{restarts}",
        )
    ]
    if restarted:
        said.append(Said(counted=(Counted.RESTARTS_CAUSED, ())))
    capped = plan.state.decision.capped if plan.state.decision is not None else None
    if capped is not None:  # the size written is less than the model's: said as a warning each time
        said.append(
            Said(
                logging.WARNING,
                f"{plan.outcome} via {target} {capped}: the reconciler may need more than any node holds",
                event="CappedToNode",
                note=capped,
                counted=(Counted.CAPPED, (target,)),
            )
        )
    return said


def of_capped(plan: Plan, target: str, capped: str) -> list[Said]:
    """A size written, and capped by the applier's own policy (a VPA's resourcePolicy): what runs is
    the capped size, not ours."""
    return [
        Said(
            logging.WARNING,
            f"{plan.outcome} via {target} capped by its policy: {capped}",
            event="Capped",
            note=f"{plan.reason}; capped by {capped}",
            counted=(Counted.CAPPED, (target,)),
        )
    ]


def of_fallback(plan: Plan, target: str, why: str) -> list[Said]:
    """A size the target could not apply its own way, applied through its fallback (in place: the RSync
    override, so Config Sync rolls the reconciler out): said every time it happens."""
    return [
        Said(
            logging.WARNING,
            f"{plan.outcome} via {target}'s fallback: {why}",
            event="FellBack",
            note=f"{plan.reason}; {why}",
            counted=(Counted.FALLBACKS, (target,)),
        )
    ]


def of_write_failure(plan: Plan, target: str, reason: Reason, error: str, *, repeated: bool) -> list[Said]:
    """A size not written. Said once: a refusal that lasts (the kubelet's, of a memory limit below the
    usage) comes back on every reconcile, and its message changes with the usage it quotes; the metric
    counts each."""
    return [
        Said(
            logging.DEBUG if repeated else logging.ERROR,
            f"{plan.outcome} failed ({reason}): {error}",
            event="ApplyFailed",
            note=f"{plan.reason}: {error} ({reason})",
            counted=(Counted.APPLY_ERRORS, (target, reason)),
        ),
        Said(counted=(Counted.RECONCILE_ERRORS, ("apply",))),
    ]


def of_read_failure(target: str, reason: Reason, error: str) -> list[Said]:
    """What the reconciler has could not be read: nothing is decided."""
    return [
        Said(
            logging.ERROR,
            f"cannot read the reconciler's resources ({reason}): {error}",
            counted=(Counted.APPLY_ERRORS, (target, reason)),
        ),
        Said(counted=(Counted.RECONCILE_ERRORS, ("read",))),
    ]


def of_unread(unread: Unread) -> list[Said]:
    """A read that failed without failing the reconcile (the reconciler's Pod where only its OOM kills
    needed it: sized from the counts alone, and a floor already set stays; discovery: the last API
    surface read stays)."""
    return [Said(logging.WARNING, unread.message, counted=(Counted.RECONCILE_ERRORS, (unread.stage,)))]


def of_unpublished(error: str) -> list[Said]:
    """Our annotations could not be published: they are published again on the next reconcile."""
    return [Said(logging.WARNING, f"could not publish the recommendation: {error}")]


def of_counts_unwritten(kind: str, error: str) -> list[Said]:
    """The counts could not be recorded on the RSync (`kind`: the API error's, a label): the reconcile
    ends `failed` and is tried again."""
    return [
        Said(
            logging.WARNING,
            f"could not record the counts: {error}",
            counted=(Counted.RECONCILE_ERRORS, ("counts",)),
        ),
        Said(counted=(Counted.STATUS_WRITE_ERRORS, (kind,))),
    ]


def of_counts_written(written: CountsWritten, counts: ObjectCounts) -> list[Said]:
    """The counts recorded on the RSync, where they went; a status the API server pruned."""
    said = []
    if written.fell_back:
        said.append(
            Said(
                logging.WARNING,
                "the API server pruned status.*.objectCount (its CRD does not define them); keeping the "
                "counts in the objcount.dev/*-object-count annotations instead (as with counts_in_status "
                "off)",
                counted=(Counted.PRUNED_STATUS_FALLBACKS, ()),
            )
        )
    for destination in written.destinations:
        kib = f" source KiB={counts.source_kib}" if destination == "annotations" else ""
        said.append(
            Said(
                logging.INFO,
                f"counts written to {destination}: source={counts.source} sync={counts.sync}{kib}",
                counted=(Counted.STATUS_WRITES, (destination,)),
            )
        )
    return said


def shown_of_plan(plan: Plan, *, reads_source: bool) -> list[Gauged]:
    """What /metrics shows of a plan before its write: the counts it used, whether one is unknown, a
    rejected source, a wait for room, the calibration."""
    counts = plan.counts
    shown: list[Gauged] = [
        (Shown.OBJECTS, (name,), value)
        for name, value in zip(_COUNTS, (counts.source, counts.sync), strict=True)
        if value is not None
    ]
    shown += [
        (Shown.COUNT_UNKNOWN, (), 1 if counts.unknown_to(reads_source) else 0),
        (Shown.SOURCE_REJECTED, (), 0 if counts.source_rejected is None else 1),
        (Shown.WAITING_FOR_ROOM, (), 0 if plan.waiting_for_room is None else 1),
    ]
    if plan.state.calibration is not None:
        shown.append((Shown.CALIBRATION_FACTOR, (), float(plan.state.calibration.factor)))
    return shown


def shown_of_sizes(plan: Plan) -> list[Gauged]:
    """The recommended and applied resources, once written (not where nothing is sized)."""
    decision = plan.state.decision
    if decision is None or plan.outcome in (Outcome.HANDS_OFF, Outcome.OPTED_OUT):
        return []
    return [
        (gauge, (resource,), value)
        for gauge, resources in (
            (Shown.RECOMMENDED, decision.recommended),
            (Shown.APPLIED, decision.resources),
        )
        if resources is not None
        for resource, value in zip(
            _RESOURCES, (resources.cpu_request_m, resources.memory_request_mib), strict=True
        )
    ]


def of_written(before: RSyncState, plan: Plan, written: Written | WriteError, target: str) -> list[Said]:
    """What is said of a plan's write: the size written, capped or through the fallback, the annotations
    not published; or the write that failed, said once while it repeats."""
    if isinstance(written, WriteError):
        repeated = failed_before(before, plan, written.reason)
        return of_write_failure(plan, target, written.reason, str(written), repeated=repeated)
    said = []
    applied = written.applied
    if applied is not None:
        said += of_write(plan, target, applied.restarted)
        if applied.capped is not None:
            said += of_capped(plan, target, applied.capped)
        if applied.fell_back is not None:
            said += of_fallback(plan, target, applied.fell_back)
    if written.unpublished is not None:
        said += of_unpublished(written.unpublished)
    return said


# ----- the working sets, read for every reconciler at once (said of the service, not of one RSync) ---------
def of_usage_unread(error: str, *, repeated: bool) -> list[Said]:
    """The metrics API could not be read: said once per distinct error (a missing permission would
    otherwise be logged every interval), counted each time."""
    return [
        Said(
            logging.DEBUG if repeated else logging.WARNING,
            f"cannot read the reconcilers' working sets from the metrics API: {error}",
            counted=(Counted.RECONCILE_ERRORS, ("usage",)),
        )
    ]


def of_no_metrics_api() -> list[Said]:
    return [
        Said(logging.INFO, "the cluster serves no metrics API (metrics.k8s.io): sizes are not calibrated")
    ]


def of_usage_unparsed(pod: str) -> list[Said]:
    """A Pod's usage that does not parse gives no sample (unknown is not zero)."""
    return [
        Said(
            logging.WARNING,
            f"the metrics API reports a usage of pod {pod} that does not parse; not sampled",
            counted=(Counted.RECONCILE_ERRORS, ("usage",)),
        )
    ]
