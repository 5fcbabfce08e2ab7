"""The side-by-side run end to end on the local stack with a real node (Config Sync's default release,
every container of its Pods real): a tiny timeline under two policies at the same time, written as CSV,
traces, tables and plot."""

from __future__ import annotations

import csv
import json
from pathlib import Path

from controlplane.configsync_build import VERSION
from tests.helpers import run_module


def test_policies_side_by_side_small_run_end_to_end(control_plane_bin_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_module(
        "profiles.policies_real",
        *("--policies", "autopilot,standard", "--scale", "0.01"),
        *("--hold-scale", "0", "--phase-timeout", "300", "--phases", "grow 1,prune", "--out", str(out)),
        # git-sync fetches every second (Config Sync's default: 15 s): a commit is not waited for.
        *("--git-period", "1"),
        bin_dir=control_plane_bin_dir,
        timeout=900,
    )
    with (out / "policies-real.csv").open() as handle:
        rows = {row["policy"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"static Autopilot", "static Standard"}
    for row in rows.values():
        # The two phases asked for (5 ConfigMaps; 1 ConfigMap) were synced, in one Pod each. (Every
        # phase's objects are checked in tests/unit/test_benchmark_shapes.py. Not "grow 2": pruning its
        # Deployments, the last of their kind, holds Config Sync's sync about a minute, until its watch of
        # the kind stops.)
        seconds = row["seconds_to_synced"].split(";")
        assert len(seconds) == 2
        assert "None" not in seconds, row
        assert (int(row["oom_kills"]), int(row["restarts"]), int(row["new_pods"])) == (0, 0, 0)
        assert int(row["in_place_resizes"]) == 0
        assert 20 < float(row["peak_working_set_mib"]) < 512, "a real Go process, far under every limit here"
        assert float(row["own_requested_mib_h"]) == 0.0, "no component of their own"
    # Autopilot's default holds a 512Mi limit; Standard's a 200Mi request and no limit, the whole run.
    autopilot, standard = rows["static Autopilot"], rows["static Standard"]
    assert float(autopilot["largest_reserved_mib"]) == 512.0
    assert float(standard["largest_reserved_mib"]) == 200.0
    hours = float(autopilot["duration_s"]) / 3600
    assert float(autopilot["reserved_mib_h"]) < 512 * hours * 1.01
    with (out / "traces" / "standard.csv").open() as handle:
        trace = [row for row in csv.DictReader(handle) if row["pod"]]
    assert {row["request_mib"] for row in trace} == {"200.0"}
    assert {row["limit_mib"] for row in trace} == {""}, "no limit"
    assert json.loads((out / "run.json").read_text())["config_sync"] == VERSION  # the release this run built
    # A header, its rule and a row a policy.
    assert (out / "policies-real.md").read_text().split("\n\n")[0].count("\n") == 2 + len(rows) - 1
    assert (out / "policies-real.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
