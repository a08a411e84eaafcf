#!/usr/bin/env bash
# Runs OpenSSL, x/crypto/xts, Go's crypto/cipher CBC and blkcrypt side by
# side in one process run, prints the Markdown tables for BENCHMARKS.md and
# writes bench/throughput.svg (MB/s against block size), which the README
# shows.   bench/compare.sh [SECONDS_PER_POINT]
set -euo pipefail
cd "$(dirname "$0")/.."
# The XTS peers' build cache, as bench/all.sh keeps it.
export XTS_PEERS_BUILD="${XTS_PEERS_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/blkcrypt/xts-peers}"
go run ./bench/report -sec "${1:-0.5}" -svg bench/throughput.svg
