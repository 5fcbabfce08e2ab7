"""The API resource of each kind the stack's installs create (Config Sync's released objects, ours),
and `create_or_replace`, what `kubectl apply` does for objects only we write."""

from __future__ import annotations

from controlplane.seed import JSON
from inventory.kube import kubeapi

RESOURCES = {
    "Namespace": kubeapi.NAMESPACE,
    "LimitRange": kubeapi.Resource("", "v1", "limitranges", "LimitRange"),
    "ClusterRole": kubeapi.Resource("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole"),
    "ClusterRoleBinding": kubeapi.Resource(
        "rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding"
    ),
    "ServiceAccount": kubeapi.Resource("", "v1", "serviceaccounts", "ServiceAccount"),
    "ConfigMap": kubeapi.Resource("", "v1", "configmaps", "ConfigMap"),
    "Deployment": kubeapi.DEPLOYMENT,
    "Service": kubeapi.Resource("", "v1", "services", "Service"),
    "Secret": kubeapi.Resource("", "v1", "secrets", "Secret"),
    "Role": kubeapi.Resource("rbac.authorization.k8s.io", "v1", "roles", "Role"),
    "RoleBinding": kubeapi.Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding"),
    "PodDisruptionBudget": kubeapi.Resource("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget"),
    "NetworkPolicy": kubeapi.Resource("networking.k8s.io", "v1", "networkpolicies", "NetworkPolicy"),
    "MutatingWebhookConfiguration": kubeapi.Resource(
        "admissionregistration.k8s.io", "v1", "mutatingwebhookconfigurations", "MutatingWebhookConfiguration"
    ),
    "ValidatingAdmissionPolicy": kubeapi.Resource(
        "admissionregistration.k8s.io", "v1", "validatingadmissionpolicies", "ValidatingAdmissionPolicy"
    ),
    "ValidatingAdmissionPolicyBinding": kubeapi.Resource(
        "admissionregistration.k8s.io",
        "v1",
        "validatingadmissionpolicybindings",
        "ValidatingAdmissionPolicyBinding",
    ),
}


def create_or_replace(api: kubeapi.KubeClient, item: JSON, attempts: int = 5) -> None:
    """As `kubectl apply` for objects only we write: create, else replace the stored one. A replace that
    meets a newer version (a controller wrote the object's status meanwhile: a PodDisruptionBudget's) reads
    it again and replaces that, a bounded number of times."""
    resource = RESOURCES[item["kind"]]
    namespace, name = item["metadata"].get("namespace"), item["metadata"]["name"]
    try:
        api.create(resource, namespace, item)
        return
    except kubeapi.Conflict:
        pass
    for attempt in range(attempts):
        current = api.get(resource, namespace, name)
        version = {**item["metadata"], "resourceVersion": current["metadata"]["resourceVersion"]}
        try:
            api.replace(resource, namespace, name, {**item, "metadata": version})
            return
        except kubeapi.Conflict:
            if attempt == attempts - 1:
                raise
