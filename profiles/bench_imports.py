"""The sidecar's memory budget, component by component: resident memory (VmRSS) of a fresh interpreter
after importing, in the order `objcount run` loads them, each part of the service.

    python -m profiles.bench_imports

Each figure is the growth of VmRSS over the step before (MiB), measured in a fresh process per run;
the caches and buffers of a running sidecar are measured by `profiles.bench_service`.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

STEPS = [
    ("interpreter", []),
    ("pydantic and pydantic-settings", ["pydantic_settings"]),
    ("the kubernetes package", ["kubernetes.client", "kubernetes.config"]),
    ("prometheus-client and APScheduler", ["prometheus_client", "apscheduler.schedulers.background"]),
    ("parsers: orjson, simdjson, PyYAML, rapidyaml", ["orjson", "simdjson", "yaml", "ryml"]),
    ("our modules (the service and the CLI)", ["autoscaler.cli", "autoscaler.service.main"]),
]


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise KeyError("VmRSS")


def measure() -> None:
    """In this process: import each step's modules and print the RSS after it."""
    for _, modules in STEPS:
        for module in modules:
            importlib.import_module(module)
        print(f"{rss_mib():.1f}")
    tooling = [
        m for m in ("rich", "matplotlib", "tqdm", "controlplane", "profiles.stress") if m in sys.modules
    ]
    print(",".join(tooling) or "none")


def main() -> None:
    if sys.argv[1:] == ["--measure"]:
        measure()
        return
    command = [sys.executable, "-m", "profiles.bench_imports", "--measure"]
    outputs = [
        subprocess.run(command, capture_output=True, text=True, check=True).stdout.split() for _ in range(5)
    ]
    runs = [[float(x) for x in output[:-1]] for output in outputs]
    median = [sorted(run[i] for run in runs)[len(runs) // 2] for i in range(len(STEPS))]
    print("| component | RSS added (MiB) | RSS after (MiB) |\n|---|---|---|")
    before = 0.0
    for (name, _), after in zip(STEPS, median, strict=True):
        print(f"| {name} | {after - before:.1f} | {after:.1f} |")
        before = after
    print(f"\ntooling loaded with the service and the CLI: {outputs[0][-1]}")


if __name__ == "__main__":
    main()
