"""The local control plane: a real etcd and kube-apiserver built from pinned Go modules."""

from controlplane.errors import ControlPlaneError
from controlplane.kubernetes_build import build_binaries
from controlplane.launcher import LocalControlPlane, running_control_plane

__all__ = ["ControlPlaneError", "LocalControlPlane", "build_binaries", "running_control_plane"]
