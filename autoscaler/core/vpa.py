"""VerticalPodAutoscaler objects as the `vpa` target reads and writes them: which VPA is ours to write to
(aimed at a reconciler Deployment and naming our recommender), what its `resourcePolicy` lets through,
and the recommendation we put in its status for VPA's updater and admission-controller to apply. Pure:
objects in, objects out.

The fields and their meaning are VPA v1.8.1's (`pkg/apis/autoscaling.k8s.io/v1/types.go`; what its
updater and admission-controller do with them: `pkg/updater/priority`, `pkg/utils/vpa/capping.go`):

- a VPA naming a recommender in `spec.recommenders` is left alone by every other recommender, the
  default one included; a VPA naming none is the default recommender's;
- the updater acts at once on a Pod whose request is outside `[lowerBound, upperBound]`, and otherwise
  only on Pods older than 12 hours: both bounds are our target, so every change we write is acted on in
  the updater's next loop, and nothing else moves the size (our scale-down delay has already held the
  target through a prune: the core lowers it only once that delay is over);
- the updater and the admission-controller cap the target by the container's `minAllowed`/`maxAllowed`
  and apply only its `controlledResources`: we write what they will apply (so "applied" can be told
  from the Pod) and keep our whole, uncapped ask in `uncappedTarget`;
- limits are VPA's: with `controlledValues: RequestsAndLimits` (its default) a limit keeps the ratio to
  the request the Pod's template has; with `RequestsOnly` the limit stays as the template sets it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from autoscaler.core import quantity
from autoscaler.core.reasons import ReadError, Reason
from autoscaler.core.resources import Resources
from inventory.core.objects import block_of

JSON = dict[str, Any]
RECOMMENDATION_PROVIDED = "RecommendationProvided"
RESOURCES = ("cpu", "memory")  # what VPA recommends, and what we size


@dataclass(frozen=True)
class ContainerPolicy:
    """A container's entry of `spec.resourcePolicy.containerPolicies` (its own, else `*`), parsed."""

    off: bool = False  # `mode: Off`: VPA applies nothing to the container
    controlled: tuple[str, ...] = RESOURCES
    min_allowed: Mapping[str, Fraction] = field(default_factory=dict)  # cores, bytes
    max_allowed: Mapping[str, Fraction] = field(default_factory=dict)


@dataclass(frozen=True)
class Recommendation:
    """What we write for the reconciler container: the status patch, the requests VPA will apply (capped
    and controlled; None for a resource it does not control), and how the policy capped our ask."""

    patch: JSON
    cpu_m: int | None
    memory_mib: int | None
    caps: tuple[str, ...]


def name_of(vpa: Mapping[str, Any]) -> str:
    metadata = block_of(vpa, "metadata")
    return f"{metadata.get('namespace', '')}/{metadata.get('name', '')}"


def aims_at(vpa: Mapping[str, Any], deployment: str) -> bool:
    """The VPA's `targetRef` is this Deployment (a VPA aims at objects in its own namespace)."""
    ref = block_of(block_of(vpa, "spec"), "targetRef")
    return (
        ref.get("kind") == "Deployment"
        and str(ref.get("apiVersion", "")).startswith("apps/")
        and ref.get("name") == deployment
    )


def recommender_of(vpa: Mapping[str, Any]) -> str | None:
    """The recommender the VPA names (None: none named, the default recommender's)."""
    named = block_of(vpa, "spec").get("recommenders")
    if not isinstance(named, list) or not named:
        return None
    first = named[0]
    return str(first.get("name")) if isinstance(first, Mapping) and first.get("name") else None


def ours(vpas: Sequence[Mapping[str, Any]], deployment: str, recommender: str) -> Mapping[str, Any] | None:
    """The VPA aimed at the reconciler Deployment, if it names our recommender; None when no VPA aims at
    it. ReadError (`owned`) when the one that does is another recommender's, or when several do (VPA
    itself then acts on one of them only, which one not said)."""
    aimed = [v for v in vpas if aims_at(v, deployment)]
    if not aimed:
        return None
    if len(aimed) > 1:
        names = ", ".join(sorted(name_of(v) for v in aimed))
        raise ReadError(
            Reason.OWNED, f"{len(aimed)} VerticalPodAutoscalers aim at Deployment {deployment} ({names})"
        )
    (vpa,) = aimed
    named = recommender_of(vpa)
    if named != recommender:
        raise ReadError(
            Reason.OWNED,
            f"VerticalPodAutoscaler {name_of(vpa)} follows recommender {named or 'default'!r}, not "
            f"{recommender!r}: its recommendations are that recommender's",
        )
    return vpa


