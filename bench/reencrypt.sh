#!/usr/bin/env bash
# Issue #15's benchmark: offline reencryption of one LUKS2 image of SIZE_MIB
# on tmpfs (aes-xts-plain64, 512-bit key, 4096-byte sectors, made by blkcrypt
# format and filled with random data), by `blkcrypt reencrypt` and by
# `cryptsetup reencrypt --force-offline-reencrypt`, for the default
# resilience (checksum) and for `--resilience none`; next to blkcrypt's own
# `read` of the whole volume plus `write` of the whole volume, the rate a
# reencryption that reads and rewrites every sector once could reach if it
# overlapped nothing. Every run starts from a copy of the same image (the
# copy is not timed) and uses a cheap PBKDF (pbkdf2, 1000 iterations) for
# the new keyslot, so the figures are the data path. The first round checks
# that each tool's result still decrypts to the data written.
# Prints Markdown; with BENCH_RESULTS set, appends "key value" lines for
# bench/report. Best of ROUNDS (default 2) rounds, the tools taking turns:
# about 30 s a round at 1024 MiB on the project's 2-core VM.
#   bench/reencrypt.sh [SIZE_MIB]   (default 1024)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
size_mib=${1:-1024}
rounds=${ROUNDS:-2}
work=$(bench_workdir bench-reencrypt)
trap 'rm -rf "$work"' EXIT
command -v cryptsetup >/dev/null || { echo "bench/reencrypt.sh: cryptsetup is not installed" >&2; exit 1; }
go build -o "$work/blkcrypt" ./cmd/blkcrypt
bc="$work/blkcrypt"
printf 'bench-passphrase' > "$work/pass"
bytes=$((size_mib << 20))
kdf=(--pbkdf pbkdf2 --pbkdf-force-iterations 1000)
head -c "$bytes" /dev/urandom > "$work/src"
"$bc" format "$work/golden" --type luks2 --size $(( (size_mib + 16) << 20 )) --key-file "$work/pass" -q "${kdf[@]}"
"$bc" write "$work/golden" -i "$work/src" --key-file "$work/pass"

declare -A best
# check TOOL: the reencrypted image still holds the data written.
check() {
  if ! "$bc" read "$work/img" --key-file "$work/pass" | cmp -s - "$work/src"; then
    echo "bench/reencrypt.sh: after $1 the volume no longer decrypts to the data written" >&2
    bad[$1.$2]=1
    failed=1
  fi
}

failed=0
declare -A bad
for round in $(seq "$rounds"); do
  cp "$work/golden" "$work/img"
  keep rw.read "$(secs "$bc" read "$work/img" --key-file "$work/pass" -o /dev/null)"
  keep rw.write "$(secs "$bc" write "$work/img" -i "$work/src" --key-file "$work/pass")"
  for res in checksum none; do
    cp "$work/golden" "$work/img"
    keep "blkcrypt.$res" "$(secs "$bc" reencrypt "$work/img" -q --key-file "$work/pass" --resilience "$res" "${kdf[@]}")"
    [ "$round" = 1 ] && check blkcrypt "$res"
    cp "$work/golden" "$work/img"
    keep "cryptsetup.$res" "$(secs cryptsetup reencrypt -q --force-offline-reencrypt --key-file "$work/pass" --resilience "$res" "${kdf[@]}" "$work/img")"
    [ "$round" = 1 ] && check cryptsetup "$res"
  done
done

# A tool whose result did not decrypt gets no figure at all.
for k in "${!bad[@]}"; do unset "best[$k]"; done
mbs() { [ -n "${best[$1]:-}" ] && echo "$bytes ${best[$1]}" | awk '{printf "%.0f", $1/$2/1e6}' || echo "–"; }
# The read+write rate: the volume's bytes over the two times together.
rw=""
[ -n "${best[rw.read]:-}" ] && [ -n "${best[rw.write]:-}" ] && rw=$(echo "${best[rw.read]} ${best[rw.write]}" | awk '{printf "%.3f", $1+$2}')
best[rw]=$rw
[ -n "$rw" ] || unset 'best[rw]'
ratio() { [ -n "${best[$1]:-}" ] && [ -n "${best[$2]:-}" ] && echo "${best[$1]} ${best[$2]}" | awk '{printf "%.2f", $2/$1}' || echo ""; }
cell() { local r; r=$(ratio "$1" "$2"); [ -n "$r" ] && echo "${r}×" || echo "–"; }

echo "| resilience | blkcrypt reencrypt s | MB/s | cryptsetup reencrypt s | MB/s | blkcrypt vs cryptsetup | blkcrypt vs its read+write |"
echo "|---|---|---|---|---|---|---|"
for res in checksum none; do
  echo "| $res | ${best[blkcrypt.$res]:-–} | $(mbs "blkcrypt.$res") | ${best[cryptsetup.$res]:-–} | $(mbs "cryptsetup.$res") | $(cell "blkcrypt.$res" "cryptsetup.$res") | $(cell "blkcrypt.$res" rw) |"
done
echo
echo "blkcrypt read of the whole volume: ${best[rw.read]:-–} s ($(mbs rw.read) MB/s); write of the whole volume: ${best[rw.write]:-–} s ($(mbs rw.write) MB/s); the two together: $(mbs rw) MB/s."
echo
echo "(${size_mib} MiB LUKS2 aes-xts-plain64 image in $(df --output=fstype "$work" | tail -1) at $(dirname "$work"), $(cryptsetup --version | awk '{print $1, $2}'); best of $rounds rounds; MB/s = 10^6 bytes/s of the data area; each figure includes the tool's start and key unlock, pbkdf2 at 1000 iterations.)"
if [ -n "${BENCH_RESULTS:-}" ]; then
  {
    for res in checksum none; do
      r=$(ratio "blkcrypt.$res" "cryptsetup.$res"); [ -n "$r" ] && echo "reencrypt.vs_cryptsetup.$res $r"
      r=$(ratio "blkcrypt.$res" rw); [ -n "$r" ] && echo "reencrypt.vs_readwrite.$res $r"
      [ -n "${best[blkcrypt.$res]:-}" ] && echo "reencrypt.mbs.blkcrypt.$res $(mbs "blkcrypt.$res")"
      [ -n "${best[cryptsetup.$res]:-}" ] && echo "reencrypt.mbs.cryptsetup.$res $(mbs "cryptsetup.$res")"
    done
    [ -n "${best[rw]:-}" ] && echo "reencrypt.mbs.readwrite $(mbs rw)"
    echo "reencrypt.size_mib $size_mib"
  } >> "$BENCH_RESULTS"
fi
exit "$failed"
