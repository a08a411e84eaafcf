package aes

import (
	"bytes"
	stdaes "crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"golang.org/x/crypto/xts"
)

var allImpls = []string{"vaes-avx512", "vaes", "aesni", "ce", "generic"}

// forEachImpl runs f for every implementation, skipping (with the missing
// CPU features named) those that cannot run here.
func forEachImpl(t *testing.T, f func(t *testing.T, impl string)) {
	t.Helper()
	avail := Impls()
	for _, impl := range allImpls {
		t.Run(impl, func(t *testing.T) {
			if !slices.Contains(avail, impl) {
				t.Skipf("%s not available: CPU or build lacks %s", impl, archMissing(impl))
			}
			f(t, impl)
		})
	}
}

func mustNew(t testing.TB, impl string, key []byte) *Block {
	t.Helper()
	b, err := NewImpl(impl, key)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func randBytes(r *rand.Rand, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

var keySizes = []int{16, 24, 32}

// buffers returns a source slice holding data at an offset and a
// destination slice: the same memory for in-place runs, otherwise a
// separate buffer at another offset.
func buffers(r *rand.Rand, data []byte, inPlace bool) (dst, src []byte) {
	so := r.IntN(16)
	sb := make([]byte, len(data)+so+16)
	src = sb[so : so+len(data)]
	copy(src, data)
	if inPlace {
		return src, src
	}
	do := r.IntN(16)
	db := make([]byte, len(data)+do+16)
	return db[do : do+len(data)], src
}

func TestImpls(t *testing.T) {
	impls := Impls()
	if len(impls) == 0 || impls[len(impls)-1] != "generic" {
		t.Fatalf("Impls() = %v, want generic last", impls)
	}
	t.Logf("Impls() = %v", impls)
	b, err := New(make([]byte, 16))
	if err != nil {
		t.Fatal(err)
	}
	if b.Impl() != impls[0] {
		t.Errorf("New uses %s, want %s", b.Impl(), impls[0])
	}
	if _, err := NewImpl("nope", make([]byte, 16)); err == nil {
		t.Error("NewImpl accepted an unknown implementation")
	}
	for _, n := range []int{0, 15, 17, 33} {
		if _, err := New(make([]byte, n)); err == nil {
			t.Errorf("New accepted a %d-byte key", n)
		}
	}
	var _ cipher.Block = b
}

func TestBlock(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(1, 2))
		for i := 0; i < 300; i++ {
			key := randBytes(r, keySizes[i%3])
			b := mustNew(t, impl, key)
			ref, _ := stdaes.NewCipher(key)
			pt := randBytes(r, 16)
			want := make([]byte, 16)
			ref.Encrypt(want, pt)
			got := make([]byte, 16)
			b.Encrypt(got, pt)
			if !bytes.Equal(got, want) {
				t.Fatalf("Encrypt key %x pt %x: got %x want %x", key, pt, got, want)
			}
			b.Decrypt(got, got)
			if !bytes.Equal(got, pt) {
				t.Fatalf("Decrypt key %x: got %x want %x", key, got, pt)
			}
		}
	})
}

func TestECB(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(3, 4))
		for i := 0; i < 200; i++ {
			key := randBytes(r, keySizes[i%3])
			b := mustNew(t, impl, key)
			ref, _ := stdaes.NewCipher(key)
			n := 16 * (1 + r.IntN(300))
			if i < 40 {
				n = 16 * i
			}
			pt := randBytes(r, n)
			want := make([]byte, n)
			for j := 0; j < n; j += 16 {
				ref.Encrypt(want[j:], pt[j:])
			}
			inPlace := i%2 == 0
			dst, src := buffers(r, pt, inPlace)
			b.EncryptECB(dst, src)
			if !bytes.Equal(dst, want) {
				t.Fatalf("EncryptECB key %d bytes, %d blocks, in place %v: mismatch", len(key), n/16, inPlace)
			}
			dst2, src2 := buffers(r, want, inPlace)
			b.DecryptECB(dst2, src2)
			if !bytes.Equal(dst2, pt) {
				t.Fatalf("DecryptECB key %d bytes, %d blocks, in place %v: mismatch", len(key), n/16, inPlace)
			}
		}
	})
}

