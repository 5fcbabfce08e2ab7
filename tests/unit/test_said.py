"""What a plan shows on /metrics, from the plan alone (`autoscaler.core.said.shown_of_*`): the executor only
sets what these return."""

from __future__ import annotations

from fractions import Fraction

from autoscaler.core.calibration import Calibration, Window
from autoscaler.core.outcome import Outcome
from autoscaler.core.plan import Plan, RSyncState
from autoscaler.core.resources import Resources
from autoscaler.core.said import SHOWN_SERIES, Shown, shown_of_plan, shown_of_sizes
from autoscaler.core.size_decision import SizeDecision
from inventory.core.counts import ObjectCounts

SIZED = SizeDecision(Outcome.SCALED_UP, Resources(85, 160), recommended=Resources(85, 192))


def plan(outcome: Outcome, counts: ObjectCounts, state: RSyncState, **kwargs: object) -> Plan:
    return Plan(outcome, "why", state, counts, **kwargs)  # type: ignore[arg-type]


def test_a_plan_shows_its_counts_what_is_unknown_a_rejection_a_wait_and_the_calibration() -> None:
    calibration = Calibration(Fraction(6, 5), 150, Window("pod-a", 0.0, "c1"), 125, 0.0)
    state = RSyncState(decision=SIZED, calibration=calibration)
    waiting = plan(
        Outcome.POSTPONED,
        ObjectCounts(1000, None, source_rejected="Config Sync rejects commit c2"),
        state,
        waiting_for_room=Resources(85, 160),
    )
    assert shown_of_plan(waiting, reads_source=True) == [
        (Shown.OBJECTS, ("source",), 1000),
        (Shown.COUNT_UNKNOWN, (), 1),  # the inventory's count is unknown
        (Shown.SOURCE_REJECTED, (), 1),
        (Shown.WAITING_FOR_ROOM, (), 1),
        (Shown.CALIBRATION_FACTOR, (), 1.2),
    ]
    quiet = plan(Outcome.UNCHANGED, ObjectCounts(None, 1001), RSyncState(decision=SIZED))
    assert shown_of_plan(quiet, reads_source=False) == [
        (Shown.OBJECTS, ("sync",), 1001),
        (Shown.COUNT_UNKNOWN, (), 0),  # cluster mode reads no source: its unknown source is expected
        (Shown.SOURCE_REJECTED, (), 0),
        (Shown.WAITING_FOR_ROOM, (), 0),
    ]
    assert shown_of_plan(quiet, reads_source=True)[1] == (Shown.COUNT_UNKNOWN, (), 1)


def test_the_sizes_shown_are_the_decisions_and_none_where_nothing_is_sized() -> None:
    sized = plan(Outcome.SCALED_UP, ObjectCounts(1000, 1000), RSyncState(decision=SIZED))
    assert shown_of_sizes(sized) == [
        (Shown.RECOMMENDED, ("cpu_millicores",), 85),
        (Shown.RECOMMENDED, ("memory_mib",), 192),
        (Shown.APPLIED, ("cpu_millicores",), 85),
        (Shown.APPLIED, ("memory_mib",), 160),
    ]
    for outcome in (Outcome.HANDS_OFF, Outcome.OPTED_OUT):
        assert shown_of_sizes(plan(outcome, ObjectCounts(1000, 1000), RSyncState(decision=SIZED))) == []
    assert shown_of_sizes(plan(Outcome.UNCHANGED, ObjectCounts(1000, 1000), RSyncState())) == []


def test_every_series_a_plan_shows_is_one_removed_when_its_rsync_goes() -> None:
    calibration = Calibration(Fraction(1), 150, Window("pod-a", 0.0, "c1"), 150, 0.0)
    full = plan(
        Outcome.SCALED_UP,
        ObjectCounts(1000, 1000),
        RSyncState(decision=SIZED, calibration=calibration),
        waiting_for_room=Resources(85, 160),
    )
    shown = shown_of_plan(full, reads_source=True) + shown_of_sizes(full)
    assert {(gauge, labels) for gauge, labels, _ in shown} == {
        (gauge, labels) for gauge, series in SHOWN_SERIES.items() for labels in series
    }
