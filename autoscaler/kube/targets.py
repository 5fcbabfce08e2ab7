"""How a size reaches the reconciler: a Deployment template, an RSync override, an in-place pod resize,
a VerticalPodAutoscaler's recommendation (VPA applies it), or nowhere (recommend only). Each target is
a codec of the size in the object it writes, and says what it can do: whether the size can change
behind our back (so it is read on every reconcile), whether a write restarts the reconciler, what it
keeps in the RSync itself, and who else owns that field.

Reads raise `ReadError`, writes `WriteError`, each with a `Reason` (autoscaler.core.reasons). The Pod a
target reads is the one the port listed for this reconcile (`autoscaler.kube.port`): none lists it again.

Adding a target is this file only: a class with the members of `Target`, and an entry in `TARGETS`
(settings, the CLI and the README's table are derived from it).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Protocol, cast

import orjson

from autoscaler.core import vpa
from autoscaler.core.annotations import (
    APPLIED_ANNOTATION,
    OVERRIDE_WRITTEN_ANNOTATION,
    RECOMMENDED_ANNOTATION,
    parse_resources_annotation,
    resources_annotation,
)
from autoscaler.core.observation import RSyncView
from autoscaler.core.owners import (
    RECONCILER_MANAGER,
    override_declared_by_another,
    override_held,
    reconciler_manager_owns,
    users_own_override,
)
from autoscaler.core.pods import (
    kubelet_without_resize,
    limit_lowered,
    pod_name,
    pod_resources,
    resize_infeasible,
    resize_refused,
)
from autoscaler.core.reasons import ReadError, Reason, SizeError, WriteError
from autoscaler.core.resources import Resources
from autoscaler.core.size_fields import (
    accepted,
    container_resources,
    is_reconciler_entry,
    override_entries,
    override_entry,
    reconciler_override,
    resources_json,
    template_containers,
)
from autoscaler.core.written import Applied
from inventory.core.ids import RECONCILER_CONTAINER, RECONCILER_NAMESPACE, RSyncKey, reconciler_name
from inventory.core.objects import OUR_FIELD_MANAGER, Deployment, Meta, Pod, PodView, RSync, generation_of
from inventory.core.times import api_time
from inventory.kube import kubeapi

log = logging.getLogger(__name__)

_REASONS: dict[type[kubeapi.ApiError], Reason] = {
    kubeapi.Conflict: Reason.CONFLICT,
    kubeapi.Invalid: Reason.REJECTED,
    kubeapi.Forbidden: Reason.FORBIDDEN,
    kubeapi.NotFound: Reason.NOT_FOUND,
    kubeapi.Gone: Reason.TRANSIENT,
    kubeapi.Transient: Reason.TRANSIENT,
}


def reason_of(error: kubeapi.ApiError) -> Reason:
    return _REASONS.get(type(error), Reason.TRANSIENT)


def read_error(error: kubeapi.ApiError, what: str) -> ReadError:
    return ReadError(reason_of(error), f"{what}: {error}", error.retry_after)


def write_error(error: kubeapi.ApiError, what: str) -> WriteError:
    return WriteError(reason_of(error), f"{what}: {error}", error.retry_after)


class Target(Protocol):
    name: str
    # The size can change behind our back (a new Pod starts with its template's size): it is read on
    # every reconcile instead of remembered.
    rereads_current: bool
    in_place: bool  # the size is the running Pod's (read from it and written to it, no restart)

    def current(self, key: RSyncKey, view: RSyncView, pod: Pod | None) -> Resources | None:
        """What the reconciler has now, as this target keeps it."""
        ...

    def apply(self, key: RSyncKey, resources: Resources, pod: Pod | None) -> Applied: ...

    def declared(self, view: RSyncView) -> Resources | None:
        """The size this target keeps in the RSync itself, as the cached RSync shows it; None when it
        keeps none there (or it is unreadable: `current` reports that when the size is next read)."""
        ...

    def held_by_owner(self, view: RSyncView) -> str | None:
        """Why writing this RSync's size would fight the owner of what this target writes, as the
        cached RSync shows it; None when nothing stands in the way."""
        ...

    def refusal(self, key: RSyncKey) -> str | None:
        """Why this target must not write `key`'s reconciler at all (checked once at start, so a wrong
        install shows at once; every write checks again)."""
        ...

    def resizes_running(self, key: RSyncKey) -> bool:
        """Whether a size written now reaches `key`'s running reconciler without restarting it, as last
        read by `current`."""
        ...


class _NothingInTheRSync:
    rereads_current = False
    in_place = False

    def declared(self, view: RSyncView) -> Resources | None:
        return None

    def held_by_owner(self, view: RSyncView) -> str | None:
        return None

    def refusal(self, key: RSyncKey) -> str | None:
        return None

    def resizes_running(self, key: RSyncKey) -> bool:
        return self.in_place


# ----- deployment ------------------------------------------------------------------------------------------
@dataclass
class DeploymentTarget(_NothingInTheRSync):
    """Server-side apply of the reconciler container's resources in the Deployment's pod template, for
    reconcilers nobody else manages.

    Our field manager owns those fields only; every other container and field stays as it is. Forced,
    because whoever created the Deployment (kubectl, a Helm chart) owns them at first. A Deployment of
    Config Sync's reconciler-manager is refused (`owned`): it would put its own values back, and each
    round trip rolls the reconciler out; `rsync-override` and `in-place` work with it.
    """

    api: kubeapi.KubeApi
    namespace: str = RECONCILER_NAMESPACE
    name: str = "deployment"

    def _deployment(self, key: RSyncKey) -> Deployment:
        try:
            return cast(Deployment, self.api.get(kubeapi.DEPLOYMENT, self.namespace, reconciler_name(key)))
        except kubeapi.ApiError as error:
            raise read_error(error, f"reading Deployment {self.namespace}/{reconciler_name(key)}") from error

    def current(self, key: RSyncKey, view: RSyncView, pod: Pod | None) -> Resources | None:
        return container_resources(
            template_containers(self._deployment(key)), f"Deployment {reconciler_name(key)}"
        )

    def refusal(self, key: RSyncKey) -> str | None:
        if not reconciler_manager_owns(self._deployment(key)):
            return None
        return (
            f"Deployment {self.namespace}/{reconciler_name(key)} is managed by Config Sync's "
            f"{RECONCILER_MANAGER}, which would revert every change to its template (a rollout each time); "
            "use target rsync-override (through the RSync) or in-place (the running Pod) instead"
        )

    def apply(self, key: RSyncKey, resources: Resources, pod: Pod | None) -> Applied:
        try:
            refusal = self.refusal(key)
        except ReadError as error:
            raise WriteError(error.reason, str(error)) from error
        if refusal is not None:
            raise WriteError(Reason.OWNED, refusal)
        name = reconciler_name(key)
        body = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "template": {
                    "spec": {
                        "containers": [{"name": RECONCILER_CONTAINER, "resources": resources_json(resources)}]
                    }
                }
            },
        }
        try:
            written = self.api.patch(
                kubeapi.DEPLOYMENT,
                self.namespace,
                name,
                body,
                patch_type="apply",
                field_manager=OUR_FIELD_MANAGER,
                force=True,
            )
        except kubeapi.ApiError as error:
            raise write_error(error, f"applying to Deployment {self.namespace}/{name}") from error
        stored = accepted(template_containers(written), resources, f"Deployment {name}")
        return Applied(stored, restarted=True)


# ----- RSync spec.override.resources -------------------------------------------------------------------
@dataclass
class RSyncOverrideTarget:
    """The `reconciler` entry of the RSync's `spec.override.resources`, other entries preserved.

    The list has no merge key, so it is a read-modify-write with the resourceVersion as precondition. A
    conflict is answered by reading again at once (the other writer is done; nothing to wait for), a
    bounded number of times; then the write fails (`conflict`) and the work queue tries the reconcile
    again after its backoff (no worker sleeps). Config Sync's reconciler manager then rolls the reconciler
    out.
    """

    api: kubeapi.KubeApi
    attempts: int = 8
    name: str = "rsync-override"
    rereads_current: bool = False
    in_place: bool = False

    def current(self, key: RSyncKey, view: RSyncView, pod: Pod | None) -> Resources | None:
        if view.override_unreadable is not None:
            raise view.override_unreadable
        return view.override

    def declared(self, view: RSyncView) -> Resources | None:
        return view.override

    def held_by_owner(self, view: RSyncView) -> str | None:
        return override_held(view.rsync)

    def refusal(self, key: RSyncKey) -> str | None:
        return None

    def resizes_running(self, key: RSyncKey) -> bool:
        return False  # a rollout

    def apply(self, key: RSyncKey, resources: Resources, pod: Pod | None) -> Applied:
        for _ in range(self.attempts):
            try:
                written = self._write(key, resources)
            except kubeapi.Conflict:
                continue
            try:
                stored = reconciler_override(written)
            except ReadError as error:
                raise WriteError(error.reason, str(error)) from error
            if stored != resources:
                raise WriteError(
                    Reason.REJECTED, f"{key}: override stored as {stored} instead of {resources}"
                )
            return Applied(resources, restarted=True, rsync_generation=generation_of(written))
        raise WriteError(Reason.CONFLICT, f"{key}: still conflicting after {self.attempts} attempts")

    def _write(self, key: RSyncKey, resources: Resources) -> RSync:
        """One read-modify-write of the override; kubeapi.Conflict when the RSync changed in between."""
        resource = kubeapi.RSYNC_RESOURCES[key.kind]
        try:
            rsync = cast(RSync, self.api.get(resource, key.namespace, key.name))
        except kubeapi.ApiError as error:
            raise write_error(error, f"reading {key}") from error
        owner = override_held(rsync)
        if owner is not None:  # since the cached copy was read, someone took it: theirs
            raise WriteError(Reason.OWNED, f"{key}: {owner}")
        try:
            others = [e for e in override_entries(rsync) if not is_reconciler_entry(e)]
        except ReadError as error:
            raise WriteError(error.reason, str(error)) from error
        metadata = rsync.setdefault("metadata", {})
        metadata["annotations"] = {
            **(metadata.get("annotations") or {}),
            OVERRIDE_WRITTEN_ANNOTATION: resources_annotation(resources),
        }
        spec = rsync.setdefault("spec", {})
        override = spec.get("override") or {}
        override["resources"] = [*others, override_entry(resources)]
        spec["override"] = override
        try:
            return cast(RSync, self.api.replace(resource, key.namespace, key.name, dict(rsync)))
        except kubeapi.Conflict:
            raise
        except kubeapi.ApiError as error:
            raise write_error(error, f"writing the override of {key}") from error


# ----- in-place pod resize -------------------------------------------------------------------------------
NO_RESIZE = "the API server serves no pods/resize (Kubernetes before 1.32, or InPlacePodVerticalScaling off)"
# The cause the API server gives from Kubernetes 1.36 (its PodResizeValidator admission plugin, on by
# default) when a resize asks more than the node's allocatable: refused at once with a 403, where 1.34's
# kubelet accepted it and reported it Infeasible.
NODE_CAPACITY = "NodeCapacity"


class BeyondTheNode(Exception):
    """The API server refused a resize larger than the Pod's node can ever hold (`NODE_CAPACITY`)."""


