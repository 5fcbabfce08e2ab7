"""cert-manager (github.com/cert-manager/cert-manager v1.21.2) on the local real node, on request.

What is cert-manager's own: every controller that runs, its CA injector, its issuers (SelfSigned and CA),
its CRDs (the module's `deploy/crds/`, read from the Go module cache) and the version it reports. What is
ours: the two `main` packages that run them (`controlplane/certmanager/controller` and `.../cainjector`).
cert-manager's own mains are Go modules of their own (`.../cmd/controller`, `.../cmd/cainjector`, ...) that
the Go module proxy does not serve (404 for every version), so they cannot be built here; ours wire up
cert-manager's public packages from its main module as released, with cert-manager's defaults
(`controlplane/certmanager/go.mod` says more). The controller runs the Issuer and ClusterIssuer
controllers, the CertificateRequest approver, the SelfSigned and CA signers, and the six Certificate
controllers (trigger, key manager, request manager, issuing, readiness, revision manager); the cainjector
injects CAs into Mutating- and ValidatingWebhookConfigurations, from a Certificate's Secret
(`cert-manager.io/inject-ca-from`) or a Secret (`cert-manager.io/inject-ca-from-secret`).

Both are built by `controlplane/build_certmanager.sh` (cached like the control plane's binaries), each put
as `/<binary>` on the distroless stand-in (`controlplane.images.static_binary_image`) under the name
upstream's release gives it (`quay.io/jetstack/cert-manager-<binary>:v1.21.2`; upstream's images are
`gcr.io/distroless/static-debian13:nonroot`, user 65532, with the binary at `/app/cmd/<binary>/<binary>`,
and the chart sets no runAsUser, only runAsNonRoot), and run by the kubelet as two Deployments of one
replica in namespace `cert-manager`, with ServiceAccounts, RBAC and security contexts written here after
the Helm chart's (`deploy/charts/cert-manager/templates/`). No leader election (one replica of each), no
metrics or health servers (nothing scrapes them here).

Left out: cert-manager's webhook. Its main is one more module the proxy does not serve (`.../cmd/webhook`),
and running it would take a third main of ours, its Service, the serving certificate it makes for itself
and the two webhook configurations the chart registers; the controllers do not need it: its admission
webhooks are optional. What that means here: nothing validates cert-manager's objects when they are written
(the chart's validating webhook, on every create and update in cert-manager.io and acme.cert-manager.io,
failurePolicy Fail): an invalid Certificate is stored, and it is the controllers that meet the problem when
they act on it. And its mutating webhook, on CertificateRequest creations, does not fill in the requester's
identity (`spec.username`, `groups`, `uid`, `extra`), which stay empty, so nothing checks who may set a
CertificateRequest's `Approved` condition (the webhook checks `approve` on the cert-manager.io signers).
Also left out: the ACME, Vault and Venafi issuers, the CertificateSigningRequest signers, the ingress and
Gateway shims, startupapicheck.

A stack does not run it unless asked:

    with running_node_stack(extra_images=certmanager_images()) as stack:
        install_cert_manager(stack)

or `install_cert_manager(stack)` on any running stack: it imports the images into the node's containerd
itself when the stack was not started with them. It returns once cert-manager works: a throwaway
self-signed Certificate in `cert-manager` becomes Ready (then it is deleted).
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from controlplane import images
from controlplane.builds import given_or_built
from controlplane.errors import ControlPlaneError
from controlplane.stack import NodeStack
from controlplane.status_checks import any_container_running, most_restarts

BUILD_SCRIPT = Path(__file__).with_name("build_certmanager.sh")
WRAPPER_MODULE = Path(__file__).with_name("certmanager")
MODULE = "github.com/cert-manager/cert-manager"
VERSION = "v1.21.2"  # the release (its images' tag too)
NAMESPACE = "cert-manager"
INSTANCE = "cert-manager"  # the chart's release name, in its labels
BINARIES = ("controller", "cainjector")
# The chart's names of each component's Deployment and ServiceAccount, its `app.kubernetes.io/name` and
# `app.kubernetes.io/component` labels, and its container's name.
DEPLOYMENTS = {"controller": "cert-manager", "cainjector": "cert-manager-cainjector"}
APP_NAMES = {"controller": "cert-manager", "cainjector": "cainjector"}
CONTAINERS = {"controller": "cert-manager-controller", "cainjector": "cert-manager-cainjector"}
# upstream's images are distroless static nonroot (user 65532); the chart only requires a non-root user.
IMAGE_USER = f"{images.DISTROLESS_UID}:{images.DISTROLESS_UID}"
LOG_LEVEL = "--v=2"  # the chart's global.logLevel
FIELD_MANAGER = "objcount-certmanager"
CRD_NAMES = (
    "certificaterequests.cert-manager.io",
    "certificates.cert-manager.io",
    "challenges.acme.cert-manager.io",
    "clusterissuers.cert-manager.io",
    "issuers.cert-manager.io",
    "orders.acme.cert-manager.io",
)
# The throwaway objects install_cert_manager checks cert-manager with.
PROBE = "objcount-install-probe"
PROBE_SECRET = f"{PROBE}-tls"
# Cold start here: the Pods start in seconds, the controllers sync their informers, and a self-signed
# certificate is issued in about a second.
INSTALL_TIMEOUT = 180.0
CRASHES_BEFORE_FAILING = 2

JSON = dict[str, Any]


def image_name(binary: str) -> str:
    return f"quay.io/jetstack/cert-manager-{binary}:{VERSION}"


def build_certmanager() -> Path:
    """Build or reuse the pinned cert-manager; return the directory holding `controller` and `cainjector`.
    `OBJCOUNT_CERTMANAGER_BIN_DIR` names a directory holding them already (no build)."""
    return given_or_built("OBJCOUNT_CERTMANAGER_BIN_DIR", BUILD_SCRIPT, "cert-manager")


def certmanager_images(bin_dir: Path | None = None) -> list[images.Image]:
    """The controller's and cainjector's images, built (binaries and images, each cached) if needed."""
    directory = bin_dir or build_certmanager()
    return [images.static_binary_image(image_name(b), directory / b, IMAGE_USER) for b in BINARIES]


@functools.cache
def crds_dir() -> Path:
    """The release's `deploy/crds/` directory, in the Go module cache (downloaded there if it is not yet:
    the build downloads it, OBJCOUNT_CERTMANAGER_BIN_DIR skips the build). Asked of `go` once per
    process."""
    go = shutil.which("go") or "/usr/local/go/bin/go"
    result = subprocess.run(
        [go, "mod", "download", "-json", MODULE],
        cwd=WRAPPER_MODULE,
        env={**os.environ, "GOWORK": "off", "GOFLAGS": "-mod=readonly"},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"`go mod download {MODULE}` failed:\n{result.stdout}{result.stderr}")
    module = json.loads(result.stdout)
    if module.get("Version") != VERSION:
        raise ControlPlaneError(
            f"{WRAPPER_MODULE}/go.mod pins {MODULE} {module.get('Version')}, not {VERSION}"
        )
    return Path(module["Dir"]) / "deploy" / "crds"


def crds(directory: Path) -> list[JSON]:
    """The six CustomResourceDefinitions, as the release's `deploy/crds/*.yaml` hold them."""
    found = [
        item
        for path in sorted(directory.glob("*.yaml"))
        for item in yaml.safe_load_all(path.read_text())
        if item
    ]
    names = tuple(sorted(item["metadata"]["name"] for item in found))
    if names != CRD_NAMES:
        raise ControlPlaneError(f"{directory} holds the CRDs {names}, not {CRD_NAMES}: update certmanager.py")
    return found


