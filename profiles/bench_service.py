"""Resident memory and CPU of the running sidecar, idle and under inventory updates.

    python -m profiles.bench_service [--entries 30000] [--rate 100] [--seconds 60]

`objcount run` (sidecar mode, target `deployment`) runs as its own process against the local control
plane; this script drives the inventory from another process and reads the service's CPU time and
memory from /proc. Each update is a metadata-only patch of the ResourceGroup, so every watch event
still carries the whole inventory (as Config Sync's status updates do), at a rate kept as close to
`--rate` as the API server allows; the achieved rate is reported.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from controlplane import running_control_plane
from controlplane.configsync_install import install_rsync_crds
from controlplane.ports import free_port
from controlplane.seed import ensure_namespace, reconciler_deployment, resourcegroup, rsync
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
NAMESPACE = "bench"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS  # utime + stime


def memory_mib(pid: int, field: str) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def reset_peak(pid: int) -> None:
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def window(pid: int, seconds: float, work: object = None) -> tuple[float, float, float]:
    """(millicores, RSS MiB at the end, peak RSS MiB) over `seconds` of running `work` (or idling)."""
    reset_peak(pid)
    cpu0, began = cpu_seconds(pid), time.monotonic()
    if callable(work):
        work()
    else:
        time.sleep(seconds)
    elapsed = time.monotonic() - began
    return (cpu_seconds(pid) - cpu0) / elapsed * 1000, memory_mib(pid, "VmRSS"), memory_mib(pid, "VmHWM")


def drive_updates(
    api: kubeapi.KubeClient, key: RSyncKey, pid: int, args: argparse.Namespace
) -> tuple[int, tuple[float, float, float]]:
    """Patch the inventory's metadata at up to `--rate` per second from `--writers` threads; measure `pid`."""
    rate, seconds, writers = args.rate, args.seconds, args.writers
    sent = 0
    lock = threading.Lock()
    began = time.monotonic()

    def writer() -> None:
        nonlocal sent
        while time.monotonic() - began < seconds:
            with lock:
                number = sent
                sent += 1
            pause = began + number / rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            api.patch(
                kubeapi.RESOURCEGROUP,
                NAMESPACE,
                key.name,
                {"metadata": {"annotations": {"bench/round": str(number)}}},
            )

    def drive() -> None:
        threads = [threading.Thread(target=writer) for _ in range(writers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()

    measured = window(pid, seconds, drive)
    return sent, measured


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--entries", type=int, default=30_000)
    parser.add_argument("--rate", type=float, default=100.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--idle-seconds", type=float, default=60.0)
    parser.add_argument("--writers", type=int, default=2, help="concurrent writer threads")
    args = parser.parse_args()
    key = RSyncKey("RootSync", NAMESPACE, "root-sync")
    with running_control_plane() as plane:
        api = kubeapi.KubeClient.connect(str(plane.kubeconfig))
        install_rsync_crds(api)
        ensure_namespace(api, NAMESPACE)
        api.create(kubeapi.ROOTSYNC, NAMESPACE, rsync(key))
        api.create(kubeapi.RESOURCEGROUP, NAMESPACE, resourcegroup(key, args.entries))
        api.create(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_deployment(key, NAMESPACE))
        repo = plane.work_dir / "repo" / "source"
        (repo / "c1" / "config").mkdir(parents=True)
        (repo / "rev").symlink_to(repo / "c1")
        health = free_port()
        env = {
            **os.environ,
            "OBJCOUNT_KUBECONFIG": str(plane.kubeconfig),
            "OBJCOUNT_RSYNC_NAME": key.name,
            "OBJCOUNT_RSYNC_NAMESPACE": NAMESPACE,
            "OBJCOUNT_RECONCILER_NAMESPACE": NAMESPACE,
            "OBJCOUNT_TARGET": "deployment",
            "OBJCOUNT_SOURCE_ROOT": str(plane.work_dir / "repo"),
            "OBJCOUNT_BIND_ADDRESS": "127.0.0.1",
            "OBJCOUNT_METRICS_PORT": str(free_port()),
            "OBJCOUNT_HEALTH_PORT": str(health),
            "OBJCOUNT_LOG_LEVEL": "WARNING",
        }
        service = subprocess.Popen([sys.executable, "-m", "autoscaler.cli", "run"], env=env)
        try:
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{health}/readyz", timeout=1) as response:
                        if response.status == 200:
                            break
                except OSError:
                    time.sleep(0.2)
            time.sleep(5)  # let the first reconcile settle
            idle = window(service.pid, args.idle_seconds)
            sent, loaded = drive_updates(api, key, service.pid, args)
        finally:
            service.send_signal(signal.SIGTERM)
            code = service.wait(60)
    print(f"sidecar with a {args.entries:,}-entry inventory (exit code {code} after SIGTERM):")
    print("| phase | CPU | RSS at the end | peak RSS |\n|---|---|---|---|")
    print(
        f"| idle, {args.idle_seconds:.0f} s | {idle[0]:.1f} millicores | {idle[1]:.1f} MiB"
        f" | {idle[2]:.1f} MiB |"
    )
    print(
        f"| {sent / args.seconds:.1f} updates/s achieved ({args.rate:.0f} asked, {args.writers} writers),"
        f" {args.seconds:.0f} s "
        f"| {loaded[0]:.0f} millicores | {loaded[1]:.1f} MiB | {loaded[2]:.1f} MiB |"
    )


if __name__ == "__main__":
    main()
