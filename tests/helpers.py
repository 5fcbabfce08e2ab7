"""Helpers for tests: wait for a condition with a generous deadline instead of sleeping."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

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


def configmaps_yaml(count: int, prefix: str = "cm") -> str:
    """A multi-document YAML file of `count` ConfigMaps."""
    return "".join(
        f"---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {prefix}-{i}\n  namespace: apps\n"
        f"data:\n  key: value-{i}\n"
        for i in range(count)
    )


def write_commit(repo_root: Path, commit: str, files: dict[str, str], *, sync_dir: str = "config") -> Path:
    """Create /repo/source/<commit>/<sync_dir>/... and point the `rev` symlink at it atomically."""
    commit_dir = repo_root / "source" / commit
    for relative, text in files.items():
        path = commit_dir / sync_dir / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    link = repo_root / "source" / "rev"
    temporary = repo_root / "source" / f".rev-{commit}"
    temporary.symlink_to(commit_dir)
    os.replace(temporary, link)
    return commit_dir


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

    def close(self) -> None:
        self._stop.set()
        self.flowing.set()
        self.listener.close()
