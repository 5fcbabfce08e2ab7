"""How big the reconciler should be for what it holds: the estimator. Pure: no I/O, no clock.

`size(load, profile)`: memory = base + per-object x objects (size-aware presets: a cost per
kind measured) + per-KiB x KiB of the objects' manifests + per-resource-type x the API surface beyond the
one measured on (assumed where not known), rounded up to a step and clamped; CPU from memory by a ratio,
with a minimum and its own rounding; then the platform's pod-level rules (GKE Autopilot minimums, 250m CPU
rounding, vCPU:GiB ratio) applied to the whole pod, with any surplus given to the reconciler container, so
the result is a fixed point of those rules. When a size changes is decided in `autoscaler.core.size_decision`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, replace
from fractions import Fraction

from autoscaler.core.quantity import format_cpu, format_memory
from autoscaler.core.resources import Resources, ceil_to
from inventory.core.counts import POD_TEMPLATE_KINDS, WORKLOAD_KINDS, Kinds, ObjectCounts


@dataclass(frozen=True)
class Load:
    """What the reconciler holds, as the model prices it: the objects, their manifests' KiB and CRD field
    path steps (where the source was read), their kinds (the source's where it was read, else the
    inventory's), and the API surface it holds (the resource types the API server serves: the reconciler
    keeps the whole OpenAPI document). None: not known (assumed)."""

    objects: int
    kib: int | None = None
    kinds: Kinds | None = None
    crd_path_steps: int | None = None
    api_resources: int | None = None
    workload_path_steps: int | None = None  # the path steps of its objects with a Pod template

    @classmethod
    def of(cls, counts: ObjectCounts, api_resources: int | None = None) -> Load | None:
        """The load of the counts' target (None: no count known)."""
        if counts.target is None:
            return None
        kinds = counts.sync_kinds if counts.source_kinds is None else counts.source_kinds
        steps = counts.source_crd_path_steps
        workload_steps = counts.source_workload_path_steps
        return cls(max(counts.target, 0), counts.target_kib, kinds, steps, api_resources, workload_steps)


