"""What the runs on the real node share (`profiles.policies_real`, `profiles.many_rsyncs`): the sizing
policies and how each is installed, the per-second sampler of reconciler Pods and its traces, what is
computed from a trace (pure), our own components' and VPA's cost, the CSV writer and the run's provenance.

Moved here from `profiles.policies_real` unchanged but for what names the RSyncs: the sampler samples the
RSyncs it is given (`Sampler.keys`), a VerticalPodAutoscaler is written for the RSync it is given
(`vpa_object`), and the installs take the RSyncs to narrow to, so one run can cover one RSync per policy
(policies_real) or every RSync under one policy (many_rsyncs).
"""

from __future__ import annotations

import contextlib
import csv
import itertools
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, TypeVar

import orjson

from autoscaler.core import quantity
from autoscaler.kube.platform import AUTOPILOT_WEBHOOKS
from controlplane import kubernetes_build, vpa
from controlplane.autoscaler_install import (
    SIDECAR_CONTAINER,
    WEBHOOK_NAME,
)
from controlplane.configsync_build import VERSION
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.kubelet import NODE_NAME
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi

JSON = dict[str, Any]
MiB = 1 << 20


# ----- the policies -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Policy:
    slug: str  # the RootSync's name and the objects' namespace prefix
    override: JSON | None = None  # the RootSync's spec.override at creation
    vpa_recommender: str | None = None  # a VPA object naming this recommender ("default": none named)


TUNED = "tuned"
OURS_AS_RECOMMENDER = "objcount"  # the `vpa` target's default recommender name
# The recommender flags a user tuning VPA for Config Sync's reconciler would set (read from v1.8.1's
# `pkg/recommender/main.go` and `logic/`): start from 64 MiB rather than 250 (the reconciler of a small
# repository uses less), and let memory peaks and CPU usage decay in an hour rather than a day, so a prune
# is followed within the hour (the "hours compressed" only by flags a user could set). Everything else as
# released.
TUNED_RECOMMENDER = (
    f"--recommender-name={TUNED}",
    "--pod-recommendation-min-memory-mb=64",
    "--memory-histogram-decay-half-life=1h",
    "--cpu-histogram-decay-half-life=1h",
    "--memory-aggregation-interval=1h",
)
# The updater is one for the cluster, so its flag is set for both VPA policies: it lets the updater apply
# a recommendation the Pod's request is within the bounds of (by more than 10 %) once the Pod has lived 2
# minutes, not 12 hours: resizing in place costs no restart. It changes nothing for "VPA as deployed",
# whose object leaves `minReplicas` to the updater's `--min-replicas` (2): the updater never acts on its
# one-replica reconciler, as with the released flags.
TUNED_UPDATER = ("--in-recommendation-bounds-eviction-lifetime-threshold=2m",)
AUTOPILOT_OVERRIDE = {
    "resources": [{"containerName": "reconciler", "memoryRequest": "512Mi", "memoryLimit": "512Mi"}]
}
# A cluster played as GKE Autopilot (`mark_autopilot`): Config Sync then gives every reconciler its own
# Autopilot defaults (pkg/reconcilermanager/controllers/reconciler_container_resources.go: the reconciler
# 700m / 512Mi, git-sync 20m / 32Mi, the otel-agent 10m / 64Mi, each limit equal to its request). The
# reconciler's CPU of the Pods not sized by ours is overridden to 250m (limit too): four reconciler Pods
# at 700m do not fit with the stack on this 2-core node. Their memory stays Config Sync's default.
AUTOPILOT_CPU_OVERRIDE = {
    "resources": [{"containerName": "reconciler", "cpuRequest": "250m", "cpuLimit": "250m"}]
}
POLICIES: dict[str, Policy] = {
    "ours, sidecar": Policy("ours-sidecar"),
    "ours, cluster mode": Policy("ours-cluster"),
    "VPA as deployed": Policy("vpa", vpa_recommender="default"),
    "VPA tuned": Policy("vpa-tuned", vpa_recommender=TUNED),
    "VPA with our recommender": Policy("vpa-ours", vpa_recommender=OURS_AS_RECOMMENDER),
    "static Standard": Policy("standard"),
    "static Autopilot": Policy("autopilot", override=AUTOPILOT_OVERRIDE),
}
CLUSTER_WEBHOOK = "-cluster"  # the suffix of the cluster install's webhook objects here
VPA_CONTROLLER = "objcount-autoscaler-vpa"


