#!/usr/bin/env bash
# Builds aegis_peer (aegis_peer.c): the Linux kernel's AES-NI AEGIS-128,
# arch/x86/crypto/aegis128-aesni-asm.S (Linux 6.12, GPL-2.0-only; the
# aegis128-aesni driver dm-crypt's capi:aegis128-random gets on x86),
# assembled as is in userspace, then checks it against the kernel's own
# aegis128 test vectors (aegis128_tv_template in crypto/testmgr.h). Prints
# the binary's path.
#
# The kernel files are not in this repository: they are taken at build time
# from Debian's linux-source-6.12 package (apt-get download, no install), as
# bench/peers/gcm/build.sh does, and kept in $PEER_CACHE (default
# ~/.cache/blkcrypt-peers). Needs gcc, xz.
#   B=$(bench/peers/aegis/build.sh) && $B test && $B bench 128 4096 0.5
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
cache=${PEER_CACHE:-$HOME/.cache/blkcrypt-peers}
out=${AEGIS_PEER_BUILD:-$cache/aegis}
ksrc=$cache/linux-6.12
asm=$ksrc/aegis128-aesni-asm.S
testmgr=$ksrc/testmgr.h
mkdir -p "$out" "$ksrc"
if [ ! -s "$asm" ] || [ ! -s "$testmgr" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && apt-get download -q linux-source-6.12 >/dev/null 2>&1) ||
    { echo "cannot download Debian's linux-source-6.12 (the kernel's aegis128-aesni-asm.S)" >&2; exit 1; }
  # One pass through the tarball for both files.
  dpkg-deb --fsys-tarfile "$tmp"/linux-source-6.12_*.deb | tar -xO --wildcards '*/linux-source-6.12.tar.xz' |
    xz -dc | tar -x -C "$tmp" linux-source-6.12/arch/x86/crypto/aegis128-aesni-asm.S linux-source-6.12/crypto/testmgr.h
  mv "$tmp/linux-source-6.12/arch/x86/crypto/aegis128-aesni-asm.S" "$asm"
  mv "$tmp/linux-source-6.12/crypto/testmgr.h" "$testmgr"
fi
# The vectors: the aegis128_tv_template array, cut out of testmgr.h as is.
awk '/^static const struct aead_testvec aegis128_tv_template\[\] = \{/{p=1} p{print} p&&/^};/{exit}' "$testmgr" >"$out/aegis128_tv.h"
grep -q '^};' "$out/aegis128_tv.h" ||
  { echo "no aegis128_tv_template in the kernel's crypto/testmgr.h" >&2; exit 1; }
gcc -c -Wa,--noexecstack -I "$here/include" "$asm" -o "$out/aegis128-aesni.o"
gcc -O2 -Wall -I "$out" -o "$out/aegis_peer" "$here/aegis_peer.c" "$out/aegis128-aesni.o"
"$out/aegis_peer" test >"$out/test_output.txt" 2>&1 || true
grep -q "RESULT: ALL OK" "$out/test_output.txt" ||
  { tail -5 "$out/test_output.txt" >&2; echo "aegis_peer failed the kernel's aegis128 test vectors" >&2; exit 1; }
echo "$out/aegis_peer"
