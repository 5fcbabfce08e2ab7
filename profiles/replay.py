"""Replay a side-by-side run's real trace through our reconcile step, as the sidecar would have run it.

    python -m profiles.replay profiles/data/policies-real-v1.24.3-run3 [--first-commit 312] [--policy SLUG]

The reconciler's working set is the real one (a trace of `profiles.policies_real`: every sample the
sampler took of one policy's reconciler); what is played is our side: the sidecar counts each phase's
commit when it is committed (the files the run committed, counted by our source counter), the inventory
holds both commits until the reconciler reports the new one synced (the run's own seconds to synced of
that policy), the working set reaches the step as the sampler delivers it (a window per container and
commit), the size is applied in place at once (in place: the running Pod has what we decided), and the
decision (`autoscaler.core.decide`, what a reconcile runs) is called every 10 s and at each commit and sync.
The reconciler's memory does not depend on its request unless it is killed, so the trace stands for
what the reconciler would have used under the replayed sizes; where a replayed request is below a real
working set, the real Pod would have been above its request (an OOM kill where its limit is lower).

Not played: the webhook at admission (the first Pod is sized at once from the template's 200Mi, as
`_resized_from_the_template` does), the API surface (given: what the service read on that node), timing
of the informers (10 s ticks). The phase times are not in the older traces: each phase's commit is put at
the previous one's plus the slowest policy's seconds to synced plus its hold (the run's own loop), from
the first commit's time, read off the trace (where the policies' working sets first rise); runs since
issue 48 record them (`run.json`, `committed_at_s`), and those are used.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import json
import math
import statistics
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import cast

from autoscaler.core.calibration import Sample, Window
from autoscaler.core.decide import decide
from autoscaler.core.observation import Observation, Reading, RSyncView
from autoscaler.core.plan import DecideConfig, RSyncState
from autoscaler.core.resources import Resources
from autoscaler.core.written import Applied, Written
from autoscaler.service.settings import Settings
from inventory.core.counts import ObjectCounts
from inventory.core.ids import RSyncKey
from inventory.core.objects import Pod, RSync
from inventory.source.source_count import count_directory
from profiles.policies_real import POLICIES, Phase, clairvoyant_mib_hours, read_trace
from profiles.policies_real import Sample as TraceSample

KEY = RSyncKey("RootSync", "config-management-system", "replayed")
TICK_S = 10.0
TEMPLATE = Resources(100, 200)  # Config Sync's default reconciler request on Standard, no limits
# A policy's phases are committed together with the others' a few seconds apart (one git push each).
COMMIT_GAP_S = 3.0
GIT_SYNC_PERIOD_S = 15.0  # Config Sync's default: the source is polled every 15 s


@dataclass(frozen=True)
class Commit:
    """One phase as the sidecar sees it: its commit, counted; when committed and when synced."""

    name: str
    counts: ObjectCounts  # the source's counts (kinds, KiB) of this commit
    committed: float
    synced: float | None  # None: the policy never synced it


@dataclass(frozen=True)
class Replayed:
    t: float
    request_mib: int
    limit_mib: int | None
    working_set_mib: float | None


def counted(phase: Phase, slug: str, scale: float, name: str) -> ObjectCounts:
    """The phase's files as the run committed them, counted by our source counter."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        for path, text in phase.files(slug, scale).items():
            (root / path).write_text(text)
        return count_directory(root).object_counts(commit=name)


def first_commit(trace: Sequence[TraceSample]) -> float:
    """When the first phase was committed, read off a trace: its working set first rises a third above
    what the idle reconciler used in the first two minutes, less the 15 s git-sync may take to fetch."""
    idle = statistics.median(s.working_set_mib for s in trace if s.working_set_mib and s.t < 120)
    risen = next(s.t for s in trace if s.t > 60 and (s.working_set_mib or 0) > idle * 4 / 3)
    return risen - GIT_SYNC_PERIOD_S


def schedule(run: Path, slug: str, first_commit: float, phase_timeout: float = 900.0) -> list[Commit]:
    """The run's phases after the start, their commits counted, at the times its own loop gave them."""
    meta = json.loads((run / "run.json").read_text())
    phases = [Phase(p["name"], p["objects"], p["hold_s"]) for p in meta["phases"]][1:]
    with (run / "policies-real.csv").open() as table:
        rows = list(csv.DictReader(table))
    seconds = {_slug(r): seconds_to_synced(r) for r in rows}
    recorded: dict[str, float] = meta.get("committed_at_s", {})  # runs since issue 48 keep them
    commits, at = [], first_commit
    for i, phase in enumerate(phases):
        at = recorded.get(phase.name, at)
        own = seconds[slug][i]
        commits.append(
            Commit(
                phase.name,
                counted(phase, slug, meta["scale"], f"c{i + 1}"),
                at,
                None if own is None else at + own,
            )
        )
        # The run's loop waits for every policy, up to its phase timeout for one that never syncs.
        waits = [phase_timeout if s[i] is None else s[i] for s in seconds.values()]
        slowest = max(w for w in waits if w is not None)
        at += slowest + phase.hold_s * meta["hold_scale"] + COMMIT_GAP_S
    return commits


