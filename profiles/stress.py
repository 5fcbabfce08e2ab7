"""The profiling stress test: ramp an RSync's object count in steps and record how the autoscaler sizes
its reconciler, and what the reconciler really uses where a metrics API exists.

    python -m profiles.stress [--start 500] [--stop 5000] [--step 500] [--out profiles/out/stress]
                              [--kubeconfig FILE --namespace NS --name NAME] [--create configmaps] [--resume]
                              [--kubeconfig FILE --namespace NS --name NAME --git-clone DIR [--git-dir DIR]]
                              [--on-node]

Without `--kubeconfig` it runs against the local control plane: it starts it, installs a RootSync with
its ResourceGroup, reconciler Deployment and rendered source, and runs `objcount run` there. With a
kubeconfig it uses that cluster, where the service must already run (sidecar or cluster mode); it
creates the RSync and its inventory in `--namespace`, or, with `--create configmaps`, also creates the
ConfigMaps for a real reconciler to sync.

With `--git-clone DIR` (on a cluster where Config Sync runs) nothing is created or written in the
cluster: DIR is a working copy of the repository the RSync `--namespace`/`--name` syncs, and each step is
a commit there of `objcount-stress.yaml` (the step's ConfigMaps, in the RSync's namespace for a
RepoSync, else in `objcount-stress`, a namespace an unstructured RootSync creates) in its sync
directory `--git-dir`, pushed to its upstream when it has one. The real reconciler syncs each commit;
the step ends once it reports the commit synced, the service recorded the inventory's entries (the
ResourceGroup, read here) and the size it applies covers its recommendation; the usage is the largest
the metrics API reported from the commit to `--settle` seconds after that (it reports a window late).
The last commit removes the file again. `--on-node` runs this on the local real node: Config Sync
v1.25.0, the README's sidecar install with its shipped settings, metrics-server, and a RootSync of a
repository on the node's git server, which this script then drives through the stack's kubeconfig and
the repository's working copy, as a user would.

Otherwise, at each step it sets the inventory (and the source) to the step's count, waits for the service to
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
from autoscaler.core.resources import Resources
from controlplane import LocalControlPlane, build_binaries
from controlplane.configsync_install import install_rsync_crds
from controlplane.configsync_node import running_config_sync_on_node
from controlplane.metrics_server import install_metrics_server
from controlplane.ports import free_port
from controlplane.seed import (
    configmaps_yaml,
    ensure_namespace,
    reconciler_deployment,
    resourcegroup,
    rsync,
    write_commit,
)
from controlplane.status_checks import synced
from inventory.core.counts import ObjectCounts
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


def reconciler_usage(api: kubeapi.KubeClient, key: RSyncKey) -> tuple[int | None, int | None]:
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


@dataclass(frozen=True)
class Recorded:
    """What the service recorded on the RSync: its counts and sizes."""

    rsync: dict[str, Any]
    counts: ObjectCounts
    recommended: Resources | None
    applied: Resources | None

    @classmethod
    def read(cls, api: kubeapi.KubeClient, key: RSyncKey) -> Recorded:
        body = api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)
        annotations = annotations_of(body)
        return cls(
            body,
            restored_counts(body),
            parse_resources_annotation(annotations.get(RECOMMENDED_ANNOTATION)),
            parse_resources_annotation(annotations.get(APPLIED_ANNOTATION)),
        )

    @property
    def sized(self) -> bool:
        """A recommendation published, and a size applied that covers it."""
        return (
            self.recommended is not None
            and self.applied is not None
            and self.applied.covers(self.recommended)
        )

    def step(self, objects: int, reaction_s: float, usage: tuple[int | None, int | None]) -> Step:
        assert self.recommended is not None
        assert self.applied is not None
        return Step(
            objects,
            self.counts.source,
            self.counts.sync,
            self.recommended.cpu_request_m,
            self.recommended.memory_request_mib,
            self.applied.cpu_request_m,
            self.applied.memory_request_mib,
            reaction_s,
            *usage,
        )


def measure_step(
    api: kubeapi.KubeClient, key: RSyncKey, objects: int, began: float, timeout: float, *, source_too: bool
) -> Step:
    """Wait until the service has recorded `objects` (in the inventory, and in the source when this script
    writes it) and published a recommendation for it."""
    deadline = time.monotonic() + timeout
    while True:
        seen = Recorded.read(api, key)
        counts = seen.counts
        if counts.sync == objects and (counts.source == objects or not source_too) and seen.sized:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{objects} objects: the service did not react within {timeout:.0f} s")
        time.sleep(0.2)
    return seen.step(objects, time.monotonic() - began, reconciler_usage(api, key))


STRESS_FILE = "objcount-stress.yaml"
STRESS_NAMESPACE = "objcount-stress"  # where a RootSync's step objects go (it creates the namespace)


@dataclass(frozen=True)
class Clone:
    """A working copy of the repository the RSync syncs, and the RSync's directory in it."""

    path: Path
    sync_dir: str = "."

    def git(self, *args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)} in {self.path} failed: {done.stderr.strip()}")
        return done.stdout

    def commit(self, text: str | None, message: str) -> str:
        """Write (None: remove) the stress file, commit, push where the clone has an upstream; the commit."""
        relative = str(Path(self.sync_dir) / STRESS_FILE)
        target = self.path / relative
        if text is None:
            target.unlink(missing_ok=True)
        else:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self.git("add", "--all", "--", relative)
        self.git("commit", "--quiet", "--allow-empty", "-m", message)
        if self.git("remote").strip():
            self.git("push", "--quiet")
        return self.git("rev-parse", "HEAD").strip()


