"""Measure the real reconciler: its peak memory and time to sync, by object shape and count.

    python -m profiles.reconciler_memory [--shapes configmaps,deployments,small-crs,large-crs,mix,...]
                                         [--counts 250,1000,2000] [--out profiles/out/reconciler-memory]
                                         [--extra-crds 0[,100,...]] [--namespaces 1[,10,...]]
                                         [--git-period SECONDS] [--resume]

On the local stack with a real node (Config Sync built from the pinned source: v1.25.0, or another
pinned release named by OBJCOUNT_CONFIGSYNC_VERSION; its Pods run by
the kubelet with containerd, every container the real component since 2026-11-26: git-sync and the
otel-agent were played by us in the runs recorded before, see BENCHMARKS.md), each point is
one RootSync created for it, so each reconciler starts fresh: its source is a commit of N objects of one
shape in a namespace of their own (which the reconciler creates, an implicit Namespace), its memory limit
4Gi so nothing is killed. When its status says the commit is synced, the point records the reconciler
process's peak resident memory (`VmHWM`, read through the container's cgroup, as the points measured
before the real node were), the seconds from the RootSync's creation to synced, and the counts (source,
inventory). Then a commit of one object of the shape makes the same reconciler prune the rest, and the
peak is read again when that commit is synced (the peak over the apply and the prune: the prune can cost
more than the apply), with the peak of the container's memory cgroup (v1 `memory.max_usage_in_bytes`, v2
`memory.peak`: the pages charged to it, page cache included; the reconciler binary's file pages may be charged
to whoever read them first, so it can be below `VmHWM`). `VmHWM` is the kernel's high-water mark, updated
lazily (memory the Go runtime returns with `madvise` can leave it a little below the true peak: the
reading after the prune was seen 0.2 to 0.3 MiB below the one after the apply), so the fit takes the larger
of the two. The RootSync is then deleted with Config Sync's
foreground deletion propagation, so its objects are gone before the next point starts; `point_seconds`
is the whole point's cost.

Shapes: ConfigMaps; Deployments (`replicas: 0`: kube-controller-manager starts nothing); custom resources
of a CRD installed here (`Widget`): small (about 150 bytes), medium (3 KiB) and large (20 KiB); a mix of
ConfigMaps, Deployments, small and large custom resources; ClusterRoles (cluster-scoped); the other
kinds with a Pod template, with nothing scheduled: StatefulSets and ReplicaSets (`replicas: 0`), CronJobs
and Jobs (suspended), DaemonSets (selecting no node); Services (ClusterIP, selecting no Pod: the
cluster still makes their Endpoints and EndpointSlices) and ServiceAccounts, the kinds many-namespace
platforms hold beside each Deployment; Online Boutique's Deployments as released (`replicas: 0`), whose
templates hold three times the fields of ours, and the Prometheus operator's example Deployment, about
twice as many (a second template size); and a platform
team's repository (`profiles.platform`: Namespaces, ServiceAccounts, RoleBindings, ConfigMaps,
Deployments, Services, NetworkPolicies in the mix counted in Config Sync's own test data; pruning its
Namespaces makes Config Sync v1.22.0 retry the sync about five minutes later, which its `to pruned`
time includes). `--namespaces N` spreads a namespaced shape's objects over N namespaces.
`--extra-crds N` installs N more CRDs first (each its own API group and kind, with a documented schema of
about 15 KiB like a typical operator's CRD, never used by a source), to
measure how the reconciler's memory grows with the API surface it discovers; `crds` in the results is
the number of CRDs the cluster serves at that point, `api_resources` the resource types its discovery
serves (the API surface the service reads). Both take a comma-separated list: every shape and count is
measured at each, in one run (the extra CRDs in increasing order: those installed are not removed).
`--git-period SECONDS` sets each RootSync's `spec.git.period` (Config Sync's default: 15 s): the prune's
commit is fetched on git-sync's next poll, so `to pruned` includes up to one period of waiting.

Results: `<out>/reconciler-memory.csv`, `.md` and `.png`; `--resume` skips the points the CSV has.

On another cluster where Config Sync runs:

    python -m profiles.reconciler_memory --kubeconfig FILE --clone DIR --repo-url URL [--branch main]
                                         [--git-secret NAME] [--sample-seconds 5] [--shapes ...]

each point's manifests are committed to `DIR/<RootSync name>/objects.yaml` in a clone of the repository
the cluster's Config Sync reads (pushed with `git push`: your credentials), and the RootSync syncs
`--repo-url` at that directory. There is no process to read a peak from: the reconciler container's
memory is sampled from the metrics API (`metrics.k8s.io`: the working set, as the kubelet reports it)
every `--sample-seconds` while each commit syncs, and the largest sample is recorded (`measured` says
which: `VmHWM` here, `metrics API` there). A sample interval can miss a short peak: a lower bound.
"""

from __future__ import annotations