def _labels(binary: str) -> dict[str, str]:
    """The chart's labels of a component's objects (its Pods' selector: all but `app`)."""
    return {
        "app": APP_NAMES[binary],
        "app.kubernetes.io/name": APP_NAMES[binary],
        "app.kubernetes.io/instance": INSTANCE,
        "app.kubernetes.io/component": binary,
    }


def _selector(binary: str) -> str:
    return ",".join(f"{k}={v}" for k, v in _labels(binary).items() if k != "app")


def _rule(groups: Sequence[str], resources: Sequence[str], verbs: Sequence[str]) -> JSON:
    return {"apiGroups": list(groups), "resources": list(resources), "verbs": list(verbs)}


SECRETS_AND_EVENTS = [
    _rule([""], ["secrets"], ["get", "list", "watch", "create", "update", "delete", "patch"]),
    _rule([""], ["events"], ["create", "patch"]),
]

# The controller's ClusterRoles: the chart's (templates/rbac.yaml) for the controllers that run, by the
# chart's names. Left out with the controllers they serve: orders, challenges, ingress-shim, the
# CertificateSigningRequest signers, leader election, and `approve` on the cert-manager.io signers (only
# cert-manager's webhook checks that a requester may approve). One addition, which the chart grants in its
# ingress-shim role: create and delete CertificateRequests (the request manager creates them, the revision
# manager deletes old ones).
CONTROLLER_ROLES: dict[str, list[JSON]] = {
    "cert-manager-controller-issuers": [
        _rule(["cert-manager.io"], ["issuers", "issuers/status"], ["update", "patch"]),
        _rule(["cert-manager.io"], ["issuers"], ["get", "list", "watch"]),
        _rule([""], ["secrets"], ["get", "list", "watch", "create", "update", "delete"]),
        _rule([""], ["events"], ["create", "patch"]),
    ],
    "cert-manager-controller-clusterissuers": [
        _rule(["cert-manager.io"], ["clusterissuers", "clusterissuers/status"], ["update", "patch"]),
        _rule(["cert-manager.io"], ["clusterissuers"], ["get", "list", "watch"]),
        _rule([""], ["secrets"], ["get", "list", "watch", "create", "update", "delete"]),
        _rule([""], ["events"], ["create", "patch"]),
    ],
    "cert-manager-controller-certificates": [
        _rule(
            ["cert-manager.io"],
            ["certificates", "certificates/status", "certificaterequests", "certificaterequests/status"],
            ["update", "patch"],
        ),
        _rule(
            ["cert-manager.io"],
            ["certificates", "certificaterequests", "clusterissuers", "issuers"],
            ["get", "list", "watch"],
        ),
        _rule(["cert-manager.io"], ["certificaterequests"], ["create", "delete"]),
        # For clusters with the OwnerReferencesPermissionEnforcement admission plugin, as the chart says.
        _rule(["cert-manager.io"], ["certificates/finalizers", "certificaterequests/finalizers"], ["update"]),
        *SECRETS_AND_EVENTS,
    ],
}
# The cainjector's ClusterRole: the chart's (templates/cainjector-rbac.yaml) but APIServices and
# CustomResourceDefinitions (their injectors are not enabled) and leader election.
CAINJECTOR_ROLE = "cert-manager-cainjector"
CAINJECTOR_RULES = [
    _rule(["cert-manager.io"], ["certificates"], ["get", "list", "watch"]),
    _rule([""], ["secrets"], ["get", "list", "watch"]),
    _rule([""], ["events"], ["get", "create", "update", "patch"]),
    _rule(
        ["admissionregistration.k8s.io"],
        ["validatingwebhookconfigurations", "mutatingwebhookconfigurations"],
        ["get", "list", "watch", "update", "patch"],
    ),
]


