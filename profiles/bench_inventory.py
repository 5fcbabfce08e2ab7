"""Benchmarks of the inventory side, each compared in the same run with the obvious way.

    python -m profiles.bench_inventory sync-count      # 100,000-entry ResourceGroup watch event
    python -m profiles.bench_inventory source-count    # 10,000 Deployments in 100 files
    python -m profiles.bench_inventory watcher-memory  # RSS of the watch cache holding a big inventory
    python -m profiles.bench_inventory all
    python -m profiles.bench_inventory sync-parts      # where the sync count's time goes
    python -m profiles.bench_inventory source-parts    # the parsers under the source count, per MiB

Times are the median of repeated runs; memory is the growth of the peak resident set size of a fresh
process doing only that one thing, so C allocations (simdjson, libyaml) are included.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import ryml
import simdjson
import yaml
from yaml._yaml import CParser

from inventory.core.inventory_count import (
    InventoryCounter,
    count_entries_plainly,
    quick_entries_check,
    quick_kinds,
    resources_span,
)
from inventory.core.manifest_reader import _fast_yaml
from inventory.core.tally import Untallied
from inventory.kube.watch import InventoryCodec
from inventory.source.source_count import CountCache, count_directory

DEPLOYMENT = """---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: app-{i}
  namespace: team-{ns}
  labels: {{app: app-{i}, team: team-{ns}}}
spec:
  replicas: 2
  selector:
    matchLabels: {{app: app-{i}}}
  template:
    metadata:
      labels: {{app: app-{i}}}
    spec:
      containers:
      - name: main
        image: registry.example.com/app:{i}
        ports:
        - containerPort: 8080
        resources:
          requests: {{cpu: 100m, memory: 128Mi}}
"""


def median_seconds(function: Callable[[], object], repeat: int) -> float:
    function()
    samples = []
    for _ in range(repeat):
        began = time.perf_counter()
        function()
        samples.append(time.perf_counter() - began)
    return statistics.median(samples)


def _status_mib(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise KeyError(field)


def reset_peak_rss() -> float:
    """Reset the kernel's peak-RSS mark (Linux clear_refs) and return the current RSS in MiB."""
    Path("/proc/self/clear_refs").write_text("5")
    return _status_mib("VmRSS")


def peak_rss_mib() -> float:
    return _status_mib("VmHWM")


def rss_mib() -> float:
    return _status_mib("VmRSS")


def inventory_event(entries: int) -> bytes:
    """A watch event as kube-apiserver sends it for a ResourceGroup (compact JSON, sorted keys)."""
    resources = [
        {"group": "apps", "kind": "Deployment", "name": f"app-{i:06d}", "namespace": f"team-{i % 40}"}
        for i in range(entries)
    ]
    obj = {
        "apiVersion": "kpt.dev/v1alpha1",
        "kind": "ResourceGroup",
        "metadata": {
            "name": "root-sync",
            "namespace": "config-management-system",
            "resourceVersion": "12345",
            "labels": {"cli-utils.sigs.k8s.io/inventory-id": "config-management-system_root-sync"},
        },
        "spec": {"resources": resources},
    }
    # Go writes the event's fields in struct order and an unstructured object's keys sorted.
    return b'{"type":"MODIFIED","object":' + orjson.dumps(obj, option=orjson.OPT_SORT_KEYS) + b"}\n"


# ----- child processes (one measurement each) ---------------------------------------------------------
def _child_sync_count(method: str, path: str) -> dict[str, Any]:
    raw = Path(path).read_bytes()
    counter = InventoryCounter()
    functions: dict[str, Callable[[], int | None]] = {
        "ours": lambda: counter.summarize_event(raw)[1].count,
        "orjson": lambda: count_entries_plainly(raw),
        "json": lambda: len(json.loads(raw)["object"]["spec"]["resources"]),
    }
    before = reset_peak_rss()
    count = functions[method]()
    extra = peak_rss_mib() - before
    seconds = median_seconds(functions[method], 20)
    return {"count": count, "seconds": seconds, "extra_mib": extra}


