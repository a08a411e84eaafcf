#!/usr/bin/env bash
# The full test suite: installs the peer tools the tests use when missing,
# then runs every test, the race detector over the concurrent packages and
# each fuzz target for a bounded time. `make test` and .ci/run call this.
set -euo pipefail
cd "$(dirname "$0")/.."
# Each section's heading says when it started (seconds since the suite
# began), so a run's log shows where the 40-minute budget goes.
section() { echo "== $* [+${SECONDS}s]"; }

need=()
command -v cryptsetup >/dev/null || need+=(cryptsetup-bin)
command -v qemu-img   >/dev/null || need+=(qemu-utils)
command -v nbdkit     >/dev/null || need+=(nbdkit)
command -v nbdinfo    >/dev/null || need+=(libnbd-bin)
command -v nbdcopy    >/dev/null || need+=(libnbd-bin)
command -v openssl    >/dev/null || need+=(openssl)
command -v xz         >/dev/null || need+=(xz-utils)
command -v blkid      >/dev/null || need+=(util-linux)
command -v fusermount3 >/dev/null || need+=(fuse3)         # blkcrypt mount's tests (internal/cli/mount_test.go)
command -v gcc        >/dev/null || need+=(gcc)
[ -f /usr/include/openssl/evp.h ] || need+=(libssl-dev)   # the OpenSSL oracle (internal/oracle)
command -v aespipe    >/dev/null || need+=(aespipe)       # loop-AES known answers
command -v qemu-system-x86_64 >/dev/null || need+=(qemu-system-x86)  # the kernel harness (test/kernel)
command -v nbd-client >/dev/null || need+=(nbd-client)       # the kernel's NBD client in the guest (test/kernel)
command -v tmux       >/dev/null || need+=(tmux)          # the CLI's terminal tests (prompts, progress)
command -v groff      >/dev/null || need+=(groff-base)    # the man page check
command -v zsh        >/dev/null || need+=(zsh)           # the completion checks
command -v fish       >/dev/null || need+=(fish)
# The Ceph RBD tests (internal/cephtest): a single-node cluster, qemu's rbd driver.
command -v ceph-mon   >/dev/null || need+=(ceph-mon)
command -v ceph-osd   >/dev/null || need+=(ceph-osd)
command -v rbd        >/dev/null || need+=(ceph-common)
command -v uuidgen    >/dev/null || need+=(uuid-runtime)
compgen -G '/usr/lib/*/qemu/block-rbd.so' >/dev/null || need+=(qemu-block-extra)  # qemu's rbd driver
[ -f /usr/include/rbd/librbd.h ] || need+=(librbd-dev)  # the native rbd: device (-tags ceph)
# Disk images as they are (partition, lvm): the tables, LVM and filesystems
# are made by the real tools and judged by them.
command -v sgdisk     >/dev/null || need+=(gdisk)
command -v sfdisk     >/dev/null || need+=(fdisk)
command -v losetup    >/dev/null || need+=(mount)
command -v pvcreate   >/dev/null || need+=(lvm2)
command -v mkfs.vfat  >/dev/null || need+=(dosfstools)
command -v mcopy      >/dev/null || need+=(mtools)
command -v mkntfs     >/dev/null || need+=(ntfs-3g)
command -v debugfs    >/dev/null || need+=(e2fsprogs)
command -v mkfs.xfs   >/dev/null || need+=(xfsprogs)        # fsys/probe: blkid's xfs and btrfs
command -v mkfs.btrfs >/dev/null || need+=(btrfs-progs)
# Tokens (token): a software TPM, tpm2-tools (the judge's unsealer) and
# systemd-cryptenroll, which enrolls on an image file over swtpm.
command -v swtpm      >/dev/null || need+=(swtpm swtpm-tools)
command -v tpm2_unseal >/dev/null || need+=(tpm2-tools)
command -v systemd-cryptenroll >/dev/null || need+=(systemd)
# systemd-fido2 tokens (token, test/kernel's TestFIDO2Guest): libfido2, which
# systemd-cryptenroll, systemd-cryptsetup and the token plugin load.
compgen -G '/usr/lib/*/libfido2.so.1' >/dev/null || need+=(libfido2-1)
# clevis tokens (token): clevis luks bind/pass with the tang, tpm2 and sss pins,
# Debian's tang server run under socat on loopback, and jose.
command -v clevis-luks-bind >/dev/null || need+=(clevis clevis-luks)
command -v clevis-encrypt-tpm2 >/dev/null || need+=(clevis-tpm2)
[ -x /usr/libexec/tangd ] || need+=(tang)
command -v luksmeta   >/dev/null || need+=(luksmeta)   # LUKS1 clevis bindings (token/luksmeta_test.go)
command -v socat      >/dev/null || need+=(socat)
command -v jose       >/dev/null || need+=(jose)
compgen -G '/usr/lib/*/libtss2-tcti-swtpm.so*' >/dev/null || need+=(libtss2-tcti-swtpm0)
command -v python3    >/dev/null || need+=(python3)
# systemd-pkcs11 tokens (-tags pkcs11): a softhsm2 token, OpenSC's pkcs11-tool as judge, p11-kit's proxy module.
command -v softhsm2-util >/dev/null || need+=(softhsm2)
command -v pkcs11-tool >/dev/null || need+=(opensc)
compgen -G '/usr/lib/*/p11-kit-proxy.so' >/dev/null || need+=(p11-kit-modules)
command -v qemu-aarch64-static >/dev/null || need+=(qemu-user-static)  # the arm64 kernels under qemu-user (internal/aes ce)
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
export BLKCRYPT_VECTORS="${BLKCRYPT_VECTORS:-$BLKCRYPT_FIXTURES/../../vectors}"
export GOFLAGS="${GOFLAGS:-}"
# The full suite is the CI gate wherever it runs: a test whose tool or
# fixture is missing fails instead of skipping (internal/testenv).
export CI="${CI:-true}"

