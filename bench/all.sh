#!/usr/bin/env bash
# Writes the whole of BENCHMARKS.md from one run on this machine: the header
# naming the run (id, CPU, date, commit), the targets table with "met"
# computed from the measured ratios (targets are defined in
# bench/report/full.go), the commentary, and every section: ciphers, sector
# layer and engine (bench/report), NBD (bench/nbd-compare.sh), LUKS
# (bench/luks.sh), Ceph RBD (bench/rbd.sh), TrueCrypt header search and BitLocker reads. It also saves
# the run's figures in bench/runs/<id>.json and rewrites README's figures
# block from them.
#
# A full run takes about 8-10 minutes on the project's 2-core VM (the old
# hand-finished file said about 10): the cipher tables about 4 (the sweep
# alone is 9 series x 8 sizes at about a second each, since openssl speed
# runs at least 1 s per point; the kernel ratios 5 alternating rounds of 5
# pairs), NBD 1-2 (3 rounds x 4 servers x 3 copies of 256 MiB), LUKS about 1
# (five KDF settings benchmarked and unlocked twice, a 1 GiB volume read
# three times), the TrueCrypt wrong-passphrase search about 1 (34 s + 16 s),
# BitLocker well under a minute, Ceph RBD (bench/rbd.sh 512: its own single-node
# cluster, 3 rounds x 3 peers) about 3. -quick took 2 minutes here. Run it on a
# quiet machine.
#
#   bench/all.sh            regenerate BENCHMARKS.md, bench/throughput.svg, README's figures
#   bench/all.sh -quick     check the generator in about a minute: writes
#                           /tmp/BENCHMARKS.quick.md, saves nothing, touches no tracked file
set -euo pipefail
cd "$(dirname "$0")/.."
export BLKCRYPT_FIXTURES="${BLKCRYPT_FIXTURES:-$(cd .. && pwd)/shared/fixtures/cryptsetup}"
if [ "${1:-}" = "-quick" ]; then
  go run ./bench/report -full -quick -o /tmp/BENCHMARKS.quick.md
  echo "wrote /tmp/BENCHMARKS.quick.md" >&2
  exit 0
fi
go run ./bench/report -full -o BENCHMARKS.md -svg bench/throughput.svg "$@"
