package sector

import "testing"

// BenchmarkBatch256x512 is issue 14's batch figure: 256 sectors of 512
// bytes (128 KiB) in one EncryptSectors/DecryptSectors call of
// aes-xts-plain64 with a 512-bit key, on one core (an engine of one
// worker), to set against the kernel's single-call 512-byte figure.
func BenchmarkBatch256x512(b *testing.B) { benchBatch256x512(b, "aes-xts-plain64", 64) }

// BenchmarkBatchESSIV256x512 is issue 14's CBC-ESSIV batch figure: the
// same batch of aes-cbc-essiv:sha256 (256-bit key), to set against
// BenchmarkBatch256x512.
func BenchmarkBatchESSIV256x512(b *testing.B) { benchBatch256x512(b, "aes-cbc-essiv:sha256", 32) }

func benchBatch256x512(b *testing.B, spec string, keyLen int) {
	c, err := New(spec, make([]byte, keyLen), Options{SectorSize: 512, Engine: NewEngine(1)})
	if err != nil {
		b.Fatal(err)
	}
	buf := make([]byte, 256*512)
	for _, dir := range []string{"enc", "dec"} {
		b.Run(dir, func(b *testing.B) {
			b.SetBytes(int64(len(buf)))
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				if dir == "enc" {
					c.EncryptSectors(buf, buf, uint64(i))
				} else {
					c.DecryptSectors(buf, buf, uint64(i))
				}
			}
		})
	}
}