@dataclass
class Usage:
    """The largest CPU and memory of the reconciler the metrics API reported over a step."""

    cpu_m: int | None = None
    memory_mib: int | None = None

    def sample(self, api: kubeapi.KubeClient, key: RSyncKey) -> None:
        cpu, memory = reconciler_usage(api, key)
        self.cpu_m = max((v for v in (self.cpu_m, cpu) if v is not None), default=None)
        self.memory_mib = max((v for v in (self.memory_mib, memory) if v is not None), default=None)


def measure_git_step(
    api: kubeapi.KubeClient,
    key: RSyncKey,
    objects: int,
    commit: str,
    *,
    began: float,
    timeout: float,
    settle: float,
) -> Step:
    """Wait until the reconciler reports `commit` synced, the service recorded the inventory's entries and
    applied a size that covers its recommendation; the largest usage the metrics API reported from the
    commit to `settle` seconds after that (it reports a window of its resolution, 10 s here, late)."""
    deadline = time.monotonic() + timeout
    usage = Usage()
    while True:
        usage.sample(api, key)
        seen = Recorded.read(api, key)
        inventory = api.get(kubeapi.RESOURCEGROUP, key.namespace, key.name)
        entries = len((inventory.get("spec") or {}).get("resources") or [])
        if synced(seen.rsync, commit) and seen.counts.sync == entries and seen.sized:
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{objects} objects: not synced and sized within {timeout:.0f} s")
        time.sleep(0.5)
    reaction = time.monotonic() - began
    settled = time.monotonic() + settle
    while time.monotonic() < settled:
        usage.sample(api, key)
        time.sleep(1.0)
    return seen.step(objects, reaction, (usage.cpu_m, usage.memory_mib))


def ramp_through_git(
    api: kubeapi.KubeClient,
    key: RSyncKey,
    clone: Clone,
    counts: list[int],
    *,
    csv_path: Path,
    timeout: float,
    settle: float,
) -> None:
    """Each step a commit of its ConfigMaps, measured; the stress file removed at the end, also on error."""
    namespace = key.namespace if key.kind == "RepoSync" else STRESS_NAMESPACE
    try:
        for n in tqdm(counts, desc="ramp", unit="step"):
            began = time.monotonic()
            commit = clone.commit(configmaps_yaml(n, "objcount-stress", namespace), f"objcount stress: {n}")
            append(
                csv_path, measure_git_step(api, key, n, commit, began=began, timeout=timeout, settle=settle)
            )
    finally:
        clone.commit(None, "objcount stress: removed")


