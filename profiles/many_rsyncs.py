"""Many RSyncs on one real node under one sizing policy, each syncing a source of its own, one timeline.

    python -m profiles.many_rsyncs
        --policy ours-sidecar|ours-cluster|static-standard|static-autopilot|vpa-tuned
        [--rsyncs 20 | --rootsyncs R --reposyncs P]
        [--shape deployments|configmaps] [--objects 200] [--sources DIR]
        [--out profiles/out/many-rsyncs] [--phase-timeout 900] [--hold 120] [--git-period SECONDS]
        [--phases "commit all,big commit"] [--big 2000] [--leave-mib N]
    python -m profiles.many_rsyncs --report DIR   # a finished run's tables again, from what it saved

On the local stack with a real node, as `profiles.policies_real` runs (Kubernetes v1.37.2, Config Sync
v1.25.0 built from its pinned source, every container of its reconciler Pods real, run by the kubelet with
containerd; the real metrics-server and VPA v1.8.1 where the policy needs them). `--rsyncs N` makes a
quarter of them RootSyncs (at least one) and the rest RepoSyncs (`split`: 20 is 5 and 15, 3 is 1 and 2);
`--rootsyncs` and `--reposyncs` say how many of each. A RootSync (`many-root-NN`, unstructured) puts its
objects in namespaces of its own, which it creates; a RepoSync (`repo-sync`, in `many-tenant-NN`) in its
namespace, with the RoleBinding Config Sync's documentation has a user create for its reconciler.

The sources: `--shape` (Deployments with `replicas: 0`, or ConfigMaps; `profiles.reconciler_memory`'s
manifests), `--objects` of them at first; or `--sources DIR`, one sub-directory per RSync (in name order:
the RootSyncs first), each committed as it is (every file, sub-directories kept; a file that is not UTF-8
is committed with its undecodable bytes replaced). The timeline (`PHASES`), each phase waiting until every
RSync that committed reports its commit synced, or reports errors for it from its source or rendering
stage (`rejected`: Config Sync refused the source), or `--phase-timeout` passes (`not synced`), then
holding `--hold` seconds:

- every RSync commits at once: `--objects` of the shape (with `--sources`: its directory);
- a grow: twice as many (with `--sources`: its directory and `--objects` of the shape added);
- one big commit: the first RootSync alone commits five times `--objects` (its directory and four times
  `--objects` added); the others stay idle;
- a prune of all: a tenth of `--objects`, at least one (with `--sources`: its directory alone again).

`--phases` runs some of them only (in this order); `--big N` makes the big commit N objects (with
`--sources`: its directory and N added). One RSync's cost beside others (issue 61, item 3) is measured as
`--rsyncs 1 --phases "commit all,big commit" --big 2000`, then `--rsyncs 30` the same way. `--leave-mib N`:
once the first phase is synced, a filler Pod (the pause image, `controlplane.filler`) requests all the
node's allocatable memory but N MiB, so that what the reconcilers hold decides who gets room next
(docs/sizing.md, "Room on the node"); each RSync's seconds waiting for room (its resize deferred) and
seconds above its request are recorded.

Each RSync first syncs an empty commit, so every reconciler runs before the timeline starts.
git-sync fetches each commit on its next poll, every 15 s (Config Sync's default) or every `--git-period`
seconds (each RSync's `spec.git.period`): a phase's seconds to synced include that wait.

Policies (one per run), installed as `profiles.policies_real` installs each but covering every RSync:
- `ours-sidecar`: the README's sidecar install (its webhook adds our sidecar to every reconciler Pod and
  sizes it at admission; shipped settings: in place), and for each RepoSync its sidecar's account
  (`objcount grant-reposync NAMESPACE NAME`, applied);
- `ours-cluster`: the README's cluster install (the controller's Deployment, two replicas, one acting, and
  its webhook, sizing at admission only), no inventory selector: it sizes every RSync;
- `static-standard`: Config Sync's template (200Mi request, no memory limit);
- `static-autopilot`: request = limit = 512Mi (each RSync's override);
- `vpa-tuned`: VPA as released with the tuned recommender and updater flag of policies_real, and one
  VerticalPodAutoscaler per reconciler Deployment as a user tuning it writes it.

What is played by us, not by a real component: the commits (the script writes each source to a git
repository per RSync on the node's git server, `controlplane.git_server`, which git-sync fetches over
HTTP), the tenants' namespaces and RoleBindings, and the installs' `kubectl` steps (done through the API
with the objects the README's commands apply).

Measured (the sampler of `profiles.real_runs`, every second): per reconciler, the memory request and limit
the kubelet reports applied (`status.containerStatuses[].resources`), its working set (the container's
cgroup), restarts and OOM kills; beside it here, the container cgroup's peak and the reconciler
processes' resident peak (`VmHWM`), kept as the largest read over the run (a container replaced between
two readings loses what it reached after the last), and the entries of its inventory (ResourceGroup).
Per node: the sum of the reconciler containers' requests and working sets each second, the node's
allocatable memory, and the cost of ours and VPA's components (every one that runs, from the kubelet's
summary every 10 s: our sidecars, webhook and controller; VPA's recommenders, updater, admission
controller). Our reaction time: from a change of one of an RSync's counts to the first raise of its
reconciler's applied memory request after it and before its next count change (`reaction_times`,
`raises`: sizing ahead of the work is a raise; a lower size waits for the scale-down delay or the
steady state by design). The counts change at each of its commits (the source's objects: our sidecar
reads them when git-sync has fetched the commit, so a reaction includes that wait, up to one
`--git-period`; cluster mode reads no source) and whenever the sampler reads another number of entries
in its inventory. A change no raise follows is counted apart (fewer objects, a size held on its step,
or set already by the change before it); p50 and p99 (nearest rank) over every RSync's reactions. Each
is known to about a second: the sampler reads once a second.

Results in `--out`: `many-rsyncs.csv` (one row per RSync), `node.csv` (one row), `node-trace.csv` (the
sums each second), `inventory-counts.csv`, `traces/<rsync>.csv` (the per-second samples),
`own-components.csv`, `many-rsyncs.md`, `many-rsyncs.png`, `run.json` (provenance), `logs/`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import json
import math
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import orjson
import yaml

from autoscaler.core import quantity
from controlplane.autoscaler_install import CONTROLLER, WEBHOOK_NAME, install_cluster
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync, running_config_sync_on_node
from controlplane.filler import fill_the_nodes_memory
from controlplane.kubelet import NODE_NAME
from controlplane.metrics_server import install_metrics_server
from controlplane.resources import create_or_replace
from controlplane.rsyncs import grant_reposync
from controlplane.seed import ensure_namespace
from controlplane.status_checks import synced
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from profiles.bench_service import memory_mib
from profiles.real_runs import (
    JSON,
    POLICIES,
    MiB,
    OwnSample,
    Sample,
    Sampler,
    in_place_resizes,
    install_vpa_for,
    integral_mib_hours,
    new_pods,
    now,
    own_costs,
    own_table,
    provenance,
    read_trace,
    restarts_and_kills,
    save_component_logs,
    vpa_object,
    write_rows,
)
from profiles.reconciler_memory import manifests

# `--policy` -> the policy of profiles.real_runs it runs.
POLICY_NAMES = {
    "ours-sidecar": "ours, sidecar",
    "ours-cluster": "ours, cluster mode",
    "static-standard": "static Standard",
    "static-autopilot": "static Autopilot",
    "vpa-tuned": "VPA tuned",
}
SHAPES = ("deployments", "configmaps")
DEFAULT_RSYNCS = 20
ROOT_PREFIX = "many-root"
TENANT_PREFIX = "many-tenant"
REPOSYNC_NAME = "repo-sync"  # Config Sync's default RepoSync name
ADDED_FILE = "many-rsyncs-added.yaml"  # what the timeline adds to a `--sources` directory
IDLE = "idle"  # an RSync that did not commit in a phase
REJECTED = "rejected"  # its source or rendering stage reported errors for the phase's commit
NOT_SYNCED = "not synced"  # neither synced nor rejected within the phase timeout
ROLLOUT_TIMEOUT_S = 100


# ----- the RSyncs and the timeline (pure) ---------------------------------------------------------------
def split(rsyncs: int) -> tuple[int, int]:
    """RootSyncs and RepoSyncs of `--rsyncs N`: a quarter RootSyncs (a platform team's few), at least one,
    the rest RepoSyncs (one per tenant)."""
    roots = max(1, rsyncs // 4)
    return roots, rsyncs - roots


def resolve_counts(
    rsyncs: int | None, rootsyncs: int | None, reposyncs: int | None, sources: int | None
) -> tuple[int, int]:
    """How many RootSyncs and RepoSyncs the options ask for; ValueError when they disagree. `sources`: the
    number of `--sources` sub-directories (None without it), which sets N when `--rsyncs` does not. One
    of `--rootsyncs` and `--reposyncs` alone: the other is the rest of N, or none without N."""
    total = rsyncs if rsyncs is not None else sources
    if rootsyncs is not None and reposyncs is not None:
        roots, repos = rootsyncs, reposyncs
    elif rootsyncs is not None:
        roots, repos = rootsyncs, (total - rootsyncs if total is not None else 0)
    elif reposyncs is not None:
        roots, repos = (total - reposyncs if total is not None else 0), reposyncs
    else:
        roots, repos = split(total if total is not None else DEFAULT_RSYNCS)
    if roots < 0 or repos < 0 or roots + repos < 1:
        raise ValueError(f"no such split: {roots} RootSyncs and {repos} RepoSyncs")
    if total is not None and roots + repos != total:
        raise ValueError(f"{roots} RootSyncs and {repos} RepoSyncs are not {total} RSyncs")
    if sources is not None and roots + repos != sources:
        raise ValueError(f"{roots + repos} RSyncs for {sources} source directories")
    return roots, repos


def rsync_keys(roots: int, repos: int) -> list[RSyncKey]:
    """The RootSyncs first, then one RepoSync per tenant namespace; numbered from 1."""
    return [RSyncKey("RootSync", NAMESPACE, f"{ROOT_PREFIX}-{i:02d}") for i in range(1, roots + 1)] + [
        RSyncKey("RepoSync", f"{TENANT_PREFIX}-{i:02d}", REPOSYNC_NAME) for i in range(1, repos + 1)
    ]


def slug(key: RSyncKey) -> str:
    """A name for the RSync's files and rows: a RootSync's name, a RepoSync's namespace (one each)."""
    return key.name if key.kind == "RootSync" else key.namespace


def objects_namespace(key: RSyncKey, shape: str) -> str:
    """Where an RSync's synthetic objects go: a RepoSync's own namespace (it may manage no other); a
    namespace of a RootSync's own, which it creates (an implicit Namespace, unstructured format)."""
    return key.namespace if key.kind == "RepoSync" else f"{key.name}-{shape}"


@dataclass(frozen=True)
class Phase:
    name: str
    synthetic: float  # x --objects: the synthetic source's objects
    added: float  # x --objects: the objects added to a --sources directory
    first_only: bool = False  # committed by the first RSync alone; the others stay idle


PHASES = (
    Phase("commit all", synthetic=1.0, added=0.0),
    Phase("grow", synthetic=2.0, added=1.0),
    Phase("big commit", synthetic=5.0, added=4.0, first_only=True),
    Phase("prune all", synthetic=0.1, added=0.0),
)


def timeline(names: Sequence[str] | None, objects: int, big: int | None) -> tuple[Phase, ...]:
    """The phases run, in their order (`names`: those only), the big commit of `big` objects where given
    (its source directory and `big` added, with --sources)."""
    known = {phase.name for phase in PHASES}
    unknown = sorted(set(names or ()) - known)
    if unknown:
        raise ValueError(f"unknown phases {unknown} (known: {', '.join(p.name for p in PHASES)})")
    chosen = [phase for phase in PHASES if names is None or phase.name in names]
    if big is not None:
        ratio = big / objects
        chosen = [replace(p, synthetic=ratio, added=ratio) if p.first_only else p for p in chosen]
    return tuple(chosen)


@dataclass(frozen=True)
class Workload:
    """What each RSync syncs: `objects` of `shape`, or its directory of `sources` (by slug) and the
    phase's objects of `shape` added."""

    shape: str
    objects: int
    sources: Mapping[str, Mapping[str, str]] | None = None


def phase_files(phase: Phase, index: int, key: RSyncKey, work: Workload) -> dict[str, str] | None:
    """The files the `index`-th RSync commits in `phase` (names under its sync directory); None: idle."""
    if phase.first_only and index != 0:
        return None
    namespace = objects_namespace(key, work.shape)
    if work.sources is None:
        count = max(1, round(work.objects * phase.synthetic))
        return {f"{work.shape}.yaml": manifests(work.shape, count, namespace)}
    files = dict(work.sources[slug(key)])
    added = round(work.objects * phase.added)
    if added:
        files[ADDED_FILE] = manifests(work.shape, added, namespace)
    return files


def with_removals(files: Mapping[str, str], before: Mapping[str, str]) -> dict[str, str | None]:
    """A commit of `files` that also removes what the last commit had and `files` lacks (None: removed)."""
    return {**dict.fromkeys(set(before) - set(files)), **files}


def _stage_errors(stage: Mapping[str, object]) -> int:
    summary = stage.get("errorSummary")
    total = summary.get("totalCount") if isinstance(summary, Mapping) else None
    if isinstance(total, int) and total > 0:
        return total
    errors = stage.get("errors")
    return len(errors) if isinstance(errors, list) else 0


def sync_outcome(rsync: JSON, commit: str) -> str | None:
    """Whether the RSync is done with `commit`: "synced" (applied and pruned, without errors), `REJECTED`
    (its source or rendering stage reports errors for that commit: Config Sync will not apply it), None
    while it is neither. Errors of the sync stage are not final (the reconciler retries them)."""
    if synced(rsync, commit):
        return "synced"
    status = rsync.get("status") or {}
    for stage in ("source", "rendering"):
        block = status.get(stage) or {}
        if block.get("commit") == commit and _stage_errors(block) > 0:
            return REJECTED
    return None


def seconds_or_outcome(outcome: str | None, seconds: float) -> float | str:
    """A phase's cell for one RSync: its seconds to synced, or why there are none."""
    if outcome == "synced":
        return round(seconds, 1)
    return outcome or NOT_SYNCED


# ----- what is computed from the samples (pure) ---------------------------------------------------------
@dataclass(frozen=True)
class InventorySample:
    t: float
    rsync: str  # slug
    entries: int | None  # of its ResourceGroup's spec.resources; None while there is none


@dataclass(frozen=True)
class NodeSample:
    t: float
    requested_mib: float  # the reconciler containers' memory requests, summed
    limits_mib: float  # their limits, summed (a container without one counts 0)
    used_mib: float  # their working sets, summed
    reconcilers: int  # reconciler containers running


def node_sample(t: float, samples: Sequence[Sample]) -> NodeSample:
    """The node's sums over one second's samples, one per RSync."""
    return NodeSample(
        t,
        round(sum(s.request_mib or 0.0 for s in samples), 1),
        round(sum(s.limit_mib or 0.0 for s in samples), 1),
        round(sum(s.working_set_mib or 0.0 for s in samples), 1),
        sum(1 for s in samples if s.container),
    )


def count_changes(counts: Sequence[InventorySample]) -> list[float]:
    """When the inventory's entry count differed from the last one read (a missing inventory skipped)."""
    changes: list[float] = []
    last: int | None = None
    for sample in counts:
        if sample.entries is None:
            continue
        if last is not None and sample.entries != last:
            changes.append(sample.t)
        last = sample.entries
    return changes


def raises(samples: Sequence[Sample]) -> list[float]:
    """When the reconciler's applied memory request rose above the last one read: in place, or a new Pod
    at a larger size (samples without a request skipped). A lower size follows a count by design only
    after the scale-down delay, or with the working set in the steady state: no reaction to time."""
    times: list[float] = []
    last: float | None = None
    for s in samples:
        if s.request_mib is None:
            continue
        if last is not None and s.request_mib > last:
            times.append(s.t)
        last = s.request_mib
    return times


def count_events(commits: Sequence[float], changes: Sequence[float]) -> list[float]:
    """When an RSync's counts changed: at its commits (the source's count) and at its inventory's changes."""
    return sorted({*commits, *changes})


def reaction_times(changes: Sequence[float], resized: Sequence[float]) -> tuple[list[float], int]:
    """Each count change answered by the first raise at or after it and before the next count change:
    the seconds between them; and how many changes no raise answered."""
    answered: list[float] = []
    unanswered = 0
    for change, following in itertools.zip_longest(changes, changes[1:], fillvalue=math.inf):
        first = next((r for r in resized if change <= r < following), None)
        if first is None:
            unanswered += 1
        else:
            answered.append(round(first - change, 2))
    return answered, unanswered


def percentile(values: Sequence[float], q: float) -> float | None:
    """The nearest-rank percentile: the smallest value at least `q` % of `values` are at or below."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(q / 100 * len(ordered))) - 1]


@dataclass(frozen=True)
class Peaks:
    """The largest readings of an RSync's reconciler over the run (None: never read)."""

    cgroup_mib: float | None = None
    resident_mib: float | None = None

    def with_reading(self, cgroup_mib: float | None, resident_mib: float | None) -> Peaks:
        return Peaks(_larger(self.cgroup_mib, cgroup_mib), _larger(self.resident_mib, resident_mib))


def _larger(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else max(a, b)


@dataclass
class RSyncRecord:
    rsync: str  # kind/namespace/name
    peak_working_set_mib: float | None
    cgroup_peak_mib: float | None
    resident_peak_mib: float | None
    request_min_mib: float | None
    request_max_mib: float | None
    limit_min_mib: float | None  # None: never a limit
    limit_max_mib: float | None
    oom_kills: int
    restarts: int
    new_pods: int
    in_place_resizes: int
    seconds_to_synced: list[float | str]  # per phase: seconds, or idle / rejected / not synced
    reactions_s: list[float]  # a count change (a commit, the inventory's entries) -> a raise applied
    unanswered_changes: int
    # Seconds the kubelet deferred its resize (waiting for room: it ran below the size asked for it), and
    # seconds its working set was above the request it ran with.
    waiting_for_room_s: float = 0.0
    above_request_s: float = 0.0


def _extent(values: Sequence[float | None]) -> tuple[float | None, float | None]:
    known = [v for v in values if v is not None]
    return (min(known), max(known)) if known else (None, None)


def seconds_where(samples: Sequence[Sample], holds: Callable[[Sample], bool]) -> float:
    """Seconds of the run during which `holds` held: each sample's state kept until the next sample."""
    return round(integral_mib_hours(samples, lambda s: float(holds(s))) * 3600, 1)


def _above_request(sample: Sample) -> bool:
    used, request = sample.working_set_mib, sample.request_mib
    return used is not None and request is not None and used > request


def rsync_record(
    key: RSyncKey,
    samples: Sequence[Sample],
    *,
    counts: Sequence[InventorySample],
    peaks: Peaks,
    seconds: list[float | str],
    commits: Sequence[float],
) -> RSyncRecord:
    restarts, kills = restarts_and_kills(samples)
    running = [s for s in samples if s.container]
    working_sets = [s.working_set_mib for s in samples if s.working_set_mib is not None]
    events = count_events(commits, count_changes(counts))
    reactions, unanswered = reaction_times(events, raises(samples))
    return RSyncRecord(
        str(key),
        round(max(working_sets), 1) if working_sets else None,
        peaks.cgroup_mib,
        peaks.resident_mib,
        *_extent([s.request_mib for s in running]),
        *_extent([s.limit_mib for s in running]),
        kills,
        restarts,
        new_pods(samples),
        in_place_resizes(samples),
        seconds,
        reactions,
        unanswered,
        seconds_where(samples, lambda s: s.resize == "Deferred"),
        seconds_where(samples, _above_request),
    )


@dataclass
class NodeRecord:
    policy: str
    rootsyncs: int
    reposyncs: int
    allocatable_mib: float | None
    peak_requested_mib: float
    peak_used_mib: float
    requested_mib_h: float
    used_mib_h: float
    own_requested_mib_h: float  # every component of ours or VPA's that ran (none for a static policy)
    own_working_set_mib_h: float
    reaction_p50_s: float | None
    reaction_p99_s: float | None
    reactions: int
    unanswered_changes: int
    oom_kills: int
    restarts: int
    duration_s: float


def node_record(
    policy: str,
    keys: Sequence[RSyncKey],
    *,
    records: Sequence[RSyncRecord],
    node: Sequence[NodeSample],
    own: Mapping[str, tuple[float, float]],
    allocatable_mib: float | None,
) -> NodeRecord:
    reactions = [r for record in records for r in record.reactions_s]
    return NodeRecord(
        policy,
        sum(1 for k in keys if k.kind == "RootSync"),
        sum(1 for k in keys if k.kind == "RepoSync"),
        allocatable_mib,
        max((n.requested_mib for n in node), default=0.0),
        max((n.used_mib for n in node), default=0.0),
        round(integral_mib_hours(node, lambda n: n.requested_mib), 2),
        round(integral_mib_hours(node, lambda n: n.used_mib), 2),
        round(sum(requested for requested, _ in own.values()), 2),
        round(sum(used for _, used in own.values()), 2),
        percentile(reactions, 50),
        percentile(reactions, 99),
        len(reactions),
        sum(record.unanswered_changes for record in records),
        sum(record.oom_kills for record in records),
        sum(record.restarts for record in records),
        round(node[-1].t - node[0].t, 1) if node else 0.0,
    )


# ----- tables (pure) ------------------------------------------------------------------------------------
def _mib_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}"


def _range_cell(low: float | None, high: float | None, none: str = "-") -> str:
    if low is None or high is None:
        return none
    return f"{low:.0f}" if low == high else f"{low:.0f}-{high:.0f}"


def _phase_cell(value: float | str) -> str:
    return value if isinstance(value, str) else f"{value:.0f}"


def rsync_table(records: Sequence[RSyncRecord], phases: Sequence[Phase] = PHASES) -> str:
    """One row per RSync."""
    lines = [
        "| RSync | peak working set (MiB) | cgroup peak (MiB) | resident peak (MiB) | request (MiB) | "
        "limit (MiB) | OOM kills | restarts | new Pods | in-place resizes | to synced, s ("
        + " / ".join(p.name for p in phases)
        + ") | reactions (unanswered) | waiting for room, s | above its request, s |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in records:
        synced_cells = " / ".join(_phase_cell(v) for v in r.seconds_to_synced)
        lines.append(
            f"| {r.rsync} | {_mib_cell(r.peak_working_set_mib)} | {_mib_cell(r.cgroup_peak_mib)} | "
            f"{_mib_cell(r.resident_peak_mib)} | {_range_cell(r.request_min_mib, r.request_max_mib)} | "
            f"{_range_cell(r.limit_min_mib, r.limit_max_mib, 'none')} | {r.oom_kills} | {r.restarts} | "
            f"{r.new_pods} | {r.in_place_resizes} | {synced_cells} | "
            f"{len(r.reactions_s)} ({r.unanswered_changes}) | {r.waiting_for_room_s:.0f} | "
            f"{r.above_request_s:.0f} |"
        )
    return "\n".join(lines) + "\n"


def _seconds_cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def node_table(node: NodeRecord) -> str:
    """The node's one row."""
    return (
        "| policy | RootSyncs / RepoSyncs | allocatable (MiB) | peak sum requested (MiB) | "
        "peak sum used (MiB) | requested / used (MiB-h) | own components: requested / working set (MiB-h) | "
        "reaction p50 / p99, s (reactions, unanswered) | OOM kills | restarts |\n"
        "|---|---|---|---|---|---|---|---|---|---|\n"
        f"| {node.policy} | {node.rootsyncs} / {node.reposyncs} | {_mib_cell(node.allocatable_mib)} | "
        f"{node.peak_requested_mib:.0f} | {node.peak_used_mib:.0f} | "
        f"{node.requested_mib_h:.2f} / {node.used_mib_h:.2f} | "
        f"{node.own_requested_mib_h:.2f} / {node.own_working_set_mib_h:.2f} | "
        f"{_seconds_cell(node.reaction_p50_s)} / {_seconds_cell(node.reaction_p99_s)} "
        f"({node.reactions}, {node.unanswered_changes}) | {node.oom_kills} | {node.restarts} |\n"
    )


# ----- the sources on disk ------------------------------------------------------------------------------
def read_sources(directory: Path) -> dict[str, dict[str, str]]:
    """Each sub-directory of `directory` (in name order): its files by path relative to it (`.git`
    left out; bytes that are not UTF-8 replaced)."""
    sources: dict[str, dict[str, str]] = {}
    for sub in sorted(p for p in directory.iterdir() if p.is_dir() and p.name != ".git"):
        sources[sub.name] = {
            str(f.relative_to(sub)): f.read_bytes().decode("utf-8", errors="replace")
            for f in sorted(sub.rglob("*"))
            if f.is_file() and ".git" not in f.relative_to(sub).parts
        }
    return sources


def sources_by_slug(
    keys: Sequence[RSyncKey], sources: Mapping[str, dict[str, str]]
) -> dict[str, dict[str, str]]:
    """The source directories (in name order) given to the RSyncs (in order: the RootSyncs first)."""
    return {slug(key): files for key, files in zip(keys, sources.values(), strict=True)}


# ----- the run against the stack ------------------------------------------------------------------------
@dataclass
class ManySampler(Sampler):
    """policies_real's sampler, and each second: each reconciler's cgroup peak and resident peak, each
    inventory's entries, and the node's sums."""

    inventory: list[InventorySample] = field(default_factory=list)
    peaks: dict[str, Peaks] = field(default_factory=dict)
    node: list[NodeSample] = field(default_factory=list)
    cgroups: dict[str, Path] = field(default_factory=dict)  # each reconciler container's memory cgroup
    commit_times: dict[str, list[float]] = field(default_factory=dict)  # each RSync's commits, on its clock

    def tick(self, pods: list[JSON], ticks: int) -> None:
        super().tick(pods, ticks)
        t = round(self.now(), 2)
        self.node.append(node_sample(t, [samples[-1] for samples in self.samples.values()]))
        entries = self.inventory_entries()
        for name, key in self.keys.items():
            self.inventory.append(InventorySample(t, name, entries.get((key.namespace, key.name))))
            container = self.samples[name][-1].container
            if container:
                self.peaks[name] = self.peaks.get(name, Peaks()).with_reading(
                    *self.container_peaks(container)
                )

    def inventory_entries(self) -> dict[tuple[str, str], int]:
        """Every ResourceGroup's entries, by its namespace and name (those of the RSync it inventories)."""
        entries: dict[tuple[str, str], int] = {}
        for page in self.api.pages(kubeapi.RESOURCEGROUP, None):
            for group in page["items"]:
                meta = group["metadata"]
                entries[(meta["namespace"], meta["name"])] = len(
                    (group.get("spec") or {}).get("resources") or []
                )
        return entries

    def container_peaks(self, container: str) -> tuple[float | None, float | None]:
        """The container cgroup's peak and its processes' largest `VmHWM` (MiB); None where unreadable
        (the container gone between the Pod list and the read)."""
        stack = self.cs.stack
        cgroup = resident = None
        with contextlib.suppress(OSError, LookupError):
            # Found once per container: the search walks the kubelet's whole cgroup tree.
            path = self.cgroups.get(container) or self.cgroups.setdefault(
                container, stack.container_cgroup(container)
            )
            cgroup = round(stack.cgroups.memory(path).peak / MiB, 1)
            pids = (path / "cgroup.procs").read_text().split()
            resident = round(max(memory_mib(int(pid), "VmHWM") for pid in pids), 1) if pids else None
        return cgroup, resident


def install_policy(cs: NodeConfigSync, policy: str) -> None:
    """The policy's components (none for a static one), each as the README or VPA's release installs it."""
    api = cs.api
    assert api is not None
    recommender = POLICIES[policy].vpa_recommender
    if recommender is not None or policy.startswith("ours"):
        install_metrics_server(cs.stack)  # VPA's recommender and our calibration read it
    install_vpa_for(cs, {recommender} if recommender is not None else set())
    # The webhook's certificates (a private key among them) go in the stack's sandbox, removed with it.
    certs = cs.stack.sandbox.work_dir / "certs"
    if policy == "ours, sidecar":
        cs.install_sidecar(certs)  # returns once the webhook's Pods are Ready
    elif policy == "ours, cluster mode":
        install_cluster(api, certs)
        for deployment in (WEBHOOK_NAME, CONTROLLER):
            wait = ("rollout", "status", "-n", NAMESPACE, f"deployment/{deployment}")
            rollout = cs.stack.kubectl(*wait, f"--timeout={ROLLOUT_TIMEOUT_S}s", check=False)
            if rollout.returncode != 0:
                raise TimeoutError(f"{deployment}'s rollout did not complete: {rollout.stderr}")


def grant_sidecar(api: kubeapi.KubeClient, key: RSyncKey) -> None:
    """A RepoSync's sidecar's own account, as the README has a user make it: `objcount grant-reposync
    NAMESPACE NAME | kubectl apply -f -` (applied through the API)."""
    granted = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "grant-reposync", key.namespace, key.name],
        capture_output=True,
        text=True,
        check=True,
    )
    for item in yaml.safe_load_all(granted.stdout):
        if item:
            create_or_replace(api, item)


