# Sourced by the build scripts of the tools built from a Go wrapper module (metrics-server):
# reuse the cache entry, or build the tool into it. Part of each such script's cache key.
source "$(dirname "${BASH_SOURCE[0]}")/cache_entry.sh"

# go_tool_entry NAME VERSION OUT MODULE PACKAGE LDFLAGS MINUTES: print OUT if it holds NAME; else build
# PACKAGE in the wrapper module directory MODULE into OUT (atomically: publish_cache_entry) and print OUT.
go_tool_entry() {
  local name=$1 version=$2 out=$3 module=$4 package=$5 ldflags=$6 minutes=$7 start
  if [[ -x "$out/$name" ]]; then
    echo "$name $version cached in $out" >&2
    echo "$out"
    return 0
  fi
  command -v go >/dev/null 2>&1 || { echo "building $name needs the Go toolchain (go not found on PATH)" >&2; return 1; }
  tmp="$out.partial.$$"
  trap 'rm -rf "$tmp"' EXIT
  mkdir -p "$tmp"
  start=$(date +%s)
  echo "building $name $version into $out (cold build: about $minutes minutes on 2 cores)" >&2
  (cd "$module" && CGO_ENABLED=0 GOWORK=off GOFLAGS=-mod=readonly \
    go_build -ldflags "$ldflags" -o "$tmp/$name" "$package") \
    || { echo "go build of $name failed (see above)" >&2; return 1; }
  publish_cache_entry "$tmp" "$out" "$start"
}
