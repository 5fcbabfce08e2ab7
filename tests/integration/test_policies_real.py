"""The side-by-side benchmark runs end to end on the local stack with a real node (Config Sync v1.24.3,
its Pods run by the kubelet): a tiny timeline under two policies, one after the other, written as CSV,
traces, table and plot."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.helpers import run_module


def test_policies_side_by_side_small_run_end_to_end(control_plane_bin_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    run_module(
        "profiles.policies_real",
        *("--shapes", "configmaps", "--policies", "static Autopilot,prototype (no persistence)"),
        *("--scale", "0.02", "--hold", "1", "--settle", "1", "--phase-timeout", "240", "--out", str(out)),
        bin_dir=control_plane_bin_dir,
        timeout=900,
    )
    with (out / "policies-real.csv").open() as handle:
        rows = {row["policy"]: row for row in csv.DictReader(handle)}
    assert set(rows) == {"static Autopilot", "prototype (no persistence)"}
    for row in rows.values():
        # The timeline (5, 10, 40, then 2 ConfigMaps) was synced in every phase.
        assert "None" not in row["seconds_to_synced"], row
        assert len(row["seconds_to_synced"].split(";")) == 4
        assert float(row["mib_hours"]) > 0
        assert 30 < float(row["peak_rss_mib"]) < 512, "a real Go process, far under every limit here"
        assert int(row["oom_kills"]) == 0
    # Autopilot's default: request = limit = 512Mi from the start, never changed, so never restarted.
    autopilot = rows["static Autopilot"]
    assert (float(autopilot["largest_limit_mib"]), int(autopilot["restarts"])) == (512.0, 0)
    # The prototype: 128 MiB for the empty first commit, then ceil((128 + 0.2 x 40) / 32) x 32 = 160 MiB
    # (5 and 10 objects give 160 too): two writes of the override, each a rollout.
    prototype = rows["prototype (no persistence)"]
    assert float(prototype["largest_limit_mib"]) == 160.0
    assert int(prototype["restarts"]) >= 1
    with (out / "traces" / "configmaps-autopilot.csv").open() as handle:
        limits = {row["limit_mib"] for row in csv.DictReader(handle) if row["pod"]}
    assert limits == {"512.0"}
    # A header, its rule and a row a policy; no net saving (ours was not run: nothing to set against).
    assert (out / "policies-real.md").read_text().count("\n") == 2 + len(rows)
    assert (out / "policies-real.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
