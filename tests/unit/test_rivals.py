"""The rivals' rules the simulator uses (`profiles.rivals`), worked out by hand."""

from __future__ import annotations

import pytest

from profiles.rivals import Change, VpaLike, prototype_memory_mib


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
