package aead

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"unsafe"
)

// testPlans are the kernel sets the conformance suite runs, each against
// the specification's answers and against the Go code: every kernel this
// machine has alone (the wide ones with the Go code taking the messages
// left over), and the plan Seal and SealSectors use here.
func testPlans(t testing.TB) map[string][]kernel {
	plans := map[string][]kernel{"generic": {kernelGeneric}, "default": defaultPlan}
	if useAESNI {
		plans["aesni"] = []kernel{kernelAESNI}
	}
	if useVAES {
		plans["vaes4"] = []kernel{kernelVAES4, kernelGeneric}
		plans["vaes8"] = []kernel{kernelVAES8, kernelGeneric}
	}
	t.Logf("kernels under test: AES-NI %v, VAES %v; default plan %v", useAESNI, useVAES, defaultPlan)
	return plans
}

func TestJobLayout(t *testing.T) {
	// The offsets aegis_amd64.s reads the job at.
	var j job
	for _, f := range []struct {
		name     string
		got, asm uintptr
	}{
		{"src", unsafe.Offsetof(j.src), 0},
		{"dst", unsafe.Offsetof(j.dst), 24},
		{"nonces", unsafe.Offsetof(j.nonces), 48},
		{"ad", unsafe.Offsetof(j.ad), 72},
		{"tail", unsafe.Offsetof(j.tail), 96},
		{"tags", unsafe.Offsetof(j.tags), 120},
		{"stride", unsafe.Offsetof(j.stride), 144},
		{"blocks", unsafe.Offsetof(j.blocks), 152},
		{"adBlocks", unsafe.Offsetof(j.adBlocks), 160},
		{"key", unsafe.Offsetof(j.key), 168},
		{"lenBlock", unsafe.Offsetof(j.lenBlock), 184},
		{"tailMask", unsafe.Offsetof(j.tailMask), 200},
	} {
		if unsafe.Sizeof(uintptr(0)) == 8 && f.got != f.asm {
			t.Errorf("job.%s at %d, the assembly reads %d", f.name, f.got, f.asm)
		}
	}
}

// TestKernelsKAT runs each known answer through every plan as n
// identical messages, so that each lane of the wide kernels (and the
// leftover path) must produce it.
func TestKernelsKAT(t *testing.T) {
	for name, plan := range testPlans(t) {
		for i, v := range aegisKAT {
			a := &aegis128{key: load(unhex(t, v.key)), tagSize: 16, plan: plan}
			iv, ad, msg := unhex(t, v.iv), unhex(t, v.ad), unhex(t, v.msg)
			ct, tag := unhex(t, v.ct), unhex(t, v.tag)
			if got := a.Seal(nil, iv, msg, ad); !bytes.Equal(got, append(bytes.Clone(ct), tag...)) {
				t.Errorf("%s vector %d: Seal = %x", name, i, got)
			}
			for _, n := range []int{1, 3, 4, 7, 8, 13} {
				src := bytes.Repeat(msg, n)
				dst, tags := make([]byte, len(src)), make([]byte, 16*n)
				if err := a.SealSectors(dst, tags, src, bytes.Repeat(iv, n), bytes.Repeat(ad, n), n); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(dst, bytes.Repeat(ct, n)) || !bytes.Equal(tags, bytes.Repeat(tag, n)) {
					t.Errorf("%s vector %d, %d messages: %x %x", name, i, n, dst, tags)
				}
				if err := a.OpenSectors(dst, dst, tags, bytes.Repeat(iv, n), bytes.Repeat(ad, n), n); err != nil || !bytes.Equal(dst, src) {
					t.Errorf("%s vector %d, %d messages: open in place: %v", name, i, n, err)
				}
			}
		}
	}
}

// checkSectors runs n random messages of msgLen bytes with adLen bytes
// of associated data and tagSize-byte tags through every plan and
// compares them with the Go code; then it flips a bit of message bad's
// ciphertext or tag and expects that message named, the messages before
// it opened and it and the ones after it zeroed.
func checkSectors(t *testing.T, plans map[string][]kernel, seed uint64, n, msgLen, adLen, tagSize int) {
	r := rand.New(rand.NewPCG(seed, uint64(n)<<32|uint64(msgLen)))
	fill := func(size int) []byte {
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		return b
	}
	key, src, nonces, ad := fill(16), fill(n*msgLen), fill(16*n), fill(n*adLen)
	ref := &aegis128{key: load(key), tagSize: tagSize, plan: []kernel{kernelGeneric}}
	wantCT, wantTags := make([]byte, len(src)), make([]byte, n*tagSize)
	if err := ref.SealSectors(wantCT, wantTags, src, nonces, ad, n); err != nil {
		t.Fatal(err)
	}
	// The Go code against the single-message AEAD as Seal runs it.
	for i := range n {
		one := ref.Seal(nil, nonces[16*i:16*i+16], src[i*msgLen:(i+1)*msgLen], ad[i*adLen:(i+1)*adLen])
		if !bytes.Equal(one, append(bytes.Clone(wantCT[i*msgLen:(i+1)*msgLen]), wantTags[i*tagSize:(i+1)*tagSize]...)) {
			t.Fatalf("message %d of %d: multi-message Go code differs from Seal", i, n)
		}
	}
	for name, plan := range plans {
		a := &aegis128{key: load(key), tagSize: tagSize, plan: plan}
		what := fmt.Sprintf("%s: %d messages of %d bytes, %d-byte ad, %d-byte tags", name, n, msgLen, adLen, tagSize)
		ct, tags := bytes.Clone(src), make([]byte, n*tagSize)
		if err := a.SealSectors(ct, tags, ct, nonces, ad, n); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !bytes.Equal(ct, wantCT) || !bytes.Equal(tags, wantTags) {
			t.Fatalf("%s: sealed differently from the Go code", what)
		}
		pt := make([]byte, len(src))
		if err := a.OpenSectors(pt, ct, tags, nonces, ad, n); err != nil || !bytes.Equal(pt, src) {
			t.Fatalf("%s: open: %v", what, err)
		}
		if n == 0 {
			continue
		}
		bad := r.IntN(n)
		// A changed ciphertext escapes a t-byte tag with probability
		// 2^-8t: only full tags make that negligible.
		if r.IntN(2) == 0 && msgLen > 0 && tagSize == 16 {
			ct[bad*msgLen+r.IntN(msgLen)] ^= 1 << r.IntN(8)
		} else {
			tags[bad*tagSize+r.IntN(tagSize)] ^= 1 << r.IntN(8)
		}
		copy(pt, fill(len(pt)))
		err := a.OpenSectors(pt, ct, tags, nonces, ad, n)
		var oe *OpenError
		if !errors.As(err, &oe) || oe.Index != bad || !errors.Is(err, ErrOpen) {
			t.Fatalf("%s: message %d altered: %v", what, bad, err)
		}
		if !bytes.Equal(pt[:bad*msgLen], src[:bad*msgLen]) {
			t.Fatalf("%s: messages before the altered %d not opened", what, bad)
		}
		if !bytes.Equal(pt[bad*msgLen:], make([]byte, len(pt)-bad*msgLen)) {
			t.Fatalf("%s: plaintext released from the altered message %d on", what, bad)
		}
	}
}

