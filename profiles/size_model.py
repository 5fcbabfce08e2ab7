"""The size-aware model: the reconciler's memory from its objects and their bytes, fitted to the real
reconciler's measurements (`profiles.reconciler_memory`) and checked against every one of them.

    python -m profiles.size_model profiles/data/reconciler-memory-v1.22.0-local.csv \
        profiles/data/reconciler-memory-v1.22.0-real-node.csv [--step 32] [--safety 0.10] [--held-out CSV ...]
        [--peak larger|cgroup]

Method: least squares `peak = a + sum(b_kind x objects of that kind) + c x KiB` through the points
measured with the local stack's API surface (no `--extra-crds`), weighted so that each point's *relative*
error counts (a reconciler of 1 GiB misses by more MiB than one of 100 MiB; the bound it is judged by is
relative too), where `peak` is the reconciler's peak over the apply and the prune (the prune can cost
more than the apply; `--peak`: the larger of VmHWM and the cgroup's, or the cgroup's alone), the
kinds those of the shape's manifests as our source counter reads them; a term that comes out negative
is dropped. A kind gets a cost of its own only where a shape of that kind alone
was measured (a mix's kinds always come in the same proportion: least squares cannot tell them apart);
a kind with a Pod template not measured costs the dearest of those measured; any other kind the source
names costs the dearest measured kind without a Pod template; an object of no known kind (the inventory
alone) the most expensive kind measured. Then the plane is scaled so that no point is above it (`x
max(peak / plane)`: a relative margin, which does not lift a small repository by the largest one's
miss), and a relative safety on every term (`--safety`). Rounding up to the step only adds headroom:
under the printed preset every measured point is at or below its memory (checked before printing). The
points with more CRDs installed give the cost of the API surface, MiB per resource type served beyond
the local stack's (each CRD adds one), as the steepest rise from the local surface.

The report, per point: the fit's error (the plane, plus the surface's rise for the wider surfaces), the
size-aware preset's memory and the count-only default's, and each one's over-provisioning (memory /
peak). Then its cross-validation: the preset fitted without each shape, and without each shape's
largest count, against the points left out; and, with `--held-out`, the preset against measurements it
was not fitted on. The bound a left-out point is checked against: at or above its peak, at most 1.5 x
peak + one step.
"""

from __future__ import annotations

import argparse
import csv
import functools
import math
from dataclasses import dataclass, replace
from fractions import Fraction
from pathlib import Path

import orjson

from autoscaler.core.sizing import FITTED, SIZE_AWARE, Load, Sizing
from inventory.core.counts import POD_TEMPLATE_KINDS, WORKLOAD_KINDS, Kinds, kinds_of
from inventory.core.manifest_reader import FileRead, read_manifest
from inventory.source.source_count import kib_of
from profiles import fit
from profiles.reconciler_memory import manifests


@dataclass(frozen=True)
class Measured:
    shape: str
    objects: int
    kib: int  # of the commit's manifests, rounded up as the service records them
    api_resources: int  # resource types its discovery served
    extra_crds: int
    peak_mib: float  # over the apply and the prune, the larger of VmHWM and the cgroup's peak (or: PEAKS)
    recorded_kinds: Kinds | None = None  # a repository's, as measured (a shape's follow from it)
    crd_path_steps: int = 0  # the source's CRDs' fields, each counted at its depth
    run: int = 1
    cgroup_peak_mib: float | None = None  # the container cgroup's peak alone (what the kernel limits)
    # A repository's Pod-template path steps as its source counter counts them (a shape's follow from it).
    recorded_workload_path_steps: int | None = None
    resident_peak_mib: float | None = None  # the process's own (VmHWM) over the apply and the prune

    @property
    def kinds(self) -> Kinds:
        return (
            self.recorded_kinds if self.recorded_kinds is not None else shape_kinds(self.shape, self.objects)
        )

    @property
    def workload_path_steps(self) -> int:
        if self.recorded_workload_path_steps is not None:
            return self.recorded_workload_path_steps
        if self.recorded_kinds is not None:
            raise ValueError(
                f"{self.shape}: no workload_path_steps recorded (profiles.real_repositories --recount)"
            )
        return shape_read(self.shape, self.objects).workload_path_steps

    def load(self) -> Load:
        return Load(
            self.objects,
            self.kib,
            self.kinds,
            self.crd_path_steps,
            self.api_resources,
            self.workload_path_steps,
        )

    def features(self) -> dict[str, float]:
        return {
            "objects": self.objects,
            "kib": self.kib,
            "crd_path_steps": self.crd_path_steps,
            "workload_path_steps": self.workload_path_steps,
            "api_resources": self.api_resources,
            **{f"kind:{kind}": n for kind, n in self.kinds},
        }


