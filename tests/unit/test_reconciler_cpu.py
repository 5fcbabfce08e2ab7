"""The reconciler's CPU rates read from the measurement CSVs, and the request the preset takes, by hand."""

from __future__ import annotations

from dataclasses import replace
from fractions import Fraction
from pathlib import Path

from autoscaler.core.sizing import SIZE_AWARE
from profiles.reconciler_cpu import Rates, rates, request_line
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


def test_the_request_is_a_line_through_the_after_apply_rates_with_no_point_above_it() -> None:
    """By hand: the least-squares line through (1,000 objects, 30m), (2,000, 56m) and (3,000, 70m) is
    12 + 0.02 x objects (means 2,000 and 52; slope 40,000 / 2,000,000); the middle point is 4m above it,
    so it is raised to 16m; then 10 % on both terms: ceil(17.6) = 18m and 0.022m per object."""
    measured = [Rates("p", n, 1.0, 100.0, None, m) for n, m in ((1000, 30.0), (3000, 70.0), (2000, 56.0))]
    assert request_line(measured) == (18, Fraction(22, 1000))


DATA = Path(__file__).resolve().parents[2] / "profiles" / "data"
MEASURED = [
    r
    for name in ("reconciler-cpu-v1.25.0-real-node.csv", "reconciler-cpu-v1.25.0-real-repositories.csv")
    for p in read_points(DATA / name)
    if (r := rates(p)) is not None
]


def test_the_size_aware_cpu_is_the_line_through_the_recorded_measurements() -> None:
    """The preset's CPU terms are what `python -m profiles.reconciler_cpu` gives on the recorded data (so
    the data and the constants cannot drift apart), and no measured after-apply rate is above the
    request the preset gives that point's count."""
    assert len(MEASURED) == 9
    assert request_line(MEASURED) == (SIZE_AWARE.cpu_base_m, SIZE_AWARE.cpu_m_per_object)
    for r in MEASURED:
        assert SIZE_AWARE.cpu_m(0, r.objects) >= r.idle_m, r
