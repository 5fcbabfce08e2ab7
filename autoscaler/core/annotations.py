"""What the service reads and writes on an RSync, in one place: our annotations (`objcount.dev/*`) and
the optional status count fields, with their codecs. Pure: plain data in, plain data out.

Values are read as untrusted: anyone who can edit the RSync can write them. A count that is not a
plain decimal number, or a resources annotation that does not parse, reads as unknown (None), never as
zero.

| annotation | written by | meaning |
|---|---|---|
| `objcount.dev/source-object-count` | us | objects in the source commit last parsed |
| `objcount.dev/sync-object-count` | us | entries of the inventory (ResourceGroup) |
| `objcount.dev/source-kib` | us | KiB of the manifests of that source commit (size-aware sizing) |
| `objcount.dev/source-kinds` | us | its objects by kind, JSON `{"kind": count}` (the most common 50) |
| `objcount.dev/source-crd-path-steps` | us | its CRDs' fields, each counted at its depth (size-aware) |
| `objcount.dev/source-workload-path-steps` | us | the same of its objects with a Pod template (size-aware) |
| `objcount.dev/synced-source` | us | counts, KiB, kinds of the commit last finished (kept through a prune) |
| `objcount.dev/recommended-resources` | us | the size the counts call for (JSON `resources` block) |
| `objcount.dev/applied-resources` | us | the size last applied (RSync, or the Deployment for `in-place`) |
| `objcount.dev/held-by-owner` | us | why the recommended size is not written (its owner would fight it) |
| `objcount.dev/fallback` | us | why the last size went through the target's fallback (in-place: a rollout) |
| `objcount.dev/override-written` | us | the `reconciler` override entry we last wrote (same update) |
| `objcount.dev/manage-override` | users | `"true"`: a `reconciler` entry we did not write is ours |
| `objcount.dev/oom-floor` | us | least memory after an OOM kill, the kill it answers, since when (`oom`) |
| `objcount.dev/calibration` | us | the model's factor learned from the reconciler's working set |
| `objcount.dev/start-resources` | us | in place: the size a new reconciler Pod starts at (a whole sync's) |
| `objcount.dev/waiting-for-room` | us | in place: the size the kubelet defers (no room on its node now) |
| `objcount.dev/source-rejected` | us | why Config Sync syncs nothing of the newest source commit (sidecar) |
| `objcount.dev/autoscale` | users | `"false"`: record the counts, size nothing |
| `objcount.dev/platform` | users | this RSync's platform, overriding the service's |
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace
from fractions import Fraction

import orjson

from autoscaler.core import quantity
from autoscaler.core.calibration import MAX_FACTOR, MIN_FACTOR, Calibration, Window
from autoscaler.core.oom import OomFloor
from autoscaler.core.resources import Resources
from autoscaler.core.size_fields import resources_json, resources_of
from inventory.core.counts import MAX_KIND_LENGTH, MAX_KINDS, Kinds, ObjectCounts, kinds_of
from inventory.core.objects import annotations_of, block_of
from inventory.core.times import api_time, timestamp

SOURCE_ANNOTATION = "objcount.dev/source-object-count"
SYNC_ANNOTATION = "objcount.dev/sync-object-count"
SOURCE_KIB_ANNOTATION = "objcount.dev/source-kib"
SOURCE_KINDS_ANNOTATION = "objcount.dev/source-kinds"
SOURCE_CRD_PATH_STEPS_ANNOTATION = "objcount.dev/source-crd-path-steps"
SOURCE_WORKLOAD_PATH_STEPS_ANNOTATION = "objcount.dev/source-workload-path-steps"
SYNCED_SOURCE_ANNOTATION = "objcount.dev/synced-source"
RECOMMENDED_ANNOTATION = "objcount.dev/recommended-resources"
APPLIED_ANNOTATION = "objcount.dev/applied-resources"
# In place: the size a new reconciler Pod starts at (our webhook): a whole sync's, not the steady state's.
START_ANNOTATION = "objcount.dev/start-resources"
HELD_ANNOTATION = "objcount.dev/held-by-owner"
# In place: the size the kubelet defers (no room on the node now) while it does; removed once it is not.
WAITING_ANNOTATION = "objcount.dev/waiting-for-room"
TARGET_ANNOTATION = "objcount.dev/target"  # the target the applied size went through
FALLBACK_ANNOTATION = "objcount.dev/fallback"  # why it went through the target's fallback instead
OVERRIDE_WRITTEN_ANNOTATION = "objcount.dev/override-written"
MANAGE_OVERRIDE_ANNOTATION = "objcount.dev/manage-override"
OOM_FLOOR_ANNOTATION = "objcount.dev/oom-floor"
CALIBRATION_ANNOTATION = "objcount.dev/calibration"
SOURCE_REJECTED_ANNOTATION = "objcount.dev/source-rejected"
AUTOSCALE_ANNOTATION = "objcount.dev/autoscale"
PLATFORM_ANNOTATION = "objcount.dev/platform"


# ----- per-RSync settings (written by users) ------------------------------------------------------------
def autoscale_enabled(rsync: Mapping[str, object]) -> bool:
    """False when the RSync opted out: its counts are still recorded, nothing is sized."""
    return str(annotations_of(rsync).get(AUTOSCALE_ANNOTATION, "true")).lower() != "false"


def platform_asked(rsync: Mapping[str, object]) -> str | None:
    """The platform the RSync asks for (None: the service's)."""
    value = annotations_of(rsync).get(PLATFORM_ANNOTATION)
    return None if value is None else str(value)


# ----- object counts ---------------------------------------------------------------------------------
# A stored count is a decimal string of ASCII digits in annotations (`str.isdigit` also accepts "²" and
# other digits `int` refuses); more than 12 digits is no real inventory and is refused as unreadable.
_COUNT_TEXT = re.compile(r"[0-9]{1,12}")
_MAX_COUNT = 10**12 - 1


def _count(value: object) -> int | None:
    """A stored count: a non-negative integer (annotations hold it as a decimal string); None when the
    value is not one (unknown, never zero)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and _COUNT_TEXT.fullmatch(value):
        return int(value)
    if isinstance(value, int) and 0 <= value <= _MAX_COUNT:
        return value
    return None


def status_counts(rsync: Mapping[str, object]) -> ObjectCounts:
    status = block_of(rsync, "status")
    return ObjectCounts(
        _count(block_of(status, "source").get("objectCount")),
        _count(block_of(status, "sync").get("objectCount")),
    )


def annotation_counts(rsync: Mapping[str, object]) -> ObjectCounts:
    annotations = annotations_of(rsync)
    return ObjectCounts(
        _count(annotations.get(SOURCE_ANNOTATION)),
        _count(annotations.get(SYNC_ANNOTATION)),
        _count(annotations.get(SOURCE_KIB_ANNOTATION)),
        parse_kinds(annotations.get(SOURCE_KINDS_ANNOTATION)),
        source_crd_path_steps=_count(annotations.get(SOURCE_CRD_PATH_STEPS_ANNOTATION)),
        source_workload_path_steps=_count(annotations.get(SOURCE_WORKLOAD_PATH_STEPS_ANNOTATION)),
    )


def kinds_annotation(kinds: Kinds) -> str:
    """The kinds as JSON, bounded as `kinds_of` bounds them (an annotation must stay small)."""
    return orjson.dumps(dict(kinds_of(dict(kinds)))).decode()


def parse_kinds(text: object) -> Kinds | None:
    """Our kinds annotation; None (unknown: every object at the cost of any kind) when it is not a JSON
    object of at most MAX_KINDS kind names and counts."""
    if not isinstance(text, str):
        return None
    try:
        return _kinds_of_json(orjson.loads(text))
    except orjson.JSONDecodeError:
        return None


def _kinds_of_json(value: object) -> Kinds | None:
    if not isinstance(value, dict) or len(value) > MAX_KINDS:
        return None
    counts = {kind: _count(n) for kind, n in value.items()}
    if any(n is None or not 0 < len(kind) <= MAX_KIND_LENGTH for kind, n in counts.items()):
        return None
    return kinds_of({kind: n for kind, n in counts.items() if n is not None})


def restored_counts(rsync: Mapping[str, object]) -> ObjectCounts:
    """What a restarted service starts from: the status counts, else the annotation fallback."""
    return restored_of(status_counts(rsync), annotation_counts(rsync))


def restored_of(in_status: ObjectCounts, in_annotations: ObjectCounts) -> ObjectCounts:
    """The counts recorded: the status's, else the annotations'; the source's KiB, kinds and path steps
    are only ever in annotations (the status has no field for them)."""
    return replace(
        in_status.over(in_annotations),
        source_kib=in_annotations.source_kib,
        source_kinds=in_annotations.source_kinds,
        source_crd_path_steps=in_annotations.source_crd_path_steps,
        source_workload_path_steps=in_annotations.source_workload_path_steps,
    )


def status_patch(counts: ObjectCounts) -> dict[str, dict[str, dict[str, int]]]:
    """A merge patch for the status subresource that sets only the known objectCount fields."""
    status: dict[str, dict[str, int]] = {}
    if counts.source is not None:
        status["source"] = {"objectCount": counts.source}
    if counts.sync is not None:
        status["sync"] = {"objectCount": counts.sync}
    return {"status": status}


def annotation_patch(
    annotations: Mapping[str, str | None],
) -> dict[str, dict[str, dict[str, str | None]]]:
    """A merge patch that sets these annotations (None: removes it) and nothing else."""
    return {"metadata": {"annotations": dict(annotations)}}


# What a reconcile learned that a restart of ours must not lose (the OOM floor above all: once the kill
# has left the Pod's lastState, it is known nowhere else). Written before the size, so a size that cannot
# be written (a fault of the API server, a refusal) leaves them on the RSync all the same.
LEARNED_ANNOTATIONS = frozenset({OOM_FLOOR_ANNOTATION, CALIBRATION_ANNOTATION, SYNCED_SOURCE_ANNOTATION})


def learned_first(
    publish: Mapping[str, str | None],
) -> tuple[dict[str, str | None], dict[str, str | None]]:
    """The annotations to publish split in two: what was learned (written first), and the rest."""
    learned = {name: value for name, value in publish.items() if name in LEARNED_ANNOTATIONS}
    return learned, {name: value for name, value in publish.items() if name not in LEARNED_ANNOTATIONS}


def count_annotations(counts: ObjectCounts) -> dict[str, str]:
    annotations: dict[str, str] = {}
    if counts.source is not None:
        annotations[SOURCE_ANNOTATION] = str(counts.source)
    if counts.sync is not None:
        annotations[SYNC_ANNOTATION] = str(counts.sync)
    if counts.source_kib is not None:
        annotations[SOURCE_KIB_ANNOTATION] = str(counts.source_kib)
    if counts.source_kinds is not None:
        annotations[SOURCE_KINDS_ANNOTATION] = kinds_annotation(counts.source_kinds)
    if counts.source_crd_path_steps is not None:
        annotations[SOURCE_CRD_PATH_STEPS_ANNOTATION] = str(counts.source_crd_path_steps)
    if counts.source_workload_path_steps is not None:
        annotations[SOURCE_WORKLOAD_PATH_STEPS_ANNOTATION] = str(counts.source_workload_path_steps)
    return annotations


def synced_source_annotation(counts: ObjectCounts) -> str | None:
    """The source counts of the commit the reconciler finished (None: its count is not known)."""
    if counts.source is None:
        return None
    kinds = None if counts.source_kinds is None else dict(kinds_of(dict(counts.source_kinds)))
    synced: dict[str, object] = {"objects": counts.source, "kib": counts.source_kib, "kinds": kinds}
    if counts.source_crd_path_steps is not None:
        synced["crd_path_steps"] = counts.source_crd_path_steps
    if counts.source_workload_path_steps is not None:
        synced["workload_path_steps"] = counts.source_workload_path_steps
    return orjson.dumps(synced).decode()


def parse_synced_source(text: object) -> ObjectCounts | None:
    """Our synced-source annotation; None when absent or unreadable (sized from the new source alone, as
    before the first finished sync). A KiB or kinds that does not parse reads as unknown."""
    if not isinstance(text, str):
        return None
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    objects = _count(value.get("objects")) if isinstance(value, dict) else None
    if objects is None:
        return None
    return ObjectCounts(
        objects,
        source_kib=_count(value.get("kib")),
        source_kinds=_kinds_of_json(value.get("kinds")),
        source_crd_path_steps=_count(value.get("crd_path_steps")),
        source_workload_path_steps=_count(value.get("workload_path_steps")),
    )


# ----- recommended and applied resources ---------------------------------------------------------------
def resources_annotation(resources: Resources) -> str:
    return orjson.dumps(resources_json(resources)).decode()


def parse_resources_annotation(text: object) -> Resources | None:
    """Our published resources annotation; None when absent or unreadable (we only ever rewrite it)."""
    if not text or not isinstance(text, str):
        return None
    try:
        return resources_of(orjson.loads(text))
    except (orjson.JSONDecodeError, quantity.QuantityError):
        return None


def oom_floor_annotation(floor: OomFloor) -> str:
    value = {
        "memory": quantity.format_memory(floor.memory_mib),
        "killedAt": floor.killed_at,
        "since": api_time(floor.since),
    }
    return orjson.dumps(value).decode()


def parse_oom_floor(text: object) -> OomFloor | None:
    """Our OOM floor annotation; None when absent or unreadable (the next kill sets it again)."""
    if not text or not isinstance(text, str):
        return None
    try:
        value = orjson.loads(text)
        memory = quantity.parse(value["memory"]) / quantity.MIB
        since = timestamp(value["since"])
        killed_at = value["killedAt"]
    except (orjson.JSONDecodeError, quantity.QuantityError, KeyError, TypeError, ValueError):
        return None
    if since is None or not isinstance(killed_at, str) or memory.denominator != 1 or memory <= 0:
        return None
    return OomFloor(int(memory), killed_at, since)


def calibration_annotation(calibration: Calibration) -> str:
    value = {
        "factor": f"{float(calibration.factor):.4f}",
        "peakMiB": calibration.peak_mib,
        "predictedMiB": calibration.predicted_mib,
        "pod": calibration.window.pod,
        "podStarted": api_time(calibration.window.started),
        "commit": calibration.window.commit,
        "since": api_time(calibration.since),
    }
    return orjson.dumps(value).decode()


def parse_calibration(text: object) -> Calibration | None:
    """Our calibration annotation; None when absent or unreadable (the model alone, until the next
    finished sync is learned from). A factor outside the clamp reads as unreadable, not as clamped: it is
    not one we wrote."""
    if not text or not isinstance(text, str):
        return None
    try:
        value = orjson.loads(text)
        factor = Fraction(value["factor"])
        peak, predicted = _count(value["peakMiB"]), _count(value["predictedMiB"])
        started, since = timestamp(value["podStarted"]), timestamp(value["since"])
        window = Window(value["pod"], started or 0.0, value["commit"])
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, ZeroDivisionError):
        return None
    texts = (window.pod, window.commit)
    if not all(isinstance(t, str) and t for t in texts) or started is None:
        return None
    if not MIN_FACTOR <= factor <= MAX_FACTOR or not isinstance(value["factor"], str):
        return None
    if peak is None or predicted is None or since is None:
        return None
    return Calibration(factor, peak, window, predicted, since)


def published(
    recommended: Resources | None,
    applied: Resources | None,
    held_by_owner: str | None = None,
    target: str | None = None,
) -> dict[str, str | None]:
    """The recommended and applied annotations for these sizes (those that are known), the target the
    applied size goes through (when one is named), and why the recommendation is held (None: not held,
    the annotation is removed)."""
    values = {RECOMMENDED_ANNOTATION: recommended, APPLIED_ANNOTATION: applied}
    sizes: dict[str, str | None] = {
        name: resources_annotation(value) for name, value in values.items() if value is not None
    }
    through = {TARGET_ANNOTATION: target} if target and applied is not None else {}
    return {**sizes, **through, HELD_ANNOTATION: held_by_owner}