@dataclass(frozen=True)
class Sizing:
    """How the reconciler's memory and CPU follow the object count (a preset)."""

    name: str
    base_mib: Fraction = Fraction(128)
    mib_per_object: Fraction = Fraction(1, 5)
    step_mib: int = 32
    min_mib: int = 128
    max_mib: int = 65536
    # CPU = base + per MiB of the memory sized + per object, rounded up to the step, at least the minimum:
    # the count-only presets follow memory; the size-aware one follows the reconciler's measured CPU.
    cpu_m_per_mib: Fraction = Fraction(1000, 1024)
    cpu_base_m: Fraction = Fraction(0)
    cpu_m_per_object: Fraction = Fraction(0)
    cpu_min_m: int = 125
    cpu_step_m: int = 1
    # limit = request x factor (rounded up to the step); None leaves that limit unset.
    memory_limit_factor: Fraction | None = Fraction(1)
    cpu_limit_factor: Fraction | None = Fraction(1)
    # Size-aware presets (zero in count-only ones): MiB per KiB of the objects' manifests, and the KiB per
    # object assumed when only a count is known (the inventory alone: cluster mode without a sidecar).
    mib_per_kib: Fraction = Fraction(0)
    assumed_kib_per_object: Fraction = Fraction(0)
    # The API surface: MiB per resource type the API server serves beyond the `fit_api_resources` the
    # preset was measured with (the reconciler holds the whole OpenAPI document), and the number assumed
    # when discovery could not be read.
    mib_per_api_resource: Fraction = Fraction(0)
    fit_api_resources: int = 0
    assumed_api_resources: int = 0
    # MiB per object of the kinds measured (size-aware presets). An object whose kind the source (or the
    # inventory) names but that has no cost of its own costs `mib_per_object_of_other_kind` (None:
    # `mib_per_object`); one whose kind is not known costs `mib_per_object`, which such a preset sets to
    # the most expensive kind measured.
    mib_per_object_of_kind: tuple[tuple[str, Fraction], ...] = ()
    mib_per_object_of_other_kind: Fraction | None = None
    # MiB per step of the field paths of the CustomResourceDefinitions the source declares (each field
    # counted at its depth), beyond the KiB term: the reconciler records every declared field's path, and
    # a CRD's schema is thousands of fields deep (long descriptions are cheap; deep properties are not).
    mib_per_crd_path_step: Fraction = Fraction(0)
    # MiB per path step of the objects with a Pod template (WORKLOAD_KINDS), beyond their kind's cost: a
    # Deployment's ReplicaSets copy its template, and what the reconciler holds of both follows the
    # template's fields. Where the steps are not known (no source read: cluster mode), each such object,
    # and each object of no known kind, is assumed to have `assumed_workload_path_steps_per_object`.
    mib_per_workload_path_step: Fraction = Fraction(0)
    assumed_workload_path_steps_per_object: Fraction = Fraction(0)
    # What this RSync's reconciler was seen to use against the model on this cluster
    # (autoscaler.core.calibration), and the model's prediction where it was seen: a factor above 1
    # multiplies the model; one below 1 lowers it by its ratio up to that prediction, and beyond it by
    # the MiB it saved there. 1 (no calibration) in every preset.
    calibration_factor: Fraction = Fraction(1)
    calibrated_at_mib: Fraction = Fraction(0)
    # What the reconciler's steady state needs once its commit is synced (its recent working set plus the
    # margin, autoscaler.core.calibration): its memory then, up or down, in place of the model's. None: a
    # transition (an apply, a prune), or not known yet.
    steady_mib: int | None = None

    def memory_mib(self, load: Load) -> int:
        """Memory for what the reconciler holds."""
        if self.steady_mib is None:
            raw = ceil_to(self.raw_mib(load), self.step_mib)
        else:  # what the objects that remain were seen to need replaces what the model says of them
            raw = ceil_to(self.steady_mib, self.step_mib)
        floor = ceil_to(max(self.min_mib, 1), self.step_mib)  # the minimum, on the grid, never zero
        return min(max(raw, floor), max(floor, self.max_mib - self.max_mib % self.step_mib))

    def raw_mib(self, load: Load) -> Fraction:
        objects = load.objects
        known_kib = self.assumed_kib_per_object * objects if load.kib is None else Fraction(load.kib)
        model = (
            self.base_mib
            + self.objects_mib(objects, load.kinds)
            + self.mib_per_kib * known_kib
            + self.mib_per_crd_path_step * (load.crd_path_steps or 0)
            + self.mib_per_workload_path_step * self.workload_path_steps(load)
            + self.mib_per_api_resource * self.extra_api_resources(load.api_resources)
        )
        return self.calibrated(model)

    def calibrated(self, model: Fraction) -> Fraction:
        """The model's MiB with this RSync's calibration: scaled up by a factor above 1; lowered by one
        below 1 in proportion up to where it was learned, and beyond it by no more MiB than there."""
        factor = self.calibration_factor
        if factor >= 1:
            return factor * model
        return model - (1 - factor) * min(model, self.calibrated_at_mib)

    def workload_path_steps(self, load: Load) -> Fraction:
        """The Pod-template path steps priced: the source's, and the assumed ones for each object of no
        known kind; where the source was not read, the assumed ones for each object of a Pod-template
        kind too."""
        kinds = load.kinds or ()
        rest = max(0, load.objects - sum(n for _, n in kinds))
        workloads = sum(n for kind, n in kinds if kind in WORKLOAD_KINDS)
        assumed = self.assumed_workload_path_steps_per_object
        if load.workload_path_steps is None:
            return assumed * (workloads + rest)
        return load.workload_path_steps + assumed * rest

    @property
    def other_kind_mib(self) -> Fraction:
        """MiB per object of a kind named (by the source or the inventory) that has no cost of its own."""
        other = self.mib_per_object_of_other_kind
        return self.mib_per_object if other is None else other

    def objects_mib(self, objects: int, kinds: Kinds | None = None) -> Fraction:
        """The per-object terms: each kind with a cost of its own at that cost, the other kinds named (by
        the source, else the inventory) at `other_kind_mib`, the rest (objects of no known kind: beyond the
        source's, such as implicit Namespaces and objects still to prune) at `mib_per_object`."""
        costs = dict(self.mib_per_object_of_kind)
        of_kinds = [(costs.get(kind, self.other_kind_mib), n) for kind, n in (kinds or ()) if n > 0]
        rest = max(0, objects - sum(n for _, n in of_kinds))
        return sum((cost * n for cost, n in of_kinds), Fraction(0)) + self.mib_per_object * rest

    def extra_api_resources(self, api_resources: int | None) -> int:
        surface = self.assumed_api_resources if api_resources is None else api_resources
        return max(0, surface - self.fit_api_resources)

    def cpu_m(self, memory_mib: int, objects: int = 0) -> int:
        raw = self.cpu_base_m + memory_mib * self.cpu_m_per_mib + self.cpu_m_per_object * objects
        return max(ceil_to(raw, self.cpu_step_m), self.cpu_min_m)


