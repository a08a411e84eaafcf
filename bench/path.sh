#!/usr/bin/env bash
# The whole path (issue #14 item 5): a volume of SIZE_MIB on tmpfs read and
# written end to end, by `blkcrypt read`/`write` and through the NBD server
# with nbdcopy, for aes-xts-plain64, aes-cbc-essiv:sha256 and Adiantum, next
# to the peers that need no cryptsetup or root: qemu-img convert and qemu-nbd
# on a LUKS1 image that qemu-img made, and nbdkit's luks filter (XTS only:
# it has no ESSIV). blkcrypt reads and writes that same LUKS1 image (512-byte
# sectors, as qemu's) and a LUKS2 volume of its own (4096-byte sectors, the
# LUKS2 default); qemu 7.2 has no LUKS2 and no Adiantum, so those rows have no
# peer. Reads go to a sink (blkcrypt read -o /dev/null, qemu-img's null-co
# driver, nbdcopy's null:) so that the tools are measured, not a copy being
# written; writes come from a tmpfs file of random bytes. Every figure is the
# best of ROUNDS (default 2) rounds, the tools taking turns.
# Prints Markdown; with BENCH_RESULTS set, appends "key value" lines (MB/s
# and blkcrypt-over-peer ratios) for bench/report.
# About 40 s per round at 1024 MiB on the project's 2-core VM.
#   bench/path.sh [SIZE_MIB]   (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size_mib=${1:-1024}
rounds=${ROUNDS:-2}
work=$(bench_workdir bench-path)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
go build -o "$work/blkcrypt" ./cmd/blkcrypt
bc="$work/blkcrypt"
printf 'bench-passphrase' > "$work/pass"
head -c $((size_mib << 20)) /dev/urandom > "$work/src"
bytes=$((size_mib << 20))
port=$((20000 + RANDOM % 20000))

declare -A best

# nbd_pair KEY COMMAND...: start a server, time one write and one read.
nbd_pair() {
  local key=$1; shift
  "$@" >/dev/null 2>&1 & local pid=$!
  # A server that does not come up leaves its figures unmeasured, not the
  # whole table.
  if ! wait_port; then kill $pid 2>/dev/null || true; wait $pid 2>/dev/null || true; port=$((port + 1)); return 0; fi
  keep "$key.nbdwrite" "$(secs nbdcopy --flush "$work/src" "nbd://127.0.0.1:$port")"
  keep "$key.nbdread" "$(secs nbdcopy "nbd://127.0.0.1:$port" null:)"
  kill $pid; wait $pid 2>/dev/null || true
  port=$((port + 1))
}

blkcrypt_all() { # KEY IMG
  keep "$1.write" "$(secs "$bc" write "$2" -i "$work/src" --key-file "$work/pass")"
  keep "$1.read" "$(secs "$bc" read "$2" --key-file "$work/pass" -o /dev/null)"
  nbd_pair "$1" "$bc" serve "$2" --key-file "$work/pass" --listen "127.0.0.1:$port"
}

qemu_all() { # KEY IMG
  local io="driver=luks,key-secret=s0,file.filename=$2"
  keep "$1.write" "$(secs qemu-img convert -n --object secret,id=s0,file="$work/pass" -f raw "$work/src" --target-image-opts "$io")"
  keep "$1.read" "$(secs qemu-img convert -n --object secret,id=s0,file="$work/pass" --image-opts "$io" --target-image-opts "driver=null-co,size=$bytes")"
  nbd_pair "$3" qemu-nbd -t --shared=8 -p "$port" -b 127.0.0.1 --object secret,id=s0,file="$work/pass" --image-opts "$io" -x ""
}

# name|spec|LUKS2 key bits|qemu LUKS1 options (empty: no LUKS1 image)
ciphers=(
  "xts|aes-xts-plain64|512|cipher-alg=aes-256,cipher-mode=xts,ivgen-alg=plain64"
  "essiv|aes-cbc-essiv:sha256|256|cipher-alg=aes-256,cipher-mode=cbc,ivgen-alg=essiv,ivgen-hash-alg=sha256"
  "adiantum|xchacha12,aes-adiantum-plain64|256|"
)
for c in "${ciphers[@]}"; do
  IFS='|' read -r name spec keybits qopts <<<"$c"
  l2="$work/$name.luks2" l1="$work/$name.luks1"
  "$bc" format "$l2" --type luks2 --cipher "$spec" --key-size "$keybits" --size $(( (size_mib + 16) << 20 )) \
    --key-file "$work/pass" -q --pbkdf pbkdf2 --pbkdf-force-iterations 1000
  [ -n "$qopts" ] && qemu_luks1 "$l1" "$size_mib" "$qopts" "$work/pass"
  for _ in $(seq "$rounds"); do
    blkcrypt_all "$name.luks2.blkcrypt" "$l2"
    if [ -n "$qopts" ]; then
      blkcrypt_all "$name.luks1.blkcrypt" "$l1"
      qemu_all "$name.luks1.qemu-img" "$l1" "$name.luks1.qemu-nbd"
      if [ "$name" = xts ]; then
        nbd_pair "$name.luks1.nbdkit-luks" nbdkit -f -p "$port" -i 127.0.0.1 --filter=luks file "$l1" passphrase=+"$work/pass"
      fi
    fi
  done
  rm -f "$l1" "$l2"
