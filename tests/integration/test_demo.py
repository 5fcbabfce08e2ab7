"""`make run` as a new user runs it: the demo drives real Config Sync through a grow-and-prune cycle, our
sidecar (added by our webhook) sizes the reconciler, and everything stops cleanly.

The reconciler, its memory cgroup and the reconciler-manager are real; the Pods' lifecycle is played by
the node harness, and the demo plays git-sync (it writes the commits)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from tests.helpers import run_module
from tests.integration.conftest import _alive

# Fitted preset, Standard (198 MiB + 0.174 MiB per object, 32 MiB steps, CPU 1m per 1.024 MiB, limits =
# requests); n = max(source, inventory), the inventory holding the implicit Namespace `demo` too:
#   100 objects: n = 101: 198 + 17.6 = 215.6 -> 224Mi; 224 x 1000 / 1024 = 218.75 -> 219m
#   800 objects: n = 801: 198 + 139.4 = 337.4 -> 352Mi; 343.75 -> 344m
#   200 objects: n = 201: 198 + 35.0 = 233.0 -> 256Mi; 250m
SIZES = {"100 objects": "219m/224Mi", "800 objects": "344m/352Mi", "200 objects": "250m/256Mi"}
LIMITS = {"100 objects": "224Mi", "800 objects": "352Mi", "200 objects": "256Mi"}
INVENTORY = {"100 objects": "101", "800 objects": "801", "200 objects": "201"}


@pytest.mark.timeout(900)
def test_demo_cycle_sizes_the_real_reconciler_up_then_down_and_stops_cleanly(
    control_plane_bin_dir: Path,
) -> None:
    result = run_module(
        "autoscaler.cli",
        "demo",
        "--once",
        "--no-live",
        bin_dir=control_plane_bin_dir,
        env={"COLUMNS": "200"},
        timeout=840,
    )
    out = result.stdout
    assert "cycle done" in out, out[-5000:]
    rows = [[cell.strip() for cell in line.split("│")[1:-1]] for line in out.splitlines() if "│" in line]
    by_phase = {
        phase: [r for r in rows if len(r) == 9 and r[1] == phase and r[2] == "synced"] for phase in SIZES
    }
    for phase, size in SIZES.items():
        assert by_phase[phase], f"no synced row for {phase}:\n{out[-5000:]}"
        *_, source, inventory, recommended, deployment, limit, _ = by_phase[phase][-1]
        assert (source, inventory) == (phase.split()[0], INVENTORY[phase])
        # What the sidecar recommended is what the reconciler-manager wrote and what the kernel enforces.
        assert (recommended, deployment, limit) == (size, size, LIMITS[phase]), (phase, out[-5000:])
    # Ahead of the work: 800 objects' size was in the Deployment before the reconciler had synced them.
    grow = [r for r in rows if len(r) == 9 and r[1] == "800 objects"]
    sized = next(i for i, r in enumerate(grow) if r[6] == SIZES["800 objects"])
    assert all(r[2] != "synced" for r in grow[: sized + 1]), out[-5000:]
    # Never down during the prune: until the reconciler reported 200 objects synced, 800's size stayed.
    prune = [r for r in rows if len(r) == 9 and r[1] == "200 objects"]
    pruning = prune[: next(i for i, r in enumerate(prune) if r[2] == "synced")]
    assert pruning, out[-5000:]
    assert {r[6] for r in pruning} == {SIZES["800 objects"]}, out[-5000:]
    assert "objcount webhook exited with 0" in out
    # etcd, the API server, the controller-manager, the node harness and its sandboxes carry the demo's
    # work directory in their command lines (the containers die with the harness: test_configsync's
    # killed-parent test); none is left. Other stacks on the machine are not the demo's.
    (work_dir,) = re.findall(r"export KUBECONFIG=(/\S+)/kubeconfig", out)
    left = subprocess.run(["pgrep", "-f", work_dir], capture_output=True, text=True, check=False).stdout
    assert not [pid for pid in map(int, left.split()) if _alive(pid)], "the demo left processes running"