# The formula of the prototype this project grew from (DESIGN.md 2.5).
PROTOTYPE = Sizing("prototype")
# `python -m profiles.fit profiles/data/reconciler-memory-by-object-count.csv`: the least-squares line
# through the measured peaks (146.2 MiB + 0.1577 MiB per object), raised so no measured point is above
# it, plus 10 %. The prototype's 128 MiB base is below what an empty reconciler measured (146 MiB).
FITTED = Sizing("fitted", base_mib=Fraction(198), mib_per_object=Fraction(174, 1000), min_mib=198)
# `python -m profiles.size_model` (BENCHMARKS.md "The model on many-namespace platforms", the command
# there): fitted to the real Config Sync v1.22.0 reconciler (34 points to 5,000 objects) and v1.25.0's
# on the shapes of many-namespace platforms (Services, ServiceAccounts, Online Boutique's Deployments: 6
# points) and on a second template size (the Prometheus operator's Deployment: 2 points), peaks over the
# apply and the prune, by relative least squares scaled so no point is above it, plus 10 % on every term
# (BENCHMARKS.md, with its cross-validation and the points held out).
# A kind measured alone has its own cost; a kind the source names that has none costs the dearest
# measured kind without a Pod template (its bytes are the KiB term's); objects of no known kind the
# dearest kind measured.
# Without the source's bytes (cluster mode: the inventory alone, which names each object's kind) 2 KiB per
# object is assumed, more than a typical Deployment's manifest; without discovery, 500 resource types.
# Kinds that hold a Pod template as a Deployment does. A Deployment's cost is its kind and its template's
# fields, not its bytes (Online Boutique's, with four times the path steps of ours, cost 0.08 MiB more
# each; its ReplicaSets copy the template): StatefulSets, DaemonSets, ReplicaSets,
# Jobs and CronJobs, measured, cost their own, between a ConfigMap's and a Deployment's; Pods and
# PodTemplates (not measured) a Deployment's, the dearest of the class, which is what predicts a kind of
# this class when it is left out without going under (BENCHMARKS.md).
CPU_BASE_M = 32
CPU_M_PER_OBJECT = Fraction(52, 1000)
_DEPLOYMENT_MIB = Fraction(1183, 10000)  # the dearest kind measured (its template's steps apart)
_MEASURED_POD_TEMPLATE_KINDS = {
    "CronJob": Fraction(147, 2500),
    "DaemonSet": Fraction(113, 1250),
    "Job": Fraction(833, 10000),
    "ReplicaSet": Fraction(57, 625),
    "StatefulSet": Fraction(451, 5000),
}
SIZE_AWARE = Sizing(
    "size-aware",
    base_mib=Fraction(96),
    mib_per_object=_DEPLOYMENT_MIB,
    mib_per_object_of_kind=tuple(
        sorted(
            [
                ("ConfigMap", Fraction(53, 1000)),
                *(
                    (kind, _MEASURED_POD_TEMPLATE_KINDS.get(kind, _DEPLOYMENT_MIB))
                    for kind in ("Deployment", *POD_TEMPLATE_KINDS)
                ),
            ]
        )
    ),
    mib_per_object_of_other_kind=Fraction(667, 10000),
    mib_per_kib=Fraction(41, 5000),
    mib_per_workload_path_step=Fraction(2928, 10**7),
    assumed_workload_path_steps_per_object=Fraction(360),
    assumed_kib_per_object=Fraction(2),
    mib_per_api_resource=Fraction(5237, 10000),
    fit_api_resources=79,
    assumed_api_resources=500,
    mib_per_crd_path_step=Fraction(1152, 10**7),
    min_mib=96,
    # CPU from the reconciler's CPU, not its memory (`python -m profiles.reconciler_cpu` on Config Sync
    # v1.25.0's real reconciler, shapes and real repositories: BENCHMARKS.md): a line through its rate once
    # an apply is done, raised so no measured point is above it, plus 10 %. No CPU limit: an apply takes
    # what the node has free (Autopilot without bursting still sets limits equal to requests).
    cpu_m_per_mib=Fraction(0),
    cpu_base_m=Fraction(CPU_BASE_M),
    cpu_m_per_object=CPU_M_PER_OBJECT,
    cpu_min_m=10,
    cpu_limit_factor=None,
    # No memory limit, as Config Sync's Standard template and VPA: the request is sized ahead of the work
    # (the sidecar reads a commit before its apply) and follows the working set once synced, so a limit
    # could only turn a model error into an OOM kill; and what a Pod is charged for is its request. Where
    # limits must equal requests (Autopilot without bursting) the model's own margin is what there is.
    memory_limit_factor=None,
)
PRESETS: dict[str, Sizing] = {"fitted": FITTED, "prototype": PROTOTYPE, "size-aware": SIZE_AWARE}
# Size-aware: measured on the real reconciler, and it still works from the count alone (assumed KiB per
# object and API surface) where the source is not read.
DEFAULT_PRESET = SIZE_AWARE.name


