"""How long a reconciler holds its sync's memory after reporting the commit synced, from side-by-side runs.

    python -m profiles.sync_tail profiles/data/policies-real-v1.25.0-issue48-run8 [RUN ...]

For every policy's trace and every phase that synced (`run.json`'s commit times plus the policy's seconds
to synced, from `policies-real.csv`), and each delay T after the report: whether the working set's largest
sample from T to 60 s after it is within 10 % (or 8 MiB) of its largest from 60 to 180 s, what the steady
state then holds. The first T where most syncs are settled is the sync's tail (`TAIL_S` in
autoscaler/core/calibration.py) that the steady state's samples leave out.
"""

from __future__ import annotations

import argparse
import bisect
import csv
import json
from collections.abc import Sequence
from pathlib import Path

from profiles.real_runs import read_trace
from profiles.replay import seconds_to_synced

DELAYS_S = (10.0, 20.0, 30.0, 45.0, 60.0)
SETTLED_FROM_S, SETTLED_TO_S = 60.0, 180.0


def settled(times: Sequence[float], sets: Sequence[float], synced: float, delay: float) -> bool | None:
    """Whether `delay` s after the report the working set is within 10 % (or 8 MiB) of what it holds from
    60 to 180 s; None when the trace has no sample there."""
    start, settle = (bisect.bisect_left(times, synced + t) for t in (delay, SETTLED_FROM_S))
    end = bisect.bisect_left(times, synced + SETTLED_TO_S)
    if end <= settle or start >= len(sets):
        return None
    after = max(sets[start:settle]) if settle > start else sets[start]
    later = max(sets[settle:end])
    return after <= later * 1.1 or after - later <= 8


def syncs(run: Path) -> list[tuple[str, str, list[float], list[float], float]]:
    """(where: the run and policy, phase, sample times, working sets, synced at) of every phase every
    policy synced."""
    meta = json.loads((run / "run.json").read_text())
    found = []
    with (run / "policies-real.csv").open() as table:
        for row in csv.DictReader(table):
            slug = meta["policies"][row["policy"]]["slug"]
            trace = [s for s in read_trace(run / "traces" / f"{slug}.csv") if s.working_set_mib is not None]
            times, sets = [s.t for s in trace], [float(s.working_set_mib or 0.0) for s in trace]
            phases = zip(meta["committed_at_s"].items(), seconds_to_synced(row), strict=True)
            for (phase, committed), seconds in phases:
                if seconds is not None:
                    found.append((f"{run.name} {row['policy']}", phase, times, sets, committed + seconds))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m profiles.sync_tail", description=__doc__.split("\n")[0])
    parser.add_argument("runs", type=Path, nargs="+")
    args = parser.parse_args()
    every = [s for run in args.runs for s in syncs(run)]
    for delay in DELAYS_S:
        seen = [(p, ph, settled(t, w, at, delay)) for p, ph, t, w, at in every]
        known = [s for s in seen if s[2] is not None]
        late = [f"{p}: {ph}" for p, ph, ok in known if not ok]
        print(
            f"{delay:4.0f} s after the report: {len(known) - len(late)} of {len(known)} settled; not: {late}"
        )


if __name__ == "__main__":
    main()
