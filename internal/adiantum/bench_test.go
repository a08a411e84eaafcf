package adiantum

import (
	"fmt"
	"testing"
)

// BenchmarkEncrypt measures one call per sector at dm-crypt's sector sizes.
func BenchmarkEncrypt(b *testing.B) {
	for _, impl := range Impls() {
		for _, n := range []int{512, 4096} {
			b.Run(fmt.Sprintf("%s/%d", impl, n), func(b *testing.B) {
				c := mustNew(b, impl, 12, make([]byte, KeySize))
				buf := make([]byte, n)
				tweak := make([]byte, TweakSize)
				b.SetBytes(int64(n))
				for b.Loop() {
					c.Encrypt(buf, buf, tweak)
				}
			})
		}
	}
}

func BenchmarkDecrypt(b *testing.B) {
	for _, impl := range Impls() {
		b.Run(fmt.Sprintf("%s/4096", impl), func(b *testing.B) {
			c := mustNew(b, impl, 12, make([]byte, KeySize))
			buf := make([]byte, 4096)
			tweak := make([]byte, TweakSize)
			b.SetBytes(4096)
			for b.Loop() {
				c.Decrypt(buf, buf, tweak)
			}
		})
	}
}
