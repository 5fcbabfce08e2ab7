"""What the tests of Config Sync on the real node read from it, worked out here rather than with the code
under test: RSync fields, Pod and container status, cgroups (as the kubelet set them), the host's view
of a container's process, our containers' metrics (through the API server's Pod proxy) and logs."""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

import orjson
import yaml

from autoscaler.core.annotations import SOURCE_ANNOTATION, SYNC_ANNOTATION
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.resources import create_or_replace
from controlplane.rsyncs import grant_reposync
from controlplane.seed import configmaps_yaml, ensure_namespace
from controlplane.stack import NodeStack
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import kib, legacy_count, size_aware_by_hand

JSON = dict[str, Any]
METRICS_PORT = 9464  # our containers' metrics (the shipped manifests)
HEALTH_PORT = 8081


def configmaps(count: int, namespace: str = "apps") -> dict[str, str]:
    """`count` ConfigMaps, one file each (JSON, which is YAML)."""
    return {
        f"cm-{i}.yaml": json.dumps(
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": f"cm-{i}", "namespace": namespace},
                "data": {"i": str(i)},
            }
        )
        for i in range(count)
    }


def objects_in(text: str) -> int:
    """Objects in a manifest file, counted here with PyYAML (not with the code under test)."""
    return sum(1 for document in yaml.safe_load_all(text) if document)


def rsync_of(api: kubeapi.KubeClient, key: RSyncKey) -> JSON:
    return api.get(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)


def counts(api: kubeapi.KubeClient, key: RSyncKey) -> tuple[str | None, str | None]:
    annotations = rsync_of(api, key)["metadata"].get("annotations") or {}
    return annotations.get(SOURCE_ANNOTATION), annotations.get(SYNC_ANNOTATION)


def override(api: kubeapi.KubeClient, key: RSyncKey) -> JSON:
    """The reconciler container's entry of the RSync's spec.override.resources ({} when there is none)."""
    return override_of(rsync_of(api, key))


def override_of(rsync: JSON) -> JSON:
    """`override` of an RSync body already read."""
    entries = ((rsync.get("spec") or {}).get("override") or {}).get("resources") or []
    return next((e for e in entries if e.get("containerName") == "reconciler"), {})


def generation(api: kubeapi.KubeClient, key: RSyncKey) -> int:
    """The generation of the RSync's reconciler Deployment (each change of its template, a rollout)."""
    return int(api.get(kubeapi.DEPLOYMENT, NAMESPACE, reconciler_name(key))["metadata"]["generation"])


def inventory_entries(api: kubeapi.KubeClient, key: RSyncKey) -> list[JSON]:
    group = api.get(kubeapi.RESOURCEGROUP, key.namespace, key.name)
    entries: list[JSON] = (group.get("spec") or {}).get("resources") or []
    return entries


def fitted(target: str, **settings: str) -> dict[str, str]:
    """Our settings: this target, no scale-down delay, and the count-only `fitted` preset (whose sizes
    are worked out by hand in the tests) unless `preset` is given; `settings` by name without OBJCOUNT_."""
    return {
        "OBJCOUNT_PRESET": "fitted",
        "OBJCOUNT_TARGET": target,
        "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": "0",
        **{f"OBJCOUNT_{name.upper()}": value for name, value in settings.items()},
    }


def reconciler_resources(template_or_pod_spec: JSON) -> JSON:
    containers = template_or_pod_spec["containers"]
    resources: JSON = next(c for c in containers if c["name"] == "reconciler").get("resources") or {}
    return resources


def memory_limit_of_pod(pod: JSON) -> str | None:
    limit: str | None = reconciler_resources(pod["spec"]).get("limits", {}).get("memory")
    return limit


