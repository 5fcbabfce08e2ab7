"""The git server of the real node's network: `git daemon` inside the stack's sandbox.

Each RSync of a test reads a repository of its own, `git://NODE_IP/<name>`. Tests write commits with
`git` into that repository (a plain working repository: `git daemon` serves its `.git`); git-sync in the
reconciler Pod fetches them over the Pods' network, as from any git host.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from controlplane.errors import ControlPlaneError
from controlplane.process import Process
from controlplane.sandbox import NODE_IP, Sandbox

GIT_PORT = 9418
BRANCH = "main"
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")
# Commits of the suite, not of whoever runs it.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "objcount tests",
    "GIT_AUTHOR_EMAIL": "tests@objcount.invalid",
    "GIT_COMMITTER_NAME": "objcount tests",
    "GIT_COMMITTER_EMAIL": "tests@objcount.invalid",
}


@dataclass
class GitServer:
    sandbox: Sandbox
    root: Path
    _daemon: Process | None = None
    _env: dict[str, str] = field(default_factory=dict)

    def start(self) -> GitServer:
        self.root.mkdir(parents=True, exist_ok=True)
        self._daemon = Process(
            "git-daemon",
            [
                "git",
                "daemon",
                "--reuseaddr",
                "--export-all",
                f"--base-path={self.root}",
                f"--listen={NODE_IP}",
                f"--port={GIT_PORT}",
                "--informative-errors",
                str(self.root),
            ],
            self.root.parent / "git-daemon.log",
            sandbox=self.sandbox,
        )
        self._daemon.start()
        deadline = time.monotonic() + 20
        while not self._listening():
            if not self._daemon.running() or time.monotonic() > deadline:
                raise ControlPlaneError(f"git daemon did not start:\n{self._daemon.log_tail()}")
            time.sleep(0.1)
        return self

    def _listening(self) -> bool:
        try:
            self.sandbox.connect(NODE_IP, GIT_PORT, timeout=1).close()
        except OSError:
            return False
        return True

    def stop(self) -> None:
        if self._daemon is not None:
            self._daemon.stop()

    def url(self, name: str) -> str:
        return f"git://{NODE_IP}/{name}"

    def repository(self, name: str) -> Path:
        """The working repository `name` (made on first use, on branch `main`)."""
        if not _NAME.match(name):
            raise ValueError(f"not a repository name: {name!r}")
        path = self.root / name
        if not (path / ".git").is_dir():
            path.mkdir(parents=True, exist_ok=True)
            self._git(path, "init", "--quiet", f"--initial-branch={BRANCH}")
        return path

    def commit(self, name: str, files: Mapping[str, str | None], message: str = "test commit") -> str:
        """Write `files` (path -> text; None removes the path), commit them all, return the commit."""
        path = self.repository(name)
        for relative, text in files.items():
            target = path / relative
            if text is None:
                self._git(path, "rm", "-r", "--quiet", "--ignore-unmatch", relative)
                continue
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self._git(path, "add", "--all")
        self._git(path, "commit", "--quiet", "--allow-empty", "-m", message)
        return self._git(path, "rev-parse", "HEAD").strip()

    def _git(self, path: Path, *args: str) -> str:
        result = subprocess.run(
            ["git", "-C", str(path), *args],
            capture_output=True,
            text=True,
            check=False,
            env={"PATH": "/usr/bin:/bin", "HOME": str(self.root), **_IDENTITY},
        )
        if result.returncode != 0:
            raise ControlPlaneError(f"git {' '.join(args)} in {path} failed: {result.stderr}")
        return result.stdout
