"""Shared pytest configuration: markers by folder, the figures printed at the end, and Config Sync on
the real node, one stack for the session's integration and e2e tests."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from controlplane.configsync import NodeConfigSync, rsync_gone, running_config_sync_on_node
from inventory import kubeapi
from inventory.ids import RSyncKey
from tests.helpers import FIGURES, NODE_STARTUP, OBSERVED, wait_for

TESTS = Path(__file__).parent


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        folder = Path(str(item.fspath)).relative_to(TESTS).parts[0]
        if folder in ("integration", "e2e"):
            item.add_marker(getattr(pytest.mark, folder))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    from tests.helpers import RECOVERIES  # noqa: PLC0415 - filled by this run's tests

    for what, seconds, bound in RECOVERIES:
        terminalreporter.write_line(f"{what}: {seconds:.1f} s (bound {bound:.0f} s)")
    for what, seconds in FIGURES:
        terminalreporter.write_line(f"{what}: {seconds:.2f} s")
    for line in OBSERVED:
        terminalreporter.write_line(line)


# ----- real Config Sync on the real node ----------------------------------------------------------------------
@pytest.fixture(scope="session")
def config_sync_on_node() -> Iterator[NodeConfigSync]:
    """Config Sync v1.22.0 on the real node (kubelet, containerd, runc), shared by the session's tests."""
    with running_config_sync_on_node() as config_sync:
        FIGURES.append((NODE_STARTUP, config_sync.stack.startup_seconds or 0.0))
        yield config_sync


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
