# Sourced by the build scripts of sources pinned by commit and content (Config Sync, git-sync). Not part of
# their cache keys: the source is the pinned one whichever way it came. Needs the caller's `fail`.

# fetch_pinned_source KIND VERSION DEST: the pinned source of KIND (configsync, git-sync) in DEST, from its
# archive (OBJCOUNT_CONFIGSYNC_ARCHIVES / OBJCOUNT_GITSYNC_ARCHIVES, else ../shared beside the repository),
# else from its public repository at the pinned commit, each way checked against the pinned sums
# (controlplane/sources.py); where neither can be had, it says which archive to provide and where.
fetch_pinned_source() {
  python3 "$(dirname "${BASH_SOURCE[0]}")/sources.py" source "$1" "$2" "$3" || fail "no source of $1 $2 (see above)"
}
