"""How `make test` spreads the suite over its workers (tests/conftest.py): a module whole in one worker,
the other Config Sync versions' tests in one group of their own, handed out first."""

from __future__ import annotations

from controlplane.configsync_build import VERSION, VERSIONS
from tests.conftest import first_handed_out, worker_group

OTHER = next(v for v in VERSIONS if v != VERSION)


def test_a_test_runs_in_its_modules_group_on_the_default_version() -> None:
    assert worker_group(f"tests/integration/test_configsync.py::test_x[{VERSION}]") == (
        "tests/integration/test_configsync.py"
    )
    assert worker_group("tests/unit/test_ids.py::test_fnv[a-b]") == "tests/unit/test_ids.py"


def test_a_test_on_another_version_joins_that_versions_group_whatever_its_module() -> None:
    for nodeid in (
        f"tests/integration/test_configsync.py::test_x[{OTHER}]",
        f"tests/e2e/test_readme_install.py::test_y[{OTHER}-sidecar]",
        f"tests/integration/test_guard.py::test_z[cluster-{OTHER}]",
    ):
        assert worker_group(nodeid) == f"configsync-{OTHER}"


def test_the_other_versions_and_the_modules_with_stacks_of_their_own_are_handed_out_first() -> None:
    assert first_handed_out(f"configsync-{OTHER}")
    assert first_handed_out("tests/integration/test_reconciler_memory.py")
    assert not first_handed_out("tests/integration/test_configsync.py")
    assert not first_handed_out("tests/unit/test_ids.py")