def vpa_object(policy: Policy, key: RSyncKey) -> JSON:
    """The VerticalPodAutoscaler a user writes for a Config Sync reconciler: aimed at its Deployment,
    in place where the kubelet can, the reconciler container only: `key`'s reconciler under `policy`."""
    name = reconciler_name(key)
    spec: JSON = {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "updatePolicy": {"updateMode": "InPlaceOrRecreate"},
        "resourcePolicy": {
            "containerPolicies": [
                # VPA's default, said: a limit (Autopilot's, equal to the request) keeps its ratio.
                {
                    "containerName": "reconciler",
                    "controlledResources": ["cpu", "memory"],
                    "controlledValues": "RequestsAndLimits",
                },
                {"containerName": "*", "mode": "Off"},
            ]
        },
    }
    if policy.vpa_recommender != "default":
        spec["updatePolicy"]["minReplicas"] = 1
        spec["recommenders"] = [{"name": policy.vpa_recommender}]
    return {
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": spec,
    }


def install_vpa_for(cs: NodeConfigSync, recommenders: set[str]) -> None:
    """VPA as released, for the policies naming `recommenders` (none: nothing installed); with the tuned
    recommender beside the default one, and the updater's flag `TUNED_UPDATER`, when one is tuned."""
    if not recommenders:
        return
    tuned = TUNED in recommenders
    vpa.install_vpa(cs.stack, updater_args=TUNED_UPDATER if tuned else ())
    if tuned:
        vpa.add_recommender(cs.stack, TUNED, TUNED_RECOMMENDER)


def mark_autopilot(api: kubeapi.KubeClient) -> None:
    """PLAYED BY US: the cluster told as GKE Autopilot, the way Config Sync's reconciler-manager and our
    service tell it (a mutating webhook configuration of Autopilot's by name; here one with no webhook,
    so nothing is called): Config Sync applies its Autopilot defaults, ours its Autopilot rules. What
    Autopilot's own admission does to every Pod (its minimums, its 250m rounding, limits set equal to
    requests) is not played: each Pod runs as its writers leave it. Before any RSync: the
    reconciler-manager reads it once, at its first reconcile."""
    api.create(
        kubeapi.MUTATING_WEBHOOKS,
        None,
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": AUTOPILOT_WEBHOOKS[0]},
            "webhooks": [],
        },
    )


# ----- what is measured (pure) --------------------------------------------------------------------------
@dataclass(frozen=True)
class Sample:
    t: float  # seconds since the timeline began
    pod: str  # the reconciler Pod's name; "" while there is none
    container: str  # the reconciler container's ID; "" while it has none
    working_set_mib: float | None
    request_mib: float | None  # as the kubelet applied it (status), else as specified
    limit_mib: float | None
    restarts: int  # the reconciler container's restartCount in this Pod
    oom_kills: int  # OOM kills of the reconciler container seen in this Pod so far
    resize: str  # the Pod's resize condition: "", "Deferred", "Infeasible", "InProgress"

    @property
    def reserved_mib(self) -> float:
        """What the Pod holds for the reconciler: its limit, else its request."""
        return self.limit_mib or self.request_mib or 0.0


class Timed(Protocol):
    """A sample at its time, in seconds of the run's clock."""

    @property
    def t(self) -> float: ...


TimedT = TypeVar("TimedT", bound=Timed)


def integral_mib_hours(samples: Sequence[TimedT], value: Callable[[TimedT], float]) -> float:
    """`value` integrated over time, each sample's value held until the next sample."""
    return sum(value(a) * (b.t - a.t) for a, b in itertools.pairwise(samples)) / 3600


def new_pods(samples: Sequence[Sample]) -> int:
    """Reconciler Pods after the first (rollouts and evictions)."""
    return max(len({s.pod for s in samples if s.pod}) - 1, 0)


def restarts_and_kills(samples: Sequence[Sample]) -> tuple[int, int]:
    """Container restarts and OOM kills, from the highest values seen per Pod."""
    restarts: dict[str, int] = {}
    kills: dict[str, int] = {}
    for s in samples:
        if s.pod:
            restarts[s.pod] = max(restarts.get(s.pod, 0), s.restarts)
            kills[s.pod] = max(kills.get(s.pod, 0), s.oom_kills)
    return sum(restarts.values()), sum(kills.values())


def in_place_resizes(samples: Sequence[Sample]) -> int:
    """Changes of the applied request or limit of one running container (same Pod, same container)."""
    running = [s for s in samples if s.container and s.request_mib is not None]
    return sum(
        1
        for a, b in itertools.pairwise(running)
        if a.container == b.container and (a.request_mib, a.limit_mib) != (b.request_mib, b.limit_mib)
    )


