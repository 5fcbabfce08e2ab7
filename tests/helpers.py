"""Helpers for tests: wait for a condition with a generous deadline instead of sleeping."""

from __future__ import annotations

import contextlib
import json
import math
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from fractions import Fraction
from pathlib import Path
from typing import Generic, TypeVar

import yaml

from autoscaler.core.size_decision import SizeDecision
from autoscaler.service.controller import Controller
from controlplane.ports import free_port
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi

T = TypeVar("T")


# How long each wait whose description starts with "recovery" took (printed at the end of the run).
RECOVERIES: list[tuple[str, float, float]] = []
# Figures a test measured on the way (what, seconds), printed at the end of the run; never asserted on.
FIGURES: list[tuple[str, float]] = []
# What a test observed and reports without asserting it (one line each), printed at the end of the run.
OBSERVED: list[str] = []
NODE_STARTUP = (
    "real node: stack start (sandbox, control plane, kubelet, containerd, images imported) to a Ready Node"
)

# The release the tests make (`make release VERSION=... IMAGE=...`): a registry of no one's, never reached.
RELEASE_VERSION = "0.1.0-test"
RELEASE_REPOSITORY = "registry.example/platform/objcount-autoscaler"
Shell = Callable[..., str]  # the `shell` fixture: (commands, check=True) -> standard output


def wait_for(
    probe: Callable[[], T],
    *,
    timeout: float = 30.0,
    interval: float = 0.05,
    what: str = "",
    explain: Callable[[], str] | None = None,
) -> T:
    """Poll `probe` until it returns something truthy; fail with the last value after `timeout` seconds,
    and with what `explain` says then (a log read at the timeout, not before the wait)."""
    began = time.monotonic()
    deadline = began + timeout
    last: T = probe()
    while not last:
        if time.monotonic() > deadline:
            seen = f"\n{explain()}" if explain else ""
            raise AssertionError(
                f"timed out after {timeout}s waiting for {what or probe}; last value: {last!r}{seen}"
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
    module: str, *args: str, bin_dir: Path, env: dict[str, str] | None = None, timeout: float = 300
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
        timeout=timeout,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    return result


class Service:
    """`objcount run` in a subprocess (under `wrapper`, a command it is an argument of, if given)."""

    def __init__(self, env: dict[str, str], log: Path, wrapper: Sequence[str] = ()) -> None:
        self.metrics_port, self.health_port = free_port(), free_port()
        self.log = log
        full_env = {
            **os.environ,
            "OBJCOUNT_BIND_ADDRESS": "127.0.0.1",
            "OBJCOUNT_METRICS_PORT": str(self.metrics_port),
            "OBJCOUNT_HEALTH_PORT": str(self.health_port),
            "OBJCOUNT_LOG_FORMAT": "json",
            **env,
        }
        with log.open("wb") as out:
            self.process = subprocess.Popen(
                [*wrapper, sys.executable, "-m", "autoscaler.cli", "run"],
                cwd=REPO,
                env=full_env,
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    def get(self, path: str) -> tuple[int, str]:
        port = self.metrics_port if path == "/metrics" else self.health_port
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            return error.code, error.read().decode()
        except OSError:
            return 0, ""

    def metric(self, line_start: str) -> float:
        status, text = self.get("/metrics")
        values = [float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start)]
        return sum(values) if status == 200 else -1.0

    def stop(self, sig: int = signal.SIGTERM) -> int:
        if self.process.poll() is None:
            self.process.send_signal(sig)
        return self.process.wait(60)

    def logs(self) -> list[dict[str, object]]:
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.startswith("{")]


