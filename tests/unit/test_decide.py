"""The decision as a table: an observation and a state in, a Decision out, through the pure `decide` alone
(no executor, no port, no metrics), then the state kept and what is said after each possible result of
the write (`Decision.after`). Reconciles in a row (a delay waited out, restarts toward the cap, another
writer's size over an hour, a resize the kubelet defers) are driven by `Reconciles`: `decide` again and
again, each plan's write taken as done (or refused), the state after it carried to the next. Every
expected size is worked by hand from the prototype preset (128 MiB + 0.2 MiB per object up to the next
32 MiB step; CPU 1000m per GiB of it, rounded up; limits = requests):
  100 objects -> 148 -> 160 MiB, 157 m;  1,000 -> 328 -> 352 MiB, 344 m;  5,000 -> 1,128 -> 1,152 MiB, 1,125 m.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from fractions import Fraction
from typing import Any, cast

import pytest

from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    AUTOSCALE_ANNOTATION,
    CALIBRATION_ANNOTATION,
    HELD_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    PLATFORM_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    SYNCED_SOURCE_ANNOTATION,
    TARGET_ANNOTATION,
    WAITING_ANNOTATION,
)
from autoscaler.core.calibration import Sample, Window
from autoscaler.core.decide import Decision, Result, decide, needs
from autoscaler.core.observation import Observation, Reading, RSyncView, Unread
from autoscaler.core.oom import OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig, Plan, RSyncState
from autoscaler.core.reasons import Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.said import Counted, Gauged, Said, Shown
from autoscaler.core.size_decision import Hysteresis, SizeDecision
from autoscaler.core.sizing import AUTOPILOT, PROTOTYPE, STANDARD, NodeRoom, Profile, Sizing
from autoscaler.core.written import Applied, Written
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from inventory.core.objects import Pod, RSync

KEY = RSyncKey("RootSync", "config-management-system", "root-sync")
DELAY = 600.0
AT_100 = Resources(157, 160, 157, 160)  # 148 -> 160 MiB; 156.25 -> 157m
AT_1000 = Resources(344, 352, 344, 352)  # 328 -> 352 MiB; 343.75 -> 344m
AT_5000 = Resources(1125, 1152, 1125, 1152)  # 1128 -> 1152 MiB; 1125m
# Killed at a 160 MiB limit: the floor is max(160 x 1.5, 160 + 128) = 288 MiB, on the 32 MiB grid; CPU
# 288 x 1000 / 1024 = 281.25 -> 282m.
AT_FLOOR = Resources(282, 288, 282, 288)
KILLED = OomKill("2026-11-22T10:00:00Z", 160)
KILLED_AT_WALL = 1795341600.0  # 2026-11-22T10:00:00Z
# The size for 5,000 objects with the CPU the Pod runs with at 100 (memory first while a resize waits).
MEMORY_FIRST = Resources(157, 1152, 157, 1152)
SHORT_OF_CPU = "Node didn't have enough resource: cpu, requested: 1145, used: 1900, capacity: 2000"
# A scale-down that began at 0 s, waiting: 100 objects want AT_100.
LOWERING = SizeDecision(
    Outcome.POSTPONED, AT_5000, recommended=AT_100, lower_since=0.0, lower_sync=100, lower_peak=AT_100
)
# How AT_5000 and the floor after KILLED are published (the annotations), written by hand.
AT_5000_ANNOTATION = (
    '{"requests":{"cpu":"1125m","memory":"1152Mi"},"limits":{"cpu":"1125m","memory":"1152Mi"}}'
)
FLOOR_ANNOTATION = '{"memory":"288Mi","killedAt":"2026-11-22T10:00:00Z","since":"2026-11-22T10:00:00Z"}'
DAY = 86400.0
SHORT_OF_MEMORY = "Node didn't have enough resource: memory, requested: 1207959552, used: 7e9, capacity: 8e9"
REJECTED = 'Config Sync rejects commit 0123456789ab: KNV2010 b.yaml: missing field "metadata.name"'
TEMPLATE = Resources(50, 200)  # Config Sync's Standard template: requests only


# A reconciler container started at 10:00 that finished commit c1 at 10:05 (Config Sync's status), its
# working set seen at 400 MiB meanwhile.
POD = "root-reconciler-6c9f7d8b4-x2x9q"
STARTED = datetime(2026, 11, 25, 10, 0, tzinfo=UTC).timestamp()
SYNCED_C1: dict[str, Any] = {
    "source": {"commit": "c1"},
    "sync": {"commit": "c1", "lastUpdate": "2026-11-25T10:05:00Z"},
    "conditions": [{"type": "Syncing", "status": "False"}],
    "lastSyncedCommit": "c1",
}
SEEN_AT_400 = (Sample(Window(POD, STARTED, "c1"), 400),)
TARGET = "fake"


@dataclass(frozen=True)
class Row:
    counts: ObjectCounts
    current: Resources | None = AT_100
    state: RSyncState = field(default_factory=RSyncState)
    annotations: dict[str, str] = field(default_factory=dict)
    status: dict[str, Any] = field(default_factory=dict)
    reading: Reading = field(default_factory=Reading)
    samples: tuple[Sample, ...] = ()
    now: float = 0.0
    wall: float = KILLED_AT_WALL
    in_place: bool = False
    reads_source: bool = False  # a sidecar


def decided(row: Row) -> Decision:
    rsync = {
        "metadata": {
            "name": KEY.name,
            "namespace": KEY.namespace,
            "generation": 1,
            "annotations": row.annotations,
        },
        "status": row.status,
    }
    reading = replace(row.reading, current=row.current)
    seen = Observation(KEY, RSyncView.of(rsync), reading, row.counts, row.now, row.wall, row.samples)
    config = DecideConfig(
        Profile(PROTOTYPE, STANDARD),
        Hysteresis(DELAY, 100),
        reread_current=True,
        in_place=row.in_place,
        reads_source=row.reads_source,
        target=TARGET,
    )
    return decide(seen, row.state, config)


# name: (row, outcome, size applied, words of the reason)
TABLE: dict[str, tuple[Row, Outcome, Resources | None, str]] = {
    "a larger count scales up at once": (
        Row(ObjectCounts(5000, 5000)),
        Outcome.SCALED_UP,
        AT_5000,
        "5000 objects",
    ),
    "a lower count waits out the delay": (
        Row(ObjectCounts(100, 100), current=AT_5000),
        Outcome.POSTPONED,
        None,
        "lower target held 0s of 600s",
    ),
    "then lowers": (
        Row(ObjectCounts(100, 100), current=AT_5000, state=RSyncState(LOWERING), now=DELAY + 1),
        Outcome.SCALED_DOWN,
        AT_100,
        "down to",
    ),
    "a prune under way holds the size past the delay": (
        Row(
            ObjectCounts(100, 1000),  # the inventory larger than the source, no sync reported
            current=AT_5000,
            state=RSyncState(LOWERING),
            now=10 * DELAY,
        ),
        Outcome.POSTPONED,
        None,
        "prune pending (inventory 1000 > source 100)",
    ),
    "a count unknown lowers nothing": (
        Row(ObjectCounts(None, None), current=AT_5000, now=10 * DELAY),
        Outcome.POSTPONED,
        None,
        "both counts unknown",
    ),
    "an OOM kill raises the floor above the count's size": (
        Row(ObjectCounts(100, 100), reading=Reading(oom_kill=KILLED)),
        Outcome.SCALED_UP,
        AT_FLOOR,
        "100 objects need requests 282m/288Mi",
    ),
    "an owner who holds the size gets a recommendation, no write": (
        Row(ObjectCounts(5000, 5000), reading=Reading(held_by_owner="declared in git by RootSync root")),
        Outcome.HELD_BY_OWNER,
        None,
        "declared in git by RootSync root",
    ),
    "opted out: counts only": (
        Row(ObjectCounts(5000, 5000), annotations={AUTOSCALE_ANNOTATION: "false"}),
        Outcome.OPTED_OUT,
        None,
        "counts recorded",
    ),
    "a sidecar whose own Pod is being deleted sizes nothing": (
        Row(ObjectCounts(5000, 5000), reading=Reading(own_pod_going=True), reads_source=True),
        Outcome.POSTPONED,
        None,
        "this sidecar's own Pod is being deleted",
    ),
    "cluster mode sizes whatever Pod goes": (
        Row(ObjectCounts(5000, 5000), reading=Reading(own_pod_going=True)),
        Outcome.SCALED_UP,
        AT_5000,
        "5000 objects",
    ),
    "in place, a larger size while the last waits for room: its memory first": (
        Row(
            ObjectCounts(5000, 5000),
            reading=Reading(deferred=(Resources(344, 352, 344, 352), SHORT_OF_CPU)),
            in_place=True,
        ),
        Outcome.SCALED_UP,
        MEMORY_FIRST,
        "the memory of requests 1125m/1152Mi, limits 1125m/1152Mi first: requests 157m/1152Mi",
    ),
    # Seen at 400 MiB syncing c1, finished: it needs 400 x 1.25 = 500 MiB where the model predicts 328 for
    # 1,000 objects; the factor 500 / 328 = 1.52439 -> 1.5244 (four decimals, up); 1.5244 x 328 = 500.0
    # -> 512 MiB, CPU 512 x 1000 / 1024 = 500m.
    "calibration raises an underpriced RSync at once": (
        Row(ObjectCounts(1000, 1000), current=AT_1000, status=SYNCED_C1, samples=SEEN_AT_400),
        Outcome.SCALED_UP,
        Resources(500, 512, 500, 512),
        "1000 objects",
    ),
    # The Pod list unread (where only its OOM kills needed it): sized from the counts alone.
    "a read that fails in part sizes from the counts": (
        Row(
            ObjectCounts(5000, 5000),
            reading=Reading(unread=(Unread("read", "cannot read the reconciler's OOM kills: timed out"),)),
        ),
        Outcome.SCALED_UP,
        AT_5000,
        "5000 objects",
    ),
    # The named cases of one reconcile (the first, "more objects: scale up at once", is the first row above);
    # test_executor keeps what the loop does with them: the counts recorded, the outcome counted.
    "only the inventory known: scale up anyway": (
        Row(ObjectCounts(None, 5000)),
        Outcome.SCALED_UP,
        AT_5000,
        "5000 objects",
    ),
    "already sized": (
        Row(ObjectCounts(100, 100)),
        Outcome.UNCHANGED,
        None,
        "100 objects: already sized",
    ),
    "both counts unknown: postponed": (
        Row(ObjectCounts()),
        Outcome.POSTPONED,
        None,
        "both counts unknown",
    ),
    # 10 objects in the source, 100 in the inventory (10 still to prune): sized for the inventory.
    "prune pending: no scale-down": (
        Row(ObjectCounts(10, 100)),
        Outcome.UNCHANGED,
        None,
        "100 objects: already sized",
    ),
    "opted out, in any case of the word: counts only": (
        Row(ObjectCounts(5000, 5000), annotations={AUTOSCALE_ANNOTATION: "False"}),
        Outcome.OPTED_OUT,
        None,
        "counts recorded",
    ),
    "unknown platform: error, nothing applied": (
        Row(ObjectCounts(5000, 5000), annotations={PLATFORM_ANNOTATION: "mainframe"}),
        Outcome.ERROR,
        None,
        "unknown objcount.dev/platform 'mainframe'",
    ),
    # An OOM floor or a bigger inventory still raises the size while the newest commit is rejected: only
    # lowering is held.
    "a rejected commit does not hold a scale-up the counts call for": (
        Row(ObjectCounts(100, 5000, source_rejected=REJECTED)),
        Outcome.SCALED_UP,
        AT_5000,
        "5000 objects",
    ),
    # A new service process: the Pod runs 1,125m/1,152Mi, which the RSync records as applied (ours): fewer
    # objects wait for the scale-down delay, as they would have without the restart.
    "in place, after a restart the size recorded on the RSync is ours and held": (
        Row(
            ObjectCounts(100, 100),
            current=AT_5000,
            annotations={APPLIED_ANNOTATION: AT_5000_ANNOTATION},
            reading=Reading(resizes_running=True),
            in_place=True,
        ),
        Outcome.POSTPONED,
        None,
        "lower target held",
    ),
}


@pytest.mark.parametrize("name", list(TABLE))
def test_the_decision(name: str) -> None:
    row, outcome, applied, words = TABLE[name]
    plan = decided(row).plan
    assert (plan.outcome, plan.apply) == (outcome, applied), plan.reason
    assert words in plan.reason


def test_the_oom_floor_is_published_with_the_kill_it_answers_and_said() -> None:
    decision = decided(TABLE["an OOM kill raises the floor above the count's size"][0])
    plan = decision.plan
    assert plan.publish[OOM_FLOOR_ANNOTATION] == (
        '{"memory":"288Mi","killedAt":"2026-11-22T10:00:00Z","since":"2026-11-22T10:00:00Z"}'
    )
    assert plan.oom_raised == (KILLED, plan.state.oom_floor)
    assert [each.event for each in decision.said if each.event] == ["OomFloorRaised"]
    assert (Counted.OOM_FLOORS, ()) in [each.counted for each in decision.said]


def test_what_calibration_learned_is_published_and_said() -> None:
    decision = decided(TABLE["calibration raises an underpriced RSync at once"][0])
    assert decision.plan.publish[CALIBRATION_ANNOTATION] == (
        '{"factor":"1.5244","peakMiB":400,"predictedMiB":328,"pod":"' + POD + '",'
        '"podStarted":"2026-11-25T10:00:00Z","commit":"c1","since":"2026-11-22T10:00:00Z"}'
    )
    assert [each.event for each in decision.said if each.event] == ["Calibrated"]
    assert (Counted.CALIBRATIONS, ("first",)) in [each.counted for each in decision.said]


def test_a_read_that_fails_in_part_is_said_and_counted_before_the_write() -> None:
    decision = decided(TABLE["a read that fails in part sizes from the counts"][0])
    warned = [each for each in decision.said if each.level == logging.WARNING]
    assert [each.message for each in warned] == ["cannot read the reconciler's OOM kills: timed out"]
    assert warned[0].counted == (Counted.RECONCILE_ERRORS, ("read",))


def test_the_state_kept_after_each_result_of_the_write() -> None:
    """Written and restarted: the plan's state, the restart counted toward the cap. Written without a
    restart: the plan's state. Failed: the decision is made again from the state before, what was
    learned (the OOM floor) is kept, and the failure is remembered (the same one again is not news)."""
    decision = decided(Row(ObjectCounts(100, 100), reading=Reading(oom_kill=KILLED)))
    plan = decision.plan
    assert plan.state.decision is not None
    restarted = decision.after(Written(Applied(AT_FLOOR, restarted=True)), now=50.0)
    assert restarted.outcome == Outcome.SCALED_UP
    assert restarted.state.decision is not None
    assert restarted.state.decision.restarts == (50.0,)
    assert (Counted.RESTARTS_CAUSED, ()) in [each.counted for each in restarted.said]
    assert decision.after(Written(Applied(AT_FLOOR, restarted=False)), now=50.0).state == plan.state
    refused = decision.after(WriteError(Reason.FORBIDDEN, "pods/resize is forbidden"), now=50.0)
    assert refused.outcome == Outcome.FAILED
    assert refused.state.decision is None, "decided again next time"
    assert refused.state.oom_floor == plan.state.oom_floor
    assert refused.state.failed == (Reason.FORBIDDEN, AT_FLOOR)
    assert decision.after(Written(), now=50.0).state == plan.state, "no size due: nothing settled"


def test_a_write_that_fails_is_said_once_and_counted_each_time() -> None:
    """The first failure is an error with an Event; the same failure again (remembered in the state) is
    said at debug, and still counted; nothing is shown of a size not written, and no recheck is asked."""
    row = Row(ObjectCounts(5000, 5000))
    refusal = WriteError(Reason.FORBIDDEN, "pods/resize is forbidden")
    first = decided(row).after(refusal, now=1.0)
    assert (first.outcome, first.shown, first.recheck_after) == (Outcome.FAILED, (), None)
    assert [(each.level, each.event) for each in first.said if each.message] == [
        (logging.ERROR, "ApplyFailed")
    ]
    again = decided(replace(row, state=first.state)).after(refusal, now=2.0)
    assert [each.level for each in again.said if each.message] == [logging.DEBUG]
    counted = (Counted.APPLY_ERRORS, (TARGET, Reason.FORBIDDEN))
    assert counted in [each.counted for each in first.said]
    assert counted in [each.counted for each in again.said]


# ----- reconciles in a row: decide, the write, the state after it carried to the next ----------------------
STANDARD_PROTOTYPE = Profile(PROTOTYPE, STANDARD)


def looped(*, max_restarts: int = 100, reads_source: bool = False) -> DecideConfig:
    """The settings test_executor's rig gives the loop: the prototype on Standard, the size read until a
    decision was made."""
    return DecideConfig(
        STANDARD_PROTOTYPE, Hysteresis(DELAY, max_restarts), 3, reads_source=reads_source, target=TARGET
    )


def rereading(*, in_place: bool = False, profile: Profile = STANDARD_PROTOTYPE) -> DecideConfig:
    """The size read on every reconcile (it can change behind our back); `in_place`: it is the Pod's."""
    return DecideConfig(
        profile, Hysteresis(DELAY, 100), reread_current=True, in_place=in_place, target=TARGET
    )