@dataclass
class InPlaceTarget(_NothingInTheRSync):
    """Resize the running reconciler pod through `pods/resize` (no restart).

    Nothing else is written: not the Deployment (Config Sync's reconciler-manager owns it), not the
    template (a rollout is the restart an in-place resize exists to avoid). The size is what the kubelet
    reports the container has (`status.containerStatuses[].resources`), read on every reconcile, so a
    new pod of a rollout, which starts with its template's size, is resized again (unless our webhook
    gave it the size at admission). A lower limit the kubelet refused (the container uses more: it
    compares the usage before lowering a memory limit) is reported with the kubelet's message and not sent
    again until it is higher than what runs.

    With no pod (a rollout between two Pods, a Pod not scheduled yet) nothing is written: the size is
    published on the RSync and the next Pod is given it at admission. Where a resize cannot happen at
    all, the size goes to `fallback` (for Config Sync: the RSync override, a rollout), and `Applied`
    says why: the API server serves no `pods/resize` (checked once), the Pod's kubelet does not resize
    (it reports no resources of the running container: InPlacePodVerticalScaling off there), or the resize
    is more than the node can ever hold: reported `Infeasible` by the kubelet (`PodResizePending`; up to
    1.35) or refused by the API server (403, cause `NodeCapacity`; from 1.36).
    """

    api: kubeapi.KubeApi
    fallback: Target
    namespace: str = RECONCILER_NAMESPACE
    name: str = "in-place"
    rereads_current: bool = True
    in_place: bool = True
    # Told the Pod each resize returned (the port's cache of the reconciler Pods keeps it).
    on_resized: Callable[[Pod], None] = field(default=lambda pod: None, repr=False)
    _serves_resize: bool | None = field(default=None, init=False)

    def current(self, key: RSyncKey, view: RSyncView, pod: Pod | None) -> Resources | None:
        if pod is None:
            return self.fallback.current(key, view, None)
        return pod_resources(pod)

    def held_by_owner(self, view: RSyncView) -> str | None:
        """A `reconciler` override entry someone else set (in git, or by hand) is their size for the
        reconciler: resizing its Pod would undo it, so it is left alone too (said as where it comes from:
        git, another applier, or a hand)."""
        theirs = users_own_override(view.rsync)
        return None if theirs is None else (override_declared_by_another(view.rsync) or theirs)

    def apply(self, key: RSyncKey, resources: Resources, pod: Pod | None) -> Applied:
        if pod is None:
            return Applied(resources, restarted=False)  # the next Pod gets it at admission
        why = self._impossible(pod)
        if why is None:
            try:
                return self._resize(pod, resources)
            except BeyondTheNode as refused:
                why = str(refused)
        applied = self.fallback.apply(key, resources, None)
        return replace(applied, fell_back=f"{why}; applied through {self.fallback.name}")

    def _impossible(self, pod: Pod) -> str | None:
        """Why no resize of this Pod can happen (None: it can be asked for)."""
        if self._serves_resize is None:
            try:
                self._serves_resize = self.api.serves_pod_resize()
            except kubeapi.ApiError as error:
                raise WriteError(reason_of(error), f"reading discovery for pods/resize: {error}") from error
        if not self._serves_resize:
            return NO_RESIZE
        node = kubelet_without_resize(pod)
        if node is not None:
            return (
                f"the kubelet of {node} reports no resources of the running reconciler of pod "
                f"{pod_name(pod)}: it does not resize in place (InPlacePodVerticalScaling off there)"
            )
        if resize_infeasible(pod):
            return (
                f"the kubelet reports the resize of pod {pod_name(pod)} infeasible (more than its node holds)"
            )
        return None

    def _resize(self, pod: Pod, resources: Resources) -> Applied:
        name = pod_name(pod)
        namespace = Meta.of(pod).namespace or self.namespace  # the Pod listed
        refused = resize_refused(pod)
        try:
            lowered = limit_lowered(pod, resources)
        except ReadError as error:
            raise WriteError(error.reason, str(error)) from error
        if refused and lowered:
            raise WriteError(Reason.REFUSED, f"pod {namespace}/{name}: a lower limit was refused: {refused}")
        patch = {
            "spec": {"containers": [{"name": RECONCILER_CONTAINER, "resources": resources_json(resources)}]}
        }
        try:
            written = self.api.patch(
                kubeapi.POD, namespace, name, patch, patch_type="strategic", subresource="resize"
            )
        except kubeapi.Forbidden as error:
            if NODE_CAPACITY in error.causes:
                raise BeyondTheNode(
                    f"the API server refuses the resize of pod {name}: more than its node's allocatable"
                    f" ({error})"
                ) from error
            raise write_error(error, f"resizing pod {namespace}/{name}") from error
        except kubeapi.ApiError as error:
            raise write_error(error, f"resizing pod {namespace}/{name}") from error
        stored = accepted(PodView.of(written).containers, resources, f"pod {name}")
        self.on_resized(cast(Pod, written))
        return Applied(stored, restarted=False)


