#!/usr/bin/env bash
# Build (or reuse) the real Vertical Pod Autoscaler (k8s.io/autoscaler/vertical-pod-autoscaler) that the
# local real node runs as Pods (controlplane/vpa.py): its three binaries `recommender`, `updater` and
# `admission-controller`, from the wrapper module in controlplane/vpa/.
#
# The binaries are cached outside the repository, in one entry keyed by a hash of the wrapper module's
# go.mod and go.sum and of this script (and the scripts it sources), so they are rebuilt only when the pin
# changes. Prints the directory holding the three on its last line of standard output; everything else goes
# to standard error.
#
#   OBJCOUNT_VPA_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/vpa)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/vpa"
cache_root=${OBJCOUNT_VPA_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/vpa}

fail() { echo "build_vpa.sh: $*" >&2; exit 1; }

# The release the wrapper module pins. Upstream's release images are built with `-ldflags=-s` only
# (BUILD_LD_FLAGS in pkg/*/Makefile; cloudbuild.yaml does not stamp common.gitCommit), so the binaries
# report the version compiled into common/version.go (`1.8.1`) as the released ones do.
version=v1.8.1
module=k8s.io/autoscaler/vertical-pod-autoscaler
binaries=(recommender updater admission-controller)
pinned=$(awk -v m="$module" '$1 == m { print $2; exit }' "$mod/go.mod")
[[ "$pinned" == "$version" ]] \
  || fail "$mod/go.mod pins $module ${pinned:-(none)}, this script $version: update both"
# go_tool.sh's go_tool_entry builds one package per entry; VPA is three binaries of one module, built here
# by one `go build` into one entry (what go_tool_entry does, for several packages). Its publish_cache_entry
# comes from cache_entry.sh, sourced by go_tool.sh.
source "$here/go_tool.sh"
pin_hash=$(cat "$mod/go.mod" "$mod/go.sum" "$0" "$here/go_tool.sh" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
out="$cache_root/vpa-$version-$pin_hash"

if [[ -x "$out/${binaries[0]}" && -x "$out/${binaries[1]}" && -x "$out/${binaries[2]}" ]]; then
  echo "vpa $version cached in $out" >&2
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || fail "building vpa needs the Go toolchain (go not found on PATH)"
tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$(date +%s)
packages=()
for binary in "${binaries[@]}"; do packages+=("$module/pkg/$binary"); done
echo "building vpa $version (${binaries[*]}) into $out (cold build: about 3 minutes on 2 cores)" >&2
# `-o DIR/` with several main packages writes each as DIR/<last element of its import path>.
(cd "$mod" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
  go_build -ldflags "-s" -o "$tmp/" "${packages[@]}") \
  || fail "go build of vpa failed (see above)"
for binary in "${binaries[@]}"; do
  [[ -x "$tmp/$binary" ]] || fail "go build left no $binary in $tmp"
done
publish_cache_entry "$tmp" "$out" "$start"