def resize_episodes(samples: Sequence[Sample], state: str) -> int:
    """How often the Pod's resize condition entered `state` (Deferred, Infeasible)."""
    return sum(1 for a, b in itertools.pairwise(samples) if b.resize == state and a.resize != state)


def peak_above_request(samples: Sequence[Sample]) -> float:
    """How far the working set went above the request (what a policy without a limit lets it take)."""
    above = [
        s.working_set_mib - s.request_mib
        for s in samples
        if s.working_set_mib is not None and s.request_mib is not None
    ]
    return max([0.0, *above])


# ----- our own components and VPA's, per policy -------------------------------------------------------
# Which policy a component of ours or of VPA's serves, by its Pod's name prefix (and for our sidecar, its
# container in the reconciler Pod). VPA's updater and admission-controller serve both VPA policies, and
# the default recommender only the deployed one: shared components are listed under each policy they
# serve, whole (a cluster runs them once however many RSyncs they serve).
COMPONENTS: dict[str, tuple[str, ...]] = {
    "objcount-webhook-": ("ours, sidecar",),
    f"objcount-webhook{CLUSTER_WEBHOOK}-": ("ours, cluster mode",),
    f"{VPA_CONTROLLER}-": ("VPA with our recommender",),
    "objcount-autoscaler-": ("ours, cluster mode",),
    f"vpa-recommender-{TUNED}-": ("VPA tuned",),
    "vpa-recommender-": ("VPA as deployed",),
    "vpa-updater-": ("VPA as deployed", "VPA tuned", "VPA with our recommender"),
    "vpa-admission-controller-": ("VPA as deployed", "VPA tuned", "VPA with our recommender"),
}


def component_of(pod: str, container: str) -> str | None:
    """The component a container is, by the longest Pod name prefix that matches; our sidecar by its
    container's name."""
    if container == SIDECAR_CONTAINER:
        return "objcount sidecar"
    matches = [prefix for prefix in COMPONENTS if pod.startswith(prefix)]
    return max(matches, key=len).rstrip("-") if matches else None


def policies_served(component: str) -> tuple[str, ...]:
    if component == "objcount sidecar":
        return ("ours, sidecar",)
    return COMPONENTS[f"{component}-"]


@dataclass
class OwnSample:
    t: float
    component: str
    pod: str
    working_set_mib: float
    request_mib: float
    cpu_s: float | None = None  # the container's CPU time so far (the kubelet's summary); None: not read


def own_costs(samples: Sequence[OwnSample]) -> dict[str, tuple[float, float]]:
    """Per component: its requests and its working set integrated over the run (MiB-h), summed over its
    Pods (each Pod's value held until its next sample)."""
    by_pod: dict[tuple[str, str], list[OwnSample]] = {}
    for s in samples:
        by_pod.setdefault((s.component, s.pod), []).append(s)
    costs: dict[str, tuple[float, float]] = {}
    for (component, _), series in by_pod.items():
        requested = sum(a.request_mib * (b.t - a.t) for a, b in itertools.pairwise(series)) / 3600
        used = sum(a.working_set_mib * (b.t - a.t) for a, b in itertools.pairwise(series)) / 3600
        before = costs.get(component, (0.0, 0.0))
        costs[component] = (before[0] + requested, before[1] + used)
    return costs


def own_table(samples: Sequence[OwnSample]) -> str:
    """Per component of ours (or VPA's): its Pods, requests and working set over the run (MiB-h), its
    largest working set, and the CPU time its containers used from their first sample to their last
    (a counter that went back, a container restarted, counts from zero again; "-" where not read)."""
    costs = own_costs(samples)
    pods: dict[str, set[str]] = {}
    peak: dict[str, float] = {}
    cpu: dict[str, float] = {}
    by_pod: dict[tuple[str, str], list[float]] = {}
    for s in samples:
        pods.setdefault(s.component, set()).add(s.pod)
        peak[s.component] = max(peak.get(s.component, 0.0), s.working_set_mib)
        if s.cpu_s is not None:
            by_pod.setdefault((s.component, s.pod), []).append(s.cpu_s)
    for (component, _), series in by_pod.items():
        spent = sum(b - a if b >= a else b for a, b in itertools.pairwise(series))
        cpu[component] = cpu.get(component, 0.0) + spent
    lines = [
        "| component | Pods | requested / working set (MiB-h) | largest working set (MiB) | CPU (s) |",
        "|---|---|---|---|---|",
    ]
    for component in sorted(costs):
        (requested, used), used_cpu = costs[component], cpu.get(component)
        lines.append(
            f"| {component} | {len(pods[component])} | {requested:.2f} / {used:.2f} | "
            f"{peak[component]:.0f} | {'-' if used_cpu is None else f'{used_cpu:.1f}'} |"
        )
    return "\n".join(lines) + "\n"


