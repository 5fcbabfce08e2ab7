"""The benchmark of the real reconciler runs end to end on the local stack with a real node (Config Sync's
default release, its Pods run by the kubelet): a fresh reconciler per point, the peak resident memory of
its process and of its container's memory cgroup, and the counts it produced, written as CSV, table and plot,
and resumable; objects spread over namespaces, and a cluster-scoped kind.

Both tests read the same two runs (a stack each): the first measures ConfigMaps, large custom resources
and ClusterRoles; the second resumes it with 3 more CRDs, its ConfigMaps in one namespace and spread over
three."""

from __future__ import annotations

import csv
import os
from dataclasses import dataclass
from pathlib import Path

import pytest

from controlplane.configsync_build import VERSION
from tests.helpers import run_module

# A short idle window: the rate is read the same way over 30 s in a measurement run. git-sync fetches
# every second (Config Sync's default: 15 s), so a prune's commit is not waited for.
SHORT = ("--idle-seconds", "1", "--git-period", "1")


def rows_of(out: Path) -> list[dict[str, str]]:
    with (out / "reconciler-memory.csv").open() as handle:
        return list(csv.DictReader(handle))


@dataclass(frozen=True)
class Runs:
    out: Path
    first: list[dict[str, str]]  # the CSV after the first run
    first_table: str  # its Markdown table
    rows: list[dict[str, str]]  # the CSV after the resumed run


@pytest.fixture(scope="module")
def runs(control_plane_bin_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Runs:
    out = tmp_path_factory.mktemp("reconciler-memory") / "out"
    first = ("--shapes", "configmaps,large-crs,clusterroles", "--counts", "20", "--out", str(out), *SHORT)
    run_module("profiles.reconciler_memory", *first, bin_dir=control_plane_bin_dir)
    measured, table = rows_of(out), (out / "reconciler-memory.md").read_text()
    # --extra-crds: the same point with a larger API surface is a point of its own; --namespaces 1,3: it
    # and the same point spread over three namespaces, in the one run.
    more = (
        "--shapes",
        "configmaps",
        "--counts",
        "20",
        "--extra-crds",
        "3",
        "--namespaces",
        "1,3",
        "--resume",
    )
    run_module("profiles.reconciler_memory", *more, "--out", str(out), *SHORT, bin_dir=control_plane_bin_dir)
    return Runs(out, measured, table, rows_of(out))


@pytest.mark.timeout(600)  # the two runs, each a stack of its own
def test_reconciler_memory_small_run_end_to_end(runs: Runs) -> None:
    rows = runs.first
    assert [(r["shape"], int(r["objects"])) for r in rows] == [
        ("configmaps", 20),
        ("large-crs", 20),
        ("clusterroles", 20),
    ]
    for row in rows:
        # 20 objects and the Namespace the reconciler created for them (implicit namespace strategy);
        # ClusterRoles have none (test_objects_spread_over_namespaces_and_a_cluster_scoped_kind).
        assert int(row["inventory_entries"]) == (20 if row["shape"] == "clusterroles" else 21)
        # A real Go process that synced: more than its binary's pages, far under the 4Gi it was given.
        assert 30 < float(row["peak_rss_mib"]) < 1024
        assert float(row["seconds_to_synced"]) > 0
        # The same process pruned down to one object: its peak over both is at least the apply's.
        assert float(row["peak_with_prune_mib"]) >= float(row["peak_rss_mib"])
        assert float(row["seconds_to_pruned"]) > 0
        assert row["version"] == VERSION  # the release this run built and ran (the default, v1.25.0)
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
    small, large, _ = (int(r["source_bytes"]) for r in rows)
    assert large > 20 * 20 * 1024 > small, "large custom resources carry about 20 KiB each"
    assert runs.first_table.count("\n") == 2 + len(rows)

    # --resume keeps what was measured and only measures the new points: the same point with 3 more CRDs
    # (a point of its own, the only difference from the first run's first point), and it spread.
    *before, surface, spread = runs.rows
    assert before == rows, "the points measured before are kept as they were"
    assert {int(r["extra_crds"]) for r in before} == {0}
    assert (surface["shape"], int(surface["objects"]), int(surface["extra_crds"])) == ("configmaps", 20, 3)
    assert int(surface["namespaces"]) == 1
    assert (spread["shape"], int(spread["objects"]), int(spread["extra_crds"])) == ("configmaps", 20, 3)
    assert int(surface["crds"]) == int(rows[0]["crds"]) + 3
    assert int(surface["api_resources"]) == int(rows[0]["api_resources"]) + 3  # one resource type per CRD
    assert (runs.out / "reconciler-memory.md").read_text().count("\n") == 2 + len(runs.rows)
    assert (runs.out / "reconciler-memory.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.timeout(600)  # the same runs, when it is run alone
def test_objects_spread_over_namespaces_and_a_cluster_scoped_kind(runs: Runs) -> None:
    # (The platform shape is not run here: pruning its Namespaces makes Config Sync v1.22.0 retry the sync
    # about five minutes later, so one point takes over five minutes; tests/unit checks its manifests.)
    (spread_row,) = (r for r in runs.rows if int(r["namespaces"]) > 1)
    (roles_row,) = (r for r in runs.rows if r["shape"] == "clusterroles")
    # 20 ConfigMaps and the three Namespaces the reconciler created for them.
    assert (int(spread_row["namespaces"]), int(spread_row["inventory_entries"])) == (3, 23)
    # ClusterRoles have no namespace: nothing implicit.
    assert int(roles_row["inventory_entries"]) == 20
    for row in (spread_row, roles_row):
        assert 30 < float(row["peak_with_prune_mib"]) < 1024
