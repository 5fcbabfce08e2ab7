"""profiles.repeated_writes on a log written by hand: which writes repeat the size just written."""

from __future__ import annotations

from profiles.repeated_writes import Repeats, tally

ROOT = "RootSync/config-management-system/root-sync"
REPO = "RepoSync/tenant/repo-sync"


def line(time: str, rsync: str, message: str) -> str:
    return (
        f'[pod/root-reconciler-x/objcount-autoscaler] {{"time":"2026-11-30T05:00:{time}+00:00",'
        f'"level":"INFO","logger":"autoscaler.service.controller","message":"{rsync}: {message}"}}'
    )


def test_the_same_size_written_again_soon_is_a_repeat_and_nothing_else_is() -> None:
    log = [
        line("00.000", ROOT, "scaled_up via in-place: 500 objects need requests 58m/192Mi, limits none/none"),
        # 0.5 s later, the same size for the same RSync: a repeat.
        line("00.500", ROOT, "scaled_up via in-place: 501 objects need requests 58m/192Mi, limits none/none"),
        # Another RSync at that size: its first write.
        line("01.000", REPO, "scaled_up via in-place: 500 objects need requests 58m/192Mi, limits none/none"),
        line("02.000", ROOT, "counts written to annotations: source=501 sync=500 source KiB=173"),
        "not JSON at all",
        # 9.5 s after the last, beyond the 5 s: not a repeat.
        line("10.000", ROOT, "scaled_up via in-place: 502 objects need requests 58m/192Mi, limits none/none"),
        # Another size.
        line(
            "11.000", ROOT, "scaled_down via in-place: 100 objects need requests 32m/128Mi, limits none/none"
        ),
    ]
    assert tally(log, within_s=5.0) == Repeats(
        writes=5,
        repeats=1,
        first_repeats=(f"2026-11-30T05:00:00.500+00:00 {ROOT} requests 58m/192Mi, limits none/none",),
    )


def test_a_scale_up_that_keeps_its_cpu_is_read_at_the_size_it_wrote() -> None:
    """A scale-up that keeps the CPU the reconciler had (241m where 38m is needed), then the CPU's own
    scale-down to 38m: two different sizes written, not a repeat."""
    log = [
        line(
            "00.000",
            ROOT,
            "scaled_up via in-place: 2000 objects need requests 38m/512Mi, limits none/none; it keeps what it "
            "has above that: requests 241m/512Mi, limits none/none",
        ),
        line(
            "01.000", ROOT, "scaled_down via in-place: 2000 objects need requests 38m/512Mi, limits none/none"
        ),
    ]
    assert tally(log, within_s=5.0) == Repeats(writes=2, repeats=0, first_repeats=())
