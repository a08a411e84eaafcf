package adiantum

import (
	"bytes"
	"math/rand/v2"
	"testing"
)

// TestKernelsAgree compares each implementation's kernels with the generic
// ones on the inputs where carries and wrap-arounds happen: all-ones keys
// and messages (NH's 32-bit sums wrap, Poly1305's limbs carry), and a
// ChaCha block counter about to wrap.
func TestKernelsAgree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	ones := bytes.Repeat([]byte{0xff}, 8192)
	random := make([]byte, 8192)
	for i := range random {
		random[i] = byte(rng.Uint32())
	}
	for _, name := range Impls()[:len(Impls())-1] {
		c := mustNew(t, name, 12, random[:KeySize])
		ref := *c
		ref.im = implGeneric
		for _, msg := range [][]byte{ones, random} {
			// Poly1305 under the largest clamped r and a random one.
			for _, r := range []polyKey{newPolyKey(ones), newPolyKey(random[100:])} {
				for n := 16; n <= 1024; n += 16 {
					var h, want polyState
					polyBlocks(c.im, &h, &r, msg[:n])
					polyBlocksGeneric(&want, &r, msg[:n])
					if h != want {
						t.Fatalf("%s: poly1305 of %d bytes: state %x, want %x", name, n, h, want)
					}
					polyBlocks(c.im, &h, &r, msg[n:2*n])
					polyBlocksGeneric(&want, &r, msg[n:2*n])
					if h != want {
						t.Fatalf("%s: poly1305 continued over %d bytes: state %x, want %x", name, n, h, want)
					}
				}
			}
			// NH under an all-ones key and the derived one.
			for _, keyOnes := range []bool{true, false} {
				k, kr := *c, ref
				if keyOnes {
					for i := range k.nhKey {
						k.nhKey[i] = ^uint32(0)
					}
					k.nhKeyX.expand(&k.nhKey)
					kr.nhKey = k.nhKey
				}
				for n := 16; n <= 4096+48; n += 16 {
					got := make([]byte, 4*nhHashSize+nhHashSize)
					want := make([]byte, len(got))
					nhChunks(&k, msg[:n], got)
					nhChunks(&kr, msg[:n], want)
					if !bytes.Equal(got, want) {
						t.Fatalf("%s: nh of %d bytes (all-ones key %v) differs", name, n, keyOnes)
					}
				}
			}
		}
		// ChaCha across the 32-bit counter wrap, at every tail length.
		for _, rounds := range []int{12, 20} {
			for n := 1; n <= 2100; n += 1 + n/64 {
				var nonce [24]byte
				copy(nonce[:], random[200:])
				s := xchachaState(&c.streamKey, &nonce, rounds)
				s[12] = 0xffffffff - 7
				sr := s
				got, want := make([]byte, n), make([]byte, n)
				xorStream(c.im, &s, got, random[:n], rounds)
				xorKeyStreamGeneric(&sr, want, random[:n], rounds)
				if !bytes.Equal(got, want) || s != sr {
					t.Fatalf("%s: xchacha%d over %d bytes at the counter wrap differs", name, rounds, n)
				}
			}
		}
	}
}

func BenchmarkHChaCha12(b *testing.B) {
	var key [8]uint32
	nonce := make([]byte, 16)
	for b.Loop() {
		sub := hchacha(&key, nonce, 12)
		nonce[0] = byte(sub[0])
	}
}
