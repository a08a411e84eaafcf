#!/usr/bin/env bash
# Builds gcm_peer (gcm_peer.c): the Linux kernel's VAES/VPCLMULQDQ AES-GCM,
# arch/x86/crypto/aes-gcm-avx10-x86_64.S (Linux 6.11+, Apache-2.0 OR
# BSD-2-Clause), assembled as is in userspace, and OpenSSL 3's EVP beside
# it, then checks both against OpenSSL. Prints the binary's path.
#
# The kernel file is not in this repository: it is taken at build time from
# Debian's linux-source-6.12 package (apt-get download, no install) and kept
# in $PEER_CACHE (default ~/.cache/blkcrypt-peers). Needs gcc, libssl-dev, xz.
#   B=$(bench/peers/gcm/build.sh) && $B test && $B bench 256 4096 0.5
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PEER_CACHE:-$HOME/.cache/blkcrypt-peers}
out=${GCM_PEER_BUILD:-$cache/gcm}
src=$cache/linux-6.12/aes-gcm-avx10-x86_64.S
mkdir -p "$out" "$(dirname "$src")"
if [ ! -s "$src" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -q linux-source-6.12 >/dev/null 2>&1) ||
    { echo "cannot download Debian's linux-source-6.12 (the kernel's aes-gcm-avx10-x86_64.S)" >&2; exit 1; }
  dpkg-deb --fsys-tarfile "$tmp"/linux-source-6.12_*.deb | tar -xO --wildcards '*/linux-source-6.12.tar.xz' |
    xz -dc | tar -xO linux-source-6.12/arch/x86/crypto/aes-gcm-avx10-x86_64.S >"$src.tmp"
  mv "$src.tmp" "$src"
fi
gcc -c -Wa,--noexecstack -I "$here/include" "$src" -o "$out/aes-gcm-avx10.o"
gcc -O2 -Wall -o "$out/gcm_peer" "$here/gcm_peer.c" "$out/aes-gcm-avx10.o" -lcrypto
"$out/gcm_peer" test >"$out/test_output.txt" 2>&1 || true
grep -q "RESULT: ALL OK" "$out/test_output.txt" ||
  { tail -5 "$out/test_output.txt" >&2; echo "gcm_peer failed its check against OpenSSL" >&2; exit 1; }
echo "$out/gcm_peer"
