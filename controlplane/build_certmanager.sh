#!/usr/bin/env bash
# Build (or reuse) cert-manager (github.com/cert-manager/cert-manager v1.21.2) as the local real node runs
# it as Pods (controlplane/certmanager.py): `controller` and `cainjector`, from the wrapper module in
# controlplane/certmanager/. cert-manager's own `main` packages live in modules of their own (cmd/controller,
# cmd/cainjector, ...) that the Go module proxy does not serve, so the two mains are the wrapper module's:
# minimal wiring of cert-manager's controllers and CA injector, taken from its main module as released.
#
# The binaries are cached outside the repository, in one entry keyed by a hash of the wrapper module's
# go.mod, go.sum and two main.go files and of this script (and the scripts it sources), so they are
# rebuilt only when one of them changes. Prints the directory holding the two on its last line of standard
# output; everything else goes to standard error.
#
#   OBJCOUNT_CERTMANAGER_CACHE   cache root
#                                (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/certmanager)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/certmanager"
cache_root=${OBJCOUNT_CERTMANAGER_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/certmanager}

fail() { echo "build_certmanager.sh: $*" >&2; exit 1; }

# The release the wrapper module pins. Upstream stamps its version into pkg/util.AppVersion (GOLDFLAGS in
# make/00_mod.mk: `-w -s -X .../pkg/util.AppVersion=$(VERSION)`), which cert-manager puts in its user agent
# (and so in its field managers' names' suffix and the API server's audit log): stamped the same here.
version=v1.21.2
module=github.com/cert-manager/cert-manager
binaries=(controller cainjector)
pinned=$(awk -v m="$module" '$1 == m { print $2; exit }' "$mod/go.mod")
[[ "$pinned" == "$version" ]] \
  || fail "$mod/go.mod pins $module ${pinned:-(none)}, this script $version: update both"
# One `go build` of both packages into one entry, as build_vpa.sh does; publish_cache_entry comes from
# cache_entry.sh, sourced by go_tool.sh.
source "$here/go_tool.sh"
pin_hash=$(cat "$mod/go.mod" "$mod/go.sum" "$mod/controller/main.go" "$mod/cainjector/main.go" "$0" \
  "$here/go_tool.sh" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
out="$cache_root/certmanager-$version-$pin_hash"

if [[ -x "$out/${binaries[0]}" && -x "$out/${binaries[1]}" ]]; then
  echo "cert-manager $version cached in $out" >&2
  echo "$out"
  exit 0
fi
command -v go >/dev/null 2>&1 || fail "building cert-manager needs the Go toolchain (go not found on PATH)"
tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp"
start=$(date +%s)
packages=()
for binary in "${binaries[@]}"; do packages+=("./$binary"); done
echo "building cert-manager $version (${binaries[*]}) into $out (cold build: about 2.5 minutes on 2 cores)" >&2
# `-o DIR/` with several main packages writes each as DIR/<last element of its import path>.
(cd "$mod" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
  go_build -ldflags "-s -w -X $module/pkg/util.AppVersion=$version" -o "$tmp/" "${packages[@]}") \
  || fail "go build of cert-manager failed (see above)"
for binary in "${binaries[@]}"; do
  [[ -x "$tmp/$binary" ]] || fail "go build left no $binary in $tmp"
done
publish_cache_entry "$tmp" "$out" "$start"
