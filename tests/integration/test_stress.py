"""The stress script runs end to end on the local control plane and writes the CSV, table and plot."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.helpers import run_module


def test_stress_small_ramp_end_to_end(control_plane_bin_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    steps = ("--start", "200", "--step", "200", "--out", str(out))
    # The service the script starts inherits its environment: the count-only preset, by hand below.
    fitted = {"OBJCOUNT_PRESET": "fitted"}
    run_module("profiles.stress", *steps, "--stop", "600", bin_dir=control_plane_bin_dir, env=fitted)
    with (out / "stress.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [int(r["objects"]) for r in rows] == [200, 400, 600]
    # The fitted preset: 198 + 0.174 x n MiB rounded up to 32 MiB.
    expected_mib = {200: 256, 400: 288, 600: 320}
    for row in rows:
        n = int(row["objects"])
        assert (int(row["source_count"]), int(row["sync_count"])) == (n, n)
        assert int(row["recommended_memory_mib"]) == expected_mib[n]
        assert int(row["applied_memory_mib"]) >= int(row["recommended_memory_mib"])
        assert float(row["reaction_s"]) > 0
        assert row["usage_memory_mib"] == "", "the local control plane has no metrics API"
    assert (out / "stress.md").read_text().count("\n") == 2 + len(rows)
    assert (out / "stress.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"

    # --resume keeps what was measured and only runs the new steps.
    run_module(
        "profiles.stress", *steps, "--stop", "800", "--resume", bin_dir=control_plane_bin_dir, env=fitted
    )
    with (out / "stress.csv").open() as handle:
        assert [int(r["objects"]) for r in csv.DictReader(handle)] == [200, 400, 600, 800]
