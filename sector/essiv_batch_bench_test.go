package sector

import "testing"

// BenchmarkBatchESSIV256x512 is issue 14's CBC-ESSIV batch figure: 256
// sectors of 512 bytes (128 KiB) of aes-cbc-essiv:sha256 (256-bit key) in
// one EncryptSectors/DecryptSectors call on one core, to set against the
// same batch of aes-xts-plain64 (BenchmarkBatch256x512).
func BenchmarkBatchESSIV256x512(b *testing.B) {
	c, err := New("aes-cbc-essiv:sha256", make([]byte, 32), Options{SectorSize: 512, Engine: NewEngine(1)})
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
