"""The size-aware preset against the real reconciler's measurements (profiles/data, with provenance)."""

from __future__ import annotations

from pathlib import Path

import pytest

from autoscaler.core.sizing import SIZE_AWARE
from profiles.size_model import (
    HeldOut,
    Measured,
    cross_validate,
    fit_size_aware,
    folds,
    linear_fit,
    local_surface,
    memory,
    mib_per_api_resource,
    read_measured,
)

DATA = Path(__file__).resolve().parents[2] / "profiles" / "data" / "reconciler-memory-v1.22.0-local.csv"
# The first 17 points (the local stack with our stand-in kubelet, to 2,000 objects, five shapes) and the
# 13 measured later on the real node (to 5,000, more kinds): the preset is fitted on all of them.
POINTS = read_measured(DATA)
LOCAL = local_surface(POINTS)
REAL_NODE = read_measured(DATA.parent / "reconciler-memory-v1.22.0-real-node.csv")
# Issue 33: Config Sync v1.24.3's reconciler on real repositories (the manifest corpus's, and mixes).
REPOSITORIES = read_measured(DATA.parent / "reconciler-memory-v1.24.3-real-repositories.csv")
# Issue 63: v1.25.0 on the kinds of many-namespace platforms, each alone (Services, ServiceAccounts, Online
# Boutique's Deployments), on Kubernetes v1.37.2.
MANY_NAMESPACE_KINDS = read_measured(
    DATA.parent / "reconciler-memory-v1.25.0-k8s-v1.37.2-many-namespace-kinds.csv"
)
# A second template size (the Prometheus operator's Deployment, 212 path steps), so that the templates' term
# is told by more than Online Boutique's alone.
OPERATOR = read_measured(DATA.parent / "reconciler-memory-v1.25.0-k8s-v1.37.2-operator-deployments.csv")
ALL_POINTS = POINTS + REAL_NODE + REPOSITORIES + MANY_NAMESPACE_KINDS + OPERATOR
# Issue 48: v1.25.0 on three real mixes past 3,000 objects (tenant namespaces), two runs each, held out.
LARGE = read_measured(DATA.parent / "reconciler-memory-v1.25.0-real-repositories-large.csv")


def test_the_shipped_preset_is_what_the_fit_derives_from_the_data() -> None:
    derived = fit_size_aware(ALL_POINTS)
    fields = (
        "base_mib",
        "mib_per_object",
        "mib_per_kib",
        "mib_per_object_of_kind",
        "mib_per_object_of_other_kind",
        "mib_per_api_resource",
        "mib_per_crd_path_step",
        "mib_per_workload_path_step",
        "assumed_workload_path_steps_per_object",
        "fit_api_resources",
        "step_mib",
    )
    assert {f: getattr(derived, f) for f in fields} == {f: getattr(SIZE_AWARE, f) for f in fields}


@pytest.mark.parametrize(
    "point", ALL_POINTS, ids=lambda p: f"{p.shape}-{p.objects}-{p.api_resources}-{p.run}"
)
def test_no_measured_peak_is_above_its_memory(point: Measured) -> None:
    # The peak over the apply and the prune down to one object, on the surface it was measured on.
    assert memory(SIZE_AWARE, point) >= point.peak_mib


@pytest.mark.parametrize("point", REPOSITORIES, ids=lambda p: f"{p.shape}-{p.run}")
def test_every_run_on_a_real_repository_is_within_the_bound(point: Measured) -> None:
    # Issue 33: at or above the larger of the reconciler's VmHWM and its cgroup's peak over the apply
    # and the prune, at most 1.5 times it plus one step.
    assert point.peak_mib <= memory(SIZE_AWARE, point) <= 1.5 * point.peak_mib + SIZE_AWARE.step_mib


# Issue 45: v1.25.0 and v1.24.3 on three of those repositories, one after the other (held out of the fit).
RELEASES_ON_REPOSITORIES = [
    *read_measured(DATA.parent / "reconciler-memory-v1.25.0-real-repositories.csv"),
    *read_measured(DATA.parent / "reconciler-memory-v1.24.3-real-repositories-2026-11-27.csv"),
]


@pytest.mark.parametrize("point", RELEASES_ON_REPOSITORIES, ids=lambda p: f"{p.shape}-{p.peak_mib}")
def test_the_preset_holds_on_v1_25_0_and_v1_24_3_on_real_repositories_it_was_not_fitted_on(
    point: Measured,
) -> None:
    assert point.peak_mib <= memory(SIZE_AWARE, point) <= 1.5 * point.peak_mib + SIZE_AWARE.step_mib


