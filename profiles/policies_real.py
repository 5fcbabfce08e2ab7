"""Sizing policies side by side on the real reconciler: the same timeline under each policy, one after
another.

    python -m profiles.policies_real [--shapes configmaps,deployments] [--policies ...]
                                     [--out profiles/out/policies-real] [--hold 30] [--settle 60]
                                     [--phase-timeout 900] [--resume]

On the local stack with a real node (Config Sync built from the pinned source: v1.24.3, or v1.22.0 with
OBJCOUNT_CONFIGSYNC_VERSION=v1.22.0; its Pods run by the
kubelet with containerd; PLAYED BY US: git-sync, see controlplane.images), each (shape, policy) gets a
RootSync of its own, so a fresh reconciler, and plays one timeline:
grow (two commits), a big commit, then a prune to a few objects, with a restart of the policy's
controller (our service, or the prototype's counter) once the reconciler has started that prune. After
each commit is synced (or after `--phase-timeout`), `--hold` seconds pass before the next; `--settle`
after the last. A sampler reads the reconciler Pod every second: its memory request and limit, the
working set of the reconciler container's memory cgroup (usage less inactive file pages, as the kubelet
computes it), container restarts and the OOM kills the kubelet reports (`OOMKilled` terminations).

Policies (the rivals' rules are in `profiles.rivals`, shared with the simulator):
- ours (default): our sidecar as the README installs it (our webhook's Pods inject it into the reconciler
  Pod), with its shipped settings, target `rsync-override`; its restart is a SIGTERM to its process,
  after which the kubelet starts the container again;
- ours count-only: the same with `OBJCOUNT_PRESET=fitted` (objects only, the previous default);
- prototype, no persistence: 128 MiB + 0.2 MiB per object on max(source, synced) with request = limit,
  its synced count lost when it restarts;
- static Standard: no override, Config Sync's template (200Mi request, no memory limit);
- static Autopilot: request = limit = 512Mi;
- VPA-like: 90th percentile of the last 10 min's RSS + 15 %, every 30 s, applied when it moves more than
  10 %, +20 % after a kill; starts at 200Mi; request = limit. (VPA keeps its history in checkpoints: the
  restart mid-prune loses nothing.)
Every size is written to the RSync's `spec.override.resources`, so each change rolls the reconciler out,
as Config Sync does for any override.

Results in `--out`: `policies-real.csv` (one row per shape and policy; `--resume` keeps the rows there),
`traces/<shape>-<policy>.csv` (the samples), `policies-real.md` and `policies-real.png`. Memory reserved
is the integral of the Pod's memory limit over the run (its request where it sets no limit), MiB-hours.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import itertools
import math
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, cast

from tqdm import tqdm

from autoscaler import quantity
from autoscaler.policy import PROTOTYPE
from controlplane.configsync import (
    NAMESPACE,
    SIDECAR_CONTAINER,
    VERSION,
    NodeConfigSync,
    rsync_gone,
    running_config_sync_on_node,
    synced,
    uninstall_webhook,
)
from controlplane.seed import install_crds
from inventory import kubeapi
from inventory.ids import RSyncKey
from profiles.own_cost import RSYNCS, shipped
from profiles.reconciler_memory import WIDGET_CRD, manifests
from profiles.rivals import STATIC_AUTOPILOT, STATIC_STANDARD, Static, VpaLike, prototype_memory_mib

JSON = dict[str, Any]
MiB = 1 << 20

# Per shape: grow (two commits), the big commit, the prune. Deployments are applied ~4x slower than
# ConfigMaps here (BENCHMARKS.md), so their timeline is smaller to keep a run under an hour.
TIMELINES: dict[str, tuple[int, int, int, int]] = {
    "configmaps": (250, 500, 2000, 100),
    "deployments": (100, 250, 800, 50),
    "small-crs": (250, 500, 2000, 100),
    "large-crs": (50, 100, 400, 20),
    "mix": (250, 500, 1500, 100),
}
PHASES = ("grow 1", "grow 2", "big commit", "prune")


# ----- what is measured (pure) -----------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the RootSync was created
    pod: str  # "" while there is no reconciler Pod
    rss_mib: float | None  # the reconciler container's working set
    request_mib: float | None
    limit_mib: float | None
    restarts: int  # the reconciler container's restartCount in this Pod
    oom_kills: int  # the OOM kills of the reconciler container in this Pod (the kubelet's reports)

    @property
    def reserved_mib(self) -> float:
        """What the Pod holds for the reconciler: its limit, else its request."""
        return self.limit_mib or self.request_mib or 0.0


def mib_hours(samples: Sequence[Sample]) -> float:
    """The reserved memory integrated over time, each sample's value held until the next sample."""
    return sum(a.reserved_mib * (b.t - a.t) for a, b in itertools.pairwise(samples)) / 3600


