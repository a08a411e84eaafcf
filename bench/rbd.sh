#!/usr/bin/env bash
# Sequential write and read of an RBD image with nbdcopy, on one throwaway
# single-node Ceph cluster (scripts/ceph-single-node.sh: one monitor, one
# memstore OSD, loopback), through three NBD servers:
#   raw       the unencrypted image: qemu-nbd -f raw rbd:rbd/IMG:conf=…
#   librbd    librbd's own LUKS2 encryption: qemu-nbd --image-opts
#             driver=rbd,…,encrypt.format=luks2 (an image `rbd encryption
#             format`ted, aes-256 xts, 4096-byte sectors)
#   blkcrypt  blkcrypt serve over its NBD client over qemu-nbd's raw rbd
#             export of an image blkcrypt formatted (LUKS2 defaults: 16 MiB
#             data offset, 4096-byte sectors, aes-xts-plain64 512-bit key)
# Each peer has its own image, so every write lands on objects that exist
# from the round before (the first round also creates them). Every qemu-nbd
# runs with --shared=8, which makes qemu-nbd 7.2 advertise multi-conn, so
# nbdcopy opens 4 connections to each peer, and blkcrypt's client opens 4
# to its qemu-nbd. Writes come from a tmpfs file of random bytes with
# nbdcopy --flush; reads go to nbdcopy's null:. The peers take turns, round
# after round, each round starting with the next peer (so none always
# follows the same one); each figure is the peer's best round. The machines
# here are shared: one peer's rounds moved by up to 2x within a minute while
# this was written, hence 5 rounds by default.
# The image blkcrypt serves is formatted with a cheap PBKDF2 keyslot: the
# unlock is not measured, and a default argon2id one would add seconds per
# round.
# With BENCH_RESULTS set, blkcrypt's ratios to the peers are appended to it
# as "key value" lines for bench/report's targets table.
#   bench/rbd.sh [SIZE_MIB]       default 512; ROUNDS (default 5)
# A run at 512 MiB takes about 3-4 minutes here.
set -euo pipefail
cd "$(dirname "$0")/.."
size_mib=${1:-512}
rounds=${ROUNDS:-5}
base=${BENCH_DIR:-/dev/shm}
[ -d "$base" ] && [ -w "$base" ] || base=${TMPDIR:-/tmp}
work=$(mktemp -d "$base/rbd-bench.XXXXXX")
cluster=$(mktemp -d /tmp/rbd-bench-ceph.XXXXXX)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
  scripts/ceph-single-node.sh stop "$cluster/c" >/dev/null 2>&1 || true
  rm -rf "$work" "$cluster"
}
trap cleanup EXIT
for t in nbdcopy nbdinfo qemu-nbd rbd; do
  command -v $t >/dev/null || { echo "bench/rbd.sh: $t missing (apt-get install libnbd-bin qemu-utils qemu-block-extra ceph-mon ceph-osd ceph-common uuid-runtime)" >&2; exit 1; }
done
go build -o "$work/blkcrypt" ./cmd/blkcrypt
# memstore holds every object in memory: three images and some slack.
mem=$((3 * (size_mib + 16) + 512))
conf=$(scripts/ceph-single-node.sh start "$cluster/c" "$mem" | sed -n 's/^CEPH_CONF=//p')
export CEPH_CONF=$conf
printf 'rbd-bench-passphrase' > "$work/pass"
head -c $((size_mib << 20)) /dev/urandom > "$work/src"
# The encrypted images are 16 MiB larger (LUKS2's header and keyslots), so
# that every peer exports SIZE_MIB of plaintext.
rbd create --size "${size_mib}M" rbd/raw
rbd create --size "$((size_mib + 16))M" rbd/librbd
rbd create --size "$((size_mib + 16))M" rbd/blk
rbd encryption format rbd/librbd luks2 "$work/pass" >/dev/null

# serve NAME: start peer NAME on $work/NAME.sock, set uri
serve() {
  local name=$1
  rm -f "$work/$name.sock" "$work/$name-raw.sock"
  case $name in
  raw)
    qemu-nbd -t --shared=8 -k "$work/raw.sock" -x raw -f raw "rbd:rbd/raw:conf=$conf" 2>>"$work/log" &
    pids+=($!) ;;
  librbd)
    qemu-nbd -t --shared=8 -k "$work/librbd.sock" -x librbd --object secret,id=sec0,file="$work/pass" \
      --image-opts "driver=rbd,pool=rbd,image=librbd,conf=$conf,encrypt.format=luks2,encrypt.key-secret=sec0" 2>>"$work/log" &
    pids+=($!) ;;
  blkcrypt)
    qemu-nbd -t --shared=8 -k "$work/blkcrypt-raw.sock" -x blk -f raw "rbd:rbd/blk:conf=$conf" 2>>"$work/log" &
    pids+=($!)
    wait_sock "nbd+unix:///blk?socket=$work/blkcrypt-raw.sock"
    "$work/blkcrypt" serve "nbd+unix:///blk?socket=$work/blkcrypt-raw.sock" --key-file "$work/pass" \
      --listen "unix:$work/blkcrypt.sock" 2>>"$work/log" &
    pids+=($!) ;;
  esac
  uri="nbd+unix:///$name?socket=$work/$name.sock"
  [ "$name" = blkcrypt ] && uri="nbd+unix:///?socket=$work/blkcrypt.sock"
  wait_sock "$uri"
}
wait_sock() {
  for _ in $(seq 300); do nbdinfo --size "$1" >/dev/null 2>&1 && return 0; sleep 0.1; done
  echo "bench/rbd.sh: $1 did not come up:" >&2; cat "$work/log" >&2; return 1
}
# unserve: stop the peer's processes (blkcrypt first, then its qemu-nbd),
# so that each image is closed and its exclusive lock released.
unserve() {
  local i
  for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
    kill "${pids[$i]}" 2>/dev/null || true
    wait "${pids[$i]}" 2>/dev/null || true
  done
  pids=()
}