func TestCBC(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(5, 6))
		for i := 0; i < 200; i++ {
			key := randBytes(r, keySizes[i%3])
			b := mustNew(t, impl, key)
			ref, _ := stdaes.NewCipher(key)
			n := 16 * (1 + r.IntN(300))
			if i < 40 {
				n = 16 * i
			}
			pt := randBytes(r, n)
			iv0 := [16]byte(randBytes(r, 16))
			want := make([]byte, n)
			cipher.NewCBCEncrypter(ref, iv0[:]).CryptBlocks(want, pt)
			wantIV := iv0
			if n > 0 {
				wantIV = [16]byte(want[n-16:])
			}
			inPlace := i%2 == 1
			dst, src := buffers(r, pt, inPlace)
			iv := iv0
			b.EncryptCBC(dst, src, &iv)
			if !bytes.Equal(dst, want) || iv != wantIV {
				t.Fatalf("EncryptCBC key %d bytes, %d blocks, in place %v: mismatch", len(key), n/16, inPlace)
			}
			dst2, src2 := buffers(r, want, inPlace)
			iv = iv0
			b.DecryptCBC(dst2, src2, &iv)
			if !bytes.Equal(dst2, pt) || iv != wantIV {
				t.Fatalf("DecryptCBC key %d bytes, %d blocks, in place %v: mismatch", len(key), n/16, inPlace)
			}
			// ESSIV: ivKey is an unrelated key here.
			ivKeyBytes := randBytes(r, keySizes[(i/3)%3])
			ivKey := mustNew(t, impl, ivKeyBytes)
			refIV, _ := stdaes.NewCipher(ivKeyBytes)
			var civ [16]byte
			refIV.Encrypt(civ[:], iv0[:])
			cipher.NewCBCEncrypter(ref, civ[:]).CryptBlocks(want, pt)
			dst, src = buffers(r, pt, inPlace)
			iv = iv0
			b.EncryptESSIVCBC(ivKey, dst, src, &iv)
			if !bytes.Equal(dst, want) || iv != iv0 {
				t.Fatalf("EncryptESSIVCBC key %d bytes, %d blocks, in place %v: mismatch", len(key), n/16, inPlace)
			}
			dst2, src2 = buffers(r, want, inPlace)
			b.DecryptESSIVCBC(ivKey, dst2, src2, &iv)
			if !bytes.Equal(dst2, pt) || iv != iv0 {
				t.Fatalf("DecryptESSIVCBC key %d bytes, %d blocks, in place %v: mismatch", len(key), n/16, inPlace)
			}
		}
	})
}

func TestCBCSectors(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(7, 8))
		for i := 0; i < 120; i++ {
			key := randBytes(r, keySizes[i%3])
			b := mustNew(t, impl, key)
			ref, _ := stdaes.NewCipher(key)
			ss := 16 * (1 + r.IntN(40))
			if i%4 == 0 {
				ss = 512
			}
			nsec := i % 40
			pt := randBytes(r, ss*nsec)
			ivs := randBytes(r, 16*nsec)
			ivsCopy := slices.Clone(ivs)
			want := make([]byte, len(pt))
			for s := 0; s < nsec; s++ {
				cipher.NewCBCEncrypter(ref, ivs[16*s:16*s+16]).CryptBlocks(want[s*ss:(s+1)*ss], pt[s*ss:(s+1)*ss])
			}
			inPlace := i%2 == 0
			dst, src := buffers(r, pt, inPlace)
			b.EncryptCBCSectors(dst, src, ss, ivs)
			if !bytes.Equal(dst, want) {
				t.Fatalf("EncryptCBCSectors key %d bytes, %d sectors of %d, in place %v: mismatch", len(key), nsec, ss, inPlace)
			}
			dst2, src2 := buffers(r, want, inPlace)
			b.DecryptCBCSectors(dst2, src2, ss, ivs)
			if !bytes.Equal(dst2, pt) {
				t.Fatalf("DecryptCBCSectors key %d bytes, %d sectors of %d, in place %v: mismatch", len(key), nsec, ss, inPlace)
			}
			if !bytes.Equal(ivs, ivsCopy) {
				t.Fatal("ivs modified")
			}
		}
	})
}

// TestCBCSectorShapes covers the multi-buffer lane groupings (32, 16, 8, 4, 2, 1)
// and the staged kernel used for sector sizes that are multiples of 2 KiB.
func TestCBCSectorShapes(t *testing.T) {
	forEachImpl(t, checkCBCSectorShapes)
}

