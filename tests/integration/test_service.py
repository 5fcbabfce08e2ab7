"""The service as a user runs it: `objcount run` in a subprocess against the real control plane."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

from autoscaler.core.size_fields import resources_of
from controlplane import LocalControlPlane
from controlplane.seed import configmaps_yaml, reconciler_deployment, resourcegroup, rsync, write_commit
from inventory.core.ids import RSyncKey, reconciler_name
from inventory.kube import kubeapi
from tests.helpers import REPO, Service, wait_for

# A RepoSync's sidecar not granted yet: in a Pod, but without the token file.
NO_CREDENTIALS = {
    "OBJCOUNT_MODE": "sidecar",
    "OBJCOUNT_RSYNC_KIND": "RepoSync",
    "OBJCOUNT_RSYNC_NAME": "repo-sync",
    "OBJCOUNT_RSYNC_NAMESPACE": "team-a",
    "KUBERNETES_SERVICE_HOST": "127.0.0.1",
    "KUBERNETES_SERVICE_PORT": "6443",
}


def test_sidecar_reacts_serves_endpoints_and_exits_0_on_sigterm(
    api: kubeapi.KubeClient,
    namespace: str,
    control_plane: LocalControlPlane,
    tmp_path: Path,
    services: list[Service],
) -> None:
    key = RSyncKey("RootSync", namespace, "root-sync")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key, sync_dir="config"))
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(key, 600))
    api.create(kubeapi.DEPLOYMENT, namespace, reconciler_deployment(key, namespace))
    write_commit(tmp_path / "repo", "c1", {"a.yaml": configmaps_yaml(600)})
    service = Service(
        {
            "OBJCOUNT_KUBECONFIG": str(control_plane.kubeconfig),
            "OBJCOUNT_RSYNC_NAME": key.name,
            "OBJCOUNT_RSYNC_NAMESPACE": namespace,
            "OBJCOUNT_RECONCILER_NAMESPACE": namespace,
            "OBJCOUNT_TARGET": "deployment",
            "OBJCOUNT_SOURCE_ROOT": str(tmp_path / "repo"),
            "OBJCOUNT_LOG_LEVEL": "DEBUG",  # the most it ever says, still without credentials
            "OBJCOUNT_PRESET": "fitted",  # count-only: each size worked out by hand from the count
        },
        tmp_path / "service.log",
    )
    services.append(service)
    wait_for(lambda: service.get("/readyz")[0] == 200, timeout=60, what="/readyz")
    assert service.get("/healthz")[0] == 200

    def reconciler_memory() -> int | None:
        containers = api.get(kubeapi.DEPLOYMENT, namespace, reconciler_name(key))["spec"]["template"]["spec"][
            "containers"
        ]
        resources = resources_of(next(c for c in containers if c["name"] == "reconciler")["resources"])
        return None if resources is None else resources.memory_request_mib

    # The fitted preset: 600 objects 198 + 104.4 = 302.4 -> 320 MiB; 5,000: 1068 -> 1088 MiB.
    wait_for(lambda: reconciler_memory() == 320, what="first size")
    api.patch(kubeapi.RESOURCEGROUP, namespace, key.name, resourcegroup(key, 5000))
    wait_for(
        lambda: reconciler_memory() == 1088,
        what="scale-up after the inventory grew",
    )
    # The decision is counted when its reconcile ends, just after the size is written.
    wait_for(lambda: service.metric('objcount_decisions_total{outcome="scaled_up"}') >= 2, what="2 scale-ups")
    assert service.metric(f'objcount_objects{{count="sync",rsync="{key}"}}') == 5000
    assert service.metric("objcount_restarts_caused_total") >= 2

    metrics, healthz, readyz = (service.get(path)[1] for path in ("/metrics", "/healthz", "/readyz"))
    exposed = metrics + healthz + readyz
    assert (healthz, readyz) == ("ok\n", "ok\n")
    # Only counts, sizes and states: our series carry no label but these, and their values are the
    # RSync's key or words of our own.
    for sample in (line for line in metrics.splitlines() if line.startswith("objcount_")):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', sample.split("}")[0]))
        assert set(labels) <= {
            "rsync",
            "count",
            "outcome",
            "target",
            "reason",
            "resource",
            "destination",
            "le",
        }, sample
        assert labels.get("rsync", str(key)) == str(key), sample
    assert service.stop(signal.SIGTERM) == 0
    log_text = service.log.read_text()
    for secret in (control_plane.admin_token, str(control_plane.kubeconfig)):
        assert secret not in log_text, "credentials must never be logged"
        assert secret not in exposed, "endpoints must not expose credentials"
    lines = service.logs()
    assert lines, "no JSON log lines"
    assert all(line["rsync"] == str(key) for line in lines), "every line carries the RSync"
    assert any("shutting down" in str(line["message"]) for line in lines)


def test_a_sidecar_without_credentials_stays_alive_and_says_so(
    tmp_path: Path, services: list[Service]
) -> None:
    """A RepoSync not granted yet: its sidecar finds no token at the in-cluster path. It must not exit
    (a restart loop would keep Config Sync's reconciler Pod from being ready): it waits, alive."""
    service = Service(NO_CREDENTIALS, tmp_path / "service.log")
    services.append(service)
    wait_for(lambda: service.get("/healthz")[0] == 200, timeout=60, what="/healthz")
    assert "waiting for credentials" in service.get("/healthz")[1]
    assert service.get("/readyz")[0] == 503
    assert service.metric('objcount_reconcile_errors_total{stage="credentials"}') >= 1
    assert service.process.poll() is None, "still running"
    assert "objcount grant-reposync" in service.log.read_text()
    assert service.stop() == 0


def test_a_sigterm_as_it_starts_stops_it_even_as_a_containers_first_process(
    tmp_path: Path, services: list[Service]
) -> None:
    """The kubelet may delete a Pod a second after creating it, and a container's first process (PID 1
    of its PID namespace) is sent only the signals it handles: one sent before the handler is set is
    lost, and the kubelet kills the container 30 s later (seen: our sidecar, exit 137, in a Pod deleted
    as it started). `objcount run` handles SIGTERM before the service's imports (a second or more), and
    as PID 1 of a PID namespace of its own, sent SIGTERM as soon as it handles it, exits 0."""
    watch = textwrap.dedent(
        """
        import signal, sys
        class Watch:
            def find_spec(self, name, path=None, target=None):
                if name == "autoscaler.service.main":
                    print(signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, flush=True)
                    raise SystemExit(0)
        sys.meta_path.insert(0, Watch())
        from autoscaler.cli import main
        main(["run"])
        """
    )
    as_it_imports = subprocess.run(
        [sys.executable, "-c", watch], cwd=REPO, capture_output=True, text=True, check=True
    )
    assert as_it_imports.stdout == "True\n", "SIGTERM handled when the service's modules start loading"

    env = {**NO_CREDENTIALS, "OBJCOUNT_LOG_LEVEL": "DEBUG"}
    service = Service(env, tmp_path / "service.log", ["unshare", "--pid", "--fork", "--kill-child"])
    services.append(service)
    first = wait_for(lambda: children(service.process.pid), what="the namespace's first process")[0]
    wait_for(lambda: handles(first, signal.SIGTERM), what="its SIGTERM handler")
    os.kill(first, signal.SIGTERM)
    assert service.process.wait(60) == 0, service.log.read_text()


def children(pid: int) -> list[int]:
    return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def handles(pid: int, signum: int) -> bool:
    """The process has a handler for `signum` (its SigCgt mask in /proc)."""
    status = Path(f"/proc/{pid}/status").read_text()
    caught = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigCgt:")), 16)
    return bool(caught >> (signum - 1) & 1)


def test_invalid_settings_list_every_problem_and_exit_2(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "OBJCOUNT_MODE": "sidecar",
        "OBJCOUNT_STEP_MIB": "0",
        "OBJCOUNT_TARGET": "everywhere",
        "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS": "-5",
    }
    result = subprocess.run(
        [sys.executable, "-m", "autoscaler.cli", "run"],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert "invalid settings (3 problems)" in result.stderr
    for name in ("OBJCOUNT_STEP_MIB", "OBJCOUNT_TARGET", "OBJCOUNT_SCALE_DOWN_DELAY_SECONDS"):
        assert name in result.stderr
    assert result.stdout == ""


def test_cluster_mode_only_the_leader_acts_and_a_killed_leader_hands_over(
    api: kubeapi.KubeClient,
    namespace: str,
    control_plane: LocalControlPlane,
    tmp_path: Path,
    services: list[Service],
) -> None:
    key = RSyncKey("RepoSync", namespace, "repo-sync")
    api.create(kubeapi.REPOSYNC, namespace, rsync(key))
    api.create(kubeapi.RESOURCEGROUP, namespace, resourcegroup(key, 100))
    common = {
        "OBJCOUNT_MODE": "cluster",
        "OBJCOUNT_KUBECONFIG": str(control_plane.kubeconfig),
        "OBJCOUNT_WATCH_NAMESPACE": namespace,
        "OBJCOUNT_LEASE_NAMESPACE": namespace,
        "OBJCOUNT_LEASE_DURATION_SECONDS": "3",
        "OBJCOUNT_TARGET": "recommend",
    }
    replicas = [
        Service({**common, "OBJCOUNT_IDENTITY": f"replica-{i}"}, tmp_path / f"replica-{i}.log")
        for i in range(2)
    ]
    services.extend(replicas)

    def holder() -> str:
        try:
            return str(
                api.get(kubeapi.LEASE, namespace, "objcount-autoscaler")["spec"].get("holderIdentity") or ""
            )
        except kubeapi.NotFound:
            return ""

    leader_name = wait_for(holder, what="a leader")
    leader = replicas[int(leader_name.rsplit("-", 1)[1])]
    follower = replicas[1 - replicas.index(leader)]
    wait_for(lambda: leader.metric("objcount_decisions_total") > 0, what="the leader to act")
    wait_for(lambda: follower.get("/readyz")[0] == 200, what="the standby replica to be ready to take over")
    assert follower.metric("objcount_leader") == 0
    assert follower.metric("objcount_decisions_total") == 0, "the follower must not act"

    leader.stop(signal.SIGKILL)
    wait_for(lambda: holder() == f"replica-{replicas.index(follower)}", timeout=30, what="hand-over")
    api.patch(kubeapi.RESOURCEGROUP, namespace, key.name, resourcegroup(key, 4000))
    wait_for(
        lambda: follower.metric('objcount_decisions_total{outcome="scaled_up"}') > 0,
        what="the new leader to act",
    )
    assert follower.metric("objcount_leader") == 1
    assert follower.stop() == 0
    assert holder() == "", "a clean shutdown releases the lease"


def test_a_sidecar_whose_account_may_not_read_its_rsync_stays_alive_says_why_and_goes_on_once_granted(
    api: kubeapi.KubeClient,
    namespace: str,
    control_plane: LocalControlPlane,
    tmp_path: Path,
    services: list[Service],
) -> None:
    """A sidecar's first read of its RSync refused (403: its account not granted yet) is not a crash:
    it serves its probes saying what to do, counts it, and reads again with backoff until granted."""
    key = RSyncKey("RootSync", namespace, "root-sync")
    api.create(kubeapi.ROOTSYNC, namespace, rsync(key, sync_dir="config"))
    token = control_plane.issue_service_account_token(namespace, "ungranted")
    kubeconfig = control_plane.kubeconfig_for_token(token, f"ungranted-{namespace}")
    env = {
        "OBJCOUNT_KUBECONFIG": str(kubeconfig),
        "OBJCOUNT_RSYNC_NAME": key.name,
        "OBJCOUNT_RSYNC_NAMESPACE": namespace,
        "OBJCOUNT_RECONCILER_NAMESPACE": namespace,
        "OBJCOUNT_PLATFORM": "standard",
        "OBJCOUNT_SOURCE_ROOT": str(tmp_path / "repo"),
    }
    service = Service(env, tmp_path / "service.log")
    services.append(service)
    wait_for(lambda: service.get("/healthz")[0] == 200, timeout=60, what="/healthz")
    assert "may not read" in service.get("/healthz")[1]
    status, why = service.get("/readyz")
    assert status == 503
    assert "apply the RBAC of manifests/sidecar" in why
    assert service.metric('objcount_reconcile_errors_total{stage="read"}') >= 1
    assert "Traceback" not in service.log.read_text()
    rbac = "rbac.authorization.k8s.io"
    role = {"apiGroups": ["configsync.gke.io"], "resources": ["rootsyncs"], "verbs": ["get"]}
    api.create(
        kubeapi.Resource(rbac, "v1", "roles", "Role"),
        namespace,
        {"apiVersion": f"{rbac}/v1", "kind": "Role", "metadata": {"name": "read-rsync"}, "rules": [role]},
    )
    binding = {
        "apiVersion": f"{rbac}/v1",
        "kind": "RoleBinding",
        "metadata": {"name": "read-rsync"},
        "roleRef": {"apiGroup": rbac, "kind": "Role", "name": "read-rsync"},
        "subjects": [{"kind": "ServiceAccount", "name": "ungranted", "namespace": namespace}],
    }
    api.create(kubeapi.Resource(rbac, "v1", "rolebindings", "RoleBinding"), namespace, binding)
    wait_for(
        lambda: "its sync directory is known" in service.log.read_text(),
        timeout=90,
        what="the RSync read once granted",
    )
    assert service.process.poll() is None, "still running"
    assert service.stop() == 0
