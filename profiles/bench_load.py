"""Load: many RSyncs in cluster mode.

    python -m profiles.bench_load [--rsyncs 1000] [--objects 100] [--big 3] [--big-objects 30000]
                                  [--rate 100] [--seconds 60] [--target in-place]

On the local control plane: `--rsyncs` RepoSyncs with inventories of `--objects` entries (in 20
namespaces) plus `--big` with `--big-objects` entries (the largest a real API server stores is about
30,000), then `objcount run` in cluster mode with `--target` (the shipped `in-place` by default: this
control plane has no node, so no reconciler Pod exists and each size is recorded on the RSync for the
next Pod's admission, after the Pods are listed; `recommend` writes the recommendation alone).
Measured: the time from the service's start to every RSync having its sync count and a recommendation
(first full reconcile), the service's memory once settled, and, while other processes change random
inventories at `--rate` per second for `--seconds`, the lag from each change to its count in the RSync
status (seen by a watch).
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time
import urllib.request

import orjson

from autoscaler.core.annotations import RECOMMENDED_ANNOTATION, restored_counts
from controlplane import running_control_plane
from controlplane.configsync_install import install_rsync_crds
from controlplane.ports import free_port
from controlplane.seed import ensure_namespace, resourcegroup, rsync
from inventory.core.ids import RSyncKey
from inventory.core.objects import annotations_of
from inventory.kube import kubeapi
from profiles.bench_latency import percentile
from profiles.bench_service import cpu_seconds, memory_mib

NAMESPACES = 20


class StatusWatch:
    """Records when each (RSync, sync count) first appears in the RSyncs' status, and recommendations."""

    def __init__(self, api: kubeapi.KubeClient) -> None:
        self.api = api
        self.first_seen: dict[tuple[str, int], float] = {}
        self.recommended: set[str] = set()
        self.counted: set[str] = set()
        self.lock = threading.Lock()
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        listed = orjson.loads(self.api.list_page(kubeapi.REPOSYNC, None, limit=5000))
        for item in listed["items"]:
            self._record(item)
        stream = self.api.watch(
            kubeapi.REPOSYNC,
            None,
            resource_version=listed["metadata"]["resourceVersion"],
            server_timeout=3600,
            inactivity_timeout=3600,
        )
        try:
            for line in stream:
                self._record(orjson.loads(line)["object"])
        except kubeapi.Transient:
            return  # the control plane stopped

    def _record(self, obj: dict[str, object]) -> None:
        metadata = obj.get("metadata") or {}
        assert isinstance(metadata, dict)
        name = f"{metadata.get('namespace')}/{metadata.get('name')}"
        count = restored_counts(obj).sync
        now = time.monotonic()
        with self.lock:
            if isinstance(count, int):
                self.first_seen.setdefault((name, count), now)
                self.counted.add(name)
            if RECOMMENDED_ANNOTATION in annotations_of(obj):
                self.recommended.add(name)


