"""Our sidecar's webhook certificate from cert-manager, on the real node, Config Sync's default release: the
overlay `manifests/sidecar/cert-manager` installs with one `kubectl apply -k`, a renewed certificate is served
by the running webhook without a restart, and the README's cert-manager install of the release file,
run verbatim, works.

cert-manager is v1.21.2: its controllers and its CA injector, built from its Go module and run by two
mains of ours (its own are not served by the Go module proxy; its own webhook is not run): see
controlplane.certmanager."""

from __future__ import annotations

import base64
import json
import subprocess
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import cast

import pytest

from controlplane.autoscaler_install import (
    SIDECAR_CONTAINER,
    SIDECAR_MANIFESTS,
    WEBHOOK_CONFIGURATION,
    WEBHOOK_NAME,
    WEBHOOK_TLS_SECRET,
    install_guard,
)
from controlplane.certmanager import (
    certificate,
    condition,
    install_cert_manager,
    ready,
    uninstall_cert_manager,
)
from controlplane.configsync_install import NAMESPACE
from controlplane.configsync_node import NodeConfigSync
from controlplane.release import Release
from controlplane.resources import RESOURCES
from controlplane.status_checks import pod_ready
from inventory.core.ids import RSyncKey
from inventory.kube import kubeapi
from tests.e2e.test_readme_install import RESTART_RECONCILERS, SIDECAR_INSTALL, readme_block, readme_inline
from tests.helpers import FIGURES, Shell, wait_for
from tests.integration.on_node import JSON, configmaps, finished, metric, rsync_of, suffix

SERVING = "objcount-webhook"  # the Certificate of the overlay (certificates.yaml)
CA_SECRET = "objcount-webhook-ca"
WEBHOOK_PORT = 9443
SERVICE_NAME = f"objcount-injector.{NAMESPACE}.svc"
WEBHOOK_PODS = f"app.kubernetes.io/name={WEBHOOK_NAME}"
# The kubelet updates a mounted Secret within its sync period (10 s here) and its cache's TTL.
SERVED_TIMEOUT = 180.0


@pytest.fixture(scope="module")
def cert_manager(config_sync_on_node: NodeConfigSync) -> Iterator[None]:
    """cert-manager on the session's node for this module; after it, our objects and the Secrets
    cert-manager wrote removed, cert-manager stopped, the admission guard back."""
    began = time.monotonic()
    install_cert_manager(config_sync_on_node.stack)
    FIGURES.append(("cert-manager: installed and issuing on the running node", time.monotonic() - began))
    yield
    stack = config_sync_on_node.stack
    stack.kubectl("delete", "-k", str(SIDECAR_MANIFESTS / "cert-manager"), "--ignore-not-found", check=False)
    stack.kubectl("-n", NAMESPACE, "delete", "secret", WEBHOOK_TLS_SECRET, CA_SECRET, "--ignore-not-found")
    uninstall_cert_manager(stack)
    install_guard(config_sync_on_node.api)


@pytest.fixture(scope="module")
def root(config_sync_on_node: NodeConfigSync) -> Iterator[RSyncKey]:
    """A RootSync of 10 ConfigMaps, synced, whose reconciler Pods the tests have admitted again."""
    cs = config_sync_on_node
    api = cs.api
    key = RSyncKey("RootSync", NAMESPACE, f"certs-{suffix()}")
    commit = cs.commit(key, configmaps(10, namespace=f"{key.name}-apps"))
    api.create(kubeapi.ROOTSYNC, NAMESPACE, cs.rsync(key))
    wait_for(lambda: finished(rsync_of(api, key), commit), timeout=240, what=f"{key} synced")
    yield key
    api.delete(kubeapi.ROOTSYNC, NAMESPACE, key.name)


def secret_data(cs: NodeConfigSync, name: str) -> JSON | None:
    try:
        return cast(JSON, cs.api.get(RESOURCES["Secret"], NAMESPACE, name)["data"])
    except kubeapi.NotFound:
        return None


def ca_bundle(cs: NodeConfigSync) -> str | None:
    configuration = cs.api.get(RESOURCES["MutatingWebhookConfiguration"], None, WEBHOOK_CONFIGURATION)
    return cast("str | None", configuration["webhooks"][0]["clientConfig"].get("caBundle"))


def serial(pem: bytes) -> str:
    """A certificate's serial number as openssl prints it."""
    out = subprocess.run(
        ["openssl", "x509", "-noout", "-serial"], input=pem, capture_output=True, check=True
    ).stdout.decode()
    return out.strip().removeprefix("serial=")