def start_rsyncs(
    cs: NodeConfigSync, keys: Sequence[RSyncKey], policy: str, git_period_s: float | None
) -> dict[str, str]:
    """Each RSync on an empty first commit (so every reconciler starts before the timeline), with the
    policy's override or VPA object; a RepoSync in its tenant namespace with Config Sync's RoleBinding for
    its reconciler (and our sidecar's account). The first commit of each, by slug."""
    api = cs.api
    assert api is not None
    chosen = POLICIES[policy]
    commits = {}
    for key in keys:
        if key.kind == "RepoSync":
            ensure_namespace(api, key.namespace)
            grant_reposync(api, key.namespace, key.name)
            if policy == "ours, sidecar":
                grant_sidecar(api, key)
        commits[slug(key)] = cs.commit(key, {"start.yaml": ""})
        body = cs.rsync(key, git_period_s=git_period_s)
        if chosen.override is not None:
            body["spec"]["override"] = chosen.override
        api.create(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, body)
        if chosen.vpa_recommender is not None:
            api.create(kubeapi.VPA, NAMESPACE, vpa_object(chosen, key))
    return commits


def wait_all(
    cs: NodeConfigSync, keys: Mapping[str, RSyncKey], commits: Mapping[str, str], timeout: float, began: float
) -> dict[str, float | str]:
    """Each RSync's seconds from `began` to its commit synced, or `REJECTED`, or `NOT_SYNCED` by `timeout`."""
    api = cs.api
    assert api is not None
    done: dict[str, float | str] = {}
    deadline = time.monotonic() + timeout
    while len(done) < len(commits) and time.monotonic() < deadline:
        rsyncs = _rsyncs(api)
        for name, commit in commits.items():
            key = keys[name]
            rsync = rsyncs.get((key.kind, key.namespace, key.name))
            outcome = sync_outcome(rsync, commit) if rsync is not None else None
            if name not in done and outcome is not None:
                done[name] = seconds_or_outcome(outcome, time.monotonic() - began)
        time.sleep(1.0)
    return {name: done.get(name, NOT_SYNCED) for name in commits}


