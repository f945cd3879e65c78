#!/usr/bin/env bash
# Builds docs/benchmarks.md and docs/spec-coverage.md from the per-module
# fragments in docs/bench/ and docs/spec-coverage/ (each module's owner
# edits its own fragment; `make docs` gathers them).
set -euo pipefail
cd "$(dirname "$0")/.."
{
  cat <<'HEAD'
# Benchmarks

Measured with `go test -bench` on the project's machine kind (2 cores, 24 GiB), each
Simba operation side by side with the raw backend operation in the same run, so that the
ratio means something on a noisy machine. Each section gives the exact command that
produced it; `make bench` runs them all. Where a goal of the issues is missed, the section
says by how much and why.
HEAD
  [ -f docs/bench/_summary.md ] && { echo; cat docs/bench/_summary.md; }
  for f in $(ls docs/bench/*.md | grep -v _summary.md); do
    echo
    sed 's/^# /## /; s/^## \(.\)/### \1/' "$f" | sed '1s/^### /## /'
  done
} > docs/benchmarks.md
{
  cat <<'HEAD'
# Spec coverage

Every promise of [`how-simba-works`](how-simba-works.md) (and of the issues) mapped to the tests that check it.
Each module keeps its own table in `docs/spec-coverage/<module>.md`; `make docs` gathers
them here.
HEAD
  for f in docs/spec-coverage/core.md docs/spec-coverage/backendtest.md $(ls docs/spec-coverage/*.md | grep -v -e core.md -e backendtest.md); do
    echo
    sed 's/^# /## /' "$f"
  done
} > docs/spec-coverage.md
echo "docs: wrote docs/benchmarks.md and docs/spec-coverage.md"
