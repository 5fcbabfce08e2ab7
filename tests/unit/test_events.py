"""Events without a port: the series rules (pure), the Events a reconcile records (through the executor,
on test_executor's in-memory port) and a writer that never blocks or fails a reconcile."""

from __future__ import annotations

import threading
from typing import Any

from autoscaler.core.oom import OomKill
from autoscaler.core.outcome import Outcome
from autoscaler.kube.events import (
    SERIES_FLUSH_S,
    SERIES_GAP_S,
    EventWriter,
    Occurrence,
    Regarding,
    SeriesBook,
    event_body,
    series_patch,
)
from inventory.core.counts import ObjectCounts
from inventory.kube import kubeapi
from tests.fake_api import FakeApi
from tests.helpers import wait_for
from tests.unit.test_executor import AT_100, AT_1000, AT_5000, DELAY, KEY, FakePort, rig

ROOT = Regarding("configsync.gke.io/v1beta1", "RootSync", "config-management-system", "root-sync", "uid-1")


def held(at: float, note: str = "lower target held 10s of 600s") -> Occurrence:
    return Occurrence.of(ROOT, "ScaleDownPostponed", note, at)


def named_book() -> SeriesBook:
    names = iter(f"root-sync.{i}" for i in range(100))
    return SeriesBook(new_name=lambda _: next(names))


def test_a_repeat_becomes_a_series_and_later_repeats_are_flushed_at_most_once_a_minute() -> None:
    book = named_book()
    first = book.observe(held(0))
    assert first is not None
    assert (first.kind, first.series.name, first.series.count) == ("create", "root-sync.0", 1)
    second = book.observe(held(1))
    assert second is not None
    assert (second.kind, second.series.name, second.series.count) == ("series", "root-sync.0", 2)
    assert [book.observe(held(1 + i)) for i in range(1, 999)] == [None] * 998, "counted, not written"
    assert book.due(30, lambda key: held(30)) == [], "a flush waits a minute after the last write"
    (flush,) = book.due(1 + SERIES_FLUSH_S, lambda key: held(999))
    assert (flush.kind, flush.series.count, flush.series.last) == ("series", 1000, 999)
    assert series_patch(flush) == {
        "series": {"count": 1000, "lastObservedTime": "1970-01-01T00:16:39.000000Z"}
    }
    assert book.due(2 + SERIES_FLUSH_S, lambda key: held(999)) == [], "nothing new to write"


def test_another_reason_or_object_is_another_event_and_a_long_gap_starts_a_new_one() -> None:
    book = named_book()
    writes = [
        book.observe(held(0)),
        book.observe(Occurrence.of(ROOT, "ScaledUp", "5000 objects need ...", 1)),
        book.observe(held(2, "another note: the same series")),
        book.observe(
            Occurrence.of(Regarding("v", "RootSync", "ns", "other", "uid-2"), "ScaleDownPostponed", "", 3)
        ),
        book.observe(held(3 + SERIES_GAP_S)),
    ]
    kinds = [(w.kind, w.series.name, w.series.count) if w else None for w in writes]
    assert kinds == [
        ("create", "root-sync.0", 1),
        ("create", "root-sync.1", 1),
        ("series", "root-sync.0", 2),
        ("create", "root-sync.2", 1),
        ("create", "root-sync.3", 1),
    ]


def test_an_ended_series_is_forgotten() -> None:
    book = named_book()
    book.observe(held(0))
    assert book.due(SERIES_GAP_S + 1, lambda key: held(0)) == []
    assert book.series == {}


def test_the_event_as_created() -> None:
    write = named_book().observe(held(1764064800.25))
    assert write is not None
    assert event_body(write, "objcount-autoscaler-7d9-x") == {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": "root-sync.0", "namespace": "config-management-system"},
        "eventTime": "2025-11-25T10:00:00.250000Z",
        "reportingController": "objcount.dev/autoscaler",
        "reportingInstance": "objcount-autoscaler-7d9-x",
        "action": "Hold",
        "reason": "ScaleDownPostponed",
        "type": "Normal",
        "note": "lower target held 10s of 600s",
        "regarding": {
            "apiVersion": "configsync.gke.io/v1beta1",
            "kind": "RootSync",
            "namespace": "config-management-system",
            "name": "root-sync",
            "uid": "uid-1",
        },
    }