def _quantities(block: object, what: str) -> dict[str, Fraction]:
    if block is None:
        return {}
    if not isinstance(block, Mapping):
        raise ReadError(Reason.UNREADABLE, f"{what} is not a mapping: {str(block)[:80]!r}")
    try:
        return {str(k): quantity.parse(v) for k, v in block.items() if k in RESOURCES}
    except quantity.QuantityError as error:
        raise ReadError(Reason.UNREADABLE, f"{what}: {error}") from error


def container_policy(vpa: Mapping[str, Any], container: str) -> ContainerPolicy:
    """The policy VPA applies to `container`: its own entry, else the `*` entry, else VPA's defaults.
    ReadError (`unreadable`) for an entry VPA's own validation would not let through."""
    policies = block_of(block_of(vpa, "spec"), "resourcePolicy").get("containerPolicies") or []
    if not isinstance(policies, list):
        raise ReadError(Reason.UNREADABLE, f"{name_of(vpa)}: containerPolicies is not a list")
    entries = {p.get("containerName"): p for p in policies if isinstance(p, Mapping)}
    entry = entries.get(container, entries.get("*"))
    if entry is None:
        return ContainerPolicy()
    where = f"{name_of(vpa)} containerPolicies[{entry.get('containerName')}]"
    controlled = entry.get("controlledResources", list(RESOURCES))
    if not isinstance(controlled, list):
        raise ReadError(Reason.UNREADABLE, f"{where}.controlledResources is not a list")
    return ContainerPolicy(
        off=entry.get("mode") == "Off",
        controlled=tuple(r for r in RESOURCES if r in controlled),
        min_allowed=_quantities(entry.get("minAllowed"), f"{where}.minAllowed"),
        max_allowed=_quantities(entry.get("maxAllowed"), f"{where}.maxAllowed"),
    )


def _capped(name: str, value: Fraction, policy: ContainerPolicy) -> tuple[Fraction, str | None]:
    """VPA's order: raised to `minAllowed`, then lowered to `maxAllowed` (a zero maximum is no maximum)."""
    low, high = policy.min_allowed.get(name), policy.max_allowed.get(name)
    if low is not None and value < low:
        return low, f"{name} raised to minAllowed"
    if high is not None and high > 0 and value > high:
        return high, f"{name} lowered to maxAllowed"
    return value, None


def _cpu(cores: Fraction) -> str:
    return quantity.format_cpu(math.ceil(cores * 1000))


def _memory(size: Fraction) -> str:
    return quantity.format_memory(quantity.mib_up(size))


def recommendation(vpa: Mapping[str, Any], container: str, resources: Resources, now: str) -> Recommendation:
    """The status patch that recommends `resources`' requests for `container` (`now`: an RFC 3339 time
    for a condition that changes). Merge patch: the container recommendations we keep are the whole list
    (the VPA is ours; other containers get none, and VPA leaves them as their template sets them)."""
    policy = container_policy(vpa, container)
    asked = {
        "cpu": Fraction(resources.cpu_request_m, 1000),
        "memory": Fraction(resources.memory_request_mib * quantity.MIB),
    }
    target: dict[str, Fraction] = {}
    caps: list[str] = []
    for name in policy.controlled:
        value, cap = _capped(name, asked[name], policy)
        target[name] = value
        caps.extend([cap] if cap else [])
    text = {"cpu": _cpu, "memory": _memory}
    written = {name: text[name](value) for name, value in target.items()}
    entry = {
        "containerName": container,
        "target": written,
        "lowerBound": written,
        "upperBound": written,
        "uncappedTarget": {name: text[name](value) for name, value in asked.items()},
    }
    message = f"sized from the objects the reconciler syncs: {resources}"
    condition = {
        "type": RECOMMENDATION_PROVIDED,
        "status": "True",
        "reason": "ObjectCount",
        "message": message,
        "lastTransitionTime": _transition_time(vpa, now),
    }
    patch = {"status": {"recommendation": {"containerRecommendations": [entry]}, "conditions": [condition]}}
    cpu = quantity.millicores(written["cpu"]) if "cpu" in written else None
    memory = quantity.mebibytes(written["memory"]) if "memory" in written else None
    return Recommendation(patch, cpu, memory, tuple(caps))


