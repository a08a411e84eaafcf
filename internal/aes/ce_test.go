package aes

import (
	stdaes "crypto/aes"
	"crypto/subtle"
	"encoding/binary"
	"os"
	"runtime"
	"strconv"
	"strings"
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

// insnBegin and insnEnd mark the measured part of TestInsnWorkload for
// bench/arm64-insn.sh, which counts the instructions qemu-user executes
// between them on the workload's thread.
//
//go:noinline
func insnBegin() {}

//go:noinline
func insnEnd() {}

// TestInsnWorkload is the workload of bench/arm64-insn.sh, run only when
// BLKCRYPT_INSN_WORKLOAD is "IMPL KEYBYTES enc|dec UNITS UNITSIZE": UNITS
// XTS data units of UNITSIZE bytes, each with its plain64 IV, through
// XTS.Encrypt or Decrypt of IMPL, or, for IMPL "crypto/aes", the loop of
// capi's xts template over crypto/aes's cipher.Block (xts(aes-stdlib), what
// arm64 ran before the ce kernels): per block a crypto/subtle XOR, one
// Encrypt or Decrypt call and another XOR, and the 64-bit tweak doubling.
func TestInsnWorkload(t *testing.T) {
	spec := strings.Fields(os.Getenv("BLKCRYPT_INSN_WORKLOAD"))
	if len(spec) == 0 {
		t.Skip("the workload of bench/arm64-insn.sh; set BLKCRYPT_INSN_WORKLOAD to run it")
	}
	if len(spec) != 5 {
		t.Fatalf("BLKCRYPT_INSN_WORKLOAD=%q: want IMPL KEYBYTES enc|dec UNITS UNITSIZE", spec)
	}
	ks, err1 := strconv.Atoi(spec[1])
	units, err2 := strconv.Atoi(spec[3])
	size, err3 := strconv.Atoi(spec[4])
	enc := spec[2] == "enc"
	if err1 != nil || err2 != nil || err3 != nil || (!enc && spec[2] != "dec") {
		t.Fatalf("BLKCRYPT_INSN_WORKLOAD=%q: bad number or operation", spec)
	}
	key := make([]byte, ks)
	for i := range key {
		key[i] = byte(i * 13)
	}
	buf := make([]byte, size)
	var op func(sector uint64)
	if spec[0] == "crypto/aes" {
		k1, err1 := stdaes.NewCipher(key[:ks/2])
		k2, err2 := stdaes.NewCipher(key[ks/2:])
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		op = func(sector uint64) {
			var tw [16]byte
			binary.LittleEndian.PutUint64(tw[:], sector)
			k2.Encrypt(tw[:], tw[:])
			for i := 0; i < len(buf); i += 16 {
				d := buf[i : i+16]
				subtle.XORBytes(d, d, tw[:])
				if enc {
					k1.Encrypt(d, d)
				} else {
					k1.Decrypt(d, d)
				}
				subtle.XORBytes(d, d, tw[:])
				mulx(&tw)
			}
		}
	} else {
		x := xtsPair(t, spec[0], key)
		op = func(sector uint64) {
			var iv [16]byte
			binary.LittleEndian.PutUint64(iv[:], sector)
			if enc {
				x.Encrypt(buf, buf, &iv)
			} else {
				x.Decrypt(buf, buf, &iv)
			}
		}
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	op(0) // warm-up, outside the count
	insnBegin()
	for i := 0; i < units; i++ {
		op(uint64(i))
	}
	insnEnd()
}