@dataclass(frozen=True)
class Platform:
    """Pod-level rules a platform enforces on the sum of the containers' requests."""

    name: str
    pod_min_cpu_m: int = 0
    pod_min_memory_mib: int = 0
    pod_cpu_step_m: int = 1
    pod_max_cpu_m: int | None = None
    pod_max_memory_mib: int | None = None
    min_gib_per_vcpu: Fraction | None = None
    max_gib_per_vcpu: Fraction | None = None
    limits_equal_requests: bool = False
    # Requests assumed for the pod's other containers (git-sync + otel-agent, DESIGN.md 2.4) where they
    # are not read from the cluster, and the otel-agent's share of them: Config Sync v1.25 leaves that
    # container out of the Pod of an RSync with `spec.monitoring.enabled: false`.
    others_cpu_m: int = 0
    others_memory_mib: int = 0
    otel_agent_cpu_m: int = 0
    otel_agent_memory_mib: int = 0

    @property
    def has_pod_rules(self) -> bool:
        """Whether the pod total matters (minimums, rounding, ratios), so the other containers do."""
        assumed = ("others_cpu_m", "others_memory_mib", "otel_agent_cpu_m", "otel_agent_memory_mib")
        return self != Platform(self.name, **{name: getattr(self, name) for name in assumed})

    def assumed_others(self, monitoring: bool) -> tuple[int, int]:
        """The other containers' requests (CPU m, MiB) assumed for a Pod not read yet: git-sync and, unless
        the RSync turned monitoring off, the otel-agent."""
        if monitoring:
            return self.others_cpu_m, self.others_memory_mib
        return self.others_cpu_m - self.otel_agent_cpu_m, self.others_memory_mib - self.otel_agent_memory_mib

    def adjust(self, cpu_m: int, memory_mib: int) -> tuple[int, int]:
        """The pod total the platform would turn (cpu_m, memory_mib) into; a fixed point of its rules."""
        while True:
            new_cpu, new_memory = self._adjust_once(cpu_m, memory_mib)
            if (new_cpu, new_memory) == (cpu_m, memory_mib):
                return cpu_m, memory_mib
            cpu_m, memory_mib = new_cpu, new_memory

    def _adjust_once(self, cpu_m: int, memory_mib: int) -> tuple[int, int]:
        cpu_m, memory_mib = max(cpu_m, self.pod_min_cpu_m), max(memory_mib, self.pod_min_memory_mib)
        if self.min_gib_per_vcpu is not None:  # too little memory for the CPU: memory is raised
            memory_mib = max(memory_mib, math.ceil(Fraction(cpu_m, 1000) * self.min_gib_per_vcpu * 1024))
        if self.max_gib_per_vcpu is not None:  # too little CPU for the memory: CPU is raised
            cpu_m = max(cpu_m, math.ceil(Fraction(memory_mib, 1024) / self.max_gib_per_vcpu * 1000))
        return ceil_to(cpu_m, self.pod_cpu_step_m), memory_mib


