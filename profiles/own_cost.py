"""What we add, counted: each reconciler Pod's memory request under Config Sync's static default and
under ours, with our own containers in it, per platform, mode and repository.

    python -m profiles.own_cost [--rsyncs 10] [--counts 100,500,800,1000,2000,5000]

Ours in each mode:
- sidecar: our container's request in every reconciler Pod (the webhook adds it; on Autopilot the Pod's
  rules apply to the whole Pod, ours included, and the sidecar asks the template's `autopilotResources`),
  plus the webhook's replicas shared by the RSyncs. The sidecar reads the source, so the size knows the
  kinds and the bytes.
- cluster: the controller's replicas shared by the RSyncs; nothing in the Pod. The controller reads only
  the inventory, which names each object's kind: the size prices the kinds and assumes the preset's KiB
  per object.

Our requests are read from `manifests/`; the measured working sets (what our containers really use, from
the kubelet: BENCHMARKS.md, "Our containers as the kubelet sees them") are printed beside them. Both on
the API surface the preset was measured on (73 resource types); on a wider one, the reconciler's size
grows by the preset's per-type cost and Config Sync's static default does not.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from autoscaler.core import quantity
from autoscaler.core.injection import SidecarTemplate
from autoscaler.core.sizing import PLATFORMS, SIZE_AWARE, Load, Platform, Profile, size
from inventory.core.counts import Kinds
from inventory.source.source_count import kib_of
from profiles.reconciler_memory import manifests
from profiles.rivals import STATIC_AUTOPILOT, STATIC_STANDARD, Static
from profiles.size_model import shape_kinds, shape_read

MANIFESTS = Path(__file__).resolve().parents[1] / "manifests"
STATIC = {"standard": STATIC_STANDARD, "autopilot": STATIC_AUTOPILOT}
# The largest working sets the kubelet reported under load (BENCHMARKS.md, issue 24), MiB.
# RSyncs sharing the webhook's or the controller's replicas in every comparison that counts our cost.
RSYNCS = 10
MEASURED_WORKING_SET = {"sidecar": 46.4, "webhook": 41.7, "controller": 94.0 + 42.0}  # leader + standby


@dataclass(frozen=True)
class OwnCost:
    """MiB of memory requests: in each reconciler Pod, and once per cluster (shared by its RSyncs)."""

    mode: str
    in_each_pod_mib: int
    shared_mib: int

    def per_rsync(self, rsyncs: int) -> float:
        return self.in_each_pod_mib + self.shared_mib / rsyncs


def _documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _deployment_requests_mib(path: Path) -> int:
    """A Deployment's memory requests, all replicas."""
    (deployment,) = [d for d in _documents(path) if d["kind"] == "Deployment"]
    spec = deployment["spec"]
    containers = spec["template"]["spec"]["containers"]
    return int(spec.get("replicas", 1)) * sum(
        quantity.mebibytes(c["resources"]["requests"]["memory"]) for c in containers
    )


def _sidecar_request_mib(path: Path, platform: str) -> int:
    """The sidecar's memory request as the webhook adds it on `platform`."""
    (template,) = _documents(path)
    container = SidecarTemplate.parse(template["data"]["sidecar.yaml"]).container_for(platform)
    return quantity.mebibytes(container["resources"]["requests"]["memory"])


def shipped(platform: str = "standard") -> dict[str, OwnCost]:
    """Our requests as `manifests/` ships them, on `platform`."""
    webhook = _deployment_requests_mib(MANIFESTS / "webhook" / "webhook.yaml")  # both installs run it
    controller = _deployment_requests_mib(MANIFESTS / "cluster" / "base" / "deployment.yaml")
    template = MANIFESTS / "sidecar" / "base" / "sidecar-template.yaml"
    return {
        "sidecar": OwnCost("sidecar", _sidecar_request_mib(template, platform), webhook),
        "cluster": OwnCost("cluster", 0, controller + webhook),
    }