@functools.cache
def shape_read(shape: str, objects: int) -> FileRead:
    """A shape's manifests as the service's source counter reads them (once per shape and count: the
    manifests run to megabytes)."""
    return read_manifest(manifests(shape, objects, "ns").encode(), f"{shape}.yaml")


def shape_kinds(shape: str, objects: int) -> Kinds:
    """The objects by kind of a shape's manifests, as the service's source counter reads them."""
    return kinds_of(shape_read(shape, objects).kinds)


# What a point's peak is: the larger of VmHWM and the container cgroup's peak (the shipped preset's), or
# the cgroup's alone (what a memory limit kills at; points without it left out). VmHWM counts the
# reconciler binary's resident file pages, which the cgroup is not charged for where the image's unpacking
# cached them first: 35 to 42 MiB above the cgroup's peak in every point measured with both (98).
PEAKS = ("larger", "cgroup")


def read_measured(path: Path, peak: str = "larger") -> list[Measured]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    columns = (
        ("peak_rss_mib", "peak_with_prune_mib", "cgroup_peak_mib")
        if peak == "larger"
        else ("cgroup_peak_mib",)
    )
    return [
        Measured(
            row["shape"],
            int(row["objects"]),
            kib_of(int(row["source_bytes"])),
            int(row["api_resources"]),
            int(row["extra_crds"]),
            max(float(row[c]) for c in columns if row.get(c)),
            kinds_of(orjson.loads(row["kinds"])) if row.get("kinds") else None,
            int(row.get("crd_path_steps") or 0),
            int(row.get("run") or 1),
            float(row["cgroup_peak_mib"]) if row.get("cgroup_peak_mib") else None,
            int(row["workload_path_steps"]) if row.get("workload_path_steps") else None,
            max(float(row[c]) for c in ("peak_rss_mib", "peak_with_prune_mib") if row.get(c)),
        )
        for row in csv.DictReader(lines)
        if any(row.get(c) for c in columns)
    ]


def linear_fit(points: list[Measured], features: tuple[str, ...]) -> dict[str, float]:
    """Least-squares `peak = base + sum(coefficient x feature)`, minimising the relative error (each row
    divided by its peak). A feature that never varies in the points cannot be told from the base and gets
    0; one whose coefficient comes out negative is dropped and the rest refitted: more objects, bytes or
    CRDs never need less memory."""
    import numpy  # noqa: PLC0415 - the [tools] extra

    rows = [p.features() for p in points]
    varying = [f for f in features if len({row.get(f, 0.0) for row in rows}) > 1]
    peaks = numpy.array([p.peak_mib for p in points])
    while True:
        matrix = numpy.array([[1.0, *(float(row.get(f, 0.0)) for f in varying)] for row in rows])
        solution = numpy.linalg.lstsq(matrix / peaks[:, None], numpy.ones(len(points)), rcond=None)[0]
        coefficients = dict(zip(("base", *varying), (float(c) for c in solution), strict=True))
        negative = [f for f in varying if coefficients[f] < 0]
        if not negative:
            return {"base": coefficients["base"], **{f: coefficients.get(f, 0.0) for f in features}}
        varying.remove(min(negative, key=lambda f: coefficients[f]))


def predict(coefficients: dict[str, float], point: Measured) -> float:
    features = point.features()
    return coefficients["base"] + sum(
        c * features.get(f, 0.0) for f, c in coefficients.items() if f != "base"
    )


