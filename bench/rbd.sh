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
#   native    blkcrypt built with -tags ceph (package rbd: librbd through
#             cgo) serving rbd:rbd/IMG itself, one hop fewer; only where
#             librbd-dev is installed (BENCH_NATIVE=0 leaves it out)
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
qcache=${BENCH_QEMU_CACHE:-none}
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
peers=(raw librbd blkcrypt)
if [ "${BENCH_NATIVE:-1}" != 0 ] && [ -f /usr/include/rbd/librbd.h ]; then
  if go build -tags ceph -o "$work/blkcrypt-ceph" ./cmd/blkcrypt; then
    peers+=(native)
  else
    echo "bench/rbd.sh: go build -tags ceph failed; measuring without the native peer" >&2
  fi
fi
np=${#peers[@]}
# memstore holds every object in memory: the images and some slack.
mem=$((np * (size_mib + 16) + 512))
conf=$(scripts/ceph-single-node.sh start "$cluster/c" "$mem" | sed -n 's/^CEPH_CONF=//p')
export CEPH_CONF=$conf
printf 'rbd-bench-passphrase' > "$work/pass"
head -c $((size_mib << 20)) /dev/urandom > "$work/src"
# The encrypted images are 16 MiB larger (LUKS2's header and keyslots), so
# that every peer exports SIZE_MIB of plaintext.
rbd create --size "${size_mib}M" rbd/raw
rbd create --size "$((size_mib + 16))M" rbd/librbd
rbd create --size "$((size_mib + 16))M" rbd/blk
rbd create --size "$((size_mib + 16))M" rbd/native
rbd encryption format rbd/librbd luks2 "$work/pass" >/dev/null

# serve NAME: start peer NAME on $work/NAME.sock, set uri
serve() {
  local name=$1
  rm -f "$work/$name.sock" "$work/$name-raw.sock"
  case $name in
  raw)
    qemu-nbd -t --shared=8 --cache="$qcache" -k "$work/raw.sock" -x raw -f raw "rbd:rbd/raw:conf=$conf" 2>>"$work/log" &
    pids+=($!) ;;
  librbd)
    qemu-nbd -t --shared=8 --cache="$qcache" -k "$work/librbd.sock" -x librbd --object secret,id=sec0,file="$work/pass" \
      --image-opts "driver=rbd,pool=rbd,image=librbd,conf=$conf,encrypt.format=luks2,encrypt.key-secret=sec0" 2>>"$work/log" &
    pids+=($!) ;;
  blkcrypt)
    qemu-nbd -t --shared=8 --cache="$qcache" -k "$work/blkcrypt-raw.sock" -x blk -f raw "rbd:rbd/blk:conf=$conf" 2>>"$work/log" &
    pids+=($!)
    wait_sock "nbd+unix:///blk?socket=$work/blkcrypt-raw.sock"
    "$work/blkcrypt" serve "nbd+unix:///blk?socket=$work/blkcrypt-raw.sock" --key-file "$work/pass" \
      --listen "unix:$work/blkcrypt.sock" 2>>"$work/log" &
    pids+=($!) ;;
  native)
    "$work/blkcrypt-ceph" serve "rbd:rbd/native@conf=$conf" --key-file "$work/pass" \
      --listen "unix:$work/native.sock" 2>>"$work/log" &
    pids+=($!) ;;
  esac
  uri="nbd+unix:///$name?socket=$work/$name.sock"
  case $name in blkcrypt | native) uri="nbd+unix:///?socket=$work/$name.sock" ;; esac
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
qemu-nbd -t --shared=8 --cache="$qcache" -k "$work/fmt.sock" -x blk -f raw "rbd:rbd/blk:conf=$conf" 2>>"$work/log" &
pids+=($!)
wait_sock "nbd+unix:///blk?socket=$work/fmt.sock"
"$work/blkcrypt" format -q "nbd+unix:///blk?socket=$work/fmt.sock" --key-file "$work/pass" \
  --pbkdf pbkdf2 --pbkdf-force-iterations 1000
unserve
if [ "$np" = 4 ]; then
  "$work/blkcrypt-ceph" format -q "rbd:rbd/native@conf=$conf" --key-file "$work/pass" --pbkdf pbkdf2 --pbkdf-force-iterations 1000
fi

time_copy() {
  local t0 t1
  t0=$(date +%s.%N)
  nbdcopy --flush "$1" "$2"
  t1=$(date +%s.%N)
  echo "$t0 $t1" | awk '{print $2-$1}'
}

