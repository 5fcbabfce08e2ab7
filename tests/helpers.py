"""Helpers for tests: wait for a condition with a generous deadline instead of sleeping."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import yaml

T = TypeVar("T")


# How long each wait whose description starts with "recovery" took (printed at the end of the run).
RECOVERIES: list[tuple[str, float, float]] = []


def wait_for(probe: Callable[[], T], *, timeout: float = 30.0, interval: float = 0.05, what: str = "") -> T:
    """Poll `probe` until it returns something truthy; fail with the last value after `timeout` seconds."""
    began = time.monotonic()
    deadline = began + timeout
    last: T = probe()
    while not last:
        if time.monotonic() > deadline:
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or probe}; last value: {last!r}"
            )
        time.sleep(interval)
        last = probe()
    if what.startswith("recovery"):
        RECOVERIES.append((what, time.monotonic() - began, timeout))
    return last


class FreezableProxy:
    """A TCP proxy on loopback whose traffic can be frozen, to make a watch stream go silent."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.flowing = threading.Event()
        self.flowing.set()
        self._stop = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port: int = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self.listener.accept()
            except OSError:
                return
            upstream = socket.create_connection(("127.0.0.1", self.upstream_port))
            for source, sink in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    def _pump(self, source: socket.socket, sink: socket.socket) -> None:
        while not self._stop.is_set():
            self.flowing.wait()
            try:
                data = source.recv(65536)
                if not data:
                    break
                self.flowing.wait()  # hold what arrived while frozen
                sink.sendall(data)
            except OSError:
                break
        for end in (source, sink):
            with contextlib.suppress(OSError):
                end.close()

    def kubeconfig(self, through: Path, path: Path) -> Path:
        """A copy of the kubeconfig `through` that reaches its API server by this proxy."""
        config = yaml.safe_load(through.read_text())
        config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{self.port}"
        path.write_text(yaml.safe_dump(config))
        return path

    def close(self) -> None:
        self._stop.set()
        self.flowing.set()
        self.listener.close()


REPO = Path(__file__).resolve().parent.parent


def run_module(
    module: str, *args: str, bin_dir: Path, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`python -m module args` from the repository, on the cached control plane binaries; fails the test on
    a non-zero exit with the end of its standard error."""
    full_env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"} | {
        "OBJCOUNT_CP_BIN_DIR": str(bin_dir)
    }
    result = subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=REPO,
        env=full_env | (env or {}),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result
