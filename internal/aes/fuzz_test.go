package aes

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// The fuzz targets compare every available implementation with generic.
// Inputs are shape parameters plus a seed for the random key and data, so
// short fuzz inputs reach large and odd shapes.

func fuzzImpls() []string {
	var out []string
	for _, impl := range Impls() {
		if impl != "generic" {
			out = append(out, impl)
		}
	}
	return out
}

func FuzzECB(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(1), uint8(0))
	f.Add(uint64(2), uint8(1), uint16(17), uint8(3))
	f.Add(uint64(3), uint8(2), uint16(300), uint8(15))
	f.Fuzz(func(t *testing.T, seed uint64, keySel uint8, nblocks uint16, off uint8) {
		r := rand.New(rand.NewPCG(seed, 0xec8))
		key := randBytes(r, keySizes[int(keySel)%3])
		n := 16 * (int(nblocks) % 1025)
		pt := randBytes(r, n)
		g := mustNew(t, "generic", key)
		wantEnc := make([]byte, n)
		g.EncryptECB(wantEnc, pt)
		wantDec := make([]byte, n)
		g.DecryptECB(wantDec, pt)
		for _, impl := range fuzzImpls() {
			b := mustNew(t, impl, key)
			buf := make([]byte, n+16)
			o := int(off) % 16
			got := buf[o : o+n]
			b.EncryptECB(got, pt)
			if !bytes.Equal(got, wantEnc) {
				t.Fatalf("%s EncryptECB mismatch (key %d bytes, %d blocks)", impl, len(key), n/16)
			}
			copy(got, pt)
			b.DecryptECB(got, got)
			if !bytes.Equal(got, wantDec) {
				t.Fatalf("%s DecryptECB mismatch (key %d bytes, %d blocks)", impl, len(key), n/16)
			}
		}
	})
}

func FuzzCBCSectors(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(32), uint8(1))
	f.Add(uint64(2), uint8(1), uint16(1), uint8(31))
	f.Add(uint64(3), uint8(2), uint16(256), uint8(17))
	f.Add(uint64(4), uint8(2), uint16(7), uint8(40))
	f.Fuzz(func(t *testing.T, seed uint64, keySel uint8, ssBlocks uint16, nsec uint8) {
		r := rand.New(rand.NewPCG(seed, 0xcbc))
		key := randBytes(r, keySizes[int(keySel)%3])
		ss := 16 * (1 + int(ssBlocks)%256)
		n := int(nsec) % 48
		pt := randBytes(r, n*ss)
		ivs := randBytes(r, 16*n)
		g := mustNew(t, "generic", key)
		wantEnc := make([]byte, len(pt))
		g.EncryptCBCSectors(wantEnc, pt, ss, ivs)
		wantDec := make([]byte, len(pt))
		g.DecryptCBCSectors(wantDec, pt, ss, ivs)
		var iv0 [16]byte
		copy(iv0[:], ivs)
		wantCBC := make([]byte, len(pt))
		ivw := iv0
		g.EncryptCBC(wantCBC, pt, &ivw)
		for _, impl := range fuzzImpls() {
			b := mustNew(t, impl, key)
			got := make([]byte, len(pt))
			b.EncryptCBCSectors(got, pt, ss, ivs)
			if !bytes.Equal(got, wantEnc) {
				t.Fatalf("%s EncryptCBCSectors mismatch (key %d, %d sectors of %d)", impl, len(key), n, ss)
			}
			copy(got, pt)
			b.DecryptCBCSectors(got, got, ss, ivs)
			if !bytes.Equal(got, wantDec) {
				t.Fatalf("%s DecryptCBCSectors mismatch (key %d, %d sectors of %d)", impl, len(key), n, ss)
			}
			iv := iv0
			b.EncryptCBC(got, pt, &iv)
			if !bytes.Equal(got, wantCBC) || iv != ivw {
				t.Fatalf("%s EncryptCBC mismatch (%d bytes)", impl, len(pt))
			}
			iv = iv0
			b.DecryptCBC(got, got, &iv)
			if !bytes.Equal(got, pt) || iv != ivw {
				t.Fatalf("%s DecryptCBC mismatch (%d bytes)", impl, len(pt))
			}
		}
	})
}

