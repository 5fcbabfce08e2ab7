"""The stress script runs end to end on the local control plane and writes the CSV, table and plot."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

from autoscaler.policy import size
from autoscaler.settings import Settings

REPO = Path(__file__).resolve().parents[2]


def test_stress_small_ramp_end_to_end(control_plane_bin_dir: Path, tmp_path: Path) -> None:
    env = {**os.environ, "OBJCOUNT_CP_BIN_DIR": str(control_plane_bin_dir)}
    out = tmp_path / "out"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "autoscaler.cli",
            "stress",
            "--start",
            "200",
            "--stop",
            "600",
            "--step",
            "200",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    with (out / "stress.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    profile = Settings(mode="cluster").profile()
    assert [int(r["objects"]) for r in rows] == [200, 400, 600]
    for row in rows:
        n = int(row["objects"])
        assert (int(row["source_count"]), int(row["sync_count"])) == (n, n)
        assert int(row["recommended_memory_mib"]) == size(n, profile).memory_request_mib
        assert int(row["applied_memory_mib"]) >= int(row["recommended_memory_mib"])
        assert float(row["reaction_s"]) > 0
        assert row["usage_memory_mib"] == "", "the local control plane has no metrics API"
    assert (out / "stress.md").read_text().count("\n") == 2 + len(rows)
    assert (out / "stress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --resume keeps what was measured and only runs the new steps.
    resumed = subprocess.run(
        [
            sys.executable,
            "-m",
            "profiles.stress",
            "--start",
            "200",
            "--stop",
            "800",
            "--step",
            "200",
            "--out",
            str(out),
            "--resume",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    with (out / "stress.csv").open() as handle:
        assert [int(r["objects"]) for r in csv.DictReader(handle)] == [200, 400, 600, 800]
