"""`fit` derives a preset under which no measured point exceeds its limit."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autoscaler.core.sizing import FITTED, Load
from profiles.fit import Point, fit, least_squares, read_points

DATA = Path(__file__).resolve().parents[2] / "profiles" / "data"


@pytest.mark.parametrize("name", sorted(p.name for p in DATA.glob("*.csv")))
def test_no_reference_point_exceeds_its_limit(name: str) -> None:
    points = read_points(DATA / name)
    preset = fit(points)
    for point in points:
        assert preset.memory_mib(Load(point.objects)) >= point.usage_mib, point


def test_all_reference_data_together() -> None:
    points = [p for path in sorted(DATA.glob("*.csv")) for p in read_points(path)]
    preset = fit(points)
    assert all(preset.memory_mib(Load(p.objects)) >= p.usage_mib for p in points)


def test_least_squares_recovers_the_published_fit() -> None:
    # DESIGN.md 2.5: one RSync of Deployments fits roughly 146 MiB + 0.158 MiB x objects.
    intercept, slope = least_squares(read_points(DATA / "reconciler-memory-by-object-count.csv"))
    assert intercept == pytest.approx(146, abs=1)
    assert slope == pytest.approx(0.158, abs=0.001)


def test_the_fitted_preset_is_what_fit_derives_from_the_reference_data() -> None:
    derived = fit(read_points(DATA / "reconciler-memory-by-object-count.csv"))
    assert (derived.base_mib, derived.mib_per_object, derived.step_mib) == (
        FITTED.base_mib,
        FITTED.mib_per_object,
        FITTED.step_mib,
    )


def test_megabytes_are_converted_and_blank_rows_skipped(tmp_path: Path) -> None:
    csv = tmp_path / "m.csv"
    csv.write_text(
        "# provenance\nobjects_per_rootsync,mem_mb_v1_19_0,peak_mem_mib\n100,1048.576,\n200,2097.152,\n"
    )
    assert read_points(csv, usage_column="mem_mb_v1_19_0") == [Point(100, 1000.0), Point(200, 2000.0)]
    assert read_points(csv, usage_column="peak_mem_mib") == []
    with pytest.raises(ValueError, match="no column"):
        read_points(csv, usage_column="nope")


def test_a_line_needs_two_different_counts() -> None:
    with pytest.raises(ValueError, match="two different"):
        fit([Point(100, 200.0), Point(100, 210.0)])


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 100_000), st.floats(1, 50_000)), min_size=2, max_size=30),
    st.sampled_from([1, 16, 32, 64]),
    st.floats(0, 0.5),
)
def test_fitted_preset_covers_every_point(raw: list[tuple[int, float]], step: int, safety: float) -> None:
    points = [Point(n, usage) for n, usage in raw]
    if len({p.objects for p in points}) < 2:
        return
    preset = fit(points, step_mib=step, safety=safety)
    assert all(preset.memory_mib(Load(p.objects)) >= p.usage_mib for p in points)