def _cluster_role(name: str, binary: str, rules: list[JSON]) -> list[JSON]:
    """A ClusterRole and its binding to the component's ServiceAccount."""
    metadata = {"name": name, "labels": _labels(binary)}
    subject = {"kind": "ServiceAccount", "name": DEPLOYMENTS[binary], "namespace": NAMESPACE}
    return [
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": metadata,
            "rules": rules,
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": metadata,
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [subject],
        },
    ]


def _deployment(binary: str) -> JSON:
    """A component's Deployment as the chart makes it with its defaults: one replica, its ServiceAccount,
    `--v=2`, POD_NAMESPACE, its security contexts; no leader-election or metrics flags (ours has none)."""
    labels = _labels(binary)
    selector = {k: v for k, v in labels.items() if k != "app"}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": DEPLOYMENTS[binary], "namespace": NAMESPACE, "labels": labels},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": selector},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "serviceAccountName": DEPLOYMENTS[binary],
                    "enableServiceLinks": False,
                    "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [
                        {
                            "name": CONTAINERS[binary],
                            "image": image_name(binary),
                            # The node has no registry: the image is imported into its containerd.
                            "imagePullPolicy": "IfNotPresent",
                            "args": [LOG_LEVEL],
                            "env": [
                                {
                                    "name": "POD_NAMESPACE",
                                    "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}},
                                }
                            ],
                            "securityContext": {
                                "allowPrivilegeEscalation": False,
                                "capabilities": {"drop": ["ALL"]},
                                "readOnlyRootFilesystem": True,
                            },
                        }
                    ],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                },
            },
        },
    }