def seconds_to_synced(row: dict[str, str]) -> list[float | None]:
    """A policy's seconds to synced per phase, as the run's table writes them (`a;b;None;d`)."""
    return [None if s in ("", "None") else float(s) for s in row["seconds_to_synced"].split(";")]


def _slug(row: dict[str, str]) -> str:
    policy = POLICIES.get(row["policy"])
    return row["policy"] if policy is None else policy.slug


def rsync(fetched: str | None, synced: str | None, written: float | None) -> RSync:
    """The RSync as the reconciler reports a commit fetched and the last one synced."""
    status: dict[str, object] = {}
    if fetched is not None:
        syncing = fetched != synced
        status = {
            "source": {"commit": fetched},
            "sync": {
                "commit": fetched if not syncing else synced or "",
                "lastUpdate": _rfc3339(written or 0),
            },
            "conditions": [{"type": "Syncing", "status": "True" if syncing else "False"}],
            **({} if syncing else {"lastSyncedCommit": synced}),
        }
    body = {"metadata": {"name": KEY.name, "namespace": KEY.namespace, "generation": 1}, "status": status}
    return cast(RSync, body)


def _rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def replay(
    trace: Sequence[TraceSample],
    commits: Sequence[Commit],
    *,
    api_resources: int,
    settings: Settings | None = None,
    inventory_only: bool = False,
) -> list[Replayed]:
    """Our step on the trace: the size it would have given at each sample. `inventory_only`: as cluster
    mode counts, from the inventory alone (its count and kinds; no source, so no KiB), the inventory
    taken to hold both commits from the commit's time on (the real one grows once the reconciler has
    fetched and parsed the commit, seconds later: what the real runs measure, this does not)."""
    settings = settings or Settings(mode="cluster", platform="standard")
    config = DecideConfig(settings.profile(), settings.hysteresis(), in_place=True, target="in-place")
    state, current = RSyncState(), TEMPLATE
    started: dict[str, float] = {}
    pod: Pod | None = None  # the reconciler Pod as the port would list it: the latest sample's
    out: list[Replayed] = []
    pending: list[Sample] = []
    samples = iter(trace)
    sample = next(samples, None)
    for now in _ticks(trace, commits):
        while sample is not None and sample.t <= now:
            if sample.container and sample.working_set_mib is not None:
                started.setdefault(sample.container, float(int(sample.t)))  # whole seconds, as a Pod says
                window = Window(sample.pod, started[sample.container], _fetched(commits, sample.t) or "c0")
                pod = _pod(sample.pod, started[sample.container])
                pending.append(Sample(window, math.ceil(sample.working_set_mib), sample.t))
            out.append(
                Replayed(
                    sample.t, current.memory_request_mib, current.memory_limit_mib, sample.working_set_mib
                )
            )
            sample = next(samples, None)
        fetched, synced, written = _reported(commits, now)
        seen = Observation(
            KEY,
            RSyncView.of(rsync(fetched, synced, written)),
            Reading(current=current, api_resources=api_resources, pod=pod, resizes_running=True),
            _inventory(commits, now) if inventory_only else _counts(commits, now),
            now,
            wall=now,
            samples=tuple(pending),
        )
        pending = []
        decision = decide(seen, state, config)
        plan = decision.plan
        applied = None if plan.apply is None else Applied(plan.apply, restarted=False)  # in place
        state = decision.after(Written(applied), now).state
        if plan.apply is not None:
            current = plan.apply
    return out


def _pod(name: str, started: float) -> Pod:
    """The reconciler Pod with its container running since `started`."""
    running = {"running": {"startedAt": _rfc3339(started)}}
    body = {
        "metadata": {"name": name},
        "status": {"containerStatuses": [{"name": "reconciler", "state": running}]},
    }
    return cast(Pod, body)