def static_pod_mib(platform: Platform) -> int:
    """Config Sync's default: the reconciler's static request beside git-sync and otel-agent."""
    static: Static = STATIC[platform.name]
    cpu = 700 if platform.has_pod_rules else 50  # Config Sync's default reconciler CPU request
    return platform.adjust(cpu + platform.others_cpu_m, static.request_mib + platform.others_memory_mib)[1]


def ours_pod_mib(
    platform: Platform,
    cost: OwnCost,
    objects: int,
    kib: int | None,
    kinds: Kinds | None,
    *,
    workload_path_steps: int | None = None,
) -> int:
    """The Pod's memory requests with our size for the reconciler, and our sidecar where there is one
    (`kib` and `workload_path_steps` None: not known, the source not read)."""
    others = platform.others_memory_mib + cost.in_each_pod_mib
    profile = Profile(SIZE_AWARE, platform, platform.others_cpu_m, others)
    load = Load(
        objects,
        kib,
        kinds,
        api_resources=SIZE_AWARE.fit_api_resources,
        workload_path_steps=workload_path_steps,
    )
    return size(load, profile).memory_request_mib + others


@dataclass(frozen=True)
class Row:
    platform: str
    shape: str
    objects: int
    static_mib: int
    mode: str
    ours_mib: float  # the Pod, plus the shared part per RSync

    @property
    def saving_mib(self) -> float:
        return self.static_mib - self.ours_mib


def rows(counts: list[int], rsyncs: int) -> list[Row]:
    out = []
    for name in ("standard", "autopilot"):
        platform, costs = PLATFORMS[name], shipped(name)
        static = static_pod_mib(platform)
        for shape in ("configmaps", "deployments"):
            for objects in counts:
                kib = kib_of(len(manifests(shape, objects, "ns").encode()))
                kinds = shape_kinds(shape, objects)
                steps = shape_read(shape, objects).workload_path_steps
                known = {"sidecar": (kib, steps), "cluster": (None, None)}  # the source read or not
                for mode, cost in costs.items():
                    read_kib, read_steps = known[mode]
                    pod = ours_pod_mib(
                        platform, cost, objects, read_kib, kinds, workload_path_steps=read_steps
                    )
                    ours = pod + cost.shared_mib / rsyncs
                    out.append(Row(name, shape, objects, static, mode, ours))
    return out


def markdown(table: list[Row]) -> str:
    lines = [
        "| platform | repository | Config Sync default (MiB) | ours, sidecar mode (MiB) | saving | "
        "ours, cluster mode (MiB) | saving |",
        "|---|---|---|---|---|---|---|",
    ]
    by_key: dict[tuple[str, str, int], dict[str, Row]] = {}
    for row in table:
        by_key.setdefault((row.platform, row.shape, row.objects), {})[row.mode] = row
    for (platform, shape, objects), modes in by_key.items():
        sidecar, cluster = modes["sidecar"], modes["cluster"]
        lines.append(
            f"| {platform} | {objects:,} {shape} | {sidecar.static_mib} | {sidecar.ours_mib:.0f} | "
            f"{sidecar.saving_mib:+.0f} | {cluster.ours_mib:.0f} | {cluster.saving_mib:+.0f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--rsyncs", type=int, default=RSYNCS, help="RSyncs sharing the webhook or the controller"
    )
    parser.add_argument("--counts", default="100,500,800,1000,2000,5000", help="objects per repository")
    args = parser.parse_args()
    for platform in ("standard", "autopilot"):
        for cost in shipped(platform).values():
            print(
                f"# {platform}, {cost.mode} mode: {cost.in_each_pod_mib} MiB requested in each reconciler "
                f"Pod, {cost.shared_mib} MiB shared by the cluster's RSyncs ({args.rsyncs} here: "
                f"{cost.per_rsync(args.rsyncs):.1f} MiB each)"
            )
    print(f"# measured working sets (MiB): {MEASURED_WORKING_SET}")
    print(
        "# MiB requested per reconciler Pod (its containers, and our shared part per RSync); "
        "saving > 0: ours asks less"
    )
    print(markdown(rows([int(n) for n in args.counts.split(",")], args.rsyncs)))


if __name__ == "__main__":
    main()