def base_features(points: list[Measured]) -> tuple[str, ...]:
    """The plane's features: a count per kind measured, the KiB, and the Pod templates' path steps."""
    kinds = sorted({f for p in points for f in p.features() if f.startswith("kind:")})
    return (*kinds, "kib", "workload_path_steps")


def local_surface(points: list[Measured]) -> list[Measured]:
    """The shapes' points on the local stack's API surface: what the base plane is fitted on."""
    return [p for p in points if p.extra_crds == 0 and p.recorded_kinds is None]


def repositories(points: list[Measured]) -> list[Measured]:
    """The points of real repositories (their kinds recorded, not a shape's)."""
    return [p for p in points if p.recorded_kinds is not None]


def _up(value: float, places: int) -> Fraction:
    return Fraction(math.ceil(value * 10**places), 10**places)


# Kinds whose own cost a preset ships: Kubernetes' own kinds. The benchmark's custom resource kind
# (Widget) is measured but not shipped, as a user's kind of that name is another thing.
SHIPPED_KINDS = frozenset({"ConfigMap", "Deployment"})


def fit_size_aware(points: list[Measured], *, step_mib: int = 32, safety: float = 0.10) -> Sizing:
    """The shapes' plane, scaled and with its safety, the API surface's term; then the term real
    repositories need beyond it: their CRDs (see `mib_per_crd_path_step`)."""
    preset = _fit_shapes(points, step_mib=step_mib, safety=safety)
    preset = replace(
        preset, mib_per_crd_path_step=_up(mib_per_crd_path_step(preset, points) * (1 + safety), 7)
    )
    under = [p for p in points if memory(preset, p) < p.peak_mib]
    if under:  # the base plane covers the local points by construction; the other terms the rest
        raise AssertionError(f"size-aware preset under measured points: {under}")
    return preset


def mib_per_crd_path_step(preset: Sizing, points: list[Measured]) -> float:
    """What a step of a repository's CRD field paths costs beyond the shapes' plane: the steepest rise,
    over the repositories that declare CRDs, of their peak above the plane per step (a secant, as
    for the API surface: no measured repository is under-sized); 0 without such points."""
    rises = [
        (p.peak_mib - float(preset.raw_mib(replace(p.load(), crd_path_steps=None)))) / p.crd_path_steps
        for p in repositories(points)
        if p.crd_path_steps
    ]
    return max([0.0, *rises])


def _fit_shapes(points: list[Measured], *, step_mib: int, safety: float) -> Sizing:
    local = local_surface(points)
    coefficients = linear_fit(local, base_features(local))
    # No local point above the plane, scaled rather than lifted: a relative miss, like the bound.
    margin = max(1.0, *(p.peak_mib / predict(coefficients, p) for p in local))
    return _preset(points, coefficients, (1 + safety) * margin, step_mib, safety)


def _preset(
    points: list[Measured], coefficients: dict[str, float], grow: float, step_mib: int, safety: float
) -> Sizing:
    """The plane's terms times `grow`, the API surface's with the safety alone."""
    local = local_surface(points)
    base = math.ceil(coefficients["base"] * grow)
    surface = mib_per_api_resource(points)
    # A kind's own cost only where a shape of that kind alone was measured: in a mix, whose kinds always
    # come in the same proportion, least squares cannot tell one kind's cost from another's.
    alone = {kinds[0][0] for kinds in (p.kinds for p in local) if len(kinds) == 1}
    costs = {
        kind: _up(c * grow, 4)
        for f, c in coefficients.items()
        if f.startswith("kind:") and (kind := f.removeprefix("kind:")) in alone
    }
    shipped = {k: c for k, c in costs.items() if k in SHIPPED_KINDS}
    # The kinds with a Pod template: each measured alone at its own cost, the others at the dearest of
    # those measured (what predicts them best: a Deployment's cost is its kind's and its template's).
    template = {k: c for k, c in costs.items() if k in WORKLOAD_KINDS}
    if template:
        dearest = max(template.values())
        shipped |= {k: template.get(k, dearest) for k in ("Deployment", *POD_TEMPLATE_KINDS)}
    # A kind the source names that has no cost of its own: as the dearest kind measured that holds no Pod
    # template (custom resources, ConfigMaps; their bytes are the KiB term's). Objects of no known kind
    # (the inventory alone) stay at the dearest kind measured, with the largest template measured.
    plain = [c for k, c in costs.items() if k not in WORKLOAD_KINDS]
    return replace(
        SIZE_AWARE,
        base_mib=Fraction(base),
        mib_per_object=max(costs.values()),
        mib_per_object_of_kind=tuple(sorted(shipped.items())),
        mib_per_object_of_other_kind=max(plain) if plain else None,
        mib_per_kib=_up(coefficients["kib"] * grow, 4),
        mib_per_workload_path_step=_up(coefficients["workload_path_steps"] * grow, 7),
        assumed_workload_path_steps_per_object=Fraction(largest_template(points)),
        mib_per_api_resource=_up((surface or 0.0) * (1 + safety), 4),
        fit_api_resources=max(p.api_resources for p in local),
        step_mib=step_mib,
        min_mib=base,
    )


