"""The real Vertical Pod Autoscaler (k8s.io/autoscaler/vertical-pod-autoscaler v1.8.1) on the local real
node, on request.

Its three binaries, `recommender`, `updater` and `admission-controller`, are built from its Go module
(`controlplane/build_vpa.sh`, wrapper module `controlplane/vpa/`, cached like the control plane's
binaries), each put as `/<binary>` on the distroless stand-in (`controlplane.images.static_binary_image`)
under the name upstream's release gives it (`registry.k8s.io/autoscaling/vpa-<binary>:1.8.1`; upstream's
images are `gcr.io/distroless/static:nonroot`, whose user is 65532, and its Deployments run them as
65534), and run as Pods by the kubelet from the release's own manifests, read from the module's `deploy/`
in the Go module cache: the CRDs (`vpa-v1-crd-gen.yaml`), the RBAC (`vpa-rbac.yaml`), the three
Deployments and the webhook's Service, all in `kube-system`, as released. The only change made to them:
extra flags a caller passes are appended to a container's args.

The admission-controller serves its webhook with the certificate upstream's `gencerts.sh` makes (a CA and
a serving certificate for `vpa-webhook.kube-system.svc`, Secret `vpa-tls-certs`), made here the same way
with openssl, and registers its own MutatingWebhookConfiguration (`vpa-webhook-config`, failurePolicy
Ignore) 10 s after it starts; the API server dials it at the Service's endpoint
(`--enable-aggregator-routing`). Since a webhook that fails is ignored, `install_vpa` checks it is reached:
a server-side dry run of a VerticalPodAutoscaler only the webhook rejects must come back rejected by it.

The recommender reads the Pods' usage from metrics.k8s.io (`controlplane.metrics_server`), every
`--recommender-interval` (1 min); the updater acts every `--updater-interval` (1 min), only while the
admission-controller renews its status Lease, and by default only on workloads of at least 2 replicas
(`--min-replicas`, or `spec.updatePolicy.minReplicas` of a VerticalPodAutoscaler).

A stack does not run it unless asked:

    with running_node_stack(extra_images=vpa_images()) as stack:
        install_metrics_server(stack)
        install_vpa(stack, updater_args=["--updater-interval=10s"])

or `install_vpa(stack)` on any running stack: it imports the images into the node's containerd itself when
the stack was not started with them.
"""

from __future__ import annotations

import base64
import functools
import json
import os
import shutil
import subprocess
import tempfile
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
from inventory.kube import kubeapi

BUILD_SCRIPT = Path(__file__).with_name("build_vpa.sh")
WRAPPER_MODULE = Path(__file__).with_name("vpa")
MODULE = "k8s.io/autoscaler/vertical-pod-autoscaler"
VERSION = "1.8.1"  # the release; its module is tagged v1.8.1
NAMESPACE = "kube-system"
BINARIES = ("recommender", "updater", "admission-controller")
# The Deployment of each binary (and the `app` label of its Pods), as the release names them.
DEPLOYMENTS = {binary: f"vpa-{binary}" for binary in BINARIES}
# upstream's images: `FROM gcr.io/distroless/static:nonroot` (user nonroot), `ENTRYPOINT ["/<binary>"]`.
IMAGE_USER = f"{images.DISTROLESS_UID}:{images.DISTROLESS_UID}"
# What install_vpa applies from the module's deploy/, in order: the CRDs, the RBAC (with the
# ServiceAccounts), the webhook's Service, the three Deployments.
CRD_FILE = "vpa-v1-crd-gen.yaml"
RBAC_FILE = "vpa-rbac.yaml"
SERVICE_FILE = "admission-controller-service.yaml"
DEPLOYMENT_FILES = {binary: f"{binary}-deployment.yaml" for binary in BINARIES}
TLS_SECRET = "vpa-tls-certs"
WEBHOOK_SERVICE = "vpa-webhook"  # its Service, and the DNS name its serving certificate is for
WEBHOOK_CONFIGURATION = "vpa-webhook-config"
# Cold start here: the Pods start in seconds; the admission-controller registers its webhook 10 s after it
# starts (a fixed delay in its main.go).
INSTALL_TIMEOUT = 180.0
CRASHES_BEFORE_FAILING = 2

JSON = dict[str, Any]
VPA = kubeapi.VPA


def image_name(binary: str) -> str:
    return f"registry.k8s.io/autoscaling/vpa-{binary}:{VERSION}"


def build_vpa() -> Path:
    """Build or reuse the pinned VPA; return the directory holding its three binaries.
    `OBJCOUNT_VPA_BIN_DIR` names a directory holding them already (no build)."""
    return given_or_built("OBJCOUNT_VPA_BIN_DIR", BUILD_SCRIPT, "the Vertical Pod Autoscaler")


