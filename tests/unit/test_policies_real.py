"""The pure parts of the side-by-side benchmark and of the rivals' rules, worked out by hand."""

from __future__ import annotations

import pytest

from profiles.policies_real import (
    Result,
    Sample,
    mib_hours,
    net_savings,
    own_mib_hours,
    peak_above_request,
    restarts_and_kills,
)
from profiles.rivals import Change, VpaLike, prototype_memory_mib


def sample(
    t: float,
    pod: str = "p1",
    *,
    rss: float | None = 100.0,
    request: float | None = 200.0,
    limit: float | None = 200.0,
    restarts: int = 0,
    kills: int = 0,
) -> Sample:
    return Sample(t, pod, rss, request, limit, restarts, kills)


def test_memory_reserved_is_the_limit_else_the_request_held_until_the_next_sample() -> None:
    # 200 MiB for 1,800 s, then 400 MiB (request only, no limit) for 1,800 s: 100 + 200 MiB-h.
    samples = [sample(0), sample(1800, request=400, limit=None), sample(3600, request=None, limit=None)]
    assert mib_hours(samples) == pytest.approx(300.0)
    assert mib_hours(samples[:1]) == 0.0


def test_restarts_are_new_pods_and_container_restarts_and_kills_are_counted_per_pod() -> None:
    samples = [
        sample(0),
        sample(1, restarts=1, kills=1),  # an OOM kill, restarted in place
        sample(2, restarts=1, kills=1),
        sample(3, ""),  # no Pod during the rollout
        sample(4, "p2"),  # a rollout: a new Pod
        sample(5, "p2", restarts=2, kills=2),
    ]
    assert restarts_and_kills(samples) == (1 + 1 + 2, 1 + 2)
    assert restarts_and_kills([]) == (0, 0)


def test_the_peak_above_the_request_is_zero_when_never_above() -> None:
    assert peak_above_request([sample(0, rss=150, request=200), sample(1, rss=None)]) == 0.0
    assert peak_above_request([sample(0, rss=250, request=200, limit=None)]) == 50.0


def test_the_prototype_loses_its_synced_count_when_it_restarts() -> None:
    # 128 + 0.2 x 5000 = 1128 -> 1152 MiB; after a restart mid-prune it sees only the source's 500:
    # 128 + 100 = 228 -> 256 MiB.
    assert prototype_memory_mib(500, 5000, synced_since_restart=True) == 1152
    assert prototype_memory_mib(500, 5000, synced_since_restart=False) == 256


def test_the_vpa_like_policy_recommends_the_90th_percentile_plus_15_percent() -> None:
    vpa = VpaLike(every_s=30, window_s=600)
    for t in range(30):  # 100 MiB for 30 s: p90 = 100, x 1.15 = 115 MiB, more than 10 % from 200
        assert vpa.observe(float(t), 100.0, 0) is None
    assert vpa.observe(30.0, 100.0, 0) == Change.RECOMMENDATION
    assert vpa.request_mib == pytest.approx(115.0)
    # Within 10 % of the request: no change (no eviction).
    assert vpa.observe(60.0, 105.0, 0) is None
    # An OOM kill: +20 % at once.
    assert vpa.observe(61.0, None, 1) == Change.OOM
    assert vpa.request_mib == pytest.approx(138.0)
    # More usage: up to 300 x 1.15 = 345 MiB; then 50 MiB for longer than the window: the 300s are
    # forgotten and the request comes down to 50 x 1.15 = 57.5 MiB.
    for t in range(62, 700):
        vpa.observe(float(t), 300.0, 1)
    assert vpa.request_mib == pytest.approx(345.0)
    for t in range(700, 1400):
        vpa.observe(float(t), 50.0, 1)
    assert vpa.request_mib == pytest.approx(57.5)


def run_of(policy: str, mib_h: float, seconds: float) -> Result:
    return Result("configmaps", policy, 0, 0, [], mib_h, 100.0, 0.0, None, seconds)


def test_our_own_requests_are_added_to_ours_and_the_net_saving_set_against_each_static_default() -> None:
    """By hand, from manifests/: sidecar mode 64 MiB + 128 MiB / 10 RSyncs = 76.8 MiB, cluster mode
    256 / 10 = 25.6 MiB, over a 3,600 s run: 76.8 and 25.6 MiB-h. Ours reserved 20 MiB-h: against static
    Standard's 30, 30 - 20 - 76.8 = -66.8 and 30 - 20 - 25.6 = -15.6; against Autopilot's 150, +53.2 and
    +104.4."""
    ours = run_of("ours (default)", 20.0, 3600.0)
    assert own_mib_hours(ours) == pytest.approx({"sidecar": 76.8, "cluster": 25.6})
    assert own_mib_hours(run_of("static Standard", 30.0, 3600.0)) == {}
    table = net_savings(
        [ours, run_of("static Standard", 30.0, 3600.0), run_of("static Autopilot", 150.0, 3600.0)]
    )
    assert table.splitlines()[2] == "| configmaps | -66.80 / -15.60 | +53.20 / +104.40 |"
    assert net_savings([run_of("static Standard", 30.0, 3600.0)]) == "", "nothing to set ours against"