def release_objects() -> list[JSON]:
    """What install_cert_manager applies after the CRDs: the namespace, the ServiceAccounts, the RBAC and
    the two Deployments."""
    objects: list[JSON] = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}]
    for binary in BINARIES:
        objects.append(
            {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {"name": DEPLOYMENTS[binary], "namespace": NAMESPACE, "labels": _labels(binary)},
                "automountServiceAccountToken": True,
            }
        )
    for name, rules in CONTROLLER_ROLES.items():
        objects += _cluster_role(name, "controller", rules)
    objects += _cluster_role(CAINJECTOR_ROLE, "cainjector", CAINJECTOR_RULES)
    objects += [_deployment(binary) for binary in BINARIES]
    return objects


def probe_objects() -> list[JSON]:
    """A self-signed Issuer and a Certificate it issues, in cert-manager's namespace: what
    install_cert_manager waits to see Ready."""
    metadata = {"name": PROBE, "namespace": NAMESPACE}
    return [
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Issuer",
            "metadata": metadata,
            "spec": {"selfSigned": {}},
        },
        {
            "apiVersion": "cert-manager.io/v1",
            "kind": "Certificate",
            "metadata": metadata,
            "spec": {
                "secretName": PROBE_SECRET,
                "commonName": PROBE,
                "privateKey": {"algorithm": "ECDSA", "size": 256},
                "issuerRef": {"name": PROBE, "kind": "Issuer", "group": "cert-manager.io"},
            },
        },
    ]


def install_cert_manager(
    stack: NodeStack,
    *,
    certmanager_image_list: Sequence[images.Image] | None = None,
    timeout: float = INSTALL_TIMEOUT,
) -> None:
    """Run cert-manager's controller and cainjector on `stack`'s node; return once both run and a
    throwaway self-signed Certificate in `cert-manager` has become Ready (it, its Issuer and its Secret
    are deleted then).

    The images are imported into the node's containerd unless the stack was started with them (or given
    as `certmanager_image_list`). Raises ControlPlaneError after `timeout` seconds, or at once if a
    component keeps exiting, with the Pods described, their log tails and the probe's state."""
    started_with = {i.name for i in stack.images}
    if not all(image_name(b) in started_with for b in BINARIES):
        stack.node.import_images(list(certmanager_image_list or certmanager_images()))
    _apply(stack, crds(crds_dir()))
    for name in CRD_NAMES:
        stack.kubectl("wait", "--for=condition=Established", "--timeout=60s", f"crd/{name}")
    _apply(stack, release_objects())
    _apply(stack, probe_objects())

    deadline = time.monotonic() + timeout
    while not (all(running(stack, b) for b in BINARIES) and probe_ready(stack)):
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"cert-manager's Pods are not both running or its probe Certificate is not Ready within"
                f" {timeout:.0f} s\n" + diagnosis(stack)
            )
        # A container that exits at once (a missing permission, a bad configuration) only ever gets
        # restarted: say so now rather than at the deadline.
        crashing = [DEPLOYMENTS[b] for b in BINARIES if restarts(stack, b) >= CRASHES_BEFORE_FAILING]
        if crashing:
            raise ControlPlaneError(f"cert-manager's {', '.join(crashing)} keeps exiting\n{diagnosis(stack)}")
        time.sleep(0.5)
    _delete_probe(stack)