# Points with fewer objects with a Pod template do not set the template assumed: a few controllers as large
# as argo-cd's (2,711 steps each) cost a few MiB where the source is not read, not a platform's worth.
MANY_WORKLOADS = 100


def largest_template(points: list[Measured]) -> int:
    """The most path steps of an object with a Pod template, on average over a measured point's, among
    the points with at least MANY_WORKLOADS of them (rounded up)."""
    per_object = [
        p.workload_path_steps / workloads
        for p in points
        if (workloads := sum(n for kind, n in p.kinds if kind in WORKLOAD_KINDS)) >= MANY_WORKLOADS
    ]
    return math.ceil(max(per_object, default=0))


def memory(preset: Sizing, point: Measured) -> int:
    return preset.memory_mib(point.load())


def mib_per_api_resource(points: list[Measured]) -> float | None:
    """The API surface's cost: the steepest rise of the peak per resource type from a point measured on
    the local surface to one of the same shape and count with more CRDs installed (the rise is steepest
    over the first CRDs: a secant, not a least-squares slope, so no measured surface is under-sized);
    None without such points."""
    slopes = []
    for local in local_surface(points):
        for wider in points:
            if (wider.shape, wider.objects) == (
                local.shape,
                local.objects,
            ) and wider.api_resources > local.api_resources:
                slopes.append((wider.peak_mib - local.peak_mib) / (wider.api_resources - local.api_resources))
    return max(slopes) if slopes else None


@dataclass(frozen=True)
class HeldOut:
    """A point left out of a fit, against the preset fitted without it."""

    fold: str  # what was left out: "shape X", or "largest counts"
    point: Measured
    memory_mib: int  # the preset's memory for it

    @property
    def ratio(self) -> float:
        return self.memory_mib / self.point.peak_mib

    def within(self, step_mib: int) -> bool:
        """The issue's bound: at or above the peak, at most 1.5 x peak + one step."""
        return self.point.peak_mib <= self.memory_mib <= 1.5 * self.point.peak_mib + step_mib

    def within_kernel_bound(self, step_mib: int) -> bool | None:
        """Issue 63's bound: at or above the container cgroup's peak (what a limit kills at), at most 1.5
        x the process's resident peak + one step; None where the cgroup's peak was not measured."""
        point = self.point
        if point.cgroup_peak_mib is None or point.resident_peak_mib is None:
            return None
        return point.cgroup_peak_mib <= self.memory_mib <= 1.5 * point.resident_peak_mib + step_mib


def folds(points: list[Measured]) -> list[tuple[str, list[Measured], list[Measured]]]:
    """(name, fitted on, left out): each shape left out in turn, then each shape's largest count left out
    at once, then each real repository in turn (every run of it). Points measured on a wider API surface
    carry the surface term only: they are fitted on with the rest of their shape, and left out (not
    checked) with it."""
    local = local_surface(points)
    shapes = sorted({p.shape for p in local})
    out = [
        (f"shape {s}", [p for p in points if p.shape != s], [p for p in local if p.shape == s])
        for s in shapes
    ]
    counts = {s: sorted({p.objects for p in local if p.shape == s}) for s in shapes}
    top = [p for p in local if len(counts[p.shape]) > 1 and p.objects == counts[p.shape][-1]]
    out.append(("largest counts", [p for p in points if p not in top], top))
    for name in sorted({p.shape for p in repositories(points)}):
        out.append(
            (
                f"repository {name}",
                [p for p in points if p.shape != name],
                [p for p in points if p.shape == name],
            )
        )
    return out


