"""`make run` as a new user runs it: the demo goes through a grow-and-prune cycle and cleans up."""

from __future__ import annotations

import subprocess
from pathlib import Path

from autoscaler.policy import size
from autoscaler.settings import Settings
from tests.helpers import run_module
from tests.integration.conftest import _alive

DEFAULT_PROFILE = Settings(mode="cluster").profile()


def test_demo_cycle_scales_up_then_down_and_stops_cleanly(control_plane_bin_dir: Path) -> None:
    before = _control_plane_pids()
    result = run_module(
        "autoscaler.cli", "demo", "--once", "--no-live", bin_dir=control_plane_bin_dir, env={"COLUMNS": "140"}
    )
    out = result.stdout
    big, small = size(5000, DEFAULT_PROFILE), size(400, DEFAULT_PROFILE)
    assert f"{big.cpu_request_m}m/{big.memory_request_mib}Mi" in out, "scaled up for 5,000 objects"
    rows = [line for line in out.splitlines() if "src 400 / inv 400" in line]
    assert rows, out
    applied = rows[-1].split("│")[-2]
    assert f"{small.cpu_request_m}m/{small.memory_request_mib}Mi" in applied, (
        "scaled down after the prune and the delay"
    )
    assert "objcount run exited with 0" in out
    assert not [pid for pid in _control_plane_pids() - before if _alive(pid)], (
        "the demo left processes running"
    )


def _control_plane_pids() -> set[int]:
    found = subprocess.run(
        ["pgrep", "-f", "objcount-cp-"], capture_output=True, text=True, check=False
    ).stdout.split()
    return {int(pid) for pid in found}