def restarts_and_kills(samples: Sequence[Sample]) -> tuple[int, int]:
    """Reconciler restarts (each new Pod after the first, and each container restart in a Pod) and OOM
    kills, from the highest values seen per Pod."""
    restarts: dict[str, int] = {}
    kills: dict[str, int] = {}
    for s in samples:
        if s.pod:
            restarts[s.pod] = max(restarts.get(s.pod, 0), s.restarts)
            kills[s.pod] = max(kills.get(s.pod, 0), s.oom_kills)
    return max(len(restarts) - 1, 0) + sum(restarts.values()), sum(kills.values())


def peak_above_request(samples: Sequence[Sample]) -> float:
    """How far the process went above its request (what a policy without a limit lets it take); 0 when
    it never did."""
    above = [
        s.rss_mib - s.request_mib for s in samples if s.rss_mib is not None and s.request_mib is not None
    ]
    return max([0.0, *above])


@dataclass
class Result:
    shape: str
    policy: str
    oom_kills: int
    restarts: int
    seconds_to_synced: list[float | None]  # per phase; None: not synced within the timeout
    mib_hours: float
    peak_rss_mib: float
    peak_above_request_mib: float
    largest_limit_mib: float | None
    duration_s: float
    version: str = VERSION
    date: str = ""
    machine: str = ""


def result_of(shape: str, policy: str, samples: Sequence[Sample], phases: list[float | None]) -> Result:
    restarts, kills = restarts_and_kills(samples)
    limits = [s.limit_mib for s in samples if s.limit_mib is not None]
    return Result(
        shape,
        policy,
        kills,
        restarts,
        phases,
        round(mib_hours(samples), 2),
        round(max((s.rss_mib or 0.0 for s in samples), default=0.0), 1),
        round(peak_above_request(samples), 1),
        max(limits, default=None),
        round(samples[-1].t if samples else 0.0, 1),
        date=datetime.now(UTC).date().isoformat(),
        machine=f"{os.uname().machine}, {os.cpu_count()} cores",
    )


# ----- the policies -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Seen:
    """What a policy's controller may know at a tick."""

    now: float
    rss_mib: float | None
    source: int  # objects of the commit being synced (the benchmark wrote it)
    synced: int  # entries of the inventory
    commit_synced: bool  # the reconciler reports the current commit synced
    oom_kills: int


def override(memory_mib: int | None, cpu_m: int | None = None) -> JSON:
    """The RSync override for the reconciler: request = limit."""
    entry: JSON = {"containerName": "reconciler"}
    if memory_mib is not None:
        entry |= {"memoryRequest": f"{memory_mib}Mi", "memoryLimit": f"{memory_mib}Mi"}
    if cpu_m is not None:
        entry |= {"cpuRequest": f"{cpu_m}m", "cpuLimit": f"{cpu_m}m"}
    return {"resources": [entry]}


class Policy(Protocol):
    def start(self, stack: NodeConfigSync, key: RSyncKey, log_dir: Path) -> JSON | None:
        """Starts its controller; the RSync's initial override (None: none)."""

    def tick(self, seen: Seen) -> JSON | None:
        """A new override to write, if any."""

    def restart(self) -> None: ...

    def stop(self) -> None: ...


