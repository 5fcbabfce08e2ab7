#!/usr/bin/env bash
# promtool, which tests the shipped alert rules (`promtool test rules`, run by
# tests/unit/test_monitoring.py): the one Debian 12 ships in its `prometheus` package, at a pinned version.
# The package is downloaded, not installed (no Prometheus service is put on the machine), and its promtool
# kept in a cache entry outside the repository. (Built from its Go module it took 174 s of a cold CI; the
# package takes seconds.) Prints the directory holding `promtool` on its last line of standard output;
# everything else goes to standard error.
#
#   OBJCOUNT_PROMTOOL_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/promtool)
set -euo pipefail

package=prometheus
version=2.42.0+ds-5+deb12u1
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
cache_root=${OBJCOUNT_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/promtool}
source "$here/cache_entry.sh"
pin_hash=$(printf '%s=%s\n' "$package" "$version" | cat - "$0" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
out="$cache_root/promtool-$version-$pin_hash"
fail() { echo "build_promtool.sh: $*" >&2; exit 1; }

if [[ -x "$out/promtool" ]]; then
  echo "promtool $version cached in $out" >&2
  echo "$out"
  exit 0
fi
command -v apt-get >/dev/null || fail "apt-get not found (Debian 12 is required for its prometheus package)"
tmp="$out.partial.$$"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/deb"
start=$(date +%s)
download() { (cd "$tmp/deb" && apt-get download -qq "$package=$version") >&2; }
if ! download; then
  apt-get update -qq >&2 || fail "apt-get update failed"
  download || fail "apt-get download $package=$version failed"
fi
dpkg-deb -x "$tmp"/deb/*.deb "$tmp/root" || fail "cannot unpack $package=$version"
install -m 0755 "$tmp/root/usr/bin/promtool" "$tmp/promtool"
rm -rf "$tmp/deb" "$tmp/root"
"$tmp/promtool" --version >&2 || fail "the promtool of $package=$version does not run"
publish_cache_entry "$tmp" "$out" "$start"
