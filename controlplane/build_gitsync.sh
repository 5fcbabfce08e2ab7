#!/usr/bin/env bash
# Build (or reuse) git-sync, the release pinned in `gitsync-pin` (v4.4.2: the one both pinned Config Sync
# releases run), from its source with its vendor/ directory: the Go module proxy refuses k8s.io/git-sync.
#
# Cached outside the repository, keyed by the pin and this script. Prints the directory holding
# `git-sync` on its last line of standard output; everything else goes to standard error.
#
#   OBJCOUNT_GITSYNC_ARCHIVES  a directory holding the pinned source archive (checked against its pinned
#                              sha256 before it is extracted); default: ../shared/gitsync beside the
#                              repository where it is, else a fetch of the pinned commit from the
#                              repository (controlplane/sources.py)
#   OBJCOUNT_GITSYNC_CACHE     cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/git-sync)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
fail() { echo "build_gitsync.sh: $*" >&2; exit 1; }
read -r version commit module _ < <(awk '!/^#/ && NF' "$here/gitsync-pin")
cache_root=${OBJCOUNT_GITSYNC_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/git-sync}
source "$here/cache_entry.sh"
source "$here/pinned_source.sh"
pin_hash=$(cat "$here/gitsync-pin" "$0" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
out="$cache_root/git-sync-$version-$pin_hash"

if [[ -x "$out/git-sync" ]]; then
  echo "git-sync $version cached in $out" >&2
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || fail "the Go toolchain is required to build git-sync (go not found on PATH)"
tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
start=$(date +%s)

fetch_pinned_source git-sync "$version" "$tmp/src"
grep -qx "module $module" "$tmp/src/go.mod" 2>/dev/null \
  || fail "the source has no go.mod of module $module (is it git-sync $version's source?)"
[[ -d "$tmp/src/vendor" ]] || fail "the source has no vendor/ directory: it cannot be built offline"

echo "building git-sync $version into $out (cold build: about 30 s on 2 cores)" >&2
# As upstream's build stamps it: the version git-sync reports (`--version`, its first log line).
(cd "$tmp/src" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=vendor GOPROXY=off \
  go_build -ldflags "-s -w -X $module/pkg/version.VERSION=$version" -o "$tmp/git-sync" .) \
  || fail "go build of git-sync failed (see above)"
rm -rf "$tmp/src"
publish_cache_entry "$tmp" "$out" "$start"
