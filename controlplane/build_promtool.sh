#!/usr/bin/env bash
# Build (or reuse) promtool, which tests the shipped alert rules (`promtool test rules`, run by
# tests/unit/test_monitoring.py), from the wrapper module in controlplane/promtool/.
#
# Cached outside the repository like the control plane's binaries, keyed by a hash of the wrapper
# module's go.mod and go.sum and of the build scripts. Prints the directory holding `promtool` on its
# last line of standard output; everything else goes to standard error.
#
#   OBJCOUNT_PROMTOOL_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/promtool)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/promtool"
cache_root=${OBJCOUNT_PROMTOOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/promtool}
version=$(awk '$1 == "github.com/prometheus/prometheus" { print $2; exit }' "$mod/go.mod")
[[ -n "$version" ]] || { echo "build_promtool.sh: $mod/go.mod pins no github.com/prometheus/prometheus" >&2; exit 1; }
source "$here/go_tool.sh"
pin_hash=$(cat "$mod/go.mod" "$mod/go.sum" "$0" "$here/go_tool.sh" "$here/cache_entry.sh" | sha256sum | cut -c1-12)
go_tool_entry promtool "$version" "$cache_root/promtool-$version-$pin_hash" "$mod" \
  github.com/prometheus/prometheus/cmd/promtool \
  "-s -w -X github.com/prometheus/common/version.Version=$version" 4