import argparse
import copy
import csv
import functools
import os
import platform
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol, cast

import orjson
import yaml
from tqdm import tqdm

from controlplane.configsync_build import VERSION
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync, running_config_sync_on_node
from controlplane.rsyncs import rootsync, with_git_period
from controlplane.seed import install_crds
from controlplane.status_checks import rsync_gone, synced
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from profiles import platform as platform_repository
from profiles.bench_service import memory_mib
from profiles.stress import reconciler_usage

JSON = dict[str, Any]
LIMIT = "4Gi"  # far above any point here: a kill would end the measurement, not size it
SYNC_TIMEOUT = 1800.0
IDLE_S = 30.0  # the window the idle CPU rate is measured over, after the apply synced (--idle-seconds)
WIDGETS = kubeapi.Resource("profiles.objcount.dev", "v1", "widgets", "Widget")
WIDGET_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.profiles.objcount.dev"},
    "spec": {
        "group": "profiles.objcount.dev",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}
LARGE_PAYLOAD = 20 * 1024  # bytes of a large Widget's spec
MEDIUM_PAYLOAD = 3 * 1024  # a medium Widget's: a few KiB


SURFACE_FIELDS = 40  # properties of a surface CRD's schema, each with a description: about 15 KiB


def surface_crd(k: int) -> dict[str, Any]:
    """The k-th CRD of the API surface ramp, under a group and kind of its own, with a schema the size of
    a typical operator's CRD (real CRDs carry documented schemas; the reconciler may hold them)."""
    group = f"g{k}.surface.objcount.dev"
    described = "A field of the surface benchmark, documented as an operator's CRD documents its fields. " * 4
    properties = {
        f"field{i}": {"type": "string", "description": f"{described}(field {i} of kind {k})"}
        for i in range(SURFACE_FIELDS)
    }
    schema = {"type": "object", "properties": {"spec": {"type": "object", "properties": properties}}}
    version = {"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": schema}}
    return {
        **WIDGET_CRD,
        "metadata": {"name": f"gadget{k}s.{group}"},
        "spec": {
            **WIDGET_CRD["spec"],
            "group": group,
            "names": {"kind": f"Gadget{k}", "plural": f"gadget{k}s", "singular": f"gadget{k}"},
            "versions": [version],
        },
    }


def _head(api_version: str, kind: str, name: str, namespace: str) -> str:
    return f"apiVersion: {api_version}\nkind: {kind}\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"


def _container(name: str, indent: str) -> str:
    """A Pod template's one container, its list item at `indent`."""
    return (
        f"{indent}- name: {name}\n{indent}  image: registry.invalid/{name}:1\n"
        f"{indent}  resources: {{requests: {{cpu: 10m, memory: 16Mi}}}}\n"
    )


def _selected_template(name: str, container: str, pod_spec: str = "") -> str:
    """A workload's selector and Pod template (labels `app: name`), `pod_spec` before its containers."""
    labels = f"{{app: {name}}}"
    return (
        f"  selector:\n    matchLabels: {labels}\n  template:\n    metadata:\n      labels: {labels}\n"
        f"    spec:\n{pod_spec}      containers:\n" + _container(container, "      ")
    )


def configmap(i: int, namespace: str) -> str:
    return _head("v1", "ConfigMap", f"cm-{i}", namespace) + f"data:\n  key: value-{i}\n"


def deployment(i: int, namespace: str) -> str:
    return (
        _head("apps/v1", "Deployment", f"app-{i}", namespace)
        + "spec:\n  replicas: 0\n"
        + _selected_template(f"app-{i}", "app")
    )


def statefulset(i: int, namespace: str) -> str:
    """A kind with a Pod template other than a Deployment, with no replicas (nothing is scheduled)."""
    spec = f"spec:\n  replicas: 0\n  serviceName: db-{i}\n"
    return _head("apps/v1", "StatefulSet", f"db-{i}", namespace) + spec + _selected_template(f"db-{i}", "db")


def cronjob(i: int, namespace: str) -> str:
    """A kind with a Pod template two levels down, suspended (no Job is ever made)."""
    spec = "spec:\n  schedule: '0 3 * * *'\n  suspend: true\n  jobTemplate:\n    spec:\n      template:\n"
    pod = "        spec:\n          restartPolicy: Never\n          containers:\n" + _container(
        "job", "          "
    )
    return _head("batch/v1", "CronJob", f"job-{i}", namespace) + spec + pod


def daemonset(i: int, namespace: str) -> str:
    """A kind with a Pod template for every node, selecting none (nothing is scheduled)."""
    nowhere = "      nodeSelector: {objcount.dev/no-such-node: 'true'}\n"
    return (
        _head("apps/v1", "DaemonSet", f"agent-{i}", namespace)
        + "spec:\n"
        + _selected_template(f"agent-{i}", "agent", nowhere)
    )