# The platforms settings, the CLI and the README know (`PLATFORMS`): adding one is a Platform here.
STANDARD = Platform(
    "standard",
    others_cpu_m=10 + 10,
    others_memory_mib=16 + 100,
    otel_agent_cpu_m=10,
    otel_agent_memory_mib=100,
)
AUTOPILOT = Platform(
    "autopilot",
    others_cpu_m=20 + 10,
    others_memory_mib=32 + 64,
    otel_agent_cpu_m=10,
    otel_agent_memory_mib=64,
    pod_min_cpu_m=250,
    pod_min_memory_mib=512,
    pod_cpu_step_m=250,
    pod_max_cpu_m=30_000,
    pod_max_memory_mib=110 * 1024,
    min_gib_per_vcpu=Fraction(1),
    max_gib_per_vcpu=Fraction(13, 2),
    limits_equal_requests=True,
)
AUTOPILOT_BURSTING = replace(
    AUTOPILOT,
    name="autopilot-bursting",
    pod_min_cpu_m=50,
    pod_min_memory_mib=52,
    pod_cpu_step_m=1,
    limits_equal_requests=False,
)
PLATFORMS: dict[str, Platform] = {p.name: p for p in (STANDARD, AUTOPILOT, AUTOPILOT_BURSTING)}
# GKE Autopilot lets a Pod burst (limits above requests, no 250m rounding, 50m/52Mi minimums) from this
# version of the control plane on (GKE's page on bursting).
BURSTING_SINCE = (1, 30, 2, 1394000)
_GKE_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)-gke\.(\d+)")


def detected_platform(autopilot: bool, server_version: str) -> str:
    """The platform a cluster is, as Config Sync's reconciler-manager tells Autopilot (the presence of
    Autopilot's own webhook configurations): Autopilot with bursting from the GKE version that allows it,
    Autopilot's stricter rules where the version does not say (they hold on both)."""
    if not autopilot:
        return STANDARD.name
    match = _GKE_VERSION.match(server_version)
    if match is not None and tuple(int(part) for part in match.groups()) >= BURSTING_SINCE:
        return AUTOPILOT_BURSTING.name
    return AUTOPILOT.name


@dataclass(frozen=True)
class NodeRoom:
    """The allocatable CPU and memory of the cluster's largest schedulable node (by memory): no reconciler
    Pod bigger than that can run anywhere."""

    node: str
    cpu_m: int
    memory_mib: int


@dataclass(frozen=True)
class Profile:
    """A sizing preset on a platform, with the requests of the pod's other containers."""

    sizing: Sizing = PROTOTYPE
    platform: Platform = STANDARD
    others_cpu_m: int = 0
    others_memory_mib: int = 0
    node_room: NodeRoom | None = None  # the largest node (None: not read, or not ours to cap: Autopilot)

    @property
    def name(self) -> str:
        return f"{self.sizing.name}/{self.platform.name}"


class SizingError(ValueError):
    """The platform cannot fit the pod (over its maximum)."""