def container_status(pod: JSON, container: str) -> JSON:
    """A container's status in the Pod ({} until the kubelet reports it)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return cast(JSON, next((s for s in statuses if s["name"] == container), {}))


def oom_killed_at(limit: str) -> Callable[[JSON], bool]:
    """Whether a version of a reconciler Pod shows its reconciler OOM-killed under this memory limit: the
    kill is the container's current state until the kubelet restarts it, its last state after (a Pod
    may be replaced before that restart)."""

    def killed(pod: JSON) -> bool:
        status = container_status(pod, "reconciler")
        states = [status.get("state") or {}, status.get("lastState") or {}]
        oom = any((state.get("terminated") or {}).get("reason") == "OOMKilled" for state in states)
        return oom and memory_limit_of_pod(pod) == limit

    return killed


class PodHistory:
    """Every version of a reconciler's Pods the API server reports while it is open, read by a watch in a
    thread: a state that lasts less than a poll (a Pod the sidecar has already replaced) is still seen.
    The watch is a test's own reader, not the code under test."""

    def __init__(self, api: kubeapi.KubeClient, key: RSyncKey) -> None:
        self._api = api
        self._selector = f"configsync.gke.io/deployment-name={reconciler_name(key)}"
        self._versions: list[JSON] = []
        self._lock = threading.Lock()
        self._stopped = threading.Event()
        self._stream: kubeapi.WatchStream | None = None
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> PodHistory:
        self._list()
        self._thread.start()
        return self

    def _list(self) -> None:
        page = orjson.loads(self._api.list_page(kubeapi.POD, NAMESPACE, label_selector=self._selector))
        with self._lock:
            self._versions.extend(page.get("items") or [])
        self._resource_version: str = page["metadata"]["resourceVersion"]

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        if self._stream is not None:
            self._stream.shutdown()
        self._thread.join(timeout=30)

    def _watch(self) -> None:
        while not self._stopped.is_set():  # the server ends a watch after its timeout: watch on from there
            self._stream = self._api.watch(
                kubeapi.POD, NAMESPACE, resource_version=self._resource_version, label_selector=self._selector
            )
            with contextlib.suppress(kubeapi.Transient):
                for line in self._stream:
                    event = orjson.loads(line)
                    if event["type"] == "ERROR":  # 410 Gone: list again, and watch on from the list
                        self._list()
                        break
                    self._resource_version = event["object"]["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        with self._lock:
                            self._versions.append(event["object"])

    def states(self, container: str) -> str:
        """Each version's memory limit and the container's state and last state, one line each (for a
        failure's explanation)."""
        with self._lock:
            versions = list(self._versions)
        lines = []
        for pod in versions:
            status = container_status(pod, container)
            limit = memory_limit_of_pod(pod)
            lines.append(
                f"{pod['metadata']['name']} {limit}: {status.get('state')} / {status.get('lastState')}"
            )
        return "\n".join(lines)

    def find(self, wanted: Callable[[JSON], bool]) -> JSON | None:
        """The first version seen of which `wanted` holds."""
        with self._lock:
            return next((pod for pod in self._versions if wanted(pod)), None)


def running_container(cs: NodeConfigSync, key: RSyncKey, container: str) -> JSON | None:
    """The status of a running container of the RSync's live reconciler Pod (None when there is none)."""
    status = container_status(cast(JSON, cs.reconciler_pod(key) or {}), container)
    return status if "running" in status.get("state", {}) else None


def reconciler_memory_limit(cs: NodeConfigSync, key: RSyncKey) -> int | None:
    """The memory limit of the RSync's running reconciler container, read from its cgroup."""
    status = running_container(cs, key, "reconciler")
    try:
        return None if status is None else cs.stack.container_memory(status["containerID"]).limit
    except (OSError, LookupError):  # the container went away between the two reads
        return None


def reconciler_memory_said(cs: NodeConfigSync, key: RSyncKey) -> str:
    """What a test that waits on the reconciler's memory cgroup says at its timeout: the limit its Pod asks
    for, and the cgroup's, or why the cgroup could not be read."""
    pod = cast(JSON, cs.reconciler_pod(key) or {})
    asked = next(
        (c.get("resources") for c in pod.get("spec", {}).get("containers", []) if c["name"] == "reconciler"),
        None,
    )
    status = running_container(cs, key, "reconciler")
    if status is None:
        return f"the reconciler asks for {asked}; no reconciler container is running"
    try:
        limit: object = cs.stack.container_memory(status["containerID"]).limit
    except (OSError, LookupError) as error:
        limit = f"unreadable ({error})"
    return f"the reconciler asks for {asked}; its memory cgroup's limit: {limit}"


def main_pid(stack: NodeStack, container_id: str) -> int:
    """The host's pid of a container's first process (read from the cgroup the kubelet made for it)."""
    return int((stack.container_cgroup(container_id) / "cgroup.procs").read_text().split()[0])


def our_process(stack: NodeStack, container_id: str) -> JSON:
    """A container's main process as the host sees it: its uid, and whether its root is mounted read-only."""
    pid = main_pid(stack, container_id)
    status = Path(f"/proc/{pid}/status").read_text()
    uid = int(next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1])
    root = next(
        line for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines() if line.split()[4] == "/"
    )
    return {"uid": uid, "root_read_only": "ro" in root.split()[5].split(",")}