def secret_expiry(cs: NodeConfigSync) -> float:
    """When the serving certificate in the webhook's Secret expires, as openssl reads it (Unix seconds)."""
    data = secret_data(cs, WEBHOOK_TLS_SECRET)
    assert data is not None, f"no Secret {WEBHOOK_TLS_SECRET}"
    pem = base64.b64decode(data["tls.crt"])
    out = subprocess.run(
        ["openssl", "x509", "-noout", "-enddate"], input=pem, capture_output=True, check=True
    ).stdout.decode()
    ended = datetime.strptime(out.strip().removeprefix("notAfter="), "%b %d %H:%M:%S %Y %Z")
    return ended.replace(tzinfo=UTC).timestamp()


def secret_serial(cs: NodeConfigSync) -> str | None:
    data = secret_data(cs, WEBHOOK_TLS_SECRET)
    return serial(base64.b64decode(data["tls.crt"])) if data else None


def served_serial(cs: NodeConfigSync, pod_ip: str) -> str | None:
    """The serial of the certificate a webhook Pod serves, read by a TLS handshake from inside the suite's
    network namespace (where the API server dials it too); None when the handshake fails."""
    handshake = subprocess.run(
        [
            "nsenter",
            f"--net={cs.stack.sandbox.netns}",
            "openssl",
            "s_client",
            "-connect",
            f"{pod_ip}:{WEBHOOK_PORT}",
            "-servername",
            SERVICE_NAME,
        ],
        input=b"",
        capture_output=True,
        timeout=30,
        check=False,
    )
    if b"-----BEGIN CERTIFICATE-----" not in handshake.stdout:
        return None
    return serial(handshake.stdout)


def wait_until_served(cs: NodeConfigSync, pods: list[JSON], serial: str) -> None:
    """Until each of the webhook's `pods` serves the certificate of this serial."""
    for pod in pods:
        ip = pod["status"]["podIP"]
        wait_for(
            lambda i=ip: served_serial(cs, i) == serial,
            timeout=SERVED_TIMEOUT,
            interval=1,
            what=f"{ip} serving the certificate {serial}",
        )


def webhook_pods(cs: NodeConfigSync) -> list[JSON]:
    return [p for p in cs.pods(WEBHOOK_PODS) if pod_ready(p)]


def renew(cs: NodeConfigSync, name: str) -> None:
    """What `cmctl renew` does: the Certificate's `Issuing` condition set True (reason ManuallyTriggered)
    through its status subresource, as read (a conflict: read again). cert-manager issues it again."""

    def attempt() -> bool:
        found = cast(JSON, certificate(cs.stack, NAMESPACE, name))
        conditions = [c for c in found["status"].get("conditions") or [] if c["type"] != "Issuing"]
        conditions.append(
            {
                "type": "Issuing",
                "status": "True",
                "reason": "ManuallyTriggered",
                "message": "Certificate re-issuance manually triggered",
                "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "observedGeneration": found["metadata"]["generation"],
            }
        )
        found["status"]["conditions"] = conditions
        result = cs.stack.kubectl(
            "replace", "--subresource=status", "-f", "-", input_text=json.dumps(found), check=False
        )
        assert result.returncode == 0 or "the object has been modified" in result.stderr, result.stderr
        return result.returncode == 0

    wait_for(attempt, timeout=30, interval=0.5, what=f"the Issuing condition set on {name}")


def issued(cs: NodeConfigSync) -> bool:
    found = certificate(cs.stack, NAMESPACE, SERVING)
    issuing = condition(found or {}, "Issuing")
    return ready(found) and not (issuing and issuing["status"] == "True")


def readmitted_with_sidecar(cs: NodeConfigSync, key: RSyncKey) -> JSON:
    """The RSync's reconciler Pod deleted and its next one admitted with our sidecar (the API server
    reached our webhook over TLS it trusts: the webhook fails open, so a Pod without it means it did not)."""
    # Our sidecar may be resizing the reconciler just now (Config Sync's Recreate rollout: a moment
    # without a Pod): take the Pod once there is one.
    old = wait_for(lambda: cs.reconciler_pod(key), timeout=120, what=f"{key}'s reconciler Pod")
    cs.stack.kubectl("-n", NAMESPACE, "delete", "pod", old["metadata"]["name"], "--wait=false")

    def next_pod() -> JSON | None:
        pod = cs.reconciler_pod(key)
        return cast(JSON, pod) if pod and pod["metadata"]["name"] != old["metadata"]["name"] else None

    pod = wait_for(next_pod, timeout=120, what=f"{key}'s next reconciler Pod")
    assert SIDECAR_CONTAINER in [c["name"] for c in pod["spec"]["containers"]], "admitted without the sidecar"
    return pod


