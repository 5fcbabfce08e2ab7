"""`make run` on a machine without Go stops before anything is installed or built, saying what to install
(controlplane/doctor.py, run first by the Makefile). It runs in a network namespace of its own with no
network: the doctor's registry checks answer "unreachable" there, and nothing leaves the machine."""

from __future__ import annotations

import os
import shutil
import subprocess

from controlplane.seed import REPO_ROOT


def test_make_run_without_go_stops_before_any_build_saying_what_to_install() -> None:
    without_go = os.pathsep.join(
        d for d in os.environ["PATH"].split(os.pathsep) if d and shutil.which("go", path=d) is None
    )
    assert shutil.which("go", path=without_go) is None
    assert shutil.which("make", path=without_go) is not None
    done = subprocess.run(
        ["unshare", "--net", "make", "run"],
        cwd=REPO_ROOT,
        env={**os.environ, "PATH": without_go},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode != 0, done.stdout + done.stderr
    assert "doctor: no `go` on PATH: install Go 1." in done.stderr, done.stderr
    assert "-m venv" not in done.stdout, done.stdout
    assert "pip install" not in done.stdout, done.stdout