def annotated(annotations: Mapping[str, str], generation: int = 1) -> RSync:
    return {"metadata": {"name": KEY.name, "generation": generation, "annotations": dict(annotations)}}


@dataclass(frozen=True)
class Turn:
    """One reconcile: its Decision, and what became of it once its write was tried."""

    decision: Decision
    result: Result

    @property
    def outcome(self) -> Outcome:
        return self.result.outcome

    @property
    def plan(self) -> Plan:
        return self.decision.plan

    @property
    def said(self) -> tuple[Said, ...]:
        return (*self.decision.said, *self.result.said)

    @property
    def shown(self) -> tuple[Gauged, ...]:
        return (*self.decision.shown, *self.result.shown)

    def gauge(self, shown: Shown) -> float | None:
        """The value this reconcile leaves on one of its RSync's gauges (the last one set)."""
        values = [value for gauge, labels, value in self.shown if gauge == shown and labels == ()]
        return values[-1] if values else None


@dataclass
class Reconciles:
    """Reconciles of one RSync through `decide` alone, in the loop's order: what `needs` asks for is read
    (the size the reconciler runs, the largest node), the plan's size is written (it then runs; refused
    when `refusal` is set), the state after that write is the next reconcile's. What was applied,
    published (non-empty), said and asked as a recheck is kept in order, as the loop delivers it."""

    config: DecideConfig
    running: Resources | None = AT_100  # the size the reconciler runs
    reading: Reading = field(default_factory=Reading)  # the rest of what a read returns
    now: float = 1000.0
    wall: float = KILLED_AT_WALL
    state: RSyncState = field(default_factory=RSyncState)
    restarts: bool = True  # a size written restarts the reconciler
    generation_after_apply: int | None = None  # the RSync's generation once a size is written into it
    fell_back: str | None = None  # why a size written went through the target's fallback
    refusal: WriteError | None = None  # how a write of a size fails
    applied: list[Resources] = field(default_factory=list)
    published: list[dict[str, str | None]] = field(default_factory=list)
    said: list[Said] = field(default_factory=list)
    rechecks: list[float] = field(default_factory=list)

    def __call__(self, counts: ObjectCounts, rsync: RSync | None = None) -> Turn:
        view = RSyncView.of(annotated({}) if rsync is None else rsync)
        asked = needs(view, self.state, self.config)
        reading = replace(
            self.reading,
            current=self.running if asked.current else None,
            node_room=self.reading.node_room if asked.nodes else None,
        )
        seen = Observation(KEY, view, reading, counts, self.now, self.wall)
        decision = decide(seen, self.state, self.config)
        result = decision.after(self._write(decision.plan), self.now)
        self.state = result.state
        self.said += [*decision.said, *result.said]
        if result.recheck_after is not None:
            self.rechecks.append(result.recheck_after)
        return Turn(decision, result)

    def _write(self, plan: Plan) -> Written | WriteError:
        applied = None
        if plan.apply is not None:
            if self.refusal is not None:
                return self.refusal
            self.running = plan.apply
            self.applied.append(plan.apply)
            applied = Applied(
                plan.apply, self.restarts, self.generation_after_apply, fell_back=self.fell_back
            )
        if plan.publish:
            self.published.append(dict(plan.publish))
        return Written(applied)

    def reads(self, **changes: Any) -> None:
        """What the next reads return changes (the kubelet applied a resize, an owner let go, ...)."""
        self.reading = replace(self.reading, **changes)


