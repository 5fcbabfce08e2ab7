"""The reconciler's CPU rates read from the measurement CSVs, and the request the preset takes, by hand."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from profiles.reconciler_cpu import Rates, rates, request_m
from profiles.reconciler_memory import Point, read_points, write_points

POINT = Point(
    "configmaps", 1000, 512_000, 1001, 120.0, 40.0, 130.0, 20.0, 3, 73, 0, "v1.25.0", "2026-11-27", "x"
)


def test_a_points_rates_are_its_cpu_seconds_over_its_seconds(tmp_path: Path) -> None:
    measured = replace(POINT, cpu_seconds_to_synced=12.0, cpu_seconds_to_pruned=3.0, idle_cpu_m=7.5)
    path = tmp_path / "points.csv"
    write_points(path, [measured, POINT])  # the second measured before CPU was recorded: left out
    (read,) = [r for p in read_points(path) if (r := rates(p)) is not None]
    # 12 CPU seconds over 40 s: 300m; 3 over 20 s: 150m.
    assert read == Rates("configmaps x 1000", 1000, 40.0, 300.0, 150.0, 7.5)


@pytest.mark.parametrize(("idle", "expected"), [([7.5, 3.0], 15), ([11.2, 1.0], 25), ([0.4], 5)])
def test_the_request_is_the_largest_idle_rate_doubled_on_a_5m_step(idle: list[float], expected: int) -> None:
    measured = [Rates("p", 1, 1.0, 100.0, None, m) for m in idle]
    assert request_m(measured) == expected
