# Sourced by the build scripts of sources pinned by tag and archive (Config Sync, git-sync); part of each
# script's cache key, like the script itself. Needs the caller's `fail`.

# fetch_pinned_source NAME VERSION COMMIT REPOSITORY ARCHIVES ARCHIVE SHA256 DEST VARIABLE: the source in
# DEST, from ARCHIVES/ARCHIVE (checked against SHA256; its one top-level directory dropped), or, with
# ARCHIVES empty, a `git clone` of the tag VERSION, checked to be at COMMIT (needs internet access).
# VARIABLE names the setting that gives ARCHIVES, for the error messages.
fetch_pinned_source() {
  local name=$1 version=$2 commit=$3 repository=$4 archives=$5 archive=$6 sha256=$7 dest=$8 variable=$9
  if [[ -z "$archives" ]]; then
    command -v git >/dev/null 2>&1 || fail "git is required to fetch $name $version (or set $variable)"
    echo "fetching $name $version from $repository" >&2
    git clone --quiet --depth 1 --branch "$version" "$repository" "$dest" \
      || fail "git clone of $repository at $version failed; set $variable to a directory holding $archive"
    local got
    got=$(git -C "$dest" rev-parse HEAD)
    [[ "$got" == "$commit" ]] || fail "tag $version is at $got, not the pinned $commit"
    return 0
  fi
  local source="$archives/$archive"
  [[ -f "$source" ]] || fail "$source not found ($variable=$archives)"
  echo "$sha256  $source" | sha256sum --check --quiet - >&2 || fail "$source does not have the pinned sha256 $sha256"
  mkdir -p "$dest"
  tar -xaf "$source" -C "$dest" --strip-components=1 || fail "cannot extract $source"
}
