#!/usr/bin/env bash
# LUKS figures for BENCHMARKS.md, one run: unlock time per KDF setting (our
# test-passphrase next to cryptsetup's on the same header), and read
# throughput of a LUKS volume through `blkcrypt read` next to
# `qemu-img convert` of the same (LUKS1) volume. Prints Markdown; with
# BENCH_RESULTS set, also appends "key value" lines to that file for
# bench/report. BENCH_ITER_TIME (ms) shortens the KDF benchmark for a quick
# check of the script. A run takes about a minute at 1024 MiB (five KDF
# settings of 1-2 s each, unlocked twice, and three reads of the volume).
#   bench/luks.sh [SIZE_MIB]   (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size_mib=${1:-1024}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
go build -o "$work/blkcrypt" ./cmd/blkcrypt
bc="$work/blkcrypt"
printf 'bench-passphrase' > "$work/pass"
secs() { local t0 t1; t0=$(date +%s.%N); "$@" >/dev/null; t1=$(date +%s.%N); echo "$t0 $t1" | awk '{printf "%.2f", $2-$1}'; }

echo "### Unlock time per KDF setting (seconds; header made by blkcrypt format)"
echo
echo "| type | KDF setting | blkcrypt test-passphrase | cryptsetup open --test-passphrase |"
echo "|---|---|---|---|"
for setting in "luks2|--pbkdf argon2id" "luks2|--pbkdf argon2i" "luks2|--pbkdf pbkdf2" "luks1|--pbkdf pbkdf2" "luks2|--pbkdf argon2id --iter-time 500 --pbkdf-memory 262144"; do
  typ=${setting%%|*}; opts=${setting#*|}
  [ -n "${BENCH_ITER_TIME:-}" ] && [[ "$opts" != *--iter-time* ]] && opts="$opts --iter-time $BENCH_ITER_TIME"
  rm -f "$work/k.img"
  # shellcheck disable=SC2086
  "$bc" format "$work/k.img" --type "$typ" --size 33554432 --key-file "$work/pass" -q $opts
  ours=$(secs "$bc" test-passphrase "$work/k.img" --key-file "$work/pass")
  theirs=$(secs cryptsetup open --test-passphrase --key-file "$work/pass" "$work/k.img")
  echo "| $typ | ${opts} (benchmarked like cryptsetup) | $ours | $theirs |"
done
echo

echo "### Read throughput of a ${size_mib} MiB volume (MB/s, page cache warm)"
echo
qemu_luks1 "$work/l1.img" "$size_mib" cipher-alg=aes-256,cipher-mode=xts,ivgen-alg=plain64 "$work/pass"
"$bc" format "$work/l2.img" --type luks2 --size $(( (size_mib + 16) << 20 )) --key-file "$work/pass" -q --pbkdf pbkdf2 --pbkdf-force-iterations 1000
head -c $((size_mib << 20)) /dev/urandom > "$work/src"
"$bc" write "$work/l1.img" -i "$work/src" --key-file "$work/pass"
"$bc" write "$work/l2.img" -i "$work/src" --key-file "$work/pass"
cat "$work/l1.img" "$work/l2.img" > /dev/null
mb() { echo "$size_mib $1" | awk '{printf "%.0f", $1*1.048576/$2}'; }
t_q=$(secs qemu-img convert --object secret,id=s0,file="$work/pass" --image-opts "driver=luks,key-secret=s0,file.filename=$work/l1.img" -O raw "$work/out.raw")
rm -f "$work/out.raw"
t_b1=$(secs "$bc" read "$work/l1.img" --key-file "$work/pass" -o "$work/out.raw")
rm -f "$work/out.raw"
t_b2=$(secs "$bc" read "$work/l2.img" --key-file "$work/pass" -o "$work/out.raw")
rm -f "$work/out.raw"
echo "| what | seconds | MB/s | vs qemu-img |"
echo "|---|---|---|---|"
echo "| qemu-img convert, LUKS1 aes-xts-plain64 (qemu's 512-byte sectors) | $t_q | $(mb "$t_q") | 1.00× |"
echo "| blkcrypt read, same LUKS1 volume | $t_b1 | $(mb "$t_b1") | $(echo "$t_q $t_b1" | awk '{printf "%.2f×", $1/$2}') |"
echo "| blkcrypt read, LUKS2 aes-xts-plain64 4096-byte sectors | $t_b2 | $(mb "$t_b2") | $(echo "$t_q $t_b2" | awk '{printf "%.2f×", $1/$2}') |"
echo
if [ -n "${BENCH_RESULTS:-}" ]; then
  echo "luks.read_vs_qemu $(echo "$t_q $t_b1" | awk '{print $1/$2}')" >> "$BENCH_RESULTS"
  echo "luks.read_mbs $(mb "$t_b1")" >> "$BENCH_RESULTS"
fi
echo "(Each tool's figure includes its key unlock: pbkdf2 at 1000 iterations for these images. qemu-img 7.2 has no LUKS2 support, so the LUKS2 row has no qemu counterpart. qemu-img runs with its defaults, 8 coroutines and in-order writes: -W and -m 16 showed no consistent gain in a check on this VM. blkcrypt read runs with its defaults.)"
