#!/usr/bin/env bash
# Authenticated sectors (issue #29): per-sector AEAD encryption of
# 4096-byte sectors against OpenSSL 3, and a LUKS2 --integrity volume's
# sequential read and write against a plain LUKS2 volume's.
#
# Per sector: sector.BenchmarkAEAD (sector/aead_test.go) encrypts 16
# sectors of 4096 bytes per call, each with its own IV, associated data
# (sector number and IV) and tag, as dm-crypt does: our AES-256-GCM (internal/gcm:
# VAES and VPCLMULQDQ on zmm), AEGIS-128 (internal/aead), ChaCha20-Poly1305
# (x/crypto), authenc hmac(sha256) over AES-256-XTS and over
# AES-256-CBC-ESSIV. OpenSSL 3 is `openssl speed -aead -evp CIPHER -bytes
# 4096 -elapsed`: one 4096-byte record per call with its own IV, 13 bytes
# of associated data and a tag (its TLS-like sequence), i.e. the same
# per-sector work. The kernel's own AES-GCM, aes-gcm-avx10-x86_64.S
# (Linux 6.11+, VAES and VPCLMULQDQ on 512- and 256-bit vectors), runs in
# userspace through bench/peers/gcm: one 4096-byte sector per call as the
# kernel's glue drives it, 20 bytes of associated data as dm-crypt's. The
# kernel's AEGIS-128, aegis128-aesni-asm.S (Linux 6.12, AES-NI on 128-bit
# vectors), runs the same way through bench/peers/aegis, checked against
# the kernel's own aegis128 test vectors: one 4096-byte sector per call, a
# 16-byte IV, 24 bytes of associated data (sector number and IV) and a
# 16-byte tag, as dm-crypt's aegis128-random. All take turns, $ROUNDS
# rounds; medians.
#
# Volume: BenchmarkIntegrityVolume (volume_aead_bench_test.go): sequential
# 1 MiB reads and writes of a 64 MiB LUKS2 volume in a file on tmpfs,
# 4096-byte sectors: plain aes-xts-plain64 against aes-gcm-random with
# integrity aead and aes-xts-plain64 with hmac-sha256, both over
# dm-integrity in journal mode (the default, as the kernel's: every write
# goes to the journal first, then in place).
#
# Prints Markdown; with BENCH_RESULTS set, appends "key value" lines.
#   bench/aead.sh   (ROUNDS, BENCHTIME, OSSL_SECS in the environment)
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
rounds=${ROUNDS:-3}
benchtime=${BENCHTIME:-1s}
ossl_secs=${OSSL_SECS:-1}
work=$(bench_workdir aead)
trap 'rm -rf "$work"' EXIT
openssl=${OPENSSL:-openssl}

go test -c -o "$work/sector.test" ./sector >/dev/null
# The kernel peer: built and checked against OpenSSL, or its row says why not.
kpeer_bin=$(bench/peers/gcm/build.sh 2>"$work/kpeer.err") || kpeer_bin=""
# The kernel's AEGIS-128: built and checked against the kernel's test
# vectors, or its row says why not.
kaegis_bin=$(bench/peers/aegis/build.sh 2>"$work/kaegis.err") || kaegis_bin=""
go test -c -o "$work/volume.test" . >/dev/null

