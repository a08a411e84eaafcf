package aes

import "testing"

// AES-128-XTS (a 256-bit XTS key) per data unit, next to BenchmarkXTS's
// AES-256: issue 14 compares both key sizes with the kernel.
func BenchmarkXTS128(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		benchXTSUnit(b, xtsPair(b, impl, benchKey(32)), size, true)
	})
}

func BenchmarkXTS128Decrypt(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		benchXTSUnit(b, xtsPair(b, impl, benchKey(32)), size, false)
	})
}

func benchXTSUnit(b *testing.B, x *XTS, size int, enc bool) {
	buf := make([]byte, size)
	var iv [16]byte
	b.SetBytes(int64(size))
	for b.Loop() {
		if enc {
			x.Encrypt(buf, buf, &iv)
		} else {
			x.Decrypt(buf, buf, &iv)
		}
		iv[0]++
	}
}

// BenchmarkXTSBatch256x512 is one EncryptSectors/DecryptSectors call over
// 256 sectors of 512 bytes, AES-256-XTS, tweak encryption included.
func BenchmarkXTSBatch256x512(b *testing.B) {
	for _, dir := range []string{"enc", "dec"} {
		b.Run(dir, func(b *testing.B) { benchXTSBatch(b, dir) })
	}
}

func benchXTSBatch(b *testing.B, dir string) {
	{
		benchImpls(b, []int{512}, func(b *testing.B, impl string, size int) {
			x := xtsPair(b, impl, benchKey(64))
			buf := make([]byte, 256*size)
			ivs := make([]byte, 16*256)
			for i := 0; i < len(ivs); i += 16 {
				ivs[i], ivs[i+1] = byte(i/16), byte(i/4096)
			}
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if dir == "enc" {
					x.EncryptSectors(buf, buf, size, ivs)
				} else {
					x.DecryptSectors(buf, buf, size, ivs)
				}
			}
		})
	}
}

// BenchmarkXTSPlain64 is the sector layer's single-sector path: the IV is
// the sector number, passed by value (AES-256-XTS).
func BenchmarkXTSPlain64(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		x := xtsPair(b, impl, benchKey(64))
		buf := make([]byte, size)
		b.SetBytes(int64(size))
		for i := uint64(0); b.Loop(); i++ {
			x.EncryptPlain64(buf, buf, i)
		}
	})
}
