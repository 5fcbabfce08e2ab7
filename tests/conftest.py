"""Shared pytest configuration: markers by folder, the suite spread over workers, the figures printed at
the end, and Config Sync on the real node, one stack per pair of versions (Kubernetes, Config Sync) for a
worker's (or a one-process session's) integration and e2e tests.

Every test on the real node runs on the default versions (the first pin of controlplane/kubernetes-pins
and of controlplane/configsync-pins). The tests marked `both_versions` run on every other tested Config
Sync release too (on the default Kubernetes), and the tests marked `kubernetes_floor` on every floor
Kubernetes release (with the default Config Sync), each test id naming the stack it ran on: `v1.24.3`
(Config Sync, when it is pinned `subset`: until 2026-12-03), `k8s-v1.34.4` (Kubernetes, when it is pinned
`floor`). Each stack is started when its first
test needs it and stopped before the next one's. While no release is pinned `floor` (since 2026-12-03), the
tests marked `kubernetes_floor(only=True)` are left out of the run, said in its header and summary (each
by name in a run of one process; pytest-xdist's workers collect, not its controller); so are the tests
marked `other_release` while no other Config Sync release is tested (since 2026-12-03).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import cast

import pytest

from controlplane import images, kubernetes_build
from controlplane.autoscaler_install import uninstall_webhook
from controlplane.configsync_build import TESTED, VERSION
from controlplane.configsync_node import NodeConfigSync, running_config_sync_on_node
from controlplane.release import Release, make_release
from controlplane.seed import REPO_ROOT
from controlplane.status_checks import rsync_gone
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.helpers import (
    FIGURES,
    NODE_STARTUP,
    OBSERVED,
    RECOVERIES,
    RELEASE_REPOSITORY,
    RELEASE_VERSION,
    Shell,
    wait_for,
)

TESTS = Path(__file__).parent


_LEFT_OUT = pytest.StashKey[list[str]]()


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(TESTS).parts[0]
        if folder in ("integration", "e2e"):
            item.add_marker(getattr(pytest.mark, folder))
    left_out = [item for item in items if needs_a_floor(item) or needs_another_release(item)]
    if left_out:
        items[:] = [item for item in items if item not in left_out]
        config.hook.pytest_deselected(items=left_out)
    config.stash[_LEFT_OUT] = [item.nodeid for item in left_out]


def needs_a_floor(item: pytest.Item) -> bool:
    """A test for the floor release alone (what the default can no longer do) while no release is pinned
    `floor`: it has no stack to run on, and is left out of the run, said (pytest_report_collectionfinish)."""
    floor = item.get_closest_marker("kubernetes_floor")
    return floor is not None and bool(floor.kwargs.get("only")) and not kubernetes_build.FLOORS


NO_FLOOR = (
    "left out: the tests marked kubernetes_floor(only=True), for what only a Kubernetes release before the "
    "default can do (no release is pinned `floor` in controlplane/kubernetes-pins)"
)
# The Config Sync releases tested beside the one this run runs (none while only the default is pinned
# `all` or `subset`: since 2026-12-03; OBJCOUNT_CONFIGSYNC_VERSION=v1.24.3 makes the default one of them).
OTHER_RELEASES = tuple(v for v in TESTED if v != VERSION)


def needs_another_release(item: pytest.Item) -> bool:
    """A test that compares another tested Config Sync release with this run's, while there is none."""
    return item.get_closest_marker("other_release") is not None and not OTHER_RELEASES


NO_OTHER_RELEASE = (
    "left out: the tests marked other_release, which compare another tested Config Sync release with "
    f"{VERSION} (no other is pinned `all` or `subset` in controlplane/configsync-pins)"
)


def left_out_said() -> list[str]:
    """Said before the run and again after it (pytest_terminal_summary), also where pytest-xdist's
    workers collect and leave them out."""
    missing = ((NO_FLOOR, not kubernetes_build.FLOORS), (NO_OTHER_RELEASE, not OTHER_RELEASES))
    return [line for line, said in missing if said]


def pytest_report_header(config: pytest.Config) -> list[str]:
    return left_out_said()


def pytest_report_collectionfinish(config: pytest.Config) -> list[str]:
    return [f"left out: {nodeid}" for nodeid in config.stash.get(_LEFT_OUT, [])]


# ----- the suite over several workers (`make test`: pytest-xdist) ---------------------------------------------
_STACK_ID = re.compile(r"[\[-]((?:k8s-)?v\d+\.\d+\.\d+)[\]-]")


def worker_group(nodeid: str) -> str:
    """What runs in one worker, in collection order: a whole module, so its fixtures are set up once; but a
    test on a stack other than the default (its id names a Config Sync or a Kubernetes release) joins that
    stack's group, so one worker starts that stack, once."""
    stack = _STACK_ID.search(nodeid)
    if stack and stack.group(1) != VERSION:
        return f"stack-{stack.group(1)}"
    return nodeid.split("::", 1)[0]