def times(said: Iterable[Said], counted: tuple[Counted, tuple[str, ...]]) -> int:
    """How often a counter is incremented by what was said."""
    return sum(1 for each in said if each.counted == counted)


def events(said: Iterable[Said]) -> list[tuple[str, str]]:
    """The Events on the RSync of what was said: reason, note (the log line unless one is given)."""
    return [(each.event, each.note or each.message or "") for each in said if each.event is not None]


# ----- one reconcile ----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("monitoring", "applied"),
    [
        # 100 objects: the prototype's 160Mi and 157m. Autopilot, the Pod not read yet (no Pod, no
        # Deployment): git-sync (20m/32Mi) and the otel-agent (10m/64Mi) assumed, a pod of 187m/256Mi, raised
        # to Autopilot's 250m/512Mi, the difference to the reconciler: 220m/416Mi.
        (None, Resources(220, 416, 220, 416)),
        ({"enabled": True}, Resources(220, 416, 220, 416)),
        # spec.monitoring.enabled false (Config Sync v1.25): no otel-agent, git-sync alone: a pod of
        # 177m/192Mi raised to 250m/512Mi: 230m/480Mi.
        ({"enabled": False}, Resources(230, 480, 230, 480)),
    ],
)
def test_others_not_read_yet_are_assumed_with_the_otel_agent_unless_monitoring_is_off(
    monitoring: dict[str, bool] | None, applied: Resources
) -> None:
    config = DecideConfig(Profile(PROTOTYPE, AUTOPILOT), Hysteresis(DELAY, 100), 3, measure_others=True)
    body: RSync = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "generation": 1}}
    if monitoring is not None:
        body["spec"] = {"monitoring": monitoring}
    run = Reconciles(config)
    run(ObjectCounts(100, 100), body)
    assert needs(RSyncView.of(body), RSyncState(), config).others, (
        "the other containers are asked for on Autopilot"
    )
    assert run.applied == [applied]