def _apply(stack: NodeStack, objects: Sequence[JSON]) -> None:
    """`kubectl apply --server-side` (the CRDs are too large for a client-side apply's annotation)."""
    document = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    stack.kubectl(
        "apply", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", "-", input_text=document
    )


def _delete_probe(stack: NodeStack) -> None:
    """The probe's Certificate, Issuer and Secret (cert-manager leaves a Certificate's Secret behind)."""
    stack.kubectl(
        "delete", "-n", NAMESPACE, "--ignore-not-found", "--wait=false",
        f"certificate.cert-manager.io/{PROBE}", f"issuer.cert-manager.io/{PROBE}", f"secret/{PROBE_SECRET}",
    )  # fmt: skip


def running(stack: NodeStack, binary: str) -> bool:
    """A Pod of the component has its container running."""
    return any_container_running(stack.live_pods(NAMESPACE, _selector(binary)))


def restarts(stack: NodeStack, binary: str) -> int:
    """How often the kubelet has restarted the component's container (0 before it has a Pod)."""
    return most_restarts(stack.live_pods(NAMESPACE, _selector(binary)))


def condition(obj: JSON, kind: str) -> JSON | None:
    """The status condition of type `kind` of a cert-manager object, if it has one."""
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c.get("type") == kind), None)


def certificate(stack: NodeStack, namespace: str, name: str) -> JSON | None:
    """A Certificate as the API server has it, or None."""
    result = stack.kubectl(
        "get", "certificates.cert-manager.io", "-n", namespace, name, "-o", "json", check=False
    )
    if result.returncode != 0:
        return None
    found: JSON = json.loads(result.stdout)
    return found


def ready(cert: JSON | None) -> bool:
    """The Certificate's Ready condition is True for its current generation."""
    ready_condition = condition(cert or {}, "Ready")
    return bool(
        cert
        and ready_condition
        and ready_condition.get("status") == "True"
        and ready_condition.get("observedGeneration") == cert["metadata"].get("generation")
    )


def probe_ready(stack: NodeStack) -> bool:
    """install_cert_manager's throwaway Certificate is Ready: cert-manager has issued it."""
    return ready(certificate(stack, NAMESPACE, PROBE))


def diagnosis(stack: NodeStack) -> str:
    """What to read when cert-manager does not come up: its Pods described, each component's log tail,
    the probe's Issuer, Certificate and CertificateRequests, and the namespace's warning events."""
    described = stack.kubectl("describe", "pods", "-n", NAMESPACE, check=False)
    parts = [f"cert-manager Pods:\n{(described.stdout or described.stderr)[-6000:]}"]
    for binary in BINARIES:
        logs = stack.kubectl(
            "logs", "-n", NAMESPACE, f"deployment/{DEPLOYMENTS[binary]}", "--tail=40", check=False
        )
        parts.append(f"{DEPLOYMENTS[binary]} log (last 40 lines):\n{logs.stdout or logs.stderr}")
    probe = stack.kubectl(
        "get", "-n", NAMESPACE, "-o", "yaml",
        "issuers.cert-manager.io,certificates.cert-manager.io,certificaterequests.cert-manager.io",
        check=False,
    )  # fmt: skip
    parts.append(f"cert-manager objects in {NAMESPACE}:\n{(probe.stdout or probe.stderr)[-4000:]}")
    events = stack.kubectl(
        "get", "events", "-n", NAMESPACE, "--field-selector=type=Warning", "--sort-by=.lastTimestamp",
        check=False,
    )  # fmt: skip
    parts.append(f"warning events in {NAMESPACE}:\n{events.stdout[-3000:] or events.stderr}")
    return "\n".join(parts)


def uninstall_cert_manager(stack: NodeStack) -> None:
    """Stop cert-manager: its two Deployments (their Pods go with them). The CRDs, the objects of those
    kinds, the namespace, the ServiceAccounts and the RBAC stay (harmless, and reused by the next
    install_cert_manager); Certificates' Secrets stay too, as cert-manager leaves them."""
    deployments = [f"deployment/{name}" for name in DEPLOYMENTS.values()]
    stack.kubectl("delete", "-n", NAMESPACE, "--ignore-not-found", *deployments)
