#!/usr/bin/env bash
# Sequential read and write of one LUKS1 aes-xts-plain64 image (made by
# qemu-img) through NBD with nbdcopy over loopback, served by blkcrypt,
# nbdkit's luks filter, qemu-nbd, and an unencrypted nbdkit file export of
# the same size. One run, same client; prints a Markdown table.
# Reads go to nbdcopy's null: destination, so the servers are measured rather
# than the client writing its copy (a second read column copies into a tmpfs
# file, which on this 2-vCPU machine caps every server near the same speed).
# The image and the copies live in tmpfs (/dev/shm when there is one, or
# $BENCH_DIR) so that the servers are measured, not this VM's disk: on disk,
# nbdcopy --flush makes every server wait for the same fsync.
# Every server runs in its best configuration for nbdcopy, which opens 4
# connections when the export advertises multi-conn: qemu-nbd 7.2 advertises
# it only with --shared other than 1 (checked with nbdinfo), so it runs with
# --shared=8; the table after the figures shows what each export advertised.
# With BENCH_RESULTS set, the ratios are also appended to that file as
# "key value" lines for bench/report's targets table.
# A run takes about 3 x 4 x (3 copies of SIZE_MIB): 2-3 minutes at 256 MiB.
#   bench/nbd-compare.sh [SIZE_MIB]
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size_mib=${1:-256}
work=$(bench_workdir nbd-compare)
base=$(dirname "$work")
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/blkcrypt" ./cmd/blkcrypt
printf 'bench-passphrase' > "$work/pass"
qemu_luks1 "$work/luks.img" "$size_mib" cipher-alg=aes-256,cipher-mode=xts,ivgen-alg=plain64 "$work/pass"
truncate -s "${size_mib}M" "$work/plain.img"
head -c $((size_mib << 20)) /dev/urandom > "$work/src"
port=$((20000 + RANDOM % 20000))

# time_copy SRC DST: seconds for nbdcopy SRC DST
time_copy() {
  local t0 t1
  t0=$(date +%s.%N)
  nbdcopy --flush "$1" "$2"
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{print $2-$1}'
}

declare -A rd rf wr mc
# run_server NAME COMMAND...: one write and one read; a server's figure is
# the best of its rounds (the first round also warms the page cache, the
# image's pages and the client).
run_server() {
  local name=$1; shift
  "$@" & local pid=$!
  wait_port
  local uri="nbd://127.0.0.1:$port" w r
  if [ -z "${mc[$name]:-}" ]; then
    mc[$name]=$(nbdinfo --json "$uri" | awk -F: '/"can_multi_conn"/ {gsub(/[ ,]/, "", $2); print $2; exit}')
  fi
  w=$(time_copy "$work/src" "$uri")
  r=$(time_copy "$uri" null:)
  f=$(time_copy "$uri" "$work/out")
  rm -f "$work/out"
  kill $pid; wait $pid 2>/dev/null || true
  port=$((port + 1))
  if [ -z "${wr[$name]:-}" ] || awk "BEGIN{exit !($w < ${wr[$name]})}"; then wr[$name]=$w; fi
  if [ -z "${rd[$name]:-}" ] || awk "BEGIN{exit !($r < ${rd[$name]})}"; then rd[$name]=$r; fi
  if [ -z "${rf[$name]:-}" ] || awk "BEGIN{exit !($f < ${rf[$name]})}"; then rf[$name]=$f; fi
}

rounds=${ROUNDS:-3}
for _ in $(seq "$rounds"); do
  run_server blkcrypt "$work/blkcrypt" serve "$work/luks.img" --key-file "$work/pass" --listen "127.0.0.1:$port"
  run_server nbdkit-luks nbdkit -f -p "$port" -i 127.0.0.1 --filter=luks file "$work/luks.img" passphrase=+"$work/pass"
  run_server qemu-nbd qemu-nbd -t --shared=8 -p "$port" -b 127.0.0.1 --object secret,id=s0,file="$work/pass" --image-opts "driver=luks,key-secret=s0,file.filename=$work/luks.img" -x ""
  run_server nbdkit-file nbdkit -f -p "$port" -i 127.0.0.1 file "$work/plain.img"