def quantity_bytes(memory: str) -> int:
    """A memory quantity in Mi or Gi (what the sizing writes), or plain bytes, in bytes."""
    if memory.isdigit():
        return int(memory)
    number, unit = int(memory[:-2]), memory[-2:]
    return number << {"Mi": 20, "Gi": 30}[unit]


def quantity_millicores(cpu: str) -> int:
    """A CPU quantity in millicores ("150m") or whole cores ("1") in millicores."""
    return int(cpu[:-1]) if cpu.endswith("m") else int(cpu) * 1000


Size = tuple[str, str]  # CPU request, memory request (no limits: the size-aware preset on Standard)


def numbers(resources: JSON | None) -> tuple[int, int, int | None, int | None] | None:
    """A `resources` block as numbers (the API server writes 1024Mi as 1Gi): CPU request and limit in
    millicores, memory request and limit in bytes; None for no block."""
    if not resources:
        return None
    requests, limits = resources.get("requests") or {}, resources.get("limits") or {}
    cpu_limit, memory_limit = limits.get("cpu"), limits.get("memory")
    return (
        quantity_millicores(requests.get("cpu", "0")),
        quantity_bytes(requests.get("memory", "0")),
        None if cpu_limit is None else quantity_millicores(cpu_limit),
        None if memory_limit is None else quantity_bytes(memory_limit),
    )


def running_size(cs: NodeConfigSync, key: RSyncKey) -> tuple[int, int, int | None, int | None] | None:
    """What the kubelet reports the RSync's running reconciler container has (its status `resources`),
    as `numbers`; None until it reports them."""
    return numbers((running_container(cs, key, "reconciler") or {}).get("resources"))


def runs_at(cs: NodeConfigSync, key: RSyncKey, size: Size) -> bool:
    """The RSync's reconciler runs at `size` (worked out by hand): as the kubelet reports it, without a
    limit, and in a memory cgroup without one."""
    cpu, memory = size
    wanted = (quantity_millicores(cpu), quantity_bytes(memory), None, None)
    return running_size(cs, key) == wanted and reconciler_memory_limit(cs, key) is None


def applied(api: kubeapi.KubeClient, key: RSyncKey) -> JSON | None:
    """The size the service recorded as applied on the RSync (`objcount.dev/applied-resources`)."""
    text = (rsync_of(api, key)["metadata"].get("annotations") or {}).get("objcount.dev/applied-resources")
    return None if text is None else cast(JSON, json.loads(text))


def applied_memory(api: kubeapi.KubeClient, key: RSyncKey) -> str | None:
    recorded = applied(api, key) or {}
    return cast(str | None, (recorded.get("requests") or {}).get("memory"))


def pod_get(api: kubeapi.KubeClient, pod: str, port: int, path: str) -> tuple[int, str]:
    """GET a path of a Pod's port through the API server's Pod proxy (the API server dials the Pod's
    address on the node's bridge): the status and the body."""
    try:
        body = api.request("GET", f"/api/v1/namespaces/{NAMESPACE}/pods/{pod}:{port}/proxy{path}")
    except kubeapi.ApiError as error:
        return error.status, str(error)
    return 200, body.decode()


def metric(api: kubeapi.KubeClient, pods: list[str], line_start: str) -> float:
    """The sum of a metric's samples over our containers in these Pods (-1 when one cannot be read)."""
    total = 0.0
    for pod in pods:
        status, text = pod_get(api, pod, METRICS_PORT, "/metrics")
        if status != 200:
            return -1.0
        total += sum(float(line.split()[-1]) for line in text.splitlines() if line.startswith(line_start))
    return total


