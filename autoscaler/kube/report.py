"""The status reader: what the service recorded for each RSync, for people (a table) and scripts (JSON, YAML).

    objcount status -A -o json

and from Python: `read_status(api, namespace=None)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any, Literal, cast

import orjson
import yaml

from autoscaler.core import vpa
from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    CALIBRATION_ANNOTATION,
    HELD_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    TARGET_ANNOTATION,
    WAITING_ANNOTATION,
    annotation_counts,
    parse_calibration,
    parse_resources_annotation,
    restored_of,
    status_counts,
)
from autoscaler.core.pods import newest_live
from autoscaler.core.quantity import format_memory
from inventory.core.ids import (
    DEPLOYMENT_NAME_LABEL,
    RECONCILER_CONTAINER,
    RECONCILER_NAMESPACE,
    RSyncKey,
    RSyncKind,
    reconciler_name,
    reconciler_pods,
)
from inventory.core.objects import Meta, PodView, RSync, annotations_of, block_of
from inventory.kube import kubeapi

JSON = dict[str, Any]
Output = Literal["table", "json", "yaml"]
UNKNOWN = "<unknown>"


@dataclass(frozen=True)
class RSyncRecord:
    kind: str
    namespace: str
    name: str
    source_count: int | None
    sync_count: int | None
    counts_stored_in: Literal["status", "annotations", "none"]
    recommended: str | None = None
    applied: str | None = None
    held_by_owner: str | None = None  # why the recommendation is not written
    calibrated: str | None = None  # the model's factor learned on this cluster, and the peak it came from
    target: str | None = None  # the target the applied size went through
    vpa_applied: str | None = None  # target vpa: whether VPA applied our last recommendation to the Pod
    waiting_for_room: str | None = None  # in place: the size the kubelet defers (no room on the node now)


def _resources_text(annotations: Mapping[str, str], key: str) -> str | None:
    """`<cpu>m/<memory>Mi` requests from a published resources annotation; None when absent or unreadable
    (a hand-edited annotation is never shown as if it were a size)."""
    resources = parse_resources_annotation(annotations.get(key))
    return None if resources is None else resources.requests_text


def record_of(kind: str, rsync: RSync) -> RSyncRecord:
    meta = Meta.of(rsync)
    in_status, in_annotations = status_counts(rsync), annotation_counts(rsync)
    counts = restored_of(in_status, in_annotations)  # what the service itself restores
    if in_status.source is not None or in_status.sync is not None:
        where = "status"
    elif in_annotations.source is not None or in_annotations.sync is not None:
        where = "annotations"
    else:
        where = "none"
    annotations = annotations_of(rsync)
    return RSyncRecord(
        kind,
        meta.namespace,
        meta.name,
        counts.source,
        counts.sync,
        where,  # type: ignore[arg-type]
        _resources_text(annotations, RECOMMENDED_ANNOTATION),
        _resources_text(annotations, APPLIED_ANNOTATION),
        annotations.get(HELD_ANNOTATION) or None,
        _calibration_text(annotations),
        annotations.get(TARGET_ANNOTATION) or None,
        waiting_for_room=_resources_text(annotations, WAITING_ANNOTATION),
    )


def _calibration_text(annotations: Mapping[str, str]) -> str | None:
    """`x<factor> (peak <MiB>Mi)` from our calibration annotation; None when absent or unreadable."""
    calibration = parse_calibration(annotations.get(CALIBRATION_ANNOTATION))
    if calibration is None:
        return None
    return f"x{float(calibration.factor):.4f} (peak {format_memory(calibration.peak_mib)})"


def read_status(
    api: kubeapi.KubeApi, namespace: str | None = None, reconcilers: str = RECONCILER_NAMESPACE
) -> list[RSyncRecord]:
    """Every RootSync and RepoSync in `namespace` (None: all namespaces), sorted; for those sized through
    a VPA, whether VPA applied our recommendation (the VPAs and reconciler Pods of `reconcilers`)."""
    records: list[RSyncRecord] = []
    for kind, resource in kubeapi.RSYNC_RESOURCES.items():
        records.extend(record_of(kind, cast(RSync, item)) for item in all_of(api, resource, namespace))
    if any(r.target == "vpa" for r in records):
        records = _with_vpa_applied(api, records, reconcilers)
    return sorted(records, key=lambda r: (r.namespace, r.kind, r.name))


def all_of(
    api: kubeapi.KubeApi, resource: kubeapi.Resource, namespace: str | None, selector: str = ""
) -> list[JSON]:
    return [item for page in api.pages(resource, namespace, selector) for item in page.get("items") or []]


def _with_vpa_applied(
    api: kubeapi.KubeApi, records: list[RSyncRecord], reconcilers: str
) -> list[RSyncRecord]:
    """Each `vpa` record with `vpa_applied`: "yes" when the reconciler Pod runs the target of its VPA,
    "no" (with what it runs) when not yet, else why it cannot be told."""
    try:
        vpas = all_of(api, kubeapi.VPA, reconcilers)
        pods = all_of(api, kubeapi.POD, reconcilers, reconciler_pods())
    except kubeapi.ApiError as error:
        return [replace(r, vpa_applied=f"unknown ({error})") if r.target == "vpa" else r for r in records]
    return [replace(r, vpa_applied=_vpa_applied(r, vpas, pods)) if r.target == "vpa" else r for r in records]


def _vpa_applied(record: RSyncRecord, vpas: list[JSON], pods: list[JSON]) -> str:
    kind = cast(RSyncKind, record.kind)
    deployment = reconciler_name(RSyncKey(kind, record.namespace, record.name))
    aimed = [v for v in vpas if vpa.aims_at(v, deployment) and vpa.recommender_of(v)]
    if len(aimed) != 1:
        return f"unknown ({len(aimed)} VerticalPodAutoscalers naming a recommender aim at {deployment})"
    pod = newest_live(p for p in pods if Meta.of(p).labels.get(DEPLOYMENT_NAME_LABEL) == deployment)
    if pod is None:
        return "unknown (no reconciler Pod)"
    container = PodView.of(pod).container(RECONCILER_CONTAINER)
    requests = block_of(block_of(container, "resources"), "requests")
    done = vpa.applied(aimed[0], RECONCILER_CONTAINER, requests)
    if done is None:
        return "unknown (no recommendation yet)"
    runs = f"{requests.get('cpu', '-')}/{requests.get('memory', '-')}"
    return "yes" if done else f"no (the Pod requests {runs})"


def _cell(value: object) -> str:
    return UNKNOWN if value is None else str(value)


# The columns of `objcount status`' table (README and docs/ list them; a test holds them equal).
COLUMNS = (
    "KIND",
    "NAMESPACE",
    "NAME",
    "SOURCE OBJECTS",
    "SYNCED OBJECTS",
    "STORED IN",
    "RECOMMENDED",
    "APPLIED",
    "WAITING FOR ROOM",
    "CALIBRATED",
    "TARGET",
    "VPA APPLIED",
    "HELD BY OWNER",
)


def render(records: list[RSyncRecord], output: Output = "table") -> str:
    if output == "json":
        return orjson.dumps([asdict(r) for r in records], option=orjson.OPT_INDENT_2).decode() + "\n"
    if output == "yaml":
        return yaml.safe_dump([asdict(r) for r in records], sort_keys=False)
    if not records:
        return "No RootSyncs or RepoSyncs found.\n"
    rows = [list(COLUMNS)] + [
        [
            r.kind,
            r.namespace,
            r.name,
            _cell(r.source_count),
            _cell(r.sync_count),
            r.counts_stored_in,
            r.recommended or "-",
            r.applied or "-",
            r.waiting_for_room or "-",
            r.calibrated or "-",
            r.target or "-",
            r.vpa_applied or "-",
            r.held_by_owner or "-",
        ]
        for r in records
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(COLUMNS))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in rows
    )