# ----- what a reconcile records ----------------------------------------------------------------------------
def with_uid(annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta = {"name": KEY.name, "namespace": KEY.namespace, "uid": "uid-1", "generation": 1}
    return {"metadata": {**meta, "annotations": annotations or {}}}


def recorded(port: FakePort, *observed: ObjectCounts, step_s: float = 0.0) -> list[tuple[str, str]]:
    r = rig(port)
    seen: list[Occurrence] = []
    r.executor.events = seen.append
    for counts in observed:
        r.reconcile(counts, with_uid())
        r.clock.now += step_s
    return [(o.reason, o.type) for o in seen]


def test_a_scale_up_a_held_scale_down_and_a_scale_down_are_recorded() -> None:
    assert recorded(FakePort(size=AT_100), ObjectCounts(5000, 5000)) == [("ScaledUp", "Normal")]
    held_then_down = recorded(FakePort(size=AT_5000), *[ObjectCounts(1000, 1000)] * 2, step_s=DELAY)
    assert held_then_down == [("ScaleDownPostponed", "Normal"), ("ScaledDown", "Normal")]
    assert recorded(FakePort(size=AT_1000), ObjectCounts(1000, 1000)) == [], "unchanged: no Event"


def test_a_held_size_a_failed_apply_and_an_oom_floor_are_warnings() -> None:
    assert recorded(FakePort(size=AT_100, owner="declared in git"), ObjectCounts(5000, 5000)) == [
        ("HeldByOwner", "Warning")
    ]
    assert recorded(FakePort(size=AT_100, failing={"apply"}), ObjectCounts(5000, 5000)) == [
        ("ApplyFailed", "Warning")
    ]
    killed = FakePort(size=AT_1000, oom_kill=OomKill("2026-11-25T12:00:00Z", 352))
    assert recorded(killed, ObjectCounts(1000, 1000)) == [
        ("OomFloorRaised", "Warning"),
        ("ScaledUp", "Normal"),
    ]


def test_an_rsync_without_a_uid_gets_no_event_and_the_reconcile_goes_on() -> None:
    r = rig(FakePort(size=AT_100))
    seen: list[Occurrence] = []
    r.executor.events = seen.append
    assert r.reconcile(ObjectCounts(5000, 5000)) == Outcome.SCALED_UP  # test_executor's RSync has no uid
    assert seen == []


# ----- the writer -----------------------------------------------------------------------------------------
def test_a_slow_api_server_never_blocks_a_recording_and_a_burst_writes_two_requests() -> None:
    gate = threading.Event()
    api = FakeApi(gate=gate)  # the API server holds every request until the gate opens
    written: list[str] = []
    writer = EventWriter(api, "pod-1", clock=lambda: 0.0, written=written.append).start()
    for i in range(1000):
        writer.record(held(float(i) / 1000))  # none of these waits
    gate.set()
    wait_for(lambda: api.calls["patch events"], timeout=10, what="the Event and its series written")
    writer.stop()
    assert api.calls["create events"] == 1
    assert api.calls["patch events"] == 1
    ((_, _, name), event), *others = api.objects.items()
    assert others == []
    assert "series" in event, f"the series patched into the Event created, {name}"
    assert written == ["ScaleDownPostponed"] * 2, "the Event and its series, each told"


def test_a_refused_event_is_counted_and_tried_again_as_a_new_event() -> None:
    api = FakeApi(failure=kubeapi.Forbidden("events is forbidden", status=403, reason="Forbidden"))
    failed: list[str] = []
    writer = EventWriter(api, "pod-1", clock=lambda: 0.0, failed=failed.append).start()
    writer.record(held(0))
    writer.record(held(1))
    writer.stop()
    assert failed == ["Forbidden", "Forbidden"], "each told (the service counts it)"
    assert api.objects == {}, "nothing written"


def test_a_full_queue_drops_and_counts() -> None:
    failed: list[str] = []
    writer = EventWriter(FakeApi(), "pod-1", failed=failed.append)  # not started: nothing drains
    for i in range(1001):
        writer.record(held(i))
    assert failed == ["dropped"]