def vpa_images(bin_dir: Path | None = None) -> list[images.Image]:
    """The recommender's, updater's and admission-controller's images, built (binaries and images, each
    cached) if needed."""
    directory = bin_dir or build_vpa()
    return [images.static_binary_image(image_name(b), directory / b, IMAGE_USER) for b in BINARIES]


@functools.cache
def deploy_dir() -> Path:
    """The release's `deploy/` directory, in the Go module cache (downloaded there if it is not yet: the
    build downloads it, OBJCOUNT_VPA_BIN_DIR skips the build). Asked of `go` once per process."""
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
    if module.get("Version") != f"v{VERSION}":
        raise ControlPlaneError(
            f"{WRAPPER_MODULE}/go.mod pins {MODULE} {module.get('Version')}, not v{VERSION}"
        )
    return Path(module["Dir"]) / "deploy"


def release_objects(deploy: Path, extra_args: dict[str, Sequence[str]]) -> list[JSON]:
    """The objects install_vpa applies, from the release's manifests: the only change, `extra_args[binary]`
    appended to that container's args."""
    objects = [
        item
        for name in (CRD_FILE, RBAC_FILE, SERVICE_FILE, *DEPLOYMENT_FILES.values())
        for item in yaml.safe_load_all((deploy / name).read_text())
        if item
    ]
    for item in objects:
        if item["kind"] != "Deployment":
            continue
        binary = next(b for b, name in DEPLOYMENTS.items() if item["metadata"]["name"] == name)
        (container,) = item["spec"]["template"]["spec"]["containers"]
        if container["image"] != image_name(binary) or container.get("imagePullPolicy") != "IfNotPresent":
            raise ControlPlaneError(
                f"{DEPLOYMENT_FILES[binary]} runs {container['image']} ({container.get('imagePullPolicy')}),"
                f" not {image_name(binary)} (IfNotPresent): update controlplane/vpa.py"
            )
        if extra_args.get(binary):
            container["args"] = [*(container.get("args") or []), *extra_args[binary]]
    return objects


def _openssl(*args: str | Path, cwd: Path) -> None:
    result = subprocess.run(
        ["openssl", *map(str, args)], cwd=cwd, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ControlPlaneError(f"openssl {' '.join(map(str, args))} failed:\n{result.stderr}")


# pkg/admission-controller/gencerts.sh's server.conf.
_SERVER_CONF = f"""[req]
req_extensions = v3_req
distinguished_name = req_distinguished_name
[req_distinguished_name]
[ v3_req ]
basicConstraints = CA:FALSE
keyUsage = nonRepudiation, digitalSignature, keyEncipherment
extendedKeyUsage = clientAuth, serverAuth
subjectAltName = DNS:{WEBHOOK_SERVICE}.{NAMESPACE}.svc
"""


def tls_secret() -> JSON:
    """Secret `vpa-tls-certs` as upstream's `pkg/admission-controller/gencerts.sh` makes it, with the same
    openssl steps: a CA (caKey.pem, caCert.pem) and a serving certificate it signs for the webhook's
    Service (serverKey.pem, serverCert.pem)."""
    ca_name = "vpa_webhook_ca"
    server_name = f"{WEBHOOK_SERVICE}.{NAMESPACE}.svc"
    with tempfile.TemporaryDirectory(prefix="objcount-vpa-certs-") as tmp:
        work = Path(tmp)
        (work / "server.conf").write_text(_SERVER_CONF)
        _openssl("genrsa", "-out", "caKey.pem", "2048", cwd=work)
        _openssl(
            "req", "-x509", "-new", "-nodes", "-key", "caKey.pem", "-days", "100000", "-out", "caCert.pem",
            "-subj", f"/CN={ca_name}", "-addext", f"subjectAltName = DNS:{ca_name}",
            cwd=work,
        )  # fmt: skip
        _openssl("genrsa", "-out", "serverKey.pem", "2048", cwd=work)
        _openssl(
            "req", "-new", "-key", "serverKey.pem", "-out", "server.csr", "-subj", f"/CN={server_name}",
            "-config", "server.conf",
            cwd=work,
        )  # fmt: skip
        _openssl(
            "x509", "-req", "-in", "server.csr", "-CA", "caCert.pem", "-CAkey", "caKey.pem",
            "-CAcreateserial", "-out", "serverCert.pem", "-days", "100000", "-extensions", "v3_req",
            "-extfile", "server.conf",
            cwd=work,
        )  # fmt: skip
        data = {
            name: base64.b64encode((work / name).read_bytes()).decode()
            for name in ("caKey.pem", "caCert.pem", "serverKey.pem", "serverCert.pem")
        }
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "Opaque",
        "metadata": {"name": TLS_SECRET, "namespace": NAMESPACE},
        "data": data,
    }