def test_a_sidecar_whose_pod_is_being_deleted_sizes_nothing() -> None:
    """Seen on the real node: a sidecar wrote its size (the rsync-override target, a rollout), its own
    Pod was deleted by the rollout, and its next reconcile read the other containers from the Deployment's
    template, which lacks the sidecar our webhook adds: a larger size, written 160 ms later, and the next
    Pod's sidecar wrote the first again: a rollout every 3 s. A sidecar that finds every reconciler Pod
    being deleted sizes nothing; with its Pod listed, or no Pod at all (an API server without nodes), it
    sizes as before (the others as Autopilot's platform assumes them, git-sync 20m/32Mi and the otel-agent
    10m/64Mi: the pod raised to 250m/512Mi, 220m/416Mi)."""
    config = DecideConfig(
        Profile(PROTOTYPE, AUTOPILOT), Hysteresis(DELAY, 100), 3, measure_others=True, reads_source=True
    )
    going = Reconciles(config, running=None, reading=Reading(pods_going=True))
    assert (going(ObjectCounts(100, 100)).outcome, going.applied) == (Outcome.POSTPONED, [])
    listed = Reading(pod=cast(Pod, {"metadata": {"name": "root-reconciler-x"}}))
    for reading in (listed, Reading()):
        run = Reconciles(config, running=None, reading=reading)
        run(ObjectCounts(100, 100))
        assert run.applied == [Resources(220, 416, 220, 416)]


def test_prune_pending_is_said_in_the_decision() -> None:
    run = Reconciles(looped())
    assert run(ObjectCounts(10, 100)).outcome == Outcome.UNCHANGED  # 100 objects: sized for the inventory
    assert run.state.decision is not None
    run.running, run.state = AT_1000, RSyncState()  # nothing remembered; the reconciler at 1,000's size
    assert run(ObjectCounts(10, 100)).outcome == Outcome.POSTPONED
    assert run.state.decision is not None
    assert "prune pending" in run.state.decision.reason
    assert run.applied == []


def test_the_reconciler_is_sized_for_the_api_surface_discovery_reports() -> None:
    surface = Sizing(
        "surface", base_mib=Fraction(100), mib_per_object=Fraction(0), mib_per_api_resource=Fraction(1)
    )
    config = DecideConfig(Profile(surface, STANDARD), Hysteresis(DELAY, 100), 3)
    run = Reconciles(config, running=None, reading=Reading(api_resources=300))
    run(ObjectCounts(10, 10), annotated({}))
    # 100 MiB + 1 MiB x 300 resource types (fitted on none) = 400 -> 416 on the 32 MiB grid.
    assert [r.memory_request_mib for r in run.applied] == [416]


def test_a_scale_up_publishes_the_recommendation_and_the_size() -> None:
    """With the target it goes through (`objcount status` shows it)."""
    assert Reconciles(looped())(ObjectCounts(5000, 5000)).plan.publish == {
        RECOMMENDED_ANNOTATION: AT_5000_ANNOTATION,
        APPLIED_ANNOTATION: AT_5000_ANNOTATION,
        TARGET_ANNOTATION: "fake",
    }


def test_a_size_its_owner_holds_is_recommended_and_never_applied() -> None:
    run = Reconciles(looped(), reading=Reading(held_by_owner="spec.override is declared in git"))
    turn = run(ObjectCounts(5000, 5000))
    assert turn.outcome == Outcome.HELD_BY_OWNER
    assert run.applied == []
    # The recommendation is published; what is applied stays what the reconciler has (100 objects).
    assert turn.plan.publish == {
        RECOMMENDED_ANNOTATION: AT_5000_ANNOTATION,
        APPLIED_ANNOTATION: '{"requests":{"cpu":"157m","memory":"160Mi"},"limits":{"cpu":"157m","memory":"160Mi"}}',
        HELD_ANNOTATION: "spec.override is declared in git",
    }
    decision = run.state.decision
    assert decision is not None
    assert "not applied: spec.override is declared in git" in decision.reason
    run.reads(held_by_owner=None)  # the declaration no longer covers the field: ours again
    held = annotated({HELD_ANNOTATION: "spec.override is declared in git"})
    turn = run(ObjectCounts(5000, 5000), held)
    assert turn.outcome == Outcome.SCALED_UP
    assert run.applied == [AT_5000]
    assert turn.plan.publish[HELD_ANNOTATION] is None, "the reason is removed"


