package aes

import (
	"strconv"
	"testing"
)

// Benchmarks use AES-256 (XTS: two AES-256 keys, as aes-xts-plain64 with a
// 512-bit key). Run with -bench . -benchmem.

const batchBytes = 64 << 10

func benchImpls(b *testing.B, sizes []int, f func(b *testing.B, impl string, size int)) {
	for _, impl := range Impls() {
		for _, size := range sizes {
			b.Run(impl+"/"+strconv.Itoa(size), func(b *testing.B) {
				b.ReportAllocs()
				f(b, impl, size)
			})
		}
	}
}

// heapBuf returns a zeroed buffer on the heap, where real I/O buffers are:
// a constant-size make that does not escape lands on the goroutine stack,
// next to the kernels' stack buffers, and 4 KiB aliasing between the two
// then makes the YMM staged CBC kernel run a third slower than on real data.
//
//go:noinline
func heapBuf(n int) []byte { return make([]byte, n) }

func benchKey(n int) []byte {
	k := make([]byte, n)
	for i := range k {
		k[i] = byte(i*7 + 1)
	}
	return k
}

func BenchmarkXTS(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		x := xtsPair(b, impl, benchKey(64))
		buf := make([]byte, size)
		var iv [16]byte
		b.SetBytes(int64(size))
		for b.Loop() {
			x.Encrypt(buf, buf, &iv)
			iv[0]++
		}
	})
}

func BenchmarkXTSDecrypt(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		x := xtsPair(b, impl, benchKey(64))
		buf := make([]byte, size)
		var iv [16]byte
		b.SetBytes(int64(size))
		for b.Loop() {
			x.Decrypt(buf, buf, &iv)
			iv[0]++
		}
	})
}

func BenchmarkXTSSectors(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		x := xtsPair(b, impl, benchKey(64))
		buf := make([]byte, batchBytes)
		ivs := make([]byte, 16*(batchBytes/size))
		for i := 0; i < len(ivs); i += 16 {
			ivs[i] = byte(i / 16)
		}
		b.SetBytes(batchBytes)
		for b.Loop() {
			x.EncryptSectors(buf, buf, size, ivs)
		}
	})
}

func BenchmarkCBCEncryptSectors(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		k := mustNew(b, impl, benchKey(32))
		buf := heapBuf(batchBytes)
		ivs := make([]byte, 16*(batchBytes/size))
		b.SetBytes(batchBytes)
		for b.Loop() {
			k.EncryptCBCSectors(buf, buf, size, ivs)
		}
	})
}

// BenchmarkCBCESSIVEncryptSectors is the whole dm-crypt aes-cbc-essiv:sha256
// write path for a 64 KiB batch (EncryptESSIVCBCSectors: the IV encryption
// inside the multi-buffer kernel where it has one, else one ECB pass first).
func BenchmarkCBCESSIVEncryptSectors(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		k := mustNew(b, impl, benchKey(32))
		ivk := mustNew(b, impl, benchKey(32)[:32])
		buf := heapBuf(batchBytes)
		n := batchBytes / size
		ivs := make([]byte, 16*n)
		for i := 0; i < n; i++ {
			ivs[16*i] = byte(i)
		}
		b.SetBytes(batchBytes)
		for b.Loop() {
			k.EncryptESSIVCBCSectors(ivk, buf, buf, size, ivs)
		}
	})
}

// BenchmarkCBCESSIVBatch256x512 is the batch of issue 14's target: 256
// sectors of 512 bytes (128 KiB) in one call, as the sector layer hands a
// 128 KiB bio to the fused driver. Compare with BenchmarkXTSBatch256x512/enc.
func BenchmarkCBCESSIVBatch256x512(b *testing.B) {
	benchImpls(b, []int{512}, func(b *testing.B, impl string, size int) {
		k := mustNew(b, impl, benchKey(32))
		ivk := mustNew(b, impl, benchKey(32))
		buf := heapBuf(256 * size)
		ivs := make([]byte, 16*256)
		for i := 0; i < 256; i++ {
			ivs[16*i] = byte(i)
		}
		b.SetBytes(int64(len(buf)))
		for b.Loop() {
			k.EncryptESSIVCBCSectors(ivk, buf, buf, size, ivs)
		}
	})
}

func BenchmarkCBCDecryptSectors(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		k := mustNew(b, impl, benchKey(32))
		buf := heapBuf(batchBytes)
		ivs := make([]byte, 16*(batchBytes/size))
		b.SetBytes(batchBytes)
		for b.Loop() {
			k.DecryptCBCSectors(buf, buf, size, ivs)
		}
	})
}

func BenchmarkCBCDecrypt(b *testing.B) {
	benchImpls(b, []int{512, 4096, batchBytes}, func(b *testing.B, impl string, size int) {
		k := mustNew(b, impl, benchKey(32))
		buf := heapBuf(size)
		var iv [16]byte
		b.SetBytes(int64(size))
		for b.Loop() {
			k.DecryptCBC(buf, buf, &iv)
		}
	})
}

func BenchmarkCBCEncrypt(b *testing.B) {
	benchImpls(b, []int{512, 4096}, func(b *testing.B, impl string, size int) {
		k := mustNew(b, impl, benchKey(32))
		buf := heapBuf(size)
		var iv [16]byte
		b.SetBytes(int64(size))
		for b.Loop() {
			k.EncryptCBC(buf, buf, &iv)
		}
	})
}

func BenchmarkECB(b *testing.B) {
	benchImpls(b, []int{4096}, func(b *testing.B, impl string, size int) {
		k := mustNew(b, impl, benchKey(32))
		buf := make([]byte, size)
		b.SetBytes(int64(size))
		for b.Loop() {
			k.EncryptECB(buf, buf)
		}
	})
}

// BenchmarkESSIVCBC16 compares the fused ESSIV+CBC call with computing the
// IV by a separate Encrypt and then calling EncryptCBC, for a 16-byte
// request.
func BenchmarkESSIVCBC16(b *testing.B) {
	for _, impl := range Impls() {
		k := mustNew(b, impl, benchKey(32))
		ivk := mustNew(b, impl, benchKey(32))
		buf := heapBuf(16)
		var iv [16]byte
		b.Run(impl+"/fused", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(16)
			for b.Loop() {
				k.EncryptESSIVCBC(ivk, buf, buf, &iv)
			}
		})
		b.Run(impl+"/separate", func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(16)
			for b.Loop() {
				var civ [16]byte
				ivk.Encrypt(civ[:], iv[:])
				k.EncryptCBC(buf, buf, &civ)
			}
		})
	}
}
