#!/usr/bin/env bash
# Releases Simba's modules together, as opentelemetry-go's multimod does.
#
#   scripts/release.sh check      versions.yaml lists every module of go.work,
#                                 every module requires its siblings at the
#                                 set's version, a module with a command has
#                                 no replace line, and (install_check) the
#                                 release installs and builds from its tags
#                                 alone (run by `make lint`)
#   scripts/release.sh tidy       go mod tidy of every module, a command's
#                                 module with its siblings replaced by their
#                                 directories for the while
#   scripts/release.sh bump vX.Y.Z  sets that version in versions.yaml and in
#                                 every require of a sibling (no commit)
#   scripts/release.sh vX.Y.Z     bump, commit, and create one annotated tag
#                                 per released module: deadline/vX.Y.Z,
#                                 session/vX.Y.Z, ... on that commit
#
# Tags are created locally only; the script prints the push command. go.work
# and the libraries' `replace ../<dir>` lines stay: they serve development,
# and Go ignores a dependency's replace lines, so consumers get the tagged
# siblings. A module with a command (cmd/simba) has none: `go install
# …/cmd/simba@vX` refuses a module whose go.mod has replace lines, so it
# builds in development through go.work alone (docs/adr/0197-go-install.md).
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

# commands: the released modules with a main package outside tests.
commands() {
  local path d
  for path in $(released); do
    d=${path#"$PREFIX"}
    if grep -lqs '^package main$' $(git ls-files --cached --others --exclude-standard -- "$d" | grep '\.go$' | grep -v '_test\.go$') /dev/null; then
      echo "$path"
    fi
  done
}

# check_no_replace: no module with a command has a replace or exclude line.
check_no_replace() {
  local path d fail=0
  for path in $(commands); do
    d=${path#"$PREFIX"}
    if grep -Eq '^[[:space:]]*(replace|exclude)([[:space:]]|\()' "$d/go.mod"; then
      echo "release: $d/go.mod has replace or exclude lines: \`go install $path@VERSION\` refuses such a module; drop them (go.work builds the siblings from disk)" >&2
      fail=1
    fi
  done
  [ $fail = 0 ] || exit 1
}

# make_proxy DIR VERSION: a file GOPROXY in DIR serving every released
# module at VERSION with the working tree's content, as the tags of a
# release made now would (one zip per module, its files as git would
# commit them, no nested module).
make_proxy() {
  local dir=$1 version=$2 path d f stage
  stage=$(mktemp -d)
  for path in $(released); do
    d=${path#"$PREFIX"}
    [ -z "$(find "$d" -mindepth 2 -name go.mod -print -quit)" ] || die "$d holds another module; the proxy builder does not split nested modules"
    mkdir -p "$dir/$path/@v" "$stage/$path@$version"
    git ls-files --cached --others --exclude-standard -- "$d" | while read -r f; do
      [ -f "$f" ] && [ ! -L "$f" ] || continue
      mkdir -p "$stage/$path@$version/$(dirname "${f#"$d"/}")"
      cp "$f" "$stage/$path@$version/${f#"$d"/}"
    done
    (cd "$stage" && zip -qrX "$dir/$path/@v/$version.zip" "$path@$version")
    cp "$d/go.mod" "$dir/$path/@v/$version.mod"
    printf '{"Version":"%s","Time":"%s"}\n' "$version" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$dir/$path/@v/$version.info"
    echo "$version" >"$dir/$path/@v/list"
  done
  rm -rf "$stage"
}

# install_check VERSION: what a user does with the release, from its
# modules alone: in an empty GOPATH, outside the workspace, with Simba's
# modules from a file proxy of the working tree at VERSION (make_proxy)
# and third-party ones from this machine's download cache (then the
# configured proxy), `go install …/cmd/simba@VERSION` and a consumer
# importing every public package of every released module must build.
# Set SIMBA_RELEASE_KEEP=1 to keep the directory for a look.
install_check() {
  local version=$1 tmp path d pkgs cache mods
  tmp=$(mktemp -d)
  [ -n "${SIMBA_RELEASE_KEEP:-}" ] || trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' RETURN
  cache=$(go env GOMODCACHE)/cache/download
  pkgs=$(go list -f '{{if ne .Name "main"}}{{.Module.Path}} {{.ImportPath}}{{end}}' "${PREFIX}..." |
    awk 'NR==FNR {rel[$1]=1; next} ($1 in rel) && $2 !~ /\/internal(\/|$)/ {print $2}' <(released) -)
  mods=$(for path in $(released); do echo "$path@$version"; done)
  make_proxy "$tmp/proxy" "$version"
  mkdir -p "$tmp/consumer"
  {
    echo "// A user's program of every public package of Simba $version."
    echo "package main"
    echo
    echo "import ("
    for p in $pkgs; do echo "	_ \"$p\""; done
    echo ")"
    echo
    echo "func main() {}"
  } >"$tmp/consumer/main.go"
  (
    export GOPATH="$tmp/gopath" GOMODCACHE="$tmp/gopath/pkg/mod" GOBIN="$tmp/bin" GOWORK=off GOFLAGS=-mod=mod \
      GOPROXY="file://$tmp/proxy,file://$cache,$(go env GOPROXY)" GOSUMDB=off GONOSUMDB= GOPRIVATE= GOTOOLCHAIN=local
    cd "$tmp/consumer"
    # -trimpath: the build cache then keys nothing on this run's module
    # cache directory, so the next run compiles only what changed.
    go install -trimpath "${PREFIX}cmd/simba@$version" 2>"$tmp/install.log" ||
      { cat "$tmp/install.log" >&2; die "go install ${PREFIX}cmd/simba@$version failed from the release's modules (above)"; }
    "$tmp/bin/simba" --help >/dev/null || die "the installed simba does not run"
    # The fix every offline failure of simbatest prints (ADR 0215).
    go run -trimpath "${PREFIX}simbatest/cmd/simba-image@$version" -print >/dev/null 2>"$tmp/image.log" ||
      { cat "$tmp/image.log" >&2; die "go run ${PREFIX}simbatest/cmd/simba-image@$version failed from the release's modules (above)"; }
    go mod init example.com/consumer >/dev/null 2>&1
    go get $mods 2>"$tmp/get.log" ||
      { cat "$tmp/get.log" >&2; die "go get of every released module at $version failed (above)"; }
    go build -trimpath -o /dev/null . 2>"$tmp/build.log" ||
      { cat "$tmp/build.log" >&2; die "a consumer of every module at $version does not build from the release's modules (above)"; }
    ! grep -q '^replace' go.mod || die "the consumer's go.mod got a replace line"
  )
}

# tidy: go mod tidy in every module; a module without replace lines (a
# command's) gets its siblings replaced by their directories for the while,
# since tidy ignores go.work and the siblings' new code is not released.
tidy() {
  local d path ver dirs
  for d in $(workspace); do
    if grep -Eq '^[[:space:]]*replace([[:space:]]|\()' "$d/go.mod"; then
      (cd "$d" && go mod tidy)
      continue
    fi
    dirs=$(for path in $(released); do echo "$path"; done)
    for path in $dirs; do
      [ "$path" = "$PREFIX$d" ] || go mod edit -replace="$path=$(realpath --relative-to="$d" "${path#"$PREFIX"}")" "$d/go.mod"
    done
    (cd "$d" && go mod tidy) || { for path in $dirs; do go mod edit -dropreplace="$path" "$d/go.mod"; done; exit 1; }
    for path in $dirs; do
      [ "$path" = "$PREFIX$d" ] || go mod edit -dropreplace="$path" "$d/go.mod"
    done
    # the replaced siblings left no sums; the require lines are what counts
  done
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

usage="usage: $0 check | tidy | bump vMAJOR.MINOR.PATCH[-PRE] | vMAJOR.MINOR.PATCH[-PRE]"
cmd=${1:-}
case "$cmd" in
check)
  check_sets
  check_requires "$(set_version)"
  check_no_replace
  install_check "$(set_version)"
  exit 0 ;;
tidy)
  [ $# = 1 ] || die "$usage"
  tidy
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