def _rsyncs(api: kubeapi.KubeClient) -> dict[tuple[str, str, str], JSON]:
    """Every RootSync and RepoSync, by kind, namespace and name ({} when the list fails: read again)."""
    found: dict[tuple[str, str, str], JSON] = {}
    with contextlib.suppress(kubeapi.ApiError):
        for kind, resource in kubeapi.RSYNC_RESOURCES.items():
            for item in orjson.loads(api.list_page(resource, None))["items"]:
                found[(kind, item["metadata"]["namespace"], item["metadata"]["name"])] = item
    return found


def play(
    cs: NodeConfigSync,
    keys: Mapping[str, RSyncKey],
    work: Workload,
    args: argparse.Namespace,
    sampler: ManySampler,
) -> dict[str, list[float | str]]:
    """The timeline: each phase's commits at once, the wait for every RSync that committed, the hold."""
    seconds: dict[str, list[float | str]] = {name: [] for name in keys}
    written: dict[str, dict[str, str]] = {name: {} for name in keys}
    for phase in args.phases:
        began = time.monotonic()
        sampler.committed.append((phase.name, round(sampler.now(), 2)))
        commits = {}
        for index, (name, key) in enumerate(keys.items()):
            files = phase_files(phase, index, key, work)
            if files is not None:
                commits[name] = cs.commit(key, with_removals(files, written[name]))
                sampler.commit_times.setdefault(name, []).append(round(sampler.now(), 2))
                written[name] = files
        print(f"{sampler.now():7.0f} s  {phase.name}: {len(commits)} RSyncs committed", file=sys.stderr)
        done = wait_all(cs, keys, commits, args.phase_timeout, began)
        for name in keys:
            seconds[name].append(done.get(name, IDLE))
        print(f"{sampler.now():7.0f} s  {phase.name}: {done}", file=sys.stderr)
        if args.leave_mib is not None and phase == args.phases[0]:
            assert cs.api is not None
            filler = fill_the_nodes_memory(cs.api, leave_mib=args.leave_mib)
            print(
                f"{sampler.now():7.0f} s  {filler}: the node's memory requested but {args.leave_mib} MiB",
                file=sys.stderr,
            )
        sampler.stopping.wait(args.hold)
    return seconds


