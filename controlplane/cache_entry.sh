# Sourced by the build scripts: publish a finished build as a cache entry.
# Part of each script's cache key, like the script itself.

# publish_cache_entry TMP OUT START: move the finished build TMP to OUT atomically (a concurrent or
# interrupted build never leaves a half-written entry), report the time since START, print OUT.
publish_cache_entry() {
  local tmp=$1 out=$2 start=$3
  mkdir -p "$(dirname "$out")"
  rm -rf "$out"
  mv "$tmp" "$out"
  trap - EXIT
  echo "built in $(( $(date +%s) - start )) s" >&2
  echo "$out"
}

# go_build ARGS...: `go build` as every build here runs it: paths trimmed, and no DWARF compiled (each
# build strips it at link anyway, `-ldflags -s -w`, and a binary never loads it: 7 % less CPU on a cold
# build of metrics-server, BENCHMARKS.md "CI time").
go_build() {
  go build -trimpath -gcflags=all=-dwarf=false "$@"
}