def install_vpa(
    stack: NodeStack,
    *,
    recommender_args: Sequence[str] = (),
    updater_args: Sequence[str] = (),
    admission_controller_args: Sequence[str] = (),
    vpa_image_list: Sequence[images.Image] | None = None,
    timeout: float = INSTALL_TIMEOUT,
) -> None:
    """Run the VPA on `stack`'s node, the release's manifests with the extra flags given appended to each
    component's args; return once its three Pods run and the API server reaches its admission webhook.

    The images are imported into the node's containerd unless the stack was started with them (or given
    as `vpa_image_list`). The Secret `vpa-tls-certs` is made unless it exists. Raises ControlPlaneError
    after `timeout` seconds, or at once if a component keeps exiting, with the Pods' state, their log
    tails and the webhook's registration."""
    started_with = {i.name for i in stack.images}
    if not all(image_name(b) in started_with for b in BINARIES):
        stack.node.import_images(list(vpa_image_list or vpa_images()))
    objects = release_objects(
        deploy_dir(),
        {
            "recommender": recommender_args,
            "updater": updater_args,
            "admission-controller": admission_controller_args,
        },
    )
    if stack.kubectl("get", "secret", "-n", NAMESPACE, TLS_SECRET, check=False).returncode != 0:
        _apply(stack, [tls_secret()])
    crds = [o for o in objects if o["kind"] == "CustomResourceDefinition"]
    _apply(stack, crds)
    for crd in crds:
        stack.kubectl(
            "wait", "--for=condition=Established", "--timeout=60s", f"crd/{crd['metadata']['name']}"
        )
    _apply(stack, [o for o in objects if o["kind"] != "CustomResourceDefinition"])

    deadline = time.monotonic() + timeout
    while not (all(running(stack, d) for d in DEPLOYMENTS.values()) and webhook_reached(stack)):
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"the VPA's Pods are not all running or its webhook is not reached within {timeout:.0f} s\n"
                + diagnosis(stack)
            )
        # A container that exits at once (a bad flag, a missing permission) only ever gets restarted:
        # say so now rather than at the deadline.
        crashing = [d for d in DEPLOYMENTS.values() if restarts(stack, d) >= CRASHES_BEFORE_FAILING]
        if crashing:
            raise ControlPlaneError(f"the VPA's {', '.join(crashing)} keeps exiting\n{diagnosis(stack)}")
        time.sleep(0.5)


def _apply(stack: NodeStack, objects: Sequence[JSON]) -> None:
    """`kubectl apply --server-side` (the CRDs are too large for a client-side apply's annotation)."""
    document = json.dumps({"apiVersion": "v1", "kind": "List", "items": list(objects)})
    stack.kubectl("apply", "--server-side", "--field-manager=objcount-vpa", "-f", "-", input_text=document)


def running(stack: NodeStack, deployment: str) -> bool:
    """A Pod of the Deployment (labelled `app: <its name>`, as the release's are) runs its container."""
    return any_container_running(stack.live_pods(NAMESPACE, f"app={deployment}"))


def restarts(stack: NodeStack, deployment: str) -> int:
    """How often the kubelet has restarted the Deployment's container (0 before it has a Pod)."""
    return most_restarts(stack.live_pods(NAMESPACE, f"app={deployment}"))


# A VerticalPodAutoscaler the CRD's schema accepts and only the admission-controller's validation rejects
# (validation.go: maxAllowed below minAllowed), and what it answers. It answers with an Invalid Status,
# which the API server passes on as it is (no "admission webhook ... denied the request" prefix): its
# message is the sign that the webhook was reached.
_PROBE = {
    "apiVersion": "autoscaling.k8s.io/v1",
    "kind": "VerticalPodAutoscaler",
    "metadata": {"name": "objcount-webhook-probe", "namespace": NAMESPACE},
    "spec": {
        "targetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "objcount-webhook-probe"},
        "resourcePolicy": {
            "containerPolicies": [
                {"containerName": "*", "minAllowed": {"memory": "2Mi"}, "maxAllowed": {"memory": "1Mi"}}
            ]
        },
    },
}
_PROBE_REJECTED = 'max resource for memory is lower than min of "2Mi"'


def webhook_probe(stack: NodeStack) -> subprocess.CompletedProcess[str]:
    """A server-side dry run of a VerticalPodAutoscaler only the webhook rejects (nothing is stored)."""
    return stack.kubectl("create", "--dry-run=server", "-f", "-", input_text=json.dumps(_PROBE), check=False)


def webhook_reached(stack: NodeStack) -> bool:
    """The webhook is registered and the API server reaches it: it rejects the probe. (Its failurePolicy is
    Ignore: an unreachable webhook lets the probe through.)"""
    if stack.kubectl("get", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION, check=False).returncode:
        return False
    result = webhook_probe(stack)
    return result.returncode != 0 and _PROBE_REJECTED in result.stderr