done

mbs() { [ -n "${best[$1]:-}" ] && echo "$bytes ${best[$1]}" | awk '{printf "%.0f", $1/$2/1e6}' || echo "–"; }
ratio() { # OURS THEIRS (keys): our speed over theirs
  [ -n "${best[$1]:-}" ] && [ -n "${best[$2]:-}" ] && echo "${best[$1]} ${best[$2]}" | awk '{printf "%.2f", $2/$1}' || echo ""
}
cell() { local r; r=$(ratio "$1" "$2"); [ -n "$r" ] && echo "${r}×" || echo "–"; }

echo "| cipher | volume | tool | read MB/s | write MB/s | NBD read MB/s | NBD write MB/s |"
echo "|---|---|---|---|---|---|---|"
row() { # NAME SPEC VOLUME TOOL KEY(read/write) KEY(nbd)
  echo "| $2 | $3 | $4 | $(mbs "$5.read") | $(mbs "$5.write") | $(mbs "$6.nbdread") | $(mbs "$6.nbdwrite") |"
}
for c in "${ciphers[@]}"; do
  IFS='|' read -r name spec keybits qopts <<<"$c"
  row "$name" "$spec" "LUKS2, $keybits-bit key, 4096 B sectors" "blkcrypt" "$name.luks2.blkcrypt" "$name.luks2.blkcrypt"
  if [ -n "$qopts" ]; then
    row "$name" "$spec" "LUKS1 (qemu-img), 512 B sectors" "blkcrypt" "$name.luks1.blkcrypt" "$name.luks1.blkcrypt"
    row "$name" "$spec" "same LUKS1" "qemu-img convert / qemu-nbd" "$name.luks1.qemu-img" "$name.luks1.qemu-nbd"
    [ "$name" = xts ] && row "$name" "$spec" "same LUKS1" "nbdkit --filter=luks" "-" "$name.luks1.nbdkit-luks"
  fi
done
echo
echo "| cipher (same LUKS1 image) | read vs qemu-img | write vs qemu-img | NBD read vs qemu-nbd | NBD write vs qemu-nbd | NBD read vs nbdkit-luks | NBD write vs nbdkit-luks |"
echo "|---|---|---|---|---|---|---|"
for name in xts essiv; do
  b="$name.luks1.blkcrypt"
  echo "| $name | $(cell "$b.read" "$name.luks1.qemu-img.read") | $(cell "$b.write" "$name.luks1.qemu-img.write") | $(cell "$b.nbdread" "$name.luks1.qemu-nbd.nbdread") | $(cell "$b.nbdwrite" "$name.luks1.qemu-nbd.nbdwrite") | $(cell "$b.nbdread" "$name.luks1.nbdkit-luks.nbdread") | $(cell "$b.nbdwrite" "$name.luks1.nbdkit-luks.nbdwrite") |"
done
echo
echo "(${size_mib} MiB volumes in $(df --output=fstype "$work" | tail -1) at $(dirname "$work"); best of $rounds rounds; MB/s = 10^6 bytes/s; every figure includes the tool's start and key unlock, pbkdf2 at 1000 iterations for blkcrypt's volumes and qemu-img's iter-time=100 for the LUKS1 images; nbdcopy --flush for writes; qemu-nbd with --shared=8 so that it advertises multi-conn, as in the NBD section.)"
if [ -n "${BENCH_RESULTS:-}" ]; then
  {
    for k in "${!best[@]}"; do echo "path.mbs.$k $(mbs "$k")"; done
    for name in xts essiv; do
      b="$name.luks1.blkcrypt"
      for op in read write; do
        r=$(ratio "$b.$op" "$name.luks1.qemu-img.$op"); [ -n "$r" ] && echo "path.$name.$op.qemu-img $r"
      done
      for op in nbdread nbdwrite; do
        r=$(ratio "$b.$op" "$name.luks1.qemu-nbd.$op"); [ -n "$r" ] && echo "path.$name.$op.qemu-nbd $r"
        r=$(ratio "$b.$op" "$name.luks1.nbdkit-luks.$op"); [ -n "$r" ] && echo "path.$name.$op.nbdkit-luks $r"
      done
    done
  } >> "$BENCH_RESULTS"
fi
exit 0