# Every archive the fixture manifest names must be there, whole, before any
# test starts: a missing or truncated fixture is reported once, here, with
# the way to fix it, instead of as a hundred failing tests.
section "fixtures ($BLKCRYPT_FIXTURES)"
manifest="$BLKCRYPT_VECTORS/fixture_manifest.json"
if [ ! -f "$manifest" ]; then
  echo "fixture manifest $manifest not found: set BLKCRYPT_VECTORS to shared/vectors" >&2
  exit 1
fi
bad=0 n=0
while read -r name size sum; do
  n=$((n + 1))
  f="$BLKCRYPT_FIXTURES/$name"
  if [ ! -f "$f" ]; then
    echo "fixture missing: $f" >&2; bad=1; continue
  fi
  if [ "$(stat -c %s "$f")" != "$size" ] || [ "$(sha256sum "$f" | cut -d' ' -f1)" != "$sum" ]; then
    echo "fixture damaged (size or SHA-256 differs from $manifest): $f" >&2; bad=1
  fi
done < <(awk -F'"' '/"archive":/ {a=$4} /"archive_size":/ {gsub(/[^0-9]/, "", $3); s=$3} /"archive_sha256":/ {print a, s, $4}' "$manifest")
if [ "$n" -eq 0 ]; then
  echo "no archives listed in $manifest" >&2; exit 1
fi
if [ "$bad" != 0 ]; then
  echo "cryptsetup fixtures incomplete: copy shared/fixtures/cryptsetup from the project share, or set BLKCRYPT_FIXTURES" >&2
  exit 1
fi
echo "$n archives present and intact"

# Prove the rule above: under CI, tests that need the fixtures must fail
# when the folder is absent, never pass by skipping.
section "missing fixtures fail under CI"
# Each package on its own: -failfast across packages would not start the
# later ones after the first failure.
out=$(mktemp)
for pkg in bitlk fvault2 luks2; do
  if CI=true BLKCRYPT_FIXTURES=/nonexistent BLKCRYPT_VECTORS=/nonexistent \
      go test -count=1 -failfast "./$pkg/" >"$out" 2>&1; then
    cat "$out" >&2; rm -f "$out"
    echo "CI=true BLKCRYPT_FIXTURES=/nonexistent go test ./$pkg/ passed: a test skips its fixtures" >&2
    exit 1
  fi
  if ! grep -q 'CI is set: a missing prerequisite fails the test' "$out"; then
    cat "$out" >&2; rm -f "$out"
    echo "./$pkg/ failed without its fixtures, but not for the missing fixtures" >&2
    exit 1
  fi
done
rm -f "$out"
echo "ok: bitlk, fvault2 and luks2 fail without their fixtures"

section "go vet"
go vet ./...
section "gofmt"
bad=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$bad" ]; then echo "gofmt needed: $bad" >&2; exit 1; fi

