"""`make run` as a new user runs it: the demo goes through a grow-and-prune cycle and cleans up."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers import run_module
from tests.integration.conftest import _alive


def test_demo_cycle_scales_up_then_down_and_stops_cleanly(control_plane_bin_dir: Path) -> None:
    before = _control_plane_pids()
    result = run_module(
        "autoscaler.cli", "demo", "--once", "--no-live", bin_dir=control_plane_bin_dir, env={"COLUMNS": "140"}
    )
    out = result.stdout
    # Fitted preset (198 MiB + 0.174 MiB per object, 32 MiB steps, about 1m CPU per MiB): 5,000 objects
    # 1068 -> 1088Mi, 1062.5 -> 1063m; 400 objects 267.6 -> 288Mi, 281.25 -> 282m.
    assert "1063m/1088Mi" in out, "scaled up for 5,000 objects"
    rows = [line for line in out.splitlines() if "src 400 / inv 400" in line]
    assert rows, out
    applied = rows[-1].split("│")[-2]
    assert "282m/288Mi" in applied, "scaled down after the prune and the delay"
    assert "objcount run exited with 0" in out
    assert not [pid for pid in _control_plane_pids() - before if _alive(pid)], (
        "the demo left processes running"
    )


def _control_plane_pids() -> set[int]:
    found = subprocess.run(
        ["pgrep", "-f", "objcount-cp-"], capture_output=True, text=True, check=False
    ).stdout.split()
    return {int(pid) for pid in found}