# Modules whose tests start stacks of their own (the benchmark scripts' end-to-end runs), among the longest
# units of work (BENCHMARKS, "CI time"): handed out first, so none runs alone at the end; they share nothing
# with the modules before them in a worker.
OWN_STACKS = (
    "tests/integration/test_reconciler_memory.py",
    "tests/integration/test_policies_real.py",
    "tests/integration/test_demo.py",
)


def first_handed_out(group: str) -> bool:
    """The other stacks' groups (pytest collects them last: one of the longest units each, a stack of its
    own and its tests) and the modules of OWN_STACKS."""
    return group.startswith("stack-") or group in OWN_STACKS


def pytest_xdist_make_scheduler(config: pytest.Config, log: object) -> object:
    """pytest-xdist's scheduler by scope, the scopes being worker_group's, handed out in collection order
    (each worker's modules in the order a run in one process has them), but first_handed_out's first."""
    from xdist.scheduler import LoadScopeScheduling  # noqa: PLC0415 - only where the suite is spread

    class ByWorkerGroup(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

        def _assign_work_unit(self, node: object) -> None:
            for scope in [s for s in self.workqueue if first_handed_out(s)][::-1]:
                self.workqueue.move_to_end(scope, last=False)
            super()._assign_work_unit(node)

    config.option.loadscopereorder = False
    return ByWorkerGroup(config, log)


# ----- what the tests measured, printed at the end (gathered from every worker) -------------------------------
def pytest_sessionfinish(session: pytest.Session) -> None:
    """In a worker: hand what its tests measured to the controller, which prints it."""
    workeroutput = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput["measured"] = {"recoveries": RECOVERIES, "figures": FIGURES, "observed": OBSERVED}


def pytest_testnodedown(node: object, error: object) -> None:
    """In the controller: a worker's figures join the run's (pytest-xdist's hook)."""
    measured = getattr(node, "workeroutput", {}).get("measured")
    if measured:
        RECOVERIES.extend(tuple(r) for r in measured["recoveries"])
        FIGURES.extend(tuple(f) for f in measured["figures"])
        OBSERVED.extend(measured["observed"])


_SESSION_STARTED = pytest.StashKey[float]()
CI_BUDGET_SECONDS = 3000


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_SESSION_STARTED] = time.time()


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    for line in left_out_said():
        terminalreporter.write_line(line)
    ci_budget(terminalreporter, config)
    for what, seconds, bound in RECOVERIES:
        terminalreporter.write_line(f"{what}: {seconds:.1f} s (bound {bound:.0f} s)")
    for what, seconds in FIGURES:
        terminalreporter.write_line(f"{what}: {seconds:.2f} s")
    for line in OBSERVED:
        terminalreporter.write_line(line)


