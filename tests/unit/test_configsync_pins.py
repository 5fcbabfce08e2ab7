"""The Config Sync releases the stack builds: one list of pins, read alike by the build script, the
Python side and CI."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from controlplane.configsync_build import BUILD_SCRIPT, DEFAULT_VERSION, PINS, TESTED, VERSIONS
from tests.helpers import built_by_make

REPO = Path(__file__).resolve().parents[2]


def test_v1_25_0_is_the_default_and_v1_24_3_and_v1_22_0_are_kept_out_of_ci() -> None:
    assert VERSIONS == ("v1.25.0", "v1.24.3", "v1.22.0")
    assert DEFAULT_VERSION == "v1.25.0"
    assert TESTED == ("v1.25.0",)


def test_each_pin_names_its_commit_module_archive_both_sums_and_what_is_tested_on_it() -> None:
    rows = [line.split() for line in PINS.read_text().splitlines() if line.strip() and line[0] != "#"]
    assert {row[0]: (row[2], row[4], row[6]) for row in rows} == {
        "v1.25.0": ("github.com/GoogleContainerTools/config-sync", "configsync-v1.25.0-src.tar.xz", "all"),
        "v1.24.3": ("github.com/GoogleContainerTools/config-sync", "configsync-v1.24.3-src.tar.xz", "none"),
        "v1.22.0": ("kpt.dev/configsync", "configsync-v1.22.0-src.tar.xz", "none"),
    }
    for row in rows:
        assert len(row) == 8, row
        assert re.fullmatch("[0-9a-f]{40}", row[1]), "a full commit"
        assert re.fullmatch("[0-9a-f]{64}", row[5]), "the archive's sha256"
        assert re.fullmatch("[0-9a-f]{64}", row[7]), "its content's (controlplane/sources.py)"
    # The sha256 of v1.25.0's archive as ../shared/configsync/README.md gives it.
    assert rows[0][5] == "c3060d2be09819e2972224454e11fa6d6ddea583ad8ca50f0b07c75a2c657711"


def test_make_builds_only_the_tested_releases() -> None:
    result = subprocess.run(
        ["awk", '!/^#/ && NF && $7 != "none" { print $1 }', str(PINS)],
        capture_output=True,
        text=True,
        check=True,
    )
    assert result.stdout.split() == ["v1.25.0"]
    assert [b for b in built_by_make() if b[1] == "build_configsync.sh"] == [
        ["configsync-v1.25.0", "build_configsync.sh", "v1.25.0"],
    ]


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
    assert "v1.25.0 v1.24.3 v1.22.0" in result.stderr
    assert result.stdout == ""