def container_log(cs: NodeConfigSync, pod: JSON | str, container: str, *, tail: int = 3000) -> str:
    name = pod if isinstance(pod, str) else pod["metadata"]["name"]
    log = cs.stack.kubectl("logs", "-n", NAMESPACE, name, "-c", container, check=False).stdout
    return log[-tail:] if tail else log


def json_log(cs: NodeConfigSync, pod: JSON | str, container: str) -> list[JSON]:
    """Our container's log lines (JSON) as the kubelet kept them."""
    lines = []
    for line in container_log(cs, pod, container, tail=0).splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(line))
    return lines


def assert_sidecar_has_only_its_own_token(cs: NodeConfigSync, pod: JSON, pid: int, account: str) -> None:
    """The sidecar's token is its account's (objcount-sidecar for every RootSync, one per RepoSync), and
    the Pod's own token is mounted nowhere in it."""
    # Where the token volume is mounted as the container sees it (the image's /var/run links to /run, and
    # an absolute link inside /proc/<pid>/root would be followed on the host).
    mounted = [
        line.split()[4]
        for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
        if line.split()[4].endswith("/secrets/kubernetes.io/serviceaccount")
    ]
    assert len(mounted) == 1, mounted
    token = Path(f"/proc/{pid}/root{mounted[0]}/token").read_text()
    as_sidecar = kubeapi.KubeClient.connect(str(cs.stack.plane.kubeconfig_for_token(token, f"sidecar-{pid}")))
    review = as_sidecar.request_json(
        "POST",
        "/apis/authentication.k8s.io/v1/selfsubjectreviews",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
    )
    as_sidecar.close()
    assert review["status"]["userInfo"]["username"] == f"system:serviceaccount:{NAMESPACE}:{account}"
    pod_token_volumes = [v["name"] for v in pod["spec"]["volumes"] if v["name"].startswith("kube-api-access")]
    assert pod_token_volumes, "the Pod has its own token volume (for Config Sync's containers)"
    mounts = Path(f"/proc/{pid}/mountinfo").read_text()
    assert not [name for name in pod_token_volumes if name in mounts]


def suffix() -> str:
    return uuid.uuid4().hex[:8]


def finished(rsync: JSON, commit: str) -> bool:
    """The RSync says its reconciler finished the sync of `commit` without errors (read here from the
    status fields, not with the code under test)."""
    status = rsync.get("status") or {}
    syncing = next((c for c in status.get("conditions") or [] if c["type"] == "Syncing"), {})
    done = (
        (status.get("source") or {}).get("commit") == commit
        and (status.get("sync") or {}).get("commit") == commit
        and syncing.get("status") == "False"
        and syncing.get("message") == "Sync Completed"
        and status.get("lastSyncedCommit") == commit
    )
    return bool(done)