section "go test"
# internal/cephtest is in ./...: one single-node Ceph cluster for the whole
# package (about 10 s to start, about 2 minutes of tests in all), stopped
# by its TestMain or, should the binary die first, by its watchdog.
# The longest packages first (go test starts them in the order given, two
# at a time on 2 cores), so that no long one starts last and runs alone.
m=$(go list -m)
first=("$m/test/kernel" "$m/luks2" "$m/internal/cli" "$m" "$m/luks1" "$m/internal/cephtest")
go test -count=1 -timeout 30m "${first[@]}" $(go list ./... | grep -vxF -f <(printf '%s\n' "${first[@]}"))
section "go test -tags ceph (the native rbd: device through librbd's C API)"
go test -count=1 -timeout 10m -tags ceph -run 'Native|ParseSpec' ./rbd/ ./internal/cephtest/
section "go test -tags pkcs11 (systemd-pkcs11 tokens through a cgo PKCS#11 binding, over softhsm2)"
go vet -tags pkcs11 ./token/ ./internal/cli/
go test -count=1 -tags pkcs11 -run 'PKCS11' ./token/ ./internal/cli/
section "examples (an outside module over the public API only)"
(cd examples && go vet ./... && go test -count=1 -timeout 10m ./...)
section "generated S-box circuits (the searches of internal/serpent/_asm)"
BLKCRYPT_SLOW_GENERATORS=1 go test -count=1 -run '^TestGeneratedCircuits$' ./internal/serpent/
section "go test -tags purego (generic fallbacks)"
go test -count=1 -tags purego ./internal/aes/... ./internal/serpent/... ./internal/adiantum/... ./capi/... ./sector/... ./internal/gcm/... ./internal/aead/...
section "arm64 under qemu-user (internal/aes ce kernels, and the purego fallback)"
# No arm64 machine: the ce kernels run under qemu-aarch64-static through
# the same conformance suite, testmgr vectors and fuzz seeds as the amd64
# ones. BLKCRYPT_TEST_AES_IMPLS makes TestImplSelection fail if the
# implementation list is not the expected one (ce missing would pass every
# test by skipping it). sector's longest tests are left to the amd64 run.
GOARCH=arm64 go vet ./...
GOOS=darwin GOARCH=arm64 go build ./...
arm64_test() { GOARCH=arm64 go test -exec qemu-aarch64-static -short -count=1 "$@"; }
sector_run='^(TestOpenSSLOracle|TestCryptsetupSectorIV|TestBadInput|TestKeyCount)$'
BLKCRYPT_TEST_AES_IMPLS=ce,generic arm64_test ./internal/aes/... ./capi/...
BLKCRYPT_TEST_AES_IMPLS=ce,generic arm64_test -run "$sector_run" ./sector/...
# GODEBUG through qemu's -E, so that only the arm64 test binary sees it.
BLKCRYPT_TEST_AES_IMPLS=generic GOARCH=arm64 go test -exec 'qemu-aarch64-static -E GODEBUG=cpu.pmull=off' \
  -short -count=1 -run '^(TestImplSelection|TestXTS|TestCBC)$' ./internal/aes/
# The generic Go code is the amd64 purego run's; here the arm64 build of it.
BLKCRYPT_TEST_AES_IMPLS=generic arm64_test -tags purego -run '^(TestImpls|TestImplSelection|TestXTS|TestCBC|TestKAT.*|Fuzz.*)$' ./internal/aes/...
BLKCRYPT_TEST_AES_IMPLS=generic arm64_test -tags purego ./capi/...
BLKCRYPT_TEST_AES_IMPLS=generic arm64_test -tags purego -run '^(TestCryptsetupSectorIV|TestBadInput|TestKeyCount)$' ./sector/...
section "go test -race (concurrent packages)"
go test -count=1 -race -timeout 15m ./sector/... ./nbd/... .

section "fuzz (bounded)"
# Go 1.26's fuzz coordinator can report a bare "context deadline exceeded" when
# -fuzztime expires while a worker is mid-call (go.dev/issue/75804, fixed in
# Go 1.27). That is not a finding: Go writes every real failing input to
# testdata/fuzz/<target>/. A run that fails with that message and writes no
# new input is repeated (twice at most); anything else fails the suite.
fuzz_one() {
  local pkg=$1 dir=$2 f=$3 try out before after
  for try in 1 2 3; do
    before=$(ls "$dir/testdata/fuzz/$f" 2>/dev/null | sort || true)
    out=$(mktemp)
    if go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" -fuzzminimizetime 200x "$pkg" 2>&1 | tee "$out"; then
      rm -f "$out"; return 0
    fi
    after=$(ls "$dir/testdata/fuzz/$f" 2>/dev/null | sort || true)
    if [ "$before" != "$after" ] || ! grep -q '^    context deadline exceeded$' "$out"; then
      rm -f "$out"; echo "fuzz target $f failed (see the input written under $dir/testdata/fuzz/$f)" >&2; return 1
    fi
    rm -f "$out"
    echo "-- $f: fuzz coordinator deadline race (go.dev/issue/75804), no failing input written; run $((try+1))"
  done
  echo "fuzz target $f hit the coordinator deadline race three times" >&2
  return 1
}
# Every Fuzz* target in the repo runs. The fuzzing time is a budget shared by
# all of them (FUZZ_BUDGET seconds, default 520: the suite must stay under 40
# minutes on 2 cores; on the idle Zen 5 machine of 2026-12-02 everything
# before this step took 27 minutes and each target costs about 2 s more than
# its fuzzing time to build, start and replay its corpus), never less than 6 s
# a target, so that a new target costs the others a little time instead of
# growing the run; FUZZTIME set gives every target that time instead.
targets=()
for pkg in $(go list ./...); do
  dir=$(go list -f '{{.Dir}}' "$pkg")
  for f in $(grep -ho '^func Fuzz[A-Za-z0-9_]*' "$dir"/*_test.go 2>/dev/null | sed 's/^func //' | sort -u); do
    targets+=("$pkg $dir $f")
  done
done
budget="${FUZZ_BUDGET:-520}"
per=$(( budget / ${#targets[@]} ))
[ "$per" -ge 6 ] || per=6
fuzztime="${FUZZTIME:-${per}s}"
echo "${#targets[@]} fuzz targets, $fuzztime each"
for t in "${targets[@]}"; do
  read -r pkg dir f <<<"$t"
  echo "-- $pkg $f"
  fuzz_one "$pkg" "$dir" "$f"
done
section "all tests passed"