def size(load: Load, profile: Profile) -> Resources:
    """Reconciler container resources for what it holds under `profile`."""
    sizing, platform = profile.sizing, profile.platform
    objects = max(load.objects, 0)
    memory = sizing.memory_mib(replace(load, objects=objects))
    cpu = sizing.cpu_m(memory, objects)
    # Give the reconciler whatever the platform would add to the pod, then keep it on the memory grid;
    # repeat until the pod total is a fixed point of the platform's rules (it only ever grows).
    for _ in range(64):
        pod = (cpu + profile.others_cpu_m, memory + profile.others_memory_mib)
        adjusted = platform.adjust(*pod)
        if adjusted == pod:
            break
        cpu += adjusted[0] - pod[0]
        memory = ceil_to(memory + adjusted[1] - pod[1], sizing.step_mib)
    else:  # pragma: no cover - the loop is monotone and bounded; this guards a future rule change
        raise SizingError(f"no fixed point for {objects} objects under {profile.name}")
    if platform.pod_max_cpu_m is not None and cpu + profile.others_cpu_m > platform.pod_max_cpu_m:
        raise SizingError(f"{objects} objects need {cpu}m CPU, over the {platform.name} pod maximum")
    if (
        platform.pod_max_memory_mib is not None
        and memory + profile.others_memory_mib > platform.pod_max_memory_mib
    ):
        raise SizingError(
            f"{objects} objects need {format_memory(memory)}, over the {platform.name} pod maximum"
        )
    return Resources(
        cpu,
        memory,
        _limit(cpu, sizing.cpu_limit_factor, 1, platform),
        _limit(memory, sizing.memory_limit_factor, sizing.step_mib, platform),
    )


def _objects_terms(sizing: Sizing, objects: int, kinds: Kinds | None) -> str:
    costs = dict(sizing.mib_per_object_of_kind)
    if not costs:
        return f"{float(sizing.mib_per_object):g} x {objects}"
    named = [(kind, n) for kind, n in (kinds or ()) if kind in costs and n > 0]
    others = sum(n for kind, n in (kinds or ()) if kind not in costs and n > 0)
    rest = max(0, objects - sum(n for _, n in named) - others)
    terms = [f"{float(costs[kind]):g} x {n} {kind}" for kind, n in named]
    if others:
        terms.append(f"{float(sizing.other_kind_mib):g} x {others} of other kinds")
    return " + ".join([*terms, f"{float(sizing.mib_per_object):g} x {rest} of no known kind"])


def _cpu_terms(sizing: Sizing, memory: int, objects: int) -> str:
    terms = [
        (sizing.cpu_base_m, f"{float(sizing.cpu_base_m):g}"),
        (sizing.cpu_m_per_mib, f"{memory} x {float(sizing.cpu_m_per_mib):g}"),
        (sizing.cpu_m_per_object, f"{float(sizing.cpu_m_per_object):g} x {objects}"),
    ]
    return " + ".join(text for value, text in terms if value) or "0"


