"""Which platform the cluster is, read once at start where the settings name none: Autopilot by its own
mutating webhook configurations, as Config Sync's reconciler-manager tells it (`get` of those two names
only), bursting by the control plane's version (`/version`); the decision is the pure core's
(`autoscaler.core.sizing.detected_platform`)."""

from __future__ import annotations

from autoscaler.core.sizing import detected_platform
from inventory.kube import kubeapi

# Config Sync v1.25.0, pkg/util/autopilot.go: before GKE 1.26, and from 1.26 on.
AUTOPILOT_WEBHOOKS = (
    "workload-defaulter.config.common-webhooks.networking.gke.io",
    "sasecret-redacter.config.common-webhooks.networking.gke.io",
)


def detect(api: kubeapi.KubeApi) -> tuple[str, str]:
    """The platform and what it was told by; kubeapi.ApiError when it cannot be read (a webhook
    configuration forbidden to read is not "not there")."""
    found = None
    for name in AUTOPILOT_WEBHOOKS:
        try:
            api.get(kubeapi.MUTATING_WEBHOOKS, None, name)
        except kubeapi.NotFound:
            continue
        found = name
        break
    version = api.server_version()
    platform = detected_platform(found is not None, version)
    why = f"mutating webhook configuration {found}" if found else "no Autopilot webhook configuration"
    return platform, f"{why}, control plane {version}"
