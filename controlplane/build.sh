#!/usr/bin/env bash
# Build (or reuse) the Kubernetes binaries (kube-apiserver, kube-controller-manager, kube-scheduler,
# kubelet, kube-proxy, kubectl) and etcd of one pinned release: `build.sh [VERSION]`, VERSION a line of
# kubernetes-pins (default: its first, or OBJCOUNT_KUBERNETES_VERSION), built from go/VERSION/go.mod.
#
# The binaries are cached outside the repository, keyed by a hash of the wrapper module's go.mod and
# go.sum, so they are rebuilt only when the pin changes. Prints the directory holding the binaries
# on its last line of standard output; everything else goes to standard error.
#
#   OBJCOUNT_CP_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/controlplane)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pins="$here/kubernetes-pins"
default=$(awk '!/^#/ && NF { print $1; exit }' "$pins")
k8s_version=${1:-${OBJCOUNT_KUBERNETES_VERSION:-$default}}
if ! awk -v v="$k8s_version" '!/^#/ && $1 == v { found = 1 } END { exit !found }' "$pins"; then
  echo "build.sh: Kubernetes $k8s_version is not pinned in $pins" >&2
  exit 2
fi
mod="$here/go/$k8s_version"
cache_root=${OBJCOUNT_CP_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/controlplane}

if ! command -v go >/dev/null 2>&1; then
  echo "build.sh: the Go toolchain is required to build the Kubernetes binaries and etcd (go not found on PATH)" >&2
  exit 1
fi

version_of() { awk -v m="$1" '$1 == m { print $2; exit }' "$mod/go.mod"; }
etcd_version=$(version_of go.etcd.io/etcd/server/v3)
if [[ $(version_of k8s.io/kubernetes) != "$k8s_version" ]]; then
  echo "build.sh: $mod/go.mod does not require k8s.io/kubernetes $k8s_version" >&2
  exit 2
fi
source "$here/cache_entry.sh"
pin_hash=$(cat "$mod/go.mod" "$mod/go.sum" "$0" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
out="$cache_root/k8s-$k8s_version-etcd-$etcd_version-$pin_hash"

components=(kube-apiserver kube-controller-manager kube-scheduler kubelet kube-proxy kubectl)
cached=1
for c in "${components[@]}" etcd; do [[ -x "$out/$c" ]] || cached=0; done
if (( cached )); then
  echo "control plane binaries cached in $out" >&2
  echo "$out"
  exit 0
fi

minor=${k8s_version#v1.}; minor=${minor%%.*}
ldflags="-s -w"
ldflags+=" -X k8s.io/component-base/version.gitVersion=$k8s_version"
ldflags+=" -X k8s.io/component-base/version.gitMajor=1 -X k8s.io/component-base/version.gitMinor=$minor"
ldflags+=" -X k8s.io/component-base/version.gitTreeState=clean"

tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$(date +%s)
echo "building ${components[*]} $k8s_version and etcd $etcd_version into $out (cold build: 10-20 minutes on 2 cores)" >&2
cd "$mod"
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly
# One `go build` for every Kubernetes main: one load of the package graph, the links in parallel.
packages=()
for c in "${components[@]}"; do packages+=("k8s.io/kubernetes/cmd/$c"); done
go_build -ldflags "$ldflags" -o "$tmp/" "${packages[@]}"
for c in "${components[@]}"; do [[ -x "$tmp/$c" ]] || { echo "build.sh: go build left no $c" >&2; exit 1; }; done
go_build -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3
publish_cache_entry "$tmp" "$out" "$start"