def test_each_real_repository_left_out_is_within_the_bound() -> None:
    # Issue 33: the preset fitted without each repository (every run of it), against it. Until issue 63
    # one run was not: argo-cd's install left out got 192 MiB, 4 MiB under its VmHWM (195.9); its seven
    # controllers' Pod templates (18,978 path steps) are priced since.
    checks = [c for c in cross_validate(ALL_POINTS) if c.fold.startswith("repository ")]
    assert {c.fold.removeprefix("repository ") for c in checks} == {p.shape for p in REPOSITORIES}
    assert [c for c in checks if not c.within(SIZE_AWARE.step_mib)] == []


# Issue 63: v1.25.0 on Online Boutique in 26 to 158 tenant namespaces, alone and beside the monitoring
# stack, on Kubernetes v1.37.2, held out.
BOUTIQUE_MIXES = read_measured(DATA.parent / "reconciler-memory-v1.25.0-k8s-v1.37.2-boutique-mixes.csv")


@pytest.mark.parametrize("point", BOUTIQUE_MIXES, ids=lambda p: f"{p.shape}-{p.run}")
def test_the_preset_holds_on_many_namespace_platforms_within_what_the_kernel_limits(point: Measured) -> None:
    # Held out of the fit: at or above its cgroup's peak (what a limit kills at), at most 1.5 x its
    # resident peak + one step. The prune of 158 tenants peaks 1.4 x their apply; in VmHWM it is above the
    # preset (843.9 MiB against 832), in the cgroup not (803.8).
    assert point.cgroup_peak_mib is not None
    assert point.resident_peak_mib is not None
    limit = memory(SIZE_AWARE, point)
    assert point.cgroup_peak_mib <= limit <= 1.5 * point.resident_peak_mib + SIZE_AWARE.step_mib


@pytest.mark.parametrize("point", LARGE, ids=lambda p: f"{p.shape}-{p.peak_mib}")
def test_the_preset_holds_past_3000_objects_within_what_the_kernel_limits(point: Measured) -> None:
    # Issue 48: held out of the fit, every run within [its cgroup's peak, what the kernel limits, 1.5 x its
    # resident peak + one step]. The guestbooks' prune peaks 3 to 5 % above the preset in VmHWM (504.6 and
    # 493.5 against 480; their apply 424 and 428), not in the cgroup (463.8, 453.3): a Namespace term
    # fitted on them prices the platform shape (1,900 Namespaces in 5,000 objects, a 350.8 MiB peak) past the bound
    # (BENCHMARKS.md).
    assert 3000 <= point.objects <= 6000
    assert point.cgroup_peak_mib is not None
    limit = memory(SIZE_AWARE, point)
    assert point.cgroup_peak_mib <= limit <= 1.5 * point.peak_mib + SIZE_AWARE.step_mib


def test_the_repositories_declaring_crds_are_what_prices_them() -> None:
    assert SIZE_AWARE.mib_per_crd_path_step > 0
    assert {p.shape for p in REPOSITORIES if p.crd_path_steps} >= {
        "cert-manager-crds",
        "monitoring-crds",
        "argo-cd-crds",
    }


@pytest.mark.parametrize(
    "point",
    [p for p in local_surface(ALL_POINTS) if p.shape in ("configmaps", "deployments") and p.objects >= 1000],
    ids=lambda p: f"{p.shape}-{p.objects}",
)
def test_configmaps_and_deployments_are_not_over_provisioned(point: Measured) -> None:
    # Issue 14: from 1,000 objects up, at most 1.5 times the measured peak plus one step.
    memory = SIZE_AWARE.memory_mib(point.load())
    assert memory <= 1.5 * point.peak_mib + SIZE_AWARE.step_mib


def test_the_data_cover_every_shape_and_a_larger_api_surface() -> None:
    assert {p.shape for p in LOCAL} == {"configmaps", "deployments", "small-crs", "large-crs", "mix"}
    assert all(len({p.objects for p in LOCAL if p.shape == s}) >= 3 for s in {p.shape for p in LOCAL})
    assert mib_per_api_resource(POINTS) is not None