def size_aware_size(api: kubeapi.KubeClient, manifests: str, configmaps: int, others: int) -> Size:
    """The shipped size-aware size (CPU, memory, memory limit) of an RSync whose source is `manifests` (`configmaps`
    ConfigMaps) and whose inventory has `others` more entries (a RootSync's implicit Namespace), by hand:
    the source's KiB scaled to the inventory's objects, rounded up."""
    objects = configmaps + others
    return size_aware_by_hand(
        configmaps=configmaps,
        others=others,
        kib=-(-kib(manifests) * objects // configmaps),
        api_resources=legacy_count(api),
    )


def root_and_repo(
    cs: NodeConfigSync, rsyncs: list[RSyncKey], prefix: str, *, grant_sidecar: bool
) -> tuple[RSyncKey, RSyncKey, dict[RSyncKey, tuple[str, str]]]:
    """A RootSync of 40 ConfigMaps (in a namespace it creates) and a RepoSync of 25 in a new namespace,
    created (the RootSync first) with their commits: the keys, and each one's (commit, manifests)."""
    made = roots_and_repos(cs, rsyncs, prefix, roots=(40,), repos=(25,), grant_sidecar=grant_sidecar)
    root, repo = list(made)
    return root, repo, {key: (commit, text) for key, (_, commit, text) in made.items()}


def roots_and_repos(
    cs: NodeConfigSync,
    rsyncs: list[RSyncKey],
    prefix: str,
    *,
    roots: Sequence[int],
    repos: Sequence[int],
    grant_sidecar: bool,
) -> dict[RSyncKey, tuple[int, str, str]]:
    """A RootSync of each of `roots` ConfigMaps (each in a namespace it creates) and a RepoSync of each of
    `repos` in a namespace of its own, committed at once and created (the RootSyncs first): each one's
    (ConfigMaps, commit, manifests). Each RepoSync has Config Sync's RoleBinding for its reconciler, as
    Config Sync's documentation asks, and, with `grant_sidecar`, ours for its sidecar (`objcount
    grant-reposync`, applied)."""
    api = cs.api
    manifests: dict[RSyncKey, tuple[int, str]] = {}
    for configmaps in roots:
        key = RSyncKey("RootSync", NAMESPACE, f"{prefix}-{suffix()}")
        manifests[key] = (configmaps, configmaps_yaml(configmaps, namespace=f"apps-{suffix()}"))
    for configmaps in repos:
        team = f"team-{suffix()}"
        ensure_namespace(api, team)
        key = RSyncKey("RepoSync", team, "repo-sync")
        grant_reposync(api, team, key.name)
        if grant_sidecar:
            granted = subprocess.run(
                [sys.executable, "-m", "autoscaler.cli", "grant-reposync", team, key.name],
                capture_output=True,
                text=True,
                check=True,
            )
            for item in yaml.safe_load_all(granted.stdout):
                create_or_replace(api, item)
        manifests[key] = (configmaps, configmaps_yaml(configmaps, namespace=team))
    made = {key: (n, cs.commit(key, {"configmaps.yaml": text}), text) for key, (n, text) in manifests.items()}
    for key in made:
        api.create(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, cs.rsync(key))
        rsyncs.append(key)
    return made


def root_and_repo_by_hand(
    api: kubeapi.KubeClient, root: RSyncKey, repo: RSyncKey, synced: dict[RSyncKey, tuple[str, str]]
) -> tuple[dict[RSyncKey, tuple[str, str]], dict[RSyncKey, Size]]:
    """What each of root_and_repo's RSyncs gets from its own sidecar, by hand: the counts (source,
    inventory: 40 ConfigMaps and the RootSync's implicit Namespace, and 25 ConfigMaps) and the shipped
    size-aware size (CPU, memory, memory limit)."""
    expected = {root: ("40", "41"), repo: ("25", "25")}
    sizes = {
        key: size_aware_size(api, synced[key][1], n, others)
        for key, n, others in ((root, 40, 1), (repo, 25, 0))
    }
    return expected, sizes


class ReconcilerPeaks:
    """The kernel's peak memory (the cgroup's peak, as the kubelet made it) of every
    reconciler container of an RSync while it is open, read in a thread every 0.2 s: the peak of a container
    the sidecar replaces is kept from its last read. The test's own reader, not the code under test."""

    def __init__(self, cs: NodeConfigSync, key: RSyncKey) -> None:
        self._cs, self._key = cs, key
        self.peaks: dict[str, int] = {}  # container ID -> bytes
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def __enter__(self) -> ReconcilerPeaks:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopped.set()
        self._thread.join(timeout=30)

    def _poll(self) -> None:
        while not self._stopped.wait(0.2):
            pod = cast(JSON, self._cs.reconciler_pod(self._key) or {})
            container = container_status(pod, "reconciler").get("containerID")
            if container:
                with contextlib.suppress(OSError, LookupError):
                    peak = self._cs.stack.container_memory(container).peak
                    self.peaks[container] = max(peak, self.peaks.get(container, 0))


def events_on(api: kubeapi.KubeClient, namespace: str, uid: str) -> list[JSON]:
    """Our Events about the object of `uid`, as the API server stores them (read here, not by the code
    under test)."""
    page = orjson.loads(api.list_page(kubeapi.EVENT, namespace))
    return [
        e
        for e in page.get("items") or []
        if (e.get("regarding") or {}).get("uid") == uid
        and e.get("reportingController") == "objcount.dev/autoscaler"
    ]


def resize_condition(pod: JSON) -> str | None:
    """The reason of the Pod's PodResizePending condition, as the kubelet reports it."""
    conditions = (pod.get("status") or {}).get("conditions") or []
    return next((c.get("reason") for c in conditions if c.get("type") == "PodResizePending"), None)
