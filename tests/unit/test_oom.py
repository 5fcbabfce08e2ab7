"""OOM feedback: the floor rule, reading a kill from a Pod, and the annotation that keeps the floor."""

from __future__ import annotations

from typing import Any

import pytest

from autoscaler.core.annotations import oom_floor_annotation, parse_oom_floor
from autoscaler.core.oom import OomFloor, OomKill, next_floor, oom_kill_of, raised

DAY = 86400.0


@pytest.mark.parametrize(
    ("limit", "step", "floor"),
    [
        (48, 8, 176),  # 48 x 1.5 = 72 < 48 + 128 = 176
        (100, 32, 256),  # 150 < 228 -> 256 on the 32 MiB grid
        (224, 32, 352),  # 336 < 352
        (256, 32, 384),  # 384 = 384
        (1088, 32, 1632),  # 1632 > 1216
        (1000, 32, 1504),  # 1500 -> 1504
    ],
)
def test_the_floor_after_a_kill(limit: int, step: int, floor: int) -> None:
    assert raised(limit, step) == floor


KILL = OomKill("2026-11-22T10:00:00Z", 224)
FLOOR = OomFloor(352, "2026-11-22T10:00:00Z", 1000.0)


@pytest.mark.parametrize(
    ("stored", "kill", "now", "expected"),
    [
        (None, None, 1000.0, None),
        (None, KILL, 1000.0, FLOOR),
        (FLOOR, KILL, 5000.0, FLOOR),  # the same kill, seen again
        (FLOOR, OomKill("2026-11-22T09:00:00Z", 1024), 5000.0, FLOOR),  # an older kill
        (FLOOR, OomKill("2026-11-22T11:00:00Z", 352), 5000.0, OomFloor(544, "2026-11-22T11:00:00Z", 5000.0)),
        # A newer kill at a limit below the floor (a user's override, say) never lowers it.
        (FLOOR, OomKill("2026-11-22T11:00:00Z", 64), 5000.0, OomFloor(352, "2026-11-22T11:00:00Z", 5000.0)),
        (FLOOR, None, 1000.0 + 7 * DAY - 1, FLOOR),
        (FLOOR, None, 1000.0 + 7 * DAY, None),  # quiet for the whole period: dropped
    ],
    ids=[
        "nothing",
        "first-kill",
        "same-kill",
        "older-kill",
        "new-kill",
        "new-kill-lower",
        "quiet",
        "decayed",
    ],
)
def test_the_floor_from_now_on(
    stored: OomFloor | None, kill: OomKill | None, now: float, expected: OomFloor | None
) -> None:
    assert next_floor(stored, kill, now=now, quiet_s=7 * DAY, step_mib=32) == expected


def pod(statuses: Any, spec_limit: str | None = "224Mi") -> dict[str, Any]:
    resources = {"limits": {"memory": spec_limit}} if spec_limit else {}
    return {
        "spec": {"containers": [{"name": "reconciler", "resources": resources}, {"name": "git-sync"}]},
        "status": {"containerStatuses": statuses},
    }


def status(
    state: dict[str, Any] | None = None, last: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    return {"name": "reconciler", "state": state or {"running": {}}, "lastState": last or {}, **extra}


def oom(at: str) -> dict[str, Any]:
    return {"terminated": {"reason": "OOMKilled", "exitCode": 137, "finishedAt": at}}


@pytest.mark.parametrize(
    ("obj", "kill"),
    [
        (pod([status(last=oom("2026-11-22T10:00:00Z"))]), KILL),
        (pod([status(state=oom("2026-11-22T10:00:00Z"))]), KILL),  # killed, not restarted yet
        (
            pod([status(state=oom("2026-11-22T11:00:00Z"), last=oom("2026-11-22T10:00:00Z"))]),
            OomKill("2026-11-22T11:00:00Z", 224),
        ),
        # The kubelet reports what the container runs with (after an in-place resize): that limit.
        (
            pod([status(last=oom("2026-11-22T10:00:00Z"), resources={"limits": {"memory": "300Mi"}})]),
            OomKill("2026-11-22T10:00:00Z", 300),
        ),
        (
            pod([status(last=oom("2026-11-22T10:00:00Z"))], spec_limit="234881025"),
            OomKill("2026-11-22T10:00:00Z", 225),
        ),
        (pod([status(last={"terminated": {"reason": "Error", "finishedAt": "2026-11-22T10:00:00Z"}})]), None),
        (pod([status()]), None),
        (pod([status(last=oom("2026-11-22T10:00:00Z"))], spec_limit=None), None),  # no limit: not its size
        (pod([status(last=oom("2026-11-22T10:00:00Z"))], spec_limit="lots"), None),
        (pod([{"name": "git-sync", "lastState": oom("2026-11-22T10:00:00Z")}]), None),
        (pod("not a list"), None),
        (pod([status(last="not an object")]), None),
        (None, None),
    ],
    ids=[
        "last-state",
        "current-state",
        "latest-of-two",
        "running-limit",
        "bytes-rounded-up",
        "not-oom",
        "never-killed",
        "no-limit",
        "unreadable-limit",
        "another-container",
        "statuses-not-a-list",
        "last-state-not-an-object",
        "no-pod",
    ],
)
def test_a_kill_is_read_from_the_pod_status(obj: dict[str, Any] | None, kill: OomKill | None) -> None:
    assert oom_kill_of(obj) == kill  # type: ignore[arg-type]


def test_the_floor_annotation_keeps_the_floor_to_the_second() -> None:
    text = oom_floor_annotation(OomFloor(352, "2026-11-22T10:00:00Z", 1795341600.7))
    assert text == '{"memory":"352Mi","killedAt":"2026-11-22T10:00:00Z","since":"2026-11-22T10:00:00Z"}'
    assert parse_oom_floor(text) == OomFloor(352, "2026-11-22T10:00:00Z", 1795341600.0)


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "{not json",
        "[]",
        '{"memory":"352Mi","killedAt":"2026-11-22T10:00:00Z"}',
        '{"memory":"lots","killedAt":"2026-11-22T10:00:00Z","since":"2026-11-22T10:00:00Z"}',
        '{"memory":"0","killedAt":"2026-11-22T10:00:00Z","since":"2026-11-22T10:00:00Z"}',
        '{"memory":"352Mi","killedAt":7,"since":"2026-11-22T10:00:00Z"}',
        '{"memory":"352Mi","killedAt":"x","since":"yesterday"}',
    ],
)
def test_an_unreadable_floor_annotation_is_no_floor(text: str | None) -> None:
    assert parse_oom_floor(text) is None