class Sampler(Generic[T]):
    """Calls `probe` every `interval` seconds in a thread and keeps what it returns, until `stop()`.

    An exception other than `tolerate` ends the sampling and is raised again by `stop()`, so a dead
    sampler can never make a test pass on the samples it did not take.
    """

    def __init__(
        self, probe: Callable[[], T], *, interval: float = 0.02, tolerate: tuple[type[Exception], ...] = ()
    ) -> None:
        self.values: list[T] = []
        self._probe, self._interval, self._tolerate = probe, interval, tolerate
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            while not self._stop.is_set():
                with contextlib.suppress(*self._tolerate):
                    self.values.append(self._probe())
                self._stop.wait(self._interval)
        except BaseException as error:
            self._error = error

    def stop(self) -> list[T]:
        self._stop.set()
        self._thread.join(30)
        if self._error is not None:
            raise AssertionError(f"the sampler died: {self._error!r}") from self._error
        assert not self._thread.is_alive(), "the sampler did not stop"
        assert self.values, "nothing was sampled"
        return self.values


def never_lowered(memory: list[int | None]) -> None:
    """A recommendation (MiB) in every sample, never lower than the one before."""
    assert None not in memory, "a recommendation all along"
    assert memory == sorted(memory, key=lambda mib: mib or 0), "no recommendation lowered"


def kib(*manifests: str) -> int:
    """KiB of these manifests, rounded up (what the service records as `objcount.dev/source-kib`)."""
    return -(-sum(len(text.encode()) for text in manifests) // 1024)


def legacy_count(api: kubeapi.KubeClient) -> int:
    """Resource types (no subresources) of the core group and of every group's preferred version."""
    core = api.request_json("GET", "/api/v1")["resources"]
    total = sum("/" not in r["name"] for r in core)
    for group in api.request_json("GET", "/apis")["groups"]:
        listing = api.request_json("GET", f"/apis/{group['preferredVersion']['groupVersion']}")
        total += sum("/" not in r["name"] for r in listing["resources"])
    return total


def size_aware_by_hand(
    *, configmaps: int, others: int, kib: float, api_resources: int, named: int = 0
) -> tuple[str, str]:
    """The default (size-aware) preset on Standard, written out by hand from its documented constants:
    96 MiB + 0.053 MiB per ConfigMap + 0.1183 MiB and 360 Pod-template path steps at 0.0002928 MiB per
    object of no known kind (`others`) + 0.0667 MiB per object of a kind named without a cost of its own
    (`named`: a Namespace in an inventory) + 0.0082 MiB per KiB of manifests + 0.5237 MiB per resource
    type served beyond 79, rounded up to 32 MiB, no memory
    limit; CPU 32m + 0.052m per object, rounded up (at least 10m), no CPU limit. `kib` is what the service
    sizes from: the source's KiB scaled to the objects sized (rounded up), or 2 KiB per object where the
    source is not read. Returns (CPU request, memory request) as quantities."""
    raw = (
        Fraction(96)
        + Fraction("0.053") * configmaps
        + (Fraction("0.1183") + Fraction("0.0002928") * 360) * others
        + Fraction("0.0667") * named
        + Fraction("0.0082") * Fraction(kib)
        + Fraction("0.5237") * max(0, api_resources - 79)
    )
    memory = -(-math.ceil(raw) // 32) * 32
    cpu = max(math.ceil(32 + Fraction("0.052") * (configmaps + others + named)), 10)
    return f"{cpu}m", f"{memory}Mi"


def alive(pid: int) -> bool:
    """The process exists and is not a zombie (a zombie is gone for our purposes)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):  # gone between the two reads (CI saw the second)
        return False


def network_namespaces_in_use() -> set[str]:
    """Every network namespace some process of the machine is in."""
    links = set()
    for link in Path("/proc").glob("[0-9]*/ns/net"):
        with contextlib.suppress(OSError):
            links.add(os.readlink(link))
    return links


def decisions(controller: Controller) -> dict[RSyncKey, SizeDecision]:
    """The last decision the controller's executor keeps per RSync."""
    states = dict(controller.executor.states)
    return {key: state.decision for key, state in states.items() if state.decision is not None}


def built_by_make() -> list[list[str]]:
    """What `make binaries` builds: build_all.sh's list, a build a line (name, script, arguments)."""
    listed = subprocess.run(
        ["bash", str(REPO / "controlplane" / "build_all.sh"), "--list"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    return [line.split() for line in listed.stdout.splitlines()]
