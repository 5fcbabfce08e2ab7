"""The reflector's recovery logic, driven by a scripted stand-in for the API (no server involved).

Each watch call plays the next script entry: a list of raw event lines, optionally ending in an error.
"""

from __future__ import annotations

import threading
from typing import Any

import orjson
import pytest
from prometheus_client import REGISTRY

from autoscaler.service.metrics import TALLY
from inventory.core.backoff import Backoff
from inventory.kube import kubeapi
from inventory.kube.watch import ObjectCodec, Reflector, WatchSettings
from tests.fake_api import FakeApi, ScriptedStream


def obj(name: str, rv: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": rv}}


def line(kind: str, body: dict[str, Any]) -> bytes:
    return orjson.dumps({"type": kind, "object": body})


def scripted(
    lists: list[Any],  # each list's items, or the error it raises
    watches: list[tuple[list[bytes], Exception | None]],  # each watch's lines, and the error it ends with
    stop: threading.Event,
) -> FakeApi:
    """The fake API answering the reflector's lists and watches from a script; `stop` set once the
    script's watches are done."""
    streams = [ScriptedStream(lines, error) for lines, error in watches]
    return FakeApi(lists=list(lists), watches=streams, watches_done=stop.set)


class Waits(threading.Event):
    """The reflector's stop event, recording each wait instead of sleeping."""

    def __init__(self) -> None:
        super().__init__()
        self.delays: list[float] = []

    def wait(self, timeout: float | None = None) -> bool:
        self.delays.append(timeout or 0.0)
        return self.is_set()


def run(
    api: FakeApi, stop: threading.Event, settings: WatchSettings | None = None
) -> tuple[Reflector[Any], list[tuple[str, str]]]:
    changes: list[tuple[str, str]] = []
    reflector: Reflector[Any] = Reflector(
        api,
        kubeapi.ROOTSYNC,
        ObjectCodec(),
        lambda change, key, o: changes.append((change, key[1])),  # type: ignore[arg-type]
        settings=settings or WatchSettings(backoff_initial=0.0, backoff_max=0.0),
        stopping=stop,
        tally=TALLY,
    )
    reflector.run()
    return reflector, changes


def test_relists_on_410_and_reports_what_changed_meanwhile() -> None:
    stop = threading.Event()
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})
    api = scripted(
        lists=[[obj("a", "1"), obj("b", "1")], [obj("a", "5"), obj("c", "5")]],
        watches=[([line("MODIFIED", obj("a", "2")), gone], None)],
        stop=stop,
    )
    reflector, changes = run(api, stop)
    assert api.log[:3] == ["list rootsyncs", "watch rootsyncs@1", "list rootsyncs"]
    assert changes == [
        ("ADDED", "a"),
        ("ADDED", "b"),
        ("MODIFIED", "a"),
        ("DELETED", "b"),
        ("MODIFIED", "a"),
        ("ADDED", "c"),
    ]
    assert set(reflector.store) == {("ns", "a"), ("ns", "c")}
    assert reflector.synced.is_set()


def test_resumes_from_the_last_resource_version_after_a_timeout_or_a_closed_stream() -> None:
    stop = threading.Event()
    timeout = kubeapi.WatchSilent("read timed out", reason="ReadTimeoutError")
    api = scripted(
        lists=[[obj("a", "1")]],
        watches=[
            ([line("MODIFIED", obj("a", "7"))], timeout),
            ([line("BOOKMARK", {"metadata": {"resourceVersion": "9"}})], None),
            ([line("DELETED", obj("a", "10"))], None),
        ],
        stop=stop,
    )
    reflector, changes = run(api, stop)
    assert api.log == [
        "list rootsyncs",
        "watch rootsyncs@1",
        "watch rootsyncs@7",
        "watch rootsyncs@9",
        "watch rootsyncs@10",
    ]
    assert changes == [("ADDED", "a"), ("MODIFIED", "a"), ("DELETED", "a")]
    assert reflector.store == {}


def test_backoff_is_exponential_its_step_capped_each_wait_between_the_step_and_twice_it() -> None:
    backoff = Backoff(0.2, 5.0, random=lambda: 0.0)
    assert [backoff.next_delay() for _ in range(7)] == [0.2, 0.4, 0.8, 1.6, 3.2, 5.0, 5.0]
    backoff.reset()
    assert backoff.next_delay() == 0.2
    assert Backoff(0.2, 5.0, random=lambda: 0.5).next_delay() == pytest.approx(0.3)
    assert Backoff(8.0, 5.0, random=lambda: 0.5).next_delay() == 7.5, "the step capped, then drawn"


BOUNDED = WatchSettings(backoff_initial=0.2, backoff_max=5.0)


def test_a_server_timeout_is_a_failure_every_list_after_it_waits_its_backoff() -> None:
    """A 504 `Timeout` from the API server is not our stream's silence: each failed LIST is followed by a
    wait within the growing bounds (0.2 to 0.4 s, 0.4 to 0.8 s, ...), never an immediate retry."""
    stop = Waits()
    timeout = kubeapi.Transient("GET rootsyncs: HTTP 504 Timeout", status=504, reason="Timeout")
    api = scripted(lists=[timeout] * 4 + [[obj("a", "1")]], watches=[], stop=stop)
    _, changes = run(api, stop, BOUNDED)
    assert api.log[:5] == ["list rootsyncs"] * 5
    # A wait before every retry (and one after the script's last, empty watch).
    assert len(stop.delays) == 4 + 1
    assert all(0.2 * 2**i <= delay <= 0.4 * 2**i for i, delay in enumerate(stop.delays[:4])), stop.delays
    assert changes == [("ADDED", "a")]


