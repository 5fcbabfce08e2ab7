"""The reconciler's CPU, as `profiles.reconciler_memory` and `profiles.real_repositories` measure it
(the container's cgroup, `cpuacct.usage`): per point, its mean rate over the apply (CPU seconds from the
RootSync's creation to synced, over those seconds), over the prune, and idle (the rate over the window
after the apply synced, holding the objects); then the CPU request the size-aware preset takes from them.

    python -m profiles.reconciler_cpu CSV [CSV ...]

The request is the reconciler's need when it holds its objects and has nothing to apply (the largest
idle rate measured, doubled for what one window misses), not what it takes while it applies: with no CPU
limit an apply takes what the node has free, and a request sized for the apply (hundreds of millicores,
here on 2 shared cores) is what left a rolled-out Pod unschedulable beside the real VPA. Rates measured
on a loaded machine are lower bounds of what a faster node would let it take.
"""

from __future__ import annotations

import argparse
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

from profiles.reconciler_memory import Point, read_points

REQUEST_STEP_M = 5


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


def request_m(measured: list[Rates]) -> int:
    """The preset's CPU request: the largest idle rate, doubled, rounded up to REQUEST_STEP_M."""
    return math.ceil(max(r.idle_m for r in measured) * 2 / REQUEST_STEP_M) * REQUEST_STEP_M


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("csv", nargs="+", type=Path)
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
    print(
        f"# {len(measured)} points: apply {min(applies):.0f} to {max(applies):.0f} m (median "
        f"{statistics.median(applies):.0f}); idle {min(r.idle_m for r in measured):.1f} to "
        f"{max(r.idle_m for r in measured):.1f} m; request {request_m(measured)} m"
    )


if __name__ == "__main__":
    main()