def _transition_time(vpa: Mapping[str, Any], now: str) -> str:
    """When RecommendationProvided last became True: kept while it stays True."""
    conditions = block_of(vpa, "status").get("conditions")
    for condition in conditions if isinstance(conditions, list) else []:
        provided = isinstance(condition, Mapping) and condition.get("type") == RECOMMENDATION_PROVIDED
        if provided and condition.get("status") == "True" and condition.get("lastTransitionTime"):
            return str(condition["lastTransitionTime"])
    return now


def resizes_in_place(vpa: Mapping[str, Any]) -> bool:
    """Whether VPA's updater applies a recommendation to the running Pod in place (`InPlaceOrRecreate`:
    it recreates the Pod only where the kubelet cannot resize it). With `Recreate` every change of the
    target evicts the reconciler, which then syncs from the start again; with `Initial` or `Off` only
    a new Pod gets it."""
    return block_of(block_of(vpa, "spec"), "updatePolicy").get("updateMode") == "InPlaceOrRecreate"


def container_entry(vpa: Mapping[str, Any], container: str) -> Mapping[str, Any] | None:
    entries = block_of(block_of(vpa, "status"), "recommendation").get("containerRecommendations") or []
    if not isinstance(entries, list):
        return None
    return next((e for e in entries if isinstance(e, Mapping) and e.get("containerName") == container), None)


def recommended(vpa: Mapping[str, Any], container: str) -> Resources | None:
    """The requests we last asked for `container` (our `uncappedTarget`), None before we have written
    any. ReadError (`unreadable`) when what is there does not parse."""
    entry = container_entry(vpa, container)
    if entry is None:
        return None
    asked = _quantities(entry.get("uncappedTarget"), f"{name_of(vpa)} uncappedTarget of {container}")
    if set(asked) != set(RESOURCES):
        return None
    return Resources(math.ceil(asked["cpu"] * 1000), quantity.mib_up(asked["memory"]))


def with_limits_of(asked: Resources | None, last_applied: Resources | None) -> Resources | None:
    """What the reconciler was last given through the VPA: its status holds only requests; the limits of
    our decision are those of the RSync's applied annotation when its requests are the same (the size
    a restarted service resumes from), else none are known."""
    if asked is None or last_applied is None:
        return asked
    same = (last_applied.cpu_request_m, last_applied.memory_request_mib) == (
        asked.cpu_request_m,
        asked.memory_request_mib,
    )
    return last_applied if same else asked


def applied(vpa: Mapping[str, Any], container: str, requests: Mapping[str, Any]) -> bool | None:
    """Whether the container's requests (a running Pod's) are the target we wrote: VPA applied it. None
    when there is no target to compare with."""
    entry = container_entry(vpa, container)
    if entry is None:
        return None
    try:
        target = _quantities(entry.get("target"), "target")
        running = _quantities(requests, "requests")
    except ReadError:
        return None
    return bool(target) and all(running.get(name) == value for name, value in target.items())


def vpa_for(namespace: str, deployment: str, uid: str, container: str, recommender: str) -> JSON:
    """The VPA made for a reconciler Deployment when the user asks us to make them: in place where the
    kubelet can (else VPA recreates the Pod), one replica is enough for the updater to act (its default
    is two), the reconciler container ours and every other container left as Config Sync sizes it. It
    belongs to the Deployment (garbage-collected with it, when Config Sync deletes the RSync)."""
    return {
        "apiVersion": "autoscaling.k8s.io/v1",
        "kind": "VerticalPodAutoscaler",
        "metadata": {
            "name": deployment,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/managed-by": "objcount-autoscaler"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment, "uid": uid}
            ],
        },
        "spec": {
            "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": deployment},
            "recommenders": [{"name": recommender}],
            "updatePolicy": {"updateMode": "InPlaceOrRecreate", "minReplicas": 1},
            "resourcePolicy": {
                "containerPolicies": [
                    {"containerName": container, "controlledResources": list(RESOURCES)},
                    {"containerName": "*", "mode": "Off"},
                ]
            },
        },
    }