def cross_validate(points: list[Measured], *, step_mib: int = 32, safety: float = 0.10) -> list[HeldOut]:
    """The preset fitted on each fold's points, against the points the fold left out."""
    checks: list[HeldOut] = []
    for name, fitted_on, left_out in folds(points):
        preset = fit_size_aware(fitted_on, step_mib=step_mib, safety=safety)
        checks.extend(HeldOut(name, p, memory(preset, p)) for p in left_out)
    return checks


def cross_validation_report(checks: list[HeldOut], step_mib: int) -> str:
    lines = [
        "| left out | shape | objects | peak (MiB) | preset fitted without it (MiB) | preset / peak | within "
        "[peak, 1.5 x peak + step] | within [cgroup peak, 1.5 x resident peak + step] |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        verdict = "yes" if c.within(step_mib) else ("UNDER" if c.memory_mib < c.point.peak_mib else "over")
        kernel = c.within_kernel_bound(step_mib)
        below = c.point.cgroup_peak_mib is not None and c.memory_mib < c.point.cgroup_peak_mib
        second = "not measured" if kernel is None else "yes" if kernel else "UNDER" if below else "over"
        lines.append(
            f"| {c.fold} | {c.point.shape} | {c.point.objects} | {c.point.peak_mib:.1f} | {c.memory_mib} | "
            f"{c.ratio:.2f} | {verdict} | {second} |"
        )
    return "\n".join(lines) + "\n"


REFERENCE = Path(__file__).resolve().parent / "data" / "reconciler-memory-by-object-count.csv"


def surface_to_cover(
    preset: Sizing, reference: list[fit.Point], kib_per_object: float | None = None
) -> int | None:
    """The fewest resource types served at which the preset covers every point of others' measurements
    of Deployments on real clusters; None when no surface does. Their manifests' KiB are not known: with
    `kib_per_object` None the preset's assumption (cluster mode, the inventory alone), else that many KiB
    each (sidecar mode, the source read)."""

    def kib(objects: int) -> int | None:
        return None if kib_per_object is None else math.ceil(kib_per_object * objects)

    worst = max(
        p.usage_mib
        - float(
            preset.raw_mib(
                Load(
                    p.objects,
                    kib(p.objects),
                    (("Deployment", p.objects),),
                    api_resources=preset.fit_api_resources,
                )
            )
        )
        for p in reference
    )
    if worst <= 0:
        return preset.fit_api_resources
    if not preset.mib_per_api_resource:
        return None
    return preset.fit_api_resources + math.ceil(worst / float(preset.mib_per_api_resource))


def report(points: list[Measured], preset: Sizing, count_only: Sizing = FITTED) -> str:
    local = local_surface(points)
    coefficients = linear_fit(local, base_features(local))
    surface = mib_per_api_resource(points) or 0.0
    lines = [
        "| shape | objects | KiB | API resources | peak (MiB) | fit (MiB) | fit error | size-aware (MiB) "
        f"| size-aware / peak | {count_only.name} count-only (MiB) | {count_only.name} / peak |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    per_step = mib_per_crd_path_step(preset, points)
    for p in sorted(points, key=lambda p: (p.extra_crds, p.shape, p.objects)):
        wider = max(0, p.api_resources - preset.fit_api_resources)
        fitted = predict(coefficients, p) + surface * wider + per_step * p.crd_path_steps
        mine = memory(preset, p)
        theirs = count_only.memory_mib(Load(p.objects))
        lines.append(
            f"| {p.shape} | {p.objects} | {p.kib} | {p.api_resources} | {p.peak_mib:.1f} | {fitted:.1f} | "
            f"{(fitted - p.peak_mib) / p.peak_mib:+.1%} | {mine} | {mine / p.peak_mib:.2f} | {theirs} | "
            f"{theirs / p.peak_mib:.2f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("csv", nargs="+", type=Path)
    parser.add_argument("--step", type=int, default=32, help="memory step, MiB")
    parser.add_argument("--safety", type=float, default=0.10, help="relative headroom on every term")
    parser.add_argument(
        "--held-out", nargs="*", type=Path, default=[], help="measurements to check the preset on, not fit"
    )
    parser.add_argument(
        "--peak",
        choices=PEAKS,
        default="larger",
        help="a point's peak: the larger of VmHWM and the cgroup's (the shipped preset), or the cgroup's",
    )
    args = parser.parse_args()
    points = [p for path in args.csv for p in read_measured(path, args.peak)]
    local = local_surface(points)
    coefficients = linear_fit(local, base_features(local))
    preset = fit_size_aware(points, step_mib=args.step, safety=args.safety)
    surface = mib_per_api_resource(points)
    terms = " + ".join(f"{c:.5f} x {f}" for f, c in coefficients.items() if f != "base")
    print(
        f"# {len(local)} points on the local API surface; least squares: "
        f"peak = {coefficients['base']:.1f} + {terms}"
    )
    kinds = " + ".join(f"{float(c)} x {kind}" for kind, c in preset.mib_per_object_of_kind)
    print(
        f"# preset: memory = ceil(({preset.base_mib} + {kinds} + {float(preset.other_kind_mib)} x other "
        f"kinds named + {float(preset.mib_per_object)} x no known kind + {float(preset.mib_per_kib)} x KiB)"
        f" / {preset.step_mib}) x {preset.step_mib}; every measured point is at or below its memory"
    )
    print(f"# SIZE_AWARE per kind: {preset.mib_per_object_of_kind}")
    print(f"# SIZE_AWARE other kinds named: {preset.mib_per_object_of_other_kind}")
    if surface is not None:
        print(
            f"# API surface: {surface:.4f} MiB per resource type served beyond the "
            f"{preset.fit_api_resources} measured on"
        )
    if preset.mib_per_crd_path_step:
        print(f"# CRDs: {float(preset.mib_per_crd_path_step):.7f} MiB per step of their fields' paths")
    print(
        f"# Pod templates: {float(preset.mib_per_workload_path_step):.7f} MiB per step of their fields'"
        f" paths, {preset.assumed_workload_path_steps_per_object} steps each assumed without the source"
    )
    reference = fit.read_points(REFERENCE)
    deployments = [p for p in points if p.shape == "deployments"]
    kib_each = sum(p.kib for p in deployments) / sum(p.objects for p in deployments) if deployments else None
    print(
        f"# others' measurements of Deployments on GKE ({REFERENCE.name}) are covered from "
        f"{surface_to_cover(preset, reference)} resource types served with the count alone (cluster mode, "
        f"{float(preset.assumed_kib_per_object):g} KiB per object assumed)"
        + (
            ""
            if kib_each is None
            else f", from {surface_to_cover(preset, reference, kib_each)} with the source read (sidecar "
            f"mode) if their Deployments are {kib_each:.3f} KiB each, as this benchmark's"
        )
    )
    print(f"OBJCOUNT_BASE_MIB={preset.base_mib}")
    print(f"OBJCOUNT_MIB_PER_OBJECT={float(preset.mib_per_object)}")
    print(f"OBJCOUNT_MIB_PER_KIB={float(preset.mib_per_kib)}")
    print(f"OBJCOUNT_MIB_PER_API_RESOURCE={float(preset.mib_per_api_resource)}")
    print(f"OBJCOUNT_STEP_MIB={preset.step_mib}")
    print()
    print(report(points, preset))
    print("# cross-validation: the preset fitted without each shape, and without each shape's largest count")
    print(cross_validation_report(cross_validate(points, step_mib=args.step, safety=args.safety), args.step))
    held_out = [p for path in args.held_out for p in read_measured(path, args.peak)]
    if held_out:
        print(
            f"# the preset against {len(held_out)} points it was not fitted on "
            f"({', '.join(map(str, args.held_out))})"
        )
        checks = [HeldOut("not in the fit", p, memory(preset, p)) for p in held_out]
        print(cross_validation_report(checks, args.step))


if __name__ == "__main__":
    main()
