#!/usr/bin/env bash
# Build (or reuse) the real metrics-server (sigs.k8s.io/metrics-server) that the local real node runs as
# a Pod (controlplane/metrics_server.py), from the wrapper module in controlplane/metrics-server/.
#
# The binary is cached outside the repository, keyed by a hash of the wrapper module's go.mod and go.sum
# and of this script, so it is rebuilt only when the pin changes. Prints the directory holding
# `metrics-server` on its last line of standard output; everything else goes to standard error.
#
#   OBJCOUNT_MS_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/metrics-server)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/metrics-server"
cache_root=${OBJCOUNT_MS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/metrics-server}

fail() { echo "build_metrics_server.sh: $*" >&2; exit 1; }

# The release the wrapper module pins, with its tag's commit and date (what upstream's Makefile stamps
# into the binary; the module proxy's record of the tag: `go list -m -json sigs.k8s.io/metrics-server@v0.8.0`).
version=v0.8.0
commit=d66279c6426c6581d9656fe3d42bc52db7c29597
tag_date=2025-07-03T08:11:27Z
pinned=$(awk '$1 == "sigs.k8s.io/metrics-server" { print $2; exit }' "$mod/go.mod")
[[ "$pinned" == "$version" ]] \
  || fail "$mod/go.mod pins sigs.k8s.io/metrics-server ${pinned:-(none)}, this script $version: update both"
source "$here/go_tool.sh"
pin_hash=$(cat "$mod/go.mod" "$mod/go.sum" "$0" "$here/go_tool.sh" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
# The version metrics-server reports (`--version`, /version) lives in client-go's version package, as in
# upstream's Makefile; the tag's date rather than now, so the binary does not depend on when it was built.
pkg=k8s.io/client-go/pkg/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitCommit=$commit -X $pkg.gitTreeState=clean"
ldflags+=" -X $pkg.buildDate=$tag_date"
go_tool_entry metrics-server "$version" "$cache_root/metrics-server-$version-$pin_hash" "$mod" \
  sigs.k8s.io/metrics-server/cmd/metrics-server "$ldflags" 2