def allocatable_mib(api: kubeapi.KubeClient) -> float | None:
    """The node's allocatable memory, as its status says."""
    memory = ((api.get(kubeapi.NODE, None, NODE_NAME).get("status") or {}).get("allocatable") or {}).get(
        "memory"
    )
    return _mib(memory)


def _mib(value: object) -> float | None:
    return None if not value else round(float(quantity.parse(str(value))) / MiB, 1)


def run(args: argparse.Namespace) -> tuple[list[RSyncRecord], NodeRecord]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    began = provenance()  # the commit and time the run starts from
    keys = {slug(key): key for key in rsync_keys(args.rootsyncs, args.reposyncs)}
    sources = sources_by_slug(list(keys.values()), args.source_files) if args.source_files else None
    work = Workload(args.shape, args.objects, sources)
    with running_config_sync_on_node() as cs:
        api = cs.api
        assert api is not None
        install_policy(cs, args.policy)
        allocatable = allocatable_mib(api)
        first = start_rsyncs(cs, list(keys.values()), args.policy, args.git_period)
        sampler = ManySampler(cs, keys, samples={name: [] for name in keys})
        thread = threading.Thread(target=sampler.run, daemon=True)
        thread.start()
        try:
            started = wait_all(cs, keys, first, args.phase_timeout, time.monotonic())
            print(f"{sampler.now():7.0f} s  start: {started}", file=sys.stderr)
            seconds = play(cs, keys, work, args, sampler)
        finally:
            sampler.stopping.set()
            thread.join(30)
            save_component_logs(cs, out, "app=reconciler")
    records = [
        rsync_record(
            key,
            sampler.samples[name],
            counts=[c for c in sampler.inventory if c.rsync == name],
            peaks=sampler.peaks.get(name, Peaks()),
            seconds=seconds[name],
            commits=sampler.commit_times.get(name, []),
        )
        for name, key in keys.items()
    ]
    node = node_record(
        args.policy,
        list(keys.values()),
        records=records,
        node=sampler.node,
        own=own_costs(sampler.own),
        allocatable_mib=allocatable,
    )
    write_results(out, sampler, records, node, args.phases)
    details = {
        "policy": args.policy,
        "rsyncs": [asdict(key) for key in keys.values()],
        "shape": args.shape,
        "objects": args.objects,
        "sources": str(args.sources) if args.sources else None,
        "git_period_s": args.git_period,
        "phase_timeout_s": args.phase_timeout,
        "hold_s": args.hold,
        "leave_mib": args.leave_mib,
        "phases": [asdict(p) for p in args.phases],
        "allocatable_mib": allocatable,
        "committed_at_s": dict(sampler.committed),
        "each_committed_at_s": sampler.commit_times,
    }
    (out / "run.json").write_text(json.dumps(began | details | {"ended": now()}, indent=2) + "\n")
    return records, node