def diagnosis(stack: NodeStack, deployments: Sequence[str] = tuple(DEPLOYMENTS.values())) -> str:
    """What to read when the VPA does not come up: its Pods' state, each Deployment's log tail, the
    webhook's registration and what the probe of it got."""
    selector = f"app in ({','.join(deployments)})"
    pods = stack.kubectl("get", "pods", "-n", NAMESPACE, "-l", selector, "-o", "wide", check=False)
    parts = [f"VPA Pods:\n{pods.stdout or pods.stderr}"]
    for deployment in deployments:
        logs = stack.kubectl("logs", "-n", NAMESPACE, f"deployment/{deployment}", "--tail=30", check=False)
        parts.append(f"{deployment} log (last 30 lines):\n{logs.stdout or logs.stderr}")
    events = stack.kubectl(
        "get",
        "events",
        "-n",
        NAMESPACE,
        "--field-selector=type=Warning",
        "--sort-by=.lastTimestamp",
        check=False,
    )
    parts.append(f"warning events in {NAMESPACE}:\n{events.stdout[-3000:] or events.stderr}")
    webhook = stack.kubectl(
        "get", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION, "-o", "json", check=False
    )
    if webhook.returncode == 0:
        hooks = json.loads(webhook.stdout).get("webhooks") or []
        registered = [
            {"name": h.get("name"), "service": h.get("clientConfig", {}).get("service")} for h in hooks
        ]
        parts.append(f"{WEBHOOK_CONFIGURATION}: {json.dumps(registered)}")
    else:
        parts.append(f"{WEBHOOK_CONFIGURATION}: {webhook.stderr.strip()}")
    probe = webhook_probe(stack)
    parts.append(f"webhook probe (exit {probe.returncode}): {(probe.stderr or probe.stdout).strip()}")
    return "\n".join(parts)


def add_recommender(
    stack: NodeStack, name: str, args: Sequence[str] = (), timeout: float = INSTALL_TIMEOUT
) -> None:
    """A second recommender beside the default one, after install_vpa: VPA's way to recommend for some
    VerticalPodAutoscalers differently (those naming it in `spec.recommenders`; the default recommender
    leaves them alone). The release's recommender Deployment, copied as `vpa-recommender-<name>` (its Pods
    labelled `app: vpa-recommender-<name>`), `--recommender-name=<name>` and `args` appended to its args.
    Returns once it runs; ControlPlaneError (with its Pods' state and log tail) otherwise."""
    deployment = f"{DEPLOYMENTS['recommender']}-{name}"
    flag = f"--recommender-name={name}"
    extra = [*args] if flag in args else [flag, *args]
    (released,) = [
        o
        for o in release_objects(deploy_dir(), {"recommender": extra})
        if o["kind"] == "Deployment" and o["metadata"]["name"] == DEPLOYMENTS["recommender"]
    ]
    released["metadata"]["name"] = deployment
    released["spec"]["selector"]["matchLabels"]["app"] = deployment
    released["spec"]["template"]["metadata"]["labels"]["app"] = deployment
    _apply(stack, [released])
    deadline = time.monotonic() + timeout
    while not running(stack, deployment):
        if time.monotonic() > deadline:
            raise ControlPlaneError(
                f"{deployment} is not running within {timeout:.0f} s\n" + diagnosis(stack, [deployment])
            )
        if restarts(stack, deployment) >= CRASHES_BEFORE_FAILING:
            raise ControlPlaneError(f"{deployment} keeps exiting\n{diagnosis(stack, [deployment])}")
        time.sleep(0.5)


def uninstall_vpa(stack: NodeStack) -> None:
    """Stop the VPA: its Deployments, add_recommender's too (their Pods go with them), the webhook's
    Service and registration, so that Pods created afterwards are not sent to a webhook that is gone. The
    CRDs, the RBAC and the Secret stay (harmless, and reused by the next install_vpa)."""
    stack.kubectl("delete", "-n", NAMESPACE, "--ignore-not-found", f"service/{WEBHOOK_SERVICE}")
    # The release's three and any add_recommender made (labelled `app: vpa-recommender-<name>`).
    released = [f"deployment/{name}" for name in DEPLOYMENTS.values()]
    stack.kubectl("delete", "-n", NAMESPACE, "--ignore-not-found", *released)
    listed = stack.kubectl("get", "deployments", "-n", NAMESPACE, "-o", "name", check=False).stdout.split()
    added = [d for d in listed if d.startswith(f"deployment.apps/{DEPLOYMENTS['recommender']}-")]
    if added:
        stack.kubectl("delete", "-n", NAMESPACE, "--ignore-not-found", *added)
    stack.kubectl("delete", "--ignore-not-found", "mutatingwebhookconfiguration", WEBHOOK_CONFIGURATION)
