"""Add the sidecar to the reconciler template that Config Sync's reconciler manager uses.

The reconciler manager builds every reconciler Deployment from the `deployment.yaml` key of the
ConfigMap `reconciler-manager-cm` in `config-management-system`. A manifest inside a string cannot be
patched by kustomize, so this reads the ConfigMap, adds the container of
`manifests/sidecar/container.yaml` (idempotently), and prints the ConfigMap to apply:

    kubectl -n config-management-system get cm reconciler-manager-cm -o yaml \\
      | objcount inject-sidecar | kubectl apply -f -
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

SIDECAR = Path(__file__).resolve().parent.parent / "manifests" / "sidecar" / "container.yaml"
TEMPLATE_KEY = "deployment.yaml"


class InjectError(ValueError):
    pass


def inject(configmap_yaml: str, sidecar: dict[str, Any] | None = None, image: str | None = None) -> str:
    configmap = yaml.safe_load(configmap_yaml)
    if not isinstance(configmap, dict) or configmap.get("kind") != "ConfigMap":
        raise InjectError("expected the reconciler-manager-cm ConfigMap on standard input")
    data = configmap.get("data") or {}
    if TEMPLATE_KEY not in data:
        raise InjectError(f"the ConfigMap has no {TEMPLATE_KEY!r} key (is it reconciler-manager-cm?)")
    container = dict(sidecar or yaml.safe_load(SIDECAR.read_text()))
    if image:
        container["image"] = image
    deployment = yaml.safe_load(data[TEMPLATE_KEY])
    containers = deployment["spec"]["template"]["spec"].setdefault("containers", [])
    deployment["spec"]["template"]["spec"]["containers"] = [
        c for c in containers if c.get("name") != container["name"]
    ] + [container]
    data[TEMPLATE_KEY] = yaml.safe_dump(deployment, sort_keys=False)
    configmap["data"] = data
    for field in ("resourceVersion", "uid", "creationTimestamp", "managedFields"):
        (configmap.get("metadata") or {}).pop(field, None)
    return yaml.safe_dump(configmap, sort_keys=False)
