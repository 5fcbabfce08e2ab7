"""The shape of a platform team's repository, for the real-reconciler benchmark: teams' Namespaces, each
with its ServiceAccounts, RoleBindings, ConfigMaps, Deployments, Services and NetworkPolicies.

The mix (how many of each kind in a unit of `UNIT` objects) is taken from Config Sync's own e2e test data
and examples; `profiles/data/platform-mix.md` says where and how it was counted. Objects are laid out in
units of `UNIT`, the kinds interleaved evenly (any prefix of a unit holds each kind in proportion, to one
object), a unit's first object a Namespace; each namespaced object goes into the unit's latest Namespace,
so every namespace an object names is declared in the same commit (no implicit Namespaces).

Services are headless (`clusterIP: None`): the local API server's Service range is a /24, which a few
hundred ClusterIP Services would use up; a Service's ClusterIP is one field to the reconciler.
"""

from __future__ import annotations

from collections.abc import Callable

MIX: tuple[tuple[str, int], ...] = (  # per 100 objects: profiles/data/platform-mix.md
    ("Namespace", 38),
    ("ServiceAccount", 5),
    ("RoleBinding", 15),
    ("ConfigMap", 21),
    ("Deployment", 9),
    ("Service", 8),
    ("NetworkPolicy", 4),
)
UNIT = sum(n for _, n in MIX)
TEAMS = MIX[0][1]  # Namespaces per unit


def _namespace(name: str, i: int, namespace: str) -> str:
    return f"apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    team: t{i}\n"


def _service_account(name: str, i: int, namespace: str) -> str:
    return f"apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"


def _role_binding(name: str, i: int, namespace: str) -> str:
    return (
        f"apiVersion: rbac.authorization.k8s.io/v1\nkind: RoleBinding\nmetadata:\n  name: {name}\n"
        f"  namespace: {namespace}\nroleRef:\n  apiGroup: rbac.authorization.k8s.io\n  kind: ClusterRole\n"
        f"  name: view\nsubjects:\n- apiGroup: rbac.authorization.k8s.io\n  kind: Group\n"
        f"  name: team-{i}@example.com\n"
    )


def _config_map(name: str, i: int, namespace: str) -> str:
    return (
        f"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        f"data:\n  log-level: info\n  endpoint: https://svc-{i}.example.com\n  replicas: '{i % 5}'\n"
    )


def _deployment(name: str, i: int, namespace: str) -> str:
    return (
        f"apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        f"  labels:\n    app: {name}\nspec:\n  replicas: 0\n"
        f"  selector:\n    matchLabels:\n      app: {name}\n"
        f"  template:\n    metadata:\n      labels:\n        app: {name}\n    spec:\n"
        f"      containers:\n      - name: app\n        image: registry.invalid/app:{i % 7}\n"
        f"        ports:\n        - containerPort: 8080\n"
        f"        resources:\n          requests:\n            cpu: 10m\n            memory: 16Mi\n"
    )


def _service(name: str, i: int, namespace: str) -> str:
    return (
        f"apiVersion: v1\nkind: Service\nmetadata:\n  name: {name}\n  namespace: {namespace}\n"
        f"spec:\n  clusterIP: None\n  selector:\n    app: {name}\n  ports:\n  - port: 80\n"
        f"    targetPort: 8080\n"
    )


def _network_policy(name: str, i: int, namespace: str) -> str:
    return (
        f"apiVersion: networking.k8s.io/v1\nkind: NetworkPolicy\nmetadata:\n  name: {name}\n"
        f"  namespace: {namespace}\nspec:\n  podSelector: {{}}\n  policyTypes: [Ingress]\n  ingress:\n"
        f"  - from:\n    - namespaceSelector:\n        matchLabels:\n          team: t{i}\n"
    )


_WRITERS: dict[str, Callable[[str, int, str], str]] = {
    "Namespace": _namespace,
    "ServiceAccount": _service_account,
    "RoleBinding": _role_binding,
    "ConfigMap": _config_map,
    "Deployment": _deployment,
    "Service": _service,
    "NetworkPolicy": _network_policy,
}


def _interleaved() -> tuple[str, ...]:
    """The unit's kinds in order: at each slot, the kind furthest behind its share of the slots so far."""
    placed = dict.fromkeys(_WRITERS, 0)
    order = []
    for slot in range(UNIT):
        kind = max(MIX, key=lambda entry: (slot + 1) * entry[1] / UNIT - placed[entry[0]])[0]
        placed[kind] += 1
        order.append(kind)
    return tuple(order)


UNIT_KINDS = _interleaved()


def manifest(i: int, prefix: str) -> str:
    """The i-th object of a platform repository whose Namespaces are named after `prefix`."""
    unit, slot = divmod(i, UNIT)
    kind = UNIT_KINDS[slot]
    team = unit * TEAMS + UNIT_KINDS[: slot + 1].count("Namespace") - 1  # the unit's latest Namespace
    namespace = f"{prefix}-{team}"
    if kind == "Namespace":
        return _namespace(namespace, team, "")
    return _WRITERS[kind](f"{kind.lower()}-{i}", team, namespace)
