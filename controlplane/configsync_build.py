"""Config Sync's pinned releases (`configsync-pins`) and the builds of what its Pods run: its
`reconciler` and `reconciler-manager` (`build_configsync.sh`), git-sync (`build_gitsync.sh`) and the
OpenTelemetry Collector (`build_otelcol.sh`), each built once from its pinned source and cached.

`OBJCOUNT_CONFIGSYNC_VERSION` chooses the release this process builds and runs (`VERSION`): the default,
the first pin, or another pinned one by name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from controlplane.builds import run_build_script
from controlplane.errors import ControlPlaneError

BUILD_SCRIPT = Path(__file__).with_name("build_configsync.sh")
GIT_SYNC_BUILD_SCRIPT = Path(__file__).with_name("build_gitsync.sh")
OTELCOL_BUILD_SCRIPT = Path(__file__).with_name("build_otelcol.sh")
REFLECTORS_BUILD_SCRIPT = Path(__file__).with_name("build_reflectors.sh")
PINS = Path(__file__).with_name("configsync-pins")
# Where a build's source comes from, said when it fails (controlplane/sources.py).
SOURCE_HINT = " The source comes from its archive (OBJCOUNT_*_ARCHIVES, else ../shared), else its repository."


def pinned_versions(pins: Path = PINS) -> dict[str, str]:
    """The Config Sync releases pinned (the first is the default), as build_configsync.sh reads them, each
    with what CI tests on it: `all`, `subset` (the tests marked both_versions) or `none`."""
    lines = (line.split() for line in pins.read_text().splitlines() if line.strip())
    return {fields[0]: fields[6] for fields in lines if not fields[0].startswith("#")}


PINNED = pinned_versions()
VERSIONS = tuple(PINNED)
# The releases the suite runs (`make binaries` and `make images` build them): the default, every test;
# the others, the tests marked both_versions. A release pinned with `none` is built only when named.
TESTED = tuple(version for version, tests in PINNED.items() if tests != "none")
DEFAULT_VERSION = VERSIONS[0]
# The version this process builds and runs: the default, or another pinned one by name.
VERSION = os.environ.get("OBJCOUNT_CONFIGSYNC_VERSION") or DEFAULT_VERSION
if VERSION not in VERSIONS:
    raise ControlPlaneError(
        f"OBJCOUNT_CONFIGSYNC_VERSION={VERSION} is not pinned in {PINS} (pinned: {', '.join(VERSIONS)})"
    )


@dataclass(frozen=True)
class ConfigSyncBuild:
    """A cache entry of build_configsync.sh: `bin/reconciler`, `bin/reconciler-manager`, `manifests/`,
    and `PIN` (the release it was built from)."""

    root: Path

    @property
    def version(self) -> str:
        pin = dict(line.split(" ", 1) for line in (self.root / "PIN").read_text().splitlines() if " " in line)
        return pin["version"]

    @property
    def reconciler(self) -> Path:
        return self.root / "bin" / "reconciler"

    @property
    def reconciler_manager(self) -> Path:
        return self.root / "bin" / "reconciler-manager"

    @property
    def manifests(self) -> Path:
        return self.root / "manifests"


def build_configsync(version: str = VERSION) -> ConfigSyncBuild:
    """Build or reuse one pinned release's binaries (`OBJCOUNT_CS_DIR` names a ready cache entry to use
    instead, for the release it was built from)."""
    cached = os.environ.get("OBJCOUNT_CS_DIR")
    if cached and ConfigSyncBuild(Path(cached)).version == version:
        return ConfigSyncBuild(Path(cached))
    return ConfigSyncBuild(run_build_script(BUILD_SCRIPT, f"Config Sync {version}", SOURCE_HINT, version))


def build_git_sync() -> Path:
    """Build or reuse the pinned git-sync (`gitsync-pin`); the directory holding `git-sync`."""
    return run_build_script(GIT_SYNC_BUILD_SCRIPT, "git-sync", SOURCE_HINT)


def build_reflectors() -> Path:
    """Build or reuse `reflectors` (client-go's informers with their defaults, against the client-go of
    the default release): the API-fault tests' yardstick. The path of the binary."""
    built = run_build_script(REFLECTORS_BUILD_SCRIPT, "reflectors", SOURCE_HINT, DEFAULT_VERSION)
    return built / "bin" / "reflectors"


def build_otelcol() -> Path:
    """Build or reuse the OpenTelemetry Collector of Config Sync's Pods; the directory holding
    `otelcontribcol`."""
    return run_build_script(OTELCOL_BUILD_SCRIPT, "the OpenTelemetry Collector")
