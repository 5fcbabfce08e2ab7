"""Fit a sizing preset to measured reconciler memory.

    python -m profiles.fit profiles/data/reconciler-memory-by-object-count.csv [more.csv ...]
        [--step 32] [--safety 0.10] [--objects-column C] [--usage-column C]

Method: a least-squares line `usage = a + b x objects` through every measured point (peak memory
against object count), then a margin so that no measured point is above the line: `base = a +
max(residual)`, and a relative safety on top (`--safety`, default 10 %: the spread between runs of the
same size in the reference data is about that). Rounding up to the step only adds headroom, so under
the printed preset every measured point is at or below its limit (checked before printing).

CSV files may carry `#` comment lines (provenance). Columns are found by name: objects
(`objects`, `objects_per_rootsync`) and usage in MiB (`mem_usage_mib`, `peak_mem_mib`, and of our own
benchmark `peak_with_prune_mib`, else `peak_rss_mib`) or MB (`mem_mb_*`, converted to MiB); rows without
a usage value are skipped. The size-aware model of our benchmark's data is `profiles.size_model`.
"""

from __future__ import annotations

import argparse
import csv
import math
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from autoscaler.core.sizing import PROTOTYPE, Load, Sizing

OBJECT_COLUMNS = ("objects", "objects_per_rootsync")
USAGE_COLUMNS = ("mem_usage_mib", "peak_mem_mib", "mem_mb_v1_19_0", "peak_with_prune_mib", "peak_rss_mib")
MB_PER_MIB = 1.048576


@dataclass(frozen=True)
class Point:
    objects: int
    usage_mib: float


def _column(header: list[str], wanted: str | None, known: tuple[str, ...], path: Path) -> str:
    if wanted:
        if wanted not in header:
            raise ValueError(f"{path}: no column {wanted!r} (columns: {', '.join(header)})")
        return wanted
    for name in known:
        if name in header:
            return name
    raise ValueError(f"{path}: none of the columns {', '.join(known)} (columns: {', '.join(header)})")


def read_points(
    path: Path, objects_column: str | None = None, usage_column: str | None = None
) -> list[Point]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    rows = list(csv.DictReader(lines))
    if not rows:
        raise ValueError(f"{path}: no data rows")
    header = list(rows[0])
    objects_name = _column(header, objects_column, OBJECT_COLUMNS, path)
    usage_name = _column(header, usage_column, USAGE_COLUMNS, path)
    scale = 1 / MB_PER_MIB if "_mb" in usage_name else 1.0
    return [
        Point(int(row[objects_name]), float(row[usage_name]) * scale)
        for row in rows
        if row[usage_name].strip()
    ]


def least_squares(points: list[Point]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line through the points."""
    n = len(points)
    if n < 2 or len({p.objects for p in points}) < 2:
        raise ValueError("need at least two different object counts to fit a line")
    mean_x = sum(p.objects for p in points) / n
    mean_y = sum(p.usage_mib for p in points) / n
    sxx = sum((p.objects - mean_x) ** 2 for p in points)
    sxy = sum((p.objects - mean_x) * (p.usage_mib - mean_y) for p in points)
    slope = sxy / sxx
    return mean_y - slope * mean_x, slope


def fit(points: list[Point], *, step_mib: int = 32, safety: float = 0.10, name: str = "fitted") -> Sizing:
    intercept, slope = least_squares(points)
    margin = max(0.0, *(p.usage_mib - (intercept + slope * p.objects) for p in points))
    base = math.ceil((intercept + margin) * (1 + safety))
    per_object = Fraction(math.ceil(max(slope, 0.0) * (1 + safety) * 1000), 1000)
    preset = Sizing(
        name, base_mib=Fraction(base), mib_per_object=per_object, step_mib=step_mib, min_mib=PROTOTYPE.min_mib
    )
    worst = [p for p in points if preset.memory_mib(Load(p.objects)) < p.usage_mib]
    if worst:  # cannot happen by construction; checked so a printed preset is never wrong
        raise AssertionError(f"fitted preset under measured points: {worst}")
    return preset


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--step", type=int, default=32, help="memory step, MiB")
    parser.add_argument("--safety", type=float, default=0.10, help="relative headroom on top of the fit")
    parser.add_argument("--objects-column")
    parser.add_argument("--usage-column")
    args = parser.parse_args()
    points = [p for path in args.csv for p in read_points(path, args.objects_column, args.usage_column)]
    intercept, slope = least_squares(points)
    preset = fit(points, step_mib=args.step, safety=args.safety)
    print(f"# {len(points)} points; least squares: usage = {intercept:.1f} MiB + {slope:.4f} MiB x objects")
    print(
        f"# preset: memory = ceil(({preset.base_mib} + {float(preset.mib_per_object)} x objects) / "
        f"{preset.step_mib}) x {preset.step_mib}; every measured point is at or below its limit"
    )
    print(f"OBJCOUNT_BASE_MIB={preset.base_mib}")
    print(f"OBJCOUNT_MIB_PER_OBJECT={float(preset.mib_per_object)}")
    print(f"OBJCOUNT_STEP_MIB={preset.step_mib}")


if __name__ == "__main__":
    main()
