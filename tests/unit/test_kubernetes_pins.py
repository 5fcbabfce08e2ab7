"""The Kubernetes releases the stack builds: one list of pins, read alike by the build script, the Python
side, the Makefile and the suite's markers."""

from __future__ import annotations

import subprocess
from pathlib import Path

from controlplane.kubernetes_build import BUILD_SCRIPT, DEFAULT_VERSION, FLOORS, PINS, VERSIONS
from tests.helpers import built_by_make

REPO = Path(__file__).resolve().parents[2]


def test_v1_37_2_is_the_default_and_v1_34_4_pinned_out_of_ci() -> None:
    assert VERSIONS == ("v1.37.2", "v1.34.4")
    assert DEFAULT_VERSION == "v1.37.2"
    assert FLOORS == ()


def test_each_pin_has_its_wrapper_module_requiring_that_release_and_the_etcd_it_names() -> None:
    rows = [line.split() for line in PINS.read_text().splitlines() if line.strip() and line[0] != "#"]
    for version, etcd, _tests in rows:
        go_mod = (REPO / "controlplane" / "go" / version / "go.mod").read_text()
        required = dict(
            line.split()[:2] for line in go_mod.splitlines() if line.startswith("\t") and " v" in line
        )
        assert required["k8s.io/kubernetes"] == version
        assert required["go.etcd.io/etcd/server/v3"] == etcd
        # Every staging module replaced at the release's v0.Y.Z (their go.mod files require v0.0.0).
        minor = version.split(".")[1]
        for line in go_mod.splitlines():
            if " => k8s.io/" in line:
                assert line.split()[-1] == f"v0.{minor}.{version.split('.')[2]}", line


def test_make_builds_every_release_ci_tests_and_not_one_pinned_out_of_it() -> None:
    assert "bash controlplane/build_all.sh" in (REPO / "Makefile").read_text()
    builds = built_by_make()
    assert [b for b in builds if b[1] == "build.sh"] == [["kubernetes-v1.37.2", "build.sh", "v1.37.2"]]


def test_the_build_refuses_a_version_not_pinned_before_building_anything() -> None:
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "v1.99.0"], capture_output=True, text=True, check=False, timeout=30
    )
    assert result.returncode == 2
    assert "Kubernetes v1.99.0 is not pinned" in result.stderr
