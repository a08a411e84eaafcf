#!/usr/bin/env bash
# The Volume's data path before and after a change, in one run (issue #25:
# the format-neutral sector map must not cost throughput), and the image
# stack's cat against read (issue #26).
#
# Before/after: BenchmarkVolume (volume_bench_test.go) is built twice, once
# from this tree and once from a git worktree at $BASE (default 82c9176,
# the commit before the LUKS handle, the single reencryption engine and
# the sector map landed) with today's benchmark file copied in, since the
# benchmark is newer than that commit and uses only API both have. The two
# test binaries then take turns, $ROUNDS rounds, and the table shows the
# median MB/s of each and their ratio.
#
# Prints Markdown; with BENCH_RESULTS set, appends "key value" lines.
#   bench/datapath.sh   (BASE, ROUNDS, BENCHTIME in the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
base=${BASE:-82c9176}
rounds=${ROUNDS:-5}
benchtime=${BENCHTIME:-1s}
work=$(bench_workdir datapath)
tree=$(mktemp -d /tmp/datapath-base.XXXXXX)
cleanup() {
  git worktree remove --force "$tree" >/dev/null 2>&1 || rm -rf "$tree"
  rm -rf "$work"
}
trap cleanup EXIT
rmdir "$tree"
git worktree add --detach "$tree" "$base" >/dev/null 2>&1
cp volume_bench_test.go "$tree/"
(cd "$tree" && go test -c -o "$work/before.test" . >/dev/null)
go test -c -o "$work/after.test" . >/dev/null

declare -A sum
run() { # run WHICH: one round, appending "case MB/s" lines to $work/WHICH
  "$work/$1.test" -test.run XXX -test.bench '^BenchmarkVolume$' -test.benchtime "$benchtime" 2>/dev/null |
    awk '/^BenchmarkVolume\//{for(i=1;i<=NF;i++) if($(i+1)=="MB/s"){split($1,a,"/"); sub(/-[0-9]+$/,"",a[3]); print a[2]"/"a[3], $i}}' >>"$work/$1"
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then run before; run after; else run after; run before; fi
done
median() { # median CASE FILE
  awk -v c="$1" '$1==c{print $2}' "$2" | sort -g | awk '{a[NR]=$1} END{if(NR==0){print ""; exit} if(NR%2) print a[(NR+1)/2]; else printf "%.0f\n", (a[NR/2]+a[NR/2+1])/2}'
}
echo "### The Volume's data path, before and after (\`BenchmarkVolume\`, $rounds rounds each, taking turns; median MB/s)"
echo
echo "Before: commit $base. After: this run's commit. AES-256-XTS, 4096-byte sectors, a 64 MiB file in the page cache."
echo
echo "| request | before (MB/s) | after (MB/s) | after/before |"
echo "|---|---|---|---|"
for c in read/4K write/4K read/1024K write/1024K; do
  b=$(median "$c" "$work/before"); a=$(median "$c" "$work/after")
  ratio=""
  [ -n "$a" ] && [ -n "$b" ] && ratio=$(awk "BEGIN{printf \"%.2f\", $a/$b}")
  echo "| $c | ${b:-n/a} | ${a:-n/a} | ${ratio:-n/a}× |"
  key=datapath.$(echo "$c" | tr '/' '_')
  if [ -n "${BENCH_RESULTS:-}" ] && [ -n "$ratio" ]; then
    echo "$key $ratio" >>"$BENCH_RESULTS"
  fi
done
echo

echo "### A file out of an image: \`cat\` through GPT, LUKS2 and LVM against \`read\` of the volume"
echo
echo "A debian-installer-like image built by sgdisk, cryptsetup, lvm2 and mkfs.ext4 (\`BenchmarkCatThroughStack\`):"
echo "\`blkcrypt cat --partition 3 --lv vg0/root IMAGE /var/big.bin\` (a 256 MiB file) against"
echo "\`blkcrypt read --partition 3 --length 256MiB IMAGE\`, alternating, in one process."
echo
out=$(go test -run XXX -bench '^BenchmarkCatThroughStack$' -benchtime 3x ./internal/cli 2>&1 | grep '^BenchmarkCatThroughStack' || true)
echo '```'
echo "${out:-(the benchmark did not run)}"
echo '```'
ratio=$(echo "$out" | awk '{for(i=1;i<=NF;i++) if($(i+1)=="cat/read") print $i}')
if [ -n "${BENCH_RESULTS:-}" ] && [ -n "$ratio" ]; then
  echo "image.cat_vs_read $ratio" >>"$BENCH_RESULTS"
fi
