#!/bin/sh
# STAND-IN for git-sync v4.4.2 (PLAYED BY US), the entrypoint of the image the local real node runs in
# Config Sync's reconciler Pods. The git-sync release Config Sync v1.22.0 names cannot be built here (the
# Go module proxy refuses k8s.io/git-sync), so this keeps the part of its contract Config Sync reads,
# with the real `git`:
#   - flags --root, --link, --max-failures, --error-file; env GITSYNC_REPO, GITSYNC_REF (default HEAD),
#     GITSYNC_DEPTH (default 1), GITSYNC_PERIOD (a Go duration, default 10s); others are ignored;
#   - every period, fetch the ref; a new commit is checked out in <root>/.worktrees/<commit> and the link
#     <root>/<link> is swapped to it atomically (a new symlink renamed over the old); older worktrees
#     are removed afterwards. The reconciler takes the commit from the link target's name.
#   - a failed fetch writes <root>/<error-file> (which the reconciler reports), a success removes it;
#     after --max-failures failures in a row it exits non-zero (the kubelet restarts it).
set -u

root=/tmp/git link=HEAD max_failures=0 error_file=""
for arg in "$@"; do
  case $arg in
    --root=*) root=${arg#*=} ;;
    --link=*) link=${arg#*=} ;;
    --max-failures=*) max_failures=${arg#*=} ;;
    --error-file=*) error_file=${arg#*=} ;;
    *) echo "git-sync stand-in: ignoring $arg" >&2 ;;
  esac
done
repo=${GITSYNC_REPO:?GITSYNC_REPO is required}
ref=${GITSYNC_REF:-HEAD}
depth=${GITSYNC_DEPTH:-1}

# A Go duration (1m30s, 15s, 500ms) in seconds, for sleep.
seconds() {
  echo "$1" | awk '{
    s = 0; rest = $0
    while (match(rest, /^[0-9.]+(ns|us|ms|s|m|h)/)) {
      part = substr(rest, 1, RLENGTH); rest = substr(rest, RLENGTH + 1)
      match(part, /[a-z]+$/); unit = substr(part, RSTART); value = substr(part, 1, RSTART - 1) + 0
      s += value * (unit == "h" ? 3600 : unit == "m" ? 60 : unit == "s" ? 1 : unit == "ms" ? 0.001 : 0)
    }
    printf "%g\n", (s > 0 ? s : 10)
  }'
}
period=$(seconds "${GITSYNC_PERIOD:-10s}")

echo "git-sync STAND-IN (played by the objcount test suite) for git-sync v4.4.2: $repo $ref every ${period}s into $root/$link" >&2
trap 'exit 0' TERM INT

mkdir -p "$root/.worktrees" || exit 1
export HOME="$root/.home" GIT_TERMINAL_PROMPT=0
mkdir -p "$HOME"
bare="$root/.git"
[ -d "$bare/objects" ] || git init --quiet --bare "$bare" || exit 1
git() { command git -c safe.directory='*' "$@"; }

report_error() {
  [ -n "$error_file" ] || return 0
  printf '{"Msg":"error syncing repo, will retry","Err":"%s"}\n' "$(echo "$1" | tr '"\n' "' ")" > "$root/$error_file"
}

current=$(basename "$(readlink "$root/$link" 2>/dev/null)" 2>/dev/null)
failures=0
while :; do
  if out=$(git -C "$bare" fetch --quiet --no-tags --force --depth="$depth" "$repo" "$ref" 2>&1) &&
     hash=$(git -C "$bare" rev-parse 'FETCH_HEAD^{commit}' 2>&1); then
    if [ "$hash" != "$current" ]; then
      worktree="$root/.worktrees/$hash"
      rm -rf "$worktree"
      git -C "$bare" worktree prune
      if out=$(git -C "$bare" worktree add --quiet --force --detach "$worktree" "$hash" 2>&1); then
        ln -sfn ".worktrees/$hash" "$root/.$link.new" && mv -T "$root/.$link.new" "$root/$link"
        echo "synced $hash" >&2
        for old in "$root"/.worktrees/*; do
          [ "$old" = "$worktree" ] || rm -rf "$old"
        done
        git -C "$bare" worktree prune
        current=$hash
      else
        failures=$((failures + 1)); report_error "$out"; echo "checkout of $hash failed: $out" >&2
      fi
    fi
    if [ "$hash" = "$current" ]; then
      failures=0
      [ -z "$error_file" ] || rm -f "$root/$error_file"
    fi
  else
    failures=$((failures + 1))
    report_error "$out"
    echo "fetch of $repo $ref failed ($failures in a row): $out" >&2
  fi
  if [ "$max_failures" -ge 0 ] && [ "$failures" -gt "$max_failures" ]; then
    echo "too many failures in a row ($failures), exiting" >&2
    exit 1
  fi
  sleep "$period" & wait $!
done