def _child_watcher_memory(method: str, path: str) -> dict[str, Any]:
    """Decode one big event as a cache would and keep what that cache keeps (a summary, or the object)."""
    raw = Path(path).read_bytes()
    before = reset_peak_rss()
    store: dict[tuple[str, str], object] = {}
    if method == "ours":
        summary = InventoryCodec(Untallied()).decode_event(raw).obj
        assert summary is not None
        store[(summary.namespace, summary.name)] = summary
    else:
        store[("config-management-system", "root-sync")] = orjson.loads(raw)["object"]
    del raw
    return {"extra_peak_mib": peak_rss_mib() - before, "held_mib": rss_mib() - before}


def _in_child(function: str, *args: str) -> dict[str, Any]:
    code = (
        f"import json, sys; from profiles.bench_inventory import {function} as f; "
        "print(json.dumps(f(*sys.argv[1:])))"
    )
    converted = [str(a) for a in args]
    out = subprocess.run([sys.executable, "-c", code, *converted], capture_output=True, text=True, check=True)
    result: dict[str, Any] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


# ----- benchmarks ---------------------------------------------------------------------------------
def bench_sync_count(entries: int = 100_000) -> None:
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        raw = inventory_event(entries)
        handle.write(raw)
        handle.flush()
        print(f"sync count of a {entries:,}-entry ResourceGroup watch event ({len(raw) / 2**20:.1f} MiB)")
        results = {m: _in_child("_child_sync_count", m, handle.name) for m in ("ours", "orjson", "json")}
    ours = results["ours"]
    print("| method | count | median time | extra peak memory |\n|---|---|---|---|")
    for method, label in (
        ("ours", "simdjson + byte check (ours)"),
        ("orjson", "orjson full decode"),
        ("json", "json.loads (as the kubernetes client)"),
    ):
        r = results[method]
        print(f"| {label} | {r['count']:,} | {r['seconds'] * 1000:.1f} ms | {r['extra_mib']:.1f} MiB |")
    for method in ("orjson", "json"):
        r = results[method]
        print(
            f"ratio vs {method}: {r['seconds'] / ours['seconds']:.1f}x faster, "
            f"{r['extra_mib'] / max(ours['extra_mib'], 0.1):.1f}x less memory"
        )


def bench_sync_parts(entries: int = 100_000) -> None:
    """The parts of `InventoryCounter.summarize_event`, each timed alone (median of 20)."""
    raw = inventory_event(entries)
    span = resources_span(raw)
    assert span is not None
    start, end = span
    array = memoryview(raw)[start:end]

    def parse() -> int:
        document: Any = simdjson.Parser().parse(raw)
        return len(document["object"]["spec"]["resources"])

    parse_s = median_seconds(parse, 20)
    check_s = median_seconds(lambda: quick_entries_check(raw, entries), 20)
    kinds_s = median_seconds(lambda: quick_kinds(raw, entries), 20)
    one_pass = median_seconds(lambda: raw.count(b'"kind":"', start, end), 20)
    crc_s = median_seconds(lambda: zlib.crc32(array), 20)
    print(f"parts of the sync count of a {entries:,}-entry watch event ({len(raw) / 2**20:.1f} MiB)")
    print(f"simdjson parse + len(): {parse_s * 1000:.1f} ms")
    print(f"byte check (quick_entries_check): {check_s * 1000:.1f} ms")
    print(
        f"byte check and kinds (quick_kinds: the check, then one regular expression): {kinds_s * 1000:.1f} ms"
    )
    rate = (end - start) / one_pass / 1e9
    print(f"one bytes.count pass over the array: {one_pass * 1000:.1f} ms, {rate:.1f} GB/s")
    print(f"CRC32 of the array (zlib.crc32): {crc_s * 1000:.1f} ms")
    tracemalloc.start()
    document = simdjson.Parser().parse(raw)
    print(f"tracemalloc's peak during the parse: {tracemalloc.get_traced_memory()[1] / 2**20:.1f} MiB")
    tracemalloc.stop()
    del document


def write_source(root: Path, deployments: int, files: int) -> None:
    per_file = deployments // files
    for f in range(files):
        text = "".join(DEPLOYMENT.format(i=f * per_file + j, ns=f % 7) for j in range(per_file))
        (root / f"deployments-{f:03d}.yaml").write_text(text)


