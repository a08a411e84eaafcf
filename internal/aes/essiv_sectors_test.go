package aes

import (
	"bytes"
	stdaes "crypto/aes"
	"crypto/cipher"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestESSIVCBCSectors checks the fused ESSIV batch against crypto/aes for
// the lane groupings of the multi-buffer kernels (16 per call, remainders)
// and the sector sizes that change their memory pattern (4 KiB multiples
// delay half the lanes; 4160 does not).
func TestESSIVCBCSectors(t *testing.T) {
	forEachImpl(t, checkESSIVCBCSectors)
}

func checkESSIVCBCSectors(t *testing.T, impl string) {
	r := rand.New(rand.NewPCG(27, 28))
	for _, ss := range []int{16, 512, 2048, 4096, 4160, 8192} {
		for _, nsec := range []int{1, 15, 16, 17, 32, 33, 48, 64, 80, 97} {
			key := randBytes(r, keySizes[nsec%3])
			ivKeyBytes := randBytes(r, keySizes[(nsec+ss/16)%3])
			b := mustNew(t, impl, key)
			ivKey := mustNew(t, impl, ivKeyBytes)
			ref, _ := stdaes.NewCipher(key)
			ivRef, _ := stdaes.NewCipher(ivKeyBytes)
			pt := randBytes(r, ss*nsec)
			ivs := randBytes(r, 16*nsec)
			want := make([]byte, len(pt))
			for s := 0; s < nsec; s++ {
				var civ [16]byte
				ivRef.Encrypt(civ[:], ivs[16*s:])
				cipher.NewCBCEncrypter(ref, civ[:]).CryptBlocks(want[s*ss:(s+1)*ss], pt[s*ss:(s+1)*ss])
			}
			for _, inPlace := range []bool{false, true} {
				dst, src := buffers(r, pt, inPlace)
				b.EncryptESSIVCBCSectors(ivKey, dst, src, ss, slices.Clone(ivs)) // ivs is scratch
				if !bytes.Equal(dst, want) {
					t.Fatalf("EncryptESSIVCBCSectors %d sectors of %d, in place %v: mismatch", nsec, ss, inPlace)
				}
			}
		}
	}
}

// TestESSIVCBCSectorsMixedImpls: a data key and an IV key of different
// implementations take the unfused path and still agree.
func TestESSIVCBCSectorsMixedImpls(t *testing.T) {
	impls := Impls()
	r := rand.New(rand.NewPCG(29, 30))
	key, ivKeyBytes := randBytes(r, 32), randBytes(r, 32)
	pt := randBytes(r, 512*32)
	ivs := randBytes(r, 16*32)
	want := make([]byte, len(pt))
	mustNew(t, "generic", key).EncryptESSIVCBCSectors(mustNew(t, "generic", ivKeyBytes), want, pt, 512, slices.Clone(ivs))
	for _, a := range impls {
		for _, c := range impls {
			got := make([]byte, len(pt))
			mustNew(t, a, key).EncryptESSIVCBCSectors(mustNew(t, c, ivKeyBytes), got, pt, 512, slices.Clone(ivs))
			if !bytes.Equal(got, want) {
				t.Errorf("data key %s, IV key %s: mismatch", a, c)
			}
		}
	}
}
