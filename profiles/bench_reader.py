"""The source counter beside Config Sync's own reader, on each directory of the manifest corpus, in one
run: objects per second of each (the median of N whole reads, listing included, no cache on our side;
Config Sync's timed inside its process by csreader -repeat), and our peak memory on the largest file.

    python -m profiles.bench_reader [--repeat 7] [--corpus DIR]   (default: the corpus, as the tests find it)

Counting must not be the slow part of a sync: ours must read at least as many objects per second as
Config Sync's reader on every directory.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from controlplane.configsync_build import VERSION, build_configsync
from controlplane.sources import corpus_directory
from inventory.source.source_count import count_directory


def ours_seconds(directory: Path, repeat: int) -> tuple[int, float]:
    objects, times = 0, []
    for _ in range(repeat):
        start = time.perf_counter()
        objects = count_directory(directory).objects
        times.append(time.perf_counter() - start)
    return objects, statistics.median(times)


def theirs_seconds(binary: Path, directory: Path, repeat: int) -> tuple[int, float]:
    output = subprocess.run(
        [str(binary), "-repeat", str(repeat), str(directory)], capture_output=True, text=True, check=True
    )
    result = json.loads(output.stdout)
    return int(result["objects"]), statistics.median(result["seconds"])


# The peak resident memory while counting one file, above what the process held before: the kernel's
# high-water mark (VmHWM) is reset to the current size first (/proc/self/clear_refs, 5).
_PEAK = """
import sys
from pathlib import Path
from inventory.core.manifest_reader import read_manifest
from inventory.source.source_count import quiet_rapidyaml
def status(field):
    line = next(l for l in open("/proc/self/status") if l.startswith(field))
    return int(line.split()[1]) / 1024
data = Path(sys.argv[1]).read_bytes()
with open("/proc/self/clear_refs", "w") as refs:
    refs.write("5")
before = status("VmRSS")
with quiet_rapidyaml():
    read_manifest(data, sys.argv[1])
print(status("VmHWM") - before)
"""


def largest_file_peak_mib(corpus: Path) -> tuple[Path, float]:
    """The largest manifest file of the corpus, and how much memory counting it took at its peak (MiB
    above what the process held before, its bytes already read)."""
    manifests = (p for p in corpus.rglob("*") if p.is_file() and p.suffix in (".yaml", ".yml", ".json"))
    largest = max(manifests, key=lambda p: p.stat().st_size)
    output = subprocess.run(
        [sys.executable, "-c", _PEAK, str(largest)], capture_output=True, text=True, check=True
    )
    return largest, float(output.stdout)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument(
        "--corpus", type=Path, help="an extracted corpus (default: as the tests find it, sources.py)"
    )
    args = parser.parse_args(argv)
    binary = build_configsync(VERSION).root / "bin" / "csreader"
    corpus = args.corpus or corpus_directory()
    print(f"source count against Config Sync {VERSION}'s reader, median of {args.repeat} whole reads each")
    print(
        "| directory | objects | MB | Config Sync's reader | ours "
        "| objects/s (theirs) | objects/s (ours) | ours / theirs |"
    )
    print("|---|---|---|---|---|---|---|---|")
    slower = []
    for directory in sorted(p for p in corpus.iterdir() if p.is_dir()):
        theirs_objects, theirs = theirs_seconds(binary, directory, args.repeat)
        objects, ours = ours_seconds(directory, args.repeat)
        assert objects == theirs_objects, (directory.name, objects, theirs_objects)
        size = sum(p.stat().st_size for p in directory.rglob("*") if p.is_file()) / 1e6
        ratio = theirs / ours
        slower += [directory.name] if ratio < 1 else []
        print(
            f"| {directory.name} | {objects:,} | {size:.1f} | {theirs * 1000:.0f} ms "
            f"| {ours * 1000:.0f} ms | {objects / theirs:,.0f} | {objects / ours:,.0f} | {ratio:.2f} |"
        )
    largest, added = largest_file_peak_mib(corpus)
    size = largest.stat().st_size / 1e6
    name = largest.relative_to(corpus)
    print(f"counting the largest file ({name}, {size:.1f} MB): {added:.1f} MiB at its peak")
    print(f"process peak: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    if slower:
        print(f"slower than Config Sync's reader on: {', '.join(slower)}")
    return 1 if slower else 0


if __name__ == "__main__":
    sys.exit(main())