def own_cost_of(policy: str, costs: dict[str, tuple[float, float]]) -> tuple[float, float]:
    served = [cost for component, cost in costs.items() if policy in policies_served(component)]
    return sum(c[0] for c in served), sum(c[1] for c in served)


# ----- the sampler ------------------------------------------------------------------------------------
# ----- the run against the stack ------------------------------------------------------------------------
def _mib(value: object) -> float | None:
    return None if not value else float(quantity.parse(str(value))) / MiB


def resize_state(pod: JSON) -> str:
    """The Pod's resize condition as the kubelet reports it (PodResizePending with reason Deferred or
    Infeasible, PodResizeInProgress: the same on 1.34 and 1.37); "" when there is none."""
    for condition in (pod.get("status") or {}).get("conditions") or []:
        if condition.get("status") != "True":
            continue
        if condition.get("type") == "PodResizePending":
            return str(condition.get("reason") or "Pending")
        if condition.get("type") == "PodResizeInProgress":
            return "InProgress"
    return ""


@dataclass
class Sampler:
    """Every second, the reconciler Pod of each RSync of `keys`; every 10 s, the kubelet's summary of the
    rest. `samples` and `keys` are by the same names (a policy's in policies_real, an RSync's in
    many_rsyncs)."""

    cs: NodeConfigSync
    keys: dict[str, RSyncKey]
    began: float = field(default_factory=time.monotonic)
    samples: dict[str, list[Sample]] = field(default_factory=dict)
    own: list[OwnSample] = field(default_factory=list)
    killed: dict[str, set[str]] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event)
    committed: list[tuple[str, float]] = field(default_factory=list)  # each phase and when, on its clock

    @property
    def api(self) -> kubeapi.KubeClient:
        assert self.cs.api is not None
        return self.cs.api

    def now(self) -> float:
        return time.monotonic() - self.began

    def run(self) -> None:
        ticks = 0
        while not self.stopping.wait(1.0):
            try:
                self.tick(orjson.loads(self.api.list_page(kubeapi.POD, NAMESPACE))["items"], ticks)
            except (kubeapi.ApiError, OSError, LookupError, ValueError) as error:  # note it, sample again
                print(f"sampling failed: {error}", file=sys.stderr)
            ticks += 1

    def tick(self, pods: list[JSON], ticks: int) -> None:
        """One second's samples from the Pods of Config Sync's namespace (a subclass reads more here)."""
        for name, samples in self.samples.items():
            samples.append(self.reconciler_sample(pods, self.keys[name]))
        if ticks % 10 == 0:
            self.own_sample(pods)

    def reconciler_sample(self, pods: list[JSON], key: RSyncKey) -> Sample:
        t = round(self.now(), 2)
        deployment = reconciler_name(key)
        live = [
            p
            for p in pods
            if (p["metadata"].get("labels") or {}).get("configsync.gke.io/deployment-name") == deployment
            and not p["metadata"].get("deletionTimestamp")
        ]
        if not live:
            return Sample(t, "", "", None, None, None, 0, 0, "")
        pod = max(live, key=lambda p: p["metadata"].get("creationTimestamp", ""))
        name = pod["metadata"]["name"]
        spec = next(c for c in pod["spec"]["containers"] if c["name"] == "reconciler").get("resources") or {}
        statuses: list[JSON] = (pod.get("status") or {}).get("containerStatuses") or []
        status: JSON = next((s for s in statuses if s["name"] == "reconciler"), {})
        applied = status.get("resources") or spec
        terminated = (status.get("lastState") or {}).get("terminated") or {}
        kills = self.killed.setdefault(name, set())
        if terminated.get("reason") == "OOMKilled":
            kills.add(str(terminated.get("containerID")))
        working_set = None
        container = ""
        if "running" in (status.get("state") or {}):
            container = str(status.get("containerID") or "")
            with contextlib.suppress(OSError, LookupError):
                working_set = self.cs.stack.container_memory(container).working_set / MiB
        return Sample(
            t,
            name,
            container,
            working_set,
            _mib((applied.get("requests") or {}).get("memory")),
            _mib((applied.get("limits") or {}).get("memory")),
            int(status.get("restartCount") or 0),
            len(kills),
            resize_state(pod),
        )

    def own_sample(self, pods: list[JSON]) -> None:
        t = round(self.now(), 2)
        requests: dict[tuple[str, str], float] = {}
        for pod in pods + self.vpa_pods():
            for container in pod["spec"]["containers"]:
                memory = ((container.get("resources") or {}).get("requests") or {}).get("memory")
                requests[(pod["metadata"]["name"], container["name"])] = _mib(memory) or 0.0
        summary = self.api.request_json("GET", f"/api/v1/nodes/{NODE_NAME}/proxy/stats/summary")
        for pod in summary.get("pods") or []:
            for container in pod.get("containers") or []:
                name = pod["podRef"]["name"]
                component = component_of(name, container["name"])
                working_set = (container.get("memory") or {}).get("workingSetBytes")
                if component is None or working_set is None:
                    continue
                request = requests.get((name, container["name"]), 0.0)
                cpu = (container.get("cpu") or {}).get("usageCoreNanoSeconds")
                cpu_s = None if cpu is None else cpu / 1e9
                self.own.append(OwnSample(t, component, name, working_set / MiB, request, cpu_s))

    def vpa_pods(self) -> list[JSON]:
        items: list[JSON] = orjson.loads(self.api.list_page(kubeapi.POD, vpa.NAMESPACE))["items"]
        return items


