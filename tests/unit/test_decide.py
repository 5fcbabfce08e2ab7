"""The decision as a table: an observation and a state in, a Decision out, through the pure `decide` alone
(no executor, no port, no metrics), then the state kept and what is said after each possible result of
the write (`Decision.after`). Every expected size is worked by hand from the prototype preset (128 MiB +
0.2 MiB per object up to the next 32 MiB step; CPU 1000m per GiB of it, rounded up; limits = requests)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

import pytest

from autoscaler.core.annotations import AUTOSCALE_ANNOTATION, CALIBRATION_ANNOTATION, OOM_FLOOR_ANNOTATION
from autoscaler.core.calibration import Sample, Window
from autoscaler.core.decide import Decision, decide
from autoscaler.core.observation import Observation, Reading, RSyncView, Unread
from autoscaler.core.oom import OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import DecideConfig, RSyncState
from autoscaler.core.reasons import Reason, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.said import Counted
from autoscaler.core.size_decision import Hysteresis, SizeDecision
from autoscaler.core.sizing import PROTOTYPE, STANDARD, Profile
from autoscaler.core.written import Applied, Written
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey

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
    )
    return decide(seen, row.state, config, TARGET)


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
