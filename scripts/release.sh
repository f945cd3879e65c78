#!/usr/bin/env bash
# Releases Simba's modules together, as opentelemetry-go's multimod does.
#
#   scripts/release.sh check      versions.yaml lists every module of go.work,
#                                 and every module requires its siblings at
#                                 the set's version (run by `make lint`)
#   scripts/release.sh bump vX.Y.Z  sets that version in versions.yaml and in
#                                 every require of a sibling (no commit)
#   scripts/release.sh vX.Y.Z     bump, commit, and create one annotated tag
#                                 per released module: deadline/vX.Y.Z,
#                                 session/vX.Y.Z, ... on that commit
#
# Tags are created locally only; the script prints the push command. go.work
# and the `replace ../<dir>` lines stay: they serve development, and Go
# ignores a dependency's replace lines, so consumers get the tagged siblings.
set -euo pipefail
cd "$(dirname "$0")/.."
PREFIX=github.com/simba-go/simba/
VERSIONS=versions.yaml

die() { echo "release: $*" >&2; exit 1; }

# set_version: the version of the (single) module set in versions.yaml.
set_version() { awk '/^  [a-z]+:$/{s=1} s && /^    version:/{print $2; exit}' "$VERSIONS"; }
# released, excluded: the module paths listed under module-sets.*.modules
# and under excluded-modules.
released() { awk '/^    modules:/{on=1; next} /^[^ ]/{on=0} on && /^      - /{print $2}' "$VERSIONS"; }
excluded() { awk '/^excluded-modules:/{on=1; next} /^[^ #]/{on=0} on && /^  - /{print $2}' "$VERSIONS"; }
# workspace: the module directories of go.work.
workspace() { awk '/^use \(/{on=1; next} on && /^\)/{on=0} on {sub(/^\.\//, "", $1); print $1} /^use \.\//{sub(/^\.\//, "", $2); print $2}' go.work; }
# sibling_requires GOMOD: "path version" for each require of a sibling module.
sibling_requires() {
  awk -v p="$PREFIX" '
    /^require \($/ {blk=1; next}
    blk && /^\)/ {blk=0; next}
    blk && index($1, p) == 1 {print $1, $2}
    /^require / && !/\($/ && index($2, p) == 1 {print $2, $3}
  ' "$1"
}

# check_sets: versions.yaml and go.work name the same modules.
check_sets() {
  local d path fail=0
  [ -n "$(set_version)" ] || die "$VERSIONS has no module-sets.<name>.version"
  for d in $(workspace); do
    path=$(awk '/^module /{print $2; exit}' "$d/go.mod")
    [ "$path" = "$PREFIX$d" ] || { echo "release: $d/go.mod declares $path, want $PREFIX$d" >&2; fail=1; }
    if ! released | grep -Fqx "$path" && ! excluded | grep -Fqx "$path"; then
      echo "release: module $path (in go.work) is missing from $VERSIONS: add it to module-sets.simba.modules, or to excluded-modules if users never import it" >&2
      fail=1
    fi
  done
  for path in $(released) $(excluded); do
    [ -f "${path#"$PREFIX"}/go.mod" ] || { echo "release: $VERSIONS lists $path but ${path#"$PREFIX"}/go.mod does not exist" >&2; fail=1; }
    workspace | grep -Fqx "${path#"$PREFIX"}" || { echo "release: $VERSIONS lists $path but go.work does not use ./${path#"$PREFIX"}" >&2; fail=1; }
  done
  [ $fail = 0 ] || exit 1
}

# check_requires VERSION: every sibling require is at VERSION and names a
# released module (an excluded module cannot be required: it has no tags).
check_requires() {
  local want=$1 d path ver fail=0
  for d in $(workspace); do
    while read -r path ver; do
      [ -n "$path" ] || continue
      released | grep -Fqx "$path" || { echo "release: $d/go.mod requires $path, which is not released (not in $VERSIONS module-sets)" >&2; fail=1; }
      [ "$ver" = "$want" ] || { echo "release: $d/go.mod requires $path $ver, want $want (fix: scripts/release.sh bump $want)" >&2; fail=1; }
    done < <(sibling_requires "$d/go.mod")
  done
  [ $fail = 0 ] || exit 1
}

# bump VERSION: every sibling require and versions.yaml at VERSION.
bump() {
  local version=$1 d path ver
  for d in $(workspace); do
    while read -r path ver; do
      [ -n "$path" ] && go mod edit -require="$path@$version" "$d/go.mod"
    done < <(sibling_requires "$d/go.mod")
  done
  sed -i "s/^    version: .*/    version: $version/" "$VERSIONS"
  check_requires "$version"
}

# valid_version VERSION: fails unless VERSION is one this script can release.
valid_version() {
  [[ $1 =~ ^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z.-]+)?$ ]] ||
    die "$1 is not a semantic version vMAJOR.MINOR.PATCH[-PRERELEASE]"
  # v2 and later need a /vN suffix on every module path (Go's import
  # compatibility rule); that is a migration, not a release.
  [ "${BASH_REMATCH[1]}" -le 1 ] || die "$1: major versions above v1 need /v${BASH_REMATCH[1]} module paths first"
}

usage="usage: $0 check | bump vMAJOR.MINOR.PATCH[-PRE] | vMAJOR.MINOR.PATCH[-PRE]"
cmd=${1:-}
case "$cmd" in
check)
  check_sets
  check_requires "$(set_version)"
  exit 0 ;;
bump)
  [ $# = 2 ] || die "$usage"
  valid_version "$2"
  check_sets
  bump "$2"
  exit 0 ;;
v[0-9]*) [ $# = 1 ] || die "$usage" ;;
*) die "$usage" ;;
esac

version=$cmd
valid_version "$version"
[ -z "$(git status --porcelain --untracked-files=no)" ] || die "the work tree has uncommitted changes; commit or stash them first"
check_sets
for path in $(released); do
  tag=${path#"$PREFIX"}/$version
  ! git rev-parse -q --verify "refs/tags/$tag" >/dev/null || die "tag $tag already exists"
done

old=$(set_version)
bump "$version"
git add "$VERSIONS" $(for d in $(workspace); do echo "$d/go.mod"; done)
if git diff --cached --quiet; then
  echo "release: requires already at $version; tagging HEAD"
else
  git commit -q -m "release $version (was $old): every sibling require at $version"
fi
tags=()
for path in $(released); do
  tag=${path#"$PREFIX"}/$version
  git tag -a "$tag" -m "${path#"$PREFIX"} $version"
  tags+=("$tag")
done
echo "release: tagged $(git rev-parse --short HEAD) as ${tags[*]}"
echo "release: publish with: git push origin HEAD ${tags[*]}"