@pytest.mark.parametrize(
    ("reads_source", "counts", "unknown"),
    [
        (False, ObjectCounts(None, 100), 0),  # cluster mode reads no source: nothing is missing
        (False, ObjectCounts(100, None), 1),  # no inventory yet
        (True, ObjectCounts(None, 100), 1),  # a sidecar that could not count its source
        (True, ObjectCounts(100, 100), 0),
    ],
)
def test_a_count_is_unknown_only_where_the_service_reads_it(
    reads_source: bool, counts: ObjectCounts, unknown: int
) -> None:
    turn = Reconciles(looped(reads_source=reads_source))(counts)
    assert turn.gauge(Shown.COUNT_UNKNOWN) == unknown


# ----- the scale-down delay ---------------------------------------------------------------------------------
def test_a_lower_target_waits_for_the_delay_then_comes_down() -> None:
    run = Reconciles(looped(), running=AT_5000)
    assert run(ObjectCounts(100, 100)).outcome == Outcome.POSTPONED
    assert run.rechecks == [DELAY + 0.01], "the held scale-down is looked at again when it is due"
    run.now += DELAY - 1
    assert run(ObjectCounts(100, 100)).outcome == Outcome.POSTPONED
    run.now += 1
    assert run(ObjectCounts(100, 100)).outcome == Outcome.SCALED_DOWN
    assert run.applied == [AT_100]


