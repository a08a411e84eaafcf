#!/usr/bin/env bash
# The full test suite: installs the peer tools the tests use when missing,
# then runs every test, the race detector over the concurrent packages and
# each fuzz target for a bounded time. `make test` and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."

need=()
command -v cryptsetup >/dev/null || need+=(cryptsetup-bin)
command -v qemu-img   >/dev/null || need+=(qemu-utils)
command -v nbdkit     >/dev/null || need+=(nbdkit)
command -v nbdinfo    >/dev/null || need+=(libnbd-bin)
command -v nbdcopy    >/dev/null || need+=(libnbd-bin)
command -v openssl    >/dev/null || need+=(openssl)
command -v xz         >/dev/null || need+=(xz-utils)
command -v blkid      >/dev/null || need+=(util-linux)
command -v gcc        >/dev/null || need+=(gcc)
[ -f /usr/include/openssl/evp.h ] || need+=(libssl-dev)   # the OpenSSL oracle (internal/oracle)
command -v aespipe    >/dev/null || need+=(aespipe)       # loop-AES known answers
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)  # the kernel harness (test/kernel)
if [ ${#need[@]} -gt 0 ]; then
  echo "== installing: ${need[*]}"
  if [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "missing tools (${need[*]}); run as root or install them" >&2
    exit 1
  fi
fi

export BLKCRYPT_FIXTURES="${BLKCRYPT_FIXTURES:-$(cd .. && pwd)/shared/fixtures/cryptsetup}"
export GOFLAGS="${GOFLAGS:-}"

echo "== go vet"
go vet ./...
echo "== gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt needed: $bad" >&2; exit 1; fi

echo "== go test"
go test -count=1 -timeout 20m ./...
echo "== go test -tags purego (generic fallbacks)"
go test -count=1 -tags purego ./internal/aes/... ./capi/... ./sector/...
echo "== go test -race (concurrent packages)"
go test -count=1 -race -timeout 15m ./sector/... ./nbd/... .

echo "== fuzz (bounded)"
fuzztime="${FUZZTIME:-20s}"
# Every Fuzz* target in the repo, each for $fuzztime.
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    echo "-- $pkg $f"
    go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" -fuzzminimizetime 200x "$pkg"
  done
done
echo "== all tests passed"
