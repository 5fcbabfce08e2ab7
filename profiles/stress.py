"""The profiling stress test: ramp an RSync's object count in steps and record how the autoscaler sizes
its reconciler, and what the reconciler really uses where a metrics API exists.

    python -m profiles.stress [--start 500] [--stop 5000] [--step 500] [--out profiles/out/stress]
                              [--kubeconfig FILE --namespace NS --name NAME] [--create configmaps] [--resume]

Without `--kubeconfig` it runs against the local control plane: it starts it, installs a RootSync with
its ResourceGroup, reconciler Deployment and rendered source, and runs `objcount run` there. With a
kubeconfig it uses that cluster, where the service must already run (sidecar or cluster mode); it
creates the RSync and its inventory in `--namespace`, or, with `--create configmaps`, also creates the
ConfigMaps for a real reconciler to sync.

At each step it sets the inventory (and the source) to the step's count, waits for the service to
record the count and publish its recommendation, and writes a CSV row: the counts, the recommended and
applied resources, the reaction time, and the reconciler's memory and CPU from `metrics.k8s.io` (empty
where there is no metrics API, as on the local control plane). Results go to `<out>/stress.csv`, a
Markdown table `<out>/stress.md` and a plot `<out>/stress.png`. `--resume` skips the steps already in
the CSV. Everything it created is deleted at the end, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from types import FrameType
from typing import Any

import orjson
from tqdm import tqdm

from autoscaler.core import quantity
from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    parse_resources_annotation,
    restored_counts,
)
from controlplane import LocalControlPlane, build_binaries
from controlplane.configsync_install import install_rsync_crds
from controlplane.ports import free_port
from controlplane.seed import (
    configmaps_yaml,
    ensure_namespace,
    reconciler_deployment,
    resourcegroup,
    rsync,
    write_commit,
)
from inventory.core.ids import RECONCILER_NAMESPACE, RSyncKey
from inventory.core.objects import annotations_of
from inventory.kube import kubeapi
from profiles.fit import read_points

PODMETRICS = kubeapi.Resource("metrics.k8s.io", "v1beta1", "pods", "PodMetrics")
CONFIGMAP = kubeapi.Resource("", "v1", "configmaps", "ConfigMap")
SCALE_DOWN_DELAY = 15  # seconds; shortened so a ramp down is seen (the default is 600)
REFERENCE = Path(__file__).resolve().parent / "data" / "reconciler-memory-by-object-count.csv"


def publish_commit(repo: Path, commit: int, objects: int) -> None:
    """A commit of `objects` ConfigMaps in the sync directory `config`, swapped in as git-sync does."""
    write_commit(repo, f"commit-{commit}", {"configmaps.yaml": configmaps_yaml(objects, "demo")})


def start_service(plane: LocalControlPlane, repo: Path, log: Path, key: RSyncKey) -> subprocess.Popen[bytes]:
    """`objcount run` in sidecar mode (target deployment) against the local control plane, as a process."""
    env = {
        **os.environ,
        "OBJCOUNT_KUBECONFIG": str(plane.kubeconfig),
        "OBJCOUNT_RSYNC_KIND": key.kind,
        "OBJCOUNT_RSYNC_NAME": key.name,
        "OBJCOUNT_RSYNC_NAMESPACE": key.namespace,
        "OBJCOUNT_TARGET": "deployment",
        "OBJCOUNT_SOURCE_ROOT": str(repo),
        "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": str(SCALE_DOWN_DELAY),
        "OBJCOUNT_BIND_ADDRESS": "127.0.0.1",
        "OBJCOUNT_METRICS_PORT": str(free_port()),
        "OBJCOUNT_HEALTH_PORT": str(free_port()),
        "OBJCOUNT_LOG_FORMAT": "text",
    }
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "autoscaler.cli", "run"], env=env, stdout=out, stderr=out
        )


@dataclass
class Step:
    objects: int
    source_count: int | None
    sync_count: int | None
    recommended_cpu_m: int | None
    recommended_memory_mib: int | None
    applied_cpu_m: int | None
    applied_memory_mib: int | None
    reaction_s: float
    usage_cpu_m: int | None
    usage_memory_mib: int | None


COLUMNS = [f.name for f in fields(Step)]


class Interrupted(Exception):
    pass


def read_done(path: Path) -> list[Step]:
    if not path.exists():
        return []
    with path.open() as handle:
        rows = list(csv.DictReader(handle))

    def value(text: str) -> Any:
        return None if text == "" else float(text) if "." in text else int(text)

    return [Step(**{k: value(v) for k, v in row.items()}) for row in rows]


def append(path: Path, step: Step) -> None:
    new = not path.exists()
    with path.open("a", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow({k: "" if v is None else v for k, v in asdict(step).items()})


def reconciler_usage(api: kubeapi.KubeApi, key: RSyncKey) -> tuple[int | None, int | None]:
    """CPU (m) and memory (MiB) of the reconciler container from the metrics API, if there is one."""
    selector = f"configsync.gke.io/sync-name={key.name}"
    try:
        page = orjson.loads(api.list_page(PODMETRICS, RECONCILER_NAMESPACE, label_selector=selector))
    except kubeapi.ApiError:
        return None, None
    for item in page.get("items") or []:
        for container in item.get("containers") or []:
            if container.get("name") == "reconciler":
                usage = container.get("usage") or {}
                return quantity.millicores(usage.get("cpu", "0")), quantity.mebibytes(
                    usage.get("memory", "0")
                )
    return None, None


def measure_step(
    api: kubeapi.KubeApi, key: RSyncKey, objects: int, began: float, timeout: float, *, source_too: bool
) -> Step:
    """Wait until the service has recorded `objects` (in the inventory, and in the source when this script
    writes it) and published a recommendation for it."""
    resource = kubeapi.RSYNC_RESOURCES[key.kind]
    deadline = time.monotonic() + timeout
    while True:
        body = api.get(resource, key.namespace, key.name)
        counts = restored_counts(body)
        annotations = annotations_of(body)
        recommended = parse_resources_annotation(annotations.get(RECOMMENDED_ANNOTATION))
        applied = parse_resources_annotation(annotations.get(APPLIED_ANNOTATION))
        counted = counts.sync == objects and (counts.source == objects or not source_too)
        if counted and recommended is not None and applied is not None and applied.covers(recommended):
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{objects} objects: the service did not react within {timeout:.0f} s")
        time.sleep(0.2)
    cpu, memory = reconciler_usage(api, key)
    return Step(
        objects,
        counts.source,
        counts.sync,
        recommended.cpu_request_m,
        recommended.memory_request_mib,
        applied.cpu_request_m,
        applied.memory_request_mib,
        time.monotonic() - began,
        cpu,
        memory,
    )


@contextlib.contextmanager
def _local_plane() -> Iterator[LocalControlPlane]:
    plane = LocalControlPlane(build_binaries(), controller_manager=False)
    try:
        plane.start()
        yield plane
    finally:
        plane.cleanup()


Created = list[tuple[kubeapi.Resource, str, str]]


def _create(api: kubeapi.KubeApi, key: RSyncKey, repo: Path | None, first: int) -> Created:
    """The RSync, its inventory and its reconciler Deployment (where missing); what was created."""
    created: Created = []
    ensure_namespace(api, key.namespace)
    ensure_namespace(api, RECONCILER_NAMESPACE)
    for resource, namespace, body in (
        (kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, rsync(key, sync_dir="config")),
        (kubeapi.RESOURCEGROUP, key.namespace, resourcegroup(key, first)),
        (kubeapi.DEPLOYMENT, RECONCILER_NAMESPACE, reconciler_deployment(key)),
    ):
        try:
            api.create(resource, namespace, body)
            created.append((resource, namespace, body["metadata"]["name"]))
        except kubeapi.Conflict:
            pass  # already there (a real reconciler, or a resumed run)
    if repo is not None:
        (repo / "source").mkdir(parents=True, exist_ok=True)
        publish_commit(repo, 0, first)
    return created


def _delete(api: kubeapi.KubeApi, created: Created) -> None:
    for resource, namespace, name in reversed(created):
        with contextlib.suppress(kubeapi.NotFound):
            api.delete(resource, namespace, name)


def _create_configmaps(api: kubeapi.KubeApi, namespace: str, count: int, created: Created) -> None:
    """Real objects for a real reconciler to sync (ConfigMaps `objcount-stress-<i>`), up to `count`."""
    existing = sum(1 for resource, _, _ in created if resource.kind == "ConfigMap")
    for i in range(existing, count):
        name = f"objcount-stress-{i}"
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"i": str(i)}}
        with contextlib.suppress(kubeapi.Conflict):
            api.create(CONFIGMAP, namespace, body)
        created.append((CONFIGMAP, namespace, name))


def markdown(steps: list[Step]) -> str:
    def cell(value: object) -> str:
        return "-" if value is None else f"{value:.2f}" if isinstance(value, float) else str(value)

    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(cell(v) for v in asdict(step).values()) + " |" for step in steps]
    return "\n".join(lines) + "\n"


def plot(steps: list[Step], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - slow to import, needed only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axis = plt.subplots(figsize=(8, 4.5))
    objects = [s.objects for s in steps]
    axis.plot(
        objects,
        [s.applied_memory_mib for s in steps],
        "-",
        label="applied request = limit (MiB)",
        color="tab:red",
    )
    axis.plot(
        objects, [s.recommended_memory_mib for s in steps], "o", label="recommended (MiB)", color="tab:green"
    )
    usage = [(s.objects, s.usage_memory_mib) for s in steps if s.usage_memory_mib is not None]
    if usage:
        axis.plot(*zip(*usage, strict=True), "s-", label="reconciler usage (MiB)", color="tab:blue")
    else:
        axis.set_title("no metrics API on this cluster: usage not measured here", fontsize=9)
    reference = read_points(REFERENCE)
    axis.plot(
        [p.objects for p in reference],
        [p.usage_mib for p in reference],
        "x",
        color="tab:gray",
        label="usage measured elsewhere (profiles/data)",
    )
    axis.set_xlabel("objects")
    axis.set_ylabel("memory (MiB)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def run(args: argparse.Namespace) -> list[Step]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    csv_path = out / "stress.csv"
    if not args.resume and csv_path.exists():
        csv_path.unlink()
    done = {s.objects for s in read_done(csv_path)}
    counts = [n for n in range(args.start, args.stop + 1, args.step) if n not in done]
    kind = "RootSync" if args.namespace == RECONCILER_NAMESPACE else "RepoSync"
    key = RSyncKey(kind, args.namespace, args.name)  # type: ignore[arg-type]

    def interrupted(signum: int, frame: FrameType | None) -> None:
        raise Interrupted

    signal.signal(signal.SIGTERM, interrupted)
    with contextlib.ExitStack() as stack:
        repo: Path | None = None
        if args.kubeconfig:
            api = kubeapi.KubeApi.connect(args.kubeconfig)
        else:
            plane = stack.enter_context(_local_plane())
            api = kubeapi.KubeApi.connect(str(plane.kubeconfig))
            install_rsync_crds(api)
            repo = plane.work_dir / "repo"
        created = _create(api, key, repo, first=counts[0] if counts else args.start)
        stack.callback(_delete, api, created)
        if repo is not None:
            service = start_service(plane, repo, plane.work_dir / "objcount.log", key)
            stack.callback(service.wait, 30)
            stack.callback(service.terminate)
        try:
            for n in tqdm(counts, desc="ramp", unit="step"):
                began = time.monotonic()
                if repo is not None:
                    publish_commit(repo, n, n)
                if args.create == "configmaps":
                    _create_configmaps(api, key.namespace, n, created)
                api.patch(kubeapi.RESOURCEGROUP, key.namespace, key.name, resourcegroup(key, n))
                step = measure_step(api, key, n, began, args.timeout, source_too=repo is not None)
                append(csv_path, step)
        except (KeyboardInterrupt, Interrupted):
            print("interrupted: cleaned up; rerun with --resume to continue the ramp")
    steps = read_done(csv_path)
    (out / "stress.md").write_text(markdown(steps))
    plot(steps, out / "stress.png")
    return steps


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--start", type=int, default=500)
    parser.add_argument("--stop", type=int, default=5000)
    parser.add_argument("--step", type=int, default=500)
    parser.add_argument("--out", type=Path, default=Path("profiles/out/stress"))
    parser.add_argument(
        "--kubeconfig", help="a cluster where the service runs (default: the local control plane)"
    )
    parser.add_argument(
        "--namespace", default=RECONCILER_NAMESPACE, help="namespace of the RSync (RootSync there)"
    )
    parser.add_argument("--name", default="objcount-stress", help="name of the RSync")
    parser.add_argument(
        "--create", choices=["none", "configmaps"], default="none", help="real objects to create"
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for the service per step")
    parser.add_argument("--resume", action="store_true", help="keep the CSV and skip the steps already in it")
    return parser


def main() -> None:
    steps = run(build_parser().parse_args())
    print(markdown(steps), end="")


if __name__ == "__main__":
    main()