def test_a_negative_term_is_dropped_not_kept() -> None:
    # Peaks that fall with the bytes: no model may say more bytes need less memory.
    points = [
        Measured("configmaps", n, kib, 73, 0, 100 + n / 10 - kib / 100)
        for n, kib in [(10, 0), (20, 500), (30, 100)]
    ]
    fitted = linear_fit(points, ("kind:ConfigMap", "kib"))
    assert fitted["kib"] == 0.0
    assert fitted["kind:ConfigMap"] > 0


def test_cross_validation_leaves_out_each_shape_and_then_each_shape_s_largest_count() -> None:
    names = [name for name, _, _ in folds(POINTS)]
    assert names == [
        "shape configmaps",
        "shape deployments",
        "shape large-crs",
        "shape mix",
        "shape small-crs",
        "largest counts",
    ]
    for name, fitted_on, left_out in folds(POINTS):
        assert left_out, name
        assert not set(left_out) & set(fitted_on), name
        if name.startswith("shape "):
            assert all(p.shape != name.removeprefix("shape ") for p in fitted_on)
    _, _, largest = folds(POINTS)[-1]
    assert sorted((p.shape, p.objects) for p in largest) == [
        ("configmaps", 2000),
        ("deployments", 2000),
        ("large-crs", 1000),
        ("mix", 2000),
        ("small-crs", 2000),
    ]


def test_a_left_out_point_is_within_the_bound_from_its_peak_to_1_5_peaks_plus_a_step() -> None:
    point = Measured("configmaps", 1000, 117, 73, 0, 100.0)
    assert [HeldOut("f", point, m).within(32) for m in (99, 100, 182, 183)] == [False, True, True, False]


def test_issue_63_s_bound_runs_from_the_cgroup_s_peak_to_1_5_resident_peaks_plus_a_step() -> None:
    # A cgroup peak of 80 and a resident peak (VmHWM) of 100: from 80 to 1.5 x 100 + 32 = 182.
    point = Measured("configmaps", 1000, 117, 73, 0, 100.0, cgroup_peak_mib=80.0, resident_peak_mib=100.0)
    checks = [HeldOut("f", point, m).within_kernel_bound(32) for m in (79, 80, 182, 183)]
    assert checks == [False, True, True, False]
    assert HeldOut("f", Measured("configmaps", 1000, 117, 73, 0, 100.0), 90).within_kernel_bound(32) is None


@pytest.mark.parametrize("point", REAL_NODE, ids=lambda p: f"{p.shape}-{p.objects}")
def test_points_the_preset_was_not_fitted_on_are_within_the_bound(point: Measured) -> None:
    # Issue 25: measured later, on the real node, to 5,000 objects and on kinds the preset does not name
    # (ClusterRoles, custom resources of 3 KiB, a platform repository's mix): at or above the peak, at
    # most 1.5 times it plus one step.
    memory = SIZE_AWARE.memory_mib(point.load())
    assert point.peak_mib <= memory <= 1.5 * point.peak_mib + SIZE_AWARE.step_mib


# The releases' ConfigMap and Deployment ramps, held out of the fit: v1.22.0 beside v1.24.3 (issue 27),
# v1.25.0 beside v1.24.3 again (issue 45).
VERSION_RAMPS = [
    *read_measured(DATA.parent / "reconciler-memory-v1.22.0-real-node-ramp.csv"),
    *read_measured(DATA.parent / "reconciler-memory-v1.24.3-real-node.csv"),
    *read_measured(DATA.parent / "reconciler-memory-v1.25.0-real-node.csv"),
    *read_measured(DATA.parent / "reconciler-memory-v1.24.3-real-node-beside-v1.25.0.csv"),
]


@pytest.mark.parametrize("point", VERSION_RAMPS, ids=lambda p: f"{p.shape}-{p.objects}-{p.peak_mib}")
def test_one_preset_holds_on_every_releases_ramps_it_was_not_fitted_on(point: Measured) -> None:
    # Issues 27 and 45: one preset for every pinned release (the version is not a term): the ramps of
    # v1.22.0, v1.24.3 and v1.25.0, none of them fitted on, are at or under it and within 1.5 times
    # their peak plus a step.
    memory = SIZE_AWARE.memory_mib(point.load())
    assert point.peak_mib <= memory <= 1.5 * point.peak_mib + SIZE_AWARE.step_mib


