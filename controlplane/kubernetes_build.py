"""Kubernetes' pinned releases (`kubernetes-pins`) and the build of each one's binaries (`build.sh`):
kube-apiserver, kube-controller-manager, kube-scheduler, kubelet, kube-proxy, kubectl and the etcd it
pins, each release from its own wrapper module (`go/VERSION/go.mod`), built once and cached.

`OBJCOUNT_KUBERNETES_VERSION` chooses the release this process builds and runs (`VERSION`): the default,
the first pin, or another pinned one by name. `OBJCOUNT_CP_BIN_DIR` names binaries built already (of the
default release): nothing is built then.
"""

from __future__ import annotations

import os
from pathlib import Path

from controlplane.builds import given_or_built, run_build_script
from controlplane.errors import ControlPlaneError

BUILD_SCRIPT = Path(__file__).with_name("build.sh")
PINS = Path(__file__).with_name("kubernetes-pins")


def pinned_versions(pins: Path = PINS) -> dict[str, str]:
    """The Kubernetes releases pinned (the first is the default), as build.sh reads them, each with what CI
    runs on it: `all`, `floor` (the tests marked kubernetes_floor) or `none` (built only when named)."""
    lines = (line.split() for line in pins.read_text().splitlines() if line.strip())
    return {fields[0]: fields[2] for fields in lines if not fields[0].startswith("#")}


PINNED = pinned_versions()
VERSIONS = tuple(PINNED)
DEFAULT_VERSION = VERSIONS[0]
# The older releases the named subset runs on too (the oldest that users run and we still test).
FLOORS = tuple(version for version, tests in PINNED.items() if tests == "floor")
# The version this process builds and runs: the default, or another pinned one by name.
VERSION = os.environ.get("OBJCOUNT_KUBERNETES_VERSION") or DEFAULT_VERSION
if VERSION not in VERSIONS:
    raise ControlPlaneError(
        f"OBJCOUNT_KUBERNETES_VERSION={VERSION} is not pinned in {PINS} (pinned: {', '.join(VERSIONS)})"
    )


def build_binaries(version: str = VERSION) -> Path:
    """Build or reuse the binaries of Kubernetes `version` (pinned); the directory holding them."""
    if version not in VERSIONS:
        raise ControlPlaneError(f"Kubernetes {version} is not pinned in {PINS}")
    if version == VERSION:
        return given_or_built("OBJCOUNT_CP_BIN_DIR", BUILD_SCRIPT, f"Kubernetes {version}")
    return run_build_script(BUILD_SCRIPT, f"Kubernetes {version}", "", version)
