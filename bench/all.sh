#!/usr/bin/env bash
# Regenerates BENCHMARKS.md: every comparison in one run on this machine.
#   bench/all.sh > BENCHMARKS.md.new && mv BENCHMARKS.md.new BENCHMARKS.md
set -euo pipefail
cd "$(dirname "$0")/.."
cat <<HDR
# blkcrypt benchmarks

Regenerate with \`bench/all.sh > BENCHMARKS.md\` (about 10 minutes). Every table below comes from
one run on one machine; the machines here are shared and noisy, so compare the **ratios** within a
table, not absolute figures across runs. The load average when this run started was
$(cut -d' ' -f1-3 /proc/loadavg).

HDR
echo "## Ciphers, sector layer and engine (\`go run ./bench/report -svg bench/throughput.svg\`)"
echo
go run ./bench/report -sec 0.5 -svg bench/throughput.svg
echo
echo "## NBD: sequential read and write through nbdcopy (\`bench/nbd-compare.sh 256\`)"
echo
bench/nbd-compare.sh 256 2>/dev/null | grep -v '^blkcrypt: serving'
echo
echo "## LUKS (\`bench/luks.sh 1024\`)"
echo
bench/luks.sh 1024 2>/dev/null
echo
echo "## Other formats"
echo
echo "TrueCrypt/VeraCrypt header search with a wrong passphrase (every hash, every cipher chain; the worst case a user waits for):"
echo
echo '```'
go test -run XXX -bench 'Search/(all|truecrypt-only)' -benchtime 1x ./tcrypt 2>&1 | grep -E '^Benchmark'
echo '```'
echo
echo "BitLocker read throughput of the fixture images (1 MiB reads; the plain-segment baseline is the same file mapped as one dm-crypt segment):"
echo
echo '```'
go test -run XXX -bench Read -benchtime 3x ./bitlk 2>&1 | grep -E '^Benchmark'
echo '```'
