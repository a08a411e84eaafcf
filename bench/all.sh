#!/usr/bin/env bash
# Writes the whole of BENCHMARKS.md from one run on this machine: the header
# naming the run (id, CPU, date, commit), the targets table with "met"
# computed from the measured ratios (targets are defined in
# bench/report/full.go), the commentary, and every section: ciphers, sector
# layer and engine (bench/report, with issue #14's tables against the Linux
# kernel's own AES-XTS and OpenSSL 4.0 from ../shared/peers/xts), NBD
# (bench/nbd-compare.sh), LUKS (bench/luks.sh), the whole path of a 1 GiB
# volume (bench/path.sh), reencryption against cryptsetup
# (bench/reencrypt.sh), Ceph RBD (bench/rbd.sh), TrueCrypt header search and BitLocker reads. It also saves
# the run's figures in bench/runs/<id>.json and rewrites README's figures
# block from them.
#
# A full run took 6m22s on the project's 2-core VM before the #14/#15 parts,
# which add about 6 minutes (estimated from short runs): the #14 tables about
# 2.5 (clockaes once or twice, half a minute each, then 5 rounds of
# bench_xts's 6 peers x 6 cells at 0.3 s, taking turns with ours; fused
# ESSIV's five runs and Adiantum under half a minute), the whole path about
# 2.5 (bench/path.sh: 2 rounds of about 30 reads and writes of 1 GiB),
# reencryption under 1 (bench/reencrypt.sh: 22 s a round at 1 GiB, 2 rounds).
# The rest: the cipher tables about 4 (the sweep alone is 9 series x 8 sizes
# at about a second each, since openssl speed runs at least 1 s per point),
# NBD 1-2, LUKS about 1, the TrueCrypt wrong-passphrase search about 1,
# BitLocker well under a minute, Ceph RBD (bench/rbd.sh 512: its own single-node
# cluster, 3 rounds x 3 peers) about 3. -quick took 3m12s under a load of 7.
# Run it on a quiet machine.
#
# The XTS peers are built once by ../shared/peers/xts/build.sh into
# $XTS_PEERS_BUILD (default ~/.cache/blkcrypt/xts-peers) and reused while
# that build passed its correctness check and is newer than its sources.
#
#   bench/all.sh            regenerate BENCHMARKS.md, bench/throughput.svg, README's figures
#   bench/all.sh -quick     check the generator in about 3 minutes: writes
#                           /tmp/BENCHMARKS.quick.md, saves nothing, touches no tracked file
set -euo pipefail
cd "$(dirname "$0")/.."
export BLKCRYPT_FIXTURES="${BLKCRYPT_FIXTURES:-$(cd .. && pwd)/shared/fixtures/cryptsetup}"
export XTS_PEERS="${XTS_PEERS:-$(cd .. && pwd)/shared/peers/xts}"
export XTS_PEERS_BUILD="${XTS_PEERS_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/blkcrypt/xts-peers}"
if [ "${1:-}" = "-quick" ]; then
  go run ./bench/report -full -quick -o /tmp/BENCHMARKS.quick.md
  echo "wrote /tmp/BENCHMARKS.quick.md" >&2
  exit 0
fi
go run ./bench/report -full -o BENCHMARKS.md -svg bench/throughput.svg "$@"