# ----- a VPA's recommendation ------------------------------------------------------------------------------
@dataclass
class VpaTarget(_NothingInTheRSync):
    """Recommend to VPA: write the `status.recommendation` of the VerticalPodAutoscaler aimed at the
    reconciler Deployment that names our recommender (`recommender`); VPA's updater applies it (in
    place where the kubelet can) and its admission-controller gives it to every new Pod.

    The VPA is the user's (adopted) or, with `create`, made here when none aims at the Deployment
    (`autoscaler.core.vpa.vpa_for`). A VPA that names another recommender, or none (the default
    recommender's), is never written: `owned`. What the VPA's `resourcePolicy` lets through is what is
    written, and the capping is reported (`Applied.capped`). Nothing restarts the reconciler here: how
    VPA applies it (in place, or by recreating the Pod where the kubelet cannot) is VPA's.
    """

    api: kubeapi.KubeApi
    recommender: str = "objcount"
    create: bool = False
    namespace: str = RECONCILER_NAMESPACE
    name: str = "vpa"
    # Read on every reconcile: another writer of the status (a recommender of the same name) is
    # answered with ours again, and our restart resumes from what the VPA holds.
    rereads_current: bool = True
    clock: Callable[[], float] = time.time
    # The VPA `current` found, for the `apply` of the same reconcile (one list of VPAs per reconcile).
    _found: dict[RSyncKey, Mapping[str, object] | None] = field(default_factory=dict, init=False)

    def _find(self, key: RSyncKey) -> Mapping[str, object] | None:
        """Our VPA of the reconciler (None: none aims at it); ReadError when it is not ours to write."""
        try:
            page = self.api.list_page(kubeapi.VPA, self.namespace)
        except kubeapi.ApiError as error:
            raise read_error(error, f"listing VerticalPodAutoscalers in {self.namespace}") from error
        items = orjson.loads(page).get("items") or []
        return vpa.ours(items, reconciler_name(key), self.recommender)

    def current(self, key: RSyncKey, view: RSyncView, pod: Pod | None) -> Resources | None:
        found = self._found[key] = self._find(key)
        asked = None if found is None else vpa.recommended(found, RECONCILER_CONTAINER)
        last = parse_resources_annotation(view.annotations.get(APPLIED_ANNOTATION))
        return vpa.with_limits_of(asked, last)

    def resizes_running(self, key: RSyncKey) -> bool:
        found = self._found.get(key)
        return found is not None and vpa.resizes_in_place(found)

    def apply(self, key: RSyncKey, resources: Resources, pod: Pod | None) -> Applied:
        try:
            found = (self._found.pop(key) if key in self._found else self._find(key)) or self._create(key)
            policy = vpa.container_policy(found, RECONCILER_CONTAINER)
        except ReadError as error:
            raise WriteError(error.reason, str(error)) from error
        name = vpa.name_of(found)
        if policy.off:
            raise WriteError(
                Reason.OWNED, f"VerticalPodAutoscaler {name} turns VPA off for the {RECONCILER_CONTAINER}"
            )
        now = api_time(self.clock())
        written = vpa.recommendation(found, RECONCILER_CONTAINER, resources, now)
        try:
            self.api.patch(
                kubeapi.VPA,
                self.namespace,
                Meta.of(found).name,
                written.patch,
                subresource="status",
                field_manager=OUR_FIELD_MANAGER,
            )
        except kubeapi.ApiError as error:
            raise write_error(error, f"writing the recommendation of VerticalPodAutoscaler {name}") from error
        stored = Resources(
            resources.cpu_request_m if written.cpu_m is None else written.cpu_m,
            resources.memory_request_mib if written.memory_mib is None else written.memory_mib,
            resources.cpu_limit_m,
            resources.memory_limit_mib,
        )
        capped = f"VerticalPodAutoscaler {name}: {', '.join(written.caps)}" if written.caps else None
        return Applied(stored, restarted=False, capped=capped)

    def _create(self, key: RSyncKey) -> Mapping[str, object]:
        """The VPA for the reconciler, made when the settings ask for it (`vpa_create`); ReadError
        (`not_found`) otherwise, saying what to do."""
        deployment = reconciler_name(key)
        if not self.create:
            raise ReadError(
                Reason.NOT_FOUND,
                f"no VerticalPodAutoscaler aims at Deployment {self.namespace}/{deployment}: create one "
                f"naming recommender {self.recommender!r} (docs/targets.md), or let the service create it "
                "(OBJCOUNT_VPA_CREATE=true, with the RBAC of manifests/vpa/create)",
            )
        try:
            owner = self.api.get(kubeapi.DEPLOYMENT, self.namespace, deployment)
            body = vpa.vpa_for(
                self.namespace,
                deployment,
                Meta.of(owner).uid,
                RECONCILER_CONTAINER,
                self.recommender,
            )
            return cast(Mapping[str, object], self.api.create(kubeapi.VPA, self.namespace, body))
        except kubeapi.Conflict:  # made in between (another replica, the user): take what is there
            made = self._find(key)
            if made is None:
                raise ReadError(
                    Reason.CONFLICT, f"VerticalPodAutoscaler {deployment}: made and gone"
                ) from None
            return made
        except kubeapi.ApiError as error:
            what = f"creating VerticalPodAutoscaler {self.namespace}/{deployment}"
            raise read_error(error, what) from error