# blkcrypt formats its image through qemu-nbd's raw export: the layout
# librbd needs comes from the LUKS2 defaults (see docs/scaling.md).
qemu-nbd -t --shared=8 -k "$work/fmt.sock" -x blk -f raw "rbd:rbd/blk:conf=$conf" 2>>"$work/log" &
pids+=($!)
wait_sock "nbd+unix:///blk?socket=$work/fmt.sock"
"$work/blkcrypt" format -q "nbd+unix:///blk?socket=$work/fmt.sock" --key-file "$work/pass" \
  --pbkdf pbkdf2 --pbkdf-force-iterations 1000
unserve

time_copy() {
  local t0 t1
  t0=$(date +%s.%N)
  nbdcopy --flush "$1" "$2"
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{print $2-$1}'
}

declare -A rd wr mc
peers=(raw librbd blkcrypt)
for round in $(seq 0 $((rounds - 1))); do
  for i in 0 1 2; do
    p=${peers[$(((round + i) % 3))]}
    serve "$p"
    if [ -z "${mc[$p]:-}" ]; then
      mc[$p]=$(nbdinfo --json "$uri" | awk -F: '/"can_multi_conn"/ {gsub(/[ ,]/, "", $2); print $2; exit}')
      size=$(nbdinfo --size "$uri")
      if [ "$size" != $((size_mib << 20)) ]; then echo "bench/rbd.sh: $p exports $size bytes, not $size_mib MiB" >&2; exit 1; fi
    fi
    w=$(time_copy "$work/src" "$uri")
    r=$(time_copy "$uri" null:)
    unserve
    if [ -z "${wr[$p]:-}" ] || awk "BEGIN{exit !($w < ${wr[$p]})}"; then wr[$p]=$w; fi
    if [ -z "${rd[$p]:-}" ] || awk "BEGIN{exit !($r < ${rd[$p]})}"; then rd[$p]=$r; fi
  done
done

# The data blkcrypt wrote is what librbd reads: a check, not a figure.
qemu-img convert -O raw --object secret,id=sec0,file="$work/pass" \
  --image-opts "driver=rbd,pool=rbd,image=blk,conf=$conf,encrypt.format=luks2,encrypt.key-secret=sec0" "$work/back" 2>>"$work/log"
cmp -s "$work/src" "$work/back" || { echo "bench/rbd.sh: librbd reads other bytes than blkcrypt wrote" >&2; exit 1; }
rm -f "$work/back"

mbps() { echo "$size_mib $1" | awk '{printf "%.0f", $1*1.048576/$2}'; }
ratio() { echo "$1 $2" | awk '{printf "%.2f×", $2/$1}'; }
echo "| peer | write MB/s | read MB/s | blkcrypt's write vs it | blkcrypt's read vs it | advertises multi-conn |"
echo "|---|---|---|---|---|---|"
for p in blkcrypt librbd raw; do
  echo "| $p | $(mbps "${wr[$p]}") | $(mbps "${rd[$p]}") | $(ratio "${wr[blkcrypt]}" "${wr[$p]}") | $(ratio "${rd[blkcrypt]}" "${rd[$p]}") | ${mc[$p]} |"
done
echo
echo "| peer | what serves the image |"
echo "|---|---|"
echo "| blkcrypt | \`blkcrypt serve nbd+unix:///blk?socket=…\` (defaults) over \`qemu-nbd -t --shared=8 -f raw rbd:rbd/blk:conf=…\`; LUKS2 made by \`blkcrypt format\` |"
echo "| librbd | \`qemu-nbd -t --shared=8 --image-opts driver=rbd,…,encrypt.format=luks2\`; LUKS2 made by \`rbd encryption format\` |"
echo "| raw | \`qemu-nbd -t --shared=8 -f raw rbd:rbd/raw:conf=…\`, unencrypted |"
echo
echo "($size_mib MiB of plaintext per peer on a single-node cluster (one memstore OSD, $(ceph --version | awk '{print $3}')), nbdcopy --flush over Unix sockets, best of $rounds rounds with the peers taking turns; writes from a tmpfs file of random bytes, reads to nbdcopy's null:; 'blkcrypt's … vs it' = blkcrypt's speed divided by that peer's; librbd then read back exactly what blkcrypt wrote.)"
if [ -n "${BENCH_RESULTS:-}" ]; then
  for p in librbd raw; do
    echo "rbd.read.$p $(echo "${rd[blkcrypt]} ${rd[$p]}" | awk '{print $2/$1}')"
    echo "rbd.write.$p $(echo "${wr[blkcrypt]} ${wr[$p]}" | awk '{print $2/$1}')"
  done >> "$BENCH_RESULTS"
  for p in blkcrypt librbd raw; do
    echo "rbd.mbs.read.$p $(mbps "${rd[$p]}")"
    echo "rbd.mbs.write.$p $(mbps "${wr[$p]}")"
  done >> "$BENCH_RESULTS"
fi
