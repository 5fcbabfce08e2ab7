#!/usr/bin/env bash
# Build (or reuse) Config Sync's `reconciler` and `reconciler-manager` from the pinned source.
#
# The pin is the release tag and its commit below. The build is cached outside the repository, keyed by
# the pin and this script, so it is rebuilt only when the pin changes; where the source came from does
# not matter to the key (every source must be the pinned one). The cache entry also keeps the source's
# `manifests/` (upstream CRDs, ClusterRoles, the reconciler-manager's template): they are installed
# unmodified. Prints the cache entry on its last line of standard output; everything else goes to
# standard error.
#
#   OBJCOUNT_CONFIGSYNC_SOURCE  where the pinned source comes from: a .tar.xz/.tar.gz archive of it, or a
#                               directory holding it (default: `git clone` of the pinned tag, which needs
#                               internet access)
#   OBJCOUNT_CONFIGSYNC_SHA256  when set, the archive must have this sha256 (checked before extracting)
#   OBJCOUNT_CS_CACHE           cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/configsync)
set -euo pipefail

version=v1.22.0
commit=b259f899954123f52668e61fe2092fe5d17be833
repository=https://github.com/GoogleContainerTools/kpt-config-sync.git

cache_root=${OBJCOUNT_CS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/configsync}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
source "$here/cache_entry.sh"
pin_hash=$(printf '%s %s\n' "$version" "$commit" | cat - "$0" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
out="$cache_root/configsync-$version-$pin_hash"
source=${OBJCOUNT_CONFIGSYNC_SOURCE:-}

fail() { echo "build_configsync.sh: $*" >&2; exit 1; }

if [[ -x "$out/bin/reconciler" && -x "$out/bin/reconciler-manager" && -d "$out/manifests" ]]; then
  echo "Config Sync $version binaries cached in $out" >&2
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || fail "the Go toolchain is required to build Config Sync (go not found on PATH)"

tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/src" "$tmp/bin"
start=$(date +%s)

if [[ -z "$source" ]]; then
  command -v git >/dev/null 2>&1 || fail "git is required to fetch Config Sync $version (or set OBJCOUNT_CONFIGSYNC_SOURCE)"
  echo "fetching Config Sync $version from $repository" >&2
  git clone --quiet --depth 1 --branch "$version" "$repository" "$tmp/src" \
    || fail "git clone of $repository at $version failed; set OBJCOUNT_CONFIGSYNC_SOURCE to an archive or directory of the source"
  got=$(git -C "$tmp/src" rev-parse HEAD)
  [[ "$got" == "$commit" ]] || fail "tag $version is at $got, not the pinned $commit"
elif [[ -f "$source" ]]; then
  if [[ -n "${OBJCOUNT_CONFIGSYNC_SHA256:-}" ]]; then
    echo "$OBJCOUNT_CONFIGSYNC_SHA256  $source" | sha256sum --check --quiet - >&2 \
      || fail "$source does not have the sha256 $OBJCOUNT_CONFIGSYNC_SHA256"
  fi
  tar -xaf "$source" -C "$tmp/src" || fail "cannot extract $source"
  # Archives hold one top-level directory (configsync-1.22.0/); use it when it is there.
  inner=$(find "$tmp/src" -mindepth 1 -maxdepth 1 -type d)
  if [[ $(echo "$inner" | wc -l) == 1 && -f "$inner/go.mod" ]]; then
    mv "$inner" "$tmp/src.inner" && rm -rf "$tmp/src" && mv "$tmp/src.inner" "$tmp/src"
  fi
elif [[ -d "$source" ]]; then
  cp -a "$source/." "$tmp/src/"
else
  fail "OBJCOUNT_CONFIGSYNC_SOURCE=$source is neither a file nor a directory"
fi
grep -q '^module kpt.dev/configsync$' "$tmp/src/go.mod" 2>/dev/null \
  || fail "the source has no go.mod of module kpt.dev/configsync (is it Config Sync's source?)"
[[ -d "$tmp/src/vendor" ]] || fail "the source has no vendor/ directory: it cannot be built offline"

echo "building Config Sync $version reconciler and reconciler-manager into $out (cold build: 3-5 minutes on 2 cores)" >&2
cd "$tmp/src"
export CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=vendor
for binary in reconciler reconciler-manager; do
  go build -trimpath -ldflags "-s -w" -o "$tmp/bin/$binary" "./cmd/$binary" \
    || fail "go build of $binary failed (see above)"
done
cp -a "$tmp/src/manifests" "$tmp/manifests"
printf 'version %s\ncommit %s\n' "$version" "$commit" >"$tmp/PIN"
rm -rf "$tmp/src"
publish_cache_entry "$tmp" "$out" "$start"