def test_the_cert_manager_overlay_installs_the_sidecar_with_one_kubectl_apply_k(
    config_sync_on_node: NodeConfigSync, cert_manager: None, root: RSyncKey
) -> None:
    """`kubectl apply -k manifests/sidecar/cert-manager`, nothing else: cert-manager issues the serving
    certificate into the Secret the webhook mounts, its cainjector sets the webhook configuration's
    caBundle to that Secret's CA, the webhook's Pods become Ready, and a reconciler Pod created then gets
    our sidecar."""
    cs = config_sync_on_node
    cs.stack.kubectl("apply", "-k", str(SIDECAR_MANIFESTS / "cert-manager"))
    wait_for(lambda: issued(cs), timeout=120, interval=0.5, what="the webhook's Certificate issued")
    data = cast(JSON, secret_data(cs, WEBHOOK_TLS_SECRET))
    assert data["ca.crt"] == cast(JSON, secret_data(cs, CA_SECRET))["ca.crt"]
    wait_for(lambda: ca_bundle(cs) == data["ca.crt"], timeout=120, what="the CA injected by cert-manager")
    cs.stack.kubectl("-n", NAMESPACE, "rollout", "status", f"deployment/{WEBHOOK_NAME}", "--timeout=100s")
    # Webhook Pods that ran before (an earlier install's, with a certificate of the script's) are not
    # replaced by this apply: they serve cert-manager's certificate once the kubelet has updated their
    # Secret volume (until then the API server does not trust them, and Pods start without the sidecar).
    wait_until_served(cs, webhook_pods(cs), cast(str, secret_serial(cs)))
    readmitted_with_sidecar(cs, root)


def test_a_renewed_certificate_is_served_by_the_running_webhook_without_a_restart(
    config_sync_on_node: NodeConfigSync, cert_manager: None, root: RSyncKey
) -> None:
    """The serving Certificate renewed (as `cmctl renew` does): every webhook Pod serves the new
    certificate from its next connection, none restarted or replaced, the CA (and so the caBundle)
    unchanged, and a reconciler Pod admitted afterwards gets the sidecar."""
    cs = config_sync_on_node
    pods = webhook_pods(cs)
    assert len(pods) == 2
    before = {p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["restartCount"] for p in pods}
    old = cast(str, secret_serial(cs))
    bundle = ca_bundle(cs)
    assert [served_serial(cs, p["status"]["podIP"]) for p in pods] == [old, old]
    renew(cs, SERVING)
    new = wait_for(
        lambda: (s := secret_serial(cs)) != old and s, timeout=120, what="a new certificate issued"
    )
    began = time.monotonic()
    wait_until_served(cs, pods, new)
    FIGURES.append(
        ("cert-manager renewal: the new certificate served by both webhook Pods", time.monotonic() - began)
    )
    after = {
        p["metadata"]["uid"]: p["status"]["containerStatuses"][0]["restartCount"] for p in webhook_pods(cs)
    }
    assert after == before, "a webhook Pod restarted or was replaced"
    assert ca_bundle(cs) == bundle
    # What ObjcountWebhookCertificateExpiring reads: each Pod shows the expiry of the certificate it now
    # serves, the renewed one's.
    expiry = secret_expiry(cs)
    for pod in pods:
        name = pod["metadata"]["name"]
        assert metric(cs.api, [name], "objcount_webhook_certificate_expiry_timestamp_seconds") == expiry
    readmitted_with_sidecar(cs, root)


def test_the_readmes_cert_manager_install_of_the_release_file_works(
    config_sync_on_node: NodeConfigSync, cert_manager: None, root: RSyncKey, release: Release, shell: Shell
) -> None:
    """The README's sidecar install with cert-manager: its step 3b with the `-cert-manager` release file
    (as the README says), then the reconcilers restarted: the webhook runs the release's image by
    digest, and the restarted reconciler's sidecar too."""
    cs = config_sync_on_node
    with_cert_manager = "objcount-sidecar-cert-manager.yaml"
    shell(readme_block(SIDECAR_INSTALL).replace("objcount-sidecar.yaml", with_cert_manager))
    cs.stack.kubectl("-n", NAMESPACE, "rollout", "status", "deployment/objcount-webhook", "--timeout=180s")
    shell(readme_inline(RESTART_RECONCILERS))
    assert {c["image"] for p in webhook_pods(cs) for c in p["spec"]["containers"]} == {release.image}
    wait_for(lambda: issued(cs), timeout=120, interval=0.5, what="the webhook's Certificate issued")

    def sidecar_image() -> str | None:
        pod = cs.reconciler_pod(root) or {}
        images = [
            c["image"] for c in pod.get("spec", {}).get("containers", []) if c["name"] == SIDECAR_CONTAINER
        ]
        return images[0] if images else None

    wait_for(lambda: sidecar_image() == release.image, timeout=120, what="the restarted reconciler's sidecar")
