"""The reconciler's CPU, as `profiles.reconciler_memory` and `profiles.real_repositories` measure it (the
container's cgroup: v1 `cpuacct.usage`, v2 `cpu.stat`): per point, its mean rate over the apply (CPU seconds
from the RootSync's creation to synced, over those seconds), over the prune, and after the apply (the rate
over the window after the apply synced: the objects held, their watches, the status written, the source
polled); then the CPU request the size-aware preset takes from them.

    python -m profiles.reconciler_cpu CSV [CSV ...] [--safety 0.10]

The request follows what the reconciler uses once its apply is done, not what it takes while it applies:
a least-squares line through the after-apply rates by object count, raised so that no measured point is
above it, plus `--safety` on both terms. With no CPU limit an apply takes what the node has free; a
request sized for the apply (hundreds of millicores, here on 2 shared cores) is what left a rolled-out Pod
unschedulable beside the real VPA. Rates measured on a loaded machine are lower bounds of what a faster
node would let it take.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

from profiles import fit
from profiles.reconciler_memory import Point, read_points


@dataclass(frozen=True)
class Rates:
    point: str
    objects: int
    seconds_to_synced: float
    apply_m: float
    prune_m: float | None
    idle_m: float


def rates(point: Point) -> Rates | None:
    """A point's rates, millicores; None for a point measured before CPU was recorded."""
    if point.cpu_seconds_to_synced is None or point.idle_cpu_m is None:
        return None
    prune = point.cpu_seconds_to_pruned
    return Rates(
        f"{point.shape} x {point.objects}" + (f" (run {point.run})" if point.run > 1 else ""),
        point.objects,
        point.seconds_to_synced,
        point.cpu_seconds_to_synced / point.seconds_to_synced * 1000,
        None if prune is None else prune / point.seconds_to_pruned * 1000,
        point.idle_cpu_m,
    )


def request_line(measured: list[Rates], safety: float = 0.10) -> tuple[int, Fraction]:
    """The preset's CPU request as (base m, m per object): the least-squares line through the after-apply
    rates, raised so no point is above it, plus `safety` on both terms (the base rounded up to whole
    millicores, the slope to thousandths)."""
    points = [fit.Point(r.objects, r.idle_m) for r in measured]
    intercept, slope = fit.least_squares(points)
    margin = max(0.0, *(p.usage_mib - (intercept + slope * p.objects) for p in points))
    # Rounded to 9 places before the ceiling: 0.02 x 1.1 x 1000 is 22.000000000000004 in binary floats.
    base = math.ceil(round(max(intercept + margin, 0.0) * (1 + safety), 9))
    return base, Fraction(math.ceil(round(max(slope, 0.0) * (1 + safety) * 1000, 9)), 1000)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--safety", type=float, default=0.10, help="relative headroom on both terms")
    args = parser.parse_args()
    measured = [r for path in args.csv for p in read_points(path) if (r := rates(p)) is not None]
    if not measured:
        raise SystemExit(
            "no point with CPU recorded (measured before profiles.reconciler_memory recorded it)"
        )
    print("| point | to synced (s) | apply (m) | prune (m) | idle (m) |")
    print("|---|---|---|---|---|")
    for r in measured:
        prune = "" if r.prune_m is None else f"{r.prune_m:.0f}"
        print(f"| {r.point} | {r.seconds_to_synced:.0f} | {r.apply_m:.0f} | {prune} | {r.idle_m:.1f} |")
    applies = [r.apply_m for r in measured]
    base, per_object = request_line(measured, args.safety)
    print(
        f"# {len(measured)} points: apply {min(applies):.0f} to {max(applies):.0f} m (median "
        f"{statistics.median(applies):.0f}); after the apply {min(r.idle_m for r in measured):.1f} to "
        f"{max(r.idle_m for r in measured):.1f} m"
    )
    print(f"# request = {base} m + {float(per_object)} m x objects (no point above it)")
    print(f"OBJCOUNT_CPU_BASE_M={base}")
    print(f"OBJCOUNT_CPU_M_PER_OBJECT={float(per_object)}")


if __name__ == "__main__":
    main()
