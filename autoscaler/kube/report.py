"""The status reader: what the service recorded for each RSync, for people (a table) and scripts (JSON, YAML).

    objcount status -A -o json

and from Python: `read_status(api, namespace=None)`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Literal

import orjson
import yaml

from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    CALIBRATION_ANNOTATION,
    HELD_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    annotation_counts,
    parse_calibration,
    parse_resources_annotation,
    status_counts,
)
from inventory.core.objects import RSync, annotations_of
from inventory.kube import kubeapi

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


def _resources_text(annotations: Mapping[str, str], key: str) -> str | None:
    """`<cpu>m/<memory>Mi` requests from a published resources annotation; None when absent or unreadable
    (a hand-edited annotation is never shown as if it were a size)."""
    resources = parse_resources_annotation(annotations.get(key))
    return None if resources is None else f"{resources.cpu_request_m}m/{resources.memory_request_mib}Mi"


def record_of(kind: str, rsync: RSync) -> RSyncRecord:
    metadata = rsync.get("metadata") or {}
    in_status, in_annotations = status_counts(rsync), annotation_counts(rsync)
    if in_status.source is not None or in_status.sync is not None:
        counts, where = in_status, "status"
    elif in_annotations.source is not None or in_annotations.sync is not None:
        counts, where = in_annotations, "annotations"
    else:
        counts, where = in_status, "none"
    annotations = annotations_of(rsync)
    return RSyncRecord(
        kind,
        metadata.get("namespace", ""),
        metadata.get("name", ""),
        counts.source,
        counts.sync,
        where,  # type: ignore[arg-type]
        _resources_text(annotations, RECOMMENDED_ANNOTATION),
        _resources_text(annotations, APPLIED_ANNOTATION),
        annotations.get(HELD_ANNOTATION) or None,
        _calibration_text(annotations),
    )


def _calibration_text(annotations: Mapping[str, str]) -> str | None:
    """`x<factor> (peak <MiB>Mi)` from our calibration annotation; None when absent or unreadable."""
    calibration = parse_calibration(annotations.get(CALIBRATION_ANNOTATION))
    if calibration is None:
        return None
    return f"x{float(calibration.factor):.4f} (peak {calibration.peak_mib}Mi)"


def read_status(api: kubeapi.KubeApi, namespace: str | None = None) -> list[RSyncRecord]:
    """Every RootSync and RepoSync in `namespace` (None: all namespaces), sorted."""
    records: list[RSyncRecord] = []
    for kind, resource in kubeapi.RSYNC_RESOURCES.items():
        continue_token = ""
        while True:
            page = orjson.loads(api.list_page(resource, namespace, continue_token=continue_token))
            records.extend(record_of(kind, item) for item in page.get("items") or [])
            continue_token = (page.get("metadata") or {}).get("continue", "")
            if not continue_token:
                break
    return sorted(records, key=lambda r: (r.namespace, r.kind, r.name))


def _cell(value: object) -> str:
    return UNKNOWN if value is None else str(value)


def render(records: list[RSyncRecord], output: Output = "table") -> str:
    if output == "json":
        return orjson.dumps([asdict(r) for r in records], option=orjson.OPT_INDENT_2).decode() + "\n"
    if output == "yaml":
        return yaml.safe_dump([asdict(r) for r in records], sort_keys=False)
    header = [
        "KIND",
        "NAMESPACE",
        "NAME",
        "SOURCE OBJECTS",
        "SYNCED OBJECTS",
        "STORED IN",
        "RECOMMENDED",
        "APPLIED",
        "CALIBRATED",
        "HELD BY OWNER",
    ]
    rows = [header] + [
        [
            r.kind,
            r.namespace,
            r.name,
            _cell(r.source_count),
            _cell(r.sync_count),
            r.counts_stored_in,
            r.recommended or "-",
            r.applied or "-",
            r.calibrated or "-",
            r.held_by_owner or "-",
        ]
        for r in records
    ]
    if not records:
        return "No RootSyncs or RepoSyncs found.\n"
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    return "".join(
        "   ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)).rstrip() + "\n" for row in rows
    )