@dataclass
class StaticPolicy:
    rule: Static

    def start(self, stack: NodeConfigSync, key: RSyncKey, log_dir: Path) -> JSON | None:
        if self.rule == STATIC_STANDARD:
            return None  # Config Sync's own template
        assert self.rule.limit_mib == self.rule.request_mib
        return override(self.rule.request_mib)

    def tick(self, seen: Seen) -> JSON | None:
        return None

    def restart(self) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass
class PrototypePolicy:
    memory_mib: int = 0
    synced_since_restart: bool = False

    def start(self, stack: NodeConfigSync, key: RSyncKey, log_dir: Path) -> JSON | None:
        return None  # its first tick sizes it, as the prototype did once the reconciler reported

    def tick(self, seen: Seen) -> JSON | None:
        self.synced_since_restart = self.synced_since_restart or seen.commit_synced
        memory = prototype_memory_mib(seen.source, seen.synced, self.synced_since_restart)
        if memory == self.memory_mib:
            return None
        self.memory_mib = memory
        return override(memory, PROTOTYPE.cpu_m(memory))

    def restart(self) -> None:
        self.synced_since_restart = False  # its counts were in memory

    def stop(self) -> None:
        pass


@dataclass
class VpaLikePolicy:
    vpa: VpaLike = field(default_factory=lambda: VpaLike(every_s=30, window_s=600))

    def start(self, stack: NodeConfigSync, key: RSyncKey, log_dir: Path) -> JSON | None:
        return override(math.ceil(self.vpa.request_mib))

    def tick(self, seen: Seen) -> JSON | None:
        change = self.vpa.observe(seen.now, seen.rss_mib, seen.oom_kills)
        return None if change is None else override(math.ceil(self.vpa.request_mib))

    def restart(self) -> None:
        pass

    def stop(self) -> None:
        pass


@dataclass
class ServicePolicy:
    """Our sidecar, installed as the README says with these settings in its template."""

    env: dict[str, str]
    config_sync: NodeConfigSync | None = None
    key: RSyncKey | None = None
    log: Path | None = None

    def start(self, stack: NodeConfigSync, key: RSyncKey, log_dir: Path) -> JSON | None:
        self.config_sync, self.key, self.log = stack, key, log_dir / f"service-{key.name}.log"
        stack.install_sidecar(log_dir / "certs", self.env)
        return None

    def tick(self, seen: Seen) -> JSON | None:
        return None

    def restart(self) -> None:
        """SIGTERM to the sidecar's process; the kubelet starts the container again in the same Pod."""
        assert self.config_sync is not None
        assert self.key is not None
        pod = self.config_sync.reconciler_pod(self.key)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        ours = next((s for s in cast(list[JSON], statuses) if s["name"] == SIDECAR_CONTAINER), {})
        if "running" not in (ours.get("state") or {}):
            print(f"{self.key.name}: no sidecar running to restart", file=sys.stderr)
            return
        stack = self.config_sync.stack
        pid = int((stack.container_cgroup(ours["containerID"]) / "cgroup.procs").read_text().split()[0])
        os.kill(pid, signal.SIGTERM)

    def stop(self) -> None:
        """The sidecar's log is kept; the webhook configuration is removed, so the next policy's Pods run
        without the sidecar."""
        if self.config_sync is None or self.key is None or self.config_sync.api is None:
            return
        pod = self.config_sync.reconciler_pod(self.key)
        if pod is not None and self.log is not None:
            name = pod["metadata"]["name"]
            logs = self.config_sync.stack.kubectl(
                "logs", "-n", NAMESPACE, name, "-c", SIDECAR_CONTAINER, check=False
            )
            self.log.write_text(logs.stdout + logs.stderr)
        uninstall_webhook(self.config_sync.api)


POLICIES: dict[str, Callable[[], Policy]] = {
    "ours (default)": lambda: ServicePolicy({}),
    "ours count-only": lambda: ServicePolicy({"OBJCOUNT_PRESET": "fitted"}),
    "prototype (no persistence)": PrototypePolicy,
    "static Standard": lambda: StaticPolicy(STATIC_STANDARD),
    "static Autopilot": lambda: StaticPolicy(STATIC_AUTOPILOT),
    "VPA-like": VpaLikePolicy,
}
# Short names for RootSyncs (Config Sync allows 38 characters) and files.
SLUGS = dict(zip(POLICIES, ["ours", "count-only", "prototype", "standard", "autopilot", "vpa"], strict=True))


