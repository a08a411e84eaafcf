package aes

import (
	"testing"

	"github.com/blkcrypt/blkcrypt/internal/testenv"
)

// TestGeneratedAsmARM64 checks that aes_arm64.s is what the generator in
// _asm/arm64 produces.
//
// The ce kernels themselves run in every test of the conformance suite
// (forEachImpl lists "ce") wherever Impls has it: on arm64 with the Crypto
// Extensions, and in CI on amd64 under qemu-user (scripts/test.sh, which
// also sets BLKCRYPT_TEST_AES_IMPLS so that TestImplSelection fails if ce
// is missing there, and reruns the XTS tests with GODEBUG=cpu.pmull=off,
// where only generic may be left).
func TestGeneratedAsmARM64(t *testing.T) {
	testenv.Generated(t, "_asm/arm64", "aes_arm64.s", "internal/aes")
}