def test_a_server_that_says_when_to_come_back_is_waited_for_at_least_that_long() -> None:
    stop = Waits()
    throttled = kubeapi.Transient("HTTP 429 TooManyRequests", status=429, retry_after=5.0)
    api = scripted(lists=[throttled, [obj("a", "1")]], watches=[], stop=stop)
    run(api, stop, BOUNDED)
    assert stop.delays[0] >= 5.0


def test_a_410_on_every_watch_relists_only_after_a_growing_wait() -> None:
    stop = Waits()
    gone = line("ERROR", {"kind": "Status", "code": 410, "message": "too old resource version"})
    api = scripted(lists=[[obj("a", "1")]] * 4, watches=[([gone], None)] * 3, stop=stop)
    run(api, stop, BOUNDED)
    assert api.log == [
        "list rootsyncs",
        "watch rootsyncs@1",
        "list rootsyncs",
        "watch rootsyncs@3",
        "list rootsyncs",
        "watch rootsyncs@5",
        "list rootsyncs",
        "watch rootsyncs@7",
    ]
    assert len(stop.delays) == 3 + 1, "a wait before every re-list (and after the script's end)"
    assert all(0.2 * 2**i <= delay <= 0.4 * 2**i for i, delay in enumerate(stop.delays[:3])), stop.delays


def test_a_watch_closed_before_it_says_anything_is_watched_again_only_after_a_wait() -> None:
    stop = Waits()
    api = scripted(lists=[[obj("a", "1")]], watches=[([], None)] * 3, stop=stop)
    run(api, stop, BOUNDED)
    assert api.log == ["list rootsyncs"] + ["watch rootsyncs@1"] * 4
    assert len(stop.delays) == 3 + 1, "a wait after every empty watch (the script's end is one too)"


def test_the_backoff_starts_over_only_after_a_quiet_period() -> None:
    now = [0.0]
    backoff = Backoff(0.2, 5.0, random=lambda: 0.0, quiet_s=120.0, clock=lambda: now[0])
    delays = []
    for _ in range(4):  # a fault that lets one request through between failures: still growing
        delays.append(backoff.next_delay())
        now[0] += 1.0
    assert delays == [0.2, 0.4, 0.8, 1.6]
    now[0] += 120.0
    assert backoff.next_delay() == 0.2, "two quiet minutes: from the start again"
    assert backoff.next_delay(retry_after=7.0) == 7.0


def test_a_cache_that_cannot_sync_shows_0_until_it_does() -> None:
    """ObjcountNotReady alerts on objcount_cache_synced == 0: a cache whose lists fail must show 0, not
    nothing, and 1 once a list is cached."""
    shown: list[float | None] = []

    class Watching(Waits):
        def wait(self, timeout: float | None = None) -> bool:
            shown.append(REGISTRY.get_sample_value("objcount_cache_synced", {"resource": "rootsyncs"}))
            return super().wait(timeout)

    stop = Watching()
    forbidden = kubeapi.Forbidden("GET rootsyncs: HTTP 403", status=403)
    api = scripted(lists=[forbidden, [obj("a", "1")]], watches=[], stop=stop)
    run(api, stop, BOUNDED)
    assert shown[0] == 0.0, "the failed list's wait"
    assert REGISTRY.get_sample_value("objcount_cache_synced", {"resource": "rootsyncs"}) == 1.0


def test_an_rsync_is_kept_with_the_managed_fields_that_say_who_declares_it() -> None:
    """Kept: others' server-side applies and Config Sync's own updates (its reconciler-manager's and its
    reconciler's, which write a new RSync back whole to add their finalizers and so can hold a declared
    override for a while); dropped: ours, and everyone else's updates."""

    def entry(manager: str, operation: str) -> dict[str, Any]:
        return {"manager": manager, "operation": operation, "fieldsV1": {"f:spec": {}}}

    managed = [
        entry("configsync.gke.io", "Apply"),
        entry("kubectl", "Apply"),
        entry("configsync.gke.io/reconciler-manager", "Update"),
        entry("configsync.gke.io", "Update"),
        entry("objcount-autoscaler", "Update"),
        entry("objcount-autoscaler", "Apply"),
        entry("kubectl-edit", "Update"),
    ]
    body = {"metadata": {"name": "a", "namespace": "ns", "resourceVersion": "7", "managedFields": managed}}
    kept = ObjectCodec().decode_event(line("ADDED", body)).obj
    assert kept is not None
    assert [(e["manager"], e["operation"]) for e in kept.body["metadata"]["managedFields"]] == [
        ("configsync.gke.io", "Apply"),
        ("kubectl", "Apply"),
        ("configsync.gke.io/reconciler-manager", "Update"),
        ("configsync.gke.io", "Update"),
    ]
