"""Run the stack's build scripts (`build*.sh` beside this module): each builds or reuses one cached
entry of pinned binaries and prints its directory last."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from controlplane.errors import ControlPlaneError


def run_build_script(script: Path, what: str, hint: str = "", *args: str) -> Path:
    """Run one of the build scripts with `args`, which builds or reuses a cache entry and prints its
    directory last (its progress goes to standard error, shown as it comes); that directory."""
    result = subprocess.run(
        ["bash", str(script), *args], stdout=subprocess.PIPE, stderr=None, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"building {what} failed (exit {result.returncode}); see above.{hint}")
    return Path(result.stdout.strip().splitlines()[-1])


def given_or_built(variable: str, script: Path, what: str) -> Path:
    """The directory the environment variable `variable` names (binaries built already: no build), else
    the one `script` builds or reuses."""
    given = os.environ.get(variable)
    return Path(given) if given else run_build_script(script, what)