def _ticks(trace: Sequence[TraceSample], commits: Sequence[Commit]) -> Iterator[float]:
    end = trace[-1].t if trace else 0.0
    events = {c.committed for c in commits} | {c.synced for c in commits if c.synced is not None}
    steady = {i * TICK_S for i in range(int(end // TICK_S) + 1)}
    yield from sorted(t for t in events | steady if t <= end)


def _fetched(commits: Sequence[Commit], t: float) -> str | None:
    done = [c for c in commits if c.committed <= t]
    return done[-1].counts.source_commit if done else None


def _reported(commits: Sequence[Commit], t: float) -> tuple[str | None, str | None, float | None]:
    """The commit the reconciler works on, the last it reports synced, and when."""
    fetched = _fetched(commits, t)
    synced = [c for c in commits if c.synced is not None and c.synced <= t]
    if not synced:
        return fetched, None, None
    return fetched, synced[-1].counts.source_commit, synced[-1].synced


def _counts(commits: Sequence[Commit], t: float) -> ObjectCounts:
    """The sidecar's counts: the newest commit's source; the inventory holds the last synced commit's
    objects and the new one's until the new one is synced (each kind at its larger count)."""
    done = [c for c in commits if c.committed <= t]
    if not done:
        return ObjectCounts(0, 0, source_kib=0, source_kinds=(), source_commit="c0")
    newest = done[-1]
    synced = [c for c in done if c.synced is not None and c.synced <= t]
    if synced and synced[-1] is newest:
        return replace(newest.counts, sync=newest.counts.source)
    before = synced[-1].counts if synced else ObjectCounts(0)
    return replace(newest.counts, sync=(newest.counts.covering(before).source or 0))


def _inventory(commits: Sequence[Commit], t: float) -> ObjectCounts:
    """Cluster mode's counts: the inventory's count and kinds of `_counts`, no source."""
    counts = _counts(commits, t)
    done = [c for c in commits if c.committed <= t]
    synced = [c for c in done if c.synced is not None and c.synced <= t]
    held = done[-1].counts.covering(synced[-1].counts) if synced and done else counts
    return ObjectCounts(sync=counts.sync, sync_kinds=held.source_kinds)


# ----- what is measured (pure) --------------------------------------------------------------------------
def mib_hours(rows: Sequence[Replayed], *, reserved: bool = False) -> float:
    """The request (or what is reserved: the limit, else the request) held from each sample to the next."""

    def of(r: Replayed) -> float:
        return float((r.limit_mib if reserved else None) or r.request_mib)

    return sum(of(a) * (b.t - a.t) for a, b in itertools.pairwise(rows)) / 3600


def above_request(rows: Sequence[Replayed]) -> float:
    return max([0.0, *((r.working_set_mib or 0.0) - r.request_mib for r in rows)])


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m profiles.replay", description=__doc__.split("\n")[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("--policy", default="standard", help="the trace whose working set is replayed")
    parser.add_argument("--first-commit", type=float, help="seconds into the trace (default: read off it)")
    parser.add_argument(
        "--api-resources", type=int, default=78, help="what the service read (v1.25.0 runs: 78)"
    )
    parser.add_argument(
        "--scale-down-delay", type=float, default=None, help="seconds (default: the setting's)"
    )
    parser.add_argument(
        "--inventory-only", action="store_true", help="count as cluster mode: the inventory alone"
    )
    args = parser.parse_args()
    trace = read_trace(args.run / "traces" / f"{args.policy}.csv")
    first = first_commit(trace) if args.first_commit is None else args.first_commit
    commits = schedule(args.run, args.policy, first)
    for c in commits:
        print(f"{c.name}: {c.counts.source} objects committed at {c.committed:.0f} s, synced at {c.synced}")
    delay = (
        {} if args.scale_down_delay is None else {"in_place_scale_down_delay_seconds": args.scale_down_delay}
    )
    settings = Settings(mode="cluster", platform="standard", **delay)
    only = args.inventory_only
    rows = replay(trace, commits, api_resources=args.api_resources, settings=settings, inventory_only=only)
    print(
        f"requested {mib_hours(rows):.1f} MiB-h, reserved {mib_hours(rows, reserved=True):.1f}, "
        f"above request {above_request(rows):.0f} MiB, clairvoyant {clairvoyant_mib_hours(trace):.1f}"
    )
    last = None
    for r in rows:
        if (r.request_mib, r.limit_mib) != last:
            print(f"  {r.t:7.0f} s  {r.request_mib}Mi (limit {r.limit_mib}) working set {r.working_set_mib}")
            last = (r.request_mib, r.limit_mib)


if __name__ == "__main__":
    main()
