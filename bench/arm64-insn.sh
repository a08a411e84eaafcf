#!/usr/bin/env bash
# Instructions per byte of AES-XTS on arm64, counted by qemu-user: the
# internal/aes "ce" kernels (ARMv8 Crypto Extensions) against the path
# arm64 took before them, capi's xts template over crypto/aes (one
# cipher.Block call per 16-byte block and a Go tweak multiply). No arm64
# machine exists here, so this is a count, not a speed: it says how much
# work each path asks of a core, not how fast any core does it.
#
# Method: the internal/aes test binary, built for arm64, runs
# TestInsnWorkload (BLKCRYPT_INSN_WORKLOAD: UNITS data units of 4096 bytes,
# each with its plain64 IV, after one warm-up unit) under
# qemu-aarch64-static -singlestep -d exec,nochain, which logs every guest
# instruction executed with its thread and function. The count is the
# instructions on the workload's thread between the calls of insnBegin and
# insnEnd, less the scheduler's excursions (a goroutine preempted at a stack
# check: from runtime.morestack back to the first non-runtime function).
#
# Usage: bench/arm64-insn.sh [UNITS]   (default 8; prints a Markdown table)
set -euo pipefail
cd "$(dirname "$0")/.."
units="${1:-8}"
size=4096
command -v qemu-aarch64-static >/dev/null || { echo "qemu-aarch64-static not found (apt-get install qemu-user-static)" >&2; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
GOARCH=arm64 go test -c -o "$tmp/aes.test" ./internal/aes

# count IMPL KEYBYTES OP: instructions for $units units.
count() {
  mkfifo "$tmp/trace"
  awk '
    !on && $NF ~ /internal\/aes\.insnBegin$/ { on = 1; cpu = $2; next }
    !on || $2 != cpu || done { next }
    $NF ~ /internal\/aes\.insnEnd$/ { print n; done = 1; next }
    $NF ~ /^runtime\.morestack/ { away = 1 }
    away && $NF !~ /^runtime\./ { away = 0 }
    !away { n++ }
    END { if (!done) exit 1 }  # (read to the end: qemu must not write into a closed pipe)
  ' <"$tmp/trace" >"$tmp/n" &
  local awkpid=$!
  BLKCRYPT_INSN_WORKLOAD="$1 $2 $3 $units $size" GOGC=off GODEBUG=asyncpreemptoff=1 \
    qemu-aarch64-static -singlestep -d exec,nochain -D "$tmp/trace" \
    "$tmp/aes.test" -test.run '^TestInsnWorkload$' -test.count=1 >"$tmp/out" 2>&1 ||
    { cat "$tmp/out" >&2; exit 1; }
  wait "$awkpid" || { echo "no insnBegin..insnEnd span in the trace of $1 $2 $3" >&2; exit 1; }
  rm -f "$tmp/trace"
  cat "$tmp/n"
}

bytes=$((units * size))
echo "AES-XTS on arm64, instructions per byte at $size-byte data units (qemu-user count over $units units; no arm64 machine here, so no timing):"
echo
echo "| key | op | ce kernels (internal/aes) | crypto/aes block at a time (capi xts template) | ratio |"
echo "| --- | --- | ---: | ---: | ---: |"
for key in 64 32; do
  for op in enc dec; do
    ce=$(count ce "$key" "$op")
    std=$(count crypto/aes "$key" "$op")
    awk -v k="AES-$((key * 4))" -v op="$op" -v ce="$ce" -v std="$std" -v b="$bytes" \
      'BEGIN { printf "| %s | %s | %.2f | %.2f | %.1f× fewer |\n", k, (op == "enc" ? "encrypt" : "decrypt"), ce / b, std / b, std / ce }'
  done
done
