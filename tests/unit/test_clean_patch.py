"""What `objcount clean` removes from an RSync: ours (the override entry we wrote, our annotations), and
never a user's. Each patch is applied by a JSON Patch library of its own, as the API server would."""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch  # type: ignore[import-untyped]
import pytest

from autoscaler.core.clean_patch import cleanup

WRITTEN = '{"requests":{"cpu":"344m","memory":"352Mi"},"limits":{"cpu":"344m","memory":"352Mi"}}'
OUR_ENTRY = {
    "containerName": "reconciler",
    "cpuRequest": "344m",
    "memoryRequest": "352Mi",
    "cpuLimit": "344m",
    "memoryLimit": "352Mi",
}
GIT_SYNC = {"containerName": "git-sync", "memoryLimit": "1Gi"}


def rsync(entries: list[dict[str, Any]], annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "configsync.gke.io/v1beta1",
        "kind": "RootSync",
        "metadata": {
            "name": "root-sync",
            "namespace": "config-management-system",
            "annotations": annotations,
        },
        "spec": {"sourceType": "git", "override": {"resources": entries}},
    }


def cleaned(obj: dict[str, Any]) -> tuple[dict[str, Any], list[str], list[str]]:
    plan = cleanup(obj)
    result: dict[str, Any] = jsonpatch.apply_patch(copy.deepcopy(obj), plan.patch)
    return result, plan.removed, plan.kept


def test_our_entry_and_our_annotations_go_users_stay() -> None:
    before = rsync(
        [GIT_SYNC, OUR_ENTRY],
        {
            "objcount.dev/override-written": WRITTEN,
            "objcount.dev/applied-resources": WRITTEN,
            "objcount.dev/target": "rsync-override",
            "objcount.dev/source-object-count": "1000",
            "objcount.dev/autoscale": "true",
            "objcount.dev/platform": "autopilot",
            "team.example/owner": "platform",
        },
    )
    after, removed, kept = cleaned(before)
    assert after["spec"]["override"]["resources"] == [GIT_SYNC]
    assert after["metadata"]["annotations"] == {
        "objcount.dev/autoscale": "true",
        "objcount.dev/platform": "autopilot",
        "team.example/owner": "platform",
    }
    assert len(removed) == 5  # the entry and four annotations
    assert kept == []


def test_an_entry_someone_changed_stays_and_is_said() -> None:
    theirs = {**OUR_ENTRY, "memoryLimit": "2Gi"}
    before = rsync([theirs], {"objcount.dev/override-written": WRITTEN})
    after, removed, kept = cleaned(before)
    assert after["spec"]["override"]["resources"] == [theirs]
    assert "objcount.dev/override-written" not in after["metadata"]["annotations"]
    assert removed == ["annotation objcount.dev/override-written"]
    assert len(kept) == 1
    assert "someone else's" in kept[0]


@pytest.mark.parametrize(
    "entries",
    [[{**OUR_ENTRY, "memoryLimit": "lots"}], [OUR_ENTRY]],
    ids=["unreadable entry", "no record of our write"],
)
def test_an_entry_not_known_to_be_ours_stays(entries: list[dict[str, Any]]) -> None:
    after, removed, kept = cleaned(rsync(entries, {}))
    assert after["spec"]["override"]["resources"] == entries
    assert removed == []
    assert len(kept) == 1


def test_nothing_of_ours_means_an_empty_patch() -> None:
    plan = cleanup(rsync([GIT_SYNC], {"team.example/owner": "platform"}))
    assert (plan.patch, plan.removed, plan.kept) == ([], [], [])


def test_the_patch_applies_only_to_the_rsync_as_read() -> None:
    """An entry changed between the read and the patch: the `test` operation fails, nothing is removed."""
    before = rsync([OUR_ENTRY], {"objcount.dev/override-written": WRITTEN})
    plan = cleanup(before)
    changed = copy.deepcopy(before)
    changed["spec"]["override"]["resources"][0]["memoryLimit"] = "1Gi"
    with pytest.raises(jsonpatch.JsonPatchTestFailed):
        jsonpatch.apply_patch(changed, plan.patch)
