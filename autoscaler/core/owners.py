"""Who owns the fields a target would write: the rules that keep us from fighting an owner. Pure: each
rule reads the object as the cache or the API server gave it and says why it is not ours (None: it is).
"""

from __future__ import annotations

from collections.abc import Mapping

import orjson

from autoscaler.core.annotations import (
    MANAGE_OVERRIDE_ANNOTATION,
    OVERRIDE_WRITTEN_ANNOTATION,
    parse_resources_annotation,
)
from autoscaler.core.reasons import ReadError
from autoscaler.core.size_fields import reconciler_override
from inventory.core.ids import SYNC_KIND_LABEL
from inventory.core.objects import CONFIG_SYNC_APPLIER, annotations_of, block_of, declaring_entries

RECONCILER_MANAGER = "reconciler-manager"  # Config Sync's field manager for the reconciler Deployments
DECLARED_FIELDS_ANNOTATION = "configsync.gke.io/declared-fields"
FROM_GIT = "spec.override is applied from git by Config Sync (its managed fields): change it there"


def reconciler_manager_owns(deployment: Mapping[str, object]) -> bool:
    """Config Sync's reconciler-manager applies the Deployment (its field manager) or labelled it as
    the reconciler of an RSync: it rewrites the template from the RSync on every reconcile."""
    metadata = block_of(deployment, "metadata")
    if SYNC_KIND_LABEL in block_of(metadata, "labels"):
        return True
    entries = metadata.get("managedFields") or []
    return any(
        isinstance(entry, Mapping) and entry.get("manager") == RECONCILER_MANAGER
        for entry in (entries if isinstance(entries, list) else [])
    )


def users_own_override(rsync: Mapping[str, object]) -> str | None:
    """Why the RSync's `reconciler` override entry is a user's, or None when it is ours to write.

    Ours: there is none, or it is the one we last wrote (recorded in the same update, so no crash can
    split the two), or the user handed it to us (`objcount.dev/manage-override: "true"`). Anything else
    someone set by hand, and we leave it alone.
    """
    annotations = annotations_of(rsync)
    if annotations.get(MANAGE_OVERRIDE_ANNOTATION) == "true":
        return None
    try:
        entry = reconciler_override(rsync)
    except ReadError as error:  # not something we wrote: we write only readable entries
        return f"{error}; it is left as it is"
    if entry is None or entry == parse_resources_annotation(annotations.get(OVERRIDE_WRITTEN_ANNOTATION)):
        return None
    return (
        "the reconciler entry of spec.override.resources was set by someone else and is theirs "
        f'(annotate {MANAGE_OVERRIDE_ANNOTATION}: "true" to hand it to us)'
    )


def override_declared_by_another(rsync: Mapping[str, object]) -> str | None:
    """Why `spec.override` of this RSync belongs to the sync or the user that declares it, or None.

    An RSync declared in git by another RSync is applied by that sync (server-side apply, field manager
    `configsync.gke.io`), which puts its declared fields back as git says; with Config Sync's admission
    webhook on, they are also in the `configsync.gke.io/declared-fields` annotation and other writers'
    changes to them are refused. When they cover `spec.override`, our write would be reverted or
    refused; a declaration without it leaves the override to us. The managed fields are read too because
    the webhook, and with it the annotation, is off by default. Any other server-side applier that owns
    `spec.override.resources` (a user's `kubectl apply --server-side`) would put its list back the same
    way, and the guard refuses taking fields from it. Config Sync's own update of a new RSync (adding its
    finalizers) holds the atomic `spec.override.resources` until the declaring sync's next apply: an
    override not ours held so on an RSync Config Sync applies is git's too.
    """
    return _declared_by_managed_fields(rsync) or _declared_by_annotation(rsync)


def _declared_by_managed_fields(rsync: Mapping[str, object]) -> str | None:
    entries = declaring_entries(block_of(rsync, "metadata").get("managedFields"))
    in_git = any(e.get("manager") == CONFIG_SYNC_APPLIER and e.get("operation") == "Apply" for e in entries)
    for entry in entries:
        override = block_of(block_of(entry, "fieldsV1"), "f:spec").get("f:override")
        if not isinstance(override, dict):
            continue
        if entry.get("operation") != "Apply":
            # Config Sync's own update of the whole RSync took the list from its apply's entry: it moved
            # who owns it, not whose it is. An entry not ours on an RSync git declares is git's; one of
            # ours that it wrote back stays ours.
            if in_git and users_own_override(rsync) is not None:
                return FROM_GIT
            continue
        if entry.get("manager") == CONFIG_SYNC_APPLIER:
            return FROM_GIT
        if "f:resources" in override:
            manager = str(entry.get("manager"))[:64]
            return f"spec.override.resources is server-side applied by {manager!r}: change it there"
    return None


def _declared_by_annotation(rsync: Mapping[str, object]) -> str | None:
    text = annotations_of(rsync).get(DECLARED_FIELDS_ANNOTATION)
    if text is None:
        return None
    try:
        fields = orjson.loads(text)
    except orjson.JSONDecodeError:
        fields = None
    if not isinstance(fields, dict):  # unknown is not "not declared"
        return f"{DECLARED_FIELDS_ANNOTATION} is unreadable: spec.override may be declared in git"
    spec = fields.get("f:spec")
    if isinstance(spec, dict) and "f:override" in spec:
        return "spec.override is declared in git (configsync.gke.io/declared-fields): change it there"
    return None


def override_held(rsync: Mapping[str, object]) -> str | None:
    """Why the RSync override target must not write this RSync's override, or None."""
    return override_declared_by_another(rsync) or users_own_override(rsync)