def _csv_rows(path: Path) -> list[dict[str, str]]:
    with path.open() as file:
        return list(csv.DictReader(file))


def _number(text: str) -> float | None:
    return None if text in ("", "None") else float(text)


def _phase_value(text: str) -> float | str:
    """Seconds to synced as saved: a number, or idle / rejected / not synced."""
    try:
        return float(text)
    except ValueError:
        return text


def report(out: Path) -> tuple[list[RSyncRecord], NodeRecord, tuple[Phase, ...], list[OwnSample]]:
    """A finished run's records computed again from what it saved in `out` (its traces, inventories,
    commit times, peaks and seconds to synced), with this checkout's definitions."""
    details = json.loads((out / "run.json").read_text())
    keys = [RSyncKey(k["kind"], k["namespace"], k["name"]) for k in details["rsyncs"]]
    phases = tuple(Phase(**p) for p in details["phases"])
    saved = {row["rsync"]: row for row in _csv_rows(out / "many-rsyncs.csv")}
    inventory = [
        InventorySample(float(r["t"]), r["rsync"], None if r["entries"] == "" else int(r["entries"]))
        for r in _csv_rows(out / "inventory-counts.csv")
    ]
    records = []
    for key in keys:
        row, name = saved[str(key)], slug(key)
        records.append(
            rsync_record(
                key,
                read_trace(out / "traces" / f"{name}.csv"),
                counts=[c for c in inventory if c.rsync == name],
                peaks=Peaks(_number(row["cgroup_peak_mib"]), _number(row["resident_peak_mib"])),
                seconds=[_phase_value(v) for v in row["seconds_to_synced"].split(";")],
                commits=details["each_committed_at_s"].get(name, []),
            )
        )
    node = [
        NodeSample(
            float(r["t"]),
            float(r["requested_mib"]),
            float(r["limits_mib"]),
            float(r["used_mib"]),
            int(r["reconcilers"]),
        )
        for r in _csv_rows(out / "node-trace.csv")
    ]
    own = [
        OwnSample(
            float(r["t"]),
            r["component"],
            r["pod"],
            float(r["working_set_mib"]),
            float(r["request_mib"]),
            float(r["cpu_s"]) if r.get("cpu_s") not in (None, "", "None") else None,
        )
        for r in _csv_rows(out / "own-components.csv")
    ]
    made = node_record(
        details["policy"],
        keys,
        records=records,
        node=node,
        own=own_costs(own),
        allocatable_mib=details["allocatable_mib"],
    )
    return records, made, phases, own


