"""`make run`: a local control plane with a sample RootSync, its inventory and its reconciler."""

from __future__ import annotations

import signal
import threading
from types import FrameType

from controlplane import LocalControlPlane, build_binaries
from controlplane.seed import ensure_namespace, install_crds, reconciler_deployment, resourcegroup, rsync
from inventory import kubeapi
from inventory.ids import ROOT_SYNC_NAMESPACE, RSyncKey

SAMPLE = RSyncKey("RootSync", ROOT_SYNC_NAMESPACE, "root-sync")


def seed_sample(api: kubeapi.KubeApi, objects: int = 100) -> None:
    install_crds(api)
    ensure_namespace(api, ROOT_SYNC_NAMESPACE)
    api.create(kubeapi.ROOTSYNC, SAMPLE.namespace, rsync(SAMPLE))
    api.create(kubeapi.RESOURCEGROUP, SAMPLE.namespace, resourcegroup(SAMPLE, objects))
    api.create(kubeapi.DEPLOYMENT, ROOT_SYNC_NAMESPACE, reconciler_deployment(SAMPLE))


def run_demo() -> int:
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    plane = LocalControlPlane(build_binaries())
    try:
        plane.start()
        print(f"local control plane ready in {plane.startup_seconds:.1f} s at {plane.server}")
        api = kubeapi.KubeApi.connect(str(plane.kubeconfig))
        seed_sample(api)
        print(f"installed the CRDs and {SAMPLE} with its ResourceGroup and reconciler Deployment")
        print(f"\n  export KUBECONFIG={plane.kubeconfig}\n  kubectl get rootsyncs,resourcegroups -A\n")
        print("Ctrl-C stops the control plane.")
        stop.wait()
    finally:
        plane.cleanup()
    return 0