func FuzzXTS(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(16), uint16(512), uint8(2))
	f.Add(uint64(2), uint8(1), uint16(17), uint16(16), uint8(1))
	f.Add(uint64(3), uint8(0), uint16(4095), uint16(4096), uint8(3))
	f.Add(uint64(4), uint8(1), uint16(271), uint16(272), uint8(33))
	f.Fuzz(func(t *testing.T, seed uint64, keySel uint8, length uint16, ssBlocks uint16, nsec uint8) {
		r := rand.New(rand.NewPCG(seed, 0x7e5))
		key := randBytes(r, 2*keySizes[int(keySel)%3])
		n := 16 + int(length)%8192
		pt := randBytes(r, n)
		iv := [16]byte(randBytes(r, 16))
		g := xtsPair(t, "generic", key)
		want := make([]byte, n)
		g.Encrypt(want, pt, &iv)
		wantDec := make([]byte, n)
		g.Decrypt(wantDec, pt, &iv)

		ss := 16 * (1 + int(ssBlocks)%300)
		ns := int(nsec) % 70
		spt := randBytes(r, ss*ns)
		ivs := randBytes(r, 16*ns)
		swant := make([]byte, len(spt))
		g.EncryptSectors(swant, spt, ss, ivs)
		for _, impl := range fuzzImpls() {
			x := xtsPair(t, impl, key)
			got := make([]byte, n)
			x.Encrypt(got, pt, &iv)
			if !bytes.Equal(got, want) {
				t.Fatalf("%s XTS.Encrypt mismatch (key %d, len %d)", impl, len(key), n)
			}
			copy(got, pt)
			x.Decrypt(got, got, &iv)
			if !bytes.Equal(got, wantDec) {
				t.Fatalf("%s XTS.Decrypt mismatch (key %d, len %d)", impl, len(key), n)
			}
			sgot := make([]byte, len(spt))
			x.EncryptSectors(sgot, spt, ss, ivs)
			if !bytes.Equal(sgot, swant) {
				t.Fatalf("%s XTS.EncryptSectors mismatch (key %d, %d sectors of %d)", impl, len(key), ns, ss)
			}
			x.DecryptSectors(sgot, sgot, ss, ivs)
			if !bytes.Equal(sgot, spt) {
				t.Fatalf("%s XTS.DecryptSectors mismatch (key %d, %d sectors of %d)", impl, len(key), ns, ss)
			}
		}
	})
}

// FuzzESSIV compares the ESSIV paths with generic: one request (the IV
// encrypted in the same kernel call) and the sector batch (fused
// multi-buffer kernels for whole groups of lanes, the unfused path for the
// rest), with independent data and IV key sizes.
func FuzzESSIV(f *testing.F) {
	f.Add(uint64(1), uint8(0), uint16(32), uint8(1))
	f.Add(uint64(2), uint8(5), uint16(1), uint8(8))
	f.Add(uint64(3), uint8(7), uint16(256), uint8(17))
	f.Add(uint64(4), uint8(2), uint16(31), uint8(40))
	f.Fuzz(func(t *testing.T, seed uint64, keySel uint8, ssBlocks uint16, nsec uint8) {
		r := rand.New(rand.NewPCG(seed, 0xe551))
		key := randBytes(r, keySizes[int(keySel)%3])
		ivKeyBytes := randBytes(r, keySizes[int(keySel/3)%3])
		ss := 16 * (1 + int(ssBlocks)%256)
		n := int(nsec) % 48
		pt := randBytes(r, n*ss)
		ivs := randBytes(r, 16*n)
		g, gi := mustNew(t, "generic", key), mustNew(t, "generic", ivKeyBytes)
		want := make([]byte, len(pt))
		g.EncryptESSIVCBCSectors(gi, want, pt, ss, bytes.Clone(ivs))
		var iv [16]byte
		copy(iv[:], ivs)
		wantOne := make([]byte, len(pt))
		g.EncryptESSIVCBC(gi, wantOne, pt, &iv)
		for _, impl := range fuzzImpls() {
			b, bi := mustNew(t, impl, key), mustNew(t, impl, ivKeyBytes)
			got := make([]byte, len(pt))
			b.EncryptESSIVCBCSectors(bi, got, pt, ss, bytes.Clone(ivs))
			if !bytes.Equal(got, want) {
				t.Fatalf("%s EncryptESSIVCBCSectors mismatch (keys %d/%d, %d sectors of %d)", impl, len(key), len(ivKeyBytes), n, ss)
			}
			ivc := iv
			b.EncryptESSIVCBC(bi, got, pt, &ivc)
			if !bytes.Equal(got, wantOne) || ivc != iv {
				t.Fatalf("%s EncryptESSIVCBC mismatch (keys %d/%d, %d bytes)", impl, len(key), len(ivKeyBytes), len(pt))
			}
			b.DecryptESSIVCBC(bi, got, got, &ivc)
			if !bytes.Equal(got, pt) || ivc != iv {
				t.Fatalf("%s DecryptESSIVCBC mismatch (keys %d/%d, %d bytes)", impl, len(key), len(ivKeyBytes), len(pt))
			}
		}
	})
}
