"""Leaving clean: what `objcount clean` removes from an RSync once the service is uninstalled. Pure.

In place (the default) nothing of ours stays in the reconciler's template. An install that ran the
`rsync-override` target (the default before in place) left each RSync a `reconciler` entry in
`spec.override.resources`: a fixed size, with a limit nothing raises any more after an OOM kill. What is
ours is removed: that entry where it is exactly the one we last wrote (`objcount.dev/override-written`),
and the annotations we write. What is a user's stays: an entry someone else set or changed, and the
annotations users write to us (`objcount.dev/manage-override`, `autoscale`, `platform`). Removing the
entry makes Config Sync roll the reconciler out once, back to its template's size.

The patch is a JSON Patch whose `test` operations make it apply only to the RSync as it was read: an
entry changed in between is not removed (the API server refuses the patch, and the next run reads again).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    CALIBRATION_ANNOTATION,
    FALLBACK_ANNOTATION,
    HELD_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    OVERRIDE_WRITTEN_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    SOURCE_ANNOTATION,
    SOURCE_CRD_PATH_STEPS_ANNOTATION,
    SOURCE_KIB_ANNOTATION,
    SOURCE_KINDS_ANNOTATION,
    SOURCE_REJECTED_ANNOTATION,
    SOURCE_WORKLOAD_PATH_STEPS_ANNOTATION,
    START_ANNOTATION,
    SYNC_ANNOTATION,
    SYNCED_SOURCE_ANNOTATION,
    TARGET_ANNOTATION,
    WAITING_ANNOTATION,
    parse_resources_annotation,
)
from autoscaler.core.quantity import QuantityError
from autoscaler.core.reasons import ReadError
from autoscaler.core.size_fields import is_reconciler_entry, override_entries, resources_of_override
from inventory.core.objects import annotations_of

JSON = dict[str, object]
# Every annotation the service writes (annotations.py's table, "written by: us").
OURS = (
    SOURCE_ANNOTATION,
    SYNC_ANNOTATION,
    SOURCE_KIB_ANNOTATION,
    SOURCE_KINDS_ANNOTATION,
    SOURCE_CRD_PATH_STEPS_ANNOTATION,
    SOURCE_WORKLOAD_PATH_STEPS_ANNOTATION,
    SYNCED_SOURCE_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    APPLIED_ANNOTATION,
    START_ANNOTATION,
    HELD_ANNOTATION,
    WAITING_ANNOTATION,
    TARGET_ANNOTATION,
    FALLBACK_ANNOTATION,
    OVERRIDE_WRITTEN_ANNOTATION,
    OOM_FLOOR_ANNOTATION,
    CALIBRATION_ANNOTATION,
    SOURCE_REJECTED_ANNOTATION,
)


@dataclass(frozen=True)
class Cleanup:
    patch: list[JSON]  # JSON Patch (empty: nothing of ours is left)
    removed: list[str]  # what it removes, for people
    kept: list[str]  # what looks like ours but stays, and why


def cleanup(rsync: Mapping[str, object]) -> Cleanup:
    """What to remove from this RSync: our override entry (only the one we wrote) and our annotations."""
    patch, removed, kept = _override_entry(rsync)
    annotations = annotations_of(rsync)
    for name in (n for n in OURS if n in annotations):
        path = "/metadata/annotations/" + name.replace("~", "~0").replace("/", "~1")
        patch += [{"op": "test", "path": path, "value": annotations[name]}, {"op": "remove", "path": path}]
        removed.append(f"annotation {name}")
    return Cleanup(patch, removed, kept)


def _override_entry(rsync: Mapping[str, object]) -> tuple[list[JSON], list[str], list[str]]:
    try:
        entries = override_entries(rsync)
    except ReadError as error:
        return [], [], [f"spec.override.resources: {error}"]
    index = next((i for i, e in enumerate(entries) if is_reconciler_entry(e)), None)
    if index is None:
        return [], [], []
    entry = entries[index]
    written = parse_resources_annotation(annotations_of(rsync).get(OVERRIDE_WRITTEN_ANNOTATION))
    try:
        ours = written is not None and resources_of_override(entry) == written
    except QuantityError:
        ours = False
    if not ours:
        why = "not the one we last wrote (objcount.dev/override-written): someone else's, left as it is"
        return [], [], [f"the reconciler entry of spec.override.resources: {why}"]
    path = f"/spec/override/resources/{index}"
    patch: list[JSON] = [{"op": "test", "path": path, "value": entry}, {"op": "remove", "path": path}]
    return (
        patch,
        ["the reconciler entry of spec.override.resources (Config Sync rolls the reconciler out once)"],
        [],
    )