def markdown(
    node: NodeRecord, own: Sequence[OwnSample], records: Sequence[RSyncRecord], phases: Sequence[Phase]
) -> str:
    """many-rsyncs.md: the node's row, our components one by one, each RSync's row."""
    return node_table(node) + "\n" + own_table(own) + "\n" + rsync_table(records, phases)


def write_results(
    out: Path,
    sampler: ManySampler,
    records: Sequence[RSyncRecord],
    node: NodeRecord,
    phases: Sequence[Phase] = PHASES,
) -> None:
    for name, samples in sampler.samples.items():
        write_rows(out / "traces" / f"{name}.csv", samples)
    write_rows(out / "own-components.csv", sampler.own)
    write_rows(out / "inventory-counts.csv", sampler.inventory)
    write_rows(out / "node-trace.csv", sampler.node)
    write_rows(out / "many-rsyncs.csv", records)
    write_rows(out / "node.csv", [node])
    (out / "many-rsyncs.md").write_text(markdown(node, sampler.own, records, phases))
    plot(out, list(sampler.samples), sampler.node, node.allocatable_mib, sampler.committed)


def plot(
    out: Path,
    names: Sequence[str],
    node: Sequence[NodeSample],
    allocatable: float | None,
    committed: Sequence[tuple[str, float]],
) -> None:
    import matplotlib  # noqa: PLC0415 - slow to import, needed only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, (each, total) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    nan = float("nan")
    for name in names:
        trace = read_trace(out / "traces" / f"{name}.csv")
        minutes = [s.t / 60 for s in trace]
        (line,) = each.plot(minutes, [s.working_set_mib or nan for s in trace], linewidth=0.8, label=name)
        each.plot(
            minutes,
            [s.request_mib or nan for s in trace],
            linewidth=0.6,
            linestyle="--",
            color=line.get_color(),
        )
    each.set_title("each reconciler: working set (solid), request (dashed)", fontsize=8)
    each.set_ylabel("MiB", fontsize=8)
    if len(names) <= 10:
        each.legend(loc="upper left", fontsize=6)
    minutes = [n.t / 60 for n in node]
    total.plot(minutes, [n.requested_mib for n in node], label="sum requested", color="tab:green")
    total.plot(minutes, [n.used_mib for n in node], label="sum used (working sets)", color="tab:blue")
    # A line at a large node's allocatable would flatten the sums to the axis: then it is only said.
    peak = max((n.requested_mib for n in node), default=0.0)
    if allocatable is not None and allocatable < 2 * peak:
        total.axhline(allocatable, label="allocatable", color="tab:red", linestyle=":")
    for axis in (each, total):
        for phase, at in committed:
            axis.axvline(at / 60, color="grey", linewidth=0.5)
            axis.annotate(phase, (at / 60, 1.0), xycoords=("data", "axes fraction"), fontsize=6, va="top")
    total.set_title(
        f"the node's reconciler containers (allocatable: {_mib_cell(allocatable)} MiB); grey: the commits",
        fontsize=8,
    )
    total.set_ylabel("MiB", fontsize=8)
    total.set_xlabel("minutes since the sampler started")
    total.legend(loc="upper left", fontsize=7)
    figure.tight_layout()
    figure.savefig(out / "many-rsyncs.png", dpi=80)