declare -A rd wr mc
for round in $(seq 0 $((rounds - 1))); do
  for ((i = 0; i < np; i++)); do
    p=${peers[$(((round + i) % np))]}
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
for img in blk $([ "$np" = 4 ] && echo native); do
  qemu-img convert -O raw --object secret,id=sec0,file="$work/pass" \
    --image-opts "driver=rbd,pool=rbd,image=$img,conf=$conf,encrypt.format=luks2,encrypt.key-secret=sec0" "$work/back" 2>>"$work/log"
  cmp -s "$work/src" "$work/back" || { echo "bench/rbd.sh: librbd reads other bytes from $img than blkcrypt wrote" >&2; exit 1; }
  rm -f "$work/back"
done

mbps() { echo "$size_mib $1" | awk '{printf "%.0f", $1*1.048576/$2}'; }
ratio() { echo "$1 $2" | awk '{printf "%.2f×", $2/$1}'; }
if [ "$np" = 4 ]; then
  echo "| peer | write MB/s | read MB/s | blkcrypt's write vs it | blkcrypt's read vs it | native's write vs it | native's read vs it | advertises multi-conn |"
  echo "|---|---|---|---|---|---|---|---|"
  for p in blkcrypt native librbd raw; do
    echo "| $p | $(mbps "${wr[$p]}") | $(mbps "${rd[$p]}") | $(ratio "${wr[blkcrypt]}" "${wr[$p]}") | $(ratio "${rd[blkcrypt]}" "${rd[$p]}") | $(ratio "${wr[native]}" "${wr[$p]}") | $(ratio "${rd[native]}" "${rd[$p]}") | ${mc[$p]} |"
  done
else
  echo "| peer | write MB/s | read MB/s | blkcrypt's write vs it | blkcrypt's read vs it | advertises multi-conn |"
  echo "|---|---|---|---|---|---|"
  for p in blkcrypt librbd raw; do
    echo "| $p | $(mbps "${wr[$p]}") | $(mbps "${rd[$p]}") | $(ratio "${wr[blkcrypt]}" "${wr[$p]}") | $(ratio "${rd[blkcrypt]}" "${rd[$p]}") | ${mc[$p]} |"
  done
fi
echo
echo "| peer | what serves the image |"
echo "|---|---|"
echo "| blkcrypt | \`blkcrypt serve nbd+unix:///blk?socket=…\` (defaults) over \`qemu-nbd -t --shared=8 --cache=$qcache -f raw rbd:rbd/blk:conf=…\`; LUKS2 made by \`blkcrypt format\` |"
[ "$np" = 4 ] && echo "| native | \`blkcrypt serve rbd:rbd/native@conf=…\` built with \`-tags ceph\` (librbd in the process; package rbd turns off librbd's cache and its write copy); LUKS2 made by \`blkcrypt format\` |"
echo "| librbd | \`qemu-nbd -t --shared=8 --cache=$qcache --image-opts driver=rbd,…,encrypt.format=luks2\`; LUKS2 made by \`rbd encryption format\` |"
echo "| raw | \`qemu-nbd -t --shared=8 --cache=$qcache -f raw rbd:rbd/raw:conf=…\`, unencrypted |"
echo
echo "($size_mib MiB of plaintext per peer on a single-node cluster (one memstore OSD, $(ceph --version | awk '{print $3}')), nbdcopy --flush over Unix sockets, best of $rounds rounds with the peers taking turns; writes from a tmpfs file of random bytes, reads to nbdcopy's null:; '… vs it' = that blkcrypt route's speed divided by the peer's; librbd then read back exactly what blkcrypt wrote.)"
if [ -n "${BENCH_RESULTS:-}" ]; then
  for b in blkcrypt $([ "$np" = 4 ] && echo native); do
    key=rbd; [ "$b" = native ] && key=rbd.native
    for p in librbd raw; do
      echo "$key.read.$p $(echo "${rd[$b]} ${rd[$p]}" | awk '{print $2/$1}')"
      echo "$key.write.$p $(echo "${wr[$b]} ${wr[$p]}" | awk '{print $2/$1}')"
    done
  done >> "$BENCH_RESULTS"
  if [ "$np" = 4 ]; then
    echo "rbd.native.read.blkcrypt $(echo "${rd[native]} ${rd[blkcrypt]}" | awk '{print $2/$1}')"
    echo "rbd.native.write.blkcrypt $(echo "${wr[native]} ${wr[blkcrypt]}" | awk '{print $2/$1}')"
  fi >> "$BENCH_RESULTS"
  for p in "${peers[@]}"; do
    echo "rbd.mbs.read.$p $(mbps "${rd[$p]}")"
    echo "rbd.mbs.write.$p $(mbps "${wr[$p]}")"
  done >> "$BENCH_RESULTS"
fi