done

mbps() { echo "$size_mib $1" | awk '{printf "%.0f", $1*1.048576/$2}'; }
ratio() { echo "$1 $2" | awk '{printf "%.2f×", $2/$1}'; }
echo "| server | read MB/s | write MB/s | read vs blkcrypt | write vs blkcrypt | read into a tmpfs file MB/s | that read vs blkcrypt |"
echo "|---|---|---|---|---|---|---|"
for s in blkcrypt nbdkit-luks qemu-nbd nbdkit-file; do
  echo "| $s | $(mbps "${rd[$s]}") | $(mbps "${wr[$s]}") | $(ratio "${rd[blkcrypt]}" "${rd[$s]}") | $(ratio "${wr[blkcrypt]}" "${wr[$s]}") | $(mbps "${rf[$s]}") | $(ratio "${rf[blkcrypt]}" "${rf[$s]}") |"
done
echo
echo "| server | configuration | advertises multi-conn |"
echo "|---|---|---|"
echo "| blkcrypt | \`blkcrypt serve\` (defaults) | ${mc[blkcrypt]} |"
echo "| nbdkit-luks | \`nbdkit --filter=luks file\` (default 16 threads, parallel thread model) | ${mc[nbdkit-luks]} |"
echo "| qemu-nbd | \`qemu-nbd -t --shared=8\` with the luks driver (default cache and aio) | ${mc[qemu-nbd]} |"
echo "| nbdkit-file | \`nbdkit file\`, unencrypted image of the same size | ${mc[nbdkit-file]} |"
echo
if [ -n "${BENCH_RESULTS:-}" ]; then
  for s in nbdkit-luks qemu-nbd nbdkit-file; do
    echo "nbd.read.$s $(echo "${rd[blkcrypt]} ${rd[$s]}" | awk '{print $2/$1}')"
    echo "nbd.write.$s $(echo "${wr[blkcrypt]} ${wr[$s]}" | awk '{print $2/$1}')"
    echo "nbd.readfile.$s $(echo "${rf[blkcrypt]} ${rf[$s]}" | awk '{print $2/$1}')"
  done >> "$BENCH_RESULTS"
  for s in blkcrypt nbdkit-luks qemu-nbd nbdkit-file; do
    echo "nbd.multi_conn.$s $([ "${mc[$s]}" = true ] && echo 1 || echo 0)"
  done >> "$BENCH_RESULTS"
fi
# The unencrypted export does no cryptography at all: its speed over the
# same client and loopback is the ceiling any server can reach here.
echo "Ceiling: the unencrypted nbdkit file export reads at $(ratio "${rd[nbdkit-file]}" "${rd[qemu-nbd]}") qemu-nbd and $(ratio "${rd[nbdkit-file]}" "${rd[nbdkit-luks]}") nbdkit-luks (into a tmpfs file: $(ratio "${rf[nbdkit-file]}" "${rf[qemu-nbd]}") and $(ratio "${rf[nbdkit-file]}" "${rf[nbdkit-luks]}")), and writes at $(ratio "${wr[nbdkit-file]}" "${wr[qemu-nbd]}") qemu-nbd and $(ratio "${wr[nbdkit-file]}" "${wr[nbdkit-luks]}") nbdkit-luks."
echo
echo "($size_mib MiB image in $(df --output=fstype "$work" | tail -1) at $base, nbdcopy --flush, loopback TCP, best of $rounds rounds with the servers taking turns; reads to nbdcopy's null: unless marked; writes from a tmpfs file of random bytes; 'vs blkcrypt' = blkcrypt's speed divided by that server's.)"
