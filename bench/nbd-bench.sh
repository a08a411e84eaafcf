#!/bin/sh
# Benchmarks of the NBD server (package nbd): per-request cost and
# allocations with a raw in-process client, and nbdcopy throughput
# (needs libnbd-bin). Usage: bench/nbd-bench.sh [benchtime]
set -eu
cd "$(dirname "$0")/.."
exec go test -run '^$' -bench . -benchmem -benchtime "${1:-2s}" ./nbd/
