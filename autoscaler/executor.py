"""The executor: reads what a step needs, runs the pure step, performs its actions through the
cluster operations, and counts every outcome. It keeps each RSync's state between reconciles.

Order of the actions: the size first (a scale-up should not wait for a counts write), then the
published annotations, then the counts, then the re-evaluation of a held scale-down. Any error ends
the reconcile as `Outcome.ERROR`, counted with the stage it came from; the counts are still recorded
when the sizing failed.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

from prometheus_client import Gauge

from autoscaler.calibration import Calibration, Peak, Window, observed
from autoscaler.cluster import Cluster
from autoscaler.events import Occurrence, regarding_rsync
from autoscaler.metrics import (
    APPLIED,
    APPLY_ERRORS,
    CALIBRATION_FACTOR,
    CALIBRATIONS,
    COUNT_UNKNOWN,
    DECISIONS,
    OBJECTS,
    OOM_FLOORS,
    RECOMMENDED,
    RECONCILE_ERRORS,
    RECONCILE_SECONDS,
    RESTARTS_CAUSED,
    SOURCE_REJECTED,
    WORKING_SET,
)
from autoscaler.oom import OomKill
from autoscaler.policy import Outcome, Resources
from autoscaler.step import Plan, RSyncState, Seen, StepConfig, needs_current, needs_others, settled, step
from autoscaler.targets import ApplyError
from inventory import kubeapi
from inventory.counts import ObjectCounts
from inventory.ids import RSyncKey
from inventory.objects import RSync

log = logging.getLogger(__name__)


class _Failed(Exception):
    """A stage failed; already logged and counted."""


@dataclass
class Executor:
    cluster: Cluster
    config: StepConfig
    clock: Callable[[], float]
    schedule_after: Callable[[RSyncKey, float], None]
    states: dict[RSyncKey, RSyncState] = field(default_factory=dict)
    wall_clock: Callable[[], float] = time.time  # for what outlives the service (an OOM floor's age)
    # The largest working set of each RSync's reconciler in its current window (calibration), written by
    # the sampler's thread and read by the workers'.
    peaks: dict[RSyncKey, Peak] = field(default_factory=dict)
    events: Callable[[Occurrence], None] | None = None  # where decisions go as Kubernetes Events
    _peaks_lock: threading.Lock = field(default_factory=threading.Lock)

    def observe_usage(self, key: RSyncKey, window: Window, mib: int) -> bool:
        """Record a sample of the reconciler's working set; whether the window's peak rose (or a new
        window began), so a reconcile should look at it."""
        WORKING_SET.labels(str(key)).set(mib)
        with self._peaks_lock:
            last = self.peaks.get(key)
            peak = observed(last, window, mib)
            self.peaks[key] = peak
        return peak != last

    def reconcile(self, key: RSyncKey, rsync: RSync | None, observed: ObjectCounts) -> Outcome:
        """One reconcile of `key`, from its cached RSync (None: deleted) and the counts seen."""
        with RECONCILE_SECONDS.time():
            try:
                outcome = self._reconcile(key, rsync, observed)
            except Exception:
                RECONCILE_ERRORS.labels("crash").inc()
                log.exception("%s: reconcile crashed", key)
                outcome = Outcome.ERROR
        DECISIONS.labels(outcome).inc()
        return outcome

    def _reconcile(self, key: RSyncKey, rsync: RSync | None, observed: ObjectCounts) -> Outcome:
        if rsync is None:
            self.forget(key)
            return Outcome.GONE
        state = self.states.get(key, RSyncState())
        try:
            outcome = self._size(key, rsync, observed, state)
        except _Failed:
            outcome = Outcome.ERROR
        try:
            self._write_counts(key, rsync, observed)
        except kubeapi.ApiError as error:
            RECONCILE_ERRORS.labels("counts").inc()
            log.warning("%s: could not record the counts: %s", key, error)
            return Outcome.ERROR
        return outcome

    # ----- the size ------------------------------------------------------------------------------------
    def _event(self, key: RSyncKey, rsync: RSync, reason: str, note: str) -> None:
        regarding = regarding_rsync(rsync, key.kind) if self.events is not None else None
        if self.events is not None and regarding is not None:
            self.events(Occurrence.of(regarding, reason, note, self.wall_clock()))

    def _events_of(self, key: RSyncKey, rsync: RSync, plan: Plan) -> None:
        """The decisions that hold a size (the ones that change it are told once applied, in `_apply`)."""
        decision = plan.state.decision
        if plan.outcome == Outcome.POSTPONED and decision is not None and decision.lower_since is not None:
            self._event(key, rsync, "ScaleDownPostponed", plan.reason)
        elif plan.outcome == Outcome.HELD_BY_OWNER:
            self._event(key, rsync, "HeldByOwner", plan.reason)
        elif plan.outcome == Outcome.HANDS_OFF:
            self._event(key, rsync, "HandsOff", plan.reason)
        if plan.oom_raised is not None:
            kill, floor = plan.oom_raised
            note = f"OOM-killed at its {kill.limit_mib} MiB limit ({kill.finished_at})"
            note += f": at least {floor.memory_mib} MiB from now on"
            self._event(key, rsync, "OomFloorRaised", note)
        if plan.counts.source_rejected is not None:
            self._event(key, rsync, "SourceRejected", plan.counts.source_rejected)
        if plan.calibrated is not None:
            before, after = plan.calibrated
            was = "1" if before is None else f"{float(before.factor):.4f}"
            note = (
                f"working set peaked at {after.peak_mib} MiB syncing {after.window.commit[:12]}, the model "
                f"predicts {after.predicted_mib} MiB: its factor x{float(after.factor):.4f} (was x{was})"
            )
            self._event(key, rsync, "Calibrated", note)

    def _size(self, key: RSyncKey, rsync: RSync, observed: ObjectCounts, state: RSyncState) -> Outcome:
        plan = step(self._seen(key, rsync, observed, state), state, self.config)
        self._events_of(key, rsync, plan)
        for name, value in (("source", plan.counts.source), ("sync", plan.counts.sync)):
            if value is not None:
                OBJECTS.labels(str(key), name).set(value)
        COUNT_UNKNOWN.labels(str(key)).set(0 if plan.counts.known else 1)
        SOURCE_REJECTED.labels(str(key)).set(0 if plan.counts.source_rejected is None else 1)
        if plan.reverted_to is not None:
            self._reverted(key, plan)
        if plan.oom_raised is not None:
            kill, floor = plan.oom_raised
            OOM_FLOORS.inc()
            log.warning(
                "%s: the reconciler was OOM-killed at its %d MiB limit (%s); it gets at least %d MiB until "
                "%.0f s pass without another kill",
                key,
                kill.limit_mib,
                kill.finished_at,
                floor.memory_mib,
                self.config.hysteresis.oom_quiet_s,
            )
        if plan.calibrated is not None:
            self._calibrated(key, *plan.calibrated)
        if plan.state.calibration is not None:
            CALIBRATION_FACTOR.labels(str(key)).set(float(plan.state.calibration.factor))
        if plan.outcome == Outcome.ERROR:
            RECONCILE_ERRORS.labels("decide").inc()
        if plan.outcome in (Outcome.POSTPONED, Outcome.ERROR, Outcome.HANDS_OFF, Outcome.HELD_BY_OWNER):
            log.log(plan.log_level, "%s: %s: %s", key, plan.outcome, plan.reason)
        new_state = self._apply(key, rsync, plan, state)
        self.states[key] = new_state
        self._publish(key, plan)
        if plan.recheck_after is not None:
            self.schedule_after(key, plan.recheck_after)
        return plan.outcome

    def _seen(self, key: RSyncKey, rsync: RSync, observed: ObjectCounts, state: RSyncState) -> Seen:
        current = others = None
        try:
            if self.config.sizes and needs_current(state, self.config):
                current = self.cluster.current(key)
            if needs_others(rsync, self.config):
                others = self.cluster.others(key)
        except ApplyError as error:
            self._apply_error(key, error, "read")
            log.error("%s: cannot read the reconciler's resources: %s", key, error)
            raise _Failed from error
        return Seen(
            rsync,
            observed,
            self.clock(),
            current,
            declared=self.cluster.declared(rsync),
            others=others,
            held_by_owner=self.cluster.held_by_owner(rsync),
            oom_kill=self._last_oom_kill(key) if self.config.sizes else None,
            wall=self.wall_clock(),
            api_resources=self.cluster.api_resources() if self.config.sizes else None,
            usage=self._peak(key),
        )

    def _peak(self, key: RSyncKey) -> Peak | None:
        with self._peaks_lock:
            return self.peaks.get(key)

    def _last_oom_kill(self, key: RSyncKey) -> OomKill | None:
        """The reconciler's latest OOM kill; None when it cannot be read (sized from the counts alone,
        and a floor already set stays)."""
        try:
            return self.cluster.last_oom_kill(key)
        except ApplyError as error:
            RECONCILE_ERRORS.labels("read").inc()
            log.warning("%s: cannot read the reconciler's OOM kills: %s", key, error)
            return None

    def _calibrated(self, key: RSyncKey, before: Calibration | None, after: Calibration) -> None:
        direction = "first" if before is None else "lowered" if after.factor < before.factor else "raised"
        CALIBRATIONS.labels(direction).inc()
        log.info(
            "%s: calibrated: the reconciler's working set peaked at %d MiB syncing %s where the model "
            "predicts %d MiB; its size is now the model x %.4f (was x %s), at least %d MiB while pod %s "
            "holds this commit",
            key,
            after.peak_mib,
            after.window.commit[:12],
            after.predicted_mib,
            float(after.factor),
            "1" if before is None else f"{float(before.factor):.4f}",
            self.config.margin.needed(after.peak_mib),
            after.window.pod,
        )

    def _apply(self, key: RSyncKey, rsync: RSync, plan: Plan, state: RSyncState) -> RSyncState:
        if plan.apply is None:
            return plan.state
        try:
            applied = self.cluster.apply(key, plan.apply)
        except ApplyError as error:
            self._apply_error(key, error, "apply")
            self._event(key, rsync, "ApplyFailed", f"{plan.reason}: {error}")
            failed = (error.reason, plan.apply)
            # Said once: a refusal that lasts (the kubelet's, of a memory limit below the usage) comes back
            # on every reconcile, and its message changes with the usage it quotes. The metric counts each.
            level = logging.DEBUG if state.failed == failed else logging.ERROR
            log.log(level, "%s: %s failed: %s", key, plan.outcome, error)
            # What the other writers did is kept; the decision is made again next time.
            self.states[key] = replace(
                state,
                reverts=plan.state.reverts,
                hands_off_until=plan.state.hands_off_until,
                oom_floor=plan.state.oom_floor,
                failed=failed,
            )
            raise _Failed from error
        if applied.restarted:
            RESTARTS_CAUSED.inc()
        reason = "ScaledUp" if plan.outcome == Outcome.SCALED_UP else "ScaledDown"
        restarts = " (restarts the reconciler)" if applied.restarted else ""
        note = f"{plan.reason}; applied via {self.cluster.target_name}{restarts}"
        self._event(key, rsync, reason, note)
        log.info(
            "%s: %s via %s%s: %s",
            key,
            plan.outcome,
            self.cluster.target_name,
            " (restarts the reconciler)" if applied.restarted else "",
            plan.reason,
        )
        return settled(plan, applied.restarted, applied.rsync_generation, self.clock())

    def _apply_error(self, key: RSyncKey, error: ApplyError, stage: str) -> None:
        APPLY_ERRORS.labels(self.cluster.target_name, error.reason).inc()
        RECONCILE_ERRORS.labels(stage).inc()

    def _reverted(self, key: RSyncKey, plan: Plan) -> None:
        APPLY_ERRORS.labels(self.cluster.target_name, "reverted").inc()
        if plan.outcome != Outcome.HANDS_OFF:
            log.warning(
                "%s: another writer replaced the reconciler's size with %s; applying ours again",
                key,
                plan.reverted_to,
            )

    def _publish(self, key: RSyncKey, plan: Plan) -> None:
        """Recommended and applied resources: metrics, and annotations on the RSync for `status` (whatever
        the outcome, the annotations the plan carries: a rejected commit is said without a target too)."""
        decision = plan.state.decision
        sized = plan.outcome not in (Outcome.HANDS_OFF, Outcome.OPTED_OUT, Outcome.COUNTS_ONLY)
        if decision is not None and sized:
            _set_gauges(RECOMMENDED, key, decision.recommended)
            _set_gauges(APPLIED, key, decision.resources)
        if plan.publish:
            try:
                self.cluster.publish(key, plan.publish)
            except kubeapi.ApiError as error:
                log.warning("%s: could not publish the recommendation: %s", key, error)

    # ----- the counts ----------------------------------------------------------------------------------
    def _write_counts(self, key: RSyncKey, rsync: RSync, observed: ObjectCounts) -> None:
        state = self.states.get(key, RSyncState())
        written = self.cluster.write_counts(key, rsync, observed, in_annotations=state.counts_in_annotations)
        if written == "fell_back":
            self.states[key] = replace(state, counts_in_annotations=True)

    def forget(self, key: RSyncKey) -> None:
        """The RSync is gone: drop what we knew of it and its metric series. A new RSync of the same
        name starts from what it has, not from the old one's decisions."""
        self.states.pop(key, None)
        with self._peaks_lock:
            self.peaks.pop(key, None)
        for gauge in (WORKING_SET, CALIBRATION_FACTOR, COUNT_UNKNOWN, SOURCE_REJECTED):
            with contextlib.suppress(KeyError):
                gauge.remove(str(key))
        for gauge, labels in (
            (OBJECTS, ("source", "sync")),
            (RECOMMENDED, ("cpu_millicores", "memory_mib")),
            (APPLIED, ("cpu_millicores", "memory_mib")),
        ):
            for label in labels:
                with contextlib.suppress(KeyError):
                    gauge.remove(str(key), label)


def _set_gauges(gauge: Gauge, key: RSyncKey, resources: Resources | None) -> None:
    if resources is None:
        return
    gauge.labels(str(key), "cpu_millicores").set(resources.cpu_request_m)
    gauge.labels(str(key), "memory_mib").set(resources.memory_request_mib)