func checkCBCSectorShapes(t *testing.T, impl string) {
	r := rand.New(rand.NewPCG(17, 18))
	for _, ss := range []int{16, 64, 512, 2048, 4096, 6144} {
		for _, nsec := range []int{1, 7, 15, 16, 17, 31, 32, 40, 48, 64} {
			key := randBytes(r, keySizes[nsec%3])
			b := mustNew(t, impl, key)
			ref, _ := stdaes.NewCipher(key)
			pt := randBytes(r, ss*nsec)
			ivs := randBytes(r, 16*nsec)
			want := make([]byte, len(pt))
			for s := 0; s < nsec; s++ {
				cipher.NewCBCEncrypter(ref, ivs[16*s:16*s+16]).CryptBlocks(want[s*ss:(s+1)*ss], pt[s*ss:(s+1)*ss])
			}
			for _, inPlace := range []bool{false, true} {
				dst, src := buffers(r, pt, inPlace)
				b.EncryptCBCSectors(dst, src, ss, ivs)
				if !bytes.Equal(dst, want) {
					t.Fatalf("EncryptCBCSectors %d sectors of %d, in place %v: mismatch", nsec, ss, inPlace)
				}
				b.DecryptCBCSectors(dst, dst, ss, ivs)
				if !bytes.Equal(dst, pt) {
					t.Fatalf("DecryptCBCSectors %d sectors of %d: mismatch", nsec, ss)
				}
			}
		}
	}
}

func xtsPair(t testing.TB, impl string, key []byte) *XTS {
	t.Helper()
	h := len(key) / 2
	x, err := NewXTS(mustNew(t, impl, key[:h]), mustNew(t, impl, key[h:]))
	if err != nil {
		t.Fatal(err)
	}
	return x
}

func TestXTS(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(9, 10))
		for i := 0; i < 300; i++ {
			key := randBytes(r, 2*keySizes[i%3])
			x := xtsPair(t, impl, key)
			gx := xtsPair(t, "generic", key)
			ref, err := xts.NewCipher(stdaes.NewCipher, key)
			if err != nil {
				t.Fatal(err)
			}
			n := 16 * (1 + r.IntN(300))
			if i < 40 {
				n = 16 * (i + 1)
			}
			if i%3 == 2 {
				n += 1 + r.IntN(15) // ciphertext stealing; reference is generic
			}
			pt := randBytes(r, n)
			sector := r.Uint64()
			var iv [16]byte
			binary.LittleEndian.PutUint64(iv[:], sector)
			want := make([]byte, n)
			if n%16 == 0 {
				ref.Encrypt(want, pt, sector)
			} else {
				gx.Encrypt(want, pt, &iv)
			}
			inPlace := i%2 == 0
			dst, src := buffers(r, pt, inPlace)
			ivc := iv
			x.Encrypt(dst, src, &ivc)
			if !bytes.Equal(dst, want) || ivc != iv {
				t.Fatalf("XTS.Encrypt key %d bytes, len %d, in place %v: mismatch", len(key), n, inPlace)
			}
			dst2, src2 := buffers(r, want, inPlace)
			x.Decrypt(dst2, src2, &ivc)
			if !bytes.Equal(dst2, pt) {
				t.Fatalf("XTS.Decrypt key %d bytes, len %d, in place %v: mismatch", len(key), n, inPlace)
			}
		}
	})
}

func TestXTSSectors(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(11, 12))
		for i := 0; i < 100; i++ {
			key := randBytes(r, 2*keySizes[i%3])
			x := xtsPair(t, impl, key)
			ref, _ := xts.NewCipher(stdaes.NewCipher, key)
			ss := 16 * (1 + r.IntN(64))
			if i%3 == 0 {
				ss = 512
			}
			nsec := r.IntN(80)
			if i%10 == 0 {
				nsec = 130 // more than one tweak chunk
			}
			pt := randBytes(r, ss*nsec)
			base := r.Uint64() >> 1
			ivs := make([]byte, 16*nsec)
			want := make([]byte, len(pt))
			for s := 0; s < nsec; s++ {
				binary.LittleEndian.PutUint64(ivs[16*s:], base+uint64(s))
				ref.Encrypt(want[s*ss:(s+1)*ss], pt[s*ss:(s+1)*ss], base+uint64(s))
			}
			inPlace := i%2 == 1
			dst, src := buffers(r, pt, inPlace)
			x.EncryptSectors(dst, src, ss, ivs)
			if !bytes.Equal(dst, want) {
				t.Fatalf("XTS.EncryptSectors key %d bytes, %d sectors of %d, in place %v: mismatch", len(key), nsec, ss, inPlace)
			}
			dst2, src2 := buffers(r, want, inPlace)
			x.DecryptSectors(dst2, src2, ss, ivs)
			if !bytes.Equal(dst2, pt) {
				t.Fatalf("XTS.DecryptSectors key %d bytes, %d sectors of %d, in place %v: mismatch", len(key), nsec, ss, inPlace)
			}
		}
	})
}

