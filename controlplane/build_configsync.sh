#!/usr/bin/env bash
# Build (or reuse) Config Sync's `reconciler` and `reconciler-manager` of one pinned release, and beside
# them `csreader`, the differential tests' oracle: our small main (csreader/) compiled inside the
# extracted source against the release's own reader and file listing (nothing of Config Sync's is copied
# into this repository; the main and its one-function export exist only in the build's scratch copy).
#
#   build_configsync.sh [VERSION]   (default: $OBJCOUNT_CONFIGSYNC_VERSION, else the first pin)
#
# The pins (release tag, commit, Go module, repository, source archive, its sha256 and its content's) are in
# `configsync-pins` beside this script. Each version's build is cached apart, outside the repository,
# keyed by its pin and this script, so it is rebuilt only when the pin changes. The cache entry also
# keeps the source's `manifests/` (upstream CRDs, ClusterRoles, the reconciler-manager's template): they
# are installed unmodified. Prints the cache entry on its last line of standard output; everything else
# goes to standard error.
#
#   OBJCOUNT_CONFIGSYNC_ARCHIVES  a directory holding the pinned source archives (named as in the pins;
#                                 each is checked against its pinned sha256 before it is extracted);
#                                 default: ../shared/configsync beside the repository where it is, else a
#                                 fetch of the pinned commit from the repository (controlplane/sources.py)
#   OBJCOUNT_CS_CACHE             cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/configsync)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
pins="$here/configsync-pins"
fail() { echo "build_configsync.sh: $*" >&2; exit 1; }

version=${1:-${OBJCOUNT_CONFIGSYNC_VERSION:-$(awk '!/^#/ && NF { print $1; exit }' "$pins")}}
read -r _ commit module _ < <(awk -v v="$version" '!/^#/ && $1 == v' "$pins") \
  || fail "Config Sync $version is not pinned in $pins (pinned: $(awk '!/^#/ && NF { printf "%s ", $1 }' "$pins"))"

cache_root=${OBJCOUNT_CS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/configsync}
source "$here/cache_entry.sh"
source "$here/pinned_source.sh"
pin_hash=$(printf '%s %s\n' "$version" "$commit" \
  | cat - "$0" "$here/cache_entry.sh" "$here/csreader/main.go" "$here/csreader/listfiles.go" | sha256sum | cut -c1-12)
out="$cache_root/configsync-$version-$pin_hash"

if [[ -x "$out/bin/reconciler" && -x "$out/bin/reconciler-manager" && -x "$out/bin/csreader" && -d "$out/manifests" ]]; then
  echo "Config Sync $version binaries cached in $out" >&2
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || fail "the Go toolchain is required to build Config Sync (go not found on PATH)"

tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/bin"
start=$(date +%s)

fetch_pinned_source configsync "$version" "$tmp/src"
grep -qx "module $module" "$tmp/src/go.mod" 2>/dev/null \
  || fail "the source has no go.mod of module $module (is it Config Sync $version's source?)"
[[ -d "$tmp/src/vendor" ]] || fail "the source has no vendor/ directory: it cannot be built offline"

echo "building Config Sync $version reconciler and reconciler-manager into $out (cold build: 3-5 minutes on 2 cores)" >&2
cd "$tmp/src"
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=vendor
# One `go build` for both mains: one load of the package graph, the two links in parallel.
go_build -ldflags "-s -w" -o "$tmp/bin/" ./cmd/reconciler ./cmd/reconciler-manager \
  || fail "go build of reconciler and reconciler-manager failed (see above)"
# The oracle adds a file to pkg/parse, so it is built after them: the reconciler stays as released.
mkdir -p cmd/objcount-csreader
sed "s#CONFIGSYNC_MODULE#$module#" "$here/csreader/main.go" >cmd/objcount-csreader/main.go
sed "s#CONFIGSYNC_MODULE#$module#" "$here/csreader/listfiles.go" >pkg/parse/zz_objcount_csreader.go
go_build -ldflags "-s -w" -o "$tmp/bin/csreader" ./cmd/objcount-csreader \
  || fail "go build of the reader oracle (csreader) failed (see above)"
cp -a "$tmp/src/manifests" "$tmp/manifests"
printf 'version %s\ncommit %s\nmodule %s\n' "$version" "$commit" "$module" >"$tmp/PIN"
rm -rf "$tmp/src"
publish_cache_entry "$tmp" "$out" "$start"