def job(i: int, namespace: str) -> str:
    """A kind with a Pod template, suspended (no Pod is ever made)."""
    spec = "spec:\n  suspend: true\n  template:\n    spec:\n      restartPolicy: Never\n      containers:\n"
    return _head("batch/v1", "Job", f"task-{i}", namespace) + spec + _container("task", "      ")


def replicaset(i: int, namespace: str) -> str:
    """A Deployment's Pod-template kind without the Deployment, with no replicas."""
    return (
        _head("apps/v1", "ReplicaSet", f"rs-{i}", namespace)
        + "spec:\n  replicas: 0\n"
        + _selected_template(f"rs-{i}", "rs")
    )


def service(i: int, namespace: str) -> str:
    """A ClusterIP Service selecting Pods that never run: the cluster still makes its Endpoints and
    EndpointSlice (the many-namespace platforms hold a Service beside each Deployment)."""
    ports = "  ports:\n  - {name: http, port: 80, targetPort: 8080}\n"
    return _head("v1", "Service", f"svc-{i}", namespace) + f"spec:\n  selector: {{app: svc-{i}}}\n{ports}"


def serviceaccount(i: int, namespace: str) -> str:
    """A ServiceAccount as an application declares one for each of its workloads."""
    return _head("v1", "ServiceAccount", f"sa-{i}", namespace)


# Online Boutique v0.10.6 as released (public manifests kept beside their source, SOURCE.md there).
BOUTIQUE = Path(__file__).parent / "data" / "microservices-demo-v0.10.6" / "kubernetes-manifests.yaml"


# The Prometheus operator's example Deployment (profiles/data/prometheus-operator-v0.93.0/SOURCE.md).
OPERATOR = Path(__file__).parent / "data" / "prometheus-operator-v0.93.0" / "prometheus-operator.yaml"


@functools.cache
def _released_deployments(path: Path) -> tuple[dict[str, Any], ...]:
    return tuple(d for d in yaml.safe_load_all(path.read_text()) if d and d["kind"] == "Deployment")


def boutique_deployment(i: int, namespace: str) -> str:
    """One of Online Boutique's 12 Deployments as released (probes, security contexts, environment: about
    three times the fields of `deployment`'s), named and labelled for `i`, with `replicas: 0` (nothing
    is scheduled): whether a Deployment costs its kind or its template."""
    return _released_deployment(BOUTIQUE, i, namespace)


def operator_deployment(i: int, namespace: str) -> str:
    """The Prometheus operator's example Deployment as published (arguments, resources, security
    contexts: a template between `deployment`'s and Online Boutique's), named and labelled for `i`, with
    `replicas: 0`: a second template size, so that the templates' cost is told by more than one."""
    return _released_deployment(OPERATOR, i, namespace)


