"""One process of the stack, on the host or inside the sandbox (the real node's namespaces): started
with its output in a log file, stopped (SIGTERM, then SIGKILL after a grace period), its log's tail read.

A process started on the host gets the kernel's parent-death signal (SIGKILL) so it never outlives the
Python process that started it, even one killed by SIGKILL; one started inside the sandbox is the
sandbox's to stop (`Sandbox.popen`). SIGKILL, not SIGTERM: a dead parent cannot stop them in order, and
v1.37.2's API server, sent SIGTERM as its etcd went, waited in its graceful shutdown for over 90 s.
"""

from __future__ import annotations

import contextlib
import subprocess
from dataclasses import dataclass
from pathlib import Path

from controlplane.sandbox import Sandbox, SandboxProcess, die_with_parent


@dataclass
class Process:
    """A process of the stack: on the host, or inside `sandbox` (the real node's namespaces)."""

    name: str
    argv: list[str]
    log_path: Path
    sandbox: Sandbox | None = None
    env: dict[str, str] | None = None
    popen: subprocess.Popen[bytes] | None = None
    inside: SandboxProcess | None = None
    last_pid: int | None = None

    def start(self) -> None:
        if self.sandbox is not None:
            self.inside = self.sandbox.popen(self.argv, self.log_path, self.env)
            self.popen = self.inside.outer
            self.last_pid = self.inside.pid
            return
        log = self.log_path.open("ab")
        try:
            self.popen = subprocess.Popen(
                self.argv,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                preexec_fn=die_with_parent,  # noqa: PLW1509 - started from the owning thread only
            )
        finally:
            log.close()
        self.last_pid = self.popen.pid

    def running(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def stop(self, grace: float = 10.0) -> None:
        if self.popen is None:
            return
        if self.inside is not None:
            self.inside.stop(grace)
        elif self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(grace)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait()
        self.popen = None
        self.inside = None

    def log_tail(self, lines: int = 30) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""
