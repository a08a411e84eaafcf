#!/usr/bin/env bash
# Copies the inputs the Go fuzzer found interesting (kept in the build cache)
# into each package's testdata/fuzz/<Target>/, so the corpus is committed
# and every `go test` run replays it.
#   scripts/save-corpus.sh [PKG_DIR...]   (default: every package)
set -euo pipefail
cd "$(dirname "$0")/.."
mod=$(go list -m)
cache="$(go env GOCACHE)/fuzz"
dirs=("$@")
[ ${#dirs[@]} -gt 0 ] || mapfile -t dirs < <(go list -f '{{.Dir}}' ./...)
for dir in "${dirs[@]}"; do
  pkg=$(cd "$dir" && go list .)
  src="$cache/$pkg"
  [ -d "$src" ] || continue
  for t in "$src"/*/; do
    name=$(basename "$t")
    mkdir -p "$dir/testdata/fuzz/$name"
    n=0
    for f in "$t"*; do
      [ -f "$f" ] || continue
      cp -n "$f" "$dir/testdata/fuzz/$name/" && n=$((n+1))
    done
    echo "$pkg $name: $n inputs"
  done
done
: "$mod"