# ----- the run against the stack ------------------------------------------------------------------------
def _mib(value: str | None) -> float | None:
    return None if not value else float(quantity.parse(value)) / MiB


def sample(stack: NodeConfigSync, key: RSyncKey, t: float, killed: dict[str, set[str]]) -> Sample:
    """The reconciler Pod now; `killed` keeps, per Pod, the containers the kubelet reported OOM-killed
    (it reports only the last termination, which a sample every second cannot miss: a restart after a
    kill waits at least 10 s)."""
    found = stack.reconciler_pod(key)
    if found is None:
        return Sample(t, "", None, None, None, 0, 0)
    pod: JSON = dict(found)
    name = pod["metadata"]["name"]
    container = next(c for c in pod["spec"]["containers"] if c["name"] == "reconciler")
    resources = container.get("resources") or {}
    statuses: list[JSON] = (pod.get("status") or {}).get("containerStatuses") or []
    status: JSON = next((s for s in statuses if s["name"] == "reconciler"), {})
    terminated = (status.get("lastState") or {}).get("terminated") or {}
    kills = killed.setdefault(name, set())
    if terminated.get("reason") == "OOMKilled":
        kills.add(str(terminated.get("containerID")))
    rss = None
    if "running" in (status.get("state") or {}):
        with contextlib.suppress(OSError, LookupError):
            rss = stack.stack.container_memory(status["containerID"]).working_set / MiB
    return Sample(
        t,
        name,
        rss,
        _mib((resources.get("requests") or {}).get("memory")),
        _mib((resources.get("limits") or {}).get("memory")),
        int(status.get("restartCount") or 0),
        len(kills),
    )


