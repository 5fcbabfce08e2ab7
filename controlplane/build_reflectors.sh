#!/usr/bin/env bash
# Build (or reuse) `reflectors` (reflectors/main.go: client-go's informers with their defaults, the API-fault
# benchmark's yardstick) inside the extracted source of a pinned Config Sync release, with the client-go
# that release vendors. Our main exists only in the build's scratch copy; nothing of Config Sync's is
# copied into this repository. Cached apart from build_configsync.sh's entries (adding it there would
# rebuild every release), keyed by the pin, this script and the main.
#
#   build_reflectors.sh [VERSION]   (default: the first pin)
#
# Prints the cache entry (holding bin/reflectors) on its last line of standard output. Settings: those of
# build_configsync.sh (OBJCOUNT_CONFIGSYNC_ARCHIVES, OBJCOUNT_CS_CACHE).
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pins="$here/configsync-pins"
fail() { echo "build_reflectors.sh: $*" >&2; exit 1; }

version=${1:-$(awk '!/^#/ && NF { print $1; exit }' "$pins")}
read -r _ commit _ < <(awk -v v="$version" '!/^#/ && $1 == v' "$pins") \
  || fail "Config Sync $version is not pinned in $pins"

cache_root=${OBJCOUNT_CS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/configsync}
source "$here/cache_entry.sh"
source "$here/pinned_source.sh"
pin_hash=$(printf '%s %s\n' "$version" "$commit" \
  | cat - "$0" "$here/cache_entry.sh" "$here/reflectors/main.go" | sha256sum | cut -c1-12)
out="$cache_root/reflectors-$version-$pin_hash"

if [[ -x "$out/bin/reflectors" ]]; then
  echo "reflectors (client-go of Config Sync $version) cached in $out" >&2
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || fail "the Go toolchain is required (go not found on PATH)"

tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
start=$(date +%s)
fetch_pinned_source configsync "$version" "$tmp/src"
[[ -d "$tmp/src/vendor/k8s.io/client-go/tools/cache" ]] || fail "the source vendors no client-go informers"
echo "building reflectors against Config Sync $version's client-go into $out" >&2
cd "$tmp/src"
mkdir -p cmd/objcount-reflectors
cp "$here/reflectors/main.go" cmd/objcount-reflectors/main.go
CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=vendor go_build -ldflags "-s -w" -o "$tmp/bin/reflectors" \
  ./cmd/objcount-reflectors || fail "go build of reflectors failed (see above)"
rm -rf "$tmp/src"
publish_cache_entry "$tmp" "$out" "$start"