// TestXTSSectorShapes covers the multi-sector kernels' boundaries: sector
// sizes that are and are not multiples of 512 and batches around the tweak
// chunk size.
func TestXTSSectorShapes(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(15, 16))
		for _, ss := range []int{256, 512, 1024, 1536, 2048, 4096} {
			for _, nsec := range []int{1, 2, 3, 63, 64, 65, 130} {
				if ss*nsec > 1<<19 {
					continue
				}
				key := randBytes(r, 64)
				x := xtsPair(t, impl, key)
				ref, _ := xts.NewCipher(stdaes.NewCipher, key)
				pt := randBytes(r, ss*nsec)
				ivs := make([]byte, 16*nsec)
				want := make([]byte, len(pt))
				base := r.Uint64() >> 1
				for s := 0; s < nsec; s++ {
					binary.LittleEndian.PutUint64(ivs[16*s:], base+uint64(s))
					ref.Encrypt(want[s*ss:(s+1)*ss], pt[s*ss:(s+1)*ss], base+uint64(s))
				}
				got := make([]byte, len(pt))
				x.EncryptSectors(got, pt, ss, ivs)
				if !bytes.Equal(got, want) {
					t.Fatalf("EncryptSectors %d sectors of %d: mismatch", nsec, ss)
				}
				x.DecryptSectors(got, got, ss, ivs)
				if !bytes.Equal(got, pt) {
					t.Fatalf("DecryptSectors %d sectors of %d: mismatch", nsec, ss)
				}
			}
		}
	})
}

// TestVsGeneric cross-checks every implementation with generic on random
// non-multiple XTS lengths and odd batch shapes.
func TestXTSStealingVsGeneric(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		r := rand.New(rand.NewPCG(13, 14))
		for n := 16; n < 16*40; n++ {
			key := randBytes(r, 2*keySizes[n%3])
			x := xtsPair(t, impl, key)
			gx := xtsPair(t, "generic", key)
			pt := randBytes(r, n)
			iv := [16]byte(randBytes(r, 16))
			want := make([]byte, n)
			gx.Encrypt(want, pt, &iv)
			got := make([]byte, n)
			x.Encrypt(got, pt, &iv)
			if !bytes.Equal(got, want) {
				t.Fatalf("len %d: encrypt mismatch", n)
			}
			x.Decrypt(got, got, &iv)
			if !bytes.Equal(got, pt) {
				t.Fatalf("len %d: decrypt mismatch", n)
			}
		}
	})
}

func TestPanics(t *testing.T) {
	b := mustNew(t, "generic", make([]byte, 16))
	x := xtsPair(t, "generic", make([]byte, 32))
	buf := make([]byte, 64)
	var iv [16]byte
	cases := map[string]func(){
		"Encrypt short":      func() { b.Encrypt(buf[:16], buf[:15]) },
		"ECB not multiple":   func() { b.EncryptECB(buf, buf[:17]) },
		"ECB short dst":      func() { b.EncryptECB(buf[:16], buf[:32]) },
		"CBC overlap":        func() { b.EncryptCBC(buf[1:33], buf[:32], &iv) },
		"XTS short":          func() { x.Encrypt(buf, buf[:15], &iv) },
		"sectors bad size":   func() { b.EncryptCBCSectors(buf, buf, 24, buf) },
		"sectors short ivs":  func() { x.EncryptSectors(buf, buf, 16, buf[:48]) },
		"sectors not whole":  func() { b.DecryptCBCSectors(buf, buf[:48], 32, buf) },
		"XTS sectors zero":   func() { x.DecryptSectors(buf, buf, 0, buf) },
		"ESSIV not multiple": func() { b.EncryptESSIVCBC(b, buf, buf[:20], &iv) },
	}
	for name, f := range cases {
		t.Run(name, func(t *testing.T) {
			defer func() {
				if recover() == nil {
					t.Error("no panic")
				}
			}()
			f()
		})
	}
	if _, err := NewXTS(b, nil); err == nil {
		t.Error("NewXTS accepted nil")
	}
}

func TestMixedImplXTS(t *testing.T) {
	impls := Impls()
	if len(impls) < 2 {
		// Legitimate: the CPU or the purego build has only the generic code.
		t.Skip("only one implementation")
	}
	a := mustNew(t, impls[0], make([]byte, 16))
	g := mustNew(t, "generic", make([]byte, 16))
	if _, err := NewXTS(a, g); err == nil {
		t.Error("NewXTS accepted mixed implementations")
	}
}

