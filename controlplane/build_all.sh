#!/usr/bin/env bash
# Build (or reuse) every cached binary the suite runs, OBJCOUNT_BUILD_JOBS builds at a time (default 2):
# the Kubernetes releases of kubernetes-pins and the Config Sync releases of configsync-pins that CI tests,
# client-go's informers, git-sync, the OpenTelemetry Collector, metrics-server, VPA, cert-manager and
# promtool. `make binaries` runs it.
#
# Two at a time so that one build's downloads and links overlap another's compiling; in the cold run of
# 2026-11-29 both cores were busy 98 % of the build phase (BENCHMARKS, "CI time"). The longest builds
# start first, so none runs alone at the end.
# Each build's progress goes to standard error with its name in front; the first failure is reported and
# the script fails once every started build has ended. `build_all.sh --list`: the builds, a line each
# (name, script, arguments), nothing built.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
jobs=${OBJCOUNT_BUILD_JOBS:-2}

builds=()
for version in $(awk '!/^#/ && NF && $3 != "none" { print $1 }' "$here/kubernetes-pins"); do
  builds+=("kubernetes-$version build.sh $version")
done
builds+=("otelcol build_otelcol.sh")
for version in $(awk '!/^#/ && NF && $7 != "none" { print $1 }' "$here/configsync-pins"); do
  builds+=("configsync-$version build_configsync.sh $version")
done
builds+=(
  "metrics-server build_metrics_server.sh"
  "vpa build_vpa.sh"
  "cert-manager build_certmanager.sh"
  "reflectors build_reflectors.sh"
  "git-sync build_gitsync.sh"
  "promtool build_promtool.sh"
)

if [[ ${1:-} == --list ]]; then
  printf '%s\n' "${builds[@]}"
  exit 0
fi

# One build: NAME SCRIPT [ARGS...]; its directory (the script's standard output) is not needed here.
build_one() {
  local name=$1 script=$2
  shift 2
  bash "$here/$script" "$@" 2>&1 >/dev/null | sed -u "s/^/[$name] /" >&2
  local status=${PIPESTATUS[0]}
  ((status == 0)) || echo "[$name] FAILED (exit $status)" >&2
  return "$status"
}
export -f build_one
export here

printf '%s\n' "${builds[@]}" | xargs -P "$jobs" -L 1 bash -c 'build_one "$@"' build_one \
  || { echo "build_all.sh: a build failed (its lines above say which)" >&2; exit 1; }