def fitted(resources: Resources, profile: Profile) -> tuple[Resources, str | None]:
    """The size capped to what the largest node holds beside the Pod's other containers, and how (None:
    it fits). Not on a platform with pod rules (Autopilot provisions a node for the Pod; its maximum is
    `pod_max_*`), nor where the node leaves no room at all (something is off: the size stands)."""
    room = profile.node_room
    if room is None or profile.platform.has_pod_rules:
        return resources, None
    others = (profile.others_cpu_m, profile.others_memory_mib)
    others_cpu, others_mib = others if any(others) else profile.platform.assumed_others(monitoring=True)
    step = profile.sizing.step_mib
    cpu_room, memory_room = room.cpu_m - others_cpu, (room.memory_mib - others_mib) // step * step
    if cpu_room <= 0 or memory_room <= 0:
        return resources, None
    if resources.cpu_request_m <= cpu_room and resources.memory_request_mib <= memory_room:
        return resources, None
    cpu, memory = min(resources.cpu_request_m, cpu_room), min(resources.memory_request_mib, memory_room)
    capped = Resources(
        cpu,
        memory,
        None if resources.cpu_limit_m is None else max(cpu, min(resources.cpu_limit_m, room.cpu_m)),
        None
        if resources.memory_limit_mib is None
        else max(memory, min(resources.memory_limit_mib, room.memory_mib // step * step)),
    )
    why = (
        f"capped to what node {room.node} holds beside the Pod's other containers ({format_cpu(cpu_room)}, "
        f"{format_memory(memory_room)}; the cluster's largest): {capped}"
    )
    return capped, why


def _limit(request: int, factor: Fraction | None, step: int, platform: Platform) -> int | None:
    if platform.limits_equal_requests:
        return request
    return None if factor is None else max(request, ceil_to(request * factor, step))


def _cpu_and_memory(cpu_m: int, memory_mib: int) -> str:
    return f"{format_cpu(cpu_m)} / {format_memory(memory_mib)}"


def explain(load: Load, profile: Profile) -> str:
    """The resources for what the reconciler holds under `profile`, with the arithmetic."""
    sizing, platform = profile.sizing, profile.platform
    objects, kib, kinds, crd_path_steps = load.objects, load.kib, load.kinds, load.crd_path_steps
    base, step = float(sizing.base_mib), sizing.step_mib
    raw = float(sizing.raw_mib(load))
    memory = sizing.memory_mib(load)
    cpu = sizing.cpu_m(memory, objects)
    result = size(load, profile)
    terms = f"{base:g} + {_objects_terms(sizing, objects, kinds)}"
    if sizing.mib_per_kib:
        assumed = f"{float(sizing.assumed_kib_per_object):g} x {objects} assumed" if kib is None else kib
        terms += f" + {float(sizing.mib_per_kib):g} x {assumed} KiB"
    if sizing.mib_per_crd_path_step and crd_path_steps:
        terms += f" + {float(sizing.mib_per_crd_path_step):g} x {crd_path_steps} path steps of CRD fields"
    workload_steps = sizing.workload_path_steps(load)
    if sizing.mib_per_workload_path_step and workload_steps:
        known = load.workload_path_steps
        assumed = " (assumed)" if known is None else "" if known == workload_steps else " (assumed in part)"
        per = float(sizing.mib_per_workload_path_step)
        terms += f" + {per:g} x {float(workload_steps):g} path steps of Pod templates{assumed}"
    if sizing.mib_per_api_resource:
        extra = sizing.extra_api_resources(load.api_resources)
        served = "assumed" if load.api_resources is None else "served"
        per = float(sizing.mib_per_api_resource)
        terms += f" + {per:g} x {extra} API resources beyond {sizing.fit_api_resources} ({served})"
    factor = sizing.calibration_factor
    if factor > 1:
        terms = f"{float(factor):.3g} x ({terms}) calibrated on this cluster"
    elif factor < 1:
        at = float(sizing.calibrated_at_mib)
        terms = f"({terms}) less {float(1 - factor):.3g} x its first {at:g} MiB, calibrated on this cluster"
    lines = [
        f"profile {profile.name}: {objects} objects" + ("" if kib is None else f", {kib} KiB of manifests"),
        f"memory = ceil(({terms}) / {step}) x {step}"
        f" = ceil({raw:g} / {step}) x {step} -> {format_memory(memory)}"
        f" (min {format_memory(sizing.min_mib)}, max {format_memory(sizing.max_mib)})",
        f"cpu    = max(ceil(({_cpu_terms(sizing, memory, objects)}) / {sizing.cpu_step_m})"
        f" x {sizing.cpu_step_m}, {sizing.cpu_min_m}) -> {format_cpu(cpu)}",
    ]
    if (result.cpu_request_m, result.memory_request_mib) != (cpu, memory):
        others = (profile.others_cpu_m, profile.others_memory_mib)
        before = _cpu_and_memory(cpu + others[0], memory + others[1])
        after = _cpu_and_memory(result.cpu_request_m + others[0], result.memory_request_mib + others[1])
        lines.append(
            f"{platform.name}: the pod ({before} with {_cpu_and_memory(*others)} of other containers) "
            f"becomes {after}; the surplus goes to the reconciler"
        )
    lines.append(f"reconciler: {result}")
    return "\n".join(lines)