def seed(api: kubeapi.KubeClient, rsyncs: int, entries: int, big: int, big_entries: int) -> list[RSyncKey]:
    """`rsyncs` RepoSyncs with `entries`-entry inventories and `big` more with `big_entries`, spread over
    NAMESPACES namespaces; their keys, the big ones last."""
    keys = [RSyncKey("RepoSync", f"load-{i % NAMESPACES}", f"sync-{i}") for i in range(rsyncs + big)]
    for n in range(NAMESPACES):
        ensure_namespace(api, f"load-{n}")
    for i, key in enumerate(keys):
        api.create(kubeapi.REPOSYNC, key.namespace, rsync(key))
        count = big_entries if i >= rsyncs else entries
        api.create(kubeapi.RESOURCEGROUP, key.namespace, resourcegroup(key, count))
    return keys


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rsyncs", type=int, default=1000)
    parser.add_argument("--objects", type=int, default=100)
    parser.add_argument("--big", type=int, default=3)
    parser.add_argument("--big-objects", type=int, default=30_000)
    parser.add_argument("--rate", type=float, default=100)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument("--writers", type=int, default=4)
    parser.add_argument("--target", choices=["in-place", "recommend"], default="in-place")
    args = parser.parse_args()
    with running_control_plane() as plane:
        api = kubeapi.KubeClient.connect(str(plane.kubeconfig))
        install_rsync_crds(api)
        began = time.monotonic()
        keys = seed(api, args.rsyncs, args.objects, args.big, args.big_objects)
        print(f"created {len(keys)} RSyncs and inventories in {time.monotonic() - began:.0f} s")
        watch = StatusWatch(kubeapi.KubeClient.connect(str(plane.kubeconfig)))
        health = free_port()
        env = {
            **os.environ,
            "OBJCOUNT_MODE": "cluster",
            "OBJCOUNT_KUBECONFIG": str(plane.kubeconfig),
            "OBJCOUNT_TARGET": args.target,
            "OBJCOUNT_LEADER_ELECTION": "false",
            "OBJCOUNT_LOG_LEVEL": "WARNING",
            "OBJCOUNT_BIND_ADDRESS": "127.0.0.1",
            "OBJCOUNT_HEALTH_PORT": str(health),
            "OBJCOUNT_METRICS_PORT": str(free_port()),
        }
        started = time.monotonic()
        service = subprocess.Popen([sys.executable, "-m", "autoscaler.cli", "run"], env=env)
        try:
            names = {f"{k.namespace}/{k.name}" for k in keys}
            while not (names <= watch.counted and names <= watch.recommended):
                time.sleep(0.5)
            first_full = time.monotonic() - started
            time.sleep(20)
            settled_rss = memory_mib(service.pid, "VmRSS")
            lags, sent = drive(api, keys[: args.rsyncs], watch, args)
            with urllib.request.urlopen(f"http://127.0.0.1:{health}/healthz", timeout=5) as response:
                healthy = response.status == 200
            peak = memory_mib(service.pid, "VmHWM")
            cpu = cpu_seconds(service.pid)
        finally:
            service.send_signal(signal.SIGTERM)
            code = service.wait(60)
    report(args, first_full, (settled_rss, peak), lags, sent)
    print(f"service CPU {cpu:.0f} s in all; healthy under load: {healthy}; exit code {code} after SIGTERM")


def report(
    args: argparse.Namespace, first_full: float, memory: tuple[float, float], lags: list[float], sent: int
) -> None:
    ms = [lag * 1000 for lag in lags] or [float("nan")]
    columns = [
        "RSyncs",
        "first full reconcile",
        "RSS settled",
        "peak RSS",
        "updates sent",
        "lag p50",
        "lag p99",
        "lag max",
        "seen",
    ]
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")
    cells = [
        f"{args.rsyncs} x {args.objects} + {args.big} x {args.big_objects:,}",
        f"{first_full:.1f} s",
        f"{memory[0]:.0f} MiB",
        f"{memory[1]:.0f} MiB",
        f"{sent} in {args.seconds:.0f} s ({sent / args.seconds:.0f}/s)",
        f"{percentile(ms, 50):.0f} ms",
        f"{percentile(ms, 99):.0f} ms",
        f"{max(ms):.0f} ms",
        f"{len(lags)}/{sent}",
    ]
    print("| " + " | ".join(cells) + " |")


def drive(
    api: kubeapi.KubeClient, keys: list[RSyncKey], watch: StatusWatch, args: argparse.Namespace
) -> tuple[list[float], int]:
    """Change random inventories at `--rate`/s; return each change's lag to its count in the status."""
    changes: list[tuple[str, int, float]] = []
    lock = threading.Lock()
    began = time.monotonic()
    counter = [0]

    def writer(seed: int) -> None:
        chooser = random.Random(seed)
        while time.monotonic() - began < args.seconds:
            with lock:
                number = counter[0]
                counter[0] += 1
            pause = began + number / args.rate - time.monotonic()
            if pause > 0:
                time.sleep(pause)
            key = chooser.choice(keys)
            count = args.objects + 1 + number  # a new count every time, so each change is visible once
            sent_at = time.monotonic()
            api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, count))
            with lock:
                changes.append((f"{key.namespace}/{key.name}", count, sent_at))

    threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(args.writers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any((n, c) not in watch.first_seen for n, c, _ in changes):
        time.sleep(0.5)
    lags = [watch.first_seen[(n, c)] - t for n, c, t in changes if (n, c) in watch.first_seen]
    return lags, len(changes)


if __name__ == "__main__":
    main()
