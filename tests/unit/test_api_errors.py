"""What the API boundary keeps of a refusal (inventory.kube.kubeapi.error_from_status): its kind, the
server's reason and the types of its causes, from the Status the API server sends, and nothing from a body
that is not one."""

from __future__ import annotations

import orjson

from inventory.kube import kubeapi

# The Status a v1.37.2 API server sent for a resize larger than the node's allocatable (its
# PodResizeValidator), as `kubectl patch --subresource=resize -v=8` printed it on the local stack: a
# cause's type is its `reason`.
NODE_CAPACITY = {
    "kind": "Status",
    "apiVersion": "v1",
    "status": "Failure",
    "message": 'pods "root-reconciler-abc12" is forbidden: node didn\'t have enough allocatable resources:'
    " memory, requested: 1207959552, allocatable: 536870912",
    "reason": "Forbidden",
    "details": {"name": "root-reconciler-abc12", "kind": "pods", "causes": [{"reason": "NodeCapacity"}]},
    "code": 403,
}


def test_a_refused_resize_keeps_its_cause() -> None:
    error = kubeapi.error_from_status(403, orjson.dumps(NODE_CAPACITY), "resizing pod x")
    assert isinstance(error, kubeapi.Forbidden)
    assert error.causes == ("NodeCapacity",)
    assert error.reason == "Forbidden"
    assert "node didn't have enough allocatable resources" in str(error)


def test_a_refusal_without_causes_or_with_odd_ones_has_none() -> None:
    rbac = {"kind": "Status", "reason": "Forbidden", "message": "cannot patch pods/resize", "code": 403}
    assert kubeapi.error_from_status(403, orjson.dumps(rbac), "x").causes == ()
    for details in (
        {"causes": "NodeCapacity"},
        {"causes": [{"reason": 7}, "x", {"type": "NodeCapacity"}]},
        [],
    ):
        odd = {**rbac, "details": details}
        assert kubeapi.error_from_status(403, orjson.dumps(odd), "x").causes == ()
    assert kubeapi.error_from_status(403, b"<html>forbidden</html>", "x").causes == ()
