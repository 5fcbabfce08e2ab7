"""The Config Sync releases the stack builds: one list of pins, read alike by the build script, the
Python side and CI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from controlplane.configsync_build import BUILD_SCRIPT, DEFAULT_VERSION, PINS, VERSIONS

REPO = Path(__file__).resolve().parents[2]


def test_the_newest_release_is_the_default_and_v1_22_0_is_kept() -> None:
    assert VERSIONS == ("v1.24.3", "v1.22.0")
    assert DEFAULT_VERSION == "v1.24.3"


def test_each_pin_names_its_commit_module_archive_and_sha256() -> None:
    rows = [line.split() for line in PINS.read_text().splitlines() if line.strip() and line[0] != "#"]
    assert {row[0]: (row[2], row[4]) for row in rows} == {
        "v1.24.3": ("github.com/GoogleContainerTools/config-sync", "configsync-v1.24.3-src.tar.xz"),
        "v1.22.0": ("kpt.dev/configsync", "configsync-v1.22.0-src.tar.xz"),
    }
    for row in rows:
        assert len(row) == 6, row
        assert re.fullmatch("[0-9a-f]{40}", row[1]), "a full commit"
        assert re.fullmatch("[0-9a-f]{64}", row[5]), "a sha256"


def test_ci_checks_every_pinned_archive_and_hands_them_to_the_build() -> None:
    ci = (REPO / ".ci" / "run").read_text()
    assert "controlplane/configsync-pins | sha256sum --check -" in ci
    assert "export OBJCOUNT_CONFIGSYNC_ARCHIVES" in ci
    assert ci.rstrip().endswith("make test")


def test_the_build_refuses_a_version_not_pinned_before_building_anything() -> None:
    result = subprocess.run(
        ["bash", str(BUILD_SCRIPT), "v1.99.0"], capture_output=True, text=True, check=False, timeout=30
    )
    assert result.returncode == 1
    assert "Config Sync v1.99.0 is not pinned" in result.stderr
    assert "v1.24.3 v1.22.0" in result.stderr
    assert result.stdout == ""
