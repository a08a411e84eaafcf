package gcm

import (
	"bytes"
	"math/rand/v2"
	"syscall"
	"testing"
)

// guardedTail returns n bytes ending exactly at an inaccessible page, so
// that any read or write past the slice faults.
func guardedTail(t *testing.T, n int) []byte {
	page := syscall.Getpagesize()
	mem, err := syscall.Mmap(-1, 0, 2*page, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		t.Skipf("mmap: %v", err)
	}
	t.Cleanup(func() { syscall.Munmap(mem) })
	if err := syscall.Mprotect(mem[page:], syscall.PROT_NONE); err != nil {
		t.Skipf("mprotect: %v", err)
	}
	return mem[page-n : page : page]
}

// TestGuardPage: the assembly reads and writes partial blocks (of the
// text and of the associated data) with byte masks; with every buffer
// ending at an unmapped page, a load or store past the end would crash.
func TestGuardPage(t *testing.T) {
	forEachImpl(t, func(t *testing.T, im impl) {
		r := rand.New(rand.NewPCG(5, 6))
		key := randBytes(r, 32)
		g, err := im.new(key)
		if err != nil {
			t.Fatal(err)
		}
		std := stdGCM(t, key)
		for _, n := range []int{1, 15, 17, 63, 65, 255, 257, 300, 4095} {
			nonce := randBytes(r, NonceSize)
			pt := randBytes(r, n)
			ad := guardedTail(t, n%70+1)
			copy(ad, randBytes(r, len(ad)))
			want := std.Seal(nil, nonce, pt, ad)

			src := guardedTail(t, n)
			copy(src, pt)
			dst := guardedTail(t, n)
			tag := make([]byte, TagSize)
			g.SealDetached(dst, tag, nonce, src, ad)
			if !bytes.Equal(append(bytes.Clone(dst), tag...), want) {
				t.Fatalf("len %d: SealDetached at a guard page differs from crypto/cipher", n)
			}
			if err := g.OpenDetached(src, nonce, dst, tag, ad); err != nil || !bytes.Equal(src, pt) {
				t.Fatalf("len %d: OpenDetached at a guard page: %v", n, err)
			}
		}
	})
}