# gobench BINARY PATTERN OUT: one round, appending "case MB/s" lines.
gobench() {
  (cd "$work" && TMPDIR="$work" "./$1" -test.run XXX -test.bench "$2" -test.benchtime "$benchtime" 2>/dev/null) |
    awk '/^Benchmark/{for(i=1;i<=NF;i++) if($(i+1)=="MB/s"){n=$1; sub(/-[0-9]+$/,"",n); print n, $i}}' >>"$work/$3"
}
# ossl CIPHER: one round of openssl speed, appending "ossl/CIPHER MB/s".
ossl() {
  "$openssl" speed -mr -elapsed -aead -evp "$1" -bytes 4096 -seconds "$ossl_secs" 2>/dev/null |
    awk -F: -v c="$1" '$1=="+F"{printf "ossl/%s %.1f\n", c, $4/1e6}' >>"$work/aead"
}
# kpeer: one round of the kernel's AES-256-GCM, appending "kgcm/IMPL MB/s".
kpeer() {
  [ -n "$kpeer_bin" ] || return 0
  "$kpeer_bin" bench 256 4096 "$ossl_secs" | awk '$1=="RESULT"{split($2,i,"="); split($5,m,"="); if(i[2]!="o3evp") print "kgcm/" i[2], m[2]}' >>"$work/aead"
}
# kaegis: one round of the kernel's AEGIS-128, appending "kaegis MB/s".
kaegis() {
  [ -n "$kaegis_bin" ] || return 0
  "$kaegis_bin" bench 128 4096 "$ossl_secs" | awk '$1=="RESULT"{split($5,m,"="); print "kaegis", m[2]}' >>"$work/aead"
}
for r in $(seq "$rounds"); do
  if [ $((r % 2)) = 1 ]; then
    gobench sector.test '^BenchmarkAEAD$' aead; ossl aes-256-gcm; ossl chacha20-poly1305; kpeer; kaegis
  else
    kaegis; kpeer; ossl chacha20-poly1305; ossl aes-256-gcm; gobench sector.test '^BenchmarkAEAD$' aead
  fi
  gobench volume.test '^BenchmarkIntegrityVolume$' volume
done
median() { # median CASE FILE
  awk -v c="$1" '$1==c{print $2}' "$2" | sort -g | awk '{a[NR]=$1} END{if(NR==0){print ""; exit} if(NR%2) print a[(NR+1)/2]; else printf "%.1f\n", (a[NR/2]+a[NR/2+1])/2}'
}
ratio() { [ -n "$1" ] && [ -n "$2" ] && awk "BEGIN{printf \"%.2f\", $1/$2}" || true; }
result() { [ -n "${BENCH_RESULTS:-}" ] && [ -n "$2" ] && echo "$1 $2" >>"$BENCH_RESULTS" || true; }
met() { [ -n "$1" ] || { echo "n/a"; return; }; awk "BEGIN{print ($1 >= $2) ? \"met\" : \"missed\"}"; }

gcm=$(median BenchmarkAEAD/aes-gcm-random+aead/key256 "$work/aead")
aegis=$(median BenchmarkAEAD/aegis128-random+aead/key128 "$work/aead")
chacha=$(median BenchmarkAEAD/chacha20-random+poly1305/key256 "$work/aead")
xtsmac=$(median 'BenchmarkAEAD/aes-xts-plain64+hmac(sha256)/key768' "$work/aead")
essivmac=$(median 'BenchmarkAEAD/aes-cbc-essiv:sha256+hmac(sha256)/key512' "$work/aead")
ogcm=$(median ossl/aes-256-gcm "$work/aead")
ochacha=$(median ossl/chacha20-poly1305 "$work/aead")
k512=$(median kgcm/k512 "$work/aead")
k256=$(median kgcm/k256 "$work/aead")
kaegis=$(median kaegis "$work/aead")

echo "### Per-sector AEAD encryption, 4096-byte sectors ($rounds rounds each, taking turns; median MB/s)"
echo
echo "Ours: \`sector.BenchmarkAEAD\` (16 sectors a call, each its own IV, associated data and tag)."
echo "OpenSSL: \`$("$openssl" version | cut -d' ' -f1-2) speed -aead -evp CIPHER -bytes 4096 -elapsed\` (one record a call, its own IV, AAD and tag)."
echo
echo "| cipher | MB/s | against | ratio | target | |"
echo "|---|---|---|---|---|---|"
r=$(ratio "$gcm" "$ogcm"); result aead.gcm_vs_openssl3 "$r"
echo "| AES-256-GCM (ours: internal/gcm, VAES zmm) | ${gcm:-n/a} | OpenSSL 3 aes-256-gcm (${ogcm:-n/a}) | ${r:-n/a}× | ≥ 1.2× | $(met "$r" 1.2) |"
if [ -n "$kpeer_bin" ]; then
  for k in k512 k256; do
    v=${!k}; [ "$k" = k512 ] && d=512 || d=256
    r=$(ratio "$gcm" "$v"); result "aead.gcm_vs_kernel_$k" "$r"
    echo "| Linux kernel \`aes_gcm_*_vaes_avx10_$d\` (6.12, in userspace) | ${v:-n/a} | ours / kernel | ${r:-n/a}× | | |"
  done
