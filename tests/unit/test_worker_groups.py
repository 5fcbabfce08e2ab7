"""How `make test` spreads the suite over its workers (tests/conftest.py): a module whole in one worker,
each other stack's tests (another Config Sync release, the floor Kubernetes release) in one group of its
own, handed out first. No release is pinned `floor` or `subset` now; the cases take v1.34.4 and v1.24.3 as
ones."""

from __future__ import annotations

import pytest

from controlplane import kubernetes_build
from controlplane.configsync_build import VERSION, VERSIONS
from tests import conftest
from tests.conftest import StackVersions, first_handed_out, stacks_for, worker_group

OTHER = next(v for v in VERSIONS if v != VERSION)
FLOOR = "v1.34.4"


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
        assert worker_group(nodeid) == f"stack-{OTHER}"


def test_a_test_on_the_floor_kubernetes_joins_that_stacks_group() -> None:
    for nodeid in (
        f"tests/integration/test_targets.py::test_x[k8s-{FLOOR}]",
        f"tests/e2e/test_readme_install.py::test_y[k8s-{FLOOR}-sidecar]",
    ):
        assert worker_group(nodeid) == f"stack-k8s-{FLOOR}"


def test_each_marker_adds_its_stacks_and_no_cross_product(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubernetes_build, "FLOORS", (FLOOR,))
    monkeypatch.setattr(conftest, "OTHER_RELEASES", ("v1.24.3",))
    default = StackVersions(kubernetes_build.VERSION, VERSION)
    assert stacks_for(both_versions=False, kubernetes_floor=False) == [default]
    both = stacks_for(both_versions=True, kubernetes_floor=True)
    assert both == [
        default,
        StackVersions(kubernetes_build.VERSION, "v1.24.3"),
        StackVersions(FLOOR, VERSION),
    ]
    assert [str(s) for s in both] == [VERSION, "v1.24.3", f"k8s-{FLOOR}"]
    only = stacks_for(both_versions=False, kubernetes_floor=True, floor_only=True)
    assert only == [StackVersions(FLOOR, VERSION)]


def test_the_other_versions_and_the_modules_with_stacks_of_their_own_are_handed_out_first() -> None:
    assert first_handed_out(f"stack-{OTHER}")
    assert first_handed_out(f"stack-k8s-{FLOOR}")
    assert first_handed_out("tests/integration/test_reconciler_memory.py")
    assert not first_handed_out("tests/integration/test_configsync.py")
    assert not first_handed_out("tests/unit/test_ids.py")


def test_without_a_floor_pinned_a_floor_only_test_has_no_stack_and_the_others_the_default() -> None:
    assert kubernetes_build.FLOORS == ()
    assert stacks_for(both_versions=False, kubernetes_floor=True, floor_only=True) == []
    assert stacks_for(both_versions=False, kubernetes_floor=True) == [
        StackVersions(kubernetes_build.VERSION, VERSION)
    ]


def test_what_has_no_stack_to_run_on_is_said_left_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kubernetes_build, "FLOORS", ())
    monkeypatch.setattr(conftest, "OTHER_RELEASES", ())
    assert conftest.left_out_said() == [conftest.NO_FLOOR, conftest.NO_OTHER_RELEASE]
    assert "other_release" in conftest.NO_OTHER_RELEASE
    monkeypatch.setattr(kubernetes_build, "FLOORS", (FLOOR,))
    monkeypatch.setattr(conftest, "OTHER_RELEASES", ("v1.24.3",))
    assert conftest.left_out_said() == []