def main() -> None:
    # SIGTERM unwinds like Ctrl-C, so the local stack is stopped and its directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(
        prog="python -m profiles.many_rsyncs", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--policy", choices=sorted(POLICY_NAMES))
    parser.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="run nothing: a finished run's tables from what it saved in DIR, with today's definitions",
    )
    parser.add_argument(
        "--rsyncs", type=int, help=f"RSyncs in all (default {DEFAULT_RSYNCS}, or one per --sources directory)"
    )
    parser.add_argument(
        "--rootsyncs", type=int, help="RootSyncs (default: a quarter of --rsyncs, at least 1)"
    )
    parser.add_argument(
        "--reposyncs", type=int, help="RepoSyncs, one per tenant namespace (default: the rest)"
    )
    parser.add_argument("--shape", choices=SHAPES, default="deployments")
    parser.add_argument("--objects", type=int, default=200, help="objects of --shape in the first commit")
    parser.add_argument(
        "--sources", type=Path, metavar="DIR", help="one sub-directory per RSync, committed as its source"
    )
    parser.add_argument("--out", type=Path, default=Path("profiles/out/many-rsyncs"))
    parser.add_argument("--phase-timeout", type=float, default=900.0, help="seconds a phase may take to sync")
    parser.add_argument("--hold", type=float, default=120.0, help="seconds held after each phase")
    period = (
        "seconds between git-sync's fetches of each RSync's repository (its spec.git.period; "
        "default: Config Sync's 15): each phase's commit waits for the next fetch"
    )
    parser.add_argument("--git-period", type=float, metavar="SECONDS", help=period)
    parser.add_argument(
        "--phases",
        help=f"the phases to run, comma-separated (default all: {', '.join(p.name for p in PHASES)})",
    )
    parser.add_argument("--big", type=int, help="objects of the big commit (default: five times --objects)")
    parser.add_argument(
        "--leave-mib",
        type=int,
        help="after the first phase, a filler Pod requests all the node's memory but this many MiB",
    )
    args = parser.parse_args()
    if args.report is not None:
        records, node, phases, own = report(args.report)
        print(markdown(node, own, records, phases), end="")
        return
    if args.policy is None:
        parser.error("--policy is required (or --report DIR)")
    if args.git_period is not None and args.git_period <= 0:
        parser.error("--git-period must be positive")
    if args.objects < 1:
        parser.error("--objects must be at least 1")
    args.source_files = read_sources(args.sources) if args.sources else None
    if args.sources and not args.source_files:
        parser.error(f"--sources {args.sources}: no sub-directory (one per RSync)")
    try:
        args.rootsyncs, args.reposyncs = resolve_counts(
            args.rsyncs, args.rootsyncs, args.reposyncs, len(args.source_files) if args.source_files else None
        )
    except ValueError as error:
        parser.error(str(error))
    try:
        names = None if args.phases is None else [n.strip() for n in args.phases.split(",") if n.strip()]
        args.phases = timeline(names, args.objects, args.big)
    except ValueError as error:
        parser.error(str(error))
    args.policy = POLICY_NAMES[args.policy]
    records, node = run(args)
    print(node_table(node) + "\n" + rsync_table(records, args.phases))


if __name__ == "__main__":
    main()