def _released_deployment(path: Path, i: int, namespace: str) -> str:
    """The `i`-th (cycling) Deployment of a published file, its own Pods selected by a label of `i`."""
    released = _released_deployments(path)
    spec = copy.deepcopy(released[i % len(released)]["spec"])
    app = f"{released[i % len(released)]['metadata']['name']}-{i}"
    spec["replicas"] = 0
    spec["selector"] = {"matchLabels": {"app": app}}
    spec["template"]["metadata"]["labels"] = {"app": app}
    metadata = {"name": app, "namespace": namespace, "labels": {"app": app}}
    return yaml.safe_dump({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": metadata, "spec": spec})


def widget(i: int, namespace: str, payload: int = 0) -> str:
    # A deterministic filler (not compressible to nothing, not random between runs).
    data = "".join(f"{(i * 7919 + k) % 1000000:06d}" for k in range(payload // 6))
    return (
        f"apiVersion: profiles.objcount.dev/v1\nkind: Widget\nmetadata:\n  name: w-{i}\n"
        f"  namespace: {namespace}\nspec:\n  index: {i}\n  payload: '{data}'\n"
    )


def large_widget(i: int, namespace: str) -> str:
    return widget(i, namespace, LARGE_PAYLOAD)


def medium_widget(i: int, namespace: str) -> str:
    return widget(i, namespace, MEDIUM_PAYLOAD)


def mixed(i: int, namespace: str) -> str:
    return (configmap, deployment, widget, large_widget)[i % 4](i, namespace)


def clusterrole(i: int, namespace: str) -> str:
    """Cluster-scoped: `namespace` only keeps the names of different points apart."""
    return (
        f"apiVersion: rbac.authorization.k8s.io/v1\nkind: ClusterRole\nmetadata:\n  name: {namespace}-{i}\n"
        f"rules:\n- apiGroups: ['']\n  resources: [configmaps]\n  verbs: [get, list, watch]\n"
    )


SHAPES: dict[str, Callable[[int, str], str]] = {
    "configmaps": configmap,
    "deployments": deployment,
    "small-crs": widget,
    "large-crs": large_widget,
    "mix": mixed,
    "medium-crs": medium_widget,
    "clusterroles": clusterrole,
    "platform": platform_repository.manifest,
    "statefulsets": statefulset,
    "cronjobs": cronjob,
    "daemonsets": daemonset,
    "jobs": job,
    "replicasets": replicaset,
    "services": service,
    "serviceaccounts": serviceaccount,
    "boutique-deployments": boutique_deployment,
    "operator-deployments": operator_deployment,
}
# namespaced
SPREADS = (
    "configmaps",
    "deployments",
    "small-crs",
    "medium-crs",
    "large-crs",
    "mix",
    "statefulsets",
    "cronjobs",
    "daemonsets",
    "jobs",
    "replicasets",
    "services",
    "serviceaccounts",
    "boutique-deployments",
    "operator-deployments",
)


def manifests(shape: str, count: int, namespace: str, namespaces: int = 1) -> str:
    """`count` objects of `shape`; those of a namespaced shape spread over `namespaces` namespaces."""
    if namespaces > 1 and shape not in SPREADS:
        raise ValueError(f"{shape} objects cannot be spread over namespaces (its own layout)")

    def where(i: int) -> str:
        return namespace if namespaces == 1 else f"{namespace}-{i % namespaces}"

    return "".join("---\n" + SHAPES[shape](i, where(i)) for i in range(count))


@dataclass
class Point:
    shape: str
    objects: int
    source_bytes: int  # of the commit's manifests, as YAML
    inventory_entries: int
    peak_rss_mib: float  # the peak after the apply (`measured` says which peak: VmHWM on the local stack)
    seconds_to_synced: float  # from the RootSync's creation
    peak_with_prune_mib: float  # the peak after the prune down to one object
    seconds_to_pruned: float  # from the one-object commit
    crds: int  # CRDs the cluster serves (Config Sync's, Widget, the --extra-crds)
    api_resources: int  # resource types discovery serves (what the service reads as the API surface)
    extra_crds: int
    version: str
    date: str
    machine: str
    measured: str = "VmHWM"  # or "metrics API" (another cluster)
    namespaces: int = 1  # the objects' namespaces (besides those a platform repository declares)
    cgroup_peak_mib: float | None = None  # the container cgroup's peak at the end: page cache included
    point_seconds: float | None = None  # the point's cost: from the RootSync's creation to its deletion
    run: int = 1  # the same point measured again (a fresh RootSync and reconciler each time)
    kinds: str = ""  # a repository's objects by kind, JSON (a shape's follow from the shape)
    crd_path_steps: int = 0  # the source's CRDs' fields, each counted at its depth
    # The reconciler container's CPU (its cgroup's CPU time; None where it cannot be read): seconds used
    # from the RootSync's creation to synced and over the prune, and its rate in the IDLE_S seconds after
    # the apply synced (millicores), when it holds the objects and has nothing to apply.
    cpu_seconds_to_synced: float | None = None
    cpu_seconds_to_pruned: float | None = None
    idle_cpu_m: float | None = None
    # A repository's objects with a Pod template: their fields' path steps, as the source counter counts
    # them (a shape's follow from the shape; None: a repository measured before they were counted).
    workload_path_steps: int | None = None


COLUMNS = [f.name for f in fields(Point)]


class Where(Protocol):
    """Where the reconciler runs: the local stack, or another cluster."""

    @property
    def api(self) -> kubeapi.KubeClient: ...
    @property
    def measured(self) -> str: ...
    @property
    def version(self) -> str: ...
    @property
    def machine(self) -> str: ...

    def rootsync(self, key: RSyncKey) -> JSON: ...

    def commit(self, key: RSyncKey, files: Mapping[str, str | None]) -> str:
        """The source of `key` is now these files (None: removed): its commit."""

    def wait_synced(self, key: RSyncKey, commit: str) -> None: ...

    def peak_mib(self, key: RSyncKey) -> float:
        """The reconciler's peak memory so far, since its RootSync was made."""

    def cgroup_peak_mib(self, key: RSyncKey) -> float | None:
        """The reconciler container's cgroup peak (page cache included), where one can be read."""

    def cpu_seconds(self, key: RSyncKey) -> float | None:
        """The CPU time the reconciler container has used so far, where it can be read."""


@dataclass
class LocalStack:
    """The local stack with a real node: commits through git and git-sync (v4.4.2, see
    controlplane.images); the peak is the reconciler process's `VmHWM` (as before the real node), and
    its container cgroup's peak (page cache included) is recorded beside it."""

    config_sync: NodeConfigSync
    measured: str = "VmHWM"
    version: str = VERSION
    containers: dict[RSyncKey, str] = field(default_factory=dict)  # the one each point measures

    @property
    def api(self) -> kubeapi.KubeClient:
        assert self.config_sync.api is not None
        return self.config_sync.api

    @property
    def machine(self) -> str:
        return f"{platform.machine()}, {_cores()} cores"

    def rootsync(self, key: RSyncKey) -> JSON:
        return self.config_sync.rsync(key)

    def commit(self, key: RSyncKey, files: Mapping[str, str | None]) -> str:
        return self.config_sync.commit(key, files)

    def wait_synced(self, key: RSyncKey, commit: str) -> None:
        api = self.api
        _wait(lambda: synced(api.get(kubeapi.ROOTSYNC, key.namespace, key.name), commit), SYNC_TIMEOUT, key)

    def peak_mib(self, key: RSyncKey) -> float:
        """The largest `VmHWM` of the container's processes: unlike the cgroup's peak it leaves out page
        cache, so it compares with a process measured outside a Pod."""
        container = self._container(key)
        pids = (self.config_sync.stack.container_cgroup(container) / "cgroup.procs").read_text().split()
        if not pids:
            raise RuntimeError(f"{key}: the reconciler container {container} has no process")
        return round(max(memory_mib(int(pid), "VmHWM") for pid in pids), 1)

    def cgroup_peak_mib(self, key: RSyncKey) -> float | None:
        peak = self.config_sync.stack.container_memory(self._container(key)).peak
        return round(peak / (1 << 20), 1)

    def cpu_seconds(self, key: RSyncKey) -> float:
        return self.config_sync.stack.container_cpu_seconds(self._container(key))

    def _container(self, key: RSyncKey) -> str:
        """The reconciler container's ID; it must be the one the point started with, not restarted and
        not in a new Pod (a new process and a new cgroup: its peak would start again from zero)."""
        pod = self.config_sync.reconciler_pod(key)
        statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
        status = next((s for s in cast(list[JSON], statuses) if s["name"] == "reconciler"), None)
        if status is None or "running" not in (status.get("state") or {}):
            raise RuntimeError(f"{key}: no running reconciler to measure")
        if status.get("restartCount"):
            raise RuntimeError(f"{key}: the reconciler restarted; its peak is lost: {status}")
        container = cast(str, status["containerID"])
        first = self.containers.setdefault(key, container)
        if container != first:
            pods = self.config_sync.stack.kubectl("get", "pods,replicasets", "-n", key.namespace, check=False)
            raise RuntimeError(
                f"{key}: the reconciler is a new process ({first} then {container}); its peak is lost:\n"
                f"{pods.stdout}"
            )
        return container


@dataclass
class Cluster:
    """Another cluster: commits pushed to a clone of the repository its Config Sync reads; the memory
    sampled from its metrics API while a commit syncs."""

    api: kubeapi.KubeClient
    clone: Path
    url: str
    branch: str = "main"
    secret: str | None = None
    sample_s: float = 5.0
    measured: str = "metrics API"
    version: str = "unknown"
    peaks: dict[str, float] = field(default_factory=dict)

    @property
    def machine(self) -> str:
        return f"cluster {self.api.server}"

    def rootsync(self, key: RSyncKey) -> JSON:
        body = rootsync(key.name)
        auth = {"auth": "token", "secretRef": {"name": self.secret}} if self.secret else {"auth": "none"}
        body["spec"]["git"] = {"repo": self.url, "branch": self.branch, "dir": key.name, **auth}
        self.peaks[key.name] = 0.0
        return body

    def commit(self, key: RSyncKey, files: Mapping[str, str | None]) -> str:
        for name, text in files.items():
            path = self.clone / key.name / name
            if text is None:
                path.unlink(missing_ok=True)
                continue
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
        _git(self.clone, "add", "--all", "--", key.name)
        _git(self.clone, "commit", "--quiet", "--allow-empty", "-m", f"{key.name}: {len(files)} files")
        _git(self.clone, "push", "--quiet", "origin", f"HEAD:{self.branch}")
        return _git(self.clone, "rev-parse", "HEAD").strip()

    def wait_synced(self, key: RSyncKey, commit: str) -> None:
        deadline = time.monotonic() + SYNC_TIMEOUT
        while not synced(self.api.get(kubeapi.ROOTSYNC, key.namespace, key.name), commit):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{key}: not synced within {SYNC_TIMEOUT:.0f} s")
            memory = reconciler_usage(self.api, key)[1]
            if memory is not None:
                self.peaks[key.name] = max(self.peaks.get(key.name, 0.0), float(memory))
            time.sleep(self.sample_s)

    def peak_mib(self, key: RSyncKey) -> float:
        return round(self.peaks.get(key.name, 0.0), 1)

    def cgroup_peak_mib(self, key: RSyncKey) -> None:
        return None

    def cpu_seconds(self, key: RSyncKey) -> None:
        return None


def _git(clone: Path, *args: str) -> str:
    result = subprocess.run(["git", "-C", str(clone), *args], capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise RuntimeError(f"git {args[0]} in {clone}: {result.stderr.strip()[:500]}")
    return result.stdout


@dataclass(frozen=True)
class Source:
    """What a point syncs: its files (a shape's one file, or a repository's tree), and the commit its
    prune goes to (one small object left)."""

    shape: str
    objects: int
    files: Mapping[str, str]
    namespaces: int = 1
    kinds: Mapping[str, int] = field(default_factory=dict)  # a repository's (a shape's follow from it)
    crd_path_steps: int = 0
    workload_path_steps: int | None = None  # a repository's (a shape's follow from it)

    @classmethod
    def of_shape(cls, shape: str, count: int, namespace: str, namespaces: int = 1) -> Source:
        return cls(shape, count, {"objects.yaml": manifests(shape, count, namespace, namespaces)}, namespaces)

    def pruned(self, namespace: str) -> dict[str, str | None]:
        """The commit that prunes all but one object: every file removed, one object of the shape left
        (a ConfigMap for a repository)."""
        shape = self.shape if self.shape in SHAPES else "configmaps"
        return {**dict.fromkeys(self.files), "objects.yaml": manifests(shape, 1, namespace)}

    @property
    def bytes(self) -> int:
        return sum(len(text.encode()) for text in self.files.values())


def measure(
    where: Where,
    shape: str,
    count: int,
    extra_crds: int,
    namespaces: int = 1,
    *,
    idle_s: float = IDLE_S,
    git_period_s: float | None = None,
) -> Point:
    spread = f"-ns{namespaces}" if namespaces > 1 else ""
    name = f"mem-{shape}-{count}-{extra_crds}{spread}"
    source = Source.of_shape(shape, count, name, namespaces)
    return measure_source(where, source, name, extra_crds, idle_s=idle_s, git_period_s=git_period_s)


def measure_source(
    where: Where,
    source: Source,
    name: str,
    extra_crds: int = 0,
    run: int = 1,
    *,
    idle_s: float = IDLE_S,
    git_period_s: float | None = None,
) -> Point:
    """One point: a fresh RootSync `name` syncs `source`, then prunes all but one object; the peaks of
    its reconciler over both, and their times. `git_period_s`: its `spec.git.period` (None: Config Sync's
    default, 15 s)."""
    api = where.api
    key = RSyncKey("RootSync", NAMESPACE, name)
    commit = where.commit(key, source.files)
    body = where.rootsync(key)
    body["metadata"]["annotations"] = {"configsync.gke.io/deletion-propagation-policy": "Foreground"}
    with_git_period(body, git_period_s)
    body["spec"]["override"] = {
        "resources": [{"containerName": "reconciler", "memoryRequest": LIMIT, "memoryLimit": LIMIT}]
    }
    surface = api.api_resource_types()  # what the service reads before the apply (without the source's CRDs)
    began = time.monotonic()
    api.create(kubeapi.ROOTSYNC, key.namespace, body)
    where.wait_synced(key, commit)
    seconds = time.monotonic() - began
    cpu_synced = where.cpu_seconds(key)
    peak = where.peak_mib(key)
    entries = (api.get(kubeapi.RESOURCEGROUP, key.namespace, key.name).get("spec") or {}).get("resources")
    idle_cpu_m = _idle_cpu_m(where, key, idle_s)
    pruning = time.monotonic()
    cpu_pruning = where.cpu_seconds(key)
    commit = where.commit(key, source.pruned(key.name))
    where.wait_synced(key, commit)
    prune_seconds = time.monotonic() - pruning
    cpu_pruned = where.cpu_seconds(key)
    peak_with_prune = where.peak_mib(key)
    cgroup_peak = where.cgroup_peak_mib(key)
    # Not in a `finally`: after a failure or a signal the whole local stack is discarded anyway.
    api.delete(kubeapi.ROOTSYNC, key.namespace, key.name)
    _wait(lambda: rsync_gone(api, key), SYNC_TIMEOUT, key)
    return Point(
        source.shape,
        source.objects,
        source.bytes,
        len(entries or []),
        peak,
        round(seconds, 1),
        peak_with_prune,
        round(prune_seconds, 1),
        _crds(api),
        surface,
        extra_crds,
        where.version,
        datetime.now(UTC).date().isoformat(),
        where.machine,
        where.measured,
        source.namespaces,
        cgroup_peak,
        round(time.monotonic() - began, 1),
        run,
        orjson.dumps(dict(sorted(source.kinds.items()))).decode() if source.kinds else "",
        source.crd_path_steps,
        None if cpu_synced is None else round(cpu_synced, 2),
        None if cpu_pruned is None or cpu_pruning is None else round(cpu_pruned - cpu_pruning, 2),
        idle_cpu_m,
        source.workload_path_steps,
    )


def _idle_cpu_m(where: Where, key: RSyncKey, seconds: float) -> float | None:
    """The reconciler's CPU rate (millicores) over `seconds` after its apply synced: what it
    uses holding the objects, watching them and polling its source, with nothing to apply."""
    began, since = time.monotonic(), where.cpu_seconds(key)
    if since is None:
        return None
    time.sleep(seconds)  # a measurement window, not a wait for a condition
    used = where.cpu_seconds(key)
    return None if used is None else round((used - since) / (time.monotonic() - began) * 1000, 1)


def _crds(api: kubeapi.KubeClient) -> int:
    """CRDs the cluster serves (fewer than a page's 500 here: the ramp installs at most a few hundred)."""
    return len(orjson.loads(api.list_page(kubeapi.CRD, None, limit=5000))["items"])


def _wait(condition: Callable[[], bool], timeout: float, key: RSyncKey) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{key}: not done within {timeout:.0f} s")
        time.sleep(0.5)


def _cores() -> int:
    return os.cpu_count() or 0


def read_points(path: Path) -> list[Point]:
    if not path.exists():
        return []
    with path.open() as file:  # `#` lines: a data file's provenance (profiles/data)
        rows = list(csv.DictReader(line for line in file if not line.startswith("#")))
    kinds = {f.name: str(f.type) for f in fields(Point)}
    convert: dict[str, Callable[[str], Any]] = {
        "int": int,
        "float": float,
        "str": str,
        "float | None": lambda v: float(v) if v else None,
        "int | None": lambda v: int(v) if v else None,
    }
    # Columns a CSV written before a field existed lacks take the field's default; a column no field
    # has now (renamed since) is left out.
    return [Point(**{k: convert[kinds[k]](v) for k, v in row.items() if k in kinds}) for row in rows]


def write_points(path: Path, points: list[Point]) -> None:
    path.unlink(missing_ok=True)
    for point in points:
        append(path, point)


def append(path: Path, point: Point) -> None:
    new = not path.exists()
    with path.open("a", newline="") as file:
        writer = csv.DictWriter(file, COLUMNS)
        if new:
            writer.writeheader()
        writer.writerow(asdict(point))


def markdown(points: list[Point]) -> str:
    lines = [
        "| shape | objects | namespaces | source KiB | inventory | CRDs | peak RSS, apply (MiB) | peak RSS "
        "with the prune (MiB) | cgroup peak (MiB) | to synced (s) | to pruned (s) | point (s) | CPU s, apply "
        "| CPU s, prune | CPU m, idle |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for p in points:
        cgroup = _cell(p.cgroup_peak_mib, ".1f")
        lines.append(
            f"| {p.shape} | {p.objects} | {p.namespaces} | {p.source_bytes / 1024:.0f} | "
            f"{p.inventory_entries} | {p.crds} | {p.peak_rss_mib:.1f} | {p.peak_with_prune_mib:.1f} | "
            f"{cgroup} | {p.seconds_to_synced:.1f} | {p.seconds_to_pruned:.1f} "
            f"| {_cell(p.point_seconds, '.0f')} "
            f"| {_cell(p.cpu_seconds_to_synced, '.1f')} | {_cell(p.cpu_seconds_to_pruned, '.1f')} "
            f"| {_cell(p.idle_cpu_m, '.0f')} |"
        )
    return "\n".join(lines) + "\n"


def _cell(value: float | None, spec: str) -> str:
    return "" if value is None else format(value, spec)


def plot(points: list[Point], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - slow to import, needed only here

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    figure, axis = plt.subplots(figsize=(8, 4.5))
    local = [p for p in points if not p.extra_crds and p.namespaces == 1]
    for shape in dict.fromkeys(p.shape for p in local):
        mine = sorted((p.objects, p.peak_rss_mib, p.peak_with_prune_mib) for p in local if p.shape == shape)
        objects, apply, prune = zip(*mine, strict=True)
        (line,) = axis.plot(objects, apply, "o-", label=shape)
        axis.plot(objects, prune, "x--", color=line.get_color(), label=f"{shape}, with the prune")
    for p in (p for p in points if p.extra_crds):
        label = f"{p.shape}, {p.api_resources} API resources, with the prune"
        axis.plot([p.objects], [p.peak_with_prune_mib], "s", label=label)
    axis.set_xlabel("objects in the commit")
    axis.set_ylabel("reconciler peak RSS (MiB)")
    axis.set_title(f"Config Sync {VERSION} reconciler, fresh start, local control plane", fontsize=9)
    axis.legend(fontsize=7, loc="upper left")
    figure.tight_layout()
    figure.savefig(path, dpi=90)


def run(
    shapes: list[str],
    counts: list[int],
    out: Path,
    resume: bool,
    extra_crds: Sequence[int] = (0,),
    *,
    namespaces: Sequence[int] = (1,),
    cluster: Cluster | None = None,
    idle_s: float = IDLE_S,
    git_period_s: float | None = None,
) -> list[Point]:
    """Measure on the local stack, or on `cluster` when given: every shape and count at each number of
    extra CRDs (in increasing order: those installed stay) and each spread over namespaces."""
    out.mkdir(parents=True, exist_ok=True)
    table = out / "reconciler-memory.csv"
    if not resume:
        table.unlink(missing_ok=True)
    done = {(p.shape, p.objects, p.extra_crds, p.namespaces) for p in read_points(table)}
    todo = [
        (s, n, crds, spread)
        for crds in sorted(set(extra_crds))
        for spread in dict.fromkeys(namespaces)
        for s in shapes
        for n in counts
        if (s, n, crds, spread) not in done
    ]

    def measure_all(where: Where) -> None:
        install_crds(where.api, [WIDGET_CRD])
        installed = 0
        for shape, count, crds, spread in tqdm(todo, desc="points", unit="point"):
            if crds > installed:
                install_crds(where.api, [surface_crd(k) for k in range(installed, crds)])
                installed = crds
            point = measure(where, shape, count, crds, spread, idle_s=idle_s, git_period_s=git_period_s)
            append(table, point)

    if cluster is not None:
        measure_all(cluster)
    else:
        with running_config_sync_on_node() as config_sync:
            measure_all(LocalStack(config_sync))
    points = read_points(table)
    (out / "reconciler-memory.md").write_text(markdown(points))
    plot(points, out / "reconciler-memory.png")
    return points


def _cluster(args: argparse.Namespace) -> Cluster | None:
    if args.kubeconfig is None:
        return None
    if args.clone is None or args.repo_url is None:
        raise SystemExit(
            "--kubeconfig needs --clone (a clone you can push to) and --repo-url (as Config Sync reads it)"
        )
    return Cluster(
        kubeapi.KubeClient.connect(args.kubeconfig),
        args.clone,
        args.repo_url,
        args.branch,
        args.git_secret,
        args.sample_seconds,
    )


def _numbers(text: str) -> list[int]:
    """A comma-separated list of whole numbers, as --counts, --extra-crds and --namespaces take them."""
    return [int(n) for n in text.split(",") if n]


def main() -> None:
    # SIGTERM unwinds like Ctrl-C, so the local stack is stopped and its directory removed.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    parser = argparse.ArgumentParser(
        prog="python -m profiles.reconciler_memory", description=__doc__.split("\n")[0]
    )
    parser.add_argument(
        "--shapes", default=",".join(SHAPES), help="comma-separated, of: " + ", ".join(SHAPES)
    )
    parser.add_argument("--counts", default="250,1000,2000", help="comma-separated object counts")
    parser.add_argument("--out", type=Path, default=Path("profiles/out/reconciler-memory"))
    surface = (
        "more CRDs to install first (API surface); comma-separated: each point at each, in increasing order"
    )
    parser.add_argument("--extra-crds", default="0", metavar="N[,N...]", help=surface)
    spreads = (
        "spread the objects over N namespaces (shapes "
        + ", ".join(SPREADS)
        + "); comma-separated: each point at each"
    )
    parser.add_argument("--namespaces", default="1", metavar="N[,N...]", help=spreads)
    parser.add_argument("--resume", action="store_true", help="keep the CSV's points and measure the rest")
    idle = "seconds the idle CPU rate is measured over, after each apply synced"
    parser.add_argument("--idle-seconds", type=float, default=IDLE_S, help=idle)
    period = (
        "seconds between git-sync's fetches of each point's repository (its RootSync's spec.git.period; "
        "default: Config Sync's 15): the prune's commit waits for the next fetch"
    )
    parser.add_argument("--git-period", type=float, metavar="SECONDS", help=period)
    other = parser.add_argument_group("another cluster where Config Sync runs (default: the local stack)")
    other.add_argument("--kubeconfig", help="its kubeconfig")
    other.add_argument("--clone", type=Path, help="a clone of the repository its Config Sync reads")
    other.add_argument("--repo-url", help="that repository's URL, as Config Sync reads it")
    other.add_argument("--branch", default="main", help="the branch to push and sync")
    other.add_argument("--git-secret", help="a Secret in config-management-system (auth: token)")
    other.add_argument("--sample-seconds", type=float, default=5.0, help="metrics API sampling interval")
    args = parser.parse_args()
    shapes = [s for s in args.shapes.split(",") if s]
    unknown = sorted(set(shapes) - set(SHAPES))
    if unknown:
        parser.error(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    extra_crds, namespaces = _numbers(args.extra_crds), _numbers(args.namespaces)
    if not extra_crds or not namespaces or min(extra_crds) < 0 or min(namespaces) < 1:
        parser.error("--extra-crds takes numbers from 0, --namespaces from 1")
    if max(namespaces) > 1 and set(shapes) - set(SPREADS):
        parser.error(f"--namespaces spreads only {', '.join(SPREADS)}")
    if args.git_period is not None and args.git_period <= 0:
        parser.error("--git-period must be positive")
    points = run(
        shapes,
        _numbers(args.counts),
        args.out,
        args.resume,
        extra_crds,
        namespaces=namespaces,
        cluster=_cluster(args),
        idle_s=args.idle_seconds,
        git_period_s=args.git_period,
    )
    print(markdown(points))


if __name__ == "__main__":
    main()