@dataclass
class Timeline:
    """Played against one RootSync; a sampler thread ticks the policy every second."""

    stack: NodeConfigSync
    key: RSyncKey
    policy: Policy
    source: int = 0
    commit: str = ""
    samples: list[Sample] = field(default_factory=list)
    killed: dict[str, set[str]] = field(default_factory=dict)
    began: float = field(default_factory=time.monotonic)
    stopping: threading.Event = field(default_factory=threading.Event)

    @property
    def api(self) -> kubeapi.KubeApi:
        assert self.stack.api is not None
        return self.stack.api

    def now(self) -> float:
        return time.monotonic() - self.began

    def rsync(self) -> JSON:
        return self.api.get(kubeapi.ROOTSYNC, self.key.namespace, self.key.name)

    def inventory(self) -> int:
        try:
            group = self.api.get(kubeapi.RESOURCEGROUP, self.key.namespace, self.key.name)
        except kubeapi.NotFound:
            return 0
        return len((group.get("spec") or {}).get("resources") or [])

    def write(self, entry: JSON) -> None:
        self.api.patch(kubeapi.ROOTSYNC, self.key.namespace, self.key.name, {"spec": {"override": entry}})

    def sampler(self) -> None:
        while not self.stopping.wait(1.0):
            try:
                latest = sample(self.stack, self.key, self.now(), self.killed)
                self.samples.append(latest)
                kills = restarts_and_kills(self.samples)[1]
                seen = Seen(latest.t, latest.rss_mib, self.source, self.inventory(), self.synced(), kills)
                change = self.policy.tick(seen)
                if change is not None:
                    self.write(change)
            except (kubeapi.ApiError, OSError, LookupError) as error:  # a benchmark: note it, sample again
                print(f"{self.key.name}: sampling failed: {error}", file=sys.stderr)

    def synced(self) -> bool:
        return bool(self.commit) and synced(self.rsync(), self.commit)

    def play(
        self, shape: str, scale: float, hold: float, settle: float, timeout: float
    ) -> list[float | None]:
        phases: list[float | None] = []
        for phase, full in zip(PHASES, TIMELINES[shape], strict=True):
            count = max(1, round(full * scale))
            self.source = count
            self.commit = self.stack.commit(
                self.key, {"objects.yaml": manifests(shape, count, self.key.name)}
            )
            committed = self.now()
            if phase == "prune":
                # The controller restarts once the reconciler works on the prune (has read its commit).
                self._wait(
                    lambda: (self.rsync().get("status") or {}).get("source", {}).get("commit") == self.commit,
                    timeout,
                )
                self.policy.restart()
            done = self._wait(self.synced, timeout)
            phases.append(round(self.now() - committed, 1) if done else None)
            self._pause(hold if phase != "prune" else settle)
        return phases

    def _wait(self, condition: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with contextlib.suppress(kubeapi.ApiError):
                if condition():
                    return True
            time.sleep(1.0)
        return False

    def _pause(self, seconds: float) -> None:
        self.stopping.wait(seconds)


def run_one(
    stack: NodeConfigSync, shape: str, name: str, args: argparse.Namespace
) -> tuple[Result, list[Sample]]:
    api = stack.api
    assert api is not None
    key = RSyncKey("RootSync", NAMESPACE, f"pol-{shape}-{SLUGS[name]}")
    policy = POLICIES[name]()
    body = stack.rsync(key)
    body["metadata"]["annotations"] = {"configsync.gke.io/deletion-propagation-policy": "Foreground"}
    timeline = Timeline(stack, key, policy)
    initial = policy.start(stack, key, args.out)
    if initial is not None:
        body["spec"]["override"] = initial
    # An empty first commit, so the reconciler starts before the timeline does.
    timeline.commit = stack.commit(key, {"objects.yaml": ""})
    api.create(kubeapi.ROOTSYNC, key.namespace, body)
    timeline.began = time.monotonic()
    sampler = threading.Thread(target=timeline.sampler, daemon=True)
    sampler.start()
    try:
        phases = timeline.play(shape, args.scale, args.hold, args.settle, args.phase_timeout)
    finally:
        timeline.stopping.set()
        sampler.join(30)
        policy.stop()
        with contextlib.suppress(kubeapi.NotFound):
            api.delete(kubeapi.ROOTSYNC, key.namespace, key.name)
        timeline._wait(lambda: rsync_gone(api, key), args.phase_timeout)
    return result_of(shape, name, timeline.samples, phases), timeline.samples


# ----- results ------------------------------------------------------------------------------------------
COLUMNS = [f.name for f in fields(Result)]


def read_results(path: Path) -> list[Result]:
    if not path.exists():
        return []
    with path.open() as file:
        rows = list(csv.DictReader(file))
    return [_result_of_row(row) for row in rows]


def _result_of_row(row: dict[str, str]) -> Result:
    def number(text: str) -> float | None:
        return None if text in ("", "None") else float(text)

    return Result(
        row["shape"],
        row["policy"],
        int(row["oom_kills"]),
        int(row["restarts"]),
        [number(v) for v in row["seconds_to_synced"].split(";")],
        float(row["mib_hours"]),
        float(row["peak_rss_mib"]),
        float(row["peak_above_request_mib"]),
        number(row["largest_limit_mib"]),
        float(row["duration_s"]),
        row["version"],
        row["date"],
        row["machine"],
    )


def append(path: Path, result: Result) -> None:
    new = not path.exists()
    row = asdict(result) | {"seconds_to_synced": ";".join(str(v) for v in result.seconds_to_synced)}
    with path.open("a", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(row)


def write_trace(path: Path, samples: Sequence[Sample]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        writer = csv.DictWriter(file, [f.name for f in fields(Sample)])
        writer.writeheader()
        for s in samples:
            writer.writerow(asdict(s))


def read_trace(path: Path) -> list[Sample]:
    def number(text: str) -> float | None:
        return None if text == "" else float(text)

    with path.open() as file:
        return [
            Sample(
                float(r["t"]),
                r["pod"],
                number(r["rss_mib"]),
                number(r["request_mib"]),
                number(r["limit_mib"]),
                int(r["restarts"]),
                int(r["oom_kills"]),
            )
            for r in csv.DictReader(file)
        ]


def _seconds(value: float | None) -> str:
    return "not synced" if value is None else f"{value:.0f}"


OURS = ("ours (default)", "ours count-only")


def own_mib_hours(result: Result) -> dict[str, float]:
    """What ours itself requests over the run, by mode, as `manifests/` ships it (`profiles.own_cost`, with
    `RSYNCS` RSyncs sharing the webhook or the controller); nothing for the rivals (their own components are
    not counted). Our service ran on the host in these runs, so this is added, not measured."""
    if result.policy not in OURS:
        return {}
    return {mode: cost.per_rsync(RSYNCS) * result.duration_s / 3600 for mode, cost in shipped().items()}


def _by_mode(own: dict[str, float], plus: float) -> str:
    if not own:
        return f"{plus:.2f}"
    return " / ".join(f"{plus + own[mode]:.2f}" for mode in ("sidecar", "cluster"))


def markdown(results: Sequence[Result]) -> str:
    lines = [
        "| shape | policy | OOM kills | restarts | to synced, s (grow 1 / grow 2 / big / prune) | reserved "
        "(MiB-h) | our own, sidecar / cluster mode (MiB-h) | reserved + our own (MiB-h) | largest limit "
        "(MiB) | peak working set (MiB) | peak above request (MiB) | run (s) |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        synced_cells = " / ".join(_seconds(v) for v in r.seconds_to_synced)
        limit = "none" if r.largest_limit_mib is None else f"{r.largest_limit_mib:.0f}"
        own = own_mib_hours(r)
        lines.append(
            f"| {r.shape} | {r.policy} | {r.oom_kills} | {r.restarts} | {synced_cells} | {r.mib_hours:.2f} | "
            f"{_by_mode(own, 0.0) if own else '-'} | {_by_mode(own, r.mib_hours)} | "
            f"{limit} | {r.peak_rss_mib:.0f} | {r.peak_above_request_mib:.0f} | {r.duration_s:.0f} |"
        )
    return "\n".join(lines) + "\n"


def net_savings(results: Sequence[Result]) -> str:
    """Per shape: the static default's reserved MiB-h less ours with our own requests (> 0: ours reserves
    less), in each mode. Ours ran with the Standard platform's rules, so it is set against both static
    defaults as run; on Autopilot ours would be raised to the Pod's minimum (`profiles.own_cost` applies
    the platform's rules)."""
    lines = [
        "| shape | vs static Standard 200Mi: sidecar / cluster mode (MiB-h) | vs static Autopilot 512Mi: "
        "sidecar / cluster mode (MiB-h) |",
        "|---|---|---|",
    ]
    for shape in dict.fromkeys(r.shape for r in results):
        by_policy = {r.policy: r for r in results if r.shape == shape}
        ours = by_policy.get("ours (default)")
        if ours is None:
            continue
        own = own_mib_hours(ours)
        cells = []
        for static in ("static Standard", "static Autopilot"):
            theirs = by_policy.get(static)
            if theirs is None:
                cells.append("not run")
                continue
            saved = (theirs.mib_hours - ours.mib_hours - own[mode] for mode in ("sidecar", "cluster"))
            cells.append(" / ".join(f"{value:+.2f}" for value in saved))
        lines.append(f"| {shape} | {' | '.join(cells)} |")
    return "\n".join(lines) + "\n" if len(lines) > 2 else ""  # nothing to set ours against


def trace_path(out: Path, shape: str, policy: str) -> Path:
    return out / "traces" / f"{shape}-{SLUGS[policy]}.csv"


def plot(results: Sequence[Result], out: Path, path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - slow to import, needed only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    shapes = list(dict.fromkeys(r.shape for r in results))
    policies = list(dict.fromkeys(r.policy for r in results))
    figure, axes = plt.subplots(
        len(policies),
        len(shapes),
        figsize=(6 * len(shapes), 2.0 * len(policies)),
        sharex="col",
        squeeze=False,
    )
    for column, shape in enumerate(shapes):
        for row, policy in enumerate(policies):
            axis = axes[row][column]
            found = [r for r in results if r.shape == shape and r.policy == policy]
            if not found or not trace_path(out, shape, policy).exists():
                axis.set_visible(False)
                continue
            trace = read_trace(trace_path(out, shape, policy))
            minutes = [s.t / 60 for s in trace]
            nan = float("nan")
            axis.plot(
                minutes,
                [s.rss_mib if s.rss_mib is not None else nan for s in trace],
                label="working set",
                color="tab:blue",
            )
            axis.plot(minutes, [s.request_mib or nan for s in trace], label="request", color="tab:green")
            axis.plot(
                minutes, [s.limit_mib or nan for s in trace], label="limit", color="tab:red", linestyle="--"
            )
            r = found[0]
            axis.set_title(
                f"{shape}, {policy}: {r.oom_kills} OOM kills, {r.restarts} restarts, {r.mib_hours:.2f} MiB-h",
                fontsize=8,
            )
            axis.set_ylabel("MiB", fontsize=8)
    axes[0][0].legend(loc="upper left", fontsize=7)
    for column in range(len(shapes)):
        axes[-1][column].set_xlabel("minutes since the RootSync was created")
    figure.suptitle(
        f"Config Sync {VERSION} reconciler under each policy (local stack, real node)", fontsize=9
    )
    figure.tight_layout()
    figure.savefig(path, dpi=80)


def run(shapes: list[str], policies: list[str], args: argparse.Namespace) -> list[Result]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    table = out / "policies-real.csv"
    if not args.resume:
        table.unlink(missing_ok=True)
    done = {(r.shape, r.policy) for r in read_results(table)}
    todo = [(s, p) for s in shapes for p in policies if (s, p) not in done]
    with running_config_sync_on_node() as stack:
        assert stack.api is not None
        install_crds(stack.api, [WIDGET_CRD])
        for shape, policy in tqdm(todo, desc="runs", unit="run"):
            result, samples = run_one(stack, shape, policy, args)
            write_trace(trace_path(out, shape, policy), samples)
            append(table, result)
    results = read_results(table)
    savings = net_savings(results)
    (out / "policies-real.md").write_text(markdown(results) + (f"\n{savings}" if savings else ""))
    plot(results, out, out / "policies-real.png")
    return results


def main() -> None:
    # SIGTERM unwinds like Ctrl-C, so the local stack is stopped and its directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(
        prog="python -m profiles.policies_real", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--shapes", default="configmaps,deployments", help="comma-separated, of: " + ", ".join(TIMELINES)
    )
    parser.add_argument(
        "--policies", default=",".join(POLICIES), help="comma-separated, of: " + ", ".join(POLICIES)
    )
    parser.add_argument("--out", type=Path, default=Path("profiles/out/policies-real"))
    parser.add_argument(
        "--hold", type=float, default=30.0, help="seconds between a synced commit and the next"
    )
    parser.add_argument("--settle", type=float, default=60.0, help="seconds after the prune is synced")
    parser.add_argument(
        "--phase-timeout", type=float, default=900.0, help="seconds a commit may take to sync"
    )
    parser.add_argument("--scale", type=float, default=1.0, help="multiplies the timeline's object counts")
    parser.add_argument("--resume", action="store_true", help="keep the CSV's rows and run the rest")
    parser.add_argument(
        "--table-only", action="store_true", help="print the tables of OUT's CSV (no run, no cluster)"
    )
    args = parser.parse_args()
    if args.table_only:
        results = read_results(args.out / "policies-real.csv")
        savings = net_savings(results)
        print(markdown(results) + (f"\n{savings}" if savings else ""))
        return
    shapes = [s for s in args.shapes.split(",") if s]
    policies = [p for p in args.policies.split(",") if p]
    if unknown := sorted(set(shapes) - set(TIMELINES)) + sorted(set(policies) - set(POLICIES)):
        parser.error(f"unknown: {unknown}")
    args.out.mkdir(parents=True, exist_ok=True)
    print(markdown(run(shapes, policies, args)))


if __name__ == "__main__":
    main()