func TestWipe(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		b := mustNew(t, impl, bytes.Repeat([]byte{0xa5}, 32))
		b.Wipe()
		if b.xk != [len(b.xk)]byte{} || b.yk != [len(b.yk)]byte{} || b.enc != [len(b.enc)]uint32{} || b.dec != [len(b.dec)]uint32{} {
			t.Error("round keys not zeroed")
		}
	})
}

func TestAllocs(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		b := mustNew(t, impl, make([]byte, 32))
		ivk := mustNew(t, impl, make([]byte, 32))
		x := xtsPair(t, impl, make([]byte, 64))
		const ss = 512
		buf := make([]byte, 24*ss)
		ivs := make([]byte, 16*24)
		odd := make([]byte, 1000)
		var iv [16]byte
		ops := map[string]func(){
			"Encrypt":                func() { b.Encrypt(buf, buf) },
			"Decrypt":                func() { b.Decrypt(buf, buf) },
			"EncryptECB":             func() { b.EncryptECB(buf, buf) },
			"DecryptECB":             func() { b.DecryptECB(buf, buf) },
			"EncryptCBC":             func() { b.EncryptCBC(buf, buf, &iv) },
			"DecryptCBC":             func() { b.DecryptCBC(buf, buf, &iv) },
			"EncryptESSIVCBC":        func() { b.EncryptESSIVCBC(ivk, buf, buf, &iv) },
			"DecryptESSIVCBC":        func() { b.DecryptESSIVCBC(ivk, buf, buf, &iv) },
			"EncryptCBCSectors":      func() { b.EncryptCBCSectors(buf, buf, ss, ivs) },
			"DecryptCBCSectors":      func() { b.DecryptCBCSectors(buf, buf, ss, ivs) },
			"EncryptESSIVCBCSectors": func() { b.EncryptESSIVCBCSectors(ivk, buf, buf, ss, ivs) },
			"XTS.Encrypt":            func() { x.Encrypt(odd, odd, &iv) },
			"XTS.Decrypt":            func() { x.Decrypt(odd, odd, &iv) },
			"XTS.EncryptSect":        func() { x.EncryptSectors(buf, buf, ss, ivs) },
			"XTS.DecryptSect":        func() { x.DecryptSectors(buf, buf, ss, ivs) },
		}
		for name, f := range ops {
			if a := testing.AllocsPerRun(20, f); a != 0 {
				t.Errorf("%s: %v allocations per call", name, a)
			}
		}
	})
}

func ExampleXTS_EncryptSectors() {
	data, _ := New(bytes.Repeat([]byte{1}, 32))
	tweak, _ := New(bytes.Repeat([]byte{2}, 32))
	x, _ := NewXTS(data, tweak)
	buf := make([]byte, 2*512)
	ivs := make([]byte, 2*16)
	ivs[16] = 1 // plain64 IV of sector 1
	x.EncryptSectors(buf, buf, 512, ivs)
	x.DecryptSectors(buf, buf, 512, ivs)
	fmt.Println(bytes.Equal(buf, make([]byte, 1024)))
	// Output: true
}

// TestStackGrowth calls the kernels at many stack depths in fresh
// goroutines so that some calls hit a stack-growth check (the kernels with
// large frames are not NOSPLIT and may move the stack on entry).
func TestStackGrowth(t *testing.T) {
	forEachImpl(t, func(t *testing.T, impl string) {
		key := bytes.Repeat([]byte{7}, 64)
		x := xtsPair(t, impl, key)
		k := mustNew(t, impl, key[:32])
		pt := bytes.Repeat([]byte{1, 2, 3}, 2048*16)[:2048*16]
		ivs := make([]byte, 16*16)
		want := make([]byte, len(pt))
		x.EncryptSectors(want, pt, 2048, ivs)
		wantCBC := make([]byte, len(pt))
		k.EncryptCBCSectors(wantCBC, pt, 2048, ivs)
		var recurse func(d int, f func())
		recurse = func(d int, f func()) {
			var pad [64]byte
			if d > 0 {
				recurse(d-1, f)
			} else {
				f()
			}
			_ = pad
		}
		for d := 0; d < 200; d += 3 {
			done := make(chan bool)
			go func() {
				recurse(d, func() {
					var tw [16]byte
					got := make([]byte, len(pt))
					x.EncryptSectors(got, pt, 2048, ivs)
					x.Encrypt(got[:2048], pt[:2048], &tw)
					ok := bytes.Equal(got, want)
					k.EncryptCBCSectors(got, pt, 2048, ivs)
					done <- ok && bytes.Equal(got, wantCBC)
				})
			}()
			if !<-done {
				t.Fatalf("depth %d: mismatch", d)
			}
		}
	})
}