@contextlib.contextmanager
def _on_node(key: RSyncKey) -> Iterator[tuple[str, Clone]]:
    """The local real node with Config Sync, the README's sidecar install (shipped settings) and
    metrics-server, and a RootSync of a repository on the node's git server, synced: the stack's
    kubeconfig and the repository's working copy, for the ramp to drive as a user's would."""
    with running_config_sync_on_node() as cs:
        api = cs.api
        assert api is not None
        assert cs.git is not None
        install_metrics_server(cs.stack)
        cs.install_sidecar(cs.stack.sandbox.work_dir / "certs")
        first = cs.commit(key, {"start.yaml": ""})  # the sync directory, with nothing in it
        api.create(kubeapi.ROOTSYNC, key.namespace, cs.rsync(key, git_period_s=2.0))
        deadline = time.monotonic() + 300
        while not synced(api.get(kubeapi.ROOTSYNC, key.namespace, key.name), first):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{key} did not sync its first commit in 300 s")
            time.sleep(1)
        clone = Clone(cs.git.repository(cs.repository(key)), "config")
        clone.git("config", "user.name", "objcount stress")  # this repository's own, not the user's
        clone.git("config", "user.email", "stress@objcount.invalid")
        yield str(cs.stack.plane.kubeconfig), clone


@contextlib.contextmanager
def _local_plane() -> Iterator[LocalControlPlane]:
    plane = LocalControlPlane(build_binaries(), controller_manager=False)
    try:
        plane.start()
        yield plane
    finally:
        plane.cleanup()


Created = list[tuple[kubeapi.Resource, str, str]]


def _create(api: kubeapi.KubeClient, key: RSyncKey, repo: Path | None, first: int) -> Created:
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


def _delete(api: kubeapi.KubeClient, created: Created) -> None:
    for resource, namespace, name in reversed(created):
        with contextlib.suppress(kubeapi.NotFound):
            api.delete(resource, namespace, name)


def _create_configmaps(api: kubeapi.KubeClient, namespace: str, count: int, created: Created) -> None:
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
    if args.on_node or args.git_clone:
        with contextlib.ExitStack() as stack:
            if args.on_node:
                kubeconfig, clone = stack.enter_context(_on_node(key))
            else:
                kubeconfig, clone = args.kubeconfig, Clone(args.git_clone, args.git_dir)
            try:
                api = kubeapi.KubeClient.connect(kubeconfig)
                ramp_through_git(
                    api, key, clone, counts, csv_path=csv_path, timeout=args.timeout, settle=args.settle
                )
            except (KeyboardInterrupt, Interrupted):
                print("interrupted: the stress file removed; rerun with --resume to continue the ramp")
        return _results(out, csv_path)
    with contextlib.ExitStack() as stack:
        repo: Path | None = None
        if args.kubeconfig:
            api = kubeapi.KubeClient.connect(args.kubeconfig)
        else:
            plane = stack.enter_context(_local_plane())
            api = kubeapi.KubeClient.connect(str(plane.kubeconfig))
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
    return _results(out, csv_path)


def _results(out: Path, csv_path: Path) -> list[Step]:
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
    parser.add_argument(
        "--git-clone",
        type=Path,
        help="a working copy of the repository the RSync syncs (Config Sync runs): each step a commit",
    )
    parser.add_argument("--git-dir", default=".", help="the RSync's sync directory in --git-clone")
    parser.add_argument(
        "--settle",
        type=float,
        default=30.0,
        help="with --git-clone: seconds the usage is still read after a step is synced and sized",
    )
    parser.add_argument(
        "--on-node",
        action="store_true",
        help="the local real node with Config Sync, as --git-clone drives it",
    )
    parser.add_argument("--timeout", type=float, default=120, help="seconds to wait for the service per step")
    parser.add_argument("--resume", action="store_true", help="keep the CSV and skip the steps already in it")
    return parser


def main() -> None:
    parser = build_parser()
    args = parser.parse_args()
    if args.git_clone and not args.kubeconfig:
        parser.error("--git-clone needs --kubeconfig (the cluster whose Config Sync syncs the clone)")
    if args.on_node and (args.git_clone or args.kubeconfig):
        parser.error("--on-node makes its own cluster and repository: no --kubeconfig or --git-clone")
    steps = run(args)
    print(markdown(steps), end="")


if __name__ == "__main__":
    main()