def test_every_left_out_point_is_within_the_bound() -> None:
    # Issue 25: fitted without each shape (and without each shape's largest counts), the preset is at or
    # above every left-out peak and at most 1.5 times it plus one step: Deployments left out are priced
    # from StatefulSets and CronJobs, CronJobs from Deployments and StatefulSets, 5,000 large custom
    # resources from 1,000 at most.
    # Issue 63: Online Boutique's Deployments too, now that a second template size is measured (the
    # Prometheus operator's). Fitted on Online Boutique's alone, the templates' term could not be told
    # from the kinds without them (their path steps a fixed number per kind), and they were priced over
    # the bound (512 and 928 MiB against peaks of 281.7 and 487.9).
    checks = [c for c in cross_validate(ALL_POINTS) if not c.fold.startswith("repository ")]
    assert len(checks) == 50
    assert {c.fold for c in checks} >= {
        "shape deployments",
        "shape cronjobs",
        "shape daemonsets",
        "shape jobs",
        "shape replicasets",
        "shape large-crs",
        "shape services",
        "shape serviceaccounts",
        "shape boutique-deployments",
        "shape operator-deployments",
    }
    assert [c for c in checks if not c.within(SIZE_AWARE.step_mib)] == []


def test_kinds_with_a_pod_template_are_priced_from_those_measured() -> None:
    # Each kind with a Pod template measured alone gets its own cost, from a CronJob's (the cheapest) to a
    # Deployment's (the dearest); those never measured (Pod, PodTemplate) cost the dearest, a Deployment's.
    costs = dict(SIZE_AWARE.mib_per_object_of_kind)
    measured = ("CronJob", "Job", "StatefulSet", "ReplicaSet", "DaemonSet")
    assert all(costs["ConfigMap"] < costs[kind] < costs["Deployment"] for kind in measured)
    assert costs["Pod"] == costs["PodTemplate"] == costs["Deployment"]


# Issue 60: v1.25.0's ramps and three real repositories on Kubernetes v1.37.2 (six more resource types
# served than on v1.34.4: the surface term prices them), held out of the fit.
ON_KUBERNETES_1_37 = [
    *read_measured(DATA.parent / "reconciler-memory-v1.25.0-k8s-v1.37.2-real-node.csv"),
    *read_measured(DATA.parent / "reconciler-memory-v1.25.0-k8s-v1.37.2-real-repositories.csv"),
    # The benchmark's Deployments beside the operator's, the same run on another machine (2026-12-07).
    *read_measured(DATA.parent / "reconciler-memory-v1.25.0-k8s-v1.37.2-deployments-beside-operator.csv"),
]


@pytest.mark.parametrize("point", ON_KUBERNETES_1_37, ids=lambda p: f"{p.shape}-{p.objects}")
def test_the_preset_holds_on_kubernetes_1_37_within_what_the_kernel_limits(point: Measured) -> None:
    # The issue's bound: at or above the cgroup's peak (what the kernel limits), at most 1.5 x the
    # resident peak plus one step.
    assert point.api_resources in (78, 79)  # the ramps' stack served one CRD more than the repositories'
    assert point.cgroup_peak_mib is not None
    limit = memory(SIZE_AWARE, point)
    assert point.cgroup_peak_mib <= limit <= 1.5 * point.peak_mib + SIZE_AWARE.step_mib
    assert point.peak_mib <= limit, "and at or above the resident peak, as every earlier point"


def test_kubernetes_1_37_points_are_the_ramps_three_repositories_and_deployments_beside_the_operator() -> (
    None
):
    assert sorted((p.shape, p.objects) for p in ON_KUBERNETES_1_37) == [
        ("cert-manager-crds", 6),
        ("configmaps", 500),
        ("configmaps", 2000),
        ("deployments", 500),
        ("deployments", 1000),
        ("deployments", 2000),
        ("deployments", 2000),
        ("monitoring-crds", 10),
        ("monitoring-tenants-100", 910),
    ]


def test_a_point_read_for_the_cgroups_peak_is_that_peak_alone() -> None:
    """`--peak cgroup`: the container cgroup's peak (what a limit kills at), not VmHWM; a file measured
    without cgroups (the local stack's) gives no point."""
    points = read_measured(DATA.parent / "reconciler-memory-v1.22.0-real-node.csv", "cgroup")
    # The file's first row: configmaps, 1,000 objects, VmHWM 123.7 and 126.1 MiB, the cgroup's 85.2.
    assert (points[0].shape, points[0].objects, points[0].peak_mib) == ("configmaps", 1000, 85.2)
    assert len(points) == 17
    assert read_measured(DATA, "cgroup") == []