# The delay counts from the inventory's last change: (seconds after the first reconcile, counts seen,
# outcome); the reconciler is sized for 5,000 objects.
Seen = tuple[float, ObjectCounts, Outcome]
DELAY_CASES: dict[str, tuple[list[Seen], list[Resources], list[float]]] = {
    "inventory unchanged: down once the delay has passed": (
        [
            (0, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (599, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (600, ObjectCounts(1000, 1000), Outcome.SCALED_DOWN),
        ],
        [AT_1000],
        [600.01, 1.01],
    ),
    "inventory 1,000 -> 100 at 300 s: not down at 650 s, down at 900 s": (
        [
            (0, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (300, ObjectCounts(100, 100), Outcome.POSTPONED),
            (650, ObjectCounts(100, 100), Outcome.POSTPONED),
            (899, ObjectCounts(100, 100), Outcome.POSTPONED),
            (900, ObjectCounts(100, 100), Outcome.SCALED_DOWN),
        ],
        [AT_100],
        [600.01, 600.01, 250.01, 1.01],
    ),
    # 1,001 objects: ceil(328.2 / 32) x 32 = 352 MiB, the same size as 1,000; only the entries changed.
    "inventory 1,000 -> 1,001 -> 1,000, same size: each change restarts the delay": (
        [
            (0, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (300, ObjectCounts(1001, 1001), Outcome.POSTPONED),
            (600, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (1199, ObjectCounts(1000, 1000), Outcome.POSTPONED),
            (1200, ObjectCounts(1000, 1000), Outcome.SCALED_DOWN),
        ],
        [AT_1000],
        [600.01, 600.01, 600.01, 1.01],
    ),
    "the source alone changes (1,000 -> 100), the inventory stays: the delay is not restarted": (
        [
            (0, ObjectCounts(1000, 100), Outcome.POSTPONED),
            (300, ObjectCounts(100, 100), Outcome.POSTPONED),
            (600, ObjectCounts(100, 100), Outcome.SCALED_DOWN),
        ],
        [AT_1000],
        [600.01, 300.01],
    ),
}


@pytest.mark.parametrize("name", list(DELAY_CASES))
def test_the_scale_down_delay(name: str) -> None:
    seen, applied, rechecks = DELAY_CASES[name]
    run = Reconciles(looped(), running=AT_5000)
    start = run.now
    for after, counts, outcome in seen:
        run.now = start + after
        assert run(counts).outcome == outcome, f"at {after} s"
    assert run.applied == applied
    assert run.rechecks == rechecks, "the held scale-down is looked at again when it is due"


# ----- restarts ---------------------------------------------------------------------------------------------
def test_the_restart_is_counted_when_the_in_place_target_falls_back_to_the_template() -> None:
    run = Reconciles(looped(), restarts=False)
    assert run(ObjectCounts(1000, 1000)).outcome == Outcome.SCALED_UP  # resized in place
    assert times(run.said, (Counted.RESTARTS_CAUSED, ())) == 0
    assert run.state.decision is not None
    assert run.state.decision.restarts == ()
    run.restarts = True  # the resize is infeasible: the template changes, the pod restarts
    run.now = 2000.0
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    assert times(run.said, (Counted.RESTARTS_CAUSED, ())) == 1
    assert run.state.decision.restarts == (2000.0,)


def test_restarts_that_happened_hold_scale_downs_at_the_cap() -> None:
    run = Reconciles(looped(max_restarts=1), restarts=True)
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    run(ObjectCounts(100, 100))
    run.now += DELAY
    assert run(ObjectCounts(100, 100)).outcome == Outcome.POSTPONED
    assert run.state.decision is not None
    assert "restart cap" in run.state.decision.reason


def test_resizes_that_did_not_restart_never_reach_the_cap() -> None:
    run = Reconciles(looped(max_restarts=1), restarts=False)
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    run(ObjectCounts(100, 100))
    run.now += DELAY
    assert run(ObjectCounts(100, 100)).outcome == Outcome.SCALED_DOWN


# ----- another writer ---------------------------------------------------------------------------------------
def test_another_writers_size_is_reported_reapplied_then_left_alone() -> None:
    theirs = Resources(50, 64, 50, 64)
    run = Reconciles(looped(), generation_after_apply=2)
    run(ObjectCounts(1000, 1000))
    assert run.state.written == (2, AT_1000)
    since = len(run.said)
    run.reads(declared=theirs)
    for generation in (3, 4, 5):  # three reverts in the hour are fought back
        run.generation_after_apply = generation
        assert run(ObjectCounts(1000, 1000), annotated({}, generation)).outcome == Outcome.SCALED_UP
        run.now += 60
    assert run.applied == [AT_1000] * 4
    assert run(ObjectCounts(1000, 1000), annotated({}, 6)).outcome == Outcome.HANDS_OFF
    assert run.applied == [AT_1000] * 4, "the fourth revert in the hour is not fought"
    assert run.state.decision is not None
    assert run.state.decision.resources == theirs
    assert times(run.said[since:], (Counted.APPLY_ERRORS, (TARGET, Reason.REVERTED))) == 4
    run.now += 3600
    assert run(ObjectCounts(1000, 1000), annotated({}, 6)).outcome == Outcome.SCALED_UP


def test_our_own_write_seen_in_a_stale_cache_is_no_revert() -> None:
    run = Reconciles(looped(), generation_after_apply=2)
    run(ObjectCounts(1000, 1000))
    run.reads(declared=AT_100)  # the cache still shows the size before our write
    assert run(ObjectCounts(1000, 1000), annotated({}, 2)).outcome == Outcome.UNCHANGED
    assert run.applied == [AT_1000]


# ----- errors: our own, and a write that fails --------------------------------------------------------------
def test_a_steps_own_error_is_told_once_while_it_lasts() -> None:
    run = Reconciles(looped())
    mars = annotated({PLATFORM_ANNOTATION: "mars"})
    told = []
    for rsync in (mars, mars, annotated({}), mars):
        said = run(ObjectCounts(5000, 5000), rsync).said
        told.append(
            [each.level for each in said if each.message and "unknown objcount.dev/platform" in each.message]
        )
    assert told[:2] == [[logging.ERROR], [logging.DEBUG]], "the same error again is not news"
    assert told[3] == [logging.ERROR], "told again once it had gone"


def test_an_error_keeps_the_state_it_had() -> None:
    run = Reconciles(looped())
    run(ObjectCounts(1000, 1000))
    before = run.state
    run.refusal = WriteError(Reason.REJECTED, "apply: rejected")
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.FAILED
    after = run.state
    assert replace(after, failed=None) == before, "only the failure is remembered"
    assert after.failed == ("rejected", Resources(1125, 1152, 1125, 1152))
    assert isinstance(before, RSyncState)


def test_a_failure_that_repeats_is_logged_once_and_counted_every_time() -> None:
    refusal = WriteError(Reason.REJECTED, "apply: rejected")
    run = Reconciles(looped(), refusal=refusal)

    def errors() -> list[Said]:
        return [s for s in run.said if s.level == logging.ERROR and s.message and "failed" in s.message]

    for _ in range(3):
        assert run(ObjectCounts(5000, 5000)).outcome == Outcome.FAILED
    assert len(errors()) == 1, "the same failure of the same size is said once"
    assert times(run.said, (Counted.APPLY_ERRORS, (TARGET, Reason.REJECTED))) == 3
    run.refusal = None
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    run.refusal = refusal
    assert run(ObjectCounts(20000, 20000)).outcome == Outcome.FAILED
    assert len(errors()) == 2, "after a success, a new failure is said again"


# ----- the OOM floor ----------------------------------------------------------------------------------------
def test_an_oom_kill_raises_the_size_at_once_and_the_floor_outlives_a_restart_then_decays() -> None:
    run = Reconciles(looped(), reading=Reading(oom_kill=KILLED), wall=KILLED_AT_WALL)
    turn = run(ObjectCounts(100, 100))
    assert turn.outcome == Outcome.SCALED_UP
    assert run.applied == [AT_FLOOR]
    assert turn.plan.publish[OOM_FLOOR_ANNOTATION] == FLOOR_ANNOTATION
    assert times(run.said, (Counted.OOM_FLOORS, ())) == 1
    # The Pod still reports the same kill (the annotation not yet in the cache): no second raise.
    assert run(ObjectCounts(100, 100)).outcome == Outcome.UNCHANGED
    assert times(run.said, (Counted.OOM_FLOORS, ())) == 1

    # A restarted service: nothing remembered but the RSync's annotation; the same kill is reported.
    run = Reconciles(looped(), running=AT_FLOOR, reading=Reading(oom_kill=KILLED), wall=KILLED_AT_WALL + DAY)
    kept = annotated({OOM_FLOOR_ANNOTATION: FLOOR_ANNOTATION})
    assert run(ObjectCounts(100, 100), kept).outcome == Outcome.UNCHANGED
    assert run.applied == []
    assert times(run.said, (Counted.OOM_FLOORS, ())) == 0

    # A week without a kill (the new Pod reports none): the floor goes, and the size follows the count
    # again after the usual scale-down delay.
    run.reads(oom_kill=None)
    run.wall = KILLED_AT_WALL + 7 * DAY
    turn = run(ObjectCounts(100, 100), kept)
    assert turn.outcome == Outcome.POSTPONED
    assert turn.plan.publish[OOM_FLOOR_ANNOTATION] is None, "the floor annotation is removed"
    run.now += DELAY
    assert run(ObjectCounts(100, 100), annotated({})).outcome == Outcome.SCALED_DOWN
    assert run.applied == [AT_100]


# ----- a new commit: sized for both commits until the reconciler has finished the new one -----------------
# By hand: 1 MiB per object of any kind, 0.1 MiB per ConfigMap, no base, 1 MiB steps (minimum 1 MiB).
KINDS = Sizing(
    "kinds",
    base_mib=Fraction(0),
    mib_per_object=Fraction(1),
    mib_per_object_of_kind=(("ConfigMap", Fraction(1, 10)),),
    step_mib=1,
    min_mib=1,
    cpu_min_m=1,
)


def reporting(
    commit_fetched: str, commit_synced: str, annotations: Mapping[str, str | None] | None = None
) -> RSync:
    """An RSync whose reconciler fetched one commit and finished another (the same: nothing pending)."""
    syncing = "True" if commit_fetched != commit_synced else "False"
    return {
        "metadata": {
            "name": KEY.name,
            "generation": 1,
            "annotations": {k: v for k, v in (annotations or {}).items() if v is not None},
        },
        "status": {
            "source": {"commit": commit_fetched},
            "sync": {"commit": commit_synced},
            "conditions": [{"type": "Syncing", "status": syncing, "message": "Sync Completed"}],
            "lastSyncedCommit": commit_synced,
        },
    }


def configmaps(objects: int, inventory: int, commit: str) -> ObjectCounts:
    return ObjectCounts(objects, inventory, source_kinds=(("ConfigMap", objects),), source_commit=commit)


def test_objects_still_to_prune_are_sized_as_what_the_last_finished_commit_held() -> None:
    run = Reconciles(DecideConfig(Profile(KINDS, STANDARD), Hysteresis(DELAY, 100), 3), running=None)
    # 800 ConfigMaps synced, and the implicit Namespace: 80 + 1 = 81 MiB.
    run(configmaps(800, 801, "a"), reporting("a", "a"))
    assert [r.memory_request_mib for r in run.applied] == [81]
    recorded = {k: v for p in run.published for k, v in p.items() if k == SYNCED_SOURCE_ANNOTATION}
    assert recorded == {SYNCED_SOURCE_ANNOTATION: '{"objects":800,"kib":null,"kinds":{"ConfigMap":800}}'}
    # A commit of 200 ConfigMaps, seen before the reconciler fetched it, then while it prunes: the 600 to
    # prune are ConfigMaps (81 MiB), not objects of any kind (200 x 0.1 + 601 x 1 = 621 MiB).
    for rsync in (reporting("a", "a"), reporting("b", "a")):
        assert run(configmaps(200, 801, "b"), rsync).outcome == Outcome.UNCHANGED
    # A restart of the service in the middle of the prune: the record on the RSync says the same.
    run.state = RSyncState()
    assert run(configmaps(200, 801, "b"), reporting("b", "a", recorded)).outcome == Outcome.UNCHANGED
    assert [r.memory_request_mib for r in run.applied] == [81]
    # Pruned and finished: 200 x 0.1 + 1 = 21 MiB once the lower target held for the delay.
    assert run(configmaps(200, 201, "b"), reporting("b", "b", recorded)).outcome == Outcome.POSTPONED
    run.now += DELAY
    assert run(configmaps(200, 201, "b"), reporting("b", "b", recorded)).outcome == Outcome.SCALED_DOWN
    assert [r.memory_request_mib for r in run.applied] == [81, 21]


# ----- a source commit Config Sync rejects, and one we could not read in full ----------------------------
def test_a_rejected_commit_lowers_nothing_and_says_why_until_a_good_commit_comes() -> None:
    run = Reconciles(looped(), running=AT_5000)
    # The last good commit had 5,000 objects; the newest is rejected: the observer keeps the good count.
    turn = run(ObjectCounts(5000, 5000, source_rejected=REJECTED))
    assert turn.outcome == Outcome.UNCHANGED
    assert turn.plan.publish["objcount.dev/source-rejected"] == REJECTED
    assert turn.gauge(Shown.SOURCE_REJECTED) == 1
    # The inventory shrinks meanwhile (another sync of the RSync's own objects, a manual delete): the
    # size stays, whatever the delay, while the newest commit is rejected.
    smaller = ObjectCounts(100, 100, source_rejected=REJECTED)
    assert run(smaller).outcome == Outcome.POSTPONED
    run.now += 10 * DELAY
    assert run(smaller).outcome == Outcome.POSTPONED
    assert run.applied == []
    assert run.state.decision is not None
    assert REJECTED in run.state.decision.reason
    # A good commit: the annotation goes, and the usual scale-down delay starts.
    holding = annotated({"objcount.dev/source-rejected": REJECTED})
    turn = run(ObjectCounts(100, 100), holding)
    assert turn.outcome == Outcome.POSTPONED
    assert turn.plan.publish["objcount.dev/source-rejected"] is None
    assert turn.gauge(Shown.SOURCE_REJECTED) == 0
    run.now += DELAY
    assert run(ObjectCounts(100, 100)).outcome == Outcome.SCALED_DOWN


def test_a_partly_read_source_raises_but_never_lowers() -> None:
    raised = Reconciles(looped(), running=AT_1000)
    assert raised(ObjectCounts(5000, 100, source_partial=True)).outcome == Outcome.SCALED_UP
    run = Reconciles(looped(), running=AT_5000)
    assert run(ObjectCounts(100, 100, source_partial=True)).outcome == Outcome.POSTPONED
    run.now += 10 * DELAY
    assert run(ObjectCounts(100, 100, source_partial=True)).outcome == Outcome.POSTPONED
    assert run.applied == []
    decision = run.state.decision
    assert decision is not None
    assert "some source files were not read" in decision.reason


# ----- in place: a resize the kubelet defers, a size that goes through the fallback ------------------------
def test_a_deferred_resize_asks_for_its_memory_first_then_waits_for_the_cpu() -> None:
    """The Pod runs at the size for 100 objects; the size for 5,000 was asked for and the kubelet defers
    it (the node's CPU is all requested): its memory is asked for alone, CPU as it runs; once that is
    in, more CPU is not asked for a minute (CPU_HOLD_S: it would be deferred again), then asked again, and
    while the kubelet defers it, nothing is asked or rolled out: postponed, looked at again within 30 s;
    once the kubelet applies it, the size stands."""
    deferred = Reading(deferred=(AT_5000, SHORT_OF_CPU), resizes_running=True)
    run = Reconciles(rereading(in_place=True), running=AT_100, reading=deferred)
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    assert run.applied == [MEMORY_FIRST]
    assert run.rechecks == [10.0], "the kubelet's answer looked at soon"
    run.reads(deferred=None)  # the kubelet applied the memory
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED
    assert run.applied == [MEMORY_FIRST], "more CPU not asked yet"
    assert run.rechecks[-1] == pytest.approx(60.0, abs=0.1), "looked at again when the hold ends"
    run.now += 60.0
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    assert run.applied == [MEMORY_FIRST, AT_5000]
    assert run.rechecks[-1] == 10.0
    run.running = MEMORY_FIRST  # and deferred the CPU again
    run.reads(deferred=(AT_5000, SHORT_OF_CPU))
    run.rechecks.clear()
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED
    assert run.applied == [MEMORY_FIRST, AT_5000]
    assert run.rechecks == [30.0, 30.0]
    run.running = AT_5000  # the kubelet found room
    run.reads(deferred=None)
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.UNCHANGED
    assert len(run.applied) == 2


def test_while_the_cpu_is_held_a_larger_count_raises_the_memory_at_once_and_the_hold_ends_on_time() -> None:
    """The kubelet deferred the size for 1,000 objects (no CPU on the node): its memory went first (CPU
    as it runs, 157m). 30 s later the count grows to 5,000 and no resize is deferred: the memory for
    5,000 is asked at once with the CPU held (157m/1152Mi), not the whole size; the hold still ends a
    minute after the deferral, not after the new ask. By hand: 1,000 objects, 352 MiB at 157m."""
    deferred = Reading(deferred=(AT_1000, SHORT_OF_CPU), resizes_running=True)
    run = Reconciles(rereading(in_place=True), running=AT_100, reading=deferred)
    assert run(ObjectCounts(1000, 1000)).outcome == Outcome.SCALED_UP
    assert run.applied == [Resources(157, 352, 157, 352)]
    run.reads(deferred=None)
    run.now += 30.0
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    assert run.applied[-1] == MEMORY_FIRST
    run.now += 30.0
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    assert run.applied[-1] == AT_5000, "the hold ended a minute after the deferral"


def test_a_deferred_resize_whose_memory_does_not_fit_either_is_waited_out_not_asked_again() -> None:
    run = Reconciles(rereading(), running=AT_100, reading=Reading(deferred=(AT_5000, SHORT_OF_MEMORY)))
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    run.running = AT_100  # deferred as well
    run.reads(deferred=(MEMORY_FIRST, SHORT_OF_MEMORY))
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED
    assert run.applied == [MEMORY_FIRST]
    assert run.rechecks[-2:] == [30.0, 30.0]


# By hand (prototype on Autopilot, limits = requests): 100 objects, 157m/160Mi, rise to the pod minimum of
# 250m/512Mi; 5,000 objects, 1125m/1152Mi: CPU to the 250m step, 1250m, then memory to 1 GiB per vCPU, 1280Mi.
ON_AUTOPILOT_AT_100 = Resources(250, 512, 250, 512)
ON_AUTOPILOT_AT_5000 = Resources(1250, 1280, 1250, 1280)


def test_on_autopilot_a_deferred_resize_is_waited_out_whole() -> None:
    """Autopilot's ratio rules tie the pod's CPU to its memory: no memory-only size is asked for."""
    run = Reconciles(
        rereading(profile=Profile(PROTOTYPE, AUTOPILOT)),
        running=ON_AUTOPILOT_AT_100,
        reading=Reading(deferred=(ON_AUTOPILOT_AT_5000, SHORT_OF_CPU)),
    )
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED
    assert run.applied == []


def test_a_wait_for_room_is_told_once_by_an_event_and_shown_while_it_lasts() -> None:
    """The kubelet defers the whole Autopilot size (above): an Event ResizeDeferred and the counter when
    the wait begins, not again on the next reconcile; the gauge and the annotation (the size deferred)
    while it lasts; once the kubelet applied it, the gauge is 0 and the annotation removed."""
    run = Reconciles(
        rereading(profile=Profile(PROTOTYPE, AUTOPILOT)),
        running=ON_AUTOPILOT_AT_100,
        reading=Reading(deferred=(ON_AUTOPILOT_AT_5000, SHORT_OF_MEMORY)),
    )
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED
    turn = run(ObjectCounts(5000, 5000))
    assert turn.outcome == Outcome.POSTPONED
    assert [reason for reason, _ in events(run.said)] == ["ResizeDeferred"]
    assert SHORT_OF_MEMORY in events(run.said)[0][1]
    assert times(run.said, (Counted.RESIZES_DEFERRED, ())) == 1
    assert turn.gauge(Shown.WAITING_FOR_ROOM) == 1
    shown = '{"requests":{"cpu":"1250m","memory":"1280Mi"},"limits":{"cpu":"1250m","memory":"1280Mi"}}'
    assert [p[WAITING_ANNOTATION] for p in run.published if WAITING_ANNOTATION in p] == [shown, shown]
    run.running = ON_AUTOPILOT_AT_5000  # the node found room
    run.reads(deferred=None)
    turn = run(ObjectCounts(5000, 5000), annotated({WAITING_ANNOTATION: shown}))
    assert turn.outcome == Outcome.UNCHANGED
    assert turn.gauge(Shown.WAITING_FOR_ROOM) == 0
    assert turn.plan.publish[WAITING_ANNOTATION] is None
    assert [reason for reason, _ in events(run.said)] == ["ResizeDeferred"]


def test_a_new_size_while_a_resize_is_deferred_is_asked_memory_first() -> None:
    """The kubelet defers the size for 1,000 objects; the commit grows to 5,000: that size replaces the
    deferred one, its memory asked with the CPU the Pod runs (more CPU would wait on that node too), then
    the whole of it once that is in. A new size that asks no more CPU than runs is asked whole."""
    run = Reconciles(rereading(), running=AT_100, reading=Reading(deferred=(AT_1000, SHORT_OF_CPU)))
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    assert run.applied == [MEMORY_FIRST]
    decision = run.state.decision
    assert decision is not None
    assert "first: requests 157m/1152Mi" in decision.reason
    run.running = MEMORY_FIRST  # the kubelet applied the memory
    run.reads(deferred=None)
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.POSTPONED, "more CPU held a minute"
    run.now += 60.0
    assert run(ObjectCounts(5000, 5000)).outcome == Outcome.SCALED_UP
    assert run.applied == [MEMORY_FIRST, AT_5000]
    lower = Reconciles(rereading(), running=AT_5000, reading=Reading(deferred=(AT_1000, SHORT_OF_CPU)))
    assert lower(ObjectCounts(100, 100)).outcome == Outcome.POSTPONED, "lower: the delay as ever"
    lower.now += 2 * DELAY
    assert lower(ObjectCounts(100, 100)).outcome == Outcome.SCALED_DOWN
    assert lower.applied == [AT_100], "less CPU than runs: asked whole"


def test_a_size_above_the_largest_node_is_capped_said_and_counted() -> None:
    """10,000 objects need 2094m/2144Mi (prototype); the largest node holds 2000m/2048Mi: capped to
    1980m/1920Mi, limits 2000m/2048Mi (worked in test_node_room), with a warning Event each time."""
    run = Reconciles(looped(), reading=Reading(node_room=NodeRoom("small", 2000, 2048)))
    turn = run(ObjectCounts(10_000, 10_000))
    assert turn.outcome == Outcome.SCALED_UP
    assert run.applied == [Resources(1980, 1920, 2000, 2048)]
    assert times(run.said, (Counted.CAPPED, (TARGET,))) == 1
    assert [reason for reason, _ in events(turn.said)] == ["ScaledUp", "CappedToNode"]
    assert run(ObjectCounts(10_000, 10_000)).outcome == Outcome.UNCHANGED, "the cap holds, not raised again"


def test_a_size_applied_through_the_fallback_is_said_and_counted() -> None:
    why = "the API server serves no pods/resize; applied through rsync-override"
    run = Reconciles(rereading(), fell_back=why)
    turn = run(ObjectCounts(5000, 5000))
    assert turn.outcome == Outcome.SCALED_UP
    assert times(run.said, (Counted.FALLBACKS, (TARGET,))) == 1
    assert [reason for reason, _ in events(turn.said)] == ["ScaledUp", "FellBack"]
    assert why in events(turn.said)[1][1]


def test_in_place_a_pod_at_its_templates_size_is_sized_at_once_even_down() -> None:
    """The first Pod runs its template's 50m/200Mi; 100 objects need 157m/160Mi (less memory): no
    scale-down delay holds a size we never set, it is applied at once and said as a scale-down."""
    run = Reconciles(rereading(in_place=True), running=TEMPLATE, reading=Reading(resizes_running=True))
    assert run(ObjectCounts(100, 100)).outcome == Outcome.SCALED_DOWN
    assert run.applied == [AT_100]
    # A new Pod started from the template again (our webhook down): sized at once again.
    run.running = TEMPLATE
    assert run(ObjectCounts(100, 100)).outcome == Outcome.SCALED_DOWN
    assert run.applied == [AT_100, AT_100]
