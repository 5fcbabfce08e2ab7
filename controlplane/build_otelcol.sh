#!/usr/bin/env bash
# Build (or reuse) the real OpenTelemetry Collector that plays Config Sync's otel-agent and otel-collector
# containers (in place of controlplane/otel-standin.c), from the wrapper module in controlplane/otelcol/.
#
# The binary is cached outside the repository, keyed by a hash of the wrapper module's go.mod, go.sum and
# main.go and of this script, so it is rebuilt only when the pin or the components change. Prints the
# directory holding `otelcontribcol` on its last line of standard output; everything else goes to standard error.
#
#   OBJCOUNT_OTELCOL_CACHE   cache root (default: ${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/otelcol)
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mod="$here/otelcol"
cache_root=${OBJCOUNT_OTELCOL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/objcount-autoscaler/otelcol}

fail() { echo "build_otelcol.sh: $*" >&2; exit 1; }

# The release the wrapper module pins: Config Sync v1.24.3 runs otelcontribcol:v0.118.0-gke.10. The
# version the collector reports (--version) is main.go's BuildInfo, so no -X flags.
version=v0.118.0
pinned=$(awk '$1 == "go.opentelemetry.io/collector/otelcol" { print $2; exit }' "$mod/go.mod")
[[ "$pinned" == "$version" ]] \
  || fail "$mod/go.mod pins go.opentelemetry.io/collector/otelcol ${pinned:-(none)}, this script $version: update both"
source "$here/go_tool.sh"
# main.go too: it, not the pin, chooses the components.
pin_hash=$(cat "$mod/go.mod" "$mod/go.sum" "$mod/main.go" "$0" "$here/go_tool.sh" "$here/cache_entry.sh" \
  | sha256sum | cut -c1-12)
go_tool_entry otelcontribcol "$version" "$cache_root/otelcontribcol-$version-$pin_hash" "$mod" . "-s -w" 3
