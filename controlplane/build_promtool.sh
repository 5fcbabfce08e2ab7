#!/usr/bin/env bash
# Build (or reuse) promtool, which tests the shipped alert rules (`promtool test rules`, run by
# tests/unit/test_monitoring.py), from the wrapper module in controlplane/promtool/.
#
# Cached outside the repository like the control plane's binaries, keyed by a hash of the wrapper
# module's go.mod and go.sum and of this script. Prints the directory holding `promtool` on its last line
# of standard output; everything else goes to standard error.
#
#   OBJCOUNT_PROMTOOL_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/promtool)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/promtool"
cache_root=${OBJCOUNT_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/promtool}

fail() { echo "build_promtool.sh: $*" >&2; exit 1; }

command -v go >/dev/null 2>&1 || fail "the Go toolchain is required to build promtool (go not found on PATH)"
version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2; exit }' "$mod/go.mod")
[[ -n "$version" ]] || fail "$mod/go.mod pins no github.com/prometheus/prometheus"
source "$here/cache_entry.sh"
pin_hash=$(cat "$mod/go.mod" "$mod/go.sum" "$0" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
out="$cache_root/promtool-$version-$pin_hash"

if [[ -x "$out/promtool" ]]; then
  echo "promtool $version cached in $out" >&2
  echo "$out"
  exit 0
fi

cd "$mod"
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly
tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$(date +%s)
echo "building promtool $version into $out (cold build: about 4 minutes on 2 cores)" >&2
go build -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" \
  -o "$tmp/promtool" github.com/prometheus/prometheus/cmd/promtool || fail "go build of promtool failed (see above)"
publish_cache_entry "$tmp" "$out" "$start"
