"""The benchmark of the real reconciler runs end to end on the local stack with a real node (Config Sync
v1.24.3, its Pods run by the kubelet): a fresh reconciler per point, the peak resident memory of its
process and of its container's memory cgroup, and the counts it produced, written as CSV, table and plot,
and resumable; objects spread over namespaces, and a cluster-scoped kind."""

from __future__ import annotations

import csv
import os
from pathlib import Path

import pytest

from controlplane.configsync_build import VERSION
from tests.helpers import run_module


def rows_of(out: Path) -> list[dict[str, str]]:
    with (out / "reconciler-memory.csv").open() as handle:
        return list(csv.DictReader(handle))


@pytest.mark.timeout(600)  # two stacks of their own (with three: 203 to 216 s in a cold CI)
def test_reconciler_memory_small_run_end_to_end(control_plane_bin_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    # A short idle window: the rate is read the same way over 30 s in a measurement run.
    points = ("--shapes", "configmaps,large-crs", "--out", str(out), "--idle-seconds", "2")
    run_module("profiles.reconciler_memory", *points, "--counts", "20", bin_dir=control_plane_bin_dir)
    rows = rows_of(out)
    assert [(r["shape"], int(r["objects"])) for r in rows] == [("configmaps", 20), ("large-crs", 20)]
    for row in rows:
        # 20 objects and the Namespace the reconciler created for them (implicit namespace strategy).
        assert int(row["inventory_entries"]) == 21
        # A real Go process that synced: more than its binary's pages, far under the 4Gi it was given.
        assert 30 < float(row["peak_rss_mib"]) < 1024
        assert float(row["seconds_to_synced"]) > 0
        # The same process pruned down to one object: its peak over both is at least the apply's.
        assert float(row["peak_with_prune_mib"]) >= float(row["peak_rss_mib"])
        assert float(row["seconds_to_pruned"]) > 0
        assert row["version"] == VERSION  # the release this run built and ran (the default, v1.24.3)
        assert row["measured"] == "VmHWM"
        # The cgroup's peak: the same process's pages and the page cache charged to it, read at the end.
        assert 30 < float(row["cgroup_peak_mib"]) < 1024
        assert int(row["namespaces"]) == 1
        # The point's cost: its sync, its prune and its RootSync's deletion.
        spent = float(row["seconds_to_synced"]) + float(row["seconds_to_pruned"])
        assert float(row["point_seconds"]) >= spent
        # Its CPU from its cgroup: a Go process that parsed and applied used some; the prune's is its own
        # (the apply's is not in it); idle, at most all the machine's cores (1000m each).
        assert float(row["cpu_seconds_to_synced"]) > 0
        assert float(row["cpu_seconds_to_pruned"]) > 0
        assert 0 <= float(row["idle_cpu_m"]) <= 1000 * (os.cpu_count() or 1)
    small, large = (int(r["source_bytes"]) for r in rows)
    assert large > 20 * 20 * 1024 > small, "large custom resources carry about 20 KiB each"
    assert (out / "reconciler-memory.md").read_text().count("\n") == 2 + len(rows)
    assert (out / "reconciler-memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --resume keeps what was measured and only measures the new point; --extra-crds: the same point with
    # a larger API surface is a point of its own.
    surface = (
        "--shapes",
        "configmaps",
        "--counts",
        "20",
        "--extra-crds",
        "3",
        "--resume",
        "--idle-seconds",
        "2",
    )
    run_module("profiles.reconciler_memory", "--out", str(out), *surface, bin_dir=control_plane_bin_dir)
    *before, last = rows_of(out)
    assert before == rows, "the points measured before are kept as they were"
    assert {int(r["extra_crds"]) for r in before} == {0}
    assert (last["shape"], int(last["objects"]), int(last["extra_crds"])) == ("configmaps", 20, 3)
    assert int(last["crds"]) == int(rows[0]["crds"]) + 3
    assert int(last["api_resources"]) == int(rows[0]["api_resources"]) + 3  # one resource type per CRD


@pytest.mark.timeout(600)  # two stacks of their own
def test_objects_spread_over_namespaces_and_a_cluster_scoped_kind(
    control_plane_bin_dir: Path, tmp_path: Path
) -> None:
    # (The platform shape is not run here: pruning its Namespaces makes Config Sync v1.22.0 retry the sync
    # about five minutes later, so one point takes over five minutes; tests/unit checks its manifests.)
    out = tmp_path / "out"
    short = ("--idle-seconds", "2")
    spread = ("--shapes", "configmaps", "--counts", "20", "--namespaces", "3", "--out", str(out), *short)
    run_module("profiles.reconciler_memory", *spread, bin_dir=control_plane_bin_dir)
    roles = ("--shapes", "clusterroles", "--counts", "20", "--out", str(out), "--resume", *short)
    run_module("profiles.reconciler_memory", *roles, bin_dir=control_plane_bin_dir)
    spread_row, roles_row = rows_of(out)
    # 20 ConfigMaps and the three Namespaces the reconciler created for them.
    assert (int(spread_row["namespaces"]), int(spread_row["inventory_entries"])) == (3, 23)
    # ClusterRoles have no namespace: nothing implicit.
    assert int(roles_row["inventory_entries"]) == 20
    for row in (spread_row, roles_row):
        assert 30 < float(row["peak_with_prune_mib"]) < 1024