# ----- recommend only ------------------------------------------------------------------------------------
@dataclass
class RecommendTarget(_NothingInTheRSync):
    """Apply nothing: publish the recommendation as an annotation on the RSync (metadata: no restart)."""

    api: kubeapi.KubeApi
    name: str = "recommend"

    def current(self, key: RSyncKey, view: RSyncView, pod: Pod | None) -> Resources | None:
        return parse_resources_annotation(view.annotations.get(RECOMMENDED_ANNOTATION))

    def apply(self, key: RSyncKey, resources: Resources, pod: Pod | None) -> Applied:
        patch = {"metadata": {"annotations": {RECOMMENDED_ANNOTATION: resources_annotation(resources)}}}
        try:
            self.api.patch(kubeapi.RSYNC_RESOURCES[key.kind], key.namespace, key.name, patch)
        except kubeapi.ApiError as error:
            raise write_error(error, f"annotating {key}") from error
        return Applied(resources, restarted=False)


def refusal_if_known(target: Target, key: RSyncKey) -> str | None:
    """`target.refusal(key)`, or None (with a warning) while it cannot be told yet."""
    try:
        return target.refusal(key)
    except SizeError as error:
        log.warning("cannot tell yet who manages the reconciler Deployment (%s); each apply checks", error)
        return None