// TestSectorsKernels: lane counts that fill the wide kernels exactly,
// leave some over, or fall short of them; lengths in whole blocks and
// not; empty and partial associated data; short tags.
func TestSectorsKernels(t *testing.T) {
	plans := testPlans(t)
	for _, n := range []int{0, 1, 3, 4, 5, 7, 8, 9, 12, 16, 17} {
		for _, msgLen := range []int{0, 1, 15, 16, 17, 100, 4096, 4100} {
			for _, adLen := range []int{0, 5, 24, 48} {
				tagSize := 16
				if adLen == 5 {
					tagSize = 7
				}
				checkSectors(t, plans, 1, n, msgLen, adLen, tagSize)
			}
		}
	}
}

func FuzzSectorsKernels(f *testing.F) {
	f.Add(uint64(1), uint8(9), uint16(4096), uint8(24), uint8(16))
	f.Add(uint64(2), uint8(5), uint16(33), uint8(0), uint8(1))
	plans := testPlans(f)
	f.Fuzz(func(t *testing.T, seed uint64, n uint8, msgLen uint16, adLen, tagSize uint8) {
		checkSectors(t, plans, seed, int(n%20), int(msgLen%5000), int(adLen%70), 1+int(tagSize%16))
	})
}

func TestSectorsArgs(t *testing.T) {
	a, _ := NewAEGIS128(make([]byte, 16), 16)
	s := a.(Sectors)
	buf := make([]byte, 64)
	for _, c := range []struct {
		name                       string
		dst, tags, src, nonces, ad []byte
		n                          int
	}{
		{"negative count", nil, nil, nil, nil, nil, -1},
		{"no messages but data", buf[:16], nil, buf[:16], nil, nil, 0},
		{"uneven data", buf[:17], buf[:32], buf[:17], buf[:32], nil, 2},
		{"uneven ad", buf[:32], buf[:32], buf[:32], buf[:32], buf[:3], 2},
		{"short dst", buf[:16], buf[:32], make([]byte, 32), buf[:32], nil, 2},
		{"short nonces", make([]byte, 32), buf[:32], make([]byte, 32), buf[:16], nil, 2},
		{"short tags", make([]byte, 32), buf[:16], make([]byte, 32), buf[:32], nil, 2},
		{"overlap", buf[1:33], make([]byte, 32), buf[:32], make([]byte, 32), nil, 2},
	} {
		if err := s.SealSectors(c.dst, c.tags, c.src, c.nonces, c.ad, c.n); err == nil {
			t.Errorf("%s: SealSectors accepted it", c.name)
		}
		if err := s.OpenSectors(c.dst, c.src, c.tags, c.nonces, c.ad, c.n); err == nil || errors.Is(err, ErrOpen) {
			t.Errorf("%s: OpenSectors: %v", c.name, err)
		}
	}
}

func BenchmarkAEGIS128(b *testing.B) {
	for name, plan := range testPlans(b) {
		a := &aegis128{tagSize: 16, plan: plan}
		b.Run(name, func(b *testing.B) {
			buf := make([]byte, 4096, 4096+16)
			iv := make([]byte, 16)
			b.SetBytes(4096)
			for b.Loop() {
				a.Seal(buf[:0], iv, buf, iv)
			}
		})
	}
}

// BenchmarkSectors is dm-crypt's use: 16 sectors of 4096 bytes, each
// with its own nonce and 24 bytes of associated data.
func BenchmarkSectors(b *testing.B) {
	const n, size = 16, 4096
	for name, plan := range testPlans(b) {
		a := &aegis128{tagSize: 16, plan: plan}
		b.Run(name, func(b *testing.B) {
			buf, tags := make([]byte, n*size), make([]byte, n*16)
			nonces, ad := make([]byte, n*16), make([]byte, n*24)
			b.SetBytes(n * size)
			for b.Loop() {
				if err := a.SealSectors(buf, tags, buf, nonces, ad, n); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