else
  echo "| Linux kernel \`aes-gcm-avx10\` (in userspace) | n/a: $(tail -1 "$work/kpeer.err") | | | | |"
fi
r=$(ratio "$aegis" "$gcm"); result aead.aegis_vs_gcm "$r"
echo "| AEGIS-128 (internal/aead) | ${aegis:-n/a} | our AES-256-GCM | ${r:-n/a}× | ≥ 1.5× | $(met "$r" 1.5) |"
if [ -n "$kaegis_bin" ]; then
  r=$(ratio "$aegis" "$kaegis"); result aead.aegis_vs_kernel "$r"
  echo "| Linux kernel \`aegis128-aesni\` (6.12, in userspace) | ${kaegis:-n/a} | ours / kernel | ${r:-n/a}× | | |"
else
  echo "| Linux kernel \`aegis128-aesni\` (in userspace) | n/a: $(tail -1 "$work/kaegis.err") | | | | |"
fi
r=$(ratio "$chacha" "$ochacha"); result aead.chacha_vs_openssl3 "$r"
echo "| ChaCha20-Poly1305 (x/crypto) | ${chacha:-n/a} | OpenSSL 3 chacha20-poly1305 (${ochacha:-n/a}) | ${r:-n/a}× | | |"
r=$(ratio "$xtsmac" "$ogcm"); result aead.xts_hmac_vs_openssl3_gcm "$r"
echo "| authenc hmac(sha256), AES-256-XTS | ${xtsmac:-n/a} | OpenSSL 3 aes-256-gcm | ${r:-n/a}× | | |"
r=$(ratio "$essivmac" "$ogcm"); result aead.essiv_hmac_vs_openssl3_gcm "$r"
echo "| authenc hmac(sha256), AES-256-CBC-ESSIV | ${essivmac:-n/a} | OpenSSL 3 aes-256-gcm | ${r:-n/a}× | | |"
echo

echo "### A LUKS2 --integrity volume against a plain one (\`BenchmarkIntegrityVolume\`, sequential 1 MiB, median MB/s)"
echo
echo "64 MiB volumes in a file on tmpfs, 4096-byte sectors. The integrity volumes run dm-integrity in journal mode"
echo "(the default, as the kernel's): a write goes to the journal, is committed, then written in place."
echo
echo "| volume | read | read / plain | write | write / plain | target | |"
echo "|---|---|---|---|---|---|---|"
pr=$(median BenchmarkIntegrityVolume/plain-xts/read "$work/volume")
pw=$(median BenchmarkIntegrityVolume/plain-xts/write "$work/volume")
echo "| plain aes-xts-plain64 | ${pr:-n/a} | | ${pw:-n/a} | | | |"
for c in gcm-random xts-hmac-sha256; do
  rd=$(median "BenchmarkIntegrityVolume/$c/read" "$work/volume")
  wr=$(median "BenchmarkIntegrityVolume/$c/write" "$work/volume")
  rr=$(ratio "$rd" "$pr"); wrr=$(ratio "$wr" "$pw")
  key=$(echo "$c" | tr '-' '_')
  result "aead.volume_${key}_read" "$rr"
  result "aead.volume_${key}_write" "$wrr"
  verdict=n/a
  if [ -n "$rr" ] && [ -n "$wrr" ]; then
    verdict=$(awk "BEGIN{print ($rr >= 0.5 && $wrr >= 0.5) ? \"met\" : \"missed\"}")
  fi
  # The target is the AEAD volume's; hmac-sha256 is bound by SHA-256
  # (its per-sector row above), shown for what it costs.
  if [ "$c" = gcm-random ]; then
    echo "| $c (journal) | ${rd:-n/a} | ${rr:-n/a}× | ${wr:-n/a} | ${wrr:-n/a}× | ≥ 0.5× | $verdict |"
  else
    echo "| $c (journal) | ${rd:-n/a} | ${rr:-n/a}× | ${wr:-n/a} | ${wrr:-n/a}× | (SHA-256 bound) | |"
  fi
done
echo