# ----- results ------------------------------------------------------------------------------------------
def write_rows(path: Path, rows: Sequence[object]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as file:
        writer: csv.DictWriter[str] | None = None
        for row in rows:
            values = asdict(row)  # type: ignore[call-overload]
            values = {k: ";".join(map(str, v)) if isinstance(v, list) else v for k, v in values.items()}
            if writer is None:
                writer = csv.DictWriter(file, list(values))
                writer.writeheader()
            writer.writerow(values)


def read_trace(path: Path) -> list[Sample]:
    def number(text: str) -> float | None:
        return None if text in ("", "None") else float(text)

    with path.open() as file:
        return [
            Sample(
                float(r["t"]),
                r["pod"],
                r["container"],
                number(r["working_set_mib"]),
                number(r["request_mib"]),
                number(r["limit_mib"]),
                int(r["restarts"]),
                int(r["oom_kills"]),
                r["resize"],
            )
            for r in csv.DictReader(file)
        ]


def save_component_logs(cs: NodeConfigSync, out: Path, sidecars: str) -> None:
    """The log tails of ours and VPA's components, kept with the results (what they decided and why); our
    sidecars' from the reconciler Pods of the label selector `sidecars`."""
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    for namespace, selector in (
        (NAMESPACE, "app.kubernetes.io/name=objcount-autoscaler"),
        (NAMESPACE, f"app.kubernetes.io/name={WEBHOOK_NAME}{CLUSTER_WEBHOOK}"),
        (NAMESPACE, f"app.kubernetes.io/name={VPA_CONTROLLER}"),
        (
            vpa.NAMESPACE,
            f"app in (vpa-recommender,vpa-recommender-{TUNED},vpa-updater,vpa-admission-controller)",
        ),
    ):
        result = cs.stack.kubectl(
            "logs", "-n", namespace, "-l", selector, "--all-containers", "--prefix", "--tail=-1", check=False
        )
        name = selector.split("=")[-1].split(" ")[0].strip("(")
        (logs / f"{name}.log").write_text(result.stdout + result.stderr)
    # Our sidecar's own log (each decision of the sidecar policy), from the reconciler Pods it is in.
    result = cs.stack.kubectl(
        "logs", "-n", NAMESPACE, "-l", sidecars, "-c", SIDECAR_CONTAINER, "--prefix", "--tail=-1", check=False
    )
    # Not named after the container: the cluster-mode controller's log is objcount-autoscaler.log.
    (logs / "objcount-sidecar.log").write_text(result.stdout + result.stderr)
    # Why a reconciler Pod waited to start (a small node whose CPU the Pods' requests hold), in the
    # scheduler's words, and what the node had allocated at the end.
    for name, command in (
        ("scheduling.txt", ("get", "events", "-A", "--field-selector=reason=FailedScheduling", "-o", "wide")),
        ("node.txt", ("describe", "nodes")),
    ):
        result = cs.stack.kubectl(*command, check=False)
        (logs / name).write_text(result.stdout + result.stderr)


def now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def provenance() -> JSON:
    """Where and from what a run starts: the time, the checkout's commit, the machine, the releases."""
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    return {
        "started": now(),
        "commit": commit.stdout.strip(),
        "machine": f"{os.uname().machine}, {os.cpu_count()} cores",
        "kubernetes": kubernetes_build.VERSION,
        "config_sync": VERSION,
        "vpa": vpa.VERSION,
    }
