"""Config Sync itself on the local stack with a real node: its CRDs and objects as released, its
reconciler-manager and reconcilers built from the pinned source into images the kubelet runs, and a git
server on the node's network its RSyncs fetch from.

What runs is unmodified Config Sync, the release pinned in `configsync-pins` (v1.25.0 by default,
another by `OBJCOUNT_CONFIGSYNC_VERSION`; see controlplane.configsync_build), installed as
controlplane.configsync_install says; kube-controller-manager creates the Pods, kube-scheduler binds
them, the kubelet runs them with containerd and runc. git-sync and the OpenTelemetry Collector (the
otel-agent in each reconciler Pod, the otel-collector in config-management-monitoring) are their pinned
releases built here (see controlplane.images); commits come from a git server on the node's network
(controlplane.git_server). Off Google Cloud the reconciler-manager logs an error for the otel collector's
ConfigMap every few seconds ("could not find default credentials"), with or without us: that is Config
Sync on any cluster without Google credentials.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import orjson

from controlplane.autoscaler_install import WEBHOOK_NAME, install_cluster, install_guard, install_sidecar
from controlplane.configsync_build import VERSION, ConfigSyncBuild, build_configsync
from controlplane.configsync_install import NAMESPACE, install_config_sync, release_images
from controlplane.errors import ControlPlaneError
from controlplane.fault_proxy import FaultProxy
from controlplane.git_server import GitServer
from controlplane.images import configsync_node_images
from controlplane.kubernetes_build import VERSION as KUBERNETES_VERSION
from controlplane.rsyncs import rsync_object, with_git_period
from controlplane.sandbox import NODE_IP
from controlplane.seed import JSON
from controlplane.stack import NodeStack, running_node_stack
from controlplane.status_checks import container_running
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.core.objects import Pod
from inventory.kube import kubeapi

RECONCILER_MANAGER_TIMEOUT = 120  # seconds
WEBHOOK_READY_TIMEOUT = 100  # seconds; within kubectl's own 120 s (NodeStack.kubectl)
REPLICASET = kubeapi.Resource("apps", "v1", "replicasets", "ReplicaSet")
STORY_LINES = 8  # of ReplicaSets and of Events in `reconciler_story` (a rollout loop makes hundreds)


@dataclass
class NodeConfigSync:
    """Config Sync on the real node: every Pod run by the kubelet from the images above, and a git server
    on the node's network that each RSync's git-sync fetches from. Tests write commits with git."""

    stack: NodeStack
    build: ConfigSyncBuild
    polling_period: str = "2s"
    # Each RSync's spec.git.period (rsync()); None: Config Sync's default, 15 s.
    git_period_s: float | None = None
    api: kubeapi.KubeClient | None = None
    git: GitServer | None = None

    def start(self) -> NodeConfigSync:
        self.api = kubeapi.KubeClient.connect(str(self.stack.plane.kubeconfig))
        try:
            self.git = GitServer(self.stack.sandbox, self.stack.sandbox.work_dir / "git").start()
            install_config_sync(
                self.api,
                self.build,
                polling_period=self.polling_period,
                images=release_images(self.build.version),
            )
            install_guard(self.api)  # as a user who installed us has it: Config Sync must run under it
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        if self.git is not None:
            self.git.stop()
        if self.api is not None:
            self.api.close()

    def repository(self, key: RSyncKey) -> str:
        return f"{key.kind.lower()}-{key.namespace}-{key.name}"

    def rsync(self, key: RSyncKey, *, sync_dir: str = "config", git_period_s: float | None = None) -> JSON:
        """A RootSync or RepoSync of its own repository on the node's git server (unstructured for a
        RootSync, as the tests' objects are), fetched every `git_period_s` (else `self.git_period_s`)."""
        assert self.git is not None
        body = rsync_object(key.kind, key.namespace, key.name, sync_dir)
        body["spec"]["git"]["repo"] = self.git.url(self.repository(key))
        if key.kind == "RootSync":
            body["spec"]["sourceFormat"] = "unstructured"
        return with_git_period(body, git_period_s if git_period_s is not None else self.git_period_s)

    def commit(self, key: RSyncKey, files: Mapping[str, str | None], *, sync_dir: str = "config") -> str:
        """Commit `files` (names relative to the sync directory; None removes one) with git; its hash."""
        assert self.git is not None
        return self.git.commit(
            self.repository(key), {f"{sync_dir}/{name}": text for name, text in files.items()}
        )

    def fault_proxy(self) -> FaultProxy:
        """A fault proxy in front of the API server that Pods reach (it listens in the node's network;
        send a container through it with its `in_cluster_env`). The caller closes it."""
        plane = self.stack.plane
        return FaultProxy(plane.server, plane.ca_file, plane.serving, self.stack.sandbox.listen(NODE_IP))

    def pods(self, selector: str) -> list[JSON]:
        assert self.api is not None
        pods = orjson.loads(self.api.list_page(kubeapi.POD, NAMESPACE, label_selector=selector))["items"]
        return [p for p in pods if not p["metadata"].get("deletionTimestamp")]

    def reconciler_pod(self, key: RSyncKey) -> Pod | None:
        """The newest live reconciler Pod of an RSync (None while there is none), found by the labels
        Config Sync gives it (the selector of the service's `reconciler_pod`, written out here: the test
        stack does not import the service's Kubernetes-side modules)."""
        selector = f"app=reconciler,configsync.gke.io/deployment-name={reconciler_name(key)}"
        newest = max(
            self.pods(selector),
            key=lambda p: (p.get("metadata") or {}).get("creationTimestamp", ""),
            default=None,
        )
        return cast("Pod | None", newest)

    def reconciler_story(self, key: RSyncKey) -> str:
        """What a failed wait on an RSync's reconciler Pod needs said: its Deployment's rollout, its newest
        ReplicaSets, every Pod of it (terminating ones too: a Recreate rollout creates none while one is
        left) with each container's state, and the last Events about them."""
        assert self.api is not None
        name = reconciler_name(key)
        try:
            deployment = self.api.get(kubeapi.DEPLOYMENT, NAMESPACE, name)
        except kubeapi.ApiError as error:
            return f"Deployment {name}: {error}"
        status = deployment.get("status") or {}
        conditions = status.get("conditions", [])
        lines = [
            f"Deployment {name}: generation {deployment['metadata'].get('generation')}, observed "
            f"{status.get('observedGeneration')}, replicas {status.get('replicas')}, updated "
            f"{status.get('updatedReplicas')}, ready {status.get('readyReplicas')}; conditions "
            + "; ".join(f"{c['type']}={c['status']} {c.get('reason', '')}" for c in conditions)
        ]
        selector = f"app=reconciler,configsync.gke.io/deployment-name={name}"
        sets = orjson.loads(self.api.list_page(REPLICASET, NAMESPACE, label_selector=selector))["items"]
        sets.sort(key=lambda rs: rs["metadata"].get("creationTimestamp") or "")
        lines.append(f"{len(sets)} ReplicaSets (a rollout each), the newest {min(len(sets), STORY_LINES)}:")
        lines += [
            f"ReplicaSet {rs['metadata']['name']}: created {rs['metadata'].get('creationTimestamp')}, spec "
            f"{rs['spec'].get('replicas')}, status {(rs.get('status') or {}).get('replicas')}"
            for rs in sets[-STORY_LINES:]
        ]
        pods = orjson.loads(self.api.list_page(kubeapi.POD, NAMESPACE, label_selector=selector))["items"]
        for pod in pods:
            meta, pod_status = pod["metadata"], pod.get("status") or {}
            statuses = pod_status.get("containerStatuses") or []
            states = {s["name"]: list(s.get("state") or {}) for s in statuses}
            lines.append(
                f"Pod {meta['name']}: created {meta.get('creationTimestamp')}, deleted "
                f"{meta.get('deletionTimestamp')}, phase {pod_status.get('phase')}, containers {states}"
            )
        names = {name} | {rs["metadata"]["name"] for rs in sets} | {p["metadata"]["name"] for p in pods}
        events = [e for page in self.api.pages(kubeapi.EVENT, NAMESPACE) for e in page["items"]]
        about = [e for e in events if (e.get("regarding") or {}).get("name") in names]
        about.sort(key=lambda e: e.get("eventTime") or e["metadata"].get("creationTimestamp") or "")
        lines.append(f"{len(about)} Events about them, the last {min(len(about), STORY_LINES)}:")
        lines += [
            f"Event {e.get('eventTime') or e['metadata'].get('creationTimestamp')} "
            f"{e['regarding'].get('kind')}/{e['regarding'].get('name')}: {e.get('reason')} {e.get('note')}"
            for e in about[-STORY_LINES:]
        ]
        return "\n".join(lines)

    def reconciler_manager_running(self) -> bool:
        return any(container_running(p, "reconciler-manager") for p in self.pods("app=reconciler-manager"))

    def install_sidecar(
        self, cert_dir: Path, sidecar_env: Mapping[str, str] | None = None, extra_names: Sequence[str] = ()
    ) -> None:
        """The README's sidecar install, the webhook served by its own Pods behind its Service; returns
        once its rollout is complete (both Pods pass their readiness probe, run by the kubelet). The
        webhook reads the sidecar template when it starts, so a webhook installed before is restarted,
        as a user does after editing the template. A reconciler Pod created before the install starts
        without the sidecar (the webhook fails open)."""
        assert self.api is not None
        installed_before = bool(self.pods(f"app.kubernetes.io/name={WEBHOOK_NAME}"))
        install_sidecar(self.api, cert_dir, sidecar_env=sidecar_env, extra_names=extra_names)
        if installed_before:
            self.stack.kubectl("rollout", "restart", "-n", NAMESPACE, f"deployment/{WEBHOOK_NAME}")
        self._webhook_rolled_out()

    def install_cluster(self, cert_dir: Path, env: Mapping[str, str] | None = None) -> None:
        """The README's cluster-mode install; returns once the webhook's rollout is complete: a webhook left
        by a sidecar install before it (same Deployment, injecting the sidecar) is replaced, and until its
        Pods are gone a reconciler Pod created meanwhile could still get the sidecar (seen in a local CI
        run: the sidecar then sized the Pod as a sidecar does)."""
        assert self.api is not None
        install_cluster(self.api, cert_dir, env)
        self._webhook_rolled_out()

    def _webhook_rolled_out(self) -> None:
        rollout = self.stack.kubectl(
            "rollout",
            "status",
            "-n",
            NAMESPACE,
            f"deployment/{WEBHOOK_NAME}",
            f"--timeout={WEBHOOK_READY_TIMEOUT}s",
            check=False,
        )
        if rollout.returncode != 0:
            described = self.stack.kubectl(
                "describe",
                "pods",
                "-n",
                NAMESPACE,
                "-l",
                f"app.kubernetes.io/name={WEBHOOK_NAME}",
                check=False,
            )
            raise TimeoutError(
                f"the webhook's rollout did not complete: {rollout.stderr}\n{described.stdout[-3000:]}"
            )


@contextlib.contextmanager
def running_config_sync_on_node(
    version: str = VERSION, kubernetes: str = KUBERNETES_VERSION
) -> Iterator[NodeConfigSync]:
    """Build what is missing, start the stack of Kubernetes `kubernetes` with a real node and Config Sync
    `version` on it (its reconciler-manager running), stop and remove it all on exit."""
    build = build_configsync(version)
    with running_node_stack(configsync_node_images(build), kubernetes) as stack:
        config_sync = NodeConfigSync(stack, build).start()
        try:
            deadline = time.monotonic() + RECONCILER_MANAGER_TIMEOUT
            while not config_sync.reconciler_manager_running():
                if time.monotonic() > deadline:
                    raise ControlPlaneError(
                        f"the reconciler-manager Pod is not running after {RECONCILER_MANAGER_TIMEOUT} s:\n"
                        + stack.kubectl("describe", "pods", "-n", NAMESPACE, check=False).stdout[-3000:]
                    )
                time.sleep(0.2)
            yield config_sync
        finally:
            config_sync.stop()