# ----- the registry ----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class TargetOptions:
    """What building a target takes beside the API client: the reconcilers' namespace, and for `vpa`
    the recommender's name and whether VPAs are made where none exists."""

    namespace: str = RECONCILER_NAMESPACE
    vpa_recommender: str = "objcount"
    vpa_create: bool = False


@dataclass(frozen=True)
class TargetKind:
    """A target as settings name it: its description (the README's) and how it is built."""

    description: str
    build: Callable[[kubeapi.KubeApi, TargetOptions], Target] = field(repr=False)


TARGETS: dict[str, TargetKind] = {
    "rsync-override": TargetKind(
        "the RSync's `spec.override.resources` (Config Sync rolls the reconciler out)",
        lambda api, options: RSyncOverrideTarget(api),
    ),
    "deployment": TargetKind(
        "the reconciler Deployment's pod template (server-side apply; a rollout)",
        lambda api, options: DeploymentTarget(api, namespace=options.namespace),
    ),
    "in-place": TargetKind(
        "an in-place resize of the running pod (`pods/resize`, no restart), new Pods sized at admission by "
        "our webhook; the RSync override where no resize can happen",
        lambda api, options: InPlaceTarget(api, RSyncOverrideTarget(api), namespace=options.namespace),
    ),
    "vpa": TargetKind(
        "the recommendation of the reconciler's VerticalPodAutoscaler, as its recommender (VPA applies it)",
        lambda api, options: VpaTarget(
            api, options.vpa_recommender, options.vpa_create, namespace=options.namespace
        ),
    ),
    "recommend": TargetKind(
        "nothing: the recommendation is published (annotation, metric, `objcount status`)",
        lambda api, options: RecommendTarget(api),
    ),
}