def ci_budget(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    """Under `.ci/run` (which exports when it started and when its builds ended): the builds, lint and
    type-check, and the tests, in seconds, against the budget of a cold run."""
    started, built = os.environ.get("OBJCOUNT_CI_STARTED"), os.environ.get("OBJCOUNT_CI_BUILT")
    if not (started and built):
        return
    now, tests_started = time.time(), config.stash[_SESSION_STARTED]
    terminalreporter.write_line(
        f"ci: builds {int(built) - int(started)} s, lint and types {tests_started - int(built):.0f} s,"
        f" tests {now - tests_started:.0f} s, total {now - int(started):.0f} s"
        f" (budget of a cold run: {CI_BUDGET_SECONDS} s)"
    )


# ----- real Config Sync on the real node ----------------------------------------------------------------------
@dataclass(frozen=True)
class StackVersions:
    """The releases one stack runs: Kubernetes (its control plane and node) and Config Sync."""

    kubernetes: str
    configsync: str

    def __str__(self) -> str:
        """The test id's part: the default stack is named by its Config Sync release (as before a second
        Kubernetes was pinned), another by the release that differs from the default."""
        if self.kubernetes != kubernetes_build.VERSION:
            return f"k8s-{self.kubernetes}"
        return self.configsync


def stacks_for(
    *, both_versions: bool, kubernetes_floor: bool, floor_only: bool = False
) -> list[StackVersions]:
    """The stacks a test runs on: the default; every other tested Config Sync release for both_versions;
    every floor Kubernetes release for kubernetes_floor; those alone for kubernetes_floor(only=True) (what
    the default release can no longer do, such as a kubelet with in-place resize off: GA and locked on
    from 1.35)."""
    default_k8s = kubernetes_build.VERSION
    if floor_only:
        return [StackVersions(k, VERSION) for k in kubernetes_build.FLOORS if k != default_k8s]
    stacks = [StackVersions(default_k8s, VERSION)]
    if both_versions:
        stacks += [StackVersions(default_k8s, v) for v in OTHER_RELEASES]
    if kubernetes_floor:
        stacks += [StackVersions(k, VERSION) for k in kubernetes_build.FLOORS if k != default_k8s]
    return stacks


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Each test on the real node gets its stack as a session-scoped parameter: the default (or what
    OBJCOUNT_CONFIGSYNC_VERSION and OBJCOUNT_KUBERNETES_VERSION name), and the others its markers ask for."""
    floor = metafunc.definition.get_closest_marker("kubernetes_floor")
    both = metafunc.definition.get_closest_marker("both_versions") is not None
    only = floor is not None and bool(floor.kwargs.get("only"))
    if "config_sync_on_node" in metafunc.fixturenames:
        stacks = stacks_for(both_versions=both, kubernetes_floor=floor is not None, floor_only=only)
        metafunc.parametrize("stack_versions", stacks, indirect=True, scope="session", ids=str)


@pytest.fixture(scope="session")
def stack_versions(request: pytest.FixtureRequest) -> StackVersions:
    return cast(StackVersions, request.param)


@pytest.fixture(scope="session")
def configsync_version(stack_versions: StackVersions) -> str:
    return stack_versions.configsync


@pytest.fixture(scope="session")
def config_sync_on_node(stack_versions: StackVersions) -> Iterator[NodeConfigSync]:
    """Config Sync on the real node (kubelet, containerd, runc), shared by the tests of its stack that
    run in this process (a worker of `make test`)."""
    with running_config_sync_on_node(stack_versions.configsync, stack_versions.kubernetes) as config_sync:
        FIGURES.append((NODE_STARTUP, config_sync.stack.startup_seconds or 0.0))
        # The tests' RSyncs fetch every 2 s, not Config Sync's default 15: a commit after the first waited
        # up to 15 s for git-sync's next poll, 7.5 on average, a wait that tests nothing of ours.
        config_sync.git_period_s = 2.0
        yield config_sync


@pytest.fixture(scope="session")
def release_files(tmp_path_factory: pytest.TempPathFactory) -> Release:
    """`make release VERSION=0.1.0-test IMAGE=registry.example/platform/objcount-autoscaler`, once."""
    return make_release(RELEASE_VERSION, RELEASE_REPOSITORY, tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def release(config_sync_on_node: NodeConfigSync, release_files: Release) -> Release:
    """The release, its image in the node's containerd as a pull of it by digest leaves it there (under
    its tag and its digest reference): no registry is reachable here, and none is tried."""
    node = config_sync_on_node.stack.node
    node.ctr(
        "images",
        "import",
        "--no-unpack=false",
        f"--index-name={release_files.tagged}",
        str(release_files.archive),
    )
    node.ctr("images", "tag", "--force", release_files.tagged, release_files.image)
    return release_files


@pytest.fixture(scope="session")
def cli(release_files: Release, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bin/ of a clean virtualenv with the release's wheel installed, as the README says (`pip install
    dist/...whl`): its dependencies from the image's wheelhouse, no index (nothing is downloaded here)."""
    venv = tmp_path_factory.mktemp("cli") / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
    subprocess.run(
        [
            str(venv / "bin" / "python"),
            *("-m", "pip", "install", "--quiet", "--no-index"),
            f"--find-links={images.wheelhouse()}",
            str(release_files.wheel),
        ],
        check=True,
        timeout=600,
    )
    return venv / "bin"


@pytest.fixture
def shell(config_sync_on_node: NodeConfigSync, release: Release, cli: Path, tmp_path: Path) -> Shell:
    """Runs commands as a user at a checkout's root would after `make release` (a copy of `manifests/`,
    the release files in `dist/`, certificates written there), with `kubectl` and the release's `objcount`
    (its wheel in a clean virtualenv, not this checkout's) on the PATH and KUBECONFIG naming the local
    stack."""
    shutil.copytree(REPO_ROOT / "manifests", tmp_path / "manifests")
    (tmp_path / "dist").mkdir()
    for name, path in release.files.items():
        shutil.copy(path, tmp_path / "dist" / name)
    stack = config_sync_on_node.stack
    env = {
        **os.environ,
        "KUBECONFIG": str(stack.plane.kubeconfig),
        "PATH": os.pathsep.join([str(stack.bin_dir), str(cli), os.environ["PATH"]]),
    }

    def run(commands: str, check: bool = True) -> str:
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", commands],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0 or not check, f"{commands}\nexit {done.returncode}: {done.stderr}"
        return done.stdout

    return run


# Installs our sidecar with these settings (OBJCOUNT_... names and values) in its template.
Install = Callable[[dict[str, str]], None]


@pytest.fixture
def install_sidecar(config_sync_on_node: NodeConfigSync, tmp_path: Path) -> Iterator[Install]:
    """Installs the sidecar as the README says, with these settings in its template; the webhook
    configuration is removed after the test, so that other tests' reconciler Pods run without it."""

    def install(env: dict[str, str]) -> None:
        config_sync_on_node.install_sidecar(tmp_path / "certs", env)

    yield install
    assert config_sync_on_node.api is not None
    uninstall_webhook(config_sync_on_node.api)


@pytest.fixture
def rsyncs(config_sync_on_node: NodeConfigSync) -> Iterator[list[RSyncKey]]:
    """RSyncs a test creates (it appends their keys), deleted after it; Config Sync's finalizers run, so
    their reconcilers are gone before the next test."""
    created: list[RSyncKey] = []
    yield created
    api = config_sync_on_node.api
    assert api is not None
    for key in created:
        with contextlib.suppress(kubeapi.NotFound):
            api.delete(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name)
    for key in created:
        wait_for(lambda k=key: rsync_gone(api, k), timeout=120, what=f"{key} deleted by Config Sync")