def bench_source_count(deployments: int = 10_000, files: int = 100) -> None:
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory) / "c1"
        root.mkdir()
        write_source(root, deployments, files)
        size = sum(p.stat().st_size for p in root.iterdir())
        print(f"source count of {deployments:,} Deployments in {files} files ({size / 2**20:.1f} MiB)")

        def full_load() -> int:
            documents = (
                yaml.load_all(p.read_bytes(), Loader=yaml.CSafeLoader) for p in sorted(root.iterdir())
            )
            return sum(1 for file in documents for document in file if isinstance(document, dict))

        cold = median_seconds(lambda: count_directory(root), 5)
        full = median_seconds(full_load, 3)
        # The next commit: a new directory with one file changed; the cache holds the last commit's files.
        cache = CountCache()
        count_directory(root, cache=cache)
        commit2 = Path(directory) / "c2"
        commit2.mkdir()
        write_source(commit2, deployments, files)
        (commit2 / "deployments-000.yaml").write_text(DEPLOYMENT.format(i=999_999, ns=1))
        warm = median_seconds(lambda: count_directory(commit2, cache=cache), 5)
        assert count_directory(root).objects == full_load() == deployments
        print("| method | median time |\n|---|---|")
        print(f"| yaml.load_all with CSafeLoader (the obvious way) | {full * 1000:.0f} ms |")
        print(f"| ours, cold (every file new) | {cold * 1000:.0f} ms |")
        print(f"| ours, next commit with 1 of {files} files changed | {warm * 1000:.1f} ms |")
        print(f"ratio: cold {full / cold:.1f}x faster, next commit {full / warm:.0f}x faster")


def bench_source_parts(deployments: int = 10_000, files: int = 100) -> None:
    """The parsers under the source count on the same files, each timed alone (median of 3), per MiB."""
    with tempfile.TemporaryDirectory() as directory:
        root = Path(directory)
        write_source(root, deployments, files)
        contents = [p.read_bytes() for p in sorted(root.iterdir())]
    mib = sum(len(c) for c in contents) / 2**20
    pieces = [piece for c in contents for piece in (b"\n" + c).split(b"\n---")]
    timings = {
        "libyaml's C parser building nothing (CParser.raw_parse)": lambda: [
            CParser(c).raw_parse() for c in contents
        ],
        "rapidyaml's parse (ryml.parse_in_arena)": lambda: [ryml.parse_in_arena(c) for c in contents],
        "splitting, libyaml's check, rapidyaml's parse and reading the fields of every document": lambda: [
            _fast_yaml(piece) for piece in pieces
        ],
        "CSafeLoader (yaml.load_all)": lambda: [
            list(yaml.load_all(c, Loader=yaml.CSafeLoader)) for c in contents
        ],
    }
    print(f"parsers under the source count of {deployments:,} Deployments in {files} files ({mib:.1f} MiB)")
    print("| step | median time | per MiB |\n|---|---|---|")
    for label, function in timings.items():
        seconds = median_seconds(function, 3)
        print(f"| {label} | {seconds * 1000:.0f} ms | {seconds * 1000 / mib:.0f} ms/MiB |")


def bench_watcher_memory(entries: int = 100_000) -> None:
    with tempfile.NamedTemporaryFile(suffix=".json") as handle:
        handle.write(inventory_event(entries))
        handle.flush()
        ours = _in_child("_child_watcher_memory", "ours", handle.name)
        plain = _in_child("_child_watcher_memory", "orjson", handle.name)
    print(f"watch cache holding a {entries:,}-entry inventory (RSS growth: peak while decoding, then held)")
    print("| cache | peak | held afterwards |\n|---|---|---|")
    for label, r in (("ours (keeps a summary)", ours), ("orjson, keeping the decoded object", plain)):
        print(f"| {label} | {r['extra_peak_mib']:.1f} MiB | {r['held_mib']:.1f} MiB |")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "which",
        choices=["sync-count", "source-count", "watcher-memory", "all", "sync-parts", "source-parts"],
    )
    args = parser.parse_args()
    if args.which in ("sync-count", "all"):
        bench_sync_count()
    if args.which in ("source-count", "all"):
        bench_source_count()
    if args.which in ("watcher-memory", "all"):
        bench_watcher_memory()
    if args.which == "sync-parts":
        bench_sync_parts()
    if args.which == "source-parts":
        bench_source_parts()


if __name__ == "__main__":
    main()
