"""The size-aware model: the reconciler's memory from its objects and their bytes, fitted to the real
reconciler's measurements (`profiles.reconciler_memory`) and checked against every one of them.

    python -m profiles.size_model profiles/data/reconciler-memory-v1.22.0-local.csv \
        profiles/data/reconciler-memory-v1.22.0-real-node.csv [--step 32] [--safety 0.10] [--held-out CSV ...]

Method: least squares `peak = a + sum(b_kind x objects of that kind) + c x KiB` through the points
measured with the local stack's API surface (no `--extra-crds`), weighted so that each point's *relative*
error counts (a reconciler of 1 GiB misses by more MiB than one of 100 MiB; the bound it is judged by is
relative too), where `peak` is the reconciler's peak over the apply and the prune (the prune can cost
more than the apply), the kinds those of the shape's manifests as our source counter reads them; a term
that comes out negative is dropped. A kind gets a cost of its own only where a shape of that kind alone
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

from autoscaler.core.sizing import FITTED, POD_TEMPLATE_KINDS, SIZE_AWARE, Load, Sizing
from inventory.core.counts import Kinds, kinds_of
from inventory.core.manifest_reader import read_manifest
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
    peak_mib: float  # over the apply and the prune, the larger of VmHWM and the cgroup's peak
    recorded_kinds: Kinds | None = None  # a repository's, as measured (a shape's follow from it)
    crd_path_steps: int = 0  # the source's CRDs' fields, each counted at its depth
    run: int = 1
    cgroup_peak_mib: float | None = None  # the container cgroup's peak alone (what the kernel limits)

    @property
    def kinds(self) -> Kinds:
        return (
            self.recorded_kinds if self.recorded_kinds is not None else shape_kinds(self.shape, self.objects)
        )

    def features(self) -> dict[str, float]:
        return {
            "objects": self.objects,
            "kib": self.kib,
            "crd_path_steps": self.crd_path_steps,
            "api_resources": self.api_resources,
            **{f"kind:{kind}": n for kind, n in self.kinds},
        }


@functools.cache
def shape_kinds(shape: str, objects: int) -> Kinds:
    """The objects by kind of a shape's manifests, as the service's source counter reads them (once per
    shape and count: the manifests run to megabytes)."""
    return kinds_of(read_manifest(manifests(shape, objects, "ns").encode(), f"{shape}.yaml").kinds)


def read_measured(path: Path) -> list[Measured]:
    lines = [line for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    return [
        Measured(
            row["shape"],
            int(row["objects"]),
            kib_of(int(row["source_bytes"])),
            int(row["api_resources"]),
            int(row["extra_crds"]),
            max(
                float(row[c])
                for c in ("peak_rss_mib", "peak_with_prune_mib", "cgroup_peak_mib")
                if row.get(c)
            ),
            kinds_of(orjson.loads(row["kinds"])) if row.get("kinds") else None,
            int(row.get("crd_path_steps") or 0),
            int(row.get("run") or 1),
            float(row["cgroup_peak_mib"]) if row.get("cgroup_peak_mib") else None,
        )
        for row in csv.DictReader(lines)
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
    """The plane's features: a count per kind measured, and the KiB."""
    return (*sorted({f for p in points for f in p.features() if f.startswith("kind:")}), "kib")


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
        (p.peak_mib - float(preset.raw_mib(Load(p.objects, p.kib, p.kinds, api_resources=p.api_resources))))
        / p.crd_path_steps
        for p in repositories(points)
        if p.crd_path_steps
    ]
    return max([0.0, *rises])


def _fit_shapes(points: list[Measured], *, step_mib: int, safety: float) -> Sizing:
    local = local_surface(points)
    coefficients = linear_fit(local, base_features(local))
    # No local point above the plane, scaled rather than lifted: a relative miss, like the bound.
    margin = max(1.0, *(p.peak_mib / predict(coefficients, p) for p in local))
    grow = (1 + safety) * margin
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
    # those measured (what predicts them best: a Deployment's cost is its kind's, not its bytes').
    template = {k: c for k, c in costs.items() if k in {"Deployment", *POD_TEMPLATE_KINDS}}
    if template:
        dearest = max(template.values())
        shipped |= {k: template.get(k, dearest) for k in ("Deployment", *POD_TEMPLATE_KINDS)}
    # A kind the source names that has no cost of its own: as the dearest kind measured that holds no Pod
    # template (custom resources, ConfigMaps; their bytes are the KiB term's). Objects of no known kind
    # (the inventory alone) stay at the dearest kind measured.
    plain = [c for k, c in costs.items() if k not in {"Deployment", *POD_TEMPLATE_KINDS}]
    preset = replace(
        SIZE_AWARE,
        base_mib=Fraction(base),
        mib_per_object=max(costs.values()),
        mib_per_object_of_kind=tuple(sorted(shipped.items())),
        mib_per_object_of_other_kind=max(plain) if plain else None,
        mib_per_kib=_up(coefficients["kib"] * grow, 4),
        mib_per_api_resource=_up((surface or 0.0) * (1 + safety), 4),
        fit_api_resources=max(p.api_resources for p in local),
        step_mib=step_mib,
        min_mib=base,
    )
    return preset


def memory(preset: Sizing, point: Measured) -> int:
    return preset.memory_mib(
        Load(point.objects, point.kib, point.kinds, point.crd_path_steps, point.api_resources)
    )


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
        "[peak, 1.5 x peak + step] |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        verdict = "yes" if c.within(step_mib) else ("UNDER" if c.memory_mib < c.point.peak_mib else "over")
        lines.append(
            f"| {c.fold} | {c.point.shape} | {c.point.objects} | {c.point.peak_mib:.1f} | {c.memory_mib} | "
            f"{c.ratio:.2f} | {verdict} |"
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
    args = parser.parse_args()
    points = [p for path in args.csv for p in read_measured(path)]
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
    held_out = [p for path in args.held_out for p in read_measured(path)]
    if held_out:
        print(
            f"# the preset against {len(held_out)} points it was not fitted on "
            f"({', '.join(map(str, args.held_out))})"
        )
        checks = [HeldOut("not in the fit", p, memory(preset, p)) for p in held_out]
        print(cross_validation_report(checks, args.step))


if __name__ == "__main__":
    main()
